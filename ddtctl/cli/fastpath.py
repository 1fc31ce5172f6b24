"""Start-up fast path for `ddtctl validate`: the same command without building the typer application.

pre-commit runs `ddtctl validate` on every commit; building the typer/click app (and the pydantic adapters
typer creates for parameters) costs more than validating a profile. This parser mirrors the typer command's
options; `--help` and anything it does not understand go to typer. tests/cli/test_fastpath.py checks that both
paths agree.

`ddtctl --version` and `ddtctl completion SHELL` are answered here too (try_basics), without typer; the typer
app has the same `--version` option and `completion` command, used with --debug or DDTCTL_NO_FASTPATH=1.
"""

from __future__ import annotations

from typing import Any

from ddtctl import PINNED_SGLANG, __version__
from ddtctl.errors import ExitCode


def try_validate(args: list[str]) -> int | None:
    """Exit code, or None to let typer handle the command line."""
    if not args or args[0] != "validate":
        return None
    rest = args[1:]
    if any(a in ("--help", "-h") for a in rest):
        return None
    opts: dict[str, Any] = {
        "argv": False,
        "gpu": None,
        "sglang": None,
        "fix": False,
        "output": "text",
        "quiet": False,
        "diff": False,
        "unsafe_fixes": False,
        "argv_file": None,
        "statistics": False,
    }
    ignore: list[str] = []
    select: list[str] = []
    sets: list[str] = []
    paths: list[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        i += 1
        if a == "--":
            paths.extend(rest[i:])
            break
        if a in ("--argv", "--fix", "--diff", "--unsafe-fixes", "--statistics"):
            opts[a[2:].replace("-", "_")] = True
        elif a in ("--quiet", "-q"):
            opts["quiet"] = True
        elif a.split("=", 1)[0] in (
            "--gpu",
            "--sglang",
            "--format",
            "--ignore",
            "--select",
            "--argv-file",
            "--set",
        ):
            name, eq, value = a.partition("=")
            if not eq:
                if i >= len(rest):
                    return None
                value = rest[i]
                i += 1
            key = {"--format": "output"}.get(name, name[2:].replace("-", "_"))
            if key in ("ignore", "select"):
                (ignore if key == "ignore" else select).append(value)
            elif key == "set":
                sets.append(value)
            else:
                opts[key] = value
        elif a.startswith("-") and a != "-":
            return None  # unknown option: typer reports it the usual way
        else:
            paths.append(a)
    if opts["output"] not in ("text", "json", "github", "sarif"):
        return None
    from ddtctl.cli.validate_report import run_validate

    return run_validate(paths, ignore=ignore, select=select or None, sets=sets, **opts)


def version_text() -> str:
    return f"ddtctl {__version__} (targets SGLang {PINNED_SGLANG})"


def try_basics(args: list[str]) -> int | None:
    """`ddtctl --version` and `ddtctl completion bash|zsh|fish`: exit code, or None to let typer handle it."""
    lead = []
    for a in args:  # the root options before the command, as click sees them (--version is eager there)
        if not a.startswith("-"):
            break
        lead.append(a)
    if "--version" in lead and set(lead) <= {"--version", "--debug"}:
        import sys

        sys.stdout.write(version_text() + "\n")
        return ExitCode.OK
    if len(args) == 2 and args[0] == "completion":
        from ddtctl.cli.completion import SHELLS, script

        if args[1] in SHELLS:
            import sys

            sys.stdout.write(script(args[1]))
            return ExitCode.OK
    return None
