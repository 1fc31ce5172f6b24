"""Command-line entry point: parse, call the library, print. Errors become one line and an exit code here."""

from __future__ import annotations

import os
import sys


def load_app():
    """The typer application with every command registered (imported only when the fast path does not apply)."""
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
    from ddtctl.errors import DdtctlError, ExitCode

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("DDTCTL_DEBUG") == "1"
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
        app(args=args, prog_name="ddtctl")
    except DdtctlError as err:
        if debug:
            raise
        sys.stderr.write(f"ddtctl: error: {err.one_line()}\n")
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("ddtctl: interrupted\n")
        sys.exit(ExitCode.INTERRUPTED)
    except Exception as err:  # a bug: say so in one line, keep the traceback for --debug
        if debug:
            raise
        sys.stderr.write(
            f"ddtctl: internal error: {type(err).__name__}: {err} (re-run with --debug for the traceback)\n"
        )
        sys.exit(ExitCode.INTERNAL)
