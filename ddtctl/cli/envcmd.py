"""`ddtctl env create` / `ddtctl env show` / `ddtctl env remove`: the managed SGLang environment."""

from __future__ import annotations

import typer

from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, emit_json, stderr_console, stdout_console
from ddtctl.errors import ExitCode

env_app = typer.Typer(
    name="env",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="The managed SGLang environment in which dry-run runs SGLang's own resolver (CPU only).",
)
app.add_typer(env_app, name="env")

_SGLANG_HELP = "SGLang release of the environment."


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    size: float = n
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{size} B"
        size /= 1024
    return str(size)


@env_app.command("create")
def create(
    sglang: str = typer.Option("0.5.23", "--sglang", help=_SGLANG_HELP),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the env is up to date."),
    python: str = typer.Option(
        None, "--python", help="Base Python interpreter (default: this one, or pythonX.Y)."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Stream pip's output."),
) -> None:
    """Build (once) the cached venv: CPU torch, sglang --no-deps, the pinned packages its resolver imports."""
    import time

    from ddtctl import envs

    err = stderr_console()
    t0 = time.monotonic()

    from ddtctl.cli.progress import working

    with working(f"env create: the managed SGLang {sglang} env") as update:

        def progress(i: int, n: int, msg: str) -> None:
            err.print(f"[{i}/{n}] {msg}  (+{time.monotonic() - t0:.0f}s)")
            update(f"env create [{i}/{n}] {msg}")

        result = envs.create_env(sglang, force=force, base_python=python, progress=progress, verbose=verbose)
    env = result.env
    if result.built:
        err.print(f"built {env.root} in {result.seconds:.0f}s")
    else:
        err.print(f"up to date: {env.root} (requirements {env.expected_hash})")
    typer.echo(str(env.python))


@env_app.command("show")
def show(
    sglang: str = typer.Option("0.5.23", "--sglang", help=_SGLANG_HELP),
    fmt: OutputFormat = options.FORMAT,
    check: bool = typer.Option(
        False, "--check", help="Also start the resolver and import sglang (a few seconds)."
    ),
) -> None:
    """Report the managed env: python, versions, size, status. Exit 2 when it is not ready."""
    from ddtctl import envs

    env = envs.managed_env(sglang, with_size=True)
    data = env.to_dict()
    if check and env.ready:
        try:
            data["check"] = {"ok": True, "versions": envs.verify_python(env.python)}
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            data["check"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    ok = env.ready and data.get("check", {"ok": True})["ok"]
    code = ExitCode.OK if ok else ExitCode.USAGE
    if fmt == OutputFormat.json:
        emit_json("env show", data, code)
    else:
        out = stdout_console()
        status = data["status"]
        colour = "green" if env.ready else ("yellow" if status == "stale" else "red")
        out.print(f"managed SGLang env {sglang}: [{colour}]{status}[/{colour}]")
        out.print(f"  root     {data['root']}")
        out.print(f"  python   {data['python']}")
        versions = data.get("versions") or {}
        if versions:
            out.print("  versions " + ", ".join(f"{k} {v}" for k, v in versions.items() if k != "import_s"))
        out.print(f"  size     {_human(data['size_bytes'])}")
        out.print(
            f"  requirements {data.get('requirements_hash') or '-'} (current set {data['expected_hash']})"
        )
        if data.get("created"):
            out.print(f"  created  {data['created']}")
        if "check" in data:
            chk = data["check"]
            out.print("  check    " + ("ok: sglang imports" if chk["ok"] else f"FAILED: {chk['error']}"))
        if not env.ready:
            out.print(f"  create it with: ddtctl env create --sglang {sglang}")
    raise typer.Exit(code)


@env_app.command("remove")
def remove(sglang: str = typer.Option("0.5.23", "--sglang", help=_SGLANG_HELP)) -> None:
    """Delete the managed env from the cache."""
    from ddtctl import envs

    removed = envs.remove_env(sglang)
    typer.echo(f"removed {envs.env_root(sglang)}" if removed else f"nothing at {envs.env_root(sglang)}")
