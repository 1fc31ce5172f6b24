"""Defaults of sglang 0.5.23 srt/arg_groups/memory_hook.py that other checks read (chunked prefill, CUDA-graph
bs)."""

from __future__ import annotations

from ddtctl.rules.engine import Context
from ddtctl.rules.hooks.common import attn_dp_size


def default_chunked_prefill(ctx: Context) -> int | None:
    """memory_hook.py:89-178 handle_gpu_memory_settings: the chunked prefill size by GPU memory (a
    generation-only GPU counts as the product `ddtctl dry-run` declares for it)."""
    if ctx.gpu is None:
        return None
    memory = ctx.gpu.memory_gb
    if not memory:
        from ddtctl.dryrun import _REPRESENTATIVE
        from ddtctl.schema.gpus import resolve_gpu

        name = _REPRESENTATIVE.get(ctx.gpu.sm)
        memory = resolve_gpu(name).memory_gb if name else 0
    if not memory:
        return None
    mb = memory * 1024
    for limit, size in ((20, 2048), (35, 4096), (60, 4096), (90, 8192), (160, 8192)):
        if mb < limit * 1024:
            return size
    return 16384


def chunked_prefill(ctx: Context) -> int | None:
    """chunked_prefill_size as the checks after handle_data_parallelism read it: the given or default size,
    divided by the attention-DP groups (parallel_hook.py:314-331)."""
    size = ctx.given.get("chunked_prefill_size")
    if size is None:
        size = -1 if ctx.get("enable_mis") else default_chunked_prefill(ctx)
    dp = attn_dp_size(ctx)
    if size is not None and dp > 1:
        size = size // dp
    return size


def default_decode_graph_bs(ctx: Context) -> int | None:
    """memory_hook.py:89-181: the decode CUDA-graph max batch size by GPU memory and tp."""
    chunk = default_chunked_prefill(ctx)
    if chunk is None:  # also when the GPU is unknown
        return None
    tp = ctx.get("tp_size", 1) or 1
    memory = ctx.known_gpu.memory_gb or {8192: 141, 16384: 180, 4096: 48, 2048: 16}.get(chunk, 0)
    if memory < 20:
        return 8
    if memory < 35:
        return 48 if tp < 4 else 160
    if memory < 60:
        return 32 if tp < 4 else 160
    if memory < 160:
        return 256 if tp < 4 else 512
    return 512
