"""The body of `ddtctl validate`: run the checks, print text, JSON (ddtctl.report's envelope) or GitHub
annotations, return the exit code.

Free of typer and rich on purpose: the start-up fast path (fastpath.py) calls it directly.
"""

from __future__ import annotations

import sys

from ddtctl.errors import ExitCode


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
) -> int:
    """The command body, shared by the typer command and the start-up fast path (ddtctl/cli/fastpath.py)."""
    from ddtctl import PINNED_SGLANG
    from ddtctl.errors import UsageError
    from ddtctl.validate import parse_ignore_option, validate_argv, validate_paths

    for option, given in (("--diff", diff), ("--unsafe-fixes", unsafe_fixes)):
        if given and not fix:
            raise UsageError(f"{option} needs --fix", fix=f"ddtctl validate --fix {option} PROFILE")
    ignores = parse_ignore_option(ignore)
    if argv_file is not None:
        from ddtctl.argv import read_argv_file

        if argv or paths or fix:
            raise UsageError(
                "--argv-file takes the whole launch from the file",
                fix="ddtctl validate --argv-file launch.sh  (no --argv, --fix or other arguments)",
            )
        tokens = read_argv_file(argv_file)
        results = [
            validate_argv(tokens, gpu=gpu, sglang=sglang or PINNED_SGLANG, ignore=ignores, source=argv_file)
        ]
    elif argv:
        if not paths:
            raise UsageError(
                "--argv needs the SGLang arguments after `--`",
                fix="ddtctl validate --argv -- --model-path /m --tp-size 8",
            )
        results = [validate_argv(paths, gpu=gpu, sglang=sglang or PINNED_SGLANG, ignore=ignores)]
    else:
        if not paths:
            raise UsageError("no profile given", fix="ddtctl validate profiles/  (or a file, or a glob)")
        results = validate_paths(paths, gpu=gpu, ignore=ignores)
        if fix:
            results = _apply_fixes(
                results, gpu, unsafe=unsafe_fixes, dry_run=diff, ignore=ignores, say_fixed=output != "json"
            )
    code = _exit_code(results)
    if output == "json":
        from ddtctl.report import emit

        emit("validate", {"profiles": [r.as_json() for r in results]}, exit_code=code)
    elif output == "github":
        _print_annotations(results)
    elif diff:
        _print_diffs(results)
    else:
        _print_results(results, quiet=quiet)
    return code


def _exit_code(results) -> int:

    if any(r.error for r in results):
        return ExitCode.USAGE
    return ExitCode.OK if all(r.valid for r in results) else ExitCode.INVALID


def _line_column(path: str | None, where: str | None) -> tuple[int | None, int | None]:
    """`FILE:LINE[:COLUMN]` of an error in the profile `path` (a YAML error says where it stopped)."""
    if not path or not where or not where.startswith(path + ":"):
        return None, None
    numbers = [int(n) for n in where[len(path) + 1 :].split(":") if n.isdigit()]
    return (numbers[0] if numbers else None), (numbers[1] if len(numbers) > 1 else None)


def _print_annotations(results) -> None:
    """--format github: one workflow command per finding (and per profile that could not be read)."""
    from ddtctl.report import FindingRecord, finding_record, github_annotation, line_first_columns

    lines = []
    for r in results:
        if r.error:
            err = r.failure
            line, column = _line_column(r.path, err.where if err else None)
            lines.append(
                github_annotation(
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
            )
        if r.fix_refused:
            lines.append(
                github_annotation(
                    FindingRecord(
                        id=None, severity="error", file=r.path, message=f"--fix refused: {r.fix_refused}"
                    )
                )
            )
        firsts = line_first_columns(r.key_columns)
        lines += [
            github_annotation(finding_record(f, file=r.path, key_columns=r.key_columns, first_columns=firsts))
            for f in r.findings
        ]
    sys.stdout.write("".join(line + "\n" for line in lines))


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
        t.line(
            f"{t.green('✓') if r.valid else t.red('✗')} {source}"
            + ("" if r.valid else ": " + t.red("invalid"))
        )
        if r.fix_refused:
            t.line(f"  {t.red('--fix refused:')} {p(r.fix_refused)}")
        if r.unapplied:
            t.line(f"  {t.dim('unsafe fixes not applied:')} {', '.join(r.unapplied)} (add --unsafe-fixes)")
        for f in r.findings:
            where = f"{source}:{f.line}" if f.line else source
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
    if len(results) > 1:
        t.line(f"{valid}/{len(results)} valid")
    t.flush()
