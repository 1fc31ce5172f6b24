"""Attention-backend checks of sglang 0.5.23 srt/arg_groups/attention_hook.py (and overrides.py's MLA checks):
MLA and TRT-LLM backends per GPU generation, deterministic inference, flex_attention, linear attention.
"""

from __future__ import annotations

from ddtctl.rules.engine import FACT_GPU, FACT_MODEL, Context, Hit, rule
from ddtctl.rules.hooks.common import AG
from ddtctl.rules.hooks.resolution import (
    BACKEND_ALIASES,
    DETERMINISTIC_DEEPSEEK,
    backends,
    is_deterministic,
    known_resolution,
    resolve,
)


@rule(
    "DDT912",
    "MLA attention backends: GPU generation, kv dtype, decode only",
    reads=("attention_backend", "decode_attention_backend", "prefill_attention_backend"),
    needs=(FACT_GPU,),
    applies=lambda ctx: _mla_backend_involved(ctx),
    reference="sglang 0.5.23 srt/arg_groups/overrides.py:1203-1218 _mla_kv_cache_dtype_checks; "
    "overrides.py:1232-1256 _cutedsl_prefill_backend_fill; serving_hook.py:304-333 (tokenspeed_mla); "
    "model_overrides/deepseek_v2.py:177-185 (trtllm_mla on SM100)",
)
def mla_backends(ctx: Context):
    """trtllm_mla (as attention or decode backend, also SGLang's own choice for DeepSeek V3 on SM100) needs a
    Blackwell GPU and kv-cache-dtype fp8_e4m3/bf16/auto; cutedsl_mla (and its deprecated spelling
    tokenspeed_mla, which also forces an fp8_e4m3 KV cache) is decode-only (never the prefill backend), SM100
    only, kv-cache-dtype fp8_e4m3/bf16/auto."""
    res = resolve(ctx)
    if res is not None:
        main, decode, prefill, dtype = res.attention, res.decode, res.prefill, res.kv_cache_dtype
        explicit_prefill = ctx.get("prefill_attention_backend")  # tokenspeed_mla prefill becomes trtllm_mla
    else:
        main, decode, prefill = (
            BACKEND_ALIASES.get(ctx.get(d), ctx.get(d))
            for d in ("attention_backend", "decode_attention_backend", "prefill_attention_backend")
        )
        if ctx.get("prefill_attention_backend") == "tokenspeed_mla":
            prefill = "trtllm_mla"
        if prefill is not None and prefill == decode:
            main = prefill
        dtype = ctx.get("kv_cache_dtype") or "auto"
        explicit_prefill = ctx.get("prefill_attention_backend")
    gpu = ctx.known_gpu
    sm = gpu.sm
    chosen = (
        ""
        if {"trtllm_mla"} & {ctx.get("attention_backend"), ctx.get("decode_attention_backend")}
        else " (chosen by SGLang for this model and GPU)"
    )
    if "trtllm_mla" in (main, decode):
        if sm < 100:
            return Hit(
                f"attention backend trtllm_mla needs a Blackwell GPU (SM100/SM12x), not {gpu.name}",
                fix="use attention-backend: flashinfer or triton",
            )
        if dtype not in ("fp8_e4m3", "bf16", "auto"):
            return Hit(
                f"attention backend trtllm_mla{chosen} supports kv-cache-dtype fp8_e4m3, bf16 or auto, "
                f"not {dtype}",
                about="kv_cache_dtype",
                fix="set kv-cache-dtype: fp8_e4m3",
                edits={"kv_cache_dtype": "fp8_e4m3"},
            )
    if "cutedsl_mla" in (main, decode, prefill):
        if explicit_prefill == "cutedsl_mla":
            return Hit(
                "cutedsl_mla only supports decoding: it cannot be the prefill attention backend",
                about="prefill_attention_backend",
                fix="remove prefill-attention-backend",
            )
        if sm not in (100, 103):
            return Hit(
                f"attention backend cutedsl_mla (tokenspeed_mla) needs an SM100 GPU, not {gpu.name} (sm{sm})",
                fix="use attention-backend: flashinfer or triton",
            )
        if dtype not in ("fp8_e4m3", "bf16", "bfloat16", "auto"):
            return Hit(
                f"attention backend cutedsl_mla supports kv-cache-dtype fp8_e4m3, bf16 or auto, not {dtype}",
                about="kv_cache_dtype",
            )


def _mla_backend_involved(ctx: Context) -> bool:
    given = {
        ctx.get("attention_backend"),
        ctx.get("decode_attention_backend"),
        ctx.get("prefill_attention_backend"),
    }
    if given & {"trtllm_mla", "cutedsl_mla"} or "tokenspeed_mla" in (
        ctx.get("attention_backend"),
        ctx.get("decode_attention_backend"),
    ):
        return True
    res = resolve(ctx)
    return res is not None and "trtllm_mla" in (res.attention, res.decode)


@rule(
    "DDT913",
    "deterministic inference runs on a deterministic attention backend",
    reads=("enable_deterministic_inference", "attention_backend"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=is_deterministic,
    reference="sglang 0.5.23 srt/arg_groups/attention_hook.py:580-662 handle_deterministic_inference; "
    "overrides.py:1093-1123 _deterministic_attention_backend; choices.py:113, 249",
)
def deterministic(ctx: Context):
    """`--enable-deterministic-inference` (also turned on by `--rl-on-policy-target`) supports attention
    backends ascend, fa3, fa4, flashinfer, intel_xpu and triton; the backend counts as SGLang has it at
    that point, which includes a model's own override (trtllm_mha for Qwen3.5/3.6 hybrids and trtllm_mla
    for DeepSeek on SM100). Unset, SGLang picks fa3 (Hopper) or flashinfer / triton (Blackwell).
    DeepSeek-style MLA models need one that keeps the radix cache (ascend, fa3, fa4, triton), and fa4 only
    on SM100 / SM110."""
    res = known_resolution(ctx)
    for kind, where, message in res.errors:
        if kind == "deterministic":
            return Hit(
                f"{message} ({where})",
                about="attention_backend"
                if ctx.is_set("attention_backend")
                else "enable_deterministic_inference",
                fix="set attention-backend: triton",
                edits={"attention_backend": "triton"},
            )
    if (
        ctx.known_model.architecture in DETERMINISTIC_DEEPSEEK
        and res.attention == "fa4"
        and ctx.known_gpu.sm // 10 not in (10, 11)
    ):
        # attention_hook.py:646-653: absorbed MLA's qv argument exists on SM100 / SM110 only
        return Hit(
            f"deterministic inference with an absorbed-MLA model on fa4 requires SM100 / SM110, not "
            f"SM{ctx.known_gpu.sm}",
            about="attention_backend",
            fix="set attention-backend: fa3",
            edits={"attention_backend": "fa3"},
        )
    return None


@rule(
    "DDT914",
    "flex_attention does not run speculative decoding",
    reads=("attention_backend",),
    applies=lambda ctx: ctx.get("attention_backend") == "flex_attention" and ctx.algorithm is not None,
    reference=f"{AG}attention_hook.py:161-163 handle_attention_backend_compatibility (assert)",
)
def flex_spec(ctx: Context):
    """The flex_attention backend does not support speculative decoding."""
    return Hit(
        "speculative decoding is not supported with the flex_attention backend",
        fix="use attention-backend: triton",
        edits={"attention_backend": "triton"},
    )


@rule(
    "DDT933",
    "linear-attention FlashInfer kernels on SM100+ need a bfloat16 SSM state",
    reads=(
        "linear_attn_backend",
        "linear_attn_decode_backend",
        "linear_attn_verify_backend",
        "mamba_ssm_dtype",
    ),
    needs=(FACT_GPU,),
    applies=lambda ctx: any(
        ctx.is_set(d)
        for d in ("linear_attn_backend", "linear_attn_decode_backend", "linear_attn_verify_backend")
    ),
    reference=f"{AG}attention_hook.py:280-377 handle_linear_attn_backend",
)
def linear_attn(ctx: Context):
    """The FlashInfer GDN decode / verify kernels on SM100 and newer need `--mamba-ssm-dtype bfloat16` (for
    any model: SGLang checks the flags, not the architecture); `--linear-attn-decode-backend flashkda` is
    refused (FlashKDA is prefill-only)."""
    if ctx.get("linear_attn_decode_backend") == "flashkda":
        return Hit(
            "--linear-attn-decode-backend flashkda is not supported: FlashKDA is prefill-only",
            about="linear_attn_decode_backend",
            edits={"linear_attn_decode_backend": None},
            fix="use linear-attn-prefill-backend: flashkda",
        )
    gpu = ctx.known_gpu
    base, dtype, sm = ctx.get("linear_attn_backend"), ctx.get("mamba_ssm_dtype"), gpu.sm
    decode = ctx.get("linear_attn_decode_backend")
    if decode is None and base != "helion" and sm in (100, 103) and dtype == "bfloat16":
        decode = "flashinfer"
    decode = decode or base
    if decode == "flashkda":
        decode = "triton"
    verify = ctx.get("linear_attn_verify_backend") or ("flashinfer" if decode == "flashinfer" else None)
    for stage, backend in (("decode", decode), ("verify", verify)):
        if backend == "flashinfer" and dtype != "bfloat16" and sm >= 100:
            return Hit(
                f"--linear-attn-{stage}-backend flashinfer on {gpu.name} (SM100+) requires "
                f"--mamba-ssm-dtype bfloat16, got {dtype!r}",
                about="mamba_ssm_dtype",
                fix="set mamba-ssm-dtype: bfloat16",
                edits={"mamba_ssm_dtype": "bfloat16"},
            )


_CUDA_ONLY_TRTLLM = (90, 100, 103, 120)


@rule(
    "DDT937",
    "TRT-LLM MHA backends per GPU generation",
    reads=("attention_backend",),
    needs=(FACT_GPU,),
    applies=lambda ctx: "trtllm_mha" in _involved(ctx),
    reference=f"{AG}attention_hook.py:198-237 handle_attention_backend_compatibility",
)
def trtllm_mha_generation(ctx: Context):
    """trtllm_mha (as resolved prefill or decode backend) runs on SM90, SM100 and SM120 only; its SM120
    prefill (FMHAv2) does not take an fp8_e4m3 KV cache; prefill context parallelism on it needs SM100."""
    prefill, decode = backends(ctx)
    gpu = ctx.known_gpu
    sm = gpu.sm
    if "trtllm_mha" in (prefill, decode) and sm not in _CUDA_ONLY_TRTLLM:
        return Hit(
            f"attention backend trtllm_mha needs SM90, SM100 or SM120, not {gpu.name} (sm{sm})",
            fix="use attention-backend: triton or flashinfer",
            edits={"attention_backend": None},
        )
    res = resolve(ctx)
    kv = res.kv_cache_dtype if res is not None else ctx.get("kv_cache_dtype")
    if prefill == "trtllm_mha" and sm == 120 and kv == "fp8_e4m3":
        return Hit(
            "TRT-LLM FMHAv2 prefill (trtllm_mha) on SM120 does not support an fp8_e4m3 KV cache",
            about="kv_cache_dtype",
        )
    if prefill == "trtllm_mha" and sm not in (100, 103) and (ctx.get("attn_cp_size", 1) or 1) > 1:
        return Hit(
            "prefill context parallelism with the trtllm_mha prefill backend needs SM100",
            about="attn_cp_size",
        )


def _involved(ctx: Context) -> set:
    res = resolve(ctx)
    if res is None:
        return {
            ctx.get("attention_backend"),
            ctx.get("prefill_attention_backend"),
            ctx.get("decode_attention_backend"),
        }
    return set(res.pair)
