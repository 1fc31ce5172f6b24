"""MoE checks of sglang 0.5.23 srt/arg_groups/moe_hook.py and mega_moe_hook.py: all-to-all and runner
backends, EPLB / DWDP, two-batch overlap.
"""

from __future__ import annotations

from typing import Any

from ddtctl.rules.engine import INFO, Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size, is_speculative
from ddtctl.rules.hooks.memory import chunked_prefill, default_decode_graph_bs


@rule(
    "DDT902",
    "two-batch overlap without an EP all-to-all backend needs attention DP",
    reads=("enable_two_batch_overlap",),
    applies=lambda ctx: bool(ctx.get("enable_two_batch_overlap")),
    reference=f"{AG}validation_hook.py:763-771 check_two_batch_overlap",
)
def two_batch_overlap(ctx: Context):
    """`--enable-two-batch-overlap` with `--moe-a2a-backend none` is only valid on the DP-attention TP-MoE
    path."""
    if resolved_a2a(ctx) == "none" and attn_dp_size(ctx) <= 1:
        return Hit(
            "--enable-two-batch-overlap without an EP all-to-all backend (--moe-a2a-backend none) requires "
            "attention DP (--attn-dp-size > 1)",
            fix="remove enable-two-batch-overlap",
            edits={"enable_two_batch_overlap": None},
        )


@rule(
    "DDT905",
    "MoE all-to-all backends that need attention DP",
    reads=("moe_a2a_backend",),
    applies=lambda ctx: ctx.get("moe_a2a_backend") in ("pplx", "flashinfer"),
    reference=f"{AG}moe_hook.py:41-67, 475-487 (flashinfer), moe_hook.py:592 (pplx) handle_a2a_moe (assert)",
)
def a2a_needs_dp(ctx: Context):
    """`--moe-a2a-backend flashinfer` needs attention DP with --attn-dp-size equal to --tp-size (so not at tp
    1); `pplx` needs attention DP with at least 2 groups."""
    backend, dp, tp = ctx.get("moe_a2a_backend"), attn_dp_size(ctx), ctx.get("tp_size", 1)
    if backend == "pplx" and dp < 2:
        return Hit(
            "--moe-a2a-backend pplx requires attention DP with at least 2 groups (--attn-dp-size >= 2)"
        )
    if backend == "flashinfer" and not (dp > 1 and dp == tp):
        # moe_hook.py:41-67 _flashinfer_a2a_topology_is_supported: attention DP on (attn_dp_size > 1, which
        # runtime_context.py:191 attn_dp_enabled_of reads) with as many groups as TP ranks
        return Hit(
            f"--moe-a2a-backend flashinfer requires attention DP with --attn-dp-size equal to --tp-size "
            f"(attn-dp-size {dp}, tp-size {tp})"
        )


def moe_quantization(ctx: Context) -> str | None | bool:
    """--quantization (None for `unquant`: serving_hook.py:692-701 resolves it to None before the MoE
    asserts), or False when the checkpoint's own quantization_config decides (unknown here)."""
    given = ctx.given.get("quantization")
    if given is not None:
        return None if given == "unquant" else given
    raw = (ctx.model.raw if ctx.model is not None else None) or {}
    text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else {}
    if (
        raw.get("quantization_config")
        or text.get("quantization_config")
        or ctx.model is None
        or not ctx.model.known
    ):
        return False
    return None


# choices.py:161-167 MXFP8_MOE_RUNNER_BACKEND_CHOICES: the runners --quantization mxfp8 keeps
_MXFP8_RUNNERS = (
    "cutlass",
    "deep_gemm",
    "flashinfer_megamoe",
    "flashinfer_trtllm",
    "flashinfer_trtllm_routed",
)
_RUNNER_QUANT = {
    "flashinfer_cutlass": ("modelopt_fp4", "modelopt_fp8", "modelopt_mixed", None),
    "flashinfer_cutedsl": ("modelopt_fp4", "modelopt_mixed", "nvfp4_online"),
    "flashinfer_trtllm": (
        "modelopt_fp4",
        "nvfp4_online",
        "fp8",
        "mxfp8",
        "modelopt_fp8",
        "modelopt_mixed",
        "compressed-tensors",
        None,
    ),
    "experimental_sgl_trtllm": (
        "modelopt_fp4",
        "nvfp4_online",
        "fp8",
        "mxfp8",
        "modelopt_fp8",
        "modelopt_mixed",
        "compressed-tensors",
        None,
    ),
    "flashinfer_trtllm_routed": (
        "fp8",
        "mxfp8",
        "modelopt_fp4",
        "modelopt_mixed",
        "nvfp4_online",
        "minimax_m3_nvfp4",
        None,
    ),
}


@rule(
    "DDT930",
    "MoE runner backends and the quantizations they run",
    reads=("moe_runner_backend",),
    applies=lambda ctx: ctx.get("moe_runner_backend") in _RUNNER_QUANT,
    reference=f"{AG}moe_hook.py:70-163 handle_moe_kernel_config (assert)",
)
def moe_runner_quant(ctx: Context):
    """flashinfer_cutlass runs unquantized or ModelOpt FP4/FP8/mixed experts; flashinfer_cutedsl only NVFP4
    (modelopt_fp4, modelopt_mixed, nvfp4_online, or an NVFP4 checkpoint); flashinfer_trtllm(_routed) the FP4 /
    FP8 family or unquantized. flashinfer_cutlass and flashinfer_cutedsl need ep-size 1 or tp-size;
    flashinfer_cutedsl runs with moe-a2a-backend none, deepep or flashinfer. (Checked where the quantization
    is known: --quantization, or a checkpoint without a quantization_config.)"""
    backend = ctx.get("moe_runner_backend")
    quant = moe_quantization(ctx)
    if quant == "mxfp8" and backend not in _MXFP8_RUNNERS:
        # overrides.py:1484-1510: --quantization mxfp8 replaces a runner it does not run (with a warning)
        default = "flashinfer_megamoe" if resolved_a2a(ctx) == "flashinfer_megamoe" else "flashinfer_trtllm"
        return Hit(
            f"--quantization mxfp8 does not run on --moe-runner-backend {backend}: SGLang runs {default} "
            "instead",
            about="moe_runner_backend",
            severity=INFO,
            fix="remove moe-runner-backend",
            edits={"moe_runner_backend": None},
        )
    if quant is not False and quant not in _RUNNER_QUANT[backend]:
        label = "bfloat16 (no quantization)" if quant is None else repr(quant)
        return Hit(
            f"--moe-runner-backend {backend} does not run {label} experts (supports "
            f"{', '.join(str(q) for q in _RUNNER_QUANT[backend] if q)})",
            about="moe_runner_backend",
            fix="remove moe-runner-backend",
            edits={"moe_runner_backend": None},
        )
    if backend in ("flashinfer_cutlass", "flashinfer_cutedsl"):
        ep, tp = resolved_ep(ctx), ctx.get("tp_size", 1)
        if ep not in (1, tp):
            return Hit(
                f"--moe-runner-backend {backend} needs --ep-size 1 or --tp-size ({tp}), got {ep}",
                about="ep_size",
            )
        if backend == "flashinfer_cutedsl" and resolved_a2a(ctx) not in ("none", "deepep", "flashinfer"):
            return Hit(
                f"--moe-runner-backend flashinfer_cutedsl supports --moe-a2a-backend none, deepep or "
                f"flashinfer, not {resolved_a2a(ctx)}",
                about="moe_a2a_backend",
            )


# overrides.py:1578-1591 _A2A_EP_SPANNING_BACKENDS: these set ep-size to tp-size (overrides.py:1611-1620)
EP_SPANNING = (
    "megamoe",
    "deepep",
    "deepep_v2",
    "mooncake",
    "nixl",
    "ascend_fuseep",
    "flashinfer",
    "flashinfer_megamoe",
    "mori",
    "pplx",
)


def resolved_a2a(ctx: Context) -> str:
    """--moe-a2a-backend as resolved: `--moe-runner-backend megamoe` is an alias for
    `--moe-a2a-backend megamoe` (mega_moe_hook.py:259-276); Waterfill forces deepep (overrides.py:1596-1607);
    ascend_tp runs as none."""
    if ctx.get("moe_runner_backend") == "megamoe":
        return "megamoe"
    backend = ctx.get("moe_a2a_backend") or "none"
    if backend == "ascend_tp":
        return "none"  # moe_hook.py:459-468
    if ctx.get("enable_waterfill") and backend not in ("deepep", "megamoe"):
        return "deepep"
    return backend


def resolved_ep(ctx: Context) -> int:
    return ctx.get("tp_size", 1) if resolved_a2a(ctx) in EP_SPANNING else (ctx.get("ep_size", 1) or 1)


# configs/moe_model_registry.py:21-29 _DEEPEP_V2_MODELS
_DEEPEP_V2_ARCHITECTURES = (
    "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Glm5NextForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "MiMoV2ForCausalLM",
    "MiMoV2FlashForCausalLM",
)
_FLASHINFER_MEGAMOE_ARCHITECTURES = (  # moe_hook.py:240-254 validate_flashinfer_megamoe_model
    "BeamForCausalLM",
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM",
    "GlmMoeDsaForCausalLM",
    "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
    "KimiK3ForConditionalGeneration",
    "KimiK3LinearForCausalLM",
)


# mega_moe_hook.py:51-64 MEGA_MOE_NO_FALLBACK_ARCHS: these check the per-rank token budget
_MEGA_MOE_NO_FALLBACK = (
    "DeepseekV4ForCausalLM",
    "InternS2PreviewForConditionalGeneration",
    "MellumForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM",
    "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
)


_MEGA_MOE_TOKENS_PER_RANK = 8192  # environ.py:1470 SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK


def _mega_moe_budget(ctx: Context):
    """mega_moe_hook.py:160-256 validate_mega_moe_token_budget (CUDA, default env)."""
    budget = _MEGA_MOE_TOKENS_PER_RANK
    mode = ctx.get("disaggregation_mode") or "null"
    tp, dp, cp = ctx.get("tp_size", 1) or 1, attn_dp_size(ctx), ctx.get("attn_cp_size", 1) or 1
    if mode != "prefill" and not ctx.is_set("cuda_graph_max_bs") and ctx.gpu is not None:
        max_bs = default_decode_graph_bs(ctx)
        if max_bs is not None and ctx.is_set("max_running_requests"):
            per_rank = ctx.get("max_running_requests") // dp
            align = max(tp // dp, 1)
            max_bs = min(max_bs, -(-per_rank // align) * align)
        per_req: int | None = 1
        if ctx.algorithm is not None:
            per_req = ctx.given.get("speculative_num_draft_tokens") or ctx.draft_tokens()
        if max_bs is not None and per_req and max_bs * per_req > budget:
            return Hit(
                f"MegaMoE's per-rank token budget ({budget}, SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_"
                f"PER_RANK) is below the largest decode forward ({max_bs} x {per_req} tokens)",
                about="moe_a2a_backend",
                fix="lower cuda-graph-max-bs or max-running-requests",
            )
    if mode == "decode":
        return None
    chunk = chunked_prefill(ctx)
    if chunk is None:
        return None
    arch = ctx.known_model.architecture
    if chunk <= 0:
        return Hit(
            f"{arch} with MegaMoE requires chunked prefill (a positive --chunked-prefill-size)",
            about="chunked_prefill_size",
        )
    if dp > 1:
        local, align = chunk // dp, max(tp // dp // cp, 1)
    else:
        local, align = chunk, max(tp // cp, 1)
    need = -(-local // align) * align
    if need > budget:
        return Hit(
            f"{arch} with MegaMoE needs {need} prefill tokens per rank (chunked prefill "
            f"{chunk}{'' if ctx.is_set('chunked_prefill_size') else ', the default here'}), more than "
            f"SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK ({budget})",
            about="chunked_prefill_size",
            fix=f"set chunked-prefill-size: {budget}",
            edits={"chunked_prefill_size": budget},
        )
    return None


@rule(
    "DDT931",
    "MoE all-to-all backends: DeepEP v2, MoRI, MegaMoE, FlashInfer dispatch",
    reads=("moe_a2a_backend",),
    applies=lambda ctx: (
        resolved_a2a(ctx) in ("deepep_v2", "mori", "megamoe", "flashinfer_megamoe")
        or ctx.get("flashinfer_a2a_dispatch_type") not in (None, "auto")
    ),
    reference=f"{AG}moe_hook.py:405-420, 709-731 (deepep_v2); moe_hook.py:548-573, 834-837 (mori); "
    f"mega_moe_hook.py:22-48 check_mega_moe_compat, 160-256 validate_mega_moe_token_budget; "
    f"moe_hook.py:237-277, 315-335 (flashinfer_megamoe); moe_hook.py:307-313 (dispatch type)",
)
def a2a_backends(ctx: Context):
    """`--moe-a2a-backend deepep_v2` runs only on the architectures registered with register_deepep_v2_model
    (SGLang 0.5.23: DeepSeek V3 / V4, Qwen3 MoE, GLM-5 (DSA / Next), MiMo V2). MoRI dispatches a whole
    chunked-prefill chunk per rank: the chunked prefill size (SGLang's default is 8192 or 16384 on >= 90 GB
    GPUs) must not exceed SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (4096 unless set) except on a PD
    decode server or with chunked prefill off. MegaMoE (also `--moe-runner-backend megamoe`) needs an SM90
    or SM100 GPU and no two-batch / single-batch overlap; on MoE blocks without a fallback (Qwen2/3 MoE,
    Qwen3-Next, Qwen3.5/3.6 MoE, ...) each rank's prefill chunk and largest decode forward must fit
    SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK (8192 by default; SGLang's default chunked prefill
    is 16384 on >= 160 GB GPUs). FlashInfer MegaMoE (`flashinfer_megamoe`) is validated for DeepSeek, GLM-4
    MoE, Qwen2/3 MoE, Nemotron-H, Kimi-K3 and Beam only, with MXFP8 / NVFP4 experts.
    `--flashinfer-a2a-dispatch-type` needs `--moe-a2a-backend flashinfer`."""
    backend = resolved_a2a(ctx)
    if backend != "flashinfer" and ctx.get("flashinfer_a2a_dispatch_type") not in (None, "auto"):
        return Hit(
            "--flashinfer-a2a-dispatch-type requires --moe-a2a-backend flashinfer",
            about="flashinfer_a2a_dispatch_type",
            fix="remove flashinfer-a2a-dispatch-type",
            edits={"flashinfer_a2a_dispatch_type": None},
        )
    if backend == "flashinfer_megamoe" and ctx.model is not None and ctx.model.known:
        if ctx.model.architecture not in _FLASHINFER_MEGAMOE_ARCHITECTURES:
            return Hit(
                f"--moe-a2a-backend flashinfer_megamoe is not validated for {ctx.model.architecture}",
                about="moe_a2a_backend",
            )
        if moe_quantization(ctx) in (None, "fp8", "modelopt_fp8", "modelopt", "w8a8_fp8"):
            return Hit(
                "--moe-a2a-backend flashinfer_megamoe supports MXFP8 / NVFP4 (FP4) experts only, not "
                f"{moe_quantization(ctx) or 'unquantized'} ones",
                about="moe_a2a_backend",
            )
    if backend == "deepep_v2" and ctx.model is not None and ctx.model.known:
        if ctx.model.architecture in _DEEPEP_V2_ARCHITECTURES:
            return None
        return Hit(
            f"--moe-a2a-backend deepep_v2 is not validated for {ctx.model.architecture} (SGLang 0.5.23 "
            f"registers {', '.join(_DEEPEP_V2_ARCHITECTURES)}; another model package must call "
            "register_deepep_v2_model)",
            about="moe_a2a_backend",
            fix="use moe-a2a-backend: deepep",
            edits={"moe_a2a_backend": "deepep"},
        )
    if backend == "mori":
        chunk = chunked_prefill(ctx)
        if chunk is not None and chunk > 4096 and ctx.get("disaggregation_mode") != "decode":
            return Hit(
                f"--moe-a2a-backend mori dispatches up to --chunked-prefill-size ({chunk}) tokens per rank, "
                "more than SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (4096 by default)",
                about="chunked_prefill_size",
                fix="set chunked-prefill-size: 4096",
                edits={"chunked_prefill_size": 4096},
            )
    if backend == "megamoe":
        if ctx.get("enable_two_batch_overlap") or ctx.get("enable_single_batch_overlap"):
            return Hit(
                "--moe-a2a-backend megamoe has no two-batch / single-batch overlap",
                about="enable_two_batch_overlap",
            )
        if ctx.gpu is not None and ctx.gpu.sm not in (90, 100, 103):
            return Hit(
                f"--moe-a2a-backend megamoe needs an SM90 or SM100 GPU, not {ctx.gpu.name} (sm{ctx.gpu.sm})",
                about="moe_a2a_backend",
            )
        if ctx.model is not None and ctx.model.architecture in _MEGA_MOE_NO_FALLBACK:
            return _mega_moe_budget(ctx)


@rule(
    "DDT932",
    "EPLB and DWDP layouts",
    reads=("enable_eplb", "dwdp_size"),
    applies=lambda ctx: (
        bool(ctx.get("enable_eplb"))
        or (ctx.get("dwdp_size", 1) or 1) > 1
        or ctx.is_set("ep_dispatch_algorithm")
    ),
    reference=f"{AG}parallel_hook.py:433-457 handle_dwdp (assert); parallel_hook.py:750-791 "
    f"handle_eplb_and_dispatch",
)
def eplb_dwdp(ctx: Context):
    """`--enable-eplb` needs expert parallelism (ep-size > 1 as resolved: an EP-spanning all-to-all backend
    makes it tp-size) unless it joins by `--elastic-ep-join-mode scale`; `--ep-dispatch-algorithm static|lp`
    needs an all-to-all backend. `--dwdp-size` > 1 must equal tp-size, with no decode-only PD, EPLB,
    speculative decoding, pipeline parallelism or two-batch overlap."""
    dwdp = ctx.get("dwdp_size", 1) or 1
    if dwdp > 1:
        tp = ctx.get("tp_size", 1)
        if dwdp != tp:
            return Hit(f"--dwdp-size ({dwdp}) must equal --tp-size ({tp})", about="dwdp_size")
        for bad, why in (
            (
                ctx.get("disaggregation_mode") not in (None, "null", "prefill"),
                "--disaggregation-mode null or prefill",
            ),
            (bool(ctx.get("enable_eplb")), "no --enable-eplb"),
            (is_speculative(ctx), "no speculative decoding"),
            ((ctx.get("pp_size", 1) or 1) != 1, "--pp-size 1"),
            (bool(ctx.get("enable_two_batch_overlap")), "no two-batch overlap"),
        ):
            if bad:
                return Hit(f"DWDP (--dwdp-size {dwdp}) requires {why}", about="dwdp_size")
    if resolved_a2a(ctx) == "none" and ctx.get("ep_dispatch_algorithm") in ("static", "lp"):
        return Hit(
            f"--ep-dispatch-algorithm {ctx.get('ep_dispatch_algorithm')} needs an all-to-all backend; use "
            "dynamic with --moe-a2a-backend none",
            about="ep_dispatch_algorithm",
        )
    if ctx.get("enable_eplb") and ctx.get("ep_join_mode") != "scale" and resolved_ep(ctx) <= 1 and dwdp <= 1:
        return Hit(
            "--enable-eplb needs expert parallelism (--ep-size > 1)",
            about="enable_eplb",
            fix="set ep-size to tp-size, or remove enable-eplb",
        )
