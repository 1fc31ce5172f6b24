"""DDT966: the unified memory pool (`--enable-unified-memory`, sglang 0.5.23
srt/arg_groups/kv_cache_hook.py:527-754 handle_unified_memory_pool, _validate_unified_memory_dcp) past DDT940:
its PD-disaggregation transfers, decode KV offload and host-pool retraction, the backends a speculative verify
and an EAGLE draft run on, and decode context parallelism."""

from __future__ import annotations

from typing import Any, Iterator

from ddtctl.rules.engine import FACT_MODEL, Context, Hit, rule
from ddtctl.rules.hooks.common import AG, env_flag, is_mla
from ddtctl.rules.hooks.resolution import resolve

# kv_cache_hook.py:475-496
SPEC_VERIFY_AUDITED = frozenset({"triton", "trtllm_mla", "cutedsl_mla", "flashmla", "flashinfer", "fa3"})
SPEC_MHA_AUDITED = frozenset({"triton", "flashinfer", "fa3", "trtllm_mha"})
_DCP_BACKENDS = frozenset({"flashinfer", "trtllm_mla", "cutedsl_mla"})  # kv_cache_hook.py:746


def is_hybrid_swa(ctx: Context) -> bool:
    """configs/model_config.py is_hybrid_swa, as far as config.json tells it: sliding-window layers next to
    full-attention ones."""
    raw = ctx.known_model.raw or {}
    text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    types = text.get("layer_types") or ()
    return "sliding_attention" in types or bool(text.get("sliding_window_pattern"))


def _host_pool(ctx: Context) -> bool:
    """The decode retraction backup is the host pool: given, or forced by decode host receive
    (pd_disaggregation_hook.py:68-80)."""
    threshold = ctx.get("disaggregation_decode_host_receive_threshold")
    return ctx.get("disaggregation_decode_retraction_backup") == "host_pool" or (
        isinstance(threshold, (int, float)) and threshold < 1
    )


def _pd(ctx: Context) -> Iterator[Hit]:
    """kv_cache_hook.py:531-585: PD transfers ship whole page envelopes over Mooncake."""
    transfer = ctx.get("disaggregation_transfer_backend") or "mooncake"
    if transfer != "mooncake":
        yield Hit(
            f"--enable-unified-memory with PD disaggregation supports the mooncake transfer backend only, "
            f"not {transfer}",
            about="disaggregation_transfer_backend",
        )
    if env_flag(ctx, "SGLANG_DISABLE_LAZY_COMPACTION"):
        yield Hit(
            "--enable-unified-memory with PD disaggregation needs lazy compaction: unset "
            "SGLANG_DISABLE_LAZY_COMPACTION",
            about="env.SGLANG_DISABLE_LAZY_COMPACTION",
        )
    if ctx.get("enable_hisparse"):
        yield Hit(
            "--enable-unified-memory with PD disaggregation excludes --enable-hisparse",
            about="enable_hisparse",
        )
    if ctx.get("disaggregation_decode_enable_offload_kvcache"):
        if ctx.given.get("hicache_storage_backend") != "file":
            yield Hit(
                "--enable-unified-memory with decode KV offload supports --hicache-storage-backend file only",
                about="hicache_storage_backend",
            )
        for bad, what in (
            (is_mla(ctx), "MLA"),
            (ctx.is_hybrid, "hybrid-Mamba"),
            (is_hybrid_swa(ctx), "hybrid-SWA"),
        ):
            if bad:
                yield Hit(
                    f"--enable-unified-memory decode KV offload does not support {what} models",
                    about="disaggregation_decode_enable_offload_kvcache",
                )
    if _host_pool(ctx) and ctx.is_hybrid:
        yield Hit(
            "--enable-unified-memory host-pool decode retraction does not support hybrid-Mamba models",
            about="disaggregation_decode_retraction_backup",
        )


def _pair(ctx: Context) -> set[str]:
    res = resolve(ctx)
    return set() if res is None else {b for b in res.pair if b is not None}


def _speculation(ctx: Context) -> Iterator[Hit]:
    """kv_cache_hook.py:497-525, 612-684: the backends a fused EAGLE draft and each verify run on."""
    algo, pair = ctx.algorithm, _pair(ctx)
    if algo in ("EAGLE", "EAGLE3"):
        allowed = SPEC_VERIFY_AUDITED if is_mla(ctx) else SPEC_MHA_AUDITED
        if pair and not pair <= allowed:
            yield Hit(
                f"--enable-unified-memory + {algo} verifies on {', '.join(sorted(allowed))}, not "
                f"{', '.join(sorted(pair))}",
                about="attention_backend",
            )
        draft = ctx.given.get("speculative_draft_attention_backend")
        drafts = {draft} if draft else pair
        if drafts and not drafts <= SPEC_MHA_AUDITED:
            yield Hit(
                f"--enable-unified-memory + {algo} runs its fused draft on {', '.join(sorted(drafts))}: set "
                f"--speculative-draft-attention-backend to one of {', '.join(sorted(SPEC_MHA_AUDITED))}",
                about="speculative_draft_attention_backend",
            )
        if _host_pool(ctx):
            yield Hit(
                f"--enable-unified-memory + {algo} does not support host-pool decode retraction",
                about="disaggregation_decode_retraction_backup",
            )
    elif algo == "DSPARK":
        allowed = SPEC_VERIFY_AUDITED | {"fa4"}
        if (ctx.get("dcp_size", 1) or 1) > 1:
            allowed = allowed - {"flashinfer"}
        if pair and not pair <= allowed:
            yield Hit(
                f"--enable-unified-memory + DSPARK verifies on {', '.join(sorted(allowed))}, not "
                f"{', '.join(sorted(pair))}",
                about="attention_backend",
            )


def _dcp(ctx: Context) -> Iterator[Hit]:
    """kv_cache_hook.py:706-754 _validate_unified_memory_dcp."""
    if not is_mla(ctx):
        yield Hit("--enable-unified-memory with --dcp-size > 1 supports MLA models only", about="dcp_size")
    elif is_hybrid_swa(ctx):
        yield Hit("--enable-unified-memory with --dcp-size > 1 does not support sliding-window models")
    elif (ctx.get("disaggregation_mode") or "null") != "null":
        yield Hit(
            "--enable-unified-memory with --dcp-size > 1 does not support PD disaggregation", about="dcp_size"
        )
    else:
        pair = _pair(ctx)
        if pair and not pair <= _DCP_BACKENDS:
            yield Hit(
                f"--enable-unified-memory with --dcp-size > 1 needs {', '.join(sorted(_DCP_BACKENDS))} for "
                f"full attention, not {', '.join(sorted(pair))}",
                about="attention_backend",
            )


@rule(
    "DDT966",
    "the unified memory pool: PD transfers, decode offload, speculative backends, decode CP",
    reads=(
        "enable_unified_memory",
        "disaggregation_mode",
        "disaggregation_transfer_backend",
        "disaggregation_decode_enable_offload_kvcache",
        "disaggregation_decode_retraction_backup",
        "speculative_draft_attention_backend",
        "dcp_size",
    ),
    needs=(FACT_MODEL,),
    applies=lambda ctx: bool(ctx.get("enable_unified_memory")),
    reference=f"{AG}kv_cache_hook.py:497-525 _assert_spec_verify_backends, 527-754 "
    "handle_unified_memory_pool, "
    "_validate_unified_memory_dcp",
)
def unified_memory_layouts(ctx: Context) -> Iterator[Hit]:
    """With PD disaggregation the unified pool transfers over Mooncake only, with lazy compaction and without
    HiSparse; decode KV offload stores to the file backend and excludes MLA, Mamba and sliding-window models;
    host-pool retraction excludes Mamba hybrids. EAGLE / EAGLE3 verify on the audited backends (triton,
    flashinfer, fa3, trtllm_mha; the MLA family on an MLA model), run the fused draft on an MHA one and
    exclude host-pool retraction; DSPARK verifies on the audited backends or fa4 (not flashinfer under DCP).
    Decode context parallelism needs an MLA, non-sliding-window model, no PD, and flashinfer / trtllm_mla /
    cutedsl_mla."""
    if (ctx.get("disaggregation_mode") or "null") != "null":
        yield from _pd(ctx)
    yield from _speculation(ctx)
    if (ctx.get("dcp_size", 1) or 1) > 1:
        yield from _dcp(ctx)
