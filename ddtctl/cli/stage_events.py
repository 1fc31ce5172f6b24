"""Stage events of the remote commands (deploy, rollback) on stderr as they happen: a line per event, under a
rich spinner naming the stage in progress during a deploy; every event is kept for the JSON envelope."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from ddtctl.cli._app import OutputFormat, stderr_console
from ddtctl.errors import UsageError

if TYPE_CHECKING:
    from rich.status import Status

_STYLE = {"ok": "green", "error": "red", "warn": "yellow", "info": "", "log": "dim"}


class LiveStages:
    """Stage events printed to stderr as they happen, under a rich spinner naming the stage in progress (the
    spinner only renders on a terminal; stdout stays clean for --format json)."""

    def __init__(self, fmt: OutputFormat):
        self.fmt = fmt
        self.console = stderr_console()
        self.on_event = event_printer(fmt, self.console, self)
        self.events = self.on_event.events
        self.status: Status | None = None

    def __enter__(self) -> "LiveStages":
        self.status = status = self.console.status("connecting", spinner="dots")
        status.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.status is not None:
            self.status.__exit__(*exc)

    def update(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)

    def ship_progress(self, host: str, done: int, total: int) -> None:
        self.update(f"ship [{host}] {done}/{total} files uploaded")

    def confirm(self, yes: bool) -> bool:
        """Apply the plan? --yes, else a prompt on a terminal; never with --format json (JSON on stdout)."""
        if yes:
            return True
        self.__exit__(None, None, None)  # no spinner over the prompt
        import sys

        if self.fmt == OutputFormat.json:
            raise UsageError(
                "the plan needs confirmation and --format json does not prompt",
                fix="pass --yes, or --plan to see the plan first",
            )
        if not sys.stdin.isatty():
            raise UsageError("the plan needs confirmation and stdin is not a terminal", fix="pass --yes")
        return typer.confirm("Apply this plan?", default=False)


class EventPrinter:
    """The callback of a command's stage events (`events`: every one of them, for the JSON envelope)."""

    def __init__(self, on_event, events: list):
        self.on_event, self.events = on_event, events

    def __call__(self, ev) -> None:
        self.events.append(ev)
        self.on_event(ev)


def event_printer(fmt: OutputFormat, console=None, live: "LiveStages | None" = None) -> EventPrinter:
    """Events go to stderr as they happen: the progress of a long command, in json mode too (stdout holds the
    JSON, whose results list the same events)."""
    from rich.markup import escape

    console = console or stderr_console()
    t0 = time.monotonic()

    def on_event(ev) -> None:
        if live is not None and ev.level != "log":
            live.update(f"{ev.stage}: {escape(ev.message[:100])}")
        style = _STYLE.get(ev.level, "")
        host = f"[{ev.host}] " if ev.host else ""
        if ev.level == "log":
            console.print(f"[dim]        {escape(host)}| {escape(ev.message)}[/dim]")
            return
        mark = {"ok": "✓", "error": "✗", "warn": "!"}.get(ev.level, "·")
        text = f"{time.monotonic() - t0:6.2f}s {mark} {ev.stage:<9} {escape(host)}{escape(ev.message)}"
        console.print(f"[{style}]{text}[/{style}]" if style else text)

    return EventPrinter(on_event, [])
