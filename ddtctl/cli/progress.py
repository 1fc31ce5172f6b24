"""One progress style for the slow commands: a rich spinner on stderr naming the step and its elapsed time.

Only on a terminal: piped output, logs and `--format json` stay clean. rich honours NO_COLOR (no colours) and
FORCE_COLOR (colours, and the spinner, even when stderr is not a terminal). `deploy` shows its stages the same
way (ddtctl/cli/remote.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ddtctl.cli import _app  # read at call time: tests swap its stderr_console


@contextmanager
def working(message: str) -> Iterator[Callable[[str], None]]:
    """`with working("dry-run: ...") as update:` -- update(text) renames the step."""
    console = _app.stderr_console()
    if not console.is_terminal:
        yield lambda text: None
        return
    t0 = time.monotonic()
    with console.status(message, spinner="dots") as status:

        def update(text: str) -> None:
            status.update(f"{text}  [dim](+{time.monotonic() - t0:.0f}s)[/dim]")

        yield update
