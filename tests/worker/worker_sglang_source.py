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


# SGLang's extend_attention.py imports its platform layer; its kernel and wrapper need only these names (a
# platform that is neither CUDA nor ROCm: the generic tiles, no FP8 or compact-grid paths)
_EXTEND_PREAMBLE = """import math
from typing import Optional
_is_cuda = _is_hip = _is_gfx95 = _is_gfx1250 = False
_is_triton_ge_37 = True


class _Off:
    def get(self):
        return False


class envs:
    SGLANG_TRITON_FP8_PREFILL_ATTN = _Off()
    SGLANG_TRITON_COMPACT_EXTEND_ATTENTION = _Off()


def _extract_kv_strides(buf, page_size):
    return buf.stride(0), buf.stride(1), buf.stride(0) * page_size, buf.stride(0)


def unpack_aux_tensors(score_mod, aux_tensors):
    return None, 0, 0, 0


"""


def extend_attention_from_source(tmpdir: Path):
    """sglang 0.5.23's extend_attention_fwd (and its _fwd_kernel), loaded from the release's source for
    Triton's interpreter; None when no copy is reachable."""
    found = sglang_source("sglang/kernels/ops/attention/extend_attention.py")
    if found is None:
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from hybrid_tree_kernels import _fix_interpreter_compares

    _fix_interpreter_compares()  # SGLang's kernels splat comparison scalars (a Triton 3.9 interpreter defect)
    names = ["tanh", "_fwd_kernel", "_get_block_sizes_for_extend_attention",
             "_get_num_stages_for_extend_attention", "_compact_extend_q_tiles_per_head",
             "extend_attention_fwd"]
    mod = load_functions(found[0], names, tmpdir, "ddtree_test_sglang_extend", preamble=_EXTEND_PREAMBLE)
    return mod.extend_attention_fwd
