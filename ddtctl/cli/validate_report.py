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
    from pathlib import Path

    from ddtctl.fix import apply_fixes
    from ddtctl.profile import parse_profile_text
    from ddtctl.validate import validate_path

    out = []
    for result in results:
        if result.error or result.valid or result.profile is None:
            out.append(result)
            continue
        path = Path(result.source)
        text = path.read_text(encoding="utf-8")
        doc = parse_profile_text(text, result.source)
        fixed = apply_fixes(text, result.findings, doc.lines)
        if fixed.changed:
            tmp = path.with_name(f".{path.name}.ddtctl-fix")
            tmp.write_text(fixed.text, encoding="utf-8")
            tmp.replace(path)
            import sys

            sys.stderr.write(f"{result.source}: fixed {', '.join(sorted(set(fixed.applied)))}\n")
            result = validate_path(path, gpu=gpu)
        out.append(result)
    return out


def _print_results(results, *, quiet: bool) -> None:
    """Plain text with ANSI colour on a terminal (no rich: this is the hot path of every pre-commit run)."""
    from ddtctl.cli.term import Term

    t = Term()
    valid = sum(1 for r in results if r.valid and not r.error)
    for r in results:
        if r.error:
            t.line(f"{t.red('✗')} {r.source}: {t.red(r.error)}")
            continue
        if r.valid and quiet:
            continue
        t.line(f"{t.green('✓') if r.valid else t.red('✗')} {r.source}" + ("" if r.valid else ": " + t.red("invalid")))
        for f in r.findings:
            where = f"{r.source}:{f.line}" if f.line else r.source
            t.line(f"  {t.severity(f.severity)} {t.bold(f.rule)} {where}: {f.message}")
            if f.fix:
                t.line(f"          {t.dim('fix:')} {f.fix}")
    if len(results) > 1:
        t.line(f"{valid}/{len(results)} valid")
    t.flush()
