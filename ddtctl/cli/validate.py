"""`ddtctl validate`, `ddtctl rules`, `ddtctl explain`, `ddtctl schema`."""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

from ddtctl import PINNED_SGLANG
from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, emit_json, stdout_console
from ddtctl.errors import ExitCode, UsageError

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class ValidateFormat(str, Enum):
    """validate's --format: ReportFormat's, and SARIF."""

    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


@app.command()
def validate(
    paths: Optional[list[str]] = typer.Argument(
        None, help="Profile files, directories or globs (or, with --argv, the SGLang arguments after `--`)."
    ),
    argv: bool = typer.Option(
        False,
        "--argv",
        help="Validate a raw SGLang launch given after `--` (bare flags, `sglang serve ...`, "
        "`python3 -m sglang.launch_server ...`, with an `ENV=x` prefix; SGLang's --config FILE is read).",
    ),
    argv_file: Optional[str] = typer.Option(
        None,
        "--argv-file",
        help="Validate the SGLang launch line pasted in FILE (shell syntax; `\\` line continuations).",
    ),
    gpu: Optional[str] = typer.Option(
        None, "--gpu", help="GPU to check against (H200, B200, sm90...); default: the profile's hardware.gpu."
    ),
    sglang: Optional[str] = typer.Option(
        None, "--sglang", help="SGLang release for --argv (default: the pinned one)."
    ),
    fix: bool = typer.Option(False, "--fix", help="Apply the safe fixes to the files, keeping comments."),
    unsafe_fixes: bool = typer.Option(
        False,
        "--unsafe-fixes",
        help="With --fix: apply the unsafe fixes too (values ddtctl guesses, flags it removes).",
    ),
    diff: bool = typer.Option(
        False,
        "--diff",
        help="With --fix: print the edits as a unified diff; write nothing. Exit 1 when there is a diff "
        "(as ruff's --diff), 0 when none.",
    ),
    select: Optional[list[str]] = options.SELECT,
    ignore: Optional[list[str]] = options.IGNORE,
    statistics: bool = options.STATISTICS,
    output: ValidateFormat = typer.Option(
        ValidateFormat.text,
        "--format",
        help="text, json, github (GitHub Actions annotations, one per finding), or sarif (SARIF 2.1.0).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only invalid profiles."),
    sets: Optional[list[str]] = options.SET,
    inventory: Optional[str] = typer.Option(
        None,
        "--inventory",
        "-i",
        help="Check this inventory file (hosts.yaml) instead: its schema, every host's profile found and "
        "readable, no name given twice.",
    ),
) -> None:
    """Check launch profiles against the flag catalog and the constraint graph (fast; no GPU, no SGLang
    import).

    Settings come from [tool.ddtctl] in the nearest pyproject.toml or a .ddtctl.toml (it wins), found from the
    current directory upward: select, ignore, include and exclude (globs for the files found in a directory),
    gpu. Command-line flags override them.

    Exit codes: 0 all valid, 1 any invalid (with --fix --diff: a file would change), 2 usage or I/O error,
    7 a bad repository config. A directory's inventory (hosts.yaml) and tune search spaces are checked as
    what they are, not as profiles.
    """
    if inventory is not None:
        from ddtctl.cli.validate_inventory import run_validate_inventory

        alone = not (paths or argv or argv_file or fix or sets or statistics)
        raise typer.Exit(run_validate_inventory(inventory, output=output.value, alone=alone))
    from ddtctl.cli.validate_report import run_validate

    raise typer.Exit(
        run_validate(
            paths or [],
            argv=argv,
            gpu=gpu,
            sglang=sglang,
            fix=fix,
            output=output.value,
            quiet=quiet,
            diff=diff,
            unsafe_fixes=unsafe_fixes,
            ignore=ignore,
            argv_file=argv_file,
            select=select,
            statistics=statistics,
            sets=sets,
        )
    )


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@app.command("rules")
def list_rules(
    output: OutputFormat = options.FORMAT,
    coverage: bool = typer.Option(
        False,
        "--coverage",
        help="Map every raise/assert site of the pinned "
        "SGLang's resolver to a rule or an exemption (and, a second inventory, each site of its start "
        "path after the resolver); exit 1 if one is unmapped.",
    ),
) -> None:
    """List every rule of the constraint graph."""
    from ddtctl.rules import all_rules

    if coverage:
        from ddtctl.rules import coverage as cov
        from ddtctl.rules.launch import sites as launch

        rows = cov.classify(cov.sites(), cov.load_mapping())
        launch_rows = launch.classified()
        unmapped = any(m is None for _, m in rows) or any(m is None for _, m in launch_rows)
        code = ExitCode.INVALID if unmapped else ExitCode.OK
        if output == OutputFormat.json:
            sites = [{"key": s.key, "line": s.line, "mapped": m} for s, m in rows]
            launch_sites = [{"key": s.key, "line": s.line, "mapped": m} for s, m in launch_rows]
            emit_json("rules", {"sites": sites, "launch_sites": launch_sites}, code)
        else:
            print(cov.table(rows))
        raise typer.Exit(code)

    rules = all_rules()
    builtin = _builtin_rules()
    if output == OutputFormat.json:
        emit_json("rules", {"rules": [_rule_json(r) for r in builtin + rules]})
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("rule", style="bold")
    table.add_column("severity")
    table.add_column("what")
    table.add_column("SGLang", justify="center")
    for r in builtin + rules:
        table.add_row(
            r.id,
            f"[{_STYLE[r.severity]}]{r.severity}[/]",
            r.title,
            "✓" if r.sglang_enforces else "[magenta]stricter[/]",
        )
    stdout_console().print(table)


def _builtin_rules() -> list:
    """The documented checks of the flag reader (ddtctl.validate.BUILTIN_DOCS), shaped as rules."""
    from ddtctl.rules.engine import Rule
    from ddtctl.validate import BUILTIN_CHECKS, BUILTIN_DOCS

    return [
        Rule(
            id=rule_id,
            title=title,
            severity=BUILTIN_CHECKS[rule_id][0],
            reads=(),
            check=lambda ctx: (),
            doc=doc,
            sglang_enforces=BUILTIN_CHECKS[rule_id][1],
        )
        for rule_id, (title, doc) in BUILTIN_DOCS.items()
    ]


def _rule_json(r) -> dict:
    return {
        "id": r.id,
        "title": r.title,
        "severity": r.severity,
        "reads": list(r.reads),
        "needs": list(r.needs),
        "reference": r.reference,
        "sglang_enforces": r.sglang_enforces,
    }


_DDT000_DOC = (
    "Some rules need facts about the model (config.json), the draft model or the GPU. When those "
    "are unknown the rules are not run and this warning lists them.\nFix: make model.path a local "
    "directory with config.json, set model.architecture, set hardware.gpu, or fetch the host's "
    "configs with `ddtctl facts HOST`."
)


@app.command()
def explain(
    rule_id: str = typer.Argument(..., help="A rule id, e.g. DDT111."),
    output: OutputFormat = options.FORMAT,
) -> None:
    """Print a rule's documentation."""
    from ddtctl.rules import all_rules
    from ddtctl.rules.engine import RULES

    all_rules()
    key = rule_id.strip().upper()
    if key == "DDT000":
        if output == OutputFormat.json:
            emit_json(
                "explain",
                {
                    "id": key,
                    "title": "rules that could not run",
                    "severity": "warning",
                    "reads": [],
                    "needs": [],
                    "reference": None,
                    "sglang_enforces": False,
                    "doc": _DDT000_DOC,
                },
            )
            return
        typer.echo(f"DDT000  rules that could not run\n\n{_DDT000_DOC}")
        return
    r = RULES.get(key) or next((b for b in _builtin_rules() if b.id == key), None)
    if r is None:
        import difflib

        close = difflib.get_close_matches(key, list(RULES), n=3)
        raise UsageError(
            f"unknown rule {rule_id!r}",
            fix=f"did you mean {', '.join(close)}?" if close else "`ddtctl rules` lists them",
        )
    if output == OutputFormat.json:
        emit_json("explain", dict(_rule_json(r), doc=r.doc))
        return
    lines = [f"{r.id}  {r.title}", f"severity: {r.severity}"]
    if r.reads:
        lines.append("reads: " + ", ".join("--" + d.replace("_", "-") for d in r.reads))
    if r.needs:
        lines.append("needs facts: " + ", ".join(r.needs))
    lines.append(
        "enforced by SGLang 0.5.23 at launch: "
        + ("yes" if r.sglang_enforces else "no (ddtctl is stricter by design)")
    )
    if r.reference:
        lines.append(f"reference: {r.reference}")
    lines += ["", r.doc]
    typer.echo("\n".join(lines))


@app.command()
def schema(
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout."),
    sglang: Optional[str] = typer.Option(None, "--sglang", help="SGLang release whose flags type `server:`."),
) -> None:
    """Write the JSON Schema of a profile (for editors: yaml-language-server modeline)."""
    import json

    from ddtctl.schema.profile_schema import profile_json_schema

    text = json.dumps(profile_json_schema(sglang or PINNED_SGLANG), indent=2) + "\n"
    if out:
        from ddtctl.safeio import write_new

        write_new(out, text)  # atomic; a missing directory or a write failure is a one-line error (exit 2)
        typer.echo(f"wrote {out}", err=True)
    else:
        typer.echo(text, nl=False)
