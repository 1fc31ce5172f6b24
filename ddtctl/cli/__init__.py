"""Command-line entry point: parse, call the library, print. Errors become one line and an exit code here."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from ddtctl.errors import DdtctlError, ExitCode, UsageError
from ddtctl.report import ErrorInfo, emit_error, github_command, github_error, json_command, start_run


def load_app():
    """The typer app with every command registered (imported only when the fast path does not apply)."""
    # Each module registers its commands on `app`. Keep their top-level imports light.
    from ddtctl.cli import basics as _basics  # noqa: F401
    from ddtctl.cli import diffflags as _diffflags  # noqa: F401
    from ddtctl.cli import dryrun as _dryrun  # noqa: F401
    from ddtctl.cli import envcmd as _envcmd  # noqa: F401
    from ddtctl.cli import kernels as _kernels  # noqa: F401
    from ddtctl.cli import overlay as _overlay  # noqa: F401
    from ddtctl.cli import remote as _remote  # noqa: F401
    from ddtctl.cli import render as _render  # noqa: F401
    from ddtctl.cli import tune as _tune  # noqa: F401
    from ddtctl.cli import validate as _validate  # noqa: F401
    from ddtctl.cli._app import app

    return app


def main(argv: list[str] | None = None) -> None:
    start_run()
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("DDTCTL_DEBUG") == "1"
    in_json = json_command(args)  # with --format json every error goes into the envelope on stdout
    in_github = github_command(args)  # with --format github it is also an annotation on stdout
    try:
        if not debug and os.environ.get("DDTCTL_NO_FASTPATH") != "1":
            from ddtctl.cli.fastpath import try_basics, try_validate

            code = try_validate(args)
            if code is None:
                code = try_basics(args)  # --version, completion SHELL
            if code is not None:
                sys.exit(code)
        app = load_app()
        from ddtctl.cli._app import settings

        settings.debug = debug
        if in_json:
            sys.exit(_run_for_json(app, args, in_json))
        app(args=args, prog_name="ddtctl")
    except DdtctlError as err:
        if debug:
            raise
        _fail(in_json, in_github, ErrorInfo.from_exception(err), f"ddtctl: error: {err.one_line()}")
    except KeyboardInterrupt:
        _fail(in_json, in_github, ErrorInfo("interrupted", ExitCode.INTERRUPTED), "ddtctl: interrupted")
    except Exception as err:  # a bug: say so in one line, keep the traceback for --debug
        if debug:
            raise
        what = f"internal error: {type(err).__name__}: {err}"
        _fail(
            in_json,
            in_github,
            ErrorInfo(what, ExitCode.INTERNAL, fix="re-run with --debug for the traceback"),
            f"ddtctl: {what} (re-run with --debug for the traceback)",
        )


def _run_for_json(app, args: list[str], command: str) -> int:
    """The app without click's standalone mode, so that its usage errors (an unknown option, a missing
    argument) reach the envelope too."""
    import typer

    try:
        code = app(args=args, prog_name="ddtctl", standalone_mode=False)
    except typer.Abort:
        raise UsageError("aborted", fix="pass --yes where a command asks for confirmation") from None
    except typer.TyperException as err:  # click's usage errors (typer vendors click)
        raise UsageError(err.format_message(), where=command, fix=f"see `ddtctl {command} --help`") from None
    if code == ExitCode.INTERRUPTED:  # typer turns Ctrl-C into this exit code
        raise KeyboardInterrupt
    return code if isinstance(code, int) else ExitCode.OK


def _fail(in_json: str | None, in_github: str | None, error: ErrorInfo, line: str) -> NoReturn:
    """Exit with the error's code: the error in the JSON envelope (--format json), else `line` on stderr (and,
    under --format github, as an annotation on stdout, where GitHub reads workflow commands)."""
    if not (in_json and emit_error(in_json, error)):
        if in_github:
            sys.stdout.write(github_error(in_github, error) + "\n")
            sys.stdout.flush()
        sys.stderr.write(line + "\n")
    sys.exit(error.exit_code)
