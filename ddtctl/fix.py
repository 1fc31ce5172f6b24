"""`validate --fix`: apply derivable fixes to a profile's `server:` block as line edits, keeping comments."""

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


def _server_block(lines: list[str]) -> tuple[int, int, str] | None:
    """(index of `server:` line, index after the block's last key line, child indent)."""
    for i, line in enumerate(lines):
        if re.match(r"^server\s*:\s*(#.*)?$", line):
            end, indent = i + 1, "  "
            j = i + 1
            while j < len(lines):
                stripped = lines[j].strip()
                if stripped and not lines[j].startswith((" ", "\t")) and not stripped.startswith("#"):
                    break
                m = _KEY_LINE.match(lines[j])
                if m and stripped:
                    indent = m.group("indent")
                    end = j + 1
                j += 1
            return i, end, indent
    return None


def apply_fixes(text: str, findings: list[Finding], lines_map: dict[str, int]) -> FixResult:
    lines = text.splitlines(keepends=False)
    trailing_newline = text.endswith("\n")
    result = FixResult(text=text)
    edits: dict[str, Any] = {}
    for f in findings:
        if f.edits and f.severity == "error":
            for key, value in f.edits.items():
                edits.setdefault(key, value)
            result.applied.append(f.rule)
    if not edits:
        return result
    to_delete: set[int] = set()
    block = _server_block(lines)
    for key, value in edits.items():
        existing = next((k for k in lines_map if k.startswith("server.") and
                         k[len("server."):].replace("_", "-") == key), None)
        if existing is not None:
            idx = lines_map[existing] - 1
            m = _KEY_LINE.match(lines[idx])
            if not m:
                continue
            if value is None:
                to_delete.add(idx)
            else:
                _, comment = split_comment(m.group("rest"))
                comment = f"  {comment}" if comment else ""
                lines[idx] = f"{m.group('indent')}{m.group('key')}: {yaml_scalar(value)}{comment}"
        elif value is not None:
            if block is None:
                lines.append("server:")
                block = (len(lines) - 1, len(lines), "  ")
            start, end, indent = block
            lines.insert(end, f"{indent}{key}: {yaml_scalar(value)}")
            to_delete = {i + 1 if i >= end else i for i in to_delete}
            lines_map = {k: (v + 1 if v - 1 >= end else v) for k, v in lines_map.items()}
            block = (start, end + 1, indent)
    lines = [line for i, line in enumerate(lines) if i not in to_delete]
    new_text = "\n".join(lines) + ("\n" if trailing_newline else "")
    result.text = new_text
    result.changed = new_text != text
    return result
