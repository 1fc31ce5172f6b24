"""DDTREE's target verify attention on the triton backend, split over the prefix (default; DDTREE_VERIFY_ATTN=extend
keeps SGLang's prefill kernel).

sglang 0.5.23 verifies a DDTREE tree with its prefill kernel (`extend_attention_fwd` with the tree's custom mask),
which walks the whole prefix serially per (request, head, query block): at batch 1 and a long context that grid is
small and the kernel latency-bound (0.49 ms of a B=64 step's extra 1.2 ms over DFLASH on the 8B target, H200,
notes/step-cost-h200.md). Every tree node sees the whole prefix, so the prefix part needs no mask: kernels/
tree_attn.py splits it across programs (flash-decode style) and applies the tree mask to the small draft-draft
block only.

The triton backend already dispatches target verify to a split-KV kernel when `use_verify_splitkv` is set (SGLang's
own, for causal chains on AMD): `verify_splitkv_fwd` takes the extend kernel's arguments and returns False for a
call it does not serve, which then runs the extend kernel. AFTER `TritonAttnBackend.__init__` of the DDTREE target
runner, this module points that dispatch at the tree kernel. The drafter's runner and other algorithms are left
alone.

The default since the H200 runs of 2026-12-01 (notes/step-cost-h200.md): exact against float64 and SGLang's kernel
in 32/32 shapes (bench/tree_attn_gpu.py), every server output equal to plain greedy (bench/sglang_e2e_gpu.py), and
the calibrated 8B DDTREE step at B=64 from 1.145 to 1.022 x DFLASH's.
"""

from __future__ import annotations

import logging
import os

from ddtree_sglang import ALGORITHM

logger = logging.getLogger(__name__)

VARIABLE = "DDTREE_VERIFY_ATTN"  # unset or "splitkv": the tree kernel; anything else (e.g. "extend") SGLang's
STATE = {"backends": 0, "calls": 0, "served": 0}


def wanted() -> bool:
    return os.environ.get(VARIABLE, "splitkv") == "splitkv"


def _spec():
    from sglang.srt.runtime_context import get_spec

    return get_spec()


def _ddtree_target() -> bool:
    return str(getattr(_spec(), "speculative_algorithm", "") or "").upper() == ALGORITHM


def _tree_attn():
    import importlib

    try:
        return importlib.import_module("ddtree_sglang.kernels.tree_attn")
    except ImportError:  # the ddtctl checkout (tests)
        return importlib.import_module("ddtctl.kernels.tree_attn")


def counted(kernel):
    """The backend's `verify_splitkv_fwd`: the tree kernel, its Python-side calls counted (eager calls and graph
    captures; a graph replay runs no Python). True when it served the call."""

    def verify_splitkv_fwd(*args, **kwargs) -> bool:
        STATE["calls"] += 1
        served = bool(kernel(*args, **kwargs))
        STATE["served"] += served
        return served

    return verify_splitkv_fwd


def install(result, backend, model_runner, *args, **kwargs):
    """AFTER hook on TritonAttnBackend.__init__: the DDTREE target's verify attention split over the prefix."""
    if not wanted() or getattr(backend, "is_draft_runner", True) or not _ddtree_target():
        return None
    import torch

    kernel = _tree_attn().tree_verify_fwd
    backend.verify_splitkv_fwd = torch.compiler.disable(counted(kernel))
    backend.use_verify_splitkv = True
    backend.use_verify_shared_kv = False  # SGLang's grouped-head variant serves causal chains only
    if not STATE["backends"]:
        logger.info("DDTREE verify attention: split-KV tree kernel (kernels/tree_attn.py)")
    STATE["backends"] += 1
    return None


def register_hooks(HookRegistry, HookType) -> None:
    HookRegistry.register(
        "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.__init__", install, HookType.AFTER)
