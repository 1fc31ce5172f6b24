"""DDT938: feature switches SGLang 0.5.23 refuses outside their mode (many arg_groups hooks, one rule)."""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks import mamba
from ddtctl.rules.hooks.common import AG
from ddtctl.rules.hooks.memory import chunked_prefill
from ddtctl.rules.hooks.resolution import is_deterministic, resolve


@rule(
    "DDT938",
    "feature switches that need their mode",
    reads=(
        "enable_mamba_cache_stochastic_rounding",
        "prefill_only_disable_kv_cache",
        "is_embedding",
        "kv_cache_dtype",
        "chunked_prefill_size",
        "disable_radix_cache",
        "attn_cp_size",
        "enable_prefill_cp",
        "enable_hisparse",
    ),
    applies=lambda ctx: any(
        (
            ctx.get("enable_mamba_cache_stochastic_rounding"),
            (ctx.get("kv_canary_sweep_interval") or 0) > 0,
            ctx.get("retraction_policy") == "priority",
            ctx.get("enable_mis"),
            ctx.get("enable_amd_monokernel"),
            ctx.get("enable_deepseek_v4_fp4_indexer"),
            ctx.get("prefill_only_disable_kv_cache"),
            ctx.get("enable_page_major_kv_layout"),
            ctx.get("enable_linker_mla_dedup"),
            ctx.get("quantize_and_serve"),
            ctx.get("enable_kv_cache_sharding"),
            ctx.get("enable_linear_replayssm"),
            ctx.get("enable_linear_replayssm_spec"),
            ctx.get("radix_eviction_policy") == "tlru",
            ctx.get("dcp_comm_backend") in ("a2a", "fi_a2a"),
        )
    ),
    reference=f"{AG}mamba_hook.py:30-52; validation_hook.py:303-306, 374-377; "
    "attention_hook.py:572-576, 409-437; "
    "kernel_plugins/amd/binding.py:130-141, 205-217; serving_hook.py:464-470; kv_cache_hook.py:865-938, "
    "770-789; hicache_hook.py:39-43; configs/model_config.py:1968-1990; kv_shard_hook.py:99-104; "
    "parallel_hook.py:251-257; attention_hook.py:450-505; kv_cache_hook.py:375-391",
)
def feature_modes(ctx: Context):
    """Switches SGLang refuses outside their mode: Mamba SSM stochastic rounding needs
    `--mamba-ssm-dtype float16` (and SM100 with the triton mamba backend); `--kv-canary-sweep-interval` needs
    `--kv-canary log|raise`; `--retraction-policy priority` needs `--enable-priority-scheduling`;
    `--enable-mis` needs flashinfer for prefill and decode; `--enable-amd-monokernel` needs an AMD GPU;
    `--enable-deepseek-v4-fp4-indexer` needs SM100 / SM120; `--prefill-only-disable-kv-cache` needs
    `--is-embedding`, `--chunked-prefill-size -1`, the radix cache off, no FP4 / MXFP8 KV cache, no context
    parallelism and no HiSparse; `--enable-page-major-kv-layout` needs `--enable-unified-memory`;
    `--enable-linker-mla-dedup` needs the Mooncake unified-cache linker; `--quantize-and-serve` needs a
    ModelOpt `--quantization`; `--enable-kv-cache-sharding` runs on PD prefill workers only;
    `--enable-linear-replayssm` needs a triton/helion linear decode backend, the no_buffer mamba strategy and
    no PD disaggregation; `--enable-linear-replayssm-spec` needs a linear draft chain, a triton/flashinfer
    linear decode backend, no PD prefill role and not `--enable-linear-replayssm` as well;
    `--radix-eviction-policy tlru` needs a threshold above next_prompt_estimate (both 0 unless configured);
    `--dcp-comm-backend a2a|fi_a2a` needs `--dcp-size > 1`."""
    yield from _scheduling_and_kernel_switches(ctx)
    if (
        ctx.get("prefill_only_disable_kv_cache")
        and not ctx.get("is_embedding")
        and ctx.model is not None
        and str(ctx.model.architecture or "").endswith(("ForCausalLM", "ForConditionalGeneration"))
    ):
        yield Hit(
            "--prefill-only-disable-kv-cache requires --is-embedding", about="prefill_only_disable_kv_cache"
        )
    elif ctx.get("prefill_only_disable_kv_cache") and (
        ctx.get("is_embedding")
        or (
            ctx.model is not None
            and ctx.model.known
            and not str(ctx.model.architecture or "").endswith(("ForCausalLM", "ForConditionalGeneration"))
        )
    ):
        yield from _prefill_only_no_kv(ctx)
    if ctx.get("enable_page_major_kv_layout") and not ctx.get("enable_unified_memory"):
        yield Hit(
            "--enable-page-major-kv-layout requires --enable-unified-memory (temporarily)",
            about="enable_page_major_kv_layout",
            edits={"enable_page_major_kv_layout": None},
        )
    if ctx.get("enable_linker_mla_dedup") and not (
        ctx.get("enable_unified_cache_external_linker")
        and ctx.get("unified_cache_external_linker_backend") == "mooncake"
    ):
        yield Hit(
            "--enable-linker-mla-dedup requires the Mooncake unified-cache external linker",
            about="enable_linker_mla_dedup",
        )
    if ctx.get("quantize_and_serve") and ctx.get("quantization") not in (
        "modelopt",
        "modelopt_fp8",
        "modelopt_fp4",
        "nvfp4_online",
        "modelopt_mixed",
    ):
        yield Hit(
            "--quantize-and-serve requires a ModelOpt --quantization (modelopt, modelopt_fp8, modelopt_fp4, "
            "nvfp4_online, modelopt_mixed)",
            about="quantize_and_serve",
        )
    if ctx.get("enable_kv_cache_sharding") and ctx.get("disaggregation_mode") != "prefill":
        yield Hit(
            "--enable-kv-cache-sharding is only supported on PD prefill workers "
            "(--disaggregation-mode prefill)",
            about="enable_kv_cache_sharding",
        )
    yield from _linear_replayssm(ctx)
    yield from _tlru_eviction(ctx)
    if ctx.get("dcp_comm_backend") in ("a2a", "fi_a2a") and (ctx.get("dcp_size", 1) or 1) <= 1:
        yield Hit(
            f"--dcp-comm-backend {ctx.get('dcp_comm_backend')} requires --dcp-size > 1",
            about="dcp_comm_backend",
            edits={"dcp_comm_backend": None},
        )


def _scheduling_and_kernel_switches(ctx: Context) -> Iterator[Hit]:
    """DDT938, first part: Mamba stochastic rounding, KV canary, retraction policy, multi-item scoring, the
    AMD monokernel and the DeepSeek V4 FP4 indexer (in the order the rule reports them)."""
    sm = ctx.gpu.sm if ctx.gpu is not None else None
    if ctx.get("enable_mamba_cache_stochastic_rounding"):
        if ctx.get("mamba_ssm_dtype") != "float16":
            yield Hit(
                "--enable-mamba-cache-stochastic-rounding requires --mamba-ssm-dtype float16",
                about="enable_mamba_cache_stochastic_rounding",
                fix="set mamba-ssm-dtype: float16",
                edits={"mamba_ssm_dtype": "float16"},
            )
        elif (ctx.get("mamba_backend") or "triton") == "triton" and sm is not None and sm not in (100, 103):
            yield Hit(
                "Mamba stochastic rounding with --mamba-backend triton needs SM100",
                about="enable_mamba_cache_stochastic_rounding",
            )
    if (ctx.get("kv_canary_sweep_interval") or 0) > 0 and (ctx.get("kv_canary") or "none") == "none":
        yield Hit(
            "--kv-canary-sweep-interval requires --kv-canary log or raise", about="kv_canary_sweep_interval"
        )
    if ctx.get("retraction_policy") == "priority" and not ctx.get("enable_priority_scheduling"):
        yield Hit(
            "--retraction-policy priority requires --enable-priority-scheduling",
            about="retraction_policy",
            fix="set enable-priority-scheduling: true",
            edits={"enable_priority_scheduling": True},
        )
    mis = resolve(ctx) if ctx.get("enable_mis") else None
    if mis is not None and set(mis.pair) != {"flashinfer"}:
        yield Hit(
            f"--enable-mis (multi-item scoring) needs the flashinfer attention backend, not "
            f"{'/'.join(sorted(map(str, set(mis.pair))))}",
            about="enable_mis",
            fix="set attention-backend: flashinfer",
            edits={"attention_backend": "flashinfer"},
        )
    if ctx.get("enable_amd_monokernel") and ctx.gpu is not None:
        yield Hit(
            f"--enable-amd-monokernel needs an AMD GPU, not {ctx.gpu.name}",
            about="enable_amd_monokernel",
            edits={"enable_amd_monokernel": None},
        )
    if ctx.get("enable_deepseek_v4_fp4_indexer") and sm is not None and sm not in (100, 103, 120):
        yield Hit(
            f"--enable-deepseek-v4-fp4-indexer needs SM100 or SM120, not {ctx.known_gpu.name}",
            about="enable_deepseek_v4_fp4_indexer",
        )


def _linear_replayssm(ctx: Context) -> Iterator[Hit]:
    """`--enable-linear-replayssm[-spec]` (attention_hook.py:409-437, 450-505)."""
    if ctx.get("enable_linear_replayssm"):
        decode = ctx.get("linear_attn_decode_backend") or ctx.get("linear_attn_backend") or "triton"
        if decode == "flashkda":
            decode = "triton"

        if decode not in ("triton", "helion"):
            yield Hit(
                f"--enable-linear-replayssm needs the triton or helion linear decode backend, not {decode}",
                about="enable_linear_replayssm",
            )
        elif (
            not mamba.at_mamba(ctx)[2]
            and (
                mamba.effective_strategy(ctx) if mamba.mamba_cache_active(ctx) else mamba.mamba_strategy(ctx)
            )
            in mamba.EXTRA
        ):
            yield Hit(
                "--enable-linear-replayssm requires --mamba-radix-cache-strategy no_buffer",
                about="enable_linear_replayssm",
            )
        elif (ctx.get("disaggregation_mode") or "null") != "null":
            yield Hit(
                "--enable-linear-replayssm is not supported under PD disaggregation",
                about="enable_linear_replayssm",
            )
    if ctx.get("enable_linear_replayssm_spec"):
        decode = ctx.get("linear_attn_decode_backend") or ctx.get("linear_attn_backend") or "triton"
        if ctx.given.get("speculative_eagle_topk") not in (None, 1):
            yield Hit(
                "--enable-linear-replayssm-spec requires a linear draft chain (--speculative-eagle-topk 1)",
                about="enable_linear_replayssm_spec",
            )
        elif decode not in ("triton", "flashinfer"):
            yield Hit(
                f"--enable-linear-replayssm-spec needs the triton or flashinfer linear decode backend, not "
                f"{decode}",
                about="enable_linear_replayssm_spec",
            )
        elif ctx.get("disaggregation_mode") == "prefill":
            yield Hit(
                "--enable-linear-replayssm-spec is not supported on a PD prefill server",
                about="enable_linear_replayssm_spec",
            )
        elif ctx.get("enable_linear_replayssm"):
            yield Hit(
                "--enable-linear-replayssm-spec and --enable-linear-replayssm exclude each other",
                about="enable_linear_replayssm_spec",
            )


def _tlru_eviction(ctx: Context) -> Iterator[Hit]:
    """`--radix-eviction-policy tlru` needs a threshold above next_prompt_estimate (hicache_hook.py:39-43)."""
    if ctx.get("radix_eviction_policy") == "tlru":
        config = ctx.get("radix_eviction_policy_config") or {}
        if isinstance(config, str):
            import json

            try:
                config = json.loads(config)
            except ValueError:
                config = None
        if isinstance(config, dict):
            threshold, estimate = config.get("threshold", 0), config.get("next_prompt_estimate", 0)
            if not (isinstance(threshold, (int, float)) and isinstance(estimate, (int, float))):
                pass
            elif threshold < 0 or estimate < 0:
                yield Hit(
                    "--radix-eviction-policy tlru needs non-negative threshold and next_prompt_estimate",
                    about="radix_eviction_policy_config",
                )
            elif threshold <= estimate:
                yield Hit(
                    f"--radix-eviction-policy tlru needs a threshold above next_prompt_estimate in "
                    f"--radix-eviction-policy-config (got {threshold} <= {estimate}; both default to 0)",
                    about="radix_eviction_policy",
                    fix="set radix-eviction-policy-config with a threshold",
                )


@rule(
    "DDT943",
    "options SGLang refuses without their companion (or with speculative decoding)",
    reads=(
        "export_metrics_to_file",
        "export_metrics_to_file_dir",
        "weight_cache_mode",
        "speculative_algorithm",
    ),
    applies=lambda ctx: (
        bool(ctx.get("export_metrics_to_file"))
        or (
            ctx.get("weight_cache_mode") not in (None, "off") and ctx.get("speculative_algorithm") is not None
        )
    ),
    reference=f"{AG}validation_hook.py:340-343 check_server_args; "
    "model_path_hook.py:278-285 handle_load_format",
)
def companions(ctx: Context) -> Iterator[Hit]:
    """`--export-metrics-to-file` needs `--export-metrics-to-file-dir`; the weight cache daemon
    (`--weight-cache-mode client|daemon`) does not export a draft model, so it refuses speculative
    decoding."""
    if ctx.get("export_metrics_to_file") and ctx.get("export_metrics_to_file_dir") is None:
        yield Hit(
            "--export-metrics-to-file-dir is required when --export-metrics-to-file is enabled",
            about="export_metrics_to_file",
            fix="set export-metrics-to-file-dir: DIR (or remove export-metrics-to-file)",
        )
    mode = ctx.get("weight_cache_mode")
    if mode not in (None, "off") and ctx.get("speculative_algorithm") is not None:
        yield Hit(
            f"--weight-cache-mode {mode} is not supported with speculative decoding: the weight cache "
            "daemon does not export the draft model's weights",
            about="weight_cache_mode",
            fix="remove weight-cache-mode (or the speculative algorithm)",
            edits={"weight_cache_mode": None},
        )


def _prefill_only_no_kv(ctx: Context) -> Iterator[Hit]:
    """DDT938, `--prefill-only-disable-kv-cache` on an embedding launch (kv_cache_hook.py:885-938): no FP4 or
    MXFP8 KV pool, `--chunked-prefill-size -1`, the radix cache off, no context parallelism, no HiSparse."""
    about = "prefill_only_disable_kv_cache"
    kv = ctx.given.get("kv_cache_dtype")
    if kv in ("nvfp4", "fp4_mx_block16", "mxfp8"):
        yield Hit(
            f"--prefill-only-disable-kv-cache does not currently support --kv-cache-dtype={kv}", about=about
        )
    size = chunked_prefill(ctx)
    if size is not None and size != -1:
        yield Hit(
            "--prefill-only-disable-kv-cache requires --chunked-prefill-size=-1",
            about=about,
            fix="set chunked-prefill-size: -1",
            edits={"chunked_prefill_size": -1},
        )
    res = resolve(ctx)
    radix_off = res.radix_disabled if res is not None else bool(ctx.get("disable_radix_cache"))
    if not radix_off and not is_deterministic(ctx):
        yield Hit(
            "--prefill-only-disable-kv-cache requires --disable-radix-cache",
            about=about,
            fix="set disable-radix-cache: true",
            edits={"disable_radix_cache": True},
        )
    if (ctx.get("attn_cp_size", 1) or 1) > 1:
        yield Hit(
            "--prefill-only-disable-kv-cache is incompatible with --attn-cp-size > 1", about="attn_cp_size"
        )
    if ctx.get("enable_prefill_cp"):
        yield Hit("--prefill-only-disable-kv-cache is incompatible with --enable-prefill-cp", about=about)
    if ctx.get("enable_hisparse"):
        yield Hit("--prefill-only-disable-kv-cache is incompatible with --enable-hisparse", about=about)
