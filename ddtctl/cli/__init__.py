"""Command-line entry point: parse, call the library, print. Errors become one line and an exit code here."""

from __future__ import annotations

import os
import sys

from ddtctl.cli._app import app, settings

# Each module registers its commands on `app`. Keep their top-level imports light.
from ddtctl.cli import validate as _validate  # noqa: E402,F401
from ddtctl.cli import envcmd as _envcmd  # noqa: E402,F401
from ddtctl.cli import dryrun as _dryrun  # noqa: E402,F401
from ddtctl.cli import diffflags as _diffflags  # noqa: E402,F401


def main(argv: list[str] | None = None) -> None:
    from ddtctl.errors import DdtctlError, ExitCode

    args = list(sys.argv[1:] if argv is None else argv)
    settings.debug = "--debug" in args or os.environ.get("DDTCTL_DEBUG") == "1"
    try:
        app(args=args, prog_name="ddtctl")
    except DdtctlError as err:
        if settings.debug:
            raise
        sys.stderr.write(f"ddtctl: error: {err.one_line()}\n")
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("ddtctl: interrupted\n")
        sys.exit(ExitCode.INTERRUPTED)
    except Exception as err:  # a bug: say so in one line, keep the traceback for --debug
        if settings.debug:
            raise
        sys.stderr.write(
            f"ddtctl: internal error: {type(err).__name__}: {err} (re-run with --debug for the traceback)\n"
        )
        sys.exit(70)
