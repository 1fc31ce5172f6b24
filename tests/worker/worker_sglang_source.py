"""Load single Triton kernels from the pinned SGLang release's own source, without importing sglang.

SGLang 0.5.23's `sglang/kernels/ops/speculative/spec_tree.py` imports its platform layer at module level; the kernels
themselves only need triton. We copy the named top-level functions, byte for byte, into a temporary module (Triton's
JIT needs a real source file) and import that.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import zipfile
from pathlib import Path

REL = "sglang/kernels/ops/speculative/spec_tree.py"


def _candidates(rel: str = REL) -> list[Path]:
    out: list[Path] = []
    try:
        from ddtctl.envs import managed_env

        env = managed_env("0.5.23")
        out += sorted(env.root.glob(f"lib/python*/site-packages/{rel}"))
    except Exception:  # noqa: BLE001
        pass
    spec = importlib.util.find_spec("sglang") if "sglang" not in sys.modules else None
    if spec and spec.submodule_search_locations:
        out.append(Path(list(spec.submodule_search_locations)[0]).parent / rel)
    for extra in (os.environ.get("DDTCTL_SGLANG_SRC"), "/work/sgl23"):
        if extra:
            out.append(Path(extra) / rel)
    return [p for p in out if p.is_file()]


def _wheel_source(rel: str) -> str | None:
    for wheel in sorted(Path(os.environ.get("DDTCTL_WHEELS", "/work/wheels")).glob("sglang-0.5.23-*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(rel).decode()
    return None


def sglang_source(rel: str) -> tuple[str, str] | None:
    """(source text, where it came from) of a file of sglang 0.5.23, or None when no copy is reachable."""
    for path in _candidates(rel):
        return path.read_text(encoding="utf-8"), str(path)
    text = _wheel_source(rel)
    return (text, "sglang-0.5.23 wheel") if text is not None else None


def spec_tree_source() -> tuple[str, str] | None:
    return sglang_source(REL)


def load_functions(source: str, names: list[str], tmpdir: Path, module_name: str, preamble: str = ""):
    tree = ast.parse(source)
    wanted = {n: None for n in names}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in wanted:
            wanted[node.name] = ast.get_source_segment(source, node, padded=False)
            deco = node.decorator_list
            if deco:
                first = min(d.lineno for d in deco)
                lines = source.splitlines()
                wanted[node.name] = "\n".join(lines[first - 1: node.end_lineno])
    missing = [n for n, src in wanted.items() if src is None]
    if missing:
        raise LookupError(f"not in sglang's spec_tree.py: {missing}")
    head = preamble + "import torch\nimport triton\nimport triton.language as tl\n\n\n"
    text = head + "\n\n\n".join(wanted.values()) + "\n"
    path = tmpdir / f"{module_name}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod
