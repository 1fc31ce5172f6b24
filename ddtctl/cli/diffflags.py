"""`ddtctl diff-flags` and `ddtctl migrate`: SGLang flag drift between releases, installs and profiles."""

from __future__ import annotations

from typing import Any, Optional

import typer

from ddtctl import PINNED_SGLANG
from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, emit_json, stdout_console
from ddtctl.errors import ExitCode, UsageError, printable


def _short(value: Any, width: int = 60, *, plain: bool = False) -> str:
    text = "None" if value is None else repr(value) if isinstance(value, str) and not plain else str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _field_change(change) -> str:
    if change.field == "choices" and isinstance(change.old, list) and isinstance(change.new, list):
        plus = [c for c in change.new if c not in change.old]
        minus = [c for c in change.old if c not in change.new]
        parts = ([f"+{', +'.join(map(str, plus))}"] if plus else []) + (
            [f"-{', -'.join(map(str, minus))}"] if minus else []
        )
        return f"choices {' '.join(parts) or '(reordered)'}"
    return f"{change.field} {_short(change.old)} -> {_short(change.new)}"


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(printable(text))  # keys and values come from the input: no raw control characters out


def _print_catalog_diff(diff, *, all_added: bool = True) -> None:
    from ddtctl.schema.catalog import load_catalog

    con = stdout_console()
    counts = diff.counts()
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no differences"
    con.print(f"[bold]{_esc(diff.from_label)} -> {_esc(diff.to_label)}[/]: {summary}")
    if diff.evidence_versions:
        con.print(f"[dim](rename evidence also read from sglang {', '.join(diff.evidence_versions)})[/]")
    if diff.renamed:
        con.print("\n[bold yellow]Renamed[/]")
        for r in diff.renamed:
            tag = {"declared": "declared by sglang", "dest": "same dest", "similar": "inferred"}[r.how]
            still = " [dim](old spelling still accepted, deprecated)[/]" if r.still_accepted else ""
            con.print(f"  [yellow]~ --{_esc(r.old)} -> --{_esc(r.new)}[/] [dim]{tag}[/]{still}")
            con.print(f"      [dim]{_esc('; '.join(r.evidence))}[/]")
            for c in r.changes:
                con.print(f"      {_esc(_field_change(c))}")
    if diff.removed:
        con.print("\n[bold red]Removed[/]")
        for r in diff.removed:
            note = (
                f" [dim]({_esc(r.hint)})[/]"
                if r.hint
                else (" [dim](was deprecated)[/]" if r.was_deprecated else "")
            )
            con.print(f"  [red]- --{_esc(r.flag)}[/]{note}")
    if diff.deprecated:
        con.print("\n[bold magenta]Newly deprecated[/]")
        for d in diff.deprecated:
            use = d.alias_of and f"--{d.alias_of}" or d.replacement
            con.print(f"  [magenta]! --{_esc(d.flag)}[/]" + (f" [dim](use {_esc(use)})[/]" if use else ""))
    if diff.changed:
        con.print("\n[bold cyan]Changed[/]")
        for fc in diff.changed:
            con.print(
                f"  [cyan]~ --{_esc(fc.flag)}[/]: " + _esc("; ".join(_field_change(c) for c in fc.changes))
            )
    if diff.added:
        con.print("\n[bold green]Added[/]")
        try:
            to_cat = load_catalog(diff.to_version)
        except Exception:  # noqa: BLE001 - a live catalog has no shipped twin; names are enough
            to_cat = None
        shown = diff.added if all_added else diff.added[:20]
        for name in shown:
            spec = to_cat.get_option(name) if to_cat is not None else None
            help_text = (
                f" [dim]{_esc(_short(spec.help, 70, plain=True))}[/]"
                if spec is not None and spec.help
                else ""
            )
            con.print(f"  [green]+ --{_esc(name)}[/]{help_text}")
        if len(shown) < len(diff.added):
            con.print(f"  [dim]... and {len(diff.added) - len(shown)} more (--format json lists all)[/]")


def _argval(value: Any) -> str:
    if value is True:
        return "(set)"
    if isinstance(value, list):
        return " ".join(_short(v, 40, plain=True) for v in value)
    return _short(value, 60, plain=True)


def _arg(key: str, value: Any) -> str:
    return key if value is True else f"{key} {_argval(value)}"


def _print_profile_diff(pd) -> None:
    con = stdout_console()
    if pd.identical:
        con.print(f"[green]{_esc(pd.a)} and {_esc(pd.b)} launch the same[/]")
        return
    con.print(f"[bold]{_esc(pd.a)} -> {_esc(pd.b)}[/]")
    if pd.context:
        con.print("\n[bold magenta]Context[/] [dim](not in argv, but it changes the launch)[/]")
        for c in pd.context:
            con.print(f"  [magenta]~ {_esc(c.key)}[/]: {_esc(_short(c.a))} -> {_esc(_short(c.b))}")
    if pd.only_a or pd.only_b or pd.changed:
        con.print("\n[bold]Rendered argv[/]")
        for k, v in pd.only_a.items():
            con.print(f"  [red]- {_esc(_arg(k, v))}[/]")
        for k, v in pd.only_b.items():
            con.print(f"  [green]+ {_esc(_arg(k, v))}[/]")
        for c in pd.changed:
            con.print(f"  [yellow]~ {_esc(c.key)}[/]: {_esc(_argval(c.a))} -> {_esc(_argval(c.b))}")
    if pd.resolved is not None:
        res = pd.resolved
        con.print("\n[bold]After SGLang's resolution[/]")
        for side, label in (("a", pd.a), ("b", pd.b)):
            r = res[side]
            verdict = "[green]accepted[/]" if r["ok"] else "[red]rejected[/]"
            err = (
                f": {_esc((r['error'] or {}).get('type', ''))}: {_esc((r['error'] or {}).get('message', ''))}"
                if r.get("error")
                else ""
            )
            con.print(f"  {_esc(label)}: {verdict}{err}")
        if not res["changed"]:
            con.print("  [dim]resolved values are the same[/]")
        for c in res["changed"]:
            con.print(f"  [yellow]~ {_esc(c['key'])}[/]: {_esc(_short(c['a']))} -> {_esc(_short(c['b']))}")


@app.command("diff-flags")
def diff_flags(
    profiles: Optional[list[str]] = typer.Argument(
        None, help="Two profiles: what launches differently (A -> B)."
    ),
    from_version: Optional[str] = typer.Option(
        None, "--from", help="Older SGLang release (shipped catalog)."
    ),
    to_version: Optional[str] = typer.Option(
        None, "--to", help="Newer SGLang release (default: the pinned one)."
    ),
    installed: bool = typer.Option(
        False,
        "--installed",
        help="Compare a catalog with the live argparse of an "
        "installed SGLang (default interpreter: the managed env).",
    ),
    python: Optional[str] = typer.Option(
        None, "--python", help="Interpreter with sglang installed (--installed, --resolved)."
    ),
    sglang: Optional[str] = typer.Option(
        None,
        "--sglang",
        help="With --installed: the catalog release to compare "
        "against (default: the installed release when shipped, else the pinned one).",
    ),
    resolved: bool = typer.Option(
        False,
        "--resolved",
        help="With two profiles: also compare after SGLang's own resolution (dry-run in the managed env).",
    ),
    gpu: Optional[str] = typer.Option(
        None, "--gpu", help="With --resolved: GPU to declare (default: each profile's)."
    ),
    overlay: str = typer.Option(
        "auto",
        "--overlay",
        help="With --resolved: DDTREE payload: auto (built and used when "
        "a profile asks for DDTREE), none, or a payload directory.",
    ),
    output: OutputFormat = options.FORMAT,
    brief: bool = typer.Option(False, "--brief", help="Text output: list at most 20 added flags."),
) -> None:
    """Show how SGLang's flags differ: between releases (--from/--to), between the catalog and an installed
    SGLang (--installed), or between two profiles' launches (A.yaml B.yaml).

    Exit codes: 0 done (with --installed: no drift), 1 --installed found drift, 2 usage or environment error.
    """
    modes = [
        name
        for name, on in (
            ("--from/--to", bool(from_version or to_version)),
            ("--installed", installed),
            ("profiles", bool(profiles)),
        )
        if on
    ]
    if len(modes) != 1:
        raise UsageError(
            "choose one of: --from/--to, --installed, or two profiles"
            if not modes
            else f"{' and '.join(modes)} cannot be combined",
            fix="ddtctl diff-flags --from 0.5.12 --to 0.5.23  |  --installed  |  A.yaml B.yaml",
        )
    if resolved and not profiles:
        raise UsageError("--resolved compares two profiles", fix="ddtctl diff-flags A.yaml B.yaml --resolved")

    if profiles:
        if len(profiles) != 2:
            raise UsageError(
                f"expected two profiles, got {len(profiles)}", fix="ddtctl diff-flags A.yaml B.yaml"
            )
        from ddtctl.diffflags import diff_profiles

        sys_path: list[str] = []
        if resolved:
            from ddtctl.overlay.dryrun_support import overlay_sys_path

            sys_path = overlay_sys_path(overlay, profiles=list(profiles), python=python)
        pd = diff_profiles(
            profiles[0], profiles[1], resolved=resolved, gpu=gpu, python=python, extra_sys_path=sys_path
        )
        if output == OutputFormat.json:
            emit_json("diff-flags", pd.to_json())
        else:
            _print_profile_diff(pd)
        raise typer.Exit(ExitCode.OK)

    if installed:
        from ddtctl.diffflags import diff_installed

        res = diff_installed(python, sglang)
        if output == OutputFormat.json:
            emit_json("diff-flags", res.to_json(), ExitCode.INVALID if res.drift else ExitCode.OK)
        else:
            con = stdout_console()
            if res.installed_version != res.catalog_version:
                con.print(
                    f"[bold red]drift[/]: {_esc(res.python)} has sglang {_esc(res.installed_version)}, "
                    f"the catalog is for {_esc(res.catalog_version)}"
                )
            _print_catalog_diff(res.diff, all_added=not brief)
            con.print(
                "[bold red]drift[/]"
                if res.drift
                else "[bold green]no drift[/]: the installed SGLang parses exactly the flags of the catalog"
            )
        raise typer.Exit(ExitCode.INVALID if res.drift else ExitCode.OK)

    from ddtctl.diffflags import diff_versions

    if not from_version:
        raise UsageError("--to needs --from", fix=f"ddtctl diff-flags --from 0.5.12 --to {to_version}")
    diff = diff_versions(from_version, to_version or PINNED_SGLANG)
    if output == OutputFormat.json:
        emit_json("diff-flags", diff.to_json())
    else:
        _print_catalog_diff(diff, all_added=not brief)
    raise typer.Exit(ExitCode.OK)


@app.command("migrate")
def migrate(
    profile: str = typer.Argument(..., help="Profile written for an older SGLang release."),
    to_version: Optional[str] = typer.Option(
        None, "--to", help="Target SGLang release (default: the pinned one)."
    ),
    from_version: Optional[str] = typer.Option(
        None, "--from", help="Source release (default: the profile's `sglang:`)."
    ),
    write: bool = typer.Option(
        False, "--write", help="Rewrite the file in place (default: show the diff only)."
    ),
    output: OutputFormat = options.FORMAT,
) -> None:
    """Rewrite a profile for a newer SGLang: renamed flags renamed (comments and layout kept), removed ones
    reported.

    Exit codes: 0 migrated (or nothing to do), 1 flags remain that need a manual decision, 2 usage or I/O
    error.
    """
    from ddtctl.migrate import migrate_profile

    result = migrate_profile(profile, to_version or PINNED_SGLANG, from_version=from_version, write=write)
    code = ExitCode.OK if result.complete else ExitCode.INVALID
    if output == OutputFormat.json:
        data = result.to_json()
        if not write:
            data["diff"] = result.unified_diff()
        emit_json("migrate", data, code)
    else:
        # one print of all lines: a profile of 29k unknown keys has as many findings (a print each: ~8 s)
        lines = [f"[bold]{_esc(result.source)}[/]: sglang {result.from_version} -> {result.to_version}"]
        for e in result.edits:
            extra = f" = {_short(e.new_value)}" if e.new_value is not None else ""
            lines.append(
                f"  [yellow]line {e.line}: {_esc(e.old_key)} -> {_esc(e.new_key)}{_esc(extra)}[/] "
                f"[dim]{_esc(e.reason)}[/]"
            )
        for r in result.removed:
            where = f"line {r.line}: " if r.line else ""
            fix = f" [dim](fix: {_esc(r.fix)})[/]" if r.fix else ""
            lines.append(f"  [red]{where}{_esc(r.key)}: {_esc(r.message)}[/]{fix}")
        for w in result.warnings:
            where = f"line {w.line}: " if w.line else ""
            fix = f" [dim]({_esc(w.fix)})[/]" if w.fix else ""
            style = "red" if w.blocking else "magenta"
            lines.append(f"  [{style}]{where}{_esc(w.key)}: {_esc(w.message)}[/]{fix}")
        if not result.changed:
            lines.append("  [green]nothing to change[/]")
        elif write:
            lines.append(f"  [green]written[/] ({len(result.edits)} flag(s) renamed)")
        else:
            lines.append("")
            for line in result.unified_diff().splitlines():
                style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
                lines.append(f"[{style}]{_esc(line)}[/]")
            lines.append("[dim](not written: add --write to apply)[/]")
        con = stdout_console()
        con.print("\n".join(lines))
    raise typer.Exit(code)
