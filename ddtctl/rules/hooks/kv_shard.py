"""DDT960: logical-page KV-cache sharding (`--enable-kv-cache-sharding`, sglang 0.5.23
srt/arg_groups/kv_shard_hook.py), past its PD-prefill requirement (DDT938): what the sharded pool supports,
the attention backend per model family, the parallel layout, the page and the chunk."""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.engine import FACT_GPU, FACT_MODEL, Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size, is_mla
from ddtctl.rules.hooks.dsa import dsa_backends, dsa_config, dsa_kv
from ddtctl.rules.hooks.memory import chunked_prefill
from ddtctl.rules.hooks.resolution import backends, is_dsa, resolved_page

# kv_shard_hook.py:118-213: switches the sharded pool does not support (dest, reason)
_UNSUPPORTED = (
    ("enable_unified_cache_external_linker", "load-back allocates through the flat allocator API"),
    ("enable_streaming_session", "streaming sessions' virtual nodes carry no shard rotation"),
    ("enable_session_radix_cache", "no session radix cache yet"),
    ("enable_flexkv", "FlexKV load-back allocates through the flat allocator API"),
    ("enable_unified_memory", "the unified pool uses another virtual-id allocator"),
    ("enable_lmcache", "LMCache is not shard-aware"),
    ("enable_hisparse", "HiSparse assumes each rank owns complete KV pages"),
    ("enable_two_batch_overlap", "TBO clobbers the process-wide gather plan"),
)


def _speculation(ctx: Context) -> Iterator[Hit]:
    """kv_shard_hook.py:106-117: only GLM DSA single-layer NextN MTP (EAGLE, top-k 1)."""
    if ctx.given.get("speculative_algorithm") is None:
        return
    glm = ctx.known_model.architecture == "GlmMoeDsaForCausalLM"
    nextn = dsa_config(ctx).get("num_nextn_predict_layers") == 1
    if not (
        ctx.algorithm == "EAGLE"
        and glm
        and nextn
        and (ctx.given.get("speculative_eagle_topk") or 1) == 1
        and not ctx.get("enable_multi_layer_eagle")
    ):
        yield Hit(
            "KV sharding supports speculative decoding only for GLM DSA single-layer NextN MTP with EAGLE "
            "and top-k 1",
            about="speculative_algorithm",
        )


def _features(ctx: Context) -> Iterator[Hit]:
    """kv_shard_hook.py:118-229: diffusion LLMs, custom radix caches, the Rust tree core, the switches of
    _UNSUPPORTED, DCP, HiCache storage, DSA HiCache layouts, dynamic chunking under PP, encoder-decoder and
    chunked-attention models."""
    if ctx.given.get("dllm_algorithm") is not None:
        yield Hit(
            "--enable-kv-cache-sharding does not support diffusion language models", about="dllm_algorithm"
        )
    if ctx.given.get("radix_cache_backend") is not None:
        yield Hit("--enable-kv-cache-sharding requires the built-in radix cache", about="radix_cache_backend")
    tree = ctx.env.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python")
    if not ctx.get("disable_radix_cache") and tree != "python":
        yield Hit(
            f"--enable-kv-cache-sharding requires the Python UnifiedTreeCore, got "
            f"SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND={tree}",
            about="env.SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND",
        )
    for dest, why in _UNSUPPORTED:
        if ctx.get(dest):
            yield Hit(
                f"--enable-kv-cache-sharding does not support --{dest.replace('_', '-')}: {why}", about=dest
            )
    if (ctx.get("dcp_size", 1) or 1) > 1:
        yield Hit("--enable-kv-cache-sharding and --dcp-size > 1 are mutually exclusive", about="dcp_size")
    if ctx.get("enable_hierarchical_cache"):
        if ctx.given.get("hicache_storage_backend") is not None:
            yield Hit(
                "--enable-kv-cache-sharding supports HiCache host offload but not --hicache-storage-backend",
                about="hicache_storage_backend",
            )
        if is_dsa(ctx) and ctx.get("hicache_host_memory_mode") != "cache":
            yield Hit(
                "CP-sharded DSA HiCache requires --hicache-host-memory-mode cache",
                about="hicache_host_memory_mode",
            )
        elif is_dsa(ctx) and (
            ctx.get("hicache_io_backend") != "kernel"
            or ctx.get("hicache_mem_layout") not in ("layer_first", "page_first")
        ):
            yield Hit(
                "CP-sharded DSA HiCache requires --hicache-io-backend kernel with --hicache-mem-layout "
                "layer_first or page_first",
                about="hicache_mem_layout",
            )
    if ctx.get("enable_dynamic_chunking") and (ctx.get("pp_size", 1) or 1) > 1:
        yield Hit(
            "--enable-kv-cache-sharding does not support --enable-dynamic-chunking with pipeline parallelism",
            about="enable_dynamic_chunking",
        )
    config = dsa_config(ctx)
    if config.get("is_encoder_decoder"):
        yield Hit("--enable-kv-cache-sharding does not support encoder-decoder models")
    if config.get("attention_chunk_size") is not None:
        yield Hit("--enable-kv-cache-sharding does not support chunked/local-attention models")


def _dsa_backend(ctx: Context, page: int) -> Iterator[Hit]:
    """kv_shard_hook.py:33-63: DSA sharding runs CUDA interleave prefill CP with TRTLLM FP8 at page 64."""
    pcp = ctx.get("enable_prefill_cp") and (ctx.get("attn_cp_size", 1) or 1) > 1
    device = ctx.given.get("device")
    if (device not in (None, "cuda")) or not pcp or ctx.get("cp_strategy") != "interleave":
        yield Hit("DSA KV sharding requires CUDA interleave prefill CP > 1", about="enable_prefill_cp")
    elif (ctx.get("pp_size", 1) or 1) != 1:
        yield Hit("DSA KV sharding requires --pp-size 1", about="pp_size")
    if dsa_backends(ctx) != ("trtllm", "trtllm") or dsa_kv(ctx) != "fp8_e4m3" or page != 64:
        yield Hit(
            "DSA KV sharding requires the trtllm DSA backends with an fp8_e4m3 KV cache and page size 64",
            about="kv_cache_dtype",
        )
    config = dsa_config(ctx)
    if (
        (ctx.get("disaggregation_transfer_backend") or "mooncake") != "mooncake"
        or ctx.get("enable_dsa_cache_layer_split")
        or config.get("index_kpool", 1) != 1
        or config.get("index_kpool_compress")
    ):
        yield Hit(
            "DSA KV sharding requires Mooncake, an uncompressed index_kpool of 1 and no DSA cache layer "
            "split",
            about="disaggregation_transfer_backend",
        )


def _attention(ctx: Context, prefill: str | None, page: int) -> Iterator[Hit]:
    """kv_shard_hook.py:64-84: fa3 prefill, or trtllm_mla for plain-TP MLA with chunked prefix caching."""
    if is_dsa(ctx):
        if prefill == "dsa":
            yield from _dsa_backend(ctx, page)
        else:
            yield Hit("DSA KV sharding requires the dsa attention backend", about="attention_backend")
        return
    if prefill == "fa3":
        return
    if prefill != "trtllm_mla":
        yield Hit(
            "--enable-kv-cache-sharding requires the fa3 prefill attention backend (or trtllm_mla for "
            f"plain-TP MLA), got {prefill}",
            about="attention_backend",
            fix="set attention-backend: fa3",
        )
    elif not is_mla(ctx):
        yield Hit("KV sharding with trtllm_mla requires an MLA model", about="attention_backend")
    elif (ctx.get("attn_cp_size", 1) or 1) > 1:
        yield Hit(
            "KV sharding with trtllm_mla only supports plain-TP MLA (--attn-cp-size 1)", about="attn_cp_size"
        )
    elif ctx.get("disable_chunked_prefix_cache"):
        yield Hit(
            "KV sharding with trtllm_mla requires chunked prefix caching",
            about="disable_chunked_prefix_cache",
        )


def _layout(ctx: Context) -> Iterator[Hit]:
    """kv_shard_hook.py:230-268: Mooncake or NIXL transfers, no staging buffer; MLA shards across attention
    TP (plain TP, tp > 1) unless prefill CP does; GQA shards across prefill-CP ranks."""
    transfer = ctx.get("disaggregation_transfer_backend") or "mooncake"
    if transfer not in ("mooncake", "nixl"):
        yield Hit(
            f"--enable-kv-cache-sharding supports the mooncake and nixl transfer backends, not {transfer}",
            about="disaggregation_transfer_backend",
        )
    if ctx.env.get("SGLANG_DISAGG_STAGING_BUFFER", "").lower() in ("1", "true", "yes", "y"):
        yield Hit(
            "--enable-kv-cache-sharding is incompatible with SGLANG_DISAGG_STAGING_BUFFER",
            about="env.SGLANG_DISAGG_STAGING_BUFFER",
        )
    cp = ctx.get("attn_cp_size", 1) or 1
    if is_mla(ctx):
        if cp <= 1 and attn_dp_size(ctx) > 1:
            yield Hit(
                "--enable-kv-cache-sharding for MLA models without prefill CP needs plain TP attention "
                "(--attn-dp-size 1)",
                about="attn_dp_size",
            )
        elif cp <= 1 and (ctx.get("tp_size", 1) or 1) <= 1:
            yield Hit(
                "--enable-kv-cache-sharding for MLA models without prefill CP shards across attention-TP "
                "ranks and needs --tp-size > 1",
                about="tp_size",
            )
    elif not ctx.get("enable_prefill_cp") or cp <= 1:
        yield Hit(
            "--enable-kv-cache-sharding for GQA models shards across attention-CP ranks: it needs "
            "--enable-prefill-cp with --attn-cp-size > 1",
            about="enable_kv_cache_sharding",
        )


def _page_and_chunk(ctx: Context, page: int) -> Iterator[Hit]:
    """kv_shard_hook.py:270-313: a real page, chunked prefill, and a chunk SGLang can round up to whole
    pages (the extra activation memory comes out of mem-fraction-static unless that is given)."""
    if page <= 1:
        yield Hit(
            "--enable-kv-cache-sharding requires a real page size (--page-size 64 recommended)",
            about="page_size",
            fix="set page-size: 64",
            edits={"page_size": 64},
        )
        return
    chunk = chunked_prefill(ctx)
    if chunk is not None and chunk <= 0:
        yield Hit(
            "--enable-kv-cache-sharding requires chunked prefill (--chunked-prefill-size > 0)",
            about="chunked_prefill_size",
        )
        return
    if chunk is None or chunk % page == 0 or ctx.is_set("mem_fraction_static") or ctx.gpu is None:
        return
    rounded = -(-chunk // page) * page
    delta_mb = 1.5 * (max(rounded, 2048) - max(chunk, 2048))
    if ctx.gpu.memory_gb and delta_mb >= ctx.gpu.memory_gb * 1024:
        # SGLang takes delta / device memory off mem-fraction-static (< 1): nothing would be left
        yield Hit(
            f"rounding --chunked-prefill-size {chunk} up to {rounded} (a multiple of page size {page}) for "
            "KV sharding would consume all automatically reserved GPU memory",
            about="chunked_prefill_size",
            fix=f"pass a smaller multiple of {page}",
        )


def _prefill_backend(ctx: Context) -> str | None:
    """The prefill attention backend: a DSA model's attention resolves to `dsa` unless one is given."""
    given = any(ctx.given.get(d) for d in ("attention_backend", "prefill_attention_backend"))
    if is_dsa(ctx) and not given:
        return "dsa"
    return backends(ctx)[0]


@rule(
    "DDT960",
    "KV-cache sharding: supported features, attention backend, layout, page and chunk",
    reads=(
        "enable_kv_cache_sharding",
        "attention_backend",
        "prefill_attention_backend",
        "page_size",
        "chunked_prefill_size",
        "attn_cp_size",
        "enable_prefill_cp",
        "disaggregation_transfer_backend",
    ),
    needs=(FACT_MODEL, FACT_GPU),
    applies=lambda ctx: (
        bool(ctx.get("enable_kv_cache_sharding")) and ctx.get("disaggregation_mode") == "prefill"
    ),
    reference=f"{AG}kv_shard_hook.py:31-313 validate_kv_shard_attention_backend, handle_kv_cache_sharding",
)
def kv_sharding(ctx: Context) -> Iterator[Hit]:
    """A KV-sharding prefill worker: speculative decoding only for GLM DSA single-layer NextN MTP; no
    diffusion LLM, custom radix cache, Rust tree core, external linker, streaming / session radix cache,
    FlexKV, unified memory, LMCache, HiSparse, TBO, DCP, HiCache storage, dynamic chunking under PP,
    encoder-decoder or chunked-attention model; prefill attention fa3 (GQA, with prefill CP > 1),
    trtllm_mla (MLA, plain TP > 1, chunked prefix cache) or dsa (DSA: interleave prefill CP, trtllm FP8 at
    page 64, Mooncake); Mooncake or NIXL transfers without the staging buffer; a page size > 1 and a
    positive chunked prefill size."""
    yield from _speculation(ctx)
    yield from _features(ctx)
    prefill = _prefill_backend(ctx)
    page = 64 if prefill == "dsa" and not ctx.is_set("page_size") else resolved_page(ctx)
    yield from _attention(ctx, prefill, page)
    yield from _layout(ctx)
    yield from _page_and_chunk(ctx, page)
