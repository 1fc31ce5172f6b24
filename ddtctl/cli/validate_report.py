"""The body of `ddtctl validate`: run the checks, print text or JSON, return the exit code.

Free of typer and rich on purpose: the start-up fast path (fastpath.py) calls it directly.
"""

from __future__ import annotations

import json
import sys


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def run_validate(paths: list[str], *, argv: bool, gpu: str | None, sglang: str | None, fix: bool, output: str,
                 quiet: bool) -> int:
    """The command body, shared by the typer command and the start-up fast path (ddtctl/cli/fastpath.py)."""
    from ddtctl import PINNED_SGLANG
    from ddtctl.errors import UsageError
    from ddtctl.validate import validate_argv, validate_paths

    if argv:
        if not paths:
            raise UsageError("--argv needs the SGLang arguments after `--`",
                             fix="ddtctl validate --argv -- --model-path /m --tp-size 8")
        results = [validate_argv(paths, gpu=gpu, sglang=sglang or PINNED_SGLANG)]
    else:
        if not paths:
            raise UsageError("no profile given", fix="ddtctl validate profiles/  (or a file, or a glob)")
        results = validate_paths(paths, gpu=gpu)
        if fix:
            results = _apply_fixes(results, gpu)
    if output == "json":
        print_json([r.as_json() for r in results])
    else:
        _print_results(results, quiet=quiet)
    if any(r.error for r in results):
        return 2
    return 0 if all(r.valid for r in results) else 1


def _apply_fixes(results, gpu):
    """Apply each invalid profile's derivable fixes in place: the edit is made on the text that was validated,
    checked (it must parse to the intended profile), and written by ddtctl.safeio.rewrite (mode, symlink, line
    endings kept; refused when the file is read-only or changed since it was read)."""
    import sys

    from ddtctl.errors import DdtctlError
    from ddtctl.fix import apply_fixes, verify
    from ddtctl.profile import parse_profile_text
    from ddtctl.safeio import rewrite
    from ddtctl.validate import validate_path

    out = []
    for result in results:
        if result.error or result.valid or result.profile is None or result.raw is None or result.text is None:
            out.append(result)
            continue
        text = result.text.replace("\r\n", "\n")  # edited with \n; rewrite() writes the file's own line endings
        doc = parse_profile_text(text, result.source)
        fixed = apply_fixes(text, result.findings, doc.lines)
        rules = ", ".join(sorted(set(fixed.applied)))
        refused = fixed.refused or (verify(doc.data, fixed.text, fixed.edits, result.source) if fixed.changed
                                    else None)
        if refused:
            result.fix_refused = f"cannot apply {rules} safely: {refused}; the file is unchanged (edit it by hand)"
            out.append(result)
            continue
        if fixed.changed:
            try:
                rewrite(result.source, fixed.text, original=result.raw, what="profile")
            except DdtctlError as err:
                result.error = f"--fix not written: {err.one_line()}"
                out.append(result)
                continue
            sys.stderr.write(f"{result.source}: fixed {rules}\n")
            result = validate_path(result.source, gpu=gpu)
        out.append(result)
    return out


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
        t.line(f"{t.green('✓') if r.valid else t.red('✗')} {source}" + ("" if r.valid else ": " + t.red("invalid")))
        if r.fix_refused:
            t.line(f"  {t.red('--fix refused:')} {p(r.fix_refused)}")
        for f in r.findings:
            where = f"{source}:{f.line}" if f.line else source
            t.line(f"  {t.severity(f.severity)} {t.bold(f.rule)} {where}: {p(f.message)}")
            if f.fix:
                t.line(f"          {t.dim('fix:')} {p(f.fix)}")
    if len(results) > 1:
        t.line(f"{valid}/{len(results)} valid")
    t.flush()
