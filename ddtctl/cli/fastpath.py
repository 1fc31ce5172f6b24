"""Start-up fast path for `ddtctl validate`: the same command without building the typer application.

pre-commit runs `ddtctl validate` on every commit; building the typer/click app (and the pydantic adapters typer
creates for parameters) costs more than validating a profile. This parser mirrors the typer command's options;
`--help` and anything it does not understand go to typer. tests/cli/test_fastpath.py checks that both paths agree.
"""

from __future__ import annotations


def try_validate(args: list[str]) -> int | None:
    """Exit code, or None to let typer handle the command line."""
    if not args or args[0] != "validate":
        return None
    rest = args[1:]
    if any(a in ("--help", "-h") for a in rest):
        return None
    opts = {"argv": False, "gpu": None, "sglang": None, "fix": False, "output": "text", "quiet": False}
    paths: list[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        i += 1
        if a == "--":
            paths.extend(rest[i:])
            break
        if a in ("--argv", "--fix"):
            opts[a[2:]] = True
        elif a in ("--quiet", "-q"):
            opts["quiet"] = True
        elif a.split("=", 1)[0] in ("--gpu", "--sglang", "--format"):
            name, eq, value = a.partition("=")
            if not eq:
                if i >= len(rest):
                    return None
                value = rest[i]
                i += 1
            key = {"--format": "output"}.get(name, name[2:])
            opts[key] = value
        elif a.startswith("-") and a != "-":
            return None  # unknown option: typer reports it the usual way
        else:
            paths.append(a)
    if opts["output"] not in ("text", "json"):
        return None
    from ddtctl.cli.validate_report import run_validate

    return run_validate(paths, **opts)  # type: ignore[arg-type]
