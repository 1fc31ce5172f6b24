"""The body of `ddtctl validate`: read the repository config (ddtctl.repo_config), run the checks, print text,
--statistics, JSON (ddtctl.report's envelope), GitHub annotations or SARIF (ddtctl.sarif), return the exit
code.

Free of typer and rich on purpose: the start-up fast path (fastpath.py) calls it directly.
"""

from __future__ import annotations

import sys

from ddtctl import PINNED_SGLANG, __version__
from ddtctl.argv import read_argv_file
from ddtctl.errors import ExitCode, UsageError
from ddtctl.profile_overrides import parse_sets, refuse_sets
from ddtctl.repo_config import discover, find_config
from ddtctl.report import FindingRecord, emit, finding_record, github_annotation, line_first_columns
from ddtctl.rule_select import Layer, cli_layer, resolve, rule_meta, shown_path
from ddtctl.validate import validate_argv, validate_path


def run_validate(
    paths: list[str],
    *,
    argv: bool,
    gpu: str | None,
    sglang: str | None,
    fix: bool,
    output: str,
    quiet: bool,
    diff: bool = False,
    unsafe_fixes: bool = False,
    ignore: list[str] | None = None,
    argv_file: str | None = None,
    select: list[str] | None = None,
    statistics: bool = False,
    sets: list[str] | None = None,
) -> int:
    """The command body, shared by the typer command and the start-up fast path (ddtctl/cli/fastpath.py)."""
    _check_usage(fix=fix, diff=diff, unsafe_fixes=unsafe_fixes, statistics=statistics, output=output)
    overrides = _overrides(sets, raw_launch=argv or argv_file is not None, fix=fix)
    config = find_config()
    ignores = _selection(config, select, ignore)
    gpu = gpu or (config.gpu if config else None)
    results = _results(
        paths,
        config,
        argv=argv,
        argv_file=argv_file,
        gpu=gpu,
        sglang=sglang,
        ignores=ignores,
        fix=fix,
        overrides=overrides,
    )
    if fix and not argv:
        results = _apply_fixes(
            results, gpu, unsafe=unsafe_fixes, dry_run=diff, ignore=ignores, say_fixed=output != "json"
        )
    code = _exit_code(results, diff=diff)
    if output == "json":
        body: dict = {"profiles": [r.as_json() for r in results]}
        if statistics:
            body["statistics"] = _statistics(results)
        emit("validate", body, exit_code=code)
    elif output == "github":
        _print_annotations(results)
    elif output == "sarif":
        _print_sarif(results, code)
    elif diff:
        _print_diffs(results)
    elif statistics:
        _print_statistics(results)
    else:
        if not results:
            sys.stderr.write(
                f"warning: no profiles to check: {_excluded_by(config)} leaves out every file found\n"
            )
        _print_results(results, quiet=quiet)
    return code


def _check_usage(*, fix: bool, diff: bool, unsafe_fixes: bool, statistics: bool, output: str) -> None:
    for option, given in (("--diff", diff), ("--unsafe-fixes", unsafe_fixes)):
        if given and not fix:
            raise UsageError(f"{option} needs --fix", fix=f"ddtctl validate --fix {option} PROFILE")
    if statistics and (diff or output not in ("text", "json")):
        raise UsageError(
            "--statistics counts findings in text or JSON", fix="leave out --diff and --format github|sarif"
        )


def _selection(config, select: list[str] | None, ignore: list[str] | None) -> dict[str, str]:
    """{rule id: reason} of the rules not reported: the configuration's select/ignore, then the command line's
    (ddtctl.rule_select)."""
    cli = cli_layer(select, ignore)
    if config is None and cli.select is None and not cli.ignore:
        return {}
    layers = []
    if config is not None:
        where = shown_path(config.path)
        layers.append(
            Layer(
                select=config.select,
                ignore=config.ignore,
                select_reason=f"not selected (select in {where})",
                ignore_reason=f"ignore in {where}",
            )
        )
    return resolve([*layers, cli])


def _overrides(sets: list[str] | None, *, raw_launch: bool, fix: bool) -> list:
    """`--set KEY=VALUE` (ddtctl.profile_overrides): for profiles only, and not with --fix (which edits the
    file the overrides leave unchanged)."""
    overrides = parse_sets(sets)
    if raw_launch:
        refuse_sets(
            overrides, "a raw SGLang launch has no profile to change", "change the arguments themselves"
        )
    if fix:
        refuse_sets(overrides, "--fix edits the file, --set only this run", "validate with --set, then edit")
    return overrides


def _results(
    paths, config, *, argv: bool, argv_file: str | None, gpu, sglang, ignores, fix: bool, overrides=()
) -> list:
    if argv_file is not None:
        if argv or paths or fix:
            raise UsageError(
                "--argv-file takes the whole launch from the file",
                fix="ddtctl validate --argv-file launch.sh  (no --argv, --fix or other arguments)",
            )
        tokens = read_argv_file(argv_file)
        return [
            validate_argv(tokens, gpu=gpu, sglang=sglang or PINNED_SGLANG, ignore=ignores, source=argv_file)
        ]
    if argv:
        if not paths:
            raise UsageError(
                "--argv needs the SGLang arguments after `--`",
                fix="ddtctl validate --argv -- --model-path /m --tp-size 8",
            )
        return [validate_argv(paths, gpu=gpu, sglang=sglang or PINNED_SGLANG, ignore=ignores)]
    if not paths:
        raise UsageError("no profile given", fix="ddtctl validate profiles/  (or a file, or a glob)")
    return [validate_path(p, gpu=gpu, ignore=ignores, overrides=overrides) for p in discover(paths, config)]


def _excluded_by(config) -> str:
    return f"include/exclude in {shown_path(config.path)}" if config else "the configuration"


def _exit_code(results, *, diff: bool = False) -> int:
    """--fix --diff as ruff's --diff: 1 when a file would change (or its fix is refused), else 0."""
    if any(r.error for r in results):
        return ExitCode.USAGE
    if diff:
        return ExitCode.INVALID if any(r.diff or r.fix_refused for r in results) else ExitCode.OK
    return ExitCode.OK if all(r.valid for r in results) else ExitCode.INVALID


def _line_column(path: str | None, where: str | None) -> tuple[int | None, int | None]:
    """`FILE:LINE[:COLUMN]` of an error in the profile `path` (a YAML error says where it stopped)."""
    if not path or not where or not where.startswith(path + ":"):
        return None, None
    numbers = [int(n) for n in where[len(path) + 1 :].split(":") if n.isdigit()]
    return (numbers[0] if numbers else None), (numbers[1] if len(numbers) > 1 else None)


def _failures(r) -> list:
    """Records of what stopped a profile: it could not be read, or --fix was refused."""
    out = []
    if r.error:
        err = r.failure
        line, column = _line_column(r.path, err.where if err else None)
        out.append(
            FindingRecord(
                id=None,
                severity="error",
                file=r.path,
                line=line,
                column=column,
                message=err.message if err else r.error,
                fix=err.fix if err else None,
            )
        )
    if r.fix_refused:
        out.append(
            FindingRecord(id=None, severity="error", file=r.path, message=f"--fix refused: {r.fix_refused}")
        )
    return out


def _records(r) -> list:
    """The findings of one result as ddtctl.report records (column of the key where known)."""
    firsts = line_first_columns(r.key_columns)
    return [
        finding_record(f, file=r.path, key_columns=r.key_columns, first_columns=firsts) for f in r.findings
    ]


def _print_annotations(results) -> None:
    """--format github: one workflow command per finding (and per profile that could not be read)."""
    lines = [github_annotation(rec) for r in results for rec in (*_failures(r), *_records(r))]
    sys.stdout.write("".join(line + "\n" for line in lines))


def _print_sarif(results, code: int) -> None:
    """--format sarif: one SARIF 2.1.0 log (ddtctl.sarif)."""
    import json

    from ddtctl.sarif import sarif_log

    findings = [rec for r in results for rec in _records(r)]
    failures = [rec for r in results for rec in _failures(r)]
    log = sarif_log(findings, failures, exit_code=code, version=__version__)
    sys.stdout.write(json.dumps(log, indent=2) + "\n")
    sys.stdout.flush()


def _statistics(results) -> list[dict]:
    """--statistics: per rule id, how many findings are reported (ignored ones not counted), most first."""
    counts: dict[str, int] = {}
    fixable: dict[str, set[str]] = {}
    for r in results:
        for f in r.findings:
            counts[f.rule] = counts.get(f.rule, 0) + 1
            if f.fixable:
                fixable.setdefault(f.rule, set()).add(f.fixable)
    rows = []
    for rule_id, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        title, severity, _, _ = rule_meta(rule_id)
        kinds = fixable.get(rule_id, set())
        fix = "safe" if "safe" in kinds else ("unsafe" if kinds else None)
        rows.append({"id": rule_id, "title": title, "severity": severity, "count": count, "fixable": fix})
    return rows


def _print_statistics(results) -> None:
    """Text --statistics, as ruff's: count, rule id, [fix] / [unsafe fix], title; one line a rule."""
    from ddtctl.errors import printable as p

    for r in results:
        if r.error:
            sys.stderr.write(f"{p(r.source)}: {p(r.error)}\n")
    rows = _statistics(results)
    width = max((len(str(row["count"])) for row in rows), default=1)
    tags = {"safe": "[fix] ", "unsafe": "[unsafe fix] "}
    sys.stdout.write(
        "".join(
            f"{row['count']:>{width}}\t{row['id']}\t{tags.get(row['fixable'] or '', '')}{row['title']}\n"
            for row in rows
        )
    )
    sys.stdout.flush()


def _apply_fixes(
    results, gpu, *, unsafe: bool = False, dry_run: bool = False, ignore=None, say_fixed: bool = True
):
    """--fix (ddtctl.fix.fix_results); `say_fixed`: print "fixed DDT111" on stderr (text output; JSON lists
    them in the result's `fixed`)."""
    from ddtctl.fix import fix_results

    def said(source: str, rules: str) -> None:
        sys.stderr.write(f"{source}: fixed {rules}\n")

    return fix_results(
        results, gpu, unsafe=unsafe, dry_run=dry_run, ignore=ignore, on_fixed=said if say_fixed else None
    )


def _print_diffs(results) -> None:
    """--fix --diff: the diffs on stdout (a patch), what remains on stderr."""
    from ddtctl.errors import printable as p

    for r in results:
        if r.diff:
            sys.stdout.write(r.diff)
    sys.stdout.flush()
    for r in results:
        source = p(r.source)
        if r.error:
            sys.stderr.write(f"{source}: {p(r.error)}\n")
            continue
        if r.fix_refused:
            sys.stderr.write(f"{source}: --fix refused: {p(r.fix_refused)}\n")
        if r.unapplied:
            sys.stderr.write(
                f"{source}: unsafe fixes not applied ({', '.join(r.unapplied)}): add --unsafe-fixes\n"
            )
        errors = sorted({f.rule for f in r.errors})
        if errors:
            sys.stderr.write(f"{source}: {len(r.errors)} error(s) would remain ({', '.join(errors)})\n")


def _print_results(results, *, quiet: bool) -> None:
    """Plain text with ANSI colour on a terminal (no rich: this is the hot path of every pre-commit run)."""
    from ddtctl.cli.term import Term
    from ddtctl.errors import printable as p

    t = Term()
    valid = sum(1 for r in results if r.valid and not r.error)
    for r in results:
        source = p(r.source)  # file names, keys and values come from the input: no raw control characters out
        if r.error:
            t.line(f"{t.red('✗')} {source}: {t.red(p(r.error))}")
            continue
        if r.valid and quiet:
            continue
        if r.note:  # not a profile (validate_kinds): checked as what it is
            t.line(f"{t.dim('-')} {source}: {t.dim(p(r.note))}")
            continue
        t.line(
            f"{t.green('✓') if r.valid else t.red('✗')} {source}"
            + ("" if r.valid else ": " + t.red("invalid"))
        )
        if r.fix_refused:
            t.line(f"  {t.red('--fix refused:')} {p(r.fix_refused)}")
        if r.unapplied:
            t.line(f"  {t.dim('unsafe fixes not applied:')} {', '.join(r.unapplied)} (add --unsafe-fixes)")
        for f, rec in zip(r.findings, _records(r), strict=True):
            where = f"{source}:{f.line}:{rec.column or 1}" if f.line else source
            tag = {"safe": " [fix]", "unsafe": " [unsafe fix]"}.get(f.fixable or "", "")
            t.line(
                f"  {t.severity(f.severity)} {t.bold(f.rule)} {where}: {p(f.message)}"
                + (t.dim(tag) if tag else "")
            )
            if f.fix:
                t.line(f"          {t.dim('fix:')} {p(f.fix)}")
        if r.ignored:
            count = f"{len(r.ignored)} finding{'s' if len(r.ignored) != 1 else ''} ignored"
            t.line(f"  {t.dim(count)} ({', '.join(sorted({f.rule for f, _ in r.ignored}))})")
    others = [r for r in results if r.kind != "profile"]  # inventories, search spaces (validate_kinds)
    if len(results) > 1:
        bad = sum(1 for r in others if r.error)
        t.line(
            f"{valid - len(others) + bad}/{len(results) - len(others)} valid"
            + (f"; {len(others)} not a profile" + (f" ({bad} with errors)" if bad else "") if others else "")
        )
    t.flush()
