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

With a budget schedule (schedule.py) the target's own runner, captured at startup, serves the widest width; for
each narrower width `capture_width_runners` builds one more target attention backend and verify graph runner under
that width (the spec's verify width overridden while they are built, so the algo's capture width, the mask
buffer and the GDN backend follow it), capturing only the batch sizes that width serves, as SGLang's adaptive
speculative decoding builds one runtime state per step count. The worker swaps them in per step
(`use_width_runner`). A width without a runner, or a batch size its runner did not capture, verifies eagerly
(SGLang's runner refuses a batch whose width is not its capture width).
"""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def widest_sizes_only(model_runner, schedule):
    """While the startup graphs are captured: the target's verify runner (the widest width) captures only the batch
    sizes the widest width serves. The other sizes verify on their own width's runner, so graphs of the widest tree
    at every batch size would only hold memory (on an 80 GB card the 8B shape's server kept 1.5 GB free with them,
    2026-12-07). Yields a dict whose "bs" is the full list SGLang asked for, which the narrower widths share out."""
    import sglang.srt.model_executor.runner.decode_cuda_graph_runner as dcgr

    widest = max(w.width for w in schedule.widths())
    original = dcgr.get_batch_sizes_to_capture
    seen: dict = {}

    def only(mr, captured_req_width=1, *args, **kwargs):
        capture_bs, compile_bs = original(mr, captured_req_width, *args, **kwargs)
        if mr is not model_runner or int(captured_req_width) != widest:
            return capture_bs, compile_bs
        seen["bs"] = list(capture_bs)
        keep = schedule.capture_buckets(list(capture_bs)).get(widest) or list(capture_bs)
        return keep, [b for b in compile_bs if b in keep]

    dcgr.get_batch_sizes_to_capture = only
    try:
        yield seen
    finally:
        dcgr.get_batch_sizes_to_capture = original


def capture_width_runners(model_runner, schedule, *, block: int, capture_bs: list[int] | None = None) -> dict:
    """Verify width -> (attention backend, graph runner) for the target: the startup runner for its own width,
    one new pair per other width of `schedule` capturing that width's batch sizes (of `capture_bs`, the sizes
    SGLang asked the startup runner for; default: the ones it captured). Empty when the target has no verify graphs
    (DDTREE_VERIFY_GRAPH=0, CUDA graphs off)."""
    import logging

    import sglang.srt.model_executor.runner.decode_cuda_graph_runner as dcgr
    from sglang.srt.runtime_context import get_spec

    base = getattr(model_runner, "decode_cuda_graph_runner", None)
    if base is None or not verify_graphs_enabled() or not getattr(base, "capture_bs", None):
        return {}
    base_width = int(base.captured_req_width)
    out = {base_width: (model_runner.attn_backend, base)}
    original = dcgr.get_batch_sizes_to_capture
    for width, sizes in sorted(schedule.capture_buckets(list(capture_bs or base.capture_bs)).items()):
        if width == base_width or not sizes:
            continue

        def only(mr, captured_req_width=1, *args, _sizes=tuple(sizes), **kwargs):
            capture_bs, compile_bs = original(mr, captured_req_width, *args, **kwargs)
            keep = [b for b in capture_bs if b in _sizes] or list(_sizes)
            return keep, [b for b in compile_bs if b in keep]

        backup = getattr(model_runner, "init_new_workspace", None)
        dcgr.get_batch_sizes_to_capture = only
        try:
            with get_spec().override(speculative_ddtree_verify_width=width):
                backend = model_runner._get_attention_backend(init_new_workspace=True)
                runner = type(base)(model_runner, attn_backend=backend, speculative_num_draft_tokens=block)
        finally:
            dcgr.get_batch_sizes_to_capture = original
            if backup is not None:
                model_runner.init_new_workspace = backup
        if int(runner.captured_req_width) != width:
            raise RuntimeError(f"DDTREE: the verify graph runner for width {width} captured width "
                               f"{runner.captured_req_width}")
        out[width] = (backend, runner)
        logging.getLogger(__name__).info("DDTREE verify graphs at width %d: batch sizes %s", width,
                                         list(runner.capture_bs))
    return out


def use_width_runner(model_runner, runners: dict, width: int):
    """Make the target verify at `width` on its own attention backend and graph runner; returns the undo. A width
    without one (no schedule, no graphs) keeps the target's own (its verify then runs eagerly at a foreign width)."""
    pair = runners.get(width)
    if pair is None or pair[1] is model_runner.decode_cuda_graph_runner:
        return lambda: None
    saved = (model_runner.attn_backend, model_runner.decode_cuda_graph_runner)
    model_runner.attn_backend, model_runner.decode_cuda_graph_runner = pair

    def restore():
        model_runner.attn_backend, model_runner.decode_cuda_graph_runner = saved

    return restore
