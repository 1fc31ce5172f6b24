"""Parallel-layout checks of sglang 0.5.23 srt/arg_groups/parallel_hook.py (and layernorm_sp_hook.py, the
validation_hook.py / overrides.py asserts about tp, DP attention and LM heads).
"""

from __future__ import annotations

from ddtctl.rules.engine import INFO, Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size


@rule(
    "DDT901",
    "moe-dense-tp-size is 1 or tp-size",
    reads=("moe_dense_tp_size",),
    applies=lambda ctx: ctx.is_set("moe_dense_tp_size"),
    reference=f"{AG}validation_hook.py:207-211 (assert)",
)
def moe_dense_tp(ctx: Context):
    """`--moe-dense-tp-size` only supports None, 1 or the tp size."""
    value, tp = ctx.get("moe_dense_tp_size"), ctx.get("tp_size", 1)
    if value not in (1, tp):
        return Hit(
            f"--moe-dense-tp-size {value} must be 1 or --tp-size ({tp})",
            fix="set moe-dense-tp-size: 1",
            edits={"moe_dense_tp_size": 1},
        )


@rule(
    "DDT903",
    "attention context parallelism divides tp",
    reads=("attn_cp_size", "tp_size"),
    applies=lambda ctx: (ctx.get("attn_cp_size", 1) or 1) > 1,
    reference=f"{AG}parallel_hook.py:157-163 handle_context_parallelism (assert)",
)
def attn_cp_divides(ctx: Context):
    """`tp_size % attn_cp_size == 0` and `tp_size % (attn_dp_size * attn_cp_size) == 0`."""
    tp, cp, dp = ctx.get("tp_size", 1), ctx.get("attn_cp_size"), attn_dp_size(ctx)
    if tp % cp:
        return Hit(
            f"--tp-size {tp} must be divisible by --attn-cp-size {cp}",
            fix=f"set tp-size to a multiple of {cp}",
        )
    if tp % (dp * cp):
        return Hit(
            f"--tp-size {tp} must be divisible by attn-dp-size x attn-cp-size ({dp} x {cp})",
            fix="make tp-size a multiple of attn-dp-size x attn-cp-size",
        )


@rule(
    "DDT904",
    "DP / all-to-all LM heads need attention DP",
    reads=("enable_dp_lm_head",),
    applies=lambda ctx: (
        bool(ctx.get("enable_dp_lm_head")) or bool(ctx.given.get("enable_tp_lm_head_all_to_all"))
    ),
    reference="sglang 0.5.23 srt/arg_groups/overrides.py:1366-1370 _data_parallelism_defaults (override); "
    "overrides.py:1422-1433 _dp_lm_head_validation (assert)",
)
def dp_lm_head(ctx: Context):
    """`--enable-dp-lm-head` and `--enable-tp-lm-head-all-to-all` require attention DP, and exclude each
    other. With a single DP rank in all (dp-size x attn-dp-size = 1) SGLang switches `--enable-dp-lm-head` off
    itself: an override, reported as info."""
    if ctx.get("enable_dp_lm_head") and (ctx.get("dp_size", 1) or 1) * attn_dp_size(ctx) == 1:
        return Hit(
            "--enable-dp-lm-head has no effect with a single DP rank: SGLang sets enable_dp_lm_head=False",
            severity=INFO,
            fix="remove enable-dp-lm-head",
            edits={"enable_dp_lm_head": None},
        )
    if attn_dp_size(ctx) <= 1:
        dest = "enable_dp_lm_head" if ctx.get("enable_dp_lm_head") else "enable_tp_lm_head_all_to_all"
        return Hit(
            f"--{dest.replace('_', '-')} requires attention DP (--attn-dp-size > 1, or --dp-size with "
            "--enable-dp-attention)",
            about=dest,
            fix=f"remove {dest.replace('_', '-')}",
            edits={dest: None},
        )
    if ctx.get("enable_dp_lm_head") and ctx.given.get("enable_tp_lm_head_all_to_all"):
        return Hit(
            "--enable-tp-lm-head-all-to-all is incompatible with --enable-dp-lm-head",
            about="enable_tp_lm_head_all_to_all",
        )


@rule(
    "DDT906",
    "decode context parallelism options need --dcp-size > 1",
    reads=("dcp_replicate_q_proj",),
    applies=lambda ctx: bool(ctx.given.get("dcp_replicate_q_proj")) and (ctx.get("dcp_size", 1) or 1) <= 1,
    reference=f"{AG}parallel_hook.py:266-267 handle_decode_context_parallelism",
)
def dcp(ctx: Context):
    """`--dcp-replicate-q-proj` requires `--dcp-size > 1`."""
    return Hit(
        "--dcp-replicate-q-proj requires --dcp-size > 1",
        fix="remove dcp-replicate-q-proj",
        edits={"dcp_replicate_q_proj": None},
    )


@rule(
    "DDT907",
    "elastic EP options need --elastic-ep-backend",
    reads=("max_ep_size", "ep_join_mode", "elastic_ep_initial_size"),
    applies=lambda ctx: (
        any(ctx.is_set(d) for d in ("max_ep_size", "ep_join_mode", "elastic_ep_initial_size"))
        or (ctx.given.get("ep_join_rank_offset") or 0) != 0
    ),
    reference=f"{AG}parallel_hook.py:546-581 handle_elastic_ep (assert)",
)
def elastic_ep(ctx: Context):
    """`--max-ep-size` and `--elastic-ep-join-mode` require `--elastic-ep-backend`; `--max-ep-size` is
    positive; `--elastic-ep-initial-size` needs an elastic deployment with --max-ep-size above --tp-size;
    `--elastic-ep-join-rank-offset` is only for `--elastic-ep-join-mode scale` and non-negative; a scale
    joiner needs `--node-rank 1` and a positive join rank offset."""
    backend = ctx.given.get("elastic_ep_backend")
    offset = ctx.given.get("ep_join_rank_offset") or 0
    if offset != 0 and ctx.get("ep_join_mode") != "scale":
        return Hit(
            "--elastic-ep-join-rank-offset is only valid with --elastic-ep-join-mode scale",
            about="ep_join_rank_offset",
            fix="remove elastic-ep-join-rank-offset",
            edits={"ep_join_rank_offset": None},
        )
    if offset < 0:
        return Hit(f"--elastic-ep-join-rank-offset must be >= 0, got {offset}", about="ep_join_rank_offset")
    if ctx.get("ep_join_mode") == "scale" and backend is not None:
        if (ctx.get("node_rank") or 0) != 1:
            return Hit("an elastic EP scale joiner runs at --node-rank 1", about="ep_join_mode")
        if offset <= 0:
            return Hit(
                "an elastic EP scale joiner needs --elastic-ep-join-rank-offset (the current EP size)",
                about="ep_join_mode",
            )
    for dest, flag in (("ep_join_mode", "elastic-ep-join-mode"), ("max_ep_size", "max-ep-size")):
        if ctx.is_set(dest) and backend is None:
            return Hit(
                f"--{flag} requires --elastic-ep-backend to be set",
                about=dest,
                fix=f"set elastic-ep-backend or remove {flag}",
            )
    max_ep = ctx.given.get("max_ep_size")
    if max_ep is not None and max_ep <= 0:
        return Hit(f"--max-ep-size must be positive, got {max_ep}", about="max_ep_size")
    if ctx.is_set("elastic_ep_initial_size") and not (
        backend is not None and max_ep is not None and max_ep > ctx.get("tp_size", 1)
    ):
        return Hit(
            "--elastic-ep-initial-size is only valid with --elastic-ep-backend and --max-ep-size larger than "
            "--tp-size",
            about="elastic_ep_initial_size",
            fix="remove elastic-ep-initial-size",
            edits={"elastic_ep_initial_size": None},
        )


# layers/layernorm_sp.py:40-54 SP_SUPPORTED_ARCHITECTURES
_LAYERNORM_SP_ARCHITECTURES = ("Qwen3ForCausalLM", "MuseSparkForConditionalGeneration")


@rule(
    "DDT908",
    "layernorm sequence parallelism: a supported model, tp > 1, no attention DP or PP",
    reads=("enable_layernorm_sp",),
    applies=lambda ctx: (
        bool(ctx.get("enable_layernorm_sp")) or bool(ctx.get("enable_megamoe_for_layernorm_sp"))
    ),
    reference=f"{AG}layernorm_sp_hook.py:24-26, 120-190 handle_layernorm_sp, validate_layernorm_sp",
)
def layernorm_sp(ctx: Context):
    """`--enable-megamoe-for-layernorm-sp` requires `--enable-layernorm-sp`, which runs on Qwen3 (dense) and
    Muse Spark with tp_size > 1, without attention DP and without pipeline parallelism."""
    if ctx.get("enable_megamoe_for_layernorm_sp") and not ctx.get("enable_layernorm_sp"):
        return Hit(
            "--enable-megamoe-for-layernorm-sp requires --enable-layernorm-sp",
            about="enable_megamoe_for_layernorm_sp",
        )
    arch = ctx.model.architecture if ctx.model is not None else None
    if arch is not None and arch not in _LAYERNORM_SP_ARCHITECTURES:
        return Hit(
            f"--enable-layernorm-sp is only supported for {', '.join(_LAYERNORM_SP_ARCHITECTURES)}, not "
            f"{arch}",
            fix="remove enable-layernorm-sp",
            edits={"enable_layernorm_sp": None},
        )
    if (ctx.get("tp_size", 1) or 1) <= 1:
        return Hit(
            "--enable-layernorm-sp requires --tp-size > 1",
            fix="remove enable-layernorm-sp",
            edits={"enable_layernorm_sp": None},
        )
    if attn_dp_size(ctx) > 1:
        return Hit("--enable-layernorm-sp is not compatible with attention DP", about="attn_dp_size")
    if (ctx.get("pp_size", 1) or 1) > 1:
        return Hit("--enable-layernorm-sp is not compatible with pipeline parallelism", about="pp_size")
    return None


@rule(
    "DDT909",
    "pipeline micro-batch size is positive",
    reads=("pp_max_micro_batch_size",),
    applies=lambda ctx: ctx.is_set("pp_max_micro_batch_size") and ctx.get("pp_max_micro_batch_size") <= 0,
    reference=f"{AG}validation_hook.py:182-185 (assert)",
)
def pp_micro_batch(ctx: Context):
    """`--pp-max-micro-batch-size` must be a positive integer (or unset for auto)."""
    return Hit(
        f"--pp-max-micro-batch-size must be positive, got {ctx.get('pp_max_micro_batch_size')}",
        edits={"pp_max_micro_batch_size": None},
        fix="remove pp-max-micro-batch-size",
    )


@rule(
    "DDT941",
    "attention DP groups divide tp and exclude DP replicas",
    reads=("attn_dp_size", "dp_size", "tp_size"),
    applies=lambda ctx: ctx.is_set("attn_dp_size") or bool(ctx.get("enable_dp_attention")),
    reference=f"{AG}parallel_hook.py:39-61 handle_deprecated_dp_attention; parallel_hook.py:285-323 "
    "handle_data_parallelism",
)
def attention_dp(ctx: Context):
    """Attention DP (`--attn-dp-size N`, or the deprecated `--dp-size N --enable-dp-attention`) needs a
    positive group count that divides `--tp-size`, and no data-parallel replicas (`--dp-size > 1`) next to an
    explicit `--attn-dp-size > 1`."""
    given = ctx.given.get("attn_dp_size")
    if isinstance(given, int) and given < 1:
        return Hit(f"--attn-dp-size must be positive, got {given}", about="attn_dp_size")
    dp_attn, tp = attn_dp_size(ctx), ctx.get("tp_size", 1) or 1
    replicas = ctx.get("dp_size", 1) or 1
    if ctx.get("enable_dp_attention") and (given or 1) == 1:
        replicas = 1  # the deprecated spelling moves --dp-size into attn_dp_size
    if dp_attn > 1 and replicas > 1:
        return Hit(
            f"--dp-size {replicas} (replicas) with --attn-dp-size {dp_attn} is not supported", about="dp_size"
        )
    if dp_attn > 1 and tp % dp_attn:
        return Hit(
            f"--tp-size ({tp}) must be divisible by the attention-DP size ({dp_attn})",
            about="attn_dp_size",
            fix=f"set tp-size to a multiple of {dp_attn}",
        )


@rule(
    "DDT965",
    "context parallelism: Nemotron-H, Aiter all-reduce fusion, decode CP with prefill CP",
    reads=("attn_cp_size", "moe_dp_size", "enable_aiter_allreduce_fusion", "dcp_size", "enable_prefill_cp"),
    applies=lambda ctx: (
        (ctx.get("attn_cp_size", 1) or 1) > 1
        or (ctx.get("moe_dp_size", 1) or 1) > 1
        or (ctx.get("dcp_size", 1) or 1) > 1
    ),
    reference=f"{AG}parallel_hook.py:64-77 _boundary_parallelism_overrides, 150-186 "
    "handle_context_parallelism, 247-250 handle_decode_context_parallelism",
)
def context_parallel_layouts(ctx: Context):
    """Nemotron-H does not run attention context parallelism; the Aiter all-reduce fusion
    (`--enable-aiter-allreduce-fusion`) excludes attention CP and MoE DP; decode context parallelism
    (`--dcp-size > 1`) excludes prefill CP (`--enable-prefill-cp`)."""
    cp = ctx.get("attn_cp_size", 1) or 1
    model_type = str(((ctx.model.raw if ctx.model is not None else None) or {}).get("model_type") or "")
    if cp > 1 and model_type in ("nemotron_h", "nemotron_h_puzzle"):
        yield Hit("Nemotron-H does not support --attn-cp-size > 1", about="attn_cp_size")
    if ctx.get("enable_aiter_allreduce_fusion") and (cp > 1 or (ctx.get("moe_dp_size", 1) or 1) > 1):
        yield Hit(
            "the Aiter all-reduce fusion is not supported with context parallelism (--attn-cp-size or "
            "--moe-dp-size > 1)",
            about="enable_aiter_allreduce_fusion",
            edits={"enable_aiter_allreduce_fusion": None},
        )
    if (ctx.get("dcp_size", 1) or 1) > 1 and ctx.get("enable_prefill_cp"):
        yield Hit("--dcp-size > 1 does not support --enable-prefill-cp", about="dcp_size")
