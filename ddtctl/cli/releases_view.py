"""`ddtctl releases HOST [--prune [--keep N] [--plan] [--yes]]`: the releases a host keeps, with their kind
(a release, or a sweep point of `ddtctl tune`), and their pruning (the logic is ddtctl/deploy/releases.py)."""

from __future__ import annotations

from ddtctl.cli._app import OutputFormat, emit_json, stdout_console
from ddtctl.deploy import DEFAULT_KEEP, host_status, prune_releases, release_summary
from ddtctl.errors import ExitCode, UsageError


def run_releases(
    host,
    *,
    fmt: OutputFormat,
    trust_new_host: bool,
    prune: bool,
    keep: int | None,
    plan: bool,
    yes: bool,
    lock_wait: float,
) -> int:
    """The command's body: list the releases, or prune them; the exit code."""
    if not prune:
        for option, given in (("--keep", keep is not None), ("--plan", plan), ("--yes", yes)):
            if given:
                raise UsageError(f"{option} goes with --prune", fix=f"ddtctl releases HOST --prune {option}")
        _list(host, fmt, trust_new_host)
        return ExitCode.OK
    return _prune(host, fmt, trust_new_host, keep=keep, plan=plan, yes=yes, lock_wait=lock_wait)


def _list(host, fmt: OutputFormat, trust_new_host: bool) -> None:
    st = host_status(host, trust_new_host=trust_new_host, probe=False)  # no /health needed
    rows = [release_summary(r) for r in st.releases]
    if fmt == OutputFormat.json:
        emit_json("releases", {"current": st.current, "releases": rows})
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    cols = ("", "release", "kind", "status", "created", "profile", "algorithm", "payload", "profile sha256")
    for col in cols:
        table.add_column(col, no_wrap=col in ("release", "status", "kind"), min_width=len(col))
    for r in rows:
        cells = [
            "*" if r["id"] == st.current else "",
            r["id"],
            str(r["kind"]),
            str(r["status"]),
            str(r["created"]),
            str(r["profile"]),
            str(r["algorithm"] or "-"),
            (r["payload_hash"] or "-")[:12],
            (r["profile_sha256"] or "")[:12],
        ]
        table.add_row(*(escape(c) for c in cells))
    con = stdout_console()
    con.print(table)
    runs = list(dict.fromkeys((r.get("tune") or {}).get("run") for r in rows if r["kind"] == "sweep"))
    if runs:
        con.print(
            f"sweep: a point measured by tune run {', '.join(str(x) for x in runs)}; never a rollback target "
            "(`releases HOST --prune` removes them first)",
            markup=False,
        )


def _plan_lines(plan) -> list[str]:
    """What --prune removes and keeps, one release a line."""

    def line(verb: str, rel, why: str = "") -> str:
        profile = (rel.raw.get("profile") or {}).get("name") or "-"
        return f"  {verb:<6} {rel.id}  {rel.kind:<7} {rel.status or '-':<8} {profile}" + (
            f"  ({why})" if why else ""
        )

    return [line("remove", r) for r in plan.remove] + [
        line("keep", r, plan.protected.get(r.id, "")) for r in plan.kept
    ]


def _prune(host, fmt: OutputFormat, trust_new_host: bool, *, keep, plan, yes, lock_wait) -> int:
    import sys

    con = stdout_console()
    keep = DEFAULT_KEEP if keep is None else keep
    shown: dict = {}

    def confirm(p) -> bool:
        shown["plan"] = True
        if fmt != OutputFormat.json:
            _print_plan(con, host.name, p)
        if yes:
            return True
        if fmt == OutputFormat.json:
            raise UsageError(
                "pruning needs confirmation and --format json does not prompt",
                fix="pass --yes, or --plan to see what it removes",
            )
        if not sys.stdin.isatty():
            raise UsageError(
                "pruning needs confirmation and stdin is not a terminal",
                fix="pass --yes, or --plan to see what it removes",
            )
        import typer

        return typer.confirm(f"Remove these {len(p.remove)} release(s)?", default=False)

    r = prune_releases(
        host, keep=keep, plan_only=plan, confirm=confirm, lock_wait_s=lock_wait, trust_new_host=trust_new_host
    )
    if fmt == OutputFormat.json:
        emit_json("releases", {"prune": r.to_json()})
        return ExitCode.OK
    for finding in r.lock_findings:
        sys.stderr.write(f"ddtctl: warning: {finding}\n")
    if not shown:
        _print_plan(con, host.name, r.plan)
    con.print(
        {
            "planned": "plan only (--plan): nothing removed",
            "nothing": f"nothing to prune: {len(r.plan.kept)} release(s), --keep {keep}",
            "aborted": "aborted: nothing removed",
            "pruned": f"removed {len(r.removed)} release(s) and {r.dropped_objects} store object(s) no "
            "release uses any more",
        }[r.status],
        markup=False,
    )
    return ExitCode.OK


def _print_plan(con, host: str, plan) -> None:
    if not plan.remove:
        return
    con.print(
        f"releases on {host}: remove {len(plan.remove)}, keep {len(plan.kept)} "
        f"(--keep {plan.keep}; sweep points go first, the current release and the rollback target stay):",
        markup=False,
    )
    for line in _plan_lines(plan):
        con.print(line, markup=False)
