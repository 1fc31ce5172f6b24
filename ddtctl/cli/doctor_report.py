"""`ddtctl doctor`'s text output: one line per check (status, name, what was found), its fix under it, and the
counts. The command itself is registered in ddtctl/cli/remote.py; the checks are ddtctl/doctor_checks.py."""

from __future__ import annotations

from ddtctl.cli._app import OutputFormat, emit_json, stdout_console
from ddtctl.doctor import DoctorReport

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skipped": "dim"}


def show(report: DoctorReport, fmt: OutputFormat) -> None:
    """The report in the JSON envelope (`ok` follows its exit code), or as text."""
    if fmt == OutputFormat.json:
        emit_json("doctor", report.to_json(), report.exit_code)
    else:
        print_report(report)


def print_report(report: DoctorReport) -> None:
    from rich.markup import escape

    con = stdout_console()
    against = (
        f" against {escape(report.profile)}"
        if report.profile
        else " (no profile: host checks only; pass --profile P or set the host's profile: in the inventory)"
    )
    con.print(f"[bold]doctor {escape(report.host)}[/bold] ({escape(report.address)}){against}")
    width = max(len(r.name) for r in report.rows)
    for r in report.rows:
        status = str(r.status)
        con.print(f"  [{_STYLE[status]}]{status:<7}[/] {r.name:<{width}}  {escape(r.found)}")
        if r.fix and r.status != "ok":
            con.print(f"  {'':<7} {'':<{width}}  fix: {escape(r.fix)}")
    counts = report.counts()
    con.print(", ".join(f"{n} {s}" for s, n in counts.items()))
