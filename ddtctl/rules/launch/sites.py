"""Launch-time sites: every raise / assert on SGLang 0.5.23's start path AFTER the resolver, each mapped to a
ddtctl rule of this package or exempted with a category and reason (ddtctl/rules/launch/coverage.yaml).

    python -m ddtctl.rules.launch.sites [--sglang-root DIR] [--all] [--json]
        (or: ddtctl rules --coverage, the second inventory)

The resolver inventory (ddtctl/rules/coverage.py) covers prepare_server_args + resolve_once +
check_server_args. A launch the resolver accepts can still die while the scheduler builds its workers: the
model runner (weights, KV-cache dtype, the attention backends), the memory pools, and the speculative draft
worker. This walk is static (ast) over those files (FILES), from the methods the scheduler calls in order
(ROOTS: TpModelWorker / ModelRunner construction, alloc_memory_pool, init_attention_backends; each draft
worker of EAGLE / EAGLE3 / NEXTN, multi-layer EAGLE, STANDALONE, NGRAM and DFLASH; every factory registered
with @register_attention_backend). Unlike the resolver walk it follows calls, not mere references (a backend's
forward-time callbacks, assigned in __init__, run after start-up):

    self.m() / cls.m()   the method m of the enclosing class or its bases (by name, within FILES)
    super().m()          the bases' m
    C / C.m()            a class C named anywhere (constructed, or assigned and constructed later): its
                         __init__ / __post_init__; C.m: its method m
    f() / mod.f()        the module-level function f
    obj.m()              the method m when exactly one class of FILES defines it (a generic name such as
                         `update` or `forward` is not followed)

A site's key is `file::Class.function::kind::message` (message: the first string of the exception or assert
message, else the condition; 200 characters), stable across line shifts. Stdlib + PyYAML only; never imports
sglang.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ddtctl.errors import UsageError
from ddtctl.paths import cache_root
from ddtctl.rules.inventory import default_root, inventory_table
from ddtctl.safeio import load_json, load_yaml, read_text, write_new

MAPPING = Path(__file__).resolve().parent / "coverage.yaml"

FILES = (
    "srt/model_executor/model_runner.py",
    "srt/model_executor/model_runner_components/*.py",
    "srt/model_executor/pool_configurator.py",
    "srt/managers/tp_worker.py",
    "srt/layers/attention/attention_registry.py",
    "srt/layers/attention/*_backend.py",
    "srt/mem_cache/memory_pool.py",
    "srt/mem_cache/kv_cache_configurator.py",
    "srt/mem_cache/kv_cache_builder.py",
    "srt/speculative/base_spec_worker.py",
    "srt/speculative/draft_worker_common.py",
    "srt/speculative/eagle_worker_v2.py",
    "srt/speculative/multi_layer_eagle_worker_v2.py",
    "srt/speculative/standalone_worker_v2.py",
    "srt/speculative/ngram_worker.py",
    "srt/speculative/dflash_worker_v2.py",
    "srt/speculative/dflash_utils.py",
)
# The scheduler's start-up, in order (managers/scheduler.py init_model_worker): the target worker, the draft
# worker of the algorithm (spec_info.py create_worker), the memory pools, the attention backends.
WORKERS = (
    "TpModelWorker",
    "ModelRunner",
    "EAGLEWorkerV2",
    "EagleDraftWorker",
    "MultiLayerEagleWorkerV2",
    "MultiLayerEagleDraftWorker",
    "StandaloneWorkerV2",
    "StandaloneDraftWorker",
    "NGRAMWorker",
    "DFlashWorkerV2",
)
STEPS = (
    "__init__",
    "alloc_memory_pool",
    "init_token_map",
    "init_lm_head",
    "init_hicache_draft_plan",
    "init_attention_backends",
    "init_attention_backend",
)
BACKEND_REGISTRY = "register_attention_backend"


@dataclass
class LaunchSite:
    file: str
    line: int
    function: str  # Class.method or function
    kind: str  # raise | assert
    message: str

    @property
    def key(self) -> str:
        return f"{self.file}::{self.function}::{self.kind}::{self.message}"


Def = ast.FunctionDef | ast.AsyncFunctionDef
Located = tuple[str, Def, str | None]  # (file relative to the package's parent, def, enclosing class)


class _Index:
    """The defs of FILES: module-level functions and the methods of top-level classes."""

    def __init__(self, root: Path):
        self.defs: dict[str, list[Located]] = {}  # qualname -> defs
        self.methods: dict[str, list[str]] = {}  # method name -> qualnames
        self.classes: dict[str, list[ast.ClassDef]] = {}
        for pattern in FILES:
            for path in sorted(root.glob(pattern)):
                rel = str(path.relative_to(root.parent))
                tree = ast.parse(read_text(path, 16 << 20, what="SGLang source"))
                for top in tree.body:
                    if isinstance(top, ast.ClassDef):
                        self.classes.setdefault(top.name, []).append(top)
                        for node in top.body:
                            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                                self._add(f"{top.name}.{node.name}", (rel, node, top.name))
                                self.methods.setdefault(node.name, []).append(f"{top.name}.{node.name}")
                    elif isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self._add(top.name, (rel, top, None))

    def _add(self, qualname: str, located: Located) -> None:
        self.defs.setdefault(qualname, []).append(located)

    def mro(self, name: str, seen: set[str] | None = None) -> list[str]:
        """`name` and its bases that FILES define, depth first."""
        seen = set() if seen is None else seen
        if name in seen or name not in self.classes:
            return []
        seen.add(name)
        out = [name]
        for cls in self.classes[name]:
            for base in cls.bases:
                out += self.mro(ast.unparse(base).split("[")[0].split(".")[-1], seen)
        return out

    def method(self, cls: str, name: str, *, skip_self: bool = False) -> list[Located]:
        for owner in self.mro(cls)[1 if skip_self else 0 :]:
            if f"{owner}.{name}" in self.defs:
                return self.defs[f"{owner}.{name}"]
        return []

    def constructor(self, cls: str) -> list[Located]:
        return self.method(cls, "__init__") + self.method(cls, "__post_init__")

    def function(self, name: str) -> list[Located]:
        return [d for d in self.defs.get(name, ()) if d[2] is None]

    def calls(self, nodes: list[ast.AST], cls: str | None) -> list[Located]:
        """What a function (`nodes`: its ast.walk) calls (the rules of the module docstring)."""
        called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
        out: list[Located] = []
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.classes:
                out += self.constructor(node.id)
            elif id(node) not in called:
                continue
            elif isinstance(node, ast.Name):
                out += self.function(node.id)
            elif isinstance(node, ast.Attribute):
                out += self._attribute_call(node, cls)
        return out

    def _attribute_call(self, node: ast.Attribute, cls: str | None) -> list[Located]:
        owner, name = node.value, node.attr
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls") and cls:
            return self.method(cls, name)
        is_super = isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super"
        if is_super and cls:
            return self.method(cls, name, skip_self=True)
        if isinstance(owner, ast.Name) and owner.id in self.classes:
            return self.method(owner.id, name)
        if self.function(name):
            return self.function(name)
        owners = self.methods.get(name, [])
        return self.defs[owners[0]] if len(owners) == 1 else []

    def roots(self) -> list[Located]:
        out: list[Located] = []
        for worker in WORKERS:
            for step in STEPS:
                out += self.method(worker, step)
        for defs in self.defs.values():
            for located in defs:
                if any(
                    isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == BACKEND_REGISTRY
                    for d in located[1].decorator_list
                ):
                    out.append(located)
        return out


def _message(node: ast.AST | None) -> str:
    """The exception's or assert's message: its first string constant, whitespace folded, 200 characters
    (longer than the resolver inventory's 80: two checks here share their first 80)."""
    if node is None:
        return ""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.strip():
            return re.sub(r"\s+", " ", sub.value.strip())[:200]
    return ""


def _reached(root: Path) -> list[tuple[Located, list[ast.AST]]]:
    """The functions reachable from the roots, each with its nodes (one ast.walk, shared by both uses)."""
    index = _Index(root)
    seen: set[int] = set()
    order: list[tuple[Located, list[ast.AST]]] = []
    stack = index.roots()
    while stack:
        located = stack.pop()
        if id(located[1]) in seen:
            continue
        seen.add(id(located[1]))
        nodes = list(ast.walk(located[1]))
        order.append((located, nodes))
        stack += [t for t in index.calls(nodes, located[2]) if id(t[1]) not in seen]
    return order


def reachable(root: Path) -> list[Located]:
    return [located for located, _ in _reached(root)]


def sites(root: Path | None = None) -> list[LaunchSite]:
    """Every launch-time site, one per (file, line), sorted. The walk parses ~70k lines (1-2 s), so its
    result is kept under the ddtctl cache, keyed by this module's source and the size and mtime of every file
    it reads (a changed wheel or walk is walked again)."""
    root = root or default_root()
    key, cache = _cache_entry(root)
    cached = _load_cached(cache)
    if cached is not None:
        return cached
    found = _walk_sites(root)
    _store_cached(cache, key, found)
    return found


def _walk_sites(root: Path) -> list[LaunchSite]:
    out: list[LaunchSite] = []
    for (rel, fn, cls), nodes in _reached(root):
        name = f"{cls}.{fn.name}" if cls else fn.name
        for node in nodes:
            if isinstance(node, ast.Raise) and node.exc is not None:
                out.append(LaunchSite(rel, node.lineno, name, "raise", _message(node.exc)))
            elif isinstance(node, ast.Assert):
                msg = _message(node.msg) or ast.unparse(node.test)[:200]
                out.append(LaunchSite(rel, node.lineno, name, "assert", msg))
    unique: dict[tuple[str, int], LaunchSite] = {}
    for site in out:  # one site per (file, line): a nested def is walked with its parent too
        unique.setdefault((site.file, site.line), site)
    return sorted(unique.values(), key=lambda s: (s.file, s.line))


def _cache_entry(root: Path) -> tuple[str, Path]:
    import hashlib

    digest = hashlib.sha256(read_text(Path(__file__), 1 << 20, what="ddtctl source").encode())
    for pattern in FILES:
        for path in sorted(root.glob(pattern)):
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    key = digest.hexdigest()[:32]
    return key, cache_root() / "launch-sites" / f"{key}.json"


def _load_cached(cache: Path) -> list[LaunchSite] | None:

    try:
        doc = load_json(cache, 16 << 20, what="launch-site cache")
        return [LaunchSite(**row) for row in doc["sites"]]
    except (UsageError, KeyError, TypeError):  # absent, unreadable or of another shape: walk again
        return None


def _store_cached(cache: Path, key: str, found: list[LaunchSite]) -> None:
    from dataclasses import asdict

    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_new(cache, json.dumps({"key": key, "sites": [asdict(s) for s in found]}))
    except (OSError, UsageError):  # a read-only cache only costs the next walk
        pass


def load_mapping(path: Path = MAPPING) -> list[dict]:
    return list((load_yaml(path, 4 << 20, what="rule map") or {}).get("sites") or [])


def classify(found: list[LaunchSite], mapping: list[dict]) -> list[tuple[LaunchSite, dict | None]]:
    """Each site with the first mapping entry whose `match` glob matches its key (None: unmapped)."""
    return [(s, next((m for m in mapping if fnmatch.fnmatchcase(s.key, m["match"])), None)) for s in found]


def classified(root: Path | None = None) -> list[tuple[LaunchSite, dict | None]]:
    return classify(sites(root), load_mapping())


def table(rows: list[tuple[LaunchSite, dict | None]], *, limit: int = 60) -> str:
    return "\n".join(
        inventory_table(
            "launch-time sites: SGLang 0.5.23 model runner, attention backends, memory pools and draft "
            "workers (after the resolver)",
            rows,
            describe=lambda s: f"{s.file}:{s.line} {s.function} {s.kind}: {s.message}",
            total_line="unmapped launch-time sites",
            missing="unmapped",
            category=lambda m: m["category"].split(":")[0],
            limit=limit,
        )
    )


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ddtctl.rules.launch.sites")
    ap.add_argument("--sglang-root", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--all", action="store_true", help="list every unmapped site")
    args = ap.parse_args(argv)
    rows = classified(args.sglang_root)
    if args.json:
        print(json.dumps([{"key": s.key, "line": s.line, "mapped": m} for s, m in rows], indent=1))
    else:
        print(table(rows, limit=10**6 if args.all else 60))
    return 1 if any(m is None for _, m in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
