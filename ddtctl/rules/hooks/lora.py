"""LoRA checks of sglang 0.5.23 srt/arg_groups/lora_hook.py beyond DDT916: adapter limits and the triton_v2
backend's modes (DDT952), the LoRA MoE runners (DDT953), LoRA with speculative decoding (DDT954)."""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size


def _lora_on(ctx: Context) -> bool:
    """enable_lora as check_lora_server_args resolves it: given, or implied by --lora-paths unless off."""
    enabled = ctx.given.get("enable_lora")
    return bool(enabled) or (enabled is None and bool(ctx.given.get("lora_paths")))


def _v2_modes(ctx: Context, option: str) -> Iterator[Hit]:
    """lora_hook.py:20-30 _check_v2_lora_modes (the env / ROCm modes stay with `ddtctl dry-run`)."""
    for unsupported, mode in (
        (attn_dp_size(ctx) > 1, "DP-attention with --attn-dp-size > 1"),
        (bool(ctx.get("enable_pdmux")), "PD-multiplexing"),
        (bool(ctx.get("enable_two_batch_overlap")), "two-batch overlap"),
    ):
        if unsupported:
            yield Hit(f"{option} does not yet support {mode}", about="lora_backend")


@rule(
    "DDT952",
    "LoRA adapter limits and the triton_v2 backend's modes",
    reads=("enable_lora", "lora_paths", "max_loaded_loras", "max_loras_per_batch", "lora_target_modules"),
    applies=_lora_on,
    reference=f"{AG}lora_hook.py:50-178 check_lora_server_args, 20-30 _check_v2_lora_modes",
)
def lora_limits(ctx: Context) -> Iterator[Hit]:
    """With LoRA on: `--lora-backend triton_v2` (outside a lora_* MoE runner) refuses attention DP,
    PD-multiplexing and two-batch overlap; overlap loading needs `--max-loaded-loras` <= 2 x
    `--max-loras-per-batch`; `all` in `--lora-target-modules` stands alone; `--max-loaded-loras` is at least
    `--max-loras-per-batch` and the number of `--lora-paths`; `--lora-drain-wait-threshold` is non-negative.
    """
    per_batch = ctx.get("max_loras_per_batch", 8) or 8
    loaded = ctx.given.get("max_loaded_loras")
    if ctx.get("lora_backend") == "triton_v2" and not str(ctx.get("moe_runner_backend") or "").startswith(
        "lora"
    ):
        yield from _v2_modes(ctx, "--lora-backend triton_v2")
    if ctx.get("enable_lora_overlap_loading") and (loaded is None or loaded > per_batch * 2):
        yield Hit(
            "Enabling LoRA overlap loading requires pinning LoRA adapter weights in CPU memory, so "
            f"--max-loaded-loras must be less than or equal to double --max-loras-per-batch: {per_batch * 2}",
            about="enable_lora_overlap_loading",
            fix=f"set max-loaded-loras: {per_batch * 2}",
            edits={"max_loaded_loras": per_batch * 2},
        )
    modules = ctx.given.get("lora_target_modules") or []
    if "all" in modules and len(modules) != 1:
        yield Hit(
            "If 'all' is specified in --lora-target-modules, it should be the only module specified.",
            about="lora_target_modules",
            edits={"lora_target_modules": ["all"]},
        )
    if isinstance(loaded, int):
        paths = ctx.given.get("lora_paths") or []
        if loaded < per_batch:
            yield Hit(
                "max_loaded_loras should be greater than or equal to max_loras_per_batch. "
                f"max_loaded_loras={loaded}, max_loras_per_batch={per_batch}",
                about="max_loaded_loras",
            )
        elif len(paths) > loaded:
            yield Hit(
                "The number of LoRA paths should not exceed max_loaded_loras. "
                f"max_loaded_loras={loaded}, lora_paths={len(paths)}",
                about="max_loaded_loras",
            )
    threshold = ctx.given.get("lora_drain_wait_threshold")
    if isinstance(threshold, (int, float)) and threshold < 0:
        yield Hit(
            "--lora-drain-wait-threshold must be non-negative.",
            about="lora_drain_wait_threshold",
            edits={"lora_drain_wait_threshold": None},
        )


@rule(
    "DDT953",
    "a LoRA MoE runner needs triton_v2 LoRA, Standard dispatch and trivial expert placement",
    reads=("moe_runner_backend", "lora_backend", "quantization", "moe_a2a_backend"),
    applies=lambda ctx: str(ctx.get("moe_runner_backend") or "").startswith("lora") and _lora_on(ctx),
    reference=f"{AG}lora_hook.py:183-237 check_lora_moe_runner_args",
    evidence="lora_hook.py:201-234 raise each check, but coverage.yaml keys those sites by their shared "
    "first "
    "fragment ('--moe-runner-backend'), mapped to DDT916; the DDT953 pairs are rejected there by SGLang "
    "(tests/fidelity/test_fuzz.py hook pairs)",
)
def lora_moe_runner(ctx: Context) -> Iterator[Hit]:
    """`--moe-runner-backend lora_*` (with LoRA on; DDT916 says when it is off) needs `--lora-backend
    triton_v2` and its modes, unquantized / fp8 / modelopt_fp4 weights (modelopt_fp4 only on lora_marlin),
    `--moe-a2a-backend none`, no elastic EP, and no EPLB / non-trivial expert location / redundant experts."""
    backend = str(ctx.get("moe_runner_backend"))
    option = f"--moe-runner-backend {backend}"
    if ctx.get("lora_backend") != "triton_v2":
        yield Hit(
            f"{option} requires --lora-backend triton_v2",
            about="lora_backend",
            fix="set lora-backend: triton_v2",
            edits={"lora_backend": "triton_v2"},
        )
        return
    yield from _v2_modes(ctx, option)
    quant = ctx.given.get("quantization")
    if quant not in (None, "fp8", "modelopt_fp4"):
        yield Hit(
            f"{option} supports unquantized BF16, 128-block FP8 and ModelOpt NVFP4 MoE, "
            f"got --quantization {quant}",
            about="quantization",
        )
    elif quant == "modelopt_fp4" and backend != "lora_marlin":
        yield Hit(
            f"{option} cannot run ModelOpt NVFP4 MoE; use --moe-runner-backend lora_marlin",
            about="moe_runner_backend",
            edits={"moe_runner_backend": "lora_marlin"},
        )
    a2a = ctx.get("moe_a2a_backend") or "none"
    if a2a != "none":
        yield Hit(
            f"{option} requires Standard dispatch, got --moe-a2a-backend {a2a}", about="moe_a2a_backend"
        )
    if ctx.given.get("ep_join_mode") is not None:
        yield Hit(f"{option} does not yet support elastic EP", about="ep_join_mode")
    if (
        ctx.get("enable_eplb")
        or (ctx.get("init_expert_location") or "trivial") != "trivial"
        or (ctx.get("ep_num_redundant_experts") or 0) > 0
    ):
        yield Hit(
            f"{option} currently requires trivial expert placement without EPLB or redundant experts",
            about="moe_runner_backend",
        )


_LORA_SPEC = ("EAGLE", "EAGLE3", "DFLASH", "DSPARK")


@rule(
    "DDT954",
    "LoRA works with NGRAM, EAGLE, EAGLE3, DFLASH or DSPARK speculative decoding",
    reads=("enable_lora", "speculative_algorithm"),
    applies=lambda ctx: _lora_on(ctx) and ctx.algorithm not in (None, "NGRAM"),
    reference=f"{AG}lora_hook.py:240-301 check_lora_speculative_compatibility",
)
def lora_speculative(ctx: Context) -> Iterator[Hit]:
    """LoRA adapters apply to the target only: SGLang allows NGRAM, EAGLE (NEXTN), EAGLE3, DFLASH and DSPARK,
    and not the experimental_sgl_trtllm MoE runner on either model."""
    algo = ctx.algorithm
    if algo not in _LORA_SPEC:
        yield Hit(
            "LoRA is only compatible with NGRAM, EAGLE, NEXTN, EAGLE3, DFLASH, or DSPARK speculative "
            f"decoding, not {algo}.",
            about="speculative_algorithm",
        )
        return
    if "experimental_sgl_trtllm" in (
        ctx.get("moe_runner_backend"),
        ctx.get("speculative_moe_runner_backend"),
    ):
        yield Hit(
            "LoRA with EAGLE/NEXTN/EAGLE3 speculative decoding does not support the "
            "experimental_sgl_trtllm MoE runner",
            about="moe_runner_backend",
        )
