"""Serving checks of sglang 0.5.23 srt/arg_groups/serving_hook.py, validation_hook.py, lora_hook.py and
pd_disaggregation_hook.py: LoRA, sampling backend, companion options, range checks, PD-Multiplexing.
"""

from __future__ import annotations

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks import mamba
from ddtctl.rules.hooks.common import AG, nonpositive
from ddtctl.rules.hooks.memory import chunked_prefill
from ddtctl.rules.hooks.moe import resolved_ep


@rule(
    "DDT916",
    "LoRA needs adapters or their shape",
    reads=("enable_lora", "max_loras_per_batch"),
    applies=lambda ctx: (
        bool(ctx.get("enable_lora"))
        or nonpositive(ctx.get("max_loras_per_batch"))
        or str(ctx.get("moe_runner_backend") or "").startswith("lora")
        or (
            ctx.algorithm is not None
            and str(ctx.get("speculative_moe_runner_backend") or "").startswith("lora")
        )
    ),
    reference=f"{AG}lora_hook.py:36 (assert), lora_hook.py:152-154 (assert), lora_hook.py:186-196, 199-203",
)
def lora(ctx: Context):
    """`--max-loras-per-batch` must be positive; `--enable-lora` without `--lora-paths` needs
    `--max-lora-rank` and `--lora-target-modules`; a `lora_*` MoE runner needs `--enable-lora`, and is never
    the draft's (`--speculative-moe-runner-backend`)."""
    if nonpositive(ctx.get("max_loras_per_batch")):
        yield Hit(
            f"--max-loras-per-batch must be positive, got {ctx.get('max_loras_per_batch')}",
            about="max_loras_per_batch",
        )
    draft_runner = str(ctx.get("speculative_moe_runner_backend") or "")
    if ctx.algorithm is not None and draft_runner.startswith("lora"):
        yield Hit(
            f"--speculative-moe-runner-backend {draft_runner} is not supported: draft models have no LoRA "
            "adapters",
            about="speculative_moe_runner_backend",
            edits={"speculative_moe_runner_backend": None},
        )
    enabled = ctx.get("enable_lora") or ctx.given.get("lora_paths")
    if (
        ctx.get("enable_lora")
        and not ctx.given.get("lora_paths")
        and not (ctx.get("max_lora_rank") and ctx.given.get("lora_target_modules"))
    ):
        yield Hit(
            "--enable-lora without --lora-paths needs both --max-lora-rank and --lora-target-modules",
            about="enable_lora",
            fix="set lora-paths, or max-lora-rank and lora-target-modules",
        )
    backend = str(ctx.get("moe_runner_backend") or "")
    if backend.startswith("lora") and not enabled:
        yield Hit(
            f"--moe-runner-backend {backend} requires --enable-lora (or --lora-paths)",
            about="moe_runner_backend",
        )


@rule(
    "DDT917",
    "the intel_xpu sampling backend needs an XPU device",
    reads=("sampling_backend",),
    applies=lambda ctx: ctx.get("sampling_backend") == "intel_xpu" and ctx.get("device") != "xpu",
    reference=f"{AG}validation_hook.py:480-487 check_server_args",
)
def sampling_backend(ctx: Context):
    """`--sampling-backend intel_xpu` requires `--device xpu`."""
    return Hit(
        "--sampling-backend intel_xpu requires --device xpu",
        fix="remove sampling-backend",
        edits={"sampling_backend": None},
    )


@rule(
    "DDT924",
    "serving options that need their companions",
    reads=("enable_ssl_refresh", "enable_quant_communications"),
    applies=lambda ctx: (
        bool(ctx.get("enable_ssl_refresh"))
        or bool(ctx.get("enable_quant_communications"))
        or bool(ctx.get("enable_prefill_cp"))
    ),
    reference=f"{AG}serving_hook.py:83-86 handle_ssl_validation; "
    "validation_hook.py:349-353 check_server_args; "
    f"parallel_hook.py:151-154 handle_context_parallelism",
)
def companions(ctx: Context):
    """`--enable-ssl-refresh` needs `--ssl-certfile` and `--ssl-keyfile`; `--enable-quant-communications`
    needs tp-size > 1 on an NPU device; `--enable-prefill-cp` needs `--cp-strategy`."""
    if ctx.get("enable_ssl_refresh") and not (ctx.given.get("ssl_certfile") and ctx.given.get("ssl_keyfile")):
        yield Hit(
            "--enable-ssl-refresh requires --ssl-certfile and --ssl-keyfile", about="enable_ssl_refresh"
        )
    if ctx.get("enable_quant_communications"):
        if (ctx.get("tp_size", 1) or 1) == 1:
            yield Hit(
                "--enable-quant-communications is only used with --tp-size > 1",
                about="enable_quant_communications",
            )
        elif ctx.get("device") != "npu":
            yield Hit(
                "--enable-quant-communications is only supported on the NPU device",
                about="enable_quant_communications",
            )
    if ctx.get("enable_prefill_cp") and ctx.given.get("cp_strategy") is None:
        yield Hit("--enable-prefill-cp requires --cp-strategy", about="enable_prefill_cp")


@rule(
    "DDT925",
    "prefill_complete allocation is for PD-disaggregated Mooncake deployments",
    reads=("disaggregation_decode_allocation_policy",),
    applies=lambda ctx: ctx.get("disaggregation_decode_allocation_policy") == "prefill_complete",
    reference=f"{AG}pd_disaggregation_hook.py:47-48, 198-215 _validate_prefill_complete",
)
def prefill_complete(ctx: Context):
    """`--disaggregation-decode-allocation-policy prefill_complete` needs a prefill or decode node, the
    Mooncake transfer backend, pp/attn-cp/dcp 1 and attention TP 1 (tp-size equal to the attention-DP
    size)."""
    problems = []
    if ctx.get("disaggregation_mode") not in ("prefill", "decode"):
        problems.append("aggregated serving")
    if (ctx.get("disaggregation_transfer_backend") or "mooncake") != "mooncake":
        problems.append("transfer backends other than Mooncake")
    if any((ctx.get(d, 1) or 1) != 1 for d in ("pp_size", "attn_cp_size", "dcp_size")):
        problems.append("pipeline or attention context parallelism")
    dp = (ctx.get("dp_size", 1) or 1) if ctx.get("enable_dp_attention") else 1
    if ctx.get("tp_size", 1) != dp:
        problems.append("attention tensor parallelism greater than one")
    if problems:
        return Hit(
            "--disaggregation-decode-allocation-policy prefill_complete does not yet support "
            + ", ".join(problems),
            fix="remove disaggregation-decode-allocation-policy",
            edits={"disaggregation_decode_allocation_policy": None},
        )


# (dest, lowest allowed, SGLang's check): plain range checks of the resolver
_RANGES = (
    ("prefill_decode_interval", 0, "validation_hook.py:659-660"),
    ("prefill_decode_interval_min_bs", 0, "validation_hook.py:661-662"),
    ("schedule_conservativeness", 0, "validation_hook.py:314-316"),
    ("tokenizer_worker_num", 1, "validation_hook.py:273"),
    ("detokenizer_worker_num", 1, "validation_hook.py:274"),
    ("mm_processor_worker_num", 0, "validation_hook.py:275"),
    ("mm_io_worker_num", 0, "validation_hook.py:276"),
    ("base_gpu_id", 0, "validation_hook.py:204"),
    ("gpu_id_step", 1, "validation_hook.py:205"),
    ("sampling_mask_max_tokens", 1, "validation_hook.py:686-690"),
    ("swa_prefix_tails", 0, "kv_cache_hook.py:429-431 handle_cache_compatibility"),
    (
        "linear_replayssm_cache_len",
        1,
        "attention_hook.py:431-435 handle_linear_attn_backend (with ReplaySSM)",
    ),
    ("cuda_graph_prefill_max_context", 1, "cuda_graph_hook.py:423-427 _resolve_max_context_size"),
    ("asr_max_buffer_seconds", 1e-9, "serving_hook.py:124-129 handle_asr_validation"),
    ("asr_max_concurrent_sessions", 1, "serving_hook.py:131-135 handle_asr_validation"),
    ("grpc_response_timeout_secs", 1e-9, "serving_hook.py:378-379 handle_deprecated_args"),
    ("mm_preprocess_cache_size_mb", 0, "serving_hook.py:141-145 handle_multimodal"),
    ("media_url_max_file_size_mb", 0, "serving_hook.py:204-213 -> utils/common.py:1783"),
)
# (dest, lowest, highest, whether the lowest is excluded, SGLang's check): checked on both sides
_INTERVALS = (
    ("swa_full_tokens_ratio", 0, 1, True, "kv_cache_hook.py:427-428 handle_cache_compatibility"),
    (
        "disaggregation_decode_host_receive_threshold",
        0,
        1,
        False,
        "pd_disaggregation_hook.py:64-67 handle_pd_disaggregation",
    ),
)


@rule(
    "DDT935",
    "values SGLang range-checks",
    reads=tuple(d for d, _, _ in _RANGES) + tuple(i[0] for i in _INTERVALS),
    applies=lambda ctx: (
        any(ctx.is_set(d) for d, _, _ in _RANGES)
        or any(ctx.is_set(i[0]) for i in _INTERVALS)
        or (ctx.given.get("moe_dp_size") or 1) > 1
    ),
    reference=f"{AG}validation_hook.py:657-662 validate_prefill_decode_interval; validation_hook.py "
    f"check_server_args; kv_cache_hook.py:429-431",
)
def ranges(ctx: Context):
    """Integer options SGLang range-checks at resolve time: --prefill-decode-interval(-min-bs) and
    --schedule-conservativeness non-negative; tokenizer / detokenizer workers >= 1; multimodal workers >= 0;
    --base-gpu-id >= 0, --gpu-id-step >= 1; --sampling-mask-max-tokens positive; --swa-prefix-tails
    non-negative; --linear-replayssm-cache-len >= 1 with ReplaySSM; --cuda-graph-prefill-max-context and
    --asr-max-buffer-seconds positive; --asr-max-concurrent-sessions and --grpc-response-timeout-secs
    positive, --mm-preprocess-cache-size-mb and --media-url-max-file-size-mb non-negative;
    --swa-full-tokens-ratio in (0, 1] and --disaggregation-decode-host-receive-threshold in [0, 1];
    --moe-dp-size divides tp-size, with ep-size x moe-dp-size = tp-size, pp-size 1 and attn-cp-size equal
    to it."""
    for dest, low, where in _RANGES:
        value = ctx.given.get(dest)
        if dest == "linear_replayssm_cache_len" and not ctx.get("enable_linear_replayssm"):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < low:
            bound = "positive" if low == 1e-9 else f">= {low}"
            yield Hit(
                f"--{dest.replace('_', '-')} must be {bound}, got {value} ({where})",
                about=dest,
                fix=f"remove {dest.replace('_', '-')}",
                edits={dest: None},
            )
    for dest, low, high, open_low, where in _INTERVALS:
        value = ctx.given.get(dest)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if (value <= low if open_low else value < low) or value > high:
            yield Hit(
                f"--{dest.replace('_', '-')} must be in {'(' if open_low else '['}{low}, {high}], "
                f"got {value} ({where})",
                about=dest,
                fix=f"remove {dest.replace('_', '-')}",
                edits={dest: None},
            )
    moe_dp = ctx.given.get("moe_dp_size")
    if isinstance(moe_dp, int) and moe_dp > 1:
        # parallel_hook.py:170-191 handle_context_parallelism (assert)
        tp, ep = ctx.get("tp_size", 1) or 1, resolved_ep(ctx)
        if tp % moe_dp:
            yield Hit(f"--tp-size ({tp}) must be divisible by --moe-dp-size ({moe_dp})", about="moe_dp_size")
        elif ep * moe_dp > tp or (ep > 1 and ep * moe_dp != tp):
            yield Hit(
                f"ep-size x moe-dp-size ({ep} x {moe_dp}) must equal --tp-size ({tp}) (or ep-size 1)",
                about="moe_dp_size",
            )
        elif (ctx.get("pp_size", 1) or 1) != 1:
            yield Hit("--moe-dp-size > 1 does not support pipeline parallelism", about="moe_dp_size")
        elif (ctx.get("attn_cp_size", 1) or 1) != moe_dp:
            yield Hit(
                f"--moe-dp-size ({moe_dp}) must equal --attn-cp-size ({ctx.get('attn_cp_size', 1)})",
                about="moe_dp_size",
            )


@rule(
    "DDT936",
    "PD-Multiplexing runs alone",
    reads=("enable_pdmux",),
    applies=lambda ctx: bool(ctx.get("enable_pdmux")),
    reference=f"{AG}validation_hook.py:248-262 check_server_args (assert)",
)
def pdmux(ctx: Context):
    """`--enable-pdmux` needs pp-size 1, chunked prefill off (`--chunked-prefill-size -1`: SGLang's default is
    on), no PD disaggregation and overlap scheduling off."""
    if (ctx.get("pp_size", 1) or 1) != 1:
        return Hit("PD-Multiplexing needs --pp-size 1", about="pp_size")
    chunk = chunked_prefill(ctx)
    if chunk is not None and chunk != -1:
        return Hit(
            f"PD-Multiplexing is not compatible with chunked prefill (--chunked-prefill-size {chunk}"
            f"{'' if ctx.is_set('chunked_prefill_size') else ', SGLang default'}): set it to -1",
            about="chunked_prefill_size",
            fix="set chunked-prefill-size: -1",
            edits={"chunked_prefill_size": -1},
        )
    if (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit("PD-Multiplexing is not compatible with PD disaggregation", about="disaggregation_mode")
    if not overlap_disabled(ctx):
        return Hit(
            "PD-Multiplexing is not compatible with overlap scheduling",
            about="enable_pdmux",
            fix="set disable-overlap-schedule: true",
            edits={"disable_overlap_schedule": True},
        )


def overlap_disabled(ctx: Context) -> bool:
    """disable_overlap_schedule as SGLang resolves it: given, pp > 1 (overrides.py:1623-1628), or the mamba
    cache's `auto` strategy falling back to no_buffer (overrides.py:484-486)."""
    if ctx.get("disable_overlap_schedule") or (ctx.get("pp_size", 1) or 1) > 1:
        return True

    return (
        mamba.mamba_cache_active(ctx)
        and mamba.effective_strategy(ctx) == "no_buffer"
        and mamba.mamba_strategy(ctx) == "auto"
    )


@rule(
    "DDT939",
    "--enable-nvidia-megakernel needs the sgl-nvidia-mega plugin",
    severity="warning",
    reads=("enable_nvidia_megakernel",),
    applies=lambda ctx: bool(ctx.get("enable_nvidia_megakernel")),
    reference="sglang 0.5.23 srt/kernel_plugins/nvidia/binding.py:288-298, 363-382 handle_nvidia_megakernel",
)
def nvidia_megakernel(ctx: Context):
    """SGLang refuses `--enable-nvidia-megakernel` unless the sgl-nvidia-mega plugin is installed on the
    server host and has a spec for the model; ddtctl cannot see either (`ddtctl dry-run` on the host can)."""
    return Hit(
        "--enable-nvidia-megakernel needs the sgl-nvidia-mega plugin on the server host, with a spec for "
        "this model: not checked statically (run `ddtctl dry-run` on the host)",
        about="enable_nvidia_megakernel",
    )
