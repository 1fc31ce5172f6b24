"""`validate --fix`: apply derivable fixes to a profile's `server:` block as line edits, keeping comments.

Only block-style mappings are edited (`server:` on its own line, one `key: value` per line). Anything else (a flow
`server: {...}`, a key inside a flow mapping) is refused with the reason, and every edit is checked before it is
written: the edited text must parse, and parse to exactly the original profile with the edits applied (`verify`).

Every fix is safe or unsafe (`edit_safety`). Plain `--fix` applies the safe ones; `--unsafe-fixes` the others too.
Safe: setting a switch or a choice flag to the value the launch needs (`attention-backend: triton`,
`disable-overlap-schedule: true`). Unsafe: removing a flag the user set, and setting a number or a free-form string
(a memory ratio, a size, a path), which ddtctl would have to guess and the user must own. A rule can say otherwise
for its hit (`Hit(..., unsafe=True/False)`); a finding with several edits is unsafe when one of them is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ddtctl.rules.engine import Finding
from ddtctl.yamlline import split_comment, yaml_scalar

_KEY_LINE = re.compile(r"^(?P<indent>\s+)(?P<key>[A-Za-z0-9_-]+)\s*:(?P<rest>.*)$")


@dataclass
class FixResult:
    text: str
    applied: list[str] = field(default_factory=list)  # rule ids applied
    changed: bool = False
    edits: dict[str, Any] = field(default_factory=dict)  # dashed flag -> value (None = removed)
    refused: str | None = None  # why the edit cannot be made safely (nothing changed then)


SAFE, UNSAFE = "safe", "unsafe"


def edit_safety(edits: dict[str, Any], catalog: Any = None, *, unsafe: bool | None = None) -> str | None:
    """SAFE, UNSAFE, or None (no edit): how `validate --fix` treats these edits (dashed flag -> value).
    `catalog` (a ddtctl.schema.catalog.Catalog) tells choice flags from free-form ones; without it a string value
    counts as a choice. `unsafe` is the rule's own verdict, when it gave one."""
    if not edits:
        return None
    if unsafe is not None:
        return UNSAFE if unsafe else SAFE
    for key, value in edits.items():
        if value is None or isinstance(value, (list, dict)):
            return UNSAFE  # drops a flag the user set / replaces a structure
        if isinstance(value, bool):
            continue  # a switch
        if isinstance(value, (int, float)):
            return UNSAFE  # a size, a ratio, a count: a guess the user must own
        spec = catalog.get(key) if catalog is not None else None
        if catalog is not None and (spec is None or not spec.choices or value not in spec.choices):
            return UNSAFE  # a free-form string (a path, a name)
    return SAFE


def unified_diff(source: str, before: str, after: str) -> str:
    """The edit as a unified diff with `a/PATH` `b/PATH` headers ("" when nothing changes)."""
    import difflib

    if before == after:
        return ""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{source.lstrip('/')}", tofile=f"b/{source.lstrip('/')}")
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _extent(lines: list[str], idx: int) -> int:
    """Index after the last line of the value that starts on line `idx` (a key's continuation lines: deeper
    indented ones, and a block sequence's `- ` items at the key's own indent)."""
    own = _indent(lines[idx])
    end = idx + 1
    j = idx + 1
    while j < len(lines):
        line = lines[j]
        if _content(line):
            deeper = _indent(line) > own
            same_level_item = _indent(line) == own and line.lstrip(" ").startswith("- ")
            if not (deeper or same_level_item):
                break
            end = j + 1
        j += 1
    return end


def _server_block(lines: list[str], server_line: int | None) -> tuple[int, int, str] | None | str:
    """(index of the `server:` line, index after the block's last line, child indent); None without a `server:`
    key; a string saying why the block cannot be edited line by line."""
    if server_line is None:
        return None
    i = server_line - 1
    m = re.match(r"^server\s*:(?P<rest>.*)$", lines[i]) if 0 <= i < len(lines) else None
    if m is None:
        return f"the `server:` key on line {server_line} is not a plain top-level key"
    value, _ = split_comment(m.group("rest"))
    if value.strip():
        style = "flow style ({...})" if value.strip().startswith("{") else f"on one line ({value.strip()[:30]})"
        return f"`server:` on line {server_line} is written in {style}; --fix edits block-style mappings only"
    end, indent = i + 1, "  "
    first = True
    j = i + 1
    while j < len(lines):
        line = lines[j]
        if _content(line):
            if _indent(line) == 0:
                break
            if first:
                indent = line[: _indent(line)]
                first = False
            end = j + 1
        j += 1
    return i, end, indent


def apply_fixes(text: str, findings: list[Finding], lines_map: dict[str, int]) -> FixResult:
    """The profile text with the error findings' edits applied (text uses "\\n" line breaks)."""
    lines = text.split("\n")
    trailing_newline = text.endswith("\n")
    if trailing_newline:
        lines.pop()
    result = FixResult(text=text)
    edits: dict[str, Any] = {}
    for f in findings:
        if f.edits and f.severity == "error":
            for key, value in f.edits.items():
                edits.setdefault(key, value)
            result.applied.append(f.rule)
    if not edits:
        return result
    result.edits = dict(edits)

    def refuse(why: str) -> FixResult:
        return FixResult(text=text, applied=result.applied, edits=edits, refused=why)

    block = _server_block(lines, lines_map.get("server"))
    if isinstance(block, str):
        return refuse(block)
    replace: dict[int, tuple[int, str | None]] = {}  # line index -> (end of its value, new line or None = delete)
    insert: list[str] = []
    for key, value in edits.items():
        existing = next((k for k in lines_map if k.startswith("server.") and "[" not in k and
                         k[len("server."):].replace("_", "-") == key), None)
        if existing is not None:
            idx = lines_map[existing] - 1
            m = _KEY_LINE.match(lines[idx]) if 0 <= idx < len(lines) else None
            if not m or block is None or not (block[0] < idx < block[1]):
                return refuse(f"`{key}` on line {idx + 1} is not a `key: value` line of the server: block")
            end = _extent(lines, idx)
            if value is None:
                replace[idx] = (end, None)
            else:
                _, comment = split_comment(m.group("rest"))
                comment = f"  {comment}" if comment else ""
                replace[idx] = (end, f"{m.group('indent')}{m.group('key')}: {yaml_scalar(value)}{comment}")
        elif value is not None:
            insert.append(f"{key}: {yaml_scalar(value)}")
    out: list[str] = []
    if block is None and insert:
        block_start, block_end, indent = len(lines), len(lines), "  "
    else:
        block_start, block_end, indent = block if block is not None else (len(lines), len(lines), "  ")
    i = 0
    while i <= len(lines):
        if i == block_end and insert:
            if block is None:
                out.append("server:")
            out.extend(f"{indent}{line}" for line in insert)
        if i == len(lines):
            break
        if i in replace:
            end, new = replace[i]
            if new is not None:
                out.append(new)
            i = end
            continue
        out.append(lines[i])
        i += 1
    new_text = "\n".join(out) + ("\n" if trailing_newline else "")
    result.text = new_text
    result.changed = new_text != text
    return result


def verify(original: dict[str, Any], fixed_text: str, edits: dict[str, Any], source: str) -> str | None:
    """Why the fixed text is not the original profile with exactly `edits` applied (None when it is)."""
    from ddtctl.errors import DdtctlError
    from ddtctl.profile import canonical_flag_key, parse_profile_text

    try:
        doc = parse_profile_text(fixed_text, source)
    except DdtctlError as err:
        return f"the edited profile would not parse ({err.message})"
    expected = dict(original)
    server = dict(expected.get("server") or {})
    for key, value in edits.items():
        canon = canonical_flag_key(key)
        if value is None:
            server.pop(canon, None)
        else:
            server[canon] = value
    if "server" in original or server:
        expected["server"] = server
    if doc.data != expected:
        return "the edited profile would differ from the intended edit"
    return None
