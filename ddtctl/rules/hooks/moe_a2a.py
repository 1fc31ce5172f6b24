"""MoE all-to-all backends and runner x quantization checks of sglang 0.5.23 srt/arg_groups/moe_hook.py and
overrides.py that the flags, the model's config.json, the GPU generation and the server's SGLANG_*
environment decide: FlashInfer A2A dispatch types and workspace, FlashInfer MegaMoE, DeepEP normal
dispatch, DeepEP v2, PPLX and their per-rank dispatch budgets (DDT961); FP8 Cutlass, CuteDSL per-token
NVFP4 and `nvfp4_online` (DDT962)."""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size, env_flag, env_int, env_set
from ddtctl.rules.hooks.graphs import DISABLED, decode_graph
from ddtctl.rules.hooks.memory import chunked_prefill, default_decode_graph_bs
from ddtctl.rules.hooks.moe import moe_quantization, resolved_a2a, resolved_ep

_W4A16 = "SGLANG_FLASHINFER_CUTEDSL_NVFP4_W4A16"
# choices.py:161-167 MXFP8_MOE_RUNNER_BACKEND_CHOICES
_MXFP8_RUNNERS = (
    "cutlass",
    "deep_gemm",
    "flashinfer_megamoe",
    "flashinfer_trtllm",
    "flashinfer_trtllm_routed",
)
_FLASHINFER_A2A_RUNNERS = (  # moe_hook.py:530-540
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_trtllm",
    "flashinfer_trtllm_routed",
    "deep_gemm",
)


def _runner(ctx: Context) -> str:
    return str(ctx.get("moe_runner_backend") or "auto")


def _prefill_tokens(ctx: Context) -> int:
    """overrides.py:1865-1883 max_prefill_buffer_tokens: the per-DP chunk (0 without chunked prefill)."""
    chunk = chunked_prefill(ctx) or 0
    return chunk if chunk > 0 else 0


def _decode_graph_tokens(ctx: Context) -> int | None:
    """moe_hook.py:653-675: requests x tokens per request of the largest decode / verify CUDA graph on one DP
    rank (0 without one; None: unknown here, a speculative width SGLang derives)."""
    if ctx.get("disaggregation_mode") == "prefill" or decode_graph(ctx) == DISABLED:
        return 0
    bs = ctx.given.get("cuda_graph_max_bs_decode") or default_decode_graph_bs(ctx)
    if bs is None:
        return None
    running = ctx.given.get("max_running_requests")
    if running is not None:
        bs = min(bs, max(1, running // attn_dp_size(ctx)))
    if ctx.algorithm is None:
        return bs
    width = ctx.given.get("speculative_num_draft_tokens")
    return bs * width if isinstance(width, int) else None


def _flashinfer(ctx: Context) -> Iterator[Hit]:
    """moe_hook.py:470-540 (FlashInfer A2A), 165-208 (its dispatch type), 744-775 (its workspace)."""
    runner, dispatch, quant = (
        _runner(ctx),
        ctx.given.get("flashinfer_a2a_dispatch_type"),
        moe_quantization(ctx),
    )
    if quant == "mxfp8" and runner not in _MXFP8_RUNNERS:
        runner = "flashinfer_trtllm"  # overrides.py:1484-1510: mxfp8 overrides other runners
    w4a16 = runner == "flashinfer_cutedsl" and env_flag(ctx, _W4A16)
    if w4a16 and env_flag(ctx, "SGLANG_MOE_NVFP4_DISPATCH"):
        yield Hit("CuTe DSL NVFP4 W4A16 needs BF16 dispatch: unset SGLANG_MOE_NVFP4_DISPATCH")
    if dispatch is not None:
        runner = "flashinfer_trtllm_routed" if runner == "flashinfer_trtllm" else runner
        if w4a16 and dispatch in ("auto", "nvfp4"):
            yield Hit("CuTe DSL NVFP4 W4A16 requires --flashinfer-a2a-dispatch-type bf16")
        if env_set(ctx, "SGLANG_MOE_NVFP4_DISPATCH"):
            yield Hit("SGLANG_MOE_NVFP4_DISPATCH cannot be set together with --flashinfer-a2a-dispatch-type")
        if dispatch == "auto":
            dispatch = {"mxfp8": "mxfp8", "modelopt_fp4": "nvfp4"}.get(str(quant), "bf16")
        if dispatch == "mxfp8" and quant != "mxfp8":
            yield Hit(
                "--flashinfer-a2a-dispatch-type mxfp8 requires --quantization mxfp8", about="quantization"
            )
        elif dispatch == "mxfp8" and runner != "flashinfer_trtllm_routed":
            yield Hit(
                "--flashinfer-a2a-dispatch-type mxfp8 requires --moe-runner-backend "
                "flashinfer_trtllm(_routed)",
                about="moe_runner_backend",
            )
        elif dispatch == "nvfp4" and quant is not False and quant != "modelopt_fp4":
            yield Hit(
                "--flashinfer-a2a-dispatch-type nvfp4 requires NVFP4 (modelopt_fp4) quantization",
                about="flashinfer_a2a_dispatch_type",
            )
    if runner not in _FLASHINFER_A2A_RUNNERS and (runner != "auto" or quant is None):
        yield Hit(
            "the FlashInfer MoE all-to-all runs with --moe-runner-backend "
            f"{'/'.join(_FLASHINFER_A2A_RUNNERS)}, not {runner}",
            about="moe_runner_backend",
            fix="set moe-runner-backend: flashinfer_cutlass",
        )
    yield from _flashinfer_budget(ctx)


def _flashinfer_budget(ctx: Context) -> Iterator[Hit]:
    """moe_hook.py:744-775 validate_flashinfer_a2a_token_budget."""
    decode = ctx.get("disaggregation_mode") == "decode"
    if not decode and (chunked_prefill(ctx) or 0) <= 0:
        yield Hit(
            "the FlashInfer MoE all-to-all requires chunked prefill (--chunked-prefill-size > 0)",
            about="chunked_prefill_size",
        )
        return
    buffer = _prefill_tokens(ctx)
    capacity = env_int(ctx, "SGLANG_FLASHINFER_NUM_MAX_DISPATCH_TOKENS_PER_RANK", None) or max(buffer, 4096)
    graph = _decode_graph_tokens(ctx)
    required = max(0 if decode else buffer, graph or 0)
    if required > capacity:
        yield Hit(
            f"the FlashInfer MoE all-to-all needs {required} tokens per rank, above its workspace "
            f"({capacity}): raise SGLANG_FLASHINFER_NUM_MAX_DISPATCH_TOKENS_PER_RANK or lower "
            "--chunked-prefill-size / the CUDA-graph batch sizes",
            about="chunked_prefill_size",
        )


def _megamoe(ctx: Context) -> Iterator[Hit]:
    """moe_hook.py:210-232 validate_flashinfer_megamoe_envs, 314-341 (FlashInfer MegaMoE)."""
    combine = ctx.env.get("SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE", "bf16").strip().lower()
    if env_flag(ctx, _W4A16) and combine != "bf16":
        yield Hit("FlashInfer MegaMoE NVFP4 W4A16 requires SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE=bf16")
    elif combine not in ("bf16", "mxfp8", "nvfp4"):
        yield Hit(f"SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE must be bf16, mxfp8 or nvfp4, got {combine}")
    elif combine != "bf16" and env_flag(ctx, "SGLANG_FLASHINFER_MEGAMOE_IN_KERNEL_FC2_REDUCE"):
        yield Hit(
            f"SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE={combine} is incompatible with "
            "SGLANG_FLASHINFER_MEGAMOE_IN_KERNEL_FC2_REDUCE=1"
        )
    if env_flag(ctx, _W4A16) and _dtype(ctx) not in ("bfloat16", None):
        yield Hit("FlashInfer MegaMoE NVFP4 W4A16 requires --dtype bfloat16", about="dtype")
    tp, dp = ctx.get("tp_size", 1) or 1, attn_dp_size(ctx)
    if dp <= 1 or dp != tp:
        yield Hit(
            f"FlashInfer MegaMoE needs --attn-dp-size equal to --tp-size ({tp}), got {dp}",
            about="attn_dp_size",
        )
    runner, quant = _runner(ctx), moe_quantization(ctx)
    if quant == "mxfp8" and runner not in _MXFP8_RUNNERS or runner == "auto":
        runner = "flashinfer_megamoe"  # moe_hook.py:326-330, overrides.py:1497-1510
    if runner != "flashinfer_megamoe" and not (quant == "nvfp4_online" and runner == "auto"):
        yield Hit(
            f"FlashInfer MegaMoE requires --moe-runner-backend flashinfer_megamoe, got {runner}",
            about="moe_runner_backend",
            fix="remove moe-runner-backend",
            edits={"moe_runner_backend": None},
        )
    if ctx.gpu is not None and ctx.gpu.sm // 10 != 10:
        yield Hit(f"FlashInfer MegaMoE requires an SM100-family GPU, not SM{ctx.gpu.sm}")


def _dtype(ctx: Context) -> str | None:
    """The model dtype: --dtype, else the checkpoint's torch_dtype (None: unknown)."""
    given = str(ctx.get("dtype") or "auto")
    aliases = {"half": "float16", "bf16": "bfloat16", "float": "float32", "fp16": "float16"}
    if given != "auto":
        return aliases.get(given, given)
    raw = (ctx.model.raw if ctx.model is not None else None) or {}
    value = raw.get("torch_dtype") or raw.get("dtype")
    return aliases.get(str(value), str(value)) if value else None


def _deepep_v2(ctx: Context) -> Iterator[Hit]:
    """moe_hook.py:402-440 (DeepEP v2), 624-640 (as a draft backend), 677-701 (its dispatch budget)."""
    if str(ctx.get("model_path") or "").startswith("instance://"):
        yield Hit(
            "DeepEP v2 cannot validate a model loaded through an instance connector", about="model_path"
        )
    if _runner(ctx) not in ("auto", "deep_gemm"):
        yield Hit(
            f"DeepEP v2 supports only --moe-runner-backend deep_gemm, got {_runner(ctx)}",
            about="moe_runner_backend",
            fix="set moe-runner-backend: deep_gemm",
            edits={"moe_runner_backend": "deep_gemm"},
        )
    for dest in ("enable_two_batch_overlap", "enable_single_batch_overlap", "enforce_shared_experts_fusion"):
        if ctx.get(dest):
            yield Hit(f"DeepEP v2 does not support --{dest.replace('_', '-')} yet", about=dest)
    if ctx.get("deepep_v2_mode") == "direct" and (ctx.get("nnodes", 1) or 1) > 1:
        yield Hit("--deepep-v2-mode direct is NVLink-only: use hybrid across nodes", about="deepep_v2_mode")
    draft = ctx.given.get("speculative_moe_a2a_backend")
    if draft is None and ctx.algorithm not in (None, "NGRAM"):
        draft = "deepep_v2"
    if draft == "deepep_v2":
        yield Hit(
            "DeepEP v2 is not validated as a speculative draft backend: set --speculative-moe-a2a-backend",
            about="speculative_moe_a2a_backend",
        )
    capacity = env_int(ctx, "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 128) or 0
    scatter = max(1, (ctx.get("tp_size", 1) or 1) // attn_dp_size(ctx))
    ceiling = _prefill_tokens(ctx) or (ctx.given.get("max_prefill_tokens") or 0)
    prefill = -(-ceiling // scatter)
    if ctx.get("disaggregation_mode") != "decode" and prefill > capacity:
        yield Hit(
            f"DeepEP v2 dispatches {prefill} prefill tokens per rank, above "
            f"SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK ({capacity}): raise it or lower "
            "--chunked-prefill-size",
            about="chunked_prefill_size",
        )
    graph = _decode_graph_tokens(ctx)
    if graph is not None and graph > capacity:
        yield Hit(
            f"DeepEP v2's decode CUDA graph dispatches {graph} tokens per rank, above "
            f"SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK ({capacity}): raise it or lower "
            "--cuda-graph-max-bs-decode",
            about="cuda_graph_max_bs_decode",
        )


def _pplx(ctx: Context) -> Iterator[Hit]:
    """moe_hook.py:575-621 (PPLX)."""
    if ctx.get("deepep_mode") == "normal":
        yield Hit(
            "PPLX only supports low-latency dispatch: set --deepep-mode low_latency or auto",
            about="deepep_mode",
        )
    if _runner(ctx) not in ("auto", "deep_gemm"):
        yield Hit(
            f"PPLX runs with --moe-runner-backend deep_gemm, not {_runner(ctx)}", about="moe_runner_backend"
        )
    chunk = chunked_prefill(ctx) or 0
    if chunk > 0 and ctx.get("disaggregation_mode") != "decode":
        required = max(chunk, ctx.given.get("cuda_graph_max_bs_decode") or 0)
        capacity = env_int(ctx, "SGLANG_PPLX_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 128) or 0
        if required > capacity:
            yield Hit(
                f"PPLX dispatches {required} tokens per rank, above "
                f"SGLANG_PPLX_NUM_MAX_DISPATCH_TOKENS_PER_RANK ({capacity}): raise it or lower "
                "--chunked-prefill-size",
                about="chunked_prefill_size",
            )


@rule(
    "DDT961",
    "MoE all-to-all backends: FlashInfer A2A, MegaMoE, DeepEP, DeepEP v2, PPLX",
    reads=(
        "moe_a2a_backend",
        "moe_runner_backend",
        "flashinfer_a2a_dispatch_type",
        "deepep_mode",
        "chunked_prefill_size",
        "cuda_graph_max_bs_decode",
        "attn_dp_size",
    ),
    applies=lambda ctx: (
        resolved_a2a(ctx) in ("flashinfer", "flashinfer_megamoe", "deepep", "deepep_v2", "pplx")
    ),
    reference=f"{AG}moe_hook.py:165-232, 302-621 handle_a2a_moe, 624-775 (dispatch budgets)",
)
def a2a_dispatch(ctx: Context) -> Iterator[Hit]:
    """FlashInfer A2A: a flashinfer / deep_gemm runner, a dispatch type its quantization supports (mxfp8:
    --quantization mxfp8 with the routed TRT-LLM runner; nvfp4: modelopt_fp4), no SGLANG_MOE_NVFP4_DISPATCH
    with an explicit dispatch type, chunked prefill and a workspace the largest forward fits. FlashInfer
    MegaMoE: attn-dp-size = tp-size, SM100, bf16 with W4A16, a valid combine dtype. DeepEP normal dispatch
    has no CuteDSL FP4 handler. DeepEP v2: the deep_gemm runner, no TBO / SBO / forced shared-expert fusion,
    NVLink-only direct mode on one node, not as a draft backend, and prefill chunks / decode graphs within
    SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 128). PPLX: low-latency deep_gemm with chunks
    within SGLANG_PPLX_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 128)."""
    a2a = resolved_a2a(ctx)
    if a2a == "flashinfer":
        yield from _flashinfer(ctx)
    elif a2a == "flashinfer_megamoe":
        yield from _megamoe(ctx)
    elif a2a == "deepep" and _runner(ctx) == "flashinfer_cutedsl" and ctx.get("deepep_mode") == "normal":
        yield Hit(
            "flashinfer_cutedsl FP4 MoE only supports DeepEP low_latency dispatch: set --deepep-mode "
            "low_latency or auto",
            about="deepep_mode",
            edits={"deepep_mode": "low_latency"},
        )
    elif a2a == "deepep_v2":
        yield from _deepep_v2(ctx)
    elif a2a == "pplx":
        yield from _pplx(ctx)


@rule(
    "DDT962",
    "MoE runners: FP8 Cutlass EP, CuteDSL per-token NVFP4, nvfp4_online",
    reads=("moe_runner_backend", "quantization", "ep_size", "moe_a2a_backend"),
    applies=lambda ctx: (
        _runner(ctx) in ("cutlass", "flashinfer_cutedsl")
        or ctx.given.get("quantization") in ("nvfp4_online", "modelopt_fp4")
    ),
    reference=f"{AG}moe_hook.py:94-163 handle_moe_kernel_config; overrides.py:1448-1478 "
    "_moe_runner_backend_quant_constraints",
)
def moe_runner_layout(ctx: Context) -> Iterator[Hit]:
    """The FP8 / MXFP8 Cutlass MoE runs with ep-size 1; CuteDSL per-token NVFP4 activation (nvfp4_online or
    SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION) cannot use DeepEP; `--quantization nvfp4_online` needs an
    SM100 / SM103 GPU and the flashinfer_trtllm(_routed) or flashinfer_cutedsl runner."""
    runner, quant = _runner(ctx), ctx.given.get("quantization")
    if runner == "cutlass" and quant in ("fp8", "mxfp8") and resolved_ep(ctx) != 1:
        yield Hit("FP8 / MXFP8 Cutlass MoE is only supported with --ep-size 1", about="ep_size")
    per_token = quant == "nvfp4_online" or env_flag(ctx, "SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION")
    if runner == "flashinfer_cutedsl" and resolved_a2a(ctx) == "deepep" and per_token:
        yield Hit(
            "flashinfer_cutedsl per-token NVFP4 activation needs --moe-a2a-backend none or flashinfer, not "
            "deepep",
            about="moe_a2a_backend",
        )
    if quant == "nvfp4_online":
        if ctx.gpu is not None and ctx.gpu.sm not in (100, 103):
            yield Hit(f"--quantization nvfp4_online runs on SM100 / SM103 GPUs only, not SM{ctx.gpu.sm}")
        megamoe = (
            runner == "flashinfer_megamoe"
            and resolved_a2a(ctx) == "flashinfer_megamoe"
            and env_flag(ctx, _W4A16)
        )
        if (
            runner not in ("auto", "flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutedsl")
            and not megamoe
        ):
            yield Hit(
                f"--quantization nvfp4_online supports --moe-runner-backend flashinfer_trtllm(_routed) or "
                f"flashinfer_cutedsl, not {runner}",
                about="moe_runner_backend",
            )
