"""Target verify CUDA graphs at the DDTREE verify width (B + 1) with the tree mask (triton attention backend).

sglang 0.5.23 captures DFLASH-family verify graphs without a custom mask on the triton backend and sizes that
backend's graph mask buffer from speculative_num_draft_tokens (the drafter's block). Two hooks (registered by
plugin.register, active only for DDTREE when `verify_graphs_enabled()`) make a captured verify graph read the tree
mask instead:
  * `resolve_dflash_verify_mask_policy` (called by the decode graph runner at capture) answers "build the custom
    mask" for the DDTREE target, so the captured attention reads the runner's mask buffer, which
    `_update_target_verify_buffers` refills at every replay;
  * after `TritonAttnBackend.__init__` of the target runner, `num_draft_tokens` is widened to the verify width so
    the mask buffer holds `B + 1` rows per request.
Without them (DDTREE_VERIFY_GRAPH=0) the algo reports a capture width no tree verify has and every verify runs eager.
"""

from __future__ import annotations

import os

from ddtree_sglang import ALGORITHM


# Set in the process that captures (the scheduler) when the hooks actually ran for DDTREE; the worker refuses to
# replay a verify graph unless both did (a capture without the tree mask would verify the tree as a chain).
STATE = {"mask_at_capture": False, "mask_buffer_widened": False}


def verify_graph_ready() -> bool:
    return verify_graphs_enabled() and STATE["mask_at_capture"] and STATE["mask_buffer_widened"]


def verify_graphs_enabled() -> bool:
    return os.environ.get("DDTREE_VERIFY_GRAPH", "1") == "1"


def _ddtree_width():
    from sglang.srt.runtime_context import get_spec

    spec = get_spec()
    if str(getattr(spec, "speculative_algorithm", "") or "").upper() != ALGORITHM:
        return None
    width = getattr(spec, "speculative_ddtree_verify_width", None)
    block = getattr(spec, "speculative_num_draft_tokens", None) or 0
    return (int(width or 0), int(block))


def mask_policy(original, attn_backend, *args, **kwargs):
    """AROUND hook on sglang.srt.speculative.dflash_utils.resolve_dflash_verify_mask_policy."""
    name, build = original(attn_backend, *args, **kwargs)
    if verify_graphs_enabled() and _ddtree_width() is not None:
        STATE["mask_at_capture"] = True
        return name, True
    return name, build


def widen_triton_backend(result, backend, model_runner, *args, **kwargs):
    """AFTER hook on TritonAttnBackend.__init__: the target's verify mask buffer sized for B + 1 tokens."""
    if not verify_graphs_enabled() or getattr(backend, "is_draft_runner", True):
        return None
    w = _ddtree_width()
    if w is None:
        return None
    width, block = w
    backend.num_draft_tokens = max(width, block)
    STATE["mask_buffer_widened"] = True
    return None


def register_hooks(HookRegistry, HookType) -> None:
    HookRegistry.register(
        "sglang.srt.speculative.dflash_utils.resolve_dflash_verify_mask_policy", mask_policy, HookType.AROUND)
    HookRegistry.register(
        "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.__init__", widen_triton_backend,
        HookType.AFTER)
