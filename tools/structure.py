#!/usr/bin/env python3
"""Issue #33's structure figures over ddtctl/ (the payload and the generated completion snapshot aside):

- import circles: groups of modules that import each other, at module head or inside functions (strongly
  connected components of the import graph with more than one module; `if TYPE_CHECKING:` imports left out, as
  they never run);
- internal imports inside function bodies, as a share of all ddtctl imports;
- functions of McCabe complexity above 10 (radon's grade C or worse, counted by ruff's C901), as a share of
  all functions;
- imports against the layering: an import (at module head or inside a function) from a module of a lower layer
  of LAYERS to one of a higher layer. LAYERS is the one classification; the README's layer list (section
  "Layout") says the same, and tests/test_structure.py holds the two equal.

Usage: python tools/structure.py [--json] [--list]
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "ddtctl"
SKIP = ("payload/", "cli/_completion_tree.py")
# Data modules that import nothing: an import of one is an edge to a leaf (no circle), not to its package.
LEAVES = ("ddtctl.cli._completion_tree",)


# The layers, ground floor first: a module may import from its own layer and the layers below it. Names are
# relative to ddtctl (`ddtctl` is the package's own __init__); `X.*` is a package's modules, `X*` a glob. A
# module takes the most specific pattern that matches it: an exact name, else the longest pattern.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground floor", ("ddtctl", "errors", "findings", "paths", "safeio", "procs", "elsewhere", "report",
                      "fix_safety", "yamledit", "hub", "model_facts", "flag_typing", "argv_parser",
                      "sglang_config", "schema", "schema.*")),
    ("inputs", ("argv", "launch_tokens", "flags", "profile", "profile_*", "server_argv",
                "schema.profile_schema", "schema.hosts", "remote.inventory", "remote.inventory.*",
                "tune.space")),
    ("rules", ("rules", "rules.*")),
    ("local work", ("validate*", "fix", "rule_select", "repo_config", "sarif", "render*", "dryrun",
                    "diffflags", "profilediff", "migrate", "envs", "bridge", "bridge.*", "overlay",
                    "overlay.*", "kernels", "kernels.*")),
    ("hosts", ("remote", "remote.*", "deploy", "deploy.*", "render_host", "doctor*", "tune", "tune.*")),
    ("cli", ("cli", "cli.*", "__main__")),
)


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a ddtctl module (full dotted name), or None when no pattern matches."""
    rel = "ddtctl" if module == "ddtctl" else module.removeprefix("ddtctl.")
    best: tuple[tuple[bool, int], int] | None = None
    for i, (_, patterns) in enumerate(LAYERS):
        for pat in patterns:
            if fnmatch.fnmatchcase(rel, pat):
                key = ("*" not in pat, len(pat))
                if best is None or key > best[0]:
                    best = (key, i)
    return None if best is None else best[1]


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith(SKIP):
            continue
        name = "ddtctl." + rel.removesuffix(".py").replace("/", ".")
        out[name.removesuffix(".__init__")] = path
    return out


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    if name.startswith(LEAVES):
        return None
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path, module: str, mods: dict[str, Path]) -> list[tuple[str, bool, int]]:
    """(imported ddtctl module, inside a function?, line) for each import statement's targets."""
    tree = ast.parse(path.read_text())
    inside: set[int] = set()
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only |= {id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:  # annotations only: no import at run time, no circle
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts if is_pkg else parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            if t.startswith("ddtctl"):
                hit = _resolve(t, mods)
                if hit and hit != module:
                    out.append((hit, id(node) in inside, node.lineno))
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def over_ten() -> list[tuple[str, str, int]]:
    """(module path, function, McCabe complexity) above 10 (radon's grade C or worse), counted by ruff's C901 as
    `make lint` counts it (its per-file ignores apply: ddtree/core.py ships byte-identical in the payload)."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(PKG), "--select", "C901", "--config",
                           "lint.mccabe.max-complexity=10", "--output-format", "json", "-q"],
                          capture_output=True, text=True, cwd=ROOT)
    out = []
    for item in json.loads(done.stdout or "[]"):
        m = re.match(r"`(.+)` is too complex \((\d+) > 10\)", item["message"])
        if m:
            out.append((Path(item["filename"]).relative_to(PKG).as_posix(), m.group(1), int(m.group(2))))
    return out


def function_count(mods: dict[str, Path]) -> int:
    return sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in mods.values()
               for n in ast.walk(ast.parse(p.read_text())))


def figures() -> dict:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    total = inside = 0
    against: list[tuple[str, int, str, str]] = []  # (file, line, importer, imported), once a statement
    seen: set[tuple[Path, int, str]] = set()
    for m, path in mods.items():
        for target, in_fn, line in _imports(path, m, mods):
            graph[m].add(target)
            total += 1
            inside += in_fn
            low, high = layer_of(m), layer_of(target)
            if low is not None and high is not None and high > low and (path, line, target) not in seen:
                seen.add((path, line, target))
                against.append((path.relative_to(ROOT).as_posix(), line, m, target))
    unclassified = sorted(m for m in mods if layer_of(m) is None)
    funcs = function_count(mods)
    complex_ = over_ten()
    found = circles(graph)
    return {"modules": len(mods), "import_circles": len(found), "modules_in_circles": sum(map(len, found)),
            "circles": found, "internal_imports": total, "inside_functions": inside,
            "inside_functions_pct": round(100 * inside / max(total, 1), 1), "functions": funcs,
            "complexity_over_10": len(complex_), "complexity_over_10_pct": round(100 * len(complex_) / funcs, 1),
            "complex": sorted(complex_, key=lambda f: -f[2]), "against_layers": len(against),
            "layer_violations": against, "unclassified": unclassified}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--list", action="store_true",
                    help="name the circles, the imports against the layering and the complex functions")
    args = ap.parse_args(argv)
    f = figures()
    if args.json:
        print(json.dumps(f, indent=1))
        return 0
    print(f"modules {f['modules']}; import circles {f['import_circles']} ({f['modules_in_circles']} modules); "
          f"internal imports inside functions {f['inside_functions']}/{f['internal_imports']} "
          f"({f['inside_functions_pct']}%); functions above McCabe 10 {f['complexity_over_10']}/{f['functions']} "
          f"({f['complexity_over_10_pct']}%); imports against the layering {f['against_layers']}"
          + (f"; modules in no layer {len(f['unclassified'])}" if f["unclassified"] else ""))
    if args.list:
        for c in f["circles"]:
            print("circle: " + " <-> ".join(c))
        names = [name for name, _ in LAYERS]
        for file, line, m, target in f["layer_violations"]:
            print(f"against the layering: {file}:{line} {m} ({names[layer_of(m)]}) imports {target} "
                  f"({names[layer_of(target)]})")
        for m in f["unclassified"]:
            print(f"in no layer: {m}")
        for m, name, c in f["complex"]:
            print(f"complexity {c:>3} {m}.{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
