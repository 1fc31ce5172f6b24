"""`ddtctl validate --inventory hosts.yaml`: the inventory file itself (ddtctl/remote/inventory/check.py), one
line per error; exit 0 when it is sound, 2 when it is not (as every command reading it would stop)."""

from __future__ import annotations

import sys

from ddtctl.cli.term import Term
from ddtctl.errors import ExitCode, UsageError, printable
from ddtctl.remote.inventory.check import check_inventory
from ddtctl.report import FindingRecord, emit, github_annotation


def run_validate_inventory(path: str, *, output: str, alone: bool) -> int:
    if not alone:
        raise UsageError(
            "--inventory checks the inventory file alone",
            fix="ddtctl validate --inventory hosts.yaml, and profiles in a command of their own",
        )
    if output not in ("text", "json", "github"):
        raise UsageError(f"--format {output}: --inventory reports text, json or github", fix="--format json")
    check = check_inventory(path)
    code = ExitCode.OK if check.ok else ExitCode.USAGE
    if output == "json":
        emit("validate", {"inventory": check.to_json()}, exit_code=code)
        return code
    if output == "github":
        for err in check.errors:
            rec = FindingRecord(id=None, severity="error", file=check.path, message=err.message, fix=err.fix)
            sys.stdout.write(github_annotation(rec) + "\n")
        return code

    t = Term()
    source = printable(check.path)
    if check.ok:
        hosts = ", ".join(
            printable(h) + (f" ({printable(check.profiles[h])})" if h in check.profiles else "")
            for h in check.hosts
        )
        t.line(f"{t.green('✓')} {source}: an inventory of {len(check.hosts)} host(s): {hosts or 'none'}")
    else:
        t.line(f"{t.red('✗')} {source}: {len(check.errors)} error(s)")
        for err in check.errors:
            t.line(f"  {t.red(err.one_line())}")
    t.flush()
    return code
