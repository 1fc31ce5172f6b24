"""Raise-site coverage: every raise / assert / exit reachable from SGLang's prepare_server_args +
resolve_once + check_server_args in the pinned wheel, each mapped to a ddtctl rule or an exemption
(ddtctl/rules/coverage.yaml).

    python tools/raise_sites.py [--sglang-root DIR] [--all] [--json] [--overrides]
        (or: ddtctl rules --coverage)

The walk is static (ast): a function index over the resolution code (sglang/srt/arg_groups/**, server_args.py,
configs/model_config.py, speculative/spec_info.py, spec_registry.py, runtime_context.py), roots = the three
entry points, run_resolution_pipeline and every @register_post_process pass; the closure follows calls and
function references by name within that index (an over-approximation). A site's key is
`file::function::kind::message` (message = the first string of the exception / assert message, else the
condition), stable across line shifts. `ddtctl rules --coverage` prints the same table.

The launch-time inventory (ddtctl/rules/launch/sites.py + launch/coverage.yaml, printed after these two) does
the same for the start path after the resolver: the model runner, attention backends, memory pools and draft
workers.

The override inventory (`--overrides`; ddtctl/rules/overrides.yaml) does the same for every place the
resolution replaces a value (declare_resolution, @register_post_process returns, model-override providers):
each is reported by an info rule (with an example launch the tests check, statically and against SGLang) or
exempted with its reason. Stdlib + PyYAML only; never imports sglang.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, TypeVar

from ddtctl.rules.inventory import default_root, inventory_table  # noqa: F401  (default_root: this module's API)
from ddtctl.rules.launch import sites as launch
from ddtctl.safeio import load_yaml, read_text

MAPPING = Path(__file__).resolve().parent / "coverage.yaml"


FILES = (
    "srt/arg_groups/**/*.py",
    "srt/server_args.py",
    "srt/configs/model_config.py",
    "srt/speculative/spec_info.py",
    "srt/speculative/spec_registry.py",
    "srt/runtime_context.py",
)
ROOTS = ("prepare_server_args", "resolve_once", "check_server_args", "run_resolution_pipeline")


@dataclass
class Site:
    file: str
    line: int
    function: str
    kind: str  # raise | assert | exit
    message: str

    @property
    def key(self) -> str:
        return f"{self.file}::{self.function}::{self.kind}::{self.message}"


# (file relative to the sglang package's parent, def node); name -> every def of that name
Located = tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]
FunctionIndex = dict[str, list[Located]]


def _message(node: ast.AST | None) -> str:
    if node is None:
        return ""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.strip():
            return re.sub(r"\s+", " ", sub.value.strip())[:80]
    return ""


def _functions(root: Path) -> FunctionIndex:
    """name -> [(relative file, def node)] over the resolution code."""
    index: FunctionIndex = {}
    for pattern in FILES:
        for path in sorted(root.glob(pattern)):
            rel = str(path.relative_to(root.parent))
            tree = ast.parse(read_text(path, 16 << 20, what="SGLang source"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    index.setdefault(node.name, []).append((rel, node))
    return index


def _roots(index: FunctionIndex) -> list[Located]:
    out = []
    for name, defs in index.items():
        for rel, node in defs:
            decorated = any("register_post_process" in ast.unparse(d) for d in node.decorator_list)
            if name in ROOTS or decorated:
                out.append((rel, node))
    return out


def _referenced(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
    return names


def reachable(root: Path) -> list[Located]:
    index = _functions(root)
    return _closure(index, _roots(index))


def _closure(index: FunctionIndex, roots: list[Located]) -> list[Located]:
    """The functions reachable from `roots` by calls and references by name within `index`."""
    seen: set[int] = set()
    order = []
    stack = list(roots)
    while stack:
        rel, node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append((rel, node))
        for name in _referenced(node):
            for target in index.get(name, ()):
                if id(target[1]) not in seen:
                    stack.append(target)
    return order


def _nodes_of(fn: ast.AST) -> Iterator[ast.AST]:
    """Every node under `fn` except nested def / lambda nodes, which are functions of their own (reached by
    name). Their bodies are still walked as part of `fn`: callers keep one site per (file, line)."""
    for node in ast.walk(fn):
        if node is fn or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node


SiteT = TypeVar("SiteT", "Site", "OverrideSite")


def _one_per_line(found: list[SiteT]) -> list[SiteT]:
    """One site per (file, line), the first found, sorted by file and line."""
    unique: dict[tuple[str, int], SiteT] = {}
    for site in found:
        unique.setdefault((site.file, site.line), site)
    return sorted(unique.values(), key=lambda s: (s.file, s.line))


def sites(root: Path | None = None) -> list[Site]:
    root = root or default_root()
    out: list[Site] = []
    for rel, fn in reachable(root):
        for node in _nodes_of(fn):
            if isinstance(node, ast.Raise) and node.exc is not None:
                out.append(Site(rel, node.lineno, fn.name, "raise", _message(node.exc)))
            elif isinstance(node, ast.Assert):
                msg = _message(node.msg) or ast.unparse(node.test)[:80]
                out.append(Site(rel, node.lineno, fn.name, "assert", msg))
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "os._exit", "exit"):
                out.append(Site(rel, node.lineno, fn.name, "exit", _message(node)))
    return _one_per_line(out)


def _entries(path: Path, section: str) -> list[dict]:
    return list((load_yaml(path, 4 << 20, what="rule map") or {}).get(section) or [])


def load_mapping(path: Path = MAPPING) -> list[dict]:
    return _entries(path, "sites")


def classify(all_sites: list[SiteT], mapping: list[dict]) -> list[tuple[SiteT, dict | None]]:
    """Each site with the first mapping entry whose `match` glob matches its key (None: unmapped)."""
    return [
        (s, next((m for m in mapping if fnmatch.fnmatchcase(s.key, m["match"])), None)) for s in all_sites
    ]


def table(rows: list[tuple[Site, dict | None]], *, show_uncovered: bool = True, limit: int = 60) -> str:
    lines = inventory_table(
        "raise-site coverage: SGLang 0.5.23 prepare_server_args + resolve_once + check_server_args",
        rows,
        describe=lambda s: f"{s.file}:{s.line} {s.function} {s.kind}: {s.message}",
        total_line="uncovered",
        show_missing=show_uncovered,
        limit=limit,
    )
    try:
        orows = classify_overrides(override_sites(), load_override_mapping())
    except Exception as err:  # the raise-site table stands on its own
        lines += ["", f"override inventory unavailable: {err}"]
    else:
        lines += ["", override_table(orows, limit=20)]
    try:  # the second inventory: launch-time sites after the resolver (ddtctl/rules/launch/sites.py)
        lrows = launch.classified()
    except Exception as err:
        lines += ["", f"launch-time inventory unavailable: {err}"]
    else:
        lines += ["", launch.table(lrows, limit=20)]
    return "\n".join(lines)


# ---------------------------------------------------------------- override inventory

OVERRIDE_MAPPING = Path(__file__).resolve().parent / "overrides.yaml"
OVERRIDE_KINDS = ("declare", "post_process", "model_override")


@dataclass
class OverrideSite:
    file: str
    line: int
    function: str
    # declare (declare_resolution call) | post_process (@register_post_process return) | model_override
    kind: str
    fields: tuple[str, ...]  # "**" for a **kwargs declaration

    @property
    def key(self) -> str:
        return f"{self.file}::{self.function}::{self.kind}::{','.join(self.fields)}"


def _override_roots(index: FunctionIndex) -> list[Located]:
    """The resolution roots plus the model-override registry (@_register_for providers, reached by the
    registry, not by name)."""
    out = _roots(index)
    for defs in index.values():
        for rel, node in defs:
            if any("_register_for" in ast.unparse(d) for d in node.decorator_list):
                out.append((rel, node))
    return out


def override_sites(root: Path | None = None) -> list[OverrideSite]:
    """Every place SGLang's resolution replaces a field's value: declare_resolution(...) calls, the dict a
    @register_post_process pass returns, and the dict a model-override provider (@_register_for) returns, in
    the functions reachable from the same roots as the raise sites."""
    root = root or default_root()
    index = _functions(root)
    out: list[OverrideSite] = []
    for rel, fn in _closure(index, _override_roots(index)):
        decorators = [ast.unparse(d) for d in fn.decorator_list]
        returns = (
            "post_process"
            if any("register_post_process" in d for d in decorators)
            else "model_override"
            if any("_register_for" in d for d in decorators)
            else None
        )
        for node in _nodes_of(fn):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("declare_resolution"):
                fields = tuple(sorted(k.arg or "**" for k in node.keywords))
                out.append(OverrideSite(rel, node.lineno, fn.name, "declare", fields))
            elif (
                returns
                and isinstance(node, ast.Return)
                and isinstance(node.value, ast.Dict)
                and node.value.keys
            ):
                fields = tuple(sorted(ast.unparse(k).strip("'\"") for k in node.value.keys if k is not None))
                out.append(OverrideSite(rel, node.lineno, fn.name, returns, fields))
            elif (
                returns
                and isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Subscript)
                and isinstance(node.targets[0].slice, ast.Constant)
                and isinstance(node.targets[0].slice.value, str)
            ):
                out.append(OverrideSite(rel, node.lineno, fn.name, returns, (node.targets[0].slice.value,)))
    return _one_per_line(out)


def load_override_mapping(path: Path = OVERRIDE_MAPPING) -> list[dict]:
    return _entries(path, "overrides")


classify_overrides = classify  # the same first-match rule over override sites


def override_table(rows: list[tuple[OverrideSite, dict | None]], *, limit: int = 60) -> str:
    return "\n".join(
        inventory_table(
            "override inventory: SGLang 0.5.23 declare_resolution / register_post_process / model-override "
            "sites",
            rows,
            describe=lambda s: f"{s.file}:{s.line} {s.function} {s.kind}: {', '.join(s.fields)}",
            total_line="unmapped overrides",
            mapped="reported by an info rule",
            missing="unmapped",
            category=lambda m: m["category"].split(":")[0],
            limit=limit,
        )
    )


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sglang-root", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--all", action="store_true", help="list every uncovered site")
    ap.add_argument(
        "--overrides", action="store_true", help="the override inventory instead of the raise sites"
    )
    args = ap.parse_args(argv)
    if args.overrides:
        orows = classify_overrides(override_sites(args.sglang_root), load_override_mapping())
        if args.json:
            print(json.dumps([{"key": s.key, "line": s.line, "mapped": m} for s, m in orows], indent=1))
        else:
            print(override_table(orows, limit=10**6 if args.all else 60))
        return 1 if any(m is None for _, m in orows) else 0
    rows = classify(sites(args.sglang_root), load_mapping())
    if args.json:
        print(json.dumps([{"key": s.key, "line": s.line, "mapped": m} for s, m in rows], indent=1))
    else:
        print(table(rows, limit=10**6 if args.all else 60))
    return 1 if any(m is None for _, m in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
