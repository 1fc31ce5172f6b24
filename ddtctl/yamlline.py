"""Line-level YAML editing shared by `validate --fix` and `migrate`: they rewrite one line at a time, so
comments, quoting and layout of everything else survive untouched."""

from __future__ import annotations

import json
import re
from typing import Any

# Plain scalars YAML 1.1 would read as something other than the string (booleans, null).
_RESERVED = {"true", "false", "yes", "no", "null", "on", "off", "y", "n", "~"}


def yaml_scalar(value: Any) -> str:
    """A value written as a YAML scalar that reads back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./@+-]+", text) and text.lower() not in _RESERVED:
        try:
            float(text)
        except ValueError:
            return text
    return json.dumps(text)


def split_comment(rest: str) -> tuple[str, str]:
    """The value part of a YAML line and its trailing `# comment` (a `#` inside quotes is not a comment)."""
    quote = None
    for i, ch in enumerate(rest):
        if ch in "\"'" and quote is None:
            quote = ch
        elif ch == quote:
            quote = None
        elif ch == "#" and quote is None and (i == 0 or rest[i - 1] in " \t"):
            return rest[:i], rest[i:]
    return rest, ""
