"""`validate --fix`: apply derivable fixes to a profile's `server:` block, keeping comments and layout.

The edits go through ruamel.yaml's round-trip mode (ddtctl.yamledit): block or flow style, every line
outside the edited keys stays byte-identical, and an edit ruamel cannot make that way is refused with the
reason. Every edit is checked before it is written: the edited text must parse, and parse to exactly the
original profile with the edits applied (`verify`).

Every fix is safe or unsafe (`edit_safety`). Plain `--fix` applies the safe ones; `--unsafe-fixes` the others
too. Safe: setting a switch or a choice flag to the value the launch needs (`attention-backend: triton`,
`disable-overlap-schedule: true`). Unsafe: removing a flag the user set, and setting a number or a free-form
string (a memory ratio, a size, a path), which ddtctl would have to guess and the user must own. A rule can
say otherwise for its hit (`Hit(..., unsafe=True/False)`); a finding with several edits is unsafe when one of
them is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddtctl.rules.engine import Finding
from ddtctl.yamledit import EditRefused, RoundTrip, add_key, delete_key, find_key, scalar, set_value


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
    `catalog` (a ddtctl.schema.catalog.Catalog) tells choice flags from free-form ones; without it a string
    value counts as a choice. `unsafe` is the rule's own verdict, when it gave one."""
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
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{source.lstrip('/')}",
        tofile=f"b/{source.lstrip('/')}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def apply_fixes(text: str, findings: list[Finding], lines_map: dict[str, int] | None = None) -> FixResult:
    """The profile text with the error findings' edits applied (text uses "\\n" line breaks). `lines_map` is
    accepted for older callers; the round-trip editor finds the keys itself."""
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
    try:
        result.text = _edited(text, edits)
    except EditRefused as refused:
        return FixResult(text=text, applied=result.applied, edits=edits, refused=refused.reason)
    result.changed = result.text != text
    return result


def _edited(text: str, edits: dict[str, Any]) -> str:
    """`text` with `edits` (dashed flag -> value, None = remove) made under `server:` by the round-trip
    editor."""
    from ruamel.yaml.comments import CommentedMap

    from ddtctl.profile import canonical_flag_key

    doc = RoundTrip(text)
    server = doc.data.get("server")
    if server is None:
        additions = {key: value for key, value in edits.items() if value is not None}
        if additions:
            doc.data["server"] = CommentedMap((key, scalar(value)) for key, value in additions.items())
        return doc.result()
    if not isinstance(server, CommentedMap):
        raise EditRefused("`server:` is not a mapping of flags")
    for key, value in edits.items():
        existing = find_key(server, canonical_flag_key(key), canonical_flag_key)
        if existing is None:
            if value is not None:
                add_key(server, key, value)
        elif value is None:
            delete_key(server, existing)
        else:
            set_value(doc, server, existing, value)
    return doc.result()


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
