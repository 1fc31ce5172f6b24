"""Minimal terminal output for the hot path: ANSI colours only on a TTY and never with NO_COLOR. And the rich
console every other command prints its tables through (rich_console)."""

from __future__ import annotations

import os
import sys

_SEVERITY = {"error": "31;1", "warning": "33", "info": "36"}

# The width rich lays tables out in when the output is not a terminal: wide enough that no cell is ever cut
# (`2026-1…`) or wrapped, and each table takes only the width its contents need.
UNCLIPPED_WIDTH = 1_000_000


def rich_console(*, stderr: bool = False):
    """A rich Console on stdout (or stderr): on a terminal, its width; piped or redirected, cells whole."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    try:
        piped = not stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        piped = True
    return Console(
        stderr=stderr, highlight=False, soft_wrap=True, width=UNCLIPPED_WIDTH if piped else None
    )  # fmt: skip


class Term:
    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.color = (
            self.stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        )
        self._lines: list[str] = []

    def _paint(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def red(self, text: str) -> str:
        return self._paint("31", text)

    def green(self, text: str) -> str:
        return self._paint("32", text)

    def bold(self, text: str) -> str:
        return self._paint("1", text)

    def dim(self, text: str) -> str:
        return self._paint("2", text)

    def severity(self, severity: str) -> str:
        return self._paint(_SEVERITY.get(severity, "0"), f"{severity:<7}")

    def line(self, text: str) -> None:
        self._lines.append(text)

    def flush(self) -> None:
        self.stream.write("".join(line + "\n" for line in self._lines))
        self.stream.flush()
        self._lines.clear()
