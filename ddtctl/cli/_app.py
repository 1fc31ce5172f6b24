"""The typer application shared by every command module, and output helpers.

Command modules only parse arguments, call a library function that returns a result object, and print it.
Keep module-level imports light: `ddtctl validate` must start in well under 0.15 s, so torch, sglang and
paramiko are imported only inside the commands that need them.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer

from ddtctl.errors import ExitCode
from ddtctl.report import emit

app = typer.Typer(
    name="ddtctl",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every subcommand and sub-app
    help="Checked, repeatable SGLang launches for speculative decoding (DDTree, DFlash, EAGLE).",
)


class OutputFormat(str, Enum):
    text = "text"
    json = "json"  # one envelope (ddtctl/report.py)


class ReportFormat(str, Enum):
    """Commands that report findings: text, json, or GitHub Actions annotations."""

    text = "text"
    json = "json"
    github = "github"


class Settings:
    debug: bool = False


settings = Settings()


def stdout_console():
    """Tables never clip when stdout is not a terminal (ddtctl.cli.term.rich_console)."""
    from ddtctl.cli.term import rich_console

    return rich_console()


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(command: str, results: dict[str, Any] | None, exit_code: int = ExitCode.OK) -> None:
    """The envelope of `command` (ddtctl.report) on stdout; `ok` follows `exit_code`."""
    emit(command, results, exit_code=exit_code)


def _print_version(value: bool) -> None:
    """`ddtctl --version` when the fast path is off (--debug, DDTCTL_NO_FASTPATH=1); the fast path's text."""
    if value:
        from ddtctl.cli.fastpath import version_text

        typer.echo(version_text())
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors."),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        expose_value=False,
        help="Print the ddtctl version and the SGLang release it targets, and exit.",
    ),
) -> None:
    settings.debug = settings.debug or debug
