"""`ddtctl overlay build|verify|install|uninstall|status|import|manifest`: the DDTREE payload for SGLang."""

from __future__ import annotations

import typer

from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, emit_json, stdout_console
from ddtctl.errors import ExitCode

overlay_app = typer.Typer(
    name="overlay",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="The DDTREE integration payload for the pinned SGLang: "
    "build, verify, install atomically, uninstall exactly.",
)
app.add_typer(overlay_app, name="overlay")

_PAYLOAD = "Payload source directory (manifest.json; default: the bundled ddtree-sglang-0.5.23)."
_ROOT = "SGLang site-packages directory (the one holding sglang/). Default: the managed env's."
_PY = "Interpreter of that SGLang install (default: guessed from --sglang-root, else the managed env's)."


def _out():
    return stdout_console()


def _json(command: str, data, exit_code: int = ExitCode.OK) -> None:
    emit_json(f"overlay {command}", data, exit_code)


@overlay_app.command("build")
def build_cmd(
    payload: str = typer.Option(None, "--payload", help=_PAYLOAD),
    sglang_root: str = typer.Option(None, "--sglang-root", help=_ROOT),
    python: str = typer.Option(None, "--python", help=_PY),
    out: str = typer.Option(
        None,
        "--out",
        help="Build directory (default: ${XDG_CACHE_HOME:-~/.cache}/ddtctl/overlay/<name>-<sglang>).",
    ),
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Apply the payload's patches to the pristine SGLang files (base hashes checked) into a staging tree, add
    its modules, byte-compile with the target interpreter, and make the dry-run view."""
    from rich.markup import escape

    from ddtctl.cli.progress import working
    from ddtctl.overlay.build import build

    with working("overlay build: patching, byte-compiling and checking the payload against SGLang's files"):
        r = build(payload, sglang_root=sglang_root, python=python, out_dir=out)
    if fmt == OutputFormat.json:
        _json("build", r.to_json())
        return
    o = _out()
    o.print(
        f"[green]built[/green] {escape(r.name)} {escape(r.version)} for sglang {escape(r.sglang)}  "
        f"payload {r.payload_id[:16]}"
    )
    for f in r.files:
        base = f"  base {f['base_sha256'][:12]}" if f.get("base_sha256") else ""
        o.print(f"  {f['kind']:8} {escape(f['path'])}  sha256 {f['sha256'][:12]}{base}")
    for s in r.skipped_optional:
        o.print(f"  [yellow]skipped[/yellow] optional {escape(s)} (not present)")
    for s in r.stale_pins:
        o.print(
            f"  [yellow]warning[/yellow] {escape(s)} differs from its pinned sha256 in manifest.json "
            "(staged as it is; `ddtctl overlay manifest --update` re-pins it)"
        )
    o.print(f"  staged:  {escape(str(r.payload_dir))}")
    o.print(f"  view:    {escape(str(r.view_dir))}  (dry-run puts it first on sys.path)")
    o.print(f"  against: {escape(str(r.sglang_root))} ({escape(str(r.python))})")


@overlay_app.command("verify")
def verify_cmd(
    payload: str = typer.Option(None, "--payload", help=_PAYLOAD),
    sglang_root: str = typer.Option(None, "--sglang-root", help=_ROOT),
    python: str = typer.Option(None, "--python", help=_PY),
    installed: bool = typer.Option(
        False, "--installed", help="Check the payload installed in --sglang-root instead of the built view."
    ),
    checks: str = typer.Option(
        None, "--checks", help="Comma-separated smoke check ids (default: the manifest's)."
    ),
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Run the payload's smoke checks in the target interpreter (DDTREE resolves, flags parse, a DDTREE argv
    resolves through resolve_once(), rules, launch refusal, kernels self-test on CPU). Exit 4 if any fails."""
    from rich.markup import escape

    from ddtctl.overlay.manage import verify

    r = verify(
        payload,
        sglang_root=sglang_root,
        python=python,
        installed=installed,
        checks=[c for c in checks.split(",") if c] if checks else None,
    )
    if fmt == OutputFormat.json:
        _json("verify", r.to_json(), ExitCode.OK if r.ok else ExitCode.OVERLAY)
    else:
        o = _out()
        head = "[green]VERIFIED[/green]" if r.ok else "[red]FAILED[/red]"
        where = "installed payload" if installed else f"payload {str(r.payload_id or '')[:16]} (view)"
        o.print(f"{head} {where} in {escape(str(r.python))} (sglang {escape(str(r.versions.get('sglang')))})")
        if r.error:
            o.print(f"  [red]error[/red] {escape(r.error)}")
        for c in r.checks:
            mark = "[green]ok[/green]  " if c.get("ok") else "[red]FAIL[/red]"
            o.print(f"  {mark} {escape(c['id']):15} {escape(str(c.get('detail', '')))}")
    if not r.ok:
        raise typer.Exit(ExitCode.OVERLAY)


@overlay_app.command("install")
def install_cmd(
    sglang_root: str = typer.Option(
        ..., "--sglang-root", help="SGLang site-packages directory to install into."
    ),
    payload: str = typer.Option(
        None,
        "--payload",
        help="Payload source or built payload (default: the bundled one, "
        "built against --sglang-root's own pristine files).",
    ),
    python: str = typer.Option(None, "--python", help=_PY),
    state_dir: str = typer.Option(
        None,
        "--state-dir",
        help="Backups, journal and install record (default: "
        "${XDG_CACHE_HOME:-~/.cache}/ddtctl/overlay/state/<root hash>).",
    ),
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Install atomically: pristine backups, files moved in by rename, a record; an interrupted install is
    rolled back (or finished) by the next overlay command."""
    from ddtctl.overlay.manage import install

    _print_install("install", install(sglang_root, payload=payload, python=python, state_dir=state_dir), fmt)


@overlay_app.command("uninstall")
def uninstall_cmd(
    sglang_root: str = typer.Option(..., "--sglang-root", help="SGLang site-packages directory."),
    python: str = typer.Option(None, "--python", help=_PY),
    state_dir: str = typer.Option(None, "--state-dir", help="The state dir used at install."),
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Restore the exact pristine files (bytes, modes, mtimes, their .pyc) and remove the payload's own
    files."""
    from ddtctl.overlay.manage import uninstall

    _print_install("uninstall", uninstall(sglang_root, python=python, state_dir=state_dir), fmt)


def _print_install(command: str, r, fmt: OutputFormat) -> None:
    from rich.markup import escape

    if fmt == OutputFormat.json:
        _json(command, r.to_json())
        return
    o = _out()
    if r.recovered:
        o.print(f"[yellow]recovered[/yellow] {escape(r.recovered)}")
    if r.action == "none":
        o.print(f"nothing to do: {escape(str(r.details.get('reason', '')))}")
    else:
        o.print(
            f"[green]{escape(r.action)}[/green] payload {str(r.payload_id or '')[:16]} "
            f"({r.details.get('files', '?')} files) in {escape(str(r.sglang_root))}"
        )
    o.print(f"  state: {escape(str(r.state_dir))}")


@overlay_app.command("status")
def status_cmd(
    sglang_root: str = typer.Option(..., "--sglang-root", help="SGLang site-packages directory."),
    python: str = typer.Option(None, "--python", help=_PY),
    state_dir: str = typer.Option(None, "--state-dir", help="The state dir used at install."),
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """What is installed (payload id, files) and whether any installed file was changed since (drift)."""
    from rich.markup import escape

    from ddtctl.overlay.manage import status

    s = status(sglang_root, python=python, state_dir=state_dir)
    if fmt == OutputFormat.json:
        _json("status", s)
        return
    o = _out()
    if s.get("recovered"):
        o.print(f"[yellow]recovered[/yellow] {escape(s['recovered'])}")
    if not s.get("installed"):
        o.print(
            f"no payload installed in {escape(str(s.get('sglang_root')))} "
            f"(sglang {escape(str(s.get('sglang')))})"
        )
        return
    o.print(
        f"installed {escape(str(s.get('name')))} {escape(str(s.get('version')))} payload "
        f"{str(s.get('payload_id'))[:16]} at {escape(str(s.get('installed_at')))}"
    )
    for f in s.get("files", []):
        o.print(f"  {escape(f)}")
    for f in s.get("drift", []):
        o.print(f"  [red]changed since install[/red] {escape(f)}")


@overlay_app.command("import")
def import_cmd(
    src: str = typer.Argument(
        ..., help="Directory mirroring the sglang package tree (sglang/srt/... or srt/...)."
    ),
    out: str = typer.Option(..., "--out", help="Payload source directory to write."),
    name: str = typer.Option("ddtree-sglang-imported", "--name", help="Payload name."),
    version: str = typer.Option("0.0.1", "--version", help="Payload version."),
    sglang_root: str = typer.Option(
        None, "--sglang-root", help="Pristine SGLang to diff against (default: managed env)."
    ),
    python: str = typer.Option(None, "--python", help=_PY),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out."),
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Turn hand-patched SGLang files into a payload: a diff against each pristine file (hashes recorded), new
    files as added files. Then `ddtctl overlay build --payload OUT`."""
    from rich.markup import escape

    from ddtctl.overlay.importer import import_dir

    r = import_dir(
        src, out=out, sglang_root=sglang_root, python=python, name=name, version=version, force=force
    )
    if fmt == OutputFormat.json:
        _json("import", r.to_json())
        return
    o = _out()
    o.print(f"[green]imported[/green] into {escape(str(r.payload_dir))}")
    for p in r.patched:
        o.print(
            f"  patched {escape(p['path'])} ({p['lines_changed']} lines)  base {p['base_sha256'][:12]} -> "
            f"{p['result_sha256'][:12]}"
        )
    for a in r.added:
        o.print(f"  added   {escape(a)}")
    for u in r.unchanged:
        o.print(f"  [dim]same as pristine, skipped: {escape(u)}[/dim]")
    o.print(f"next: ddtctl overlay build --payload {escape(str(r.payload_dir))}")


@overlay_app.command("manifest")
def manifest_cmd(
    payload: str = typer.Option(None, "--payload", help=_PAYLOAD),
    update: bool = typer.Option(False, "--update", help="Rewrite stale hashes (after an intended change)."),
    sglang_root: str = typer.Option(None, "--sglang-root", help=_ROOT),
    python: str = typer.Option(None, "--python", help=_PY),
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Check that the manifest's pinned hashes match its sources (exit 4 when stale, unless --update)."""
    from rich.markup import escape

    from ddtctl.overlay.importer import check_manifest

    r = check_manifest(payload, sglang_root=sglang_root, python=python, update=update)
    if fmt == OutputFormat.json:
        _json("manifest", r.to_json(), ExitCode.OVERLAY if r.stale and not r.updated else ExitCode.OK)
    else:
        o = _out()
        if not r.stale:
            o.print(f"up to date: {escape(str(r.path))}")
        for s in r.stale:
            o.print(f"  {'updated' if r.updated else '[red]stale[/red]'} {escape(s)}")
    if r.stale and not r.updated:
        raise typer.Exit(ExitCode.OVERLAY)
