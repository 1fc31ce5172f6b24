"""Exact draft trees on hybrid (Mamba / Gated-DeltaNet) targets, through SGLang 0.5.23's own tree-state machinery.

SGLang already verifies EAGLE / NGRAM trees (topk > 1) on GDN hybrids with parent-indexed recurrent state: the
hybrid linear-attention backend hands `retrieve_next_token` / `retrieve_next_sibling` of the verify input to the
tree conv kernel (which derives `retrieve_parent_token`) and to the tree GDN verify kernel, so every node starts from
its parent's conv window and SSM state and its own state lands in the per-verify-token scratch
(`intermediate_conv_window`, `intermediate_ssm`). Three switches keep DDTREE (a DFLASH-family algorithm, for which
SGLang resolves `speculative_eagle_topk` to 1) on that path; all are HookRegistry hooks, active only for DDTREE in
tree mode (not `--speculative-ddtree-allow-hybrid-unsafe`):

  * AFTER `MambaAttnBackendBase.__init__` of the target's GDN backend: `topk = 2` (the backend's only tree switch,
    read at init from speculative_eagle_topk);
  * AROUND `memory_pool.conv_window_dedup_enabled`: False. With topk <= 1 on CUDA the pool overlaps consecutive
    verify tokens' conv windows (one shared buffer, `as_strided`), which is only right for a chain: tree windows
    would overwrite each other;
  * AROUND `KVCacheConfigurator._handle_max_mamba_cache`: the memory budget counts the per-token scratch for the
    verify width max(block, B + 1) -- the width the pool is allocated with (max_speculative_num_draft_tokens) --
    instead of the drafter's block, so a wide tree cannot take memory the budget gave to the KV cache.

The commit after acceptance is SGLang's own `commit_mamba_states_after_verify` with the accepted node indices
(worker.py): the last accepted node's state becomes the request's state, and the mamba-track (extra_buffer) snapshot
is taken at the node on the accepted path where the track interval is crossed.
"""

from __future__ import annotations

import logging

from ddtree_sglang import ALGORITHM

logger = logging.getLogger(__name__)

STATE = {"tree_backends": 0}
TREE_TOPK = 2


def _spec():
    from sglang.srt.runtime_context import get_spec

    return get_spec()


def ddtree_active() -> bool:
    try:
        return str(getattr(_spec(), "speculative_algorithm", "") or "").upper() == ALGORITHM
    except Exception:
        return False


def tree_mode() -> bool:
    """DDTREE with exact trees on hybrid targets (everything but the unsafe sibling-sharing mode)."""
    return ddtree_active() and not bool(getattr(_spec(), "speculative_ddtree_allow_hybrid_unsafe", False))


def verify_width() -> int:
    spec = _spec()
    return max(int(getattr(spec, "speculative_num_draft_tokens", 0) or 0),
               int(getattr(spec, "speculative_ddtree_verify_width", 0) or 0))


class WidthView:
    """get_spec() with speculative_num_draft_tokens replaced (the verify width instead of the drafter's block)."""

    def __init__(self, spec, tokens: int):
        self._spec = spec
        self.speculative_num_draft_tokens = tokens

    def __getattr__(self, name):
        return getattr(self._spec, name)


def tree_backend(result, backend, model_runner, *args, **kwargs):
    """AFTER hook on MambaAttnBackendBase.__init__: the target's GDN backend runs its topk > 1 tree path."""
    if not tree_mode() or getattr(model_runner, "is_draft_worker", False):
        return None
    if type(backend).__name__ != "GDNAttnBackend":
        return None  # the worker refuses tree mode on other linear-attention backends, with the reason
    backend.topk = TREE_TOPK
    STATE["tree_backends"] += 1
    return None


def dense_conv_windows(original, *args, **kwargs):
    """AROUND hook on memory_pool.conv_window_dedup_enabled: dense per-token conv windows for trees."""
    if tree_mode():
        return False
    return original(*args, **kwargs)


def honest_mamba_budget(original, configurator, *args, **kwargs):
    """AROUND hook on KVCacheConfigurator._handle_max_mamba_cache: budget the scratch of the real verify width."""
    if not ddtree_active():
        return original(configurator, *args, **kwargs)
    import sglang.srt.mem_cache.kv_cache_configurator as kvc

    width = verify_width()
    real = kvc.get_spec
    kvc.get_spec = lambda: WidthView(real(), width)
    try:
        return original(configurator, *args, **kwargs)
    finally:
        kvc.get_spec = real


def register_hooks(HookRegistry, HookType) -> None:
    HookRegistry.register(
        "sglang.srt.layers.attention.hybrid_linear_attn_backend.MambaAttnBackendBase.__init__", tree_backend,
        HookType.AFTER)
    HookRegistry.register("sglang.srt.mem_cache.memory_pool.conv_window_dedup_enabled", dense_conv_windows,
                          HookType.AROUND)
    HookRegistry.register(
        "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._handle_max_mamba_cache",
        honest_mamba_budget, HookType.AROUND)
