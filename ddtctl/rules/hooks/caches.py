"""HiCache with decode context parallelism and decode host receive (sglang 0.5.23
srt/arg_groups/hicache_hook.py; DDT969) and the cache switches kv_cache_hook.py / mamba_hook.py /
overrides.py refuse as combined: decode KV offload, the prefill-only KV-less path, the int8 Mamba
checkpoint, the Mamba cache chunk against the page (DDT970)."""

from __future__ import annotations

from typing import Any, Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG, is_mla
from ddtctl.rules.hooks.hicache import hicache_active
from ddtctl.rules.hooks.resolution import backends, resolve


def _dcp(ctx: Context) -> Iterator[Hit]:
    """hicache_hook.py:131-162 resolve_hicache_dcp_compatibility."""
    if (
        ctx.given.get("hicache_storage_backend") is not None
        and ctx.get("hicache_host_memory_mode") == "buffer_only"
    ):
        yield Hit(
            "HiCache L3 with --dcp-size > 1 does not support buffer_only host memory",
            about="hicache_host_memory_mode",
        )
    if ctx.algorithm not in (None, "DSPARK"):
        yield Hit(
            f"HiCache with --dcp-size > 1 supports only DSPARK speculative decoding, not {ctx.algorithm}",
            about="speculative_algorithm",
        )
    for dest in ("enable_lmcache", "enable_hisparse"):
        if ctx.get(dest):
            yield Hit(
                f"--{dest.replace('_', '-')} with HiCache and --dcp-size > 1 is not supported", about=dest
            )
    if ctx.model is not None and ctx.model.known and not is_mla(ctx):
        yield Hit("HiCache with --dcp-size > 1 is only supported for MLA models", about="dcp_size")


@rule(
    "DDT969",
    "HiCache with decode context parallelism and decode host receive",
    reads=("enable_hierarchical_cache", "dcp_size", "hicache_storage_backend", "hicache_host_memory_mode"),
    applies=hicache_active,
    reference=f"{AG}hicache_hook.py:60-95 handle_hicache, 131-162 resolve_hicache_dcp_compatibility, 197-222 "
    "resolve_storage_layout_compatibility",
)
def hicache_layouts(ctx: Context) -> Iterator[Hit]:
    """HiCache with `--dcp-size > 1` runs on MLA models, without buffer_only L3, LMCache, HiSparse or a draft
    other than DSPARK. Decode host receive shares the layer_first host pool with KV transfer, which the
    Mooncake / Ascend MemCache storage backends relayout away from (except Mooncake with DCP)."""
    dcp = (ctx.get("dcp_size", 1) or 1) > 1
    if dcp and ctx.get("enable_hierarchical_cache"):
        yield from _dcp(ctx)
    threshold = ctx.get("disaggregation_decode_host_receive_threshold")
    storage = ctx.given.get("hicache_storage_backend")
    if (
        isinstance(threshold, (int, float))
        and threshold < 1
        and storage in ("mooncake", "npu_memcache")
        and not (storage == "mooncake" and dcp)
    ):
        yield Hit(
            "decode host receive needs the layer_first HiCache layout, which --hicache-storage-backend "
            f"{storage} does not keep",
            about="hicache_storage_backend",
        )


def _mamba_chunk(ctx: Context) -> int:
    raw: dict[str, Any] = (ctx.model.raw if ctx.model is not None else None) or {}
    text = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    return int(text.get("mamba_chunk_size") or 64)  # FLA CHUNK_SIZE


def _mamba(ctx: Context) -> Iterator[Hit]:
    """mamba_hook.py:75-98 handle_int8_mamba_checkpoint; overrides.py:1897-1925 mamba_cache_chunk_size."""
    if ctx.get("enable_int8_mamba_checkpoint"):
        for dest, what in (
            ("enable_hierarchical_cache", "--enable-hierarchical-cache"),
            ("radix_cache_backend", "--radix-cache-backend"),
            ("enable_lmcache", "--enable-lmcache"),
        ):
            if ctx.given.get(dest):
                yield Hit(f"--enable-int8-mamba-checkpoint is not supported together with {what}", about=dest)
    strategy = ctx.get("mamba_radix_cache_strategy")
    if (
        ctx.is_hybrid
        and strategy in ("extra_buffer", "extra_buffer_lazy")
        and not ctx.get("disable_radix_cache")
    ):
        res = resolve(ctx)
        page = (res.page_at_mamba if res is not None else None) or ctx.given.get("page_size")
        chunk = _mamba_chunk(ctx)
        if page and max(chunk, page) % min(chunk, page):
            yield Hit(
                f"the Mamba cache chunk ({chunk}) and the page size ({page}) must divide one another",
                about="page_size",
            )


@rule(
    "DDT970",
    "decode KV offload, the prefill-only KV-less path, the int8 Mamba checkpoint, Mamba chunk vs page",
    reads=(
        "disaggregation_decode_enable_offload_kvcache",
        "prefill_only_disable_kv_cache",
        "enable_int8_mamba_checkpoint",
        "mamba_radix_cache_strategy",
        "page_size",
    ),
    applies=lambda ctx: any(
        ctx.get(d)
        for d in (
            "disaggregation_decode_enable_offload_kvcache",
            "prefill_only_disable_kv_cache",
            "enable_int8_mamba_checkpoint",
            "mamba_radix_cache_strategy",
        )
    ),
    reference=f"{AG}kv_cache_hook.py:322-348 handle_prefill_only_disable_kv_cache, 398-412 "
    "handle_cache_compatibility; mamba_hook.py:75-98; overrides.py:1897-1925 mamba_cache_chunk_size",
)
def cache_combinations(ctx: Context) -> Iterator[Hit]:
    """Decode KV offload needs `--hicache-storage-backend` and excludes host-pool retraction; the
    prefill-only KV-less path prefills on fa3 / fa4; the int8 Mamba checkpoint excludes HiCache, custom radix
    caches and LMCache; with an extra-buffer Mamba cache the Mamba chunk size (mamba_chunk_size, 64) and the
    page size divide one another."""
    if ctx.get("disaggregation_decode_enable_offload_kvcache") and ctx.get("disaggregation_mode") == "decode":
        if ctx.given.get("hicache_storage_backend") is None:
            yield Hit(
                "--disaggregation-decode-enable-offload-kvcache needs --hicache-storage-backend",
                about="disaggregation_decode_enable_offload_kvcache",
            )
        elif ctx.get("disaggregation_decode_retraction_backup") == "host_pool":
            yield Hit(
                "--disaggregation-decode-enable-offload-kvcache and host-pool retraction both build a "
                "decode host pool",
                about="disaggregation_decode_retraction_backup",
            )
    if ctx.get("prefill_only_disable_kv_cache") and ctx.get("is_embedding") and resolve(ctx) is not None:
        prefill = backends(ctx)[0]
        if prefill not in ("fa3", "fa4"):
            yield Hit(
                f"--prefill-only-disable-kv-cache needs the fa3 / fa4 prefill backend, not {prefill}",
                about="prefill_only_disable_kv_cache",
                fix="set attention-backend: fa3",
            )
    yield from _mamba(ctx)
