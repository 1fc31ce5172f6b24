"""Model-gated checks of sglang 0.5.23 srt/arg_groups/model_hook.py (and hisparse_hook.py,
pd_disaggregation_hook.py for encoder disaggregation): context length, sparse attention, language-model-only,
family-only options.
"""

from __future__ import annotations

from typing import Any, Iterator

from ddtctl.rules.engine import (
    FACT_MODEL,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.common import AG, attn_dp_size
from ddtctl.rules.hooks.mamba import EXTRA, at_mamba, mamba_strategy
from ddtctl.rules.hooks.resolution import is_dsa


@rule(
    "DDT919",
    "context length within the model's",
    reads=("context_length",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        ctx.is_set("context_length")
        and ctx.model is not None
        and ctx.model.source not in ("profile", "unknown")
    ),
    reference="sglang 0.5.23 srt/configs/model_config.py:1291-1310 _derive_context_length; "
    "utils/hf_transformers/common.py:677 get_context_length",
    evidence="SGLang's resolver raises it in ModelConfig (model_config.py:1291-1310), outside the raise-site "
    "walk; the DDT919 pair is rejected by SGLang (tests/fidelity/test_fuzz.py hook pairs)",
)
def context_length(ctx: Context):
    """A `--context-length` above the model's derived context length (max_position_embeddings x rope factor)
    is rejected unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set in the server's environment."""
    derived = derived_context_length(ctx.known_model.raw)
    value = ctx.get("context_length")
    if derived is not None and value > derived:
        return Hit(
            f"--context-length {value} is greater than the model's derived context length {derived} "
            "(SGLang refuses unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)",
            fix=f"set context-length: {derived} or less",
            edits={"context_length": derived},
        )


_CONTEXT_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


def derived_context_length(raw: dict[str, Any]) -> int | None:
    config: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    rope = config.get("rope_scaling") or {}
    factor = 1
    if isinstance(rope, dict) and rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in _CONTEXT_KEYS:
        if config.get(key) is not None:
            return int(factor * config[key])
    return None if not raw else 2048


_CP_DECODE_ATTN_TP_ARCHITECTURES = (
    "DeepseekV4ForCausalLM",
    "DeepseekV4ForCausalLMNextN",
    "DeepseekV4ForCausalLMDSpark",
    "GlmMoeDsaForCausalLM",
    "GlmMoeDsaForCausalLMNextN",
)


@rule(
    "DDT926",
    "sparse-attention features need a sparse-attention model",
    reads=("enable_hisparse", "enable_dsa_cache_layer_split", "enable_cp_decode_attn_tp"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: any(
        ctx.get(d) for d in ("enable_hisparse", "enable_dsa_cache_layer_split", "enable_cp_decode_attn_tp")
    ),
    reference=f"{AG}hisparse_hook.py:100-108 validate_hisparse (assert); model_hook.py:187-205 "
    "handle_model_specific_adjustments; layers/cp/cp_decode_attn_tp.py:29-37",
)
def sparse_attention_features(ctx: Context):
    """`--enable-hisparse` and `--enable-dsa-cache-layer-split` need a DeepSeek-Sparse-Attention model
    (DeepSeek V3.2, GLM-5, ...; hisparse also DeepSeek V4 and MiniMax M3); `--enable-cp-decode-attn-tp` needs
    DeepSeek V4 or GLM-5 DSA."""
    arch = ctx.known_model.architecture
    dsa = is_dsa(ctx)
    hisparse_ok = dsa or str(arch).startswith("DeepseekV4") or "MiniMaxM3" in str(arch)
    if ctx.get("enable_hisparse") and not hisparse_ok:
        yield Hit(
            f"--enable-hisparse is only supported for DSA models, DeepSeek V4 and MiniMax M3, not {arch}",
            about="enable_hisparse",
            edits={"enable_hisparse": None},
            fix="remove enable-hisparse",
        )
    if ctx.get("enable_dsa_cache_layer_split") and not dsa:
        yield Hit(
            f"--enable-dsa-cache-layer-split is only supported for DSA models, not {arch}",
            about="enable_dsa_cache_layer_split",
            edits={"enable_dsa_cache_layer_split": None},
        )
    if ctx.get("enable_cp_decode_attn_tp") and arch not in _CP_DECODE_ATTN_TP_ARCHITECTURES:
        yield Hit(
            f"--enable-cp-decode-attn-tp is only supported for DeepSeek V4 and GLM-5 DSA, not {arch}",
            about="enable_cp_decode_attn_tp",
            edits={"enable_cp_decode_attn_tp": None},
        )


# server_args.py:335-340 LANGUAGE_MODEL_ONLY_ARCHITECTURES
LANGUAGE_MODEL_ONLY_ARCHITECTURES = (
    "DeepseekV4ForCausalLM",
    "MuseGlimmerForConditionalGeneration",
    "Cosmos3ForConditionalGeneration",
    "Cosmos3EdgeForConditionalGeneration",
)


# pd_disaggregation_hook.py:352-371
ENCODER_DISAGGREGATION_ARCHITECTURES = (
    "Qwen2VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration",
    "Qwen3OmniMoeForConditionalGeneration",
    "Qwen2AudioForConditionalGeneration",
    "Qwen2_5OmniForConditionalGeneration",
    "Dots3NoteForCausalLM",
    "KimiVLForConditionalGeneration",
    "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration",
    "MiMoV2ForCausalLM",
    "Glm5NextForConditionalGeneration",
    "MiniMaxM3SparseForConditionalGeneration",
    "MuseSparkForConditionalGeneration",
)


@rule(
    "DDT929",
    "--language-model-only and encoder disaggregation",
    reads=("language_model_only",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: any(
        ctx.get(d) for d in ("language_model_only", "enable_prefix_mm_cache", "encoder_only", "language_only")
    ),
    reference=f"{AG}model_hook.py:1079-1108 handle_language_model_only; "
    f"pd_disaggregation_hook.py:298-314, 352-375 handle_encoder_disaggregation",
)
def language_model_only(ctx: Context):
    """`--language-model-only` serves only the language model of a multimodal checkpoint: DeepSeek V4, Muse
    Glimmer and Cosmos3 only; not with --encoder-only / --language-only / --enable-prefix-mm-cache /
    --enable-broadcast-mm-inputs-process / --mm-enable-dp-encoder, nor PD disaggregation.
    `--enable-prefix-mm-cache` needs `--encoder-only`, which excludes `--language-only` and PD disaggregation;
    `--encoder-only` / `--language-only` need a multimodal architecture SGLang splits (Qwen2/2.5/3-VL,
    Qwen3.5/3.6, Kimi-VL, ...)."""
    if ctx.get("language_model_only"):
        for dest in (
            "encoder_only",
            "language_only",
            "enable_prefix_mm_cache",
            "enable_broadcast_mm_inputs_process",
            "mm_enable_dp_encoder",
        ):
            if ctx.get(dest):
                return Hit(
                    f"--language-model-only cannot be combined with --{dest.replace('_', '-')}", about=dest
                )
        model_type = (ctx.known_model.raw or {}).get("model_type")
        if (ctx.get("disaggregation_mode") or "null") != "null" and model_type != "deepseek_v41":
            return Hit(
                "--language-model-only is incompatible with --disaggregation-mode prefill/decode",
                about="disaggregation_mode",
            )
        arch = ctx.known_model.architecture
        if arch not in LANGUAGE_MODEL_ONLY_ARCHITECTURES:
            return Hit(
                f"--language-model-only does not support {arch} (only "
                f"{', '.join(LANGUAGE_MODEL_ONLY_ARCHITECTURES)})",
                about="language_model_only",
                fix="remove language-model-only",
                edits={"language_model_only": None},
            )
    if ctx.get("enable_prefix_mm_cache") and not ctx.get("encoder_only"):
        return Hit("--enable-prefix-mm-cache requires --encoder-only", about="enable_prefix_mm_cache")
    if ctx.get("encoder_only") and ctx.get("language_only"):
        return Hit("--encoder-only and --language-only exclude each other", about="encoder_only")
    if ctx.get("encoder_only") and (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit(
            "--encoder-only cannot be combined with --disaggregation-mode prefill/decode",
            about="encoder_only",
        )
    split = (
        "encoder_only" if ctx.get("encoder_only") else "language_only" if ctx.get("language_only") else None
    )
    arch = ctx.known_model.architecture
    if split and arch not in ENCODER_DISAGGREGATION_ARCHITECTURES:
        return Hit(
            f"--{split.replace('_', '-')} (encoder disaggregation) does not support {arch}",
            about=split,
            fix=f"remove {split.replace('_', '-')}",
            edits={split: None},
        )


@rule(
    "DDT934",
    "options that only one model family implements",
    reads=("enable_encoder_swa_bounded_replay", "shared_experts_tp_size"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        bool(ctx.get("enable_encoder_swa_bounded_replay")) or ctx.is_set("shared_experts_tp_size")
    ),
    reference=f"{AG}model_hook.py:1036-1045 handle_model_capability_adjustments; "
    f"parallel_hook.py:202-226 handle_shared_experts_tp",
)
def model_gated(ctx: Context):
    """`--enable-encoder-swa-bounded-replay` needs DeepSeek-V4.1; `--shared-experts-tp-size` is a positive
    divisor of the attention TP size and Kimi-K3 only."""
    model = ctx.known_model
    arch = model.architecture
    if ctx.get("enable_encoder_swa_bounded_replay") and (model.raw or {}).get("model_type") != "deepseek_v41":
        yield Hit(
            f"--enable-encoder-swa-bounded-replay requires DeepSeek-V4.1, not {arch}",
            about="enable_encoder_swa_bounded_replay",
            edits={"enable_encoder_swa_bounded_replay": None},
        )
    size = ctx.given.get("shared_experts_tp_size")
    if size is not None:
        attn_tp = max(
            (ctx.get("tp_size", 1) or 1)
            // max(attn_dp_size(ctx), 1)
            // max(ctx.get("attn_cp_size", 1) or 1, 1),
            1,
        )
        if size < 1 or attn_tp % size:
            yield Hit(
                f"--shared-experts-tp-size ({size}) must be a positive divisor of the attention TP size "
                f"({attn_tp})",
                about="shared_experts_tp_size",
            )
        elif arch != "KimiK3ForConditionalGeneration":
            yield Hit(
                f"--shared-experts-tp-size is only supported for Kimi-K3, not {arch}",
                about="shared_experts_tp_size",
                edits={"shared_experts_tp_size": None},
            )


# `--quantization` choices that layers/quantization/__init__.py registers only on other platforms (NPU, CPU,
# XPU, Apple MPS): argparse offers them, and on a CUDA GPU ModelConfig rejects them as unknown.
NOT_ON_CUDA = {
    "gptq": "NPU, CPU and XPU (layers/quantization/__init__.py:107-133); on CUDA use gptq_marlin",
    "mlx_q4": "Apple MPS (layers/quantization/__init__.py:136-142)",
    "mlx_q8": "Apple MPS (layers/quantization/__init__.py:136-142)",
}


@rule(
    "DDT942",
    "quantization methods registered only on other platforms",
    reads=("quantization",),
    applies=lambda ctx: ctx.get("quantization") in NOT_ON_CUDA and ctx.gpu is not None,
    reference="sglang/srt/configs/model_config.py:2151-2155 (Unknown quantization method); "
    "layers/quantization/__init__.py:56-142 BASE_QUANTIZATION_METHODS",
    evidence="SGLang's resolver raises it in ModelConfig (model_config.py:2151-2155), outside the raise-site "
    "walk; the DDT942 pair is rejected by SGLang (tests/fidelity/test_fuzz.py hook pairs)",
)
def quantization_platform(ctx: Context):
    """`--quantization gptq`, `mlx_q4` and `mlx_q8` are argparse choices on every platform, but SGLang
    registers them only on NPU/CPU/XPU (gptq) or Apple MPS (mlx): on an NVIDIA GPU the model config
    rejects them."""
    method = ctx.get("quantization")
    gpu = ctx.gpu
    yield Hit(
        f"--quantization {method} is registered only on {NOT_ON_CUDA[method]}; SGLang rejects it on "
        f"{gpu.name if gpu else 'a CUDA GPU'} as an unknown quantization method",
        about="quantization",
        fix="use gptq_marlin for GPTQ checkpoints" if method == "gptq" else "remove quantization",
        edits={"quantization": "gptq_marlin" if method == "gptq" else None},
    )


_ALLOW_LISTED = (
    "GptOssForCausalLM",
    "Llama4ForConditionalGeneration",
    "Llama4ForCausalLM",
    "Exaone4ForCausalLM",
    "ExaoneMoEForCausalLM",
    "ExaoneMoeForCausalLM",
    "Olmo2ForCausalLM",
    "Lfm2ForCausalLM",
    "Lfm2MoeForCausalLM",
)
# model_hook.py:526-719 handle_model_specific_adjustments: attention backends each architecture refuses
_GPT_OSS_BACKENDS = ("triton", "trtllm_mha", "fa3", "fa4", "ascend", "intel_amx", "intel_xpu", "aiter")
_LLAMA4_BACKENDS = ("fa3", "aiter", "triton", "ascend", "trtllm_mha", "intel_xpu")
_EXAONE_BACKENDS = ("fa3", "triton", "trtllm_mha")


def _given_backends(ctx: Context) -> tuple[str | None, str | None, str | None]:
    """(attention, prefill, decode) backends as given (the architecture's model override fills an unset
    one with a backend it accepts)."""
    main = ctx.given.get("attention_backend")
    return (
        main,
        ctx.given.get("prefill_attention_backend") or main,
        ctx.given.get("decode_attention_backend") or main,
    )


def _architecture_backend(ctx: Context, arch: str) -> Hit | None:
    """The attention-backend allow-list of `arch` (None: accepted or not checked)."""
    main, prefill, decode = _given_backends(ctx)
    raw = ctx.known_model.raw or {}
    if arch == "GptOssForCausalLM":
        bad = [b for b in (prefill, decode) if b is not None and b not in _GPT_OSS_BACKENDS]
        if bad:
            return Hit(
                f"{arch} runs attention on {', '.join(_GPT_OSS_BACKENDS)}, not {bad[0]}",
                about="attention_backend",
            )
    elif arch in ("Llama4ForConditionalGeneration", "Llama4ForCausalLM") and ctx.given.get("device") != "cpu":
        if main is not None and main not in _LLAMA4_BACKENDS:
            return Hit(
                f"{arch} runs attention on {', '.join(_LLAMA4_BACKENDS)}, not {main}",
                about="attention_backend",
            )
    elif arch in ("Exaone4ForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM"):
        sliding = raw.get("sliding_window_pattern", 4 if raw.get("model_type") == "exaone4" else None)
        if sliding is not None and main is not None and main not in _EXAONE_BACKENDS:
            return Hit(
                f"{arch} runs attention on {', '.join(_EXAONE_BACKENDS)}, not {main}",
                about="attention_backend",
            )
    elif arch == "Olmo2ForCausalLM" and main == "flashinfer":
        return Hit(
            f"{arch} does not run attention on flashinfer (SGLang refuses it)", about="attention_backend"
        )
    elif arch in ("Lfm2ForCausalLM", "Lfm2MoeForCausalLM") and main == "triton":
        return Hit(
            f"{arch} does not support the triton attention backend (its first layer may not be an attention "
            "layer)",
            about="attention_backend",
        )
    return None


@rule(
    "DDT963",
    "architectures' attention-backend allow-lists and GPT-OSS's Triton-kernel MoE",
    reads=(
        "attention_backend",
        "prefill_attention_backend",
        "decode_attention_backend",
        "moe_runner_backend",
    ),
    needs=(FACT_MODEL,),
    applies=lambda ctx: ctx.model is not None and ctx.model.architecture in _ALLOW_LISTED,
    reference=f"{AG}model_hook.py:526-570 (GptOssForCausalLM), 607-626 (Llama4), 669-683 (Exaone4), 684-695 "
    "(Olmo2), 714-721 (Lfm2) handle_model_specific_adjustments (assert)",
)
def architecture_backends(ctx: Context) -> Iterator[Hit]:
    """GPT-OSS runs attention on triton, trtllm_mha, fa3 or fa4 (on NVIDIA) and its triton_kernel MoE with
    ep-size 1; Llama 4 on fa3, triton or trtllm_mha; Exaone 4 (sliding-window) on fa3, triton or trtllm_mha;
    Olmo2 not on flashinfer; LFM2 not on triton. (Unset, each architecture's model override picks one it
    accepts.)"""
    arch = str(ctx.known_model.architecture)
    hit = _architecture_backend(ctx, arch)
    if hit is not None:
        yield hit
    if arch == "GptOssForCausalLM" and ctx.get("moe_runner_backend") == "triton_kernel":
        ep = (
            ctx.get("tp_size", 1)
            if (ctx.get("moe_a2a_backend") or "none") != "none"
            else ctx.get("ep_size", 1)
        )
        if (ep or 1) != 1:
            yield Hit("GPT-OSS's triton_kernel MoE runs with --ep-size 1 only", about="ep_size")


@rule(
    "DDT501",
    "an extra-buffer mamba strategy needs a hybrid model",
    reads=("mamba_radix_cache_strategy",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: mamba_strategy(ctx) in EXTRA and not at_mamba(ctx)[2],
    reference="sglang 0.5.23 model_hook.py:1057-1067 handle_mamba_radix_cache; "
    "model_override_base.py:260-265 mamba_extra_buffer_of",
)
def extra_buffer_non_mamba(ctx: Context):
    """`--mamba-radix-cache-strategy extra_buffer[_lazy]` arms the mamba state paths; on a model without mamba
    state SGLang refuses (`needs mamba state`), unless the radix cache is off (then the strategy is inert)."""
    if not ctx.is_hybrid:
        return Hit(
            f"--mamba-radix-cache-strategy {mamba_strategy(ctx)} needs a hybrid Mamba/GDN model, "
            f"got {ctx.known_model.architecture}",
            fix="remove mamba-radix-cache-strategy",
            edits={"mamba_radix_cache_strategy": None},
        )
