#!/usr/bin/env python3
"""Issue #19's size limits over ddtctl/: modules over 600 lines and functions over 80, aside from the payload, the
generated completion snapshot, the code that runs elsewhere (ddtctl/elsewhere.py says which) and the Triton kernel bodies. A function's length
is its code's (signature and docstring aside). Prints the offenders; exit 1 when there are any.  Usage: python tools/size_limits.py [--max-module 600] [--max-function 80]"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ddtctl"
GENERATED = {"cli/_completion_tree.py"}


def run_elsewhere() -> set[str]:
    """ddtctl/elsewhere.py's files and trees whose constraints, not these limits, decide their shape."""
    sys.path.insert(0, str(ROOT.parent))
    try:
        from ddtctl.elsewhere import size_exempt
    finally:
        sys.path.remove(str(ROOT.parent))
    return size_exempt()


def _is_triton_kernel(fn: ast.AST) -> bool:
    decos = getattr(fn, "decorator_list", [])
    return any("triton" in ast.unparse(d) or ast.unparse(d).endswith("jit") for d in decos)


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of the function's code: from its first statement after the docstring to its end. The signature is
    left out (a typer command declares one option per line, which is a declaration, not logic), and so is the
    docstring."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:] or body
    return (fn.end_lineno or fn.lineno) - body[0].lineno + 1


def offenders(max_module: int, max_function: int) -> list[str]:
    out = []
    exempt = run_elsewhere()
    trees = tuple(p for p in exempt if p.endswith("/"))
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in exempt or rel in GENERATED or rel.startswith(trees):
            continue
        text = path.read_text()
        n = text.count("\n")
        if n > max_module:
            out.append(f"ddtctl/{rel}: {n} lines (> {max_module})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_triton_kernel(node):
                length = _body_lines(node)
                if length > max_function:
                    out.append(f"ddtctl/{rel}:{node.lineno} {node.name}: {length} lines (> {max_function})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-module", type=int, default=600)
    ap.add_argument("--max-function", type=int, default=80)
    args = ap.parse_args(argv)
    found = offenders(args.max_module, args.max_function)
    print("\n".join(found) if found else "size limits: ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
