"""Speculative checks of sglang 0.5.23 srt/arg_groups/speculative_hook.py and validation_hook.py that are not
about the DFLASH / EAGLE / NGRAM families nor common to every algorithm (speculative_dflash.py,
speculative_eagle.py, speculative_ngram.py, speculative_common.py have those): UNO, DSPARK, aux hidden-state
capture, watermarking.
"""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.engine import INFO, WARNING, Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size, env_flag
from ddtctl.rules.hooks.resolution import backends, is_deterministic, resolve


@rule(
    "DDT918",
    "aux hidden-state capture names a capturing speculative algorithm, without a draft",
    reads=("enable_return_aux_hidden_states",),
    applies=lambda ctx: bool(ctx.get("enable_return_aux_hidden_states")),
    reference=f"{AG}validation_hook.py:704-733 handle_aux_hidden_state_capture",
)
def aux_hidden(ctx: Context):
    """`--enable-return-aux-hidden-states` needs `--speculative-algorithm` EAGLE3, DFLASH or DSPARK (it only
    names the capture convention; SGLang then resets the algorithm to None), no
    `--speculative-draft-model-path`, pp-size 1, and `--return-aux-hidden-state-layer-ids` unless the
    convention is EAGLE3."""
    method = str(ctx.given.get("speculative_algorithm") or "").upper()
    if method not in ("EAGLE3", "DFLASH", "DSPARK"):
        return Hit(
            "--enable-return-aux-hidden-states needs --speculative-algorithm EAGLE3, DFLASH or DSPARK",
            fix="remove enable-return-aux-hidden-states",
            edits={"enable_return_aux_hidden_states": None},
        )
    if ctx.is_set("speculative_draft_model_path"):
        return Hit(
            "--enable-return-aux-hidden-states captures without a draft: drop --speculative-draft-model-path",
            about="speculative_draft_model_path",
            edits={"speculative_draft_model_path": None},
        )
    if (ctx.get("pp_size", 1) or 1) != 1:
        return Hit("--enable-return-aux-hidden-states only supports --pp-size 1", about="pp_size")
    if method != "EAGLE3" and not ctx.given.get("return_aux_hidden_state_layer_ids"):
        return Hit(
            f"--enable-return-aux-hidden-states with {method} requires --return-aux-hidden-state-layer-ids"
        )


@rule(
    "DDT920",
    "UNO reuses the target with a LoRA adapter",
    reads=("uno_lora_path", "speculative_draft_model_path"),
    applies=lambda ctx: ctx.algorithm == "UNO",
    reference=f"{AG}speculative_hook.py:449-460 _handle_uno",
)
def uno(ctx: Context):
    """UNO needs `--uno-lora-path`, accepts no `--speculative-draft-model-path`, and runs on CUDA only."""
    if ctx.is_set("speculative_draft_model_path"):
        return Hit(
            "UNO reuses the target model and does not accept --speculative-draft-model-path",
            about="speculative_draft_model_path",
            edits={"speculative_draft_model_path": None},
            fix="remove speculative-draft-model-path",
        )
    if not ctx.is_set("uno_lora_path"):
        return Hit("UNO requires --uno-lora-path", fix="set uno-lora-path to the UNO adapter")


def _uno_tree(verify: int, topk: int, steps: int | None) -> Iterator[str]:
    """speculative_hook.py:494-540: the verify tree UNO builds from Q (draft tokens), K (top-k) and F
    (steps + 1) when K > 1."""
    if steps is None:
        yield "UNO tree mode requires --speculative-num-steps so its draft width F can be derived"
        return
    if steps < 1:
        yield f"UNO tree mode requires --speculative-num-steps to be positive, got {steps}"
        return
    if verify < steps + 1:
        yield f"UNO tree mode requires Q >= F; got Q={verify}, F={steps + 1}"
    if verify > 128:
        yield f"UNO tree mode currently supports at most Q=128 verify nodes, got Q={verify}"
    if verify * topk > 2048:
        yield f"UNO tree mode currently supports Q*K <= 2048; got Q*K={verify}*{topk}={verify * topk}"
    capacity, width = 1, 1
    for _ in range(steps):
        width *= topk
        capacity += width
        if capacity >= verify:
            break
    if verify > capacity:
        yield f"UNO tree mode cannot build the requested Q from F and K: Q={verify} exceeds {capacity=}"
    parent = topk * max(steps - 1, 0) + 1
    if verify - 1 > parent:
        yield (
            f"UNO tree mode cannot represent the requested Q in EAGLE's parent-list ABI: "
            f"Q-1={verify - 1} exceeds K*(F-2)+1={parent}"
        )


def _uno_tree_features(ctx: Context) -> Iterator[Hit]:
    """speculative_hook.py:549-559: what UNO's tree mode (K > 1) refuses."""
    if ctx.get("enable_pdmux"):
        yield Hit("UNO tree mode does not yet support PDMux", about="enable_pdmux")
    if ctx.get("enable_two_batch_overlap"):
        yield Hit("UNO tree mode does not yet support two-batch overlap", about="enable_two_batch_overlap")
    thresholds = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")
    if any(ctx.get(d, 1.0) != 1.0 for d in thresholds):
        yield Hit("UNO tree mode requires both speculative accept thresholds to be 1.0")


@rule(
    "DDT956",
    "UNO needs CUDA, a verify width, a buildable tree and a single plain GPU",
    reads=(
        "device",
        "enable_deterministic_inference",
        "rl_on_policy_target",
        "enable_strict_thinking",
        "speculative_num_draft_tokens",
        "speculative_eagle_topk",
        "speculative_num_steps",
        "enable_pdmux",
        "enable_two_batch_overlap",
        "speculative_accept_threshold_single",
        "speculative_accept_threshold_acc",
        "tp_size",
        "pp_size",
        "attn_dp_size",
        "enable_dp_attention",
        "dp_size",
        "attn_cp_size",
        "enable_lora",
        "lora_paths",
        "speculative_use_rejection_sampling",
        "attention_backend",
        "prefill_attention_backend",
        "decode_attention_backend",
    ),
    applies=lambda ctx: ctx.algorithm == "UNO",
    reference=f"{AG}speculative_hook.py:449-612 _handle_uno",
)
def uno_settings(ctx: Context) -> Iterator[Hit]:
    """UNO runs on CUDA only, without deterministic inference or strict thinking; it needs
    `--speculative-num-draft-tokens` (Q) >= 1 and `--speculative-eagle-topk` (K) >= 1; with K > 1 (tree
    mode) `--speculative-num-steps` must give a tree that holds Q, PDMux and two-batch overlap are off and
    both accept thresholds stay 1.0; always TP = PP = 1, no attention DP / CP, no LoRA serving and no
    rejection sampling; prefill and decode attention both resolve to fa3."""
    device = ctx.given.get("device")
    if device is not None and not str(device).startswith("cuda"):
        yield Hit(f"UNO only supports CUDA, got --device {device}", about="device")
    if is_deterministic(ctx):
        yield Hit(
            "UNO does not support --enable-deterministic-inference", about="enable_deterministic_inference"
        )
    if ctx.get("enable_strict_thinking"):
        yield Hit(
            "UNO does not support --enable-strict-thinking because it requires grammar decoding",
            about="enable_strict_thinking",
            edits={"enable_strict_thinking": None},
        )
    verify = ctx.given.get("speculative_num_draft_tokens")
    if verify is None or int(verify) < 1:
        yield Hit(
            "UNO requires --speculative-num-draft-tokens to be a positive integer (the verify width Q)",
            about="speculative_num_draft_tokens",
            fix="set speculative-num-draft-tokens (e.g. 4)",
        )
    topk = ctx.given.get("speculative_eagle_topk")
    topk = 1 if topk is None else int(topk)
    if topk < 1:
        yield Hit(
            f"UNO requires --speculative-eagle-topk to be at least 1, got {topk}",
            about="speculative_eagle_topk",
        )
    if topk > 1 and verify is not None and int(verify) >= 1:
        steps = ctx.given.get("speculative_num_steps")
        for message in _uno_tree(int(verify), topk, None if steps is None else int(steps)):
            yield Hit(message, about="speculative_num_draft_tokens")
        yield from _uno_tree_features(ctx)
    elif topk == 1 and ctx.given.get("speculative_num_steps") not in (None, 1):
        # speculative_hook.py:566-575: linear UNO overrides the draft steps with a warning (an override: info)
        yield Hit(
            f"UNO's linear mode runs --speculative-num-steps 1: SGLang overrides "
            f"{ctx.given['speculative_num_steps']}",
            about="speculative_num_steps",
            severity=INFO,
            edits={"speculative_num_steps": None},
        )
    if (ctx.get("tp_size", 1) or 1, ctx.get("pp_size", 1) or 1) != (1, 1):
        yield Hit("UNO requires TP=PP=1", about="tp_size")
    if attn_dp_size(ctx) > 1 or (ctx.get("attn_cp_size", 1) or 1) != 1:
        yield Hit("UNO does not support DP attention or context parallelism", about="attn_dp_size")
    if ctx.get("enable_lora") or ctx.get("lora_paths"):
        yield Hit("UNO does not support public Multi-LoRA serving", about="enable_lora")
    if ctx.get("speculative_use_rejection_sampling"):
        yield Hit(
            "UNO manages its own stochastic verification and does not use "
            "--speculative-use-rejection-sampling",
            about="speculative_use_rejection_sampling",
            edits={"speculative_use_rejection_sampling": None},
        )
    if resolve(ctx) is not None and backends(ctx) != ("fa3", "fa3"):
        prefill, decode = backends(ctx)
        yield Hit(
            f"UNO requires FA3 for both prefill and decode attention; got {prefill=}, {decode=}",
            about="attention_backend",
            fix="set attention-backend: fa3",
        )


@rule(
    "DDT921",
    "DSPARK needs a draft model and draft tokens = gamma + 1",
    reads=("speculative_draft_model_path", "speculative_num_draft_tokens"),
    applies=lambda ctx: ctx.algorithm == "DSPARK",
    reference=f"{AG}speculative_hook.py:749-755, 826-833 _handle_dspark",
)
def dspark(ctx: Context):
    """DSPARK (dense) requires `--speculative-draft-model-path`; an explicit `--speculative-num-draft-tokens`
    must equal the drafter's gamma + 1."""
    if not ctx.is_set("speculative_draft_model_path"):
        return Hit(
            "DSPARK speculative decoding requires --speculative-draft-model-path",
            fix="set speculative-draft-model-path",
        )
    tokens = ctx.given.get("speculative_num_draft_tokens")
    gamma = ctx.draft.block_size if ctx.draft is not None and ctx.draft.block_size else None
    if tokens is not None and gamma is not None and tokens != gamma + 1:
        return Hit(
            f"DSPARK needs --speculative-num-draft-tokens = gamma + 1 ({gamma + 1}), got {tokens}",
            about="speculative_num_draft_tokens",
            edits={"speculative_num_draft_tokens": None},
            fix="remove speculative-num-draft-tokens",
        )


@rule(
    "DDT922",
    "watermarking supports NGRAM, EAGLE and EAGLE3",
    reads=("enable_watermark",),
    applies=lambda ctx: bool(ctx.get("enable_watermark")),
    reference=f"{AG}validation_hook.py:60-107 check_watermark_server_args",
)
def watermark(ctx: Context):
    """`--enable-watermark` is not supported with PD disaggregation, a custom sampling backend or
    SGLANG_RUST_SERVER, and only with NGRAM / EAGLE / EAGLE3."""
    if ctx.get("disaggregation_mode") not in (None, "null"):
        return Hit("--enable-watermark is not supported with PD disaggregation", about="disaggregation_mode")
    if ctx.algorithm not in (None, "NGRAM", "EAGLE", "EAGLE3"):
        return Hit(
            f"--enable-watermark supports speculative algorithms NGRAM, EAGLE and EAGLE3, not {ctx.algorithm}"
        )
    backend = ctx.given.get("sampling_backend")
    if backend is not None and backend not in ("flashinfer", "pytorch", "ascend", "intel_xpu"):
        # validation_hook.py:78-83 (choices.py:133 BUILT_IN_SAMPLING_BACKENDS)
        return Hit(
            f"--enable-watermark does not support custom sampling backends, got {backend}",
            about="sampling_backend",
        )
    if env_flag(ctx, "SGLANG_RUST_SERVER"):
        return Hit(
            "--enable-watermark is not supported with SGLANG_RUST_SERVER", about="env.SGLANG_RUST_SERVER"
        )
    return None


# configs/iquest_q1.py IQuestQ1Config / IQuestQ1MTPConfig defaults
_IQUEST = {"hidden_size": 3072, "vocab_size": 160000, "num_hidden_layers": 88, "num_draft_slots": 7}


def _iquest_draft(ctx: Context) -> Iterator[Hit]:
    """speculative_hook.py:1022-1036: an independent MTP draft checkpoint of the target's shape."""
    target = ctx.known_model.raw or {}
    draft = (ctx.draft.raw if ctx.draft is not None else None) or {}
    if draft.get("model_type") != "iquest_q1_mtp":
        yield Hit(
            "IQuest Q1 requires an independent MTP draft checkpoint (model_type iquest_q1_mtp)",
            about="speculative_draft_model_path",
        )
        return
    merged = {**_IQUEST, **(draft.get("target_config") or {}), **draft}
    if any(merged.get(k, _IQUEST[k]) != target.get(k, _IQUEST[k]) for k in ("hidden_size", "vocab_size")):
        yield Hit(
            "the MTP draft's hidden size and vocabulary must match the target's",
            about="speculative_draft_model_path",
        )
    layers = (
        draft.get("num_target_layers") or (draft.get("target_config") or {}).get("num_hidden_layers") or 88
    )
    if layers != target.get("num_hidden_layers", _IQUEST["num_hidden_layers"]):
        yield Hit(
            f"the MTP draft was built for {layers} target layers, the target has "
            f"{target.get('num_hidden_layers', _IQUEST['num_hidden_layers'])}",
            about="speculative_draft_model_path",
        )


@rule(
    "DDT964",
    "IQuest Q1 speculates with its own MTP draft, linearly",
    reads=(
        "speculative_draft_model_path",
        "speculative_token_map",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
    ),
    applies=lambda ctx: (
        ctx.algorithm == "EAGLE" and ctx.model is not None and ctx.model.architecture == "IQuestQ1ForCausalLM"
    ),
    reference=f"{AG}speculative_hook.py:1014-1061 _handle_iquest_q1_mtp_draft",
)
def iquest_mtp(ctx: Context) -> Iterator[Hit]:
    """An IQuest Q1 target (EAGLE / NEXTN) needs an independent MTP draft checkpoint (model_type
    iquest_q1_mtp) of its hidden size, vocabulary and layer count, no `--speculative-token-map`, positive
    draft steps (default: the draft's num_draft_slots), top-k 1 and `--speculative-num-draft-tokens` = steps
    + 1."""
    path = ctx.given.get("speculative_draft_model_path")
    if path is None or path == ctx.get("model_path"):
        yield Hit(
            "IQuest Q1 requires an independent draft model path (its MTP checkpoint)",
            about="speculative_draft_model_path",
        )
        return
    if ctx.draft is not None and ctx.draft.known:
        yield from _iquest_draft(ctx)
    if ctx.given.get("speculative_token_map") is not None:
        yield Hit(
            "IQuest Q1's MTP draft uses its own full-vocabulary head: drop --speculative-token-map",
            about="speculative_token_map",
        )
    steps = ctx.given.get("speculative_num_steps")
    if steps is None and ctx.draft is not None:
        steps = (ctx.draft.raw or {}).get("num_draft_slots", _IQUEST["num_draft_slots"])
    if isinstance(steps, int) and steps < 1:
        yield Hit("IQuest Q1's MTP requires positive --speculative-num-steps", about="speculative_num_steps")
    if ctx.given.get("speculative_eagle_topk") not in (None, 1):
        yield Hit("IQuest Q1's MTP requires --speculative-eagle-topk 1", about="speculative_eagle_topk")
    tokens = ctx.given.get("speculative_num_draft_tokens")
    if isinstance(steps, int) and tokens is not None and tokens != steps + 1:
        yield Hit(
            f"IQuest Q1's MTP verifies draft steps + 1 = {steps + 1} tokens, got "
            f"--speculative-num-draft-tokens {tokens}",
            about="speculative_num_draft_tokens",
            edits={"speculative_num_draft_tokens": steps + 1},
        )


def _dspark_dp(ctx: Context) -> Iterator[Hit]:
    """speculative_hook.py:670-710: DSpark with attention DP (CUDA)."""
    a2a = str(ctx.get("moe_a2a_backend") or "none")
    if not ctx.get("enable_dp_lm_head"):
        yield Hit(
            "DSpark with attention DP requires --enable-dp-lm-head",
            fix="set enable-dp-lm-head: true",
            edits={"enable_dp_lm_head": True},
        )
    if a2a not in ("none", "megamoe", "mori"):
        yield Hit(
            f"DSpark with attention DP supports --moe-a2a-backend none, megamoe or mori, not {a2a}",
            about="moe_a2a_backend",
        )
    elif (a2a != "none" or env_flag(ctx, _COORDINATION)) and ctx.env.get(_RAGGED, "static") != "static":
        yield Hit(f"DSpark DP MoE or prefill coordination requires {_RAGGED}=static", about=f"env.{_RAGGED}")
    if (ctx.get("attn_cp_size", 1) or 1) > 1:
        yield Hit("DSpark with attention DP does not support context parallelism", about="attn_cp_size")
    draft = ctx.given.get("speculative_moe_a2a_backend")
    if draft is not None and draft != a2a:
        yield Hit(
            "DSpark ignores --speculative-moe-a2a-backend: with attention DP it must match "
            f"--moe-a2a-backend ({a2a})",
            about="speculative_moe_a2a_backend",
            edits={"speculative_moe_a2a_backend": None},
        )


def _dspark_width(ctx: Context) -> Iterator[Hit]:
    """speculative_hook.py:805-850: gamma (--speculative-dspark-block-size, else the drafter's) and the verify
    width."""
    block = ctx.given.get("speculative_dspark_block_size")
    if isinstance(block, int) and block <= 0:
        yield Hit(
            f"DSpark requires --speculative-dspark-block-size to be positive, got {block}",
            about="speculative_dspark_block_size",
        )
        return
    gamma = block or (ctx.draft.block_size if ctx.draft is not None else None)
    tokens = ctx.given.get("speculative_num_draft_tokens")
    if gamma is None and isinstance(tokens, int) and tokens < 2:
        yield Hit(
            f"DSpark's --speculative-num-draft-tokens must be >= 2 (gamma + 1), got {tokens}",
            about="speculative_num_draft_tokens",
        )


_COORDINATION = "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION"
_RAGGED = "SGLANG_RAGGED_VERIFY_MODE"


@rule(
    "DDT967",
    "DSpark's attention-DP layout and gamma; DP spec/prefill coordination",
    reads=(
        "speculative_algorithm",
        "attn_dp_size",
        "enable_dp_lm_head",
        "moe_a2a_backend",
        "speculative_moe_a2a_backend",
        "speculative_dspark_block_size",
        "speculative_num_draft_tokens",
        "pp_size",
    ),
    applies=lambda ctx: (
        ctx.algorithm == "DSPARK"
        or env_flag(ctx, _COORDINATION)
        or (bool(ctx.get("enable_linear_replayssm_spec")) and ctx.env.get(_RAGGED, "static") != "static")
    ),
    reference=f"{AG}speculative_hook.py:250-258 handle_speculative_decoding, 302-316 _handle_dflash, 666-850 "
    "_handle_dspark; attention_hook.py:470-490 handle_linear_attn_backend",
)
def dspark_layout(ctx: Context) -> Iterator[Hit]:
    """SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=1 needs single-layer EAGLE, EAGLE3 or DSPARK (so DFLASH with
    attention DP runs with it off). DSpark with attention DP needs `--enable-dp-lm-head`, the none / megamoe /
    mori all-to-all (with an all-to-all or coordination: SGLANG_RAGGED_VERIFY_MODE=static), no context
    parallelism and no other draft all-to-all; DSpark pipeline parallelism runs only on PD prefill; a
    positive `--speculative-dspark-block-size`, and without a gamma at least 2 draft tokens. A ragged
    SGLANG_RAGGED_VERIFY_MODE with `--enable-linear-replayssm-spec` needs DSPARK / DFLASH and a ring-writing
    verify kernel (`--linear-attn-verify-backend` triton or nv_cutedsl)."""
    dp = attn_dp_size(ctx) > 1
    if env_flag(ctx, _COORDINATION):
        if ctx.algorithm not in ("EAGLE", "EAGLE3", "DSPARK") or ctx.get("enable_multi_layer_eagle"):
            yield Hit(
                f"{_COORDINATION}=1 requires single-layer EAGLE, EAGLE3 or DSPARK",
                about=f"env.{_COORDINATION}",
            )
    ragged = ctx.env.get(_RAGGED, "static")
    if ctx.get("enable_linear_replayssm_spec") and ragged != "static":
        verify = ctx.get("linear_attn_verify_backend")
        if ctx.algorithm not in ("DSPARK", "DFLASH") or verify not in ("triton", "nv_cutedsl"):
            yield Hit(
                f"--enable-linear-replayssm-spec with {_RAGGED}={ragged} needs DSPARK or DFLASH and "
                "--linear-attn-verify-backend triton or nv_cutedsl",
                about="enable_linear_replayssm_spec",
            )
    if ctx.algorithm != "DSPARK":
        return
    if dp and str(ctx.given.get("device") or "cuda").startswith(("cuda", "xpu")):
        yield from _dspark_dp(ctx)
    if (ctx.get("pp_size", 1) or 1) != 1 and ctx.get("disaggregation_mode") != "prefill":
        yield Hit("DSpark pipeline parallelism requires a PD prefill server", about="pp_size")
    yield from _dspark_width(ctx)


def _zero_counts(ctx: Context) -> Iterator[str]:
    """The speculative counts of 0 SGLang keeps (DFLASH / DSPARK / UNO replace theirs: DDT208, DDT950,
    DDT956)."""
    given = {
        d: ctx.given.get(d)
        for d in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    }
    zero = {d for d, v in given.items() if isinstance(v, int) and v < 1}
    if ctx.algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        zero &= {
            "speculative_num_steps",
            "speculative_eagle_topk",
        }  # zero draft tokens become steps + 1 (DDT307)
    elif ctx.algorithm == "NGRAM":
        zero &= {"speculative_num_draft_tokens"}
    elif ctx.algorithm in ("DFLASH", "DDTREE"):
        zero &= {"speculative_num_draft_tokens"}
    else:
        zero = set()
    for dest in sorted(zero):
        yield dest


@rule(
    "DDT974",
    "speculative step / top-k / draft-token counts of 0",
    severity=WARNING,
    reads=("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"),
    applies=lambda ctx: ctx.algorithm is not None,
    reference=f"{AG}speculative_hook.py (no raise site: SGLang 0.5.23 resolves these values as given)",
    sglang_enforces=False,
    evidence="SGLang 0.5.23 accepts them at launch (tests/rules/deferred_pairs.py DDT974 pairs resolve with "
    "SGLang); no runtime evidence either way, hence a warning, not an error",
)
def zero_speculative_counts(ctx: Context) -> Iterator[Hit]:
    """EAGLE / EAGLE3 / STANDALONE with 0 draft steps or top-k 0, NGRAM / DFLASH / DDTREE with 0 draft tokens:
    SGLang 0.5.23 accepts and keeps the 0 (it replaces it for DFLASH / DSPARK / UNO steps and top-k, and
    EAGLE's draft tokens: info elsewhere), so the draft worker runs with an empty draft. A warning: nothing
    at launch refuses it and ddtctl has no runtime evidence of a failure."""
    for dest in _zero_counts(ctx):
        yield Hit(
            f"--{dest.replace('_', '-')} {ctx.given[dest]}: SGLang keeps it, so {ctx.algorithm} drafts "
            "nothing",
            about=dest,
            edits={dest: None},
        )
