"""DeepSeek Sparse Attention (DeepSeek V3.2, GLM-5 DSA, ...): the KV-cache dtype and the DSA split backends
sglang 0.5.23 resolves (srt/arg_groups/overrides.py:500-740 _dsa_kv_cache_dtype_default,
_check_dsa_backend_constraints, _dsa_split_backend_resolution; DDT958), and the features whose DSA paths
refuse a layout (hisparse_hook.py, model_hook.py DSA branch, parallel_hook.py:124-130; DDT959)."""

from __future__ import annotations

from typing import Any, Iterator

from ddtctl.rules.engine import FACT_GPU, FACT_MODEL, Context, Hit, rule
from ddtctl.rules.hooks.common import AG
from ddtctl.rules.hooks.resolution import is_dsa

# hisparse_hook.py:14-21
HISPARSE_BACKENDS = {"bfloat16": {"flashmla_sparse"}, "fp8_e4m3": {"flashmla_kv", "flashinfer_sparse_mla"}}
HISPARSE_KV = ("bfloat16", "fp8_e4m3")


def dsa_config(ctx: Context) -> dict[str, Any]:
    raw = ctx.known_model.raw or {}
    return raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw


def _sink(ctx: Context) -> bool:
    return bool(dsa_config(ctx).get("learnable_sink"))


def dsa_kv(ctx: Context) -> str:
    """overrides.py:520-545: `auto` is fp8_e4m3 from SM100 on (bfloat16 with learnable sinks or before);
    `bf16` is bfloat16."""
    kv = str(ctx.get("kv_cache_dtype") or "auto")
    if kv == "auto":
        return "fp8_e4m3" if ctx.known_gpu.sm >= 100 and not _sink(ctx) else "bfloat16"
    return "bfloat16" if kv == "bf16" else kv


def dsa_backends(ctx: Context) -> tuple[str | None, str | None]:
    """(prefill, decode) DSA backends after overrides.py:646-737 (CUDA): the given ones, else the
    learnable-sink, GLM SM120 FP8, HiSparse or dtype x generation default."""
    kv, sm = dsa_kv(ctx), ctx.known_gpu.sm
    given = ctx.given.get("dsa_prefill_backend"), ctx.given.get("dsa_decode_backend")
    if _sink(ctx):
        default = ("flashmla_sparse", "flashmla_sparse")
    elif ctx.known_model.architecture == "GlmMoeDsaForCausalLM" and sm in (120, 121) and kv == "fp8_e4m3":
        default = ("flashinfer_sparse_mla", "flashinfer_sparse_mla")
    elif ctx.get("enable_hisparse"):
        one = "flashmla_kv" if kv == "fp8_e4m3" else "flashmla_sparse"
        default = (one, one)
    elif kv == "fp8_e4m3":
        one = "trtllm" if sm >= 100 else "flashmla_kv"
        default = (one, one)
    else:
        default = ("flashmla_sparse", "trtllm" if sm >= 100 else "fa3")
    return given[0] or default[0], given[1] or default[1]


def _backend_constraints(ctx: Context, kv: str, prefill: str | None, decode: str | None) -> Iterator[Hit]:
    """overrides.py:548-583 _check_dsa_backend_constraints (CUDA) and the HiSparse arm's TileLang check."""
    if "triton" in (prefill, decode):
        yield Hit(
            "the triton DSA backend is only supported on ROCm; on CUDA pick flashmla_kv (Hopper) or trtllm "
            "(Blackwell)",
            about="dsa_prefill_backend" if prefill == "triton" else "dsa_decode_backend",
        )
    if kv != "fp8_e4m3" or "tilelang" not in (prefill, decode):
        return
    if ctx.get("enable_hisparse"):
        yield Hit("CUDA TileLang FP8 KV does not support HiSparse", about="enable_hisparse")
    elif prefill != decode:
        yield Hit(
            "CUDA TileLang FP8 KV requires both DSA backends to be tilelang (raw and scaled FP8 KV layouts "
            "cannot be mixed)",
            about="dsa_prefill_backend",
        )
    elif (ctx.get("dcp_size", 1) or 1) > 1:
        yield Hit("CUDA TileLang FP8 KV does not support --dcp-size > 1", about="dcp_size")
    elif ctx.known_gpu.sm < 89:
        yield Hit(f"CUDA TileLang FP8 KV requires SM89 or newer, not SM{ctx.known_gpu.sm}")


@rule(
    "DDT958",
    "DeepSeek Sparse Attention: KV-cache dtype and DSA backends",
    reads=("kv_cache_dtype", "dsa_prefill_backend", "dsa_decode_backend", "dcp_size", "enable_hisparse"),
    needs=(FACT_MODEL, FACT_GPU),
    applies=lambda ctx: ctx.model is not None and ctx.model.known and is_dsa(ctx),
    reference="sglang 0.5.23 srt/arg_groups/overrides.py:500-545 _dsa_kv_cache_dtype_default, 548-583 "
    "_check_dsa_backend_constraints, 646-737 _dsa_split_backend_resolution",
)
def dsa_kv_and_backends(ctx: Context) -> Iterator[Hit]:
    """A DSA model's KV cache is bfloat16 or fp8_e4m3 (`auto`: fp8_e4m3 from SM100 on), bfloat16 with
    learnable attention sinks, whose DSA backends are flashmla_sparse. On CUDA the triton DSA backend is
    ROCm-only, and TileLang with an FP8 KV cache takes tilelang for both phases, no DCP, no HiSparse and
    SM89+."""
    kv = dsa_kv(ctx)
    if _sink(ctx) and kv not in ("bf16", "bfloat16"):
        yield Hit(
            f"learnable DSA attention sinks require a bfloat16 KV cache, got --kv-cache-dtype {kv}",
            about="kv_cache_dtype",
            fix="set kv-cache-dtype: bfloat16",
            edits={"kv_cache_dtype": "bfloat16"},
        )
        return
    if kv not in ("bfloat16", "fp8_e4m3"):
        yield Hit(
            f"DeepSeek DSA supports a bfloat16 or fp8_e4m3 KV cache, not {kv}",
            about="kv_cache_dtype",
            fix="set kv-cache-dtype: fp8_e4m3",
            edits={"kv_cache_dtype": "fp8_e4m3"},
        )
        return
    if _sink(ctx):
        for dest in ("dsa_prefill_backend", "dsa_decode_backend"):
            value = ctx.given.get(dest)
            if value is not None and value != "flashmla_sparse":
                yield Hit(
                    f"{ctx.known_model.architecture} uses learnable attention sinks and requires "
                    f"--{dest.replace('_', '-')} flashmla_sparse, got {value}",
                    about=dest,
                    edits={dest: None},
                )
        return
    glm_sm12 = ctx.known_model.architecture == "GlmMoeDsaForCausalLM" and ctx.known_gpu.sm in (120, 121)
    if not (glm_sm12 and kv == "fp8_e4m3"):
        yield from _backend_constraints(ctx, kv, *dsa_backends(ctx))


def _hisparse(ctx: Context, kv: str) -> Iterator[Hit]:
    """hisparse_hook.py:44-124 validate_hisparse on a DSA model (CUDA)."""
    if not ctx.get("disable_radix_cache"):
        yield Hit(
            "hierarchical sparse attention (--enable-hisparse) requires --disable-radix-cache",
            fix="set disable-radix-cache: true",
            edits={"disable_radix_cache": True},
        )
    if ctx.get("enable_mixed_chunk"):
        yield Hit("--enable-hisparse does not support --enable-mixed-chunk", about="enable_mixed_chunk")
    if ctx.algorithm is not None and (ctx.given.get("speculative_eagle_topk") or 1) != 1:
        yield Hit(
            "HiSparse supports linear speculation only: set --speculative-eagle-topk 1",
            about="speculative_eagle_topk",
            edits={"speculative_eagle_topk": 1},
        )
    if ctx.algorithm is not None and ctx.get("speculative_adaptive"):
        yield Hit(
            "HiSparse speculative decoding uses statically sized swap state: --speculative-adaptive is not "
            "supported",
            about="speculative_adaptive",
            edits={"speculative_adaptive": None},
        )
    allowed = HISPARSE_BACKENDS.get(kv, {"flashmla_sparse", "flashmla_kv", "flashinfer_sparse_mla"})
    for dest in ("dsa_prefill_backend", "dsa_decode_backend"):
        value = ctx.given.get(dest)
        if value is not None and value not in allowed:
            yield Hit(
                f"HiSparse with --kv-cache-dtype {kv} supports DSA backends {sorted(allowed)}, got "
                f"--{dest.replace('_', '-')} {value}",
                about=dest,
                edits={dest: None},
            )


def _layer_split(ctx: Context) -> Iterator[Hit]:
    """model_hook.py:366-409: --enable-dsa-cache-layer-split is a PD-prefill, prefill-CP optimization."""
    mode = ctx.get("disaggregation_mode") or "null"
    if mode != "prefill":
        where = "on decode workers" if mode == "decode" else "outside PD prefill workers"
        yield Hit(
            f"--enable-dsa-cache-layer-split is not supported {where}", about="enable_dsa_cache_layer_split"
        )
        return
    if not ctx.get("enable_prefill_cp") or ctx.get("cp_strategy") != "interleave":
        yield Hit(
            "--enable-dsa-cache-layer-split requires --enable-prefill-cp and --cp-strategy interleave",
            about="enable_dsa_cache_layer_split",
        )
    elif (ctx.get("disaggregation_transfer_backend") or "mooncake") not in ("mooncake", "mooncake_tcp"):
        yield Hit(
            "--enable-dsa-cache-layer-split only supports the mooncake transfer backend",
            about="disaggregation_transfer_backend",
        )
    elif (ctx.get("pp_size", 1) or 1) > 1:
        yield Hit(
            "--enable-dsa-cache-layer-split is not supported with pipeline parallelism", about="pp_size"
        )


def _index_sharing(ctx: Context) -> bool:
    """model_hook.py:53-70: layers that reuse another layer's top-k indices."""
    config = dsa_config(ctx)
    pattern, types = config.get("index_topk_pattern"), config.get("indexer_types")
    return (
        (config.get("index_topk_freq") or 1) > 1
        or (pattern is not None and "S" in pattern)
        or (types is not None and "shared" in types)
    )


@rule(
    "DDT959",
    "DeepSeek Sparse Attention: HiSparse, cache-layer split, prefill CP and TBO",
    reads=(
        "enable_hisparse",
        "enable_dsa_cache_layer_split",
        "enable_prefill_cp",
        "cp_strategy",
        "enable_two_batch_overlap",
        "disaggregation_mode",
    ),
    needs=(FACT_MODEL, FACT_GPU),
    applies=lambda ctx: ctx.model is not None and ctx.model.known and is_dsa(ctx),
    reference=f"{AG}hisparse_hook.py:44-124 validate_hisparse; model_hook.py:53-70 "
    "_validate_dsa_tbo_index_sharing, 358-409; parallel_hook.py:124-130 handle_context_parallelism",
)
def dsa_features(ctx: Context) -> Iterator[Hit]:
    """On a DSA model: HiSparse needs the radix cache off, no mixed chunks, linear non-adaptive speculation
    and a DSA backend its KV dtype supports; prefill CP is for PD prefill (not decode) servers and, on
    DeepSeek V3.2, not zigzag; `--enable-dsa-cache-layer-split` runs on PD prefill workers with prefill CP
    (interleave), Mooncake and PP 1; two-batch overlap refuses models whose layers share index top-k."""
    if ctx.get("enable_hisparse"):
        yield from _hisparse(ctx, dsa_kv(ctx))
    if ctx.get("enable_prefill_cp"):
        if ctx.get("disaggregation_mode") == "decode":
            yield Hit(
                "prefill context parallelism is for PD prefill servers: remove --enable-prefill-cp on decode",
                about="enable_prefill_cp",
                edits={"enable_prefill_cp": None},
            )
        if ctx.known_model.architecture == "DeepseekV32ForCausalLM" and ctx.get("cp_strategy") == "zigzag":
            yield Hit(
                "DeepSeek V3.2 prefill CP does not support --cp-strategy zigzag; use interleave",
                about="cp_strategy",
                fix="set cp-strategy: interleave",
                edits={"cp_strategy": "interleave"},
            )
    if ctx.get("enable_dsa_cache_layer_split"):
        yield from _layer_split(ctx)
    if ctx.get("enable_two_batch_overlap") and _index_sharing(ctx):
        yield Hit(
            "--enable-two-batch-overlap is not supported with DSA index-topk sharing (layers reusing another "
            "layer's top-k indices)",
            about="enable_two_batch_overlap",
        )
