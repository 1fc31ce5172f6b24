"""Strict unified diffs: make them with difflib, apply them exactly (no fuzz, no offset
guessing beyond the hunk's own line numbers). A payload patch must reproduce the patched file
byte for byte, so anything looser is a bug.

Stdlib only. Files are handled as text split with keepends, so CRLF and a missing final newline survive.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

NO_NEWLINE = "\\ No newline at end of file"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A patch does not apply (or is malformed); the message says where."""


@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[tuple[str, str]]  # (tag ' ', '-', '+'; text with its line ending)


def make_patch(old: str, new: str, path: str, context: int = 3) -> str:
    """A unified diff from `old` to `new`, labelled a/<path> and b/<path>. Empty string when equal."""
    if old == new:
        return ""
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    out: list[str] = []
    for line in difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}", n=context):
        if line.startswith(("---", "+++", "@@")):
            out.append(line if line.endswith("\n") else line + "\n")
            continue
        if line.endswith("\n"):
            out.append(line)
        else:  # the last line of a file without a final newline
            out.append(line + "\n" + NO_NEWLINE + "\n")
    return "".join(out)


def parse_patch(text: str) -> tuple[str | None, list[Hunk]]:
    """(target path from the +++ line without its b/ prefix, hunks)."""
    lines = text.splitlines(keepends=True)
    path = None
    hunks: list[Hunk] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("+++ "):
            name = line[4:].rstrip("\r\n").split("\t", 1)[0]
            path = name[2:] if name.startswith("b/") else name
            i += 1
            continue
        m = _HUNK.match(line)
        if not m:
            i += 1
            continue
        old_start, old_len = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        new_start, new_len = int(m.group(3)), int(m.group(4) if m.group(4) is not None else 1)
        i += 1
        body: list[tuple[str, str]] = []
        seen_old = seen_new = 0
        while i < len(lines) and (seen_old < old_len or seen_new < new_len or lines[i].startswith("\\")):
            raw = lines[i]
            if raw.startswith("\\"):
                if body:  # "\ No newline at end of file" strips the previous line's ending
                    tag, content = body[-1]
                    body[-1] = (tag, content.rstrip("\n").rstrip("\r") if content.endswith("\n") else content)
                i += 1
                continue
            tag, content = raw[:1], raw[1:]
            if tag not in (" ", "-", "+"):
                raise PatchError(f"malformed hunk line {i + 1}: {raw[:40]!r}")
            body.append((tag, content))
            if tag in (" ", "-"):
                seen_old += 1
            if tag in (" ", "+"):
                seen_new += 1
            i += 1
        if seen_old != old_len or seen_new != new_len:
            raise PatchError(f"truncated hunk @@ -{old_start},{old_len} +{new_start},{new_len} @@")
        hunks.append(Hunk(old_start, old_len, new_start, new_len, body))
    return path, hunks


def apply_patch(old: str, patch: str, *, label: str = "file") -> str:
    """Apply `patch` to `old` exactly; PatchError naming the hunk and line on any mismatch."""
    _, hunks = parse_patch(patch)
    if not hunks:
        if patch.strip():
            raise PatchError(f"{label}: the patch has no hunks")
        return old
    src = old.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # index into src
    for n, hunk in enumerate(hunks, 1):
        start = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        if start < pos:
            raise PatchError(f"{label}: hunk {n} overlaps the previous one")
        out.extend(src[pos:start])
        pos = start
        for tag, content in hunk.lines:
            if tag in (" ", "-"):
                if pos >= len(src) or src[pos] != content:
                    got = src[pos].rstrip("\r\n") if pos < len(src) else "<end of file>"
                    raise PatchError(
                        f"{label}: hunk {n} does not apply at line {pos + 1}: expected "
                        f"{content.rstrip(chr(10))!r}, found {got!r}"
                    )
                pos += 1
            if tag in (" ", "+"):
                out.append(content)
    out.extend(src[pos:])
    return "".join(out)
