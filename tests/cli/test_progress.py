"""One progress style: a spinner on a terminal's stderr, nothing at all on a pipe."""

from __future__ import annotations

import io

from rich.console import Console

from ddtctl.cli import _app, progress


def test_a_terminal_sees_the_step_and_a_pipe_sees_nothing(monkeypatch):
    term = io.StringIO()
    monkeypatch.setattr(_app, "stderr_console", lambda: Console(file=term, force_terminal=True, width=200))
    with progress.working("dry-run: resolving") as update:
        update("dry-run: profile 2 of 3")
    assert "dry-run" in term.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr(_app, "stderr_console", lambda: Console(file=pipe, force_terminal=False))
    with progress.working("dry-run: resolving") as update:
        update("anything")
    assert pipe.getvalue() == ""


def test_no_color_keeps_the_spinner_text_plain(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    term = io.StringIO()
    monkeypatch.setattr(_app, "stderr_console", lambda: Console(file=term, force_terminal=True, width=200))
    with progress.working("overlay build"):
        pass
    assert "overlay build" in term.getvalue() and "\x1b[3" not in term.getvalue()  # no colour codes
