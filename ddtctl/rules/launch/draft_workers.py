"""Launch-time checks of sglang 0.5.23's speculative draft workers, built after the target runner:
srt/speculative/standalone_worker_v2.py, eagle_worker_v2.py, multi_layer_eagle_worker_v2.py,
dflash_worker_v2.py (also the DDTREE payload's worker, a DFlashWorkerV2) and the DFlash draft-config parser
dflash_utils.py. They compare the draft's config.json with the target's; SGLang's resolver reads neither
this far (it swallows a DFlash config error and falls back to a block of 16)."""

from __future__ import annotations

from numbers import Integral
from typing import Any

from ddtctl.rules.engine import (
    DFLASH_FAMILY,
    FACT_DRAFT,
    FACT_MODEL_CONFIG,
    WARNING,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.common import attn_dp_size
from ddtctl.rules.launch.common import SRT, text_config

SPEC = f"{SRT}speculative/"
DFLASH_UTILS = f"{SPEC}dflash_utils.py"
DFLASH_WORKER = f"{SPEC}dflash_worker_v2.py"
DEFAULT_MASK_TOKEN = "<|MASK|>"  # dflash_utils.py DEFAULT_DFLASH_MASK_TOKEN


def dflash_config(ctx: Context) -> dict[str, Any]:
    """dflash_utils.py:445-458 _get_dflash_config: the draft config's dflash_config mapping ({} if none)."""
    raw = (ctx.draft.raw if ctx.draft is not None else None) or {}
    cfg = raw.get("dflash_config")
    return cfg if isinstance(cfg, dict) else {}


def _draft_field(ctx: Context, key: str, default: Any = None) -> Any:
    """dflash_config[key], else the draft config's top-level key (dflash_utils.py _cfg_get)."""
    raw = (ctx.draft.raw if ctx.draft is not None else None) or {}
    return dflash_config(ctx).get(key, raw.get(key, default))


def _vocab(model) -> int | None:
    value = text_config(model).get("vocab_size")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@rule(
    "DDT750",
    "a STANDALONE draft shares the target's vocabulary",
    reads=("speculative_draft_model_path",),
    needs=(FACT_MODEL_CONFIG, FACT_DRAFT),
    applies=lambda ctx: ctx.algorithm == "STANDALONE",
    reference=f"{SPEC}standalone_worker_v2.py:168-215 StandaloneWorkerV2._validate_vocab_compatibility",
    sglang_enforces=False,
)
def standalone_vocab(ctx: Context):
    """STANDALONE runs a separate small model as the drafter and verifies its tokens with the target: the
    worker raises unless the two configs' vocab_size are equal (and, on the host, their tokenizers map tokens
    to the same ids). A Qwen3-8B target with a Qwen3.5 / 3.6 draft (248,320 tokens) passes the resolver and
    dies building the draft worker."""
    target, draft = _vocab(ctx.model), _vocab(ctx.draft)
    if target and draft and target != draft:
        return Hit(
            f"STANDALONE needs the draft to share the target's vocabulary: target vocab_size {target:,}, "
            f"draft {draft:,}",
            fix="use a draft model of the target's family (same tokenizer), or EAGLE3 / DFLASH",
        )
    return None


@rule(
    "DDT751",
    "rejection sampling needs one vocabulary: no EAGLE hot-token map",
    reads=("speculative_token_map", "speculative_use_rejection_sampling"),
    severity=WARNING,
    applies=lambda ctx: (
        ctx.algorithm == "EAGLE"
        and bool(ctx.get("speculative_use_rejection_sampling"))
        and ctx.is_set("speculative_token_map")
    ),
    reference=f"{SPEC}eagle_worker_v2.py:243-274 EagleDraftWorker.alloc_memory_pool, :323-334 init_token_map",
    sglang_enforces=False,
)
def rejection_token_map(ctx: Context):
    """An EAGLE (not EAGLE3) draft with --speculative-token-map keeps a reduced "hot" vocabulary, and with
    --speculative-use-rejection-sampling the draft worker raises unless the map is as long as the target's
    vocabulary (rejection sampling does not scatter draft probabilities back yet). A warning: the map is a
    file on the host; a hot-token map is by design shorter than the vocabulary."""
    return Hit(
        "--speculative-use-rejection-sampling requires the draft and target to share one vocabulary; an "
        "EAGLE --speculative-token-map (a hot-token subset) makes the draft worker raise",
        about="speculative_token_map",
        fix="remove speculative-token-map (or speculative-use-rejection-sampling)",
        edits={"speculative_token_map": None},
    )


@rule(
    "DDT752",
    "multi-layer EAGLE drafts steps + 1 tokens",
    reads=("enable_multi_layer_eagle", "speculative_num_draft_tokens", "speculative_num_steps"),
    applies=lambda ctx: (
        ctx.algorithm == "EAGLE"
        and bool(ctx.get("enable_multi_layer_eagle"))
        and ctx.is_set("speculative_num_draft_tokens")
        and ctx.is_set("speculative_num_steps")
        and (ctx.given.get("speculative_eagle_topk") or 1) > 1
    ),
    reference=f"{SPEC}multi_layer_eagle_worker_v2.py:139-154 MultiLayerEagleDraftWorker.__init__ (assert)",
    sglang_enforces=False,
)
def multi_layer_eagle(ctx: Context):
    """The multi-layer EAGLE draft worker (--enable-multi-layer-eagle) drafts a chain: it asserts
    speculative-num-draft-tokens == speculative-num-steps + 1. The resolver only forces that relation for
    topk 1 (DDT307); with a tree (topk > 1) the launch dies building the draft worker."""
    steps, tokens = int(ctx.get("speculative_num_steps")), int(ctx.get("speculative_num_draft_tokens"))
    if tokens != steps + 1:
        return Hit(
            f"multi-layer EAGLE requires speculative-num-draft-tokens == speculative-num-steps + 1; got "
            f"{tokens} and {steps}",
            about="speculative_num_draft_tokens",
            fix=f"set speculative-num-draft-tokens: {steps + 1} (and speculative-eagle-topk: 1)",
            edits={"speculative_num_draft_tokens": steps + 1},
        )
    return None


def _bad_int(value: Any, minimum: int) -> bool:
    """dflash_utils.py:504-516 _parse_optional_int: int(value) must work and reach `minimum`."""
    if value is None:
        return False
    try:
        return int(value) < minimum
    except (TypeError, ValueError):
        return True


def _dflash_config_errors(ctx: Context) -> list[str]:
    """What dflash_utils.py:586-800 parse_dflash_draft_config raises for this draft config (the Domino
    projector's fields are DDT756's)."""
    cfg, text = dflash_config(ctx), text_config(ctx.draft)
    errors = []
    for what, value, minimum in (
        ("num_hidden_layers", text.get("num_hidden_layers"), 1),
        ("num_target_layers", _draft_field(ctx, "num_target_layers"), 1),
        ("block_size", _draft_field(ctx, "block_size"), 1),
        ("conv_kernel_size", cfg.get("conv_kernel_size", 0), 0),
        ("conv_group_size", cfg.get("conv_group_size", 0), 0),
        ("selector_rank", cfg.get("selector_rank", 0), 0),
        ("selector_top_k", cfg.get("selector_top_k", 0), 0),
    ):
        if _bad_int(value, minimum):
            errors.append(f"{what}={value!r} must be an integer >= {minimum}")
    if not errors:
        if bool(int(cfg.get("conv_kernel_size", 0) or 0)) != bool(int(cfg.get("conv_group_size", 0) or 0)):
            errors.append("grouped convolution needs conv_kernel_size and conv_group_size together")
        if bool(int(cfg.get("selector_rank", 0) or 0)) != bool(int(cfg.get("selector_top_k", 0) or 0)):
            errors.append("the selector needs selector_rank and selector_top_k together")
    multiplier = cfg.get("output_multiplier", 1.0)
    try:
        positive = float(multiplier) > 0
    except (TypeError, ValueError):
        positive = False
    if not positive:
        errors.append(f"output_multiplier={multiplier!r} must be a positive number")
    ids = _draft_field(ctx, "target_layer_ids")
    if ids is not None and (not isinstance(ids, list) or not ids or _bad_int_list(ids)):
        errors.append(f"target_layer_ids={ids!r} must be a non-empty list of ints")
    mask = _draft_field(ctx, "mask_token")
    if mask is not None and (not isinstance(mask, str) or not mask):
        errors.append(f"mask_token={mask!r} must be a non-empty string")
    mask_id = _draft_field(ctx, "mask_token_id")
    bad_id = not isinstance(mask_id, Integral) or isinstance(mask_id, bool) or mask_id < 0
    if mask_id is not None and bad_id:
        errors.append(f"mask_token_id={mask_id!r} must be a non-negative integer")
    if not isinstance(cfg.get("attention_sink_bias", False), bool):
        errors.append(f"attention_sink_bias={cfg['attention_sink_bias']!r} must be a bool")
    scale = cfg.get("attention_value_scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        errors.append(f"attention_value_scale={scale!r} must be a number")
    return errors


def _bad_int_list(ids: list) -> bool:
    try:
        [int(x) for x in ids]
    except (TypeError, ValueError):
        return True
    return False


def _dflash_draft(ctx: Context) -> bool:
    return ctx.algorithm in DFLASH_FAMILY and ctx.draft is not None and ctx.draft.source != "profile"


@rule(
    "DDT753",
    "the DFlash draft config is well formed",
    reads=("speculative_draft_model_path",),
    needs=(FACT_DRAFT,),
    applies=_dflash_draft,
    reference=f"{DFLASH_UTILS}:504-516 _parse_optional_int, :586-800 parse_dflash_draft_config; "
    f"{SRT}model_executor/model_runner_components/spec_aux_hidden_state.py:217",
    sglang_enforces=False,
)
def dflash_draft_config(ctx: Context):
    """The target runner parses the DFlash draft's config.json when it wires the hidden-state capture, and
    raises on a malformed field: num_hidden_layers / num_target_layers / block_size (positive integers),
    conv_kernel_size with conv_group_size and selector_rank with selector_top_k (non-negative, set together),
    output_multiplier (positive), target_layer_ids (a non-empty list of ints), mask_token (a non-empty
    string), mask_token_id (a non-negative integer), attention_sink_bias (a bool), attention_value_scale (a
    number). The resolver parses the same config for the block size but swallows the error."""
    errors = _dflash_config_errors(ctx)
    if errors:
        return Hit(
            f"the DFlash draft config is malformed: {'; '.join(errors)}",
            about="speculative_draft_model_path",
            fix="fix the draft's config.json (dflash_config)",
        )
    return None


@rule(
    "DDT754",
    "the DFlash mask token id lies within the target's vocabulary",
    reads=("speculative_draft_model_path",),
    needs=(FACT_MODEL_CONFIG, FACT_DRAFT),
    applies=lambda ctx: _dflash_draft(ctx) and isinstance(_draft_field(ctx, "mask_token_id"), int),
    reference=f"{DFLASH_WORKER}:530-535, 1391-1409 DFlashWorkerV2._resolve_mask_token_id",
    sglang_enforces=False,
)
def mask_token_in_vocab(ctx: Context):
    """The DFlash worker embeds the draft's mask token with the target's embedding table: a
    dflash_config.mask_token_id at or beyond the target's vocab_size raises ("SGLang does not support
    resizing target embeddings for DFLASH"). A draft of another family (Qwen3.6's 248,077 on Qwen3-8B's
    151,936 tokens) passes the resolver and dies here."""
    mask_id, vocab = int(_draft_field(ctx, "mask_token_id")), _vocab(ctx.model)
    if vocab and mask_id >= vocab:
        return Hit(
            f"the draft's mask_token_id {mask_id:,} is outside the target's vocabulary ({vocab:,} tokens)",
            about="speculative_draft_model_path",
            fix="use the DFlash draft trained for this target",
        )
    return None


@rule(
    "DDT755",
    "a DFlash draft without mask_token_id needs the tokenizer",
    reads=("skip_tokenizer_init",),
    needs=(FACT_DRAFT,),
    applies=lambda ctx: _dflash_draft(ctx) and bool(ctx.get("skip_tokenizer_init")),
    reference=f"{DFLASH_WORKER}:1411-1428 DFlashWorkerV2._resolve_mask_token_id",
    sglang_enforces=False,
)
def mask_token_needs_tokenizer(ctx: Context):
    """When the draft config gives no mask_token_id, the DFlash worker looks the mask token up in the
    target's tokenizer, and raises under --skip-tokenizer-init ("not supported in this mode")."""
    if _draft_field(ctx, "mask_token_id") is None:
        mask = _draft_field(ctx, "mask_token") or DEFAULT_MASK_TOKEN
        return Hit(
            f"the DFlash draft names no mask_token_id, so the worker resolves {mask!r} with the tokenizer; "
            "--skip-tokenizer-init makes it raise",
            about="skip_tokenizer_init",
            fix="remove skip-tokenizer-init (or set dflash_config.mask_token_id in the draft's config)",
            edits={"skip_tokenizer_init": None},
        )
    return None


def _domino_errors(ctx: Context) -> list[str]:
    """dflash_utils.py:733-790: what a Domino projector's config must hold."""
    raw = (ctx.draft.raw if ctx.draft is not None else None) or {}
    cfg = dflash_config(ctx)
    errors = []
    nested, top = cfg.get("emb_dim"), raw.get("emb_dim")
    if nested is not None and top is not None and nested != top:
        errors.append(f"emb_dim differs between dflash_config ({nested}) and the config ({top})")
    if not isinstance(_draft_field(ctx, "shift_label"), bool):
        errors.append("shift_label must be a bool")
    if _draft_field(ctx, "pure_draft_prefix_len") != 1:
        errors.append(f"pure_draft_prefix_len must be 1, got {_draft_field(ctx, 'pure_draft_prefix_len')!r}")
    if _draft_field(ctx, "gru_hidden_dim") is None:
        errors.append("gru_hidden_dim is required")
    if nested is None and top is None:
        errors.append("emb_dim is required")
    block = _draft_field(ctx, "block_size")
    if isinstance(block, int) and block <= 1:
        errors.append(f"block_size must be > 1, got {block}")
    return errors


@rule(
    "DDT756",
    "DFlash Domino drafts: a complete projector config, no DP attention, a block of 2+",
    reads=("speculative_draft_model_path", "speculative_domino_candidate_pool_size"),
    needs=(FACT_DRAFT,),
    applies=lambda ctx: _dflash_draft(ctx) and _draft_field(ctx, "projector_type") == "domino",
    reference=f"{DFLASH_UTILS}:733-790 parse_dflash_draft_config; {DFLASH_WORKER}:451-470, 518-530 "
    "DFlashWorkerV2.__init__",
    sglang_enforces=False,
)
def domino(ctx: Context):
    """A Domino DFlash draft (dflash_config.projector_type: domino) needs shift_label (a bool),
    pure_draft_prefix_len 1, gru_hidden_dim and emb_dim (one value, nested or top-level) and a block size
    above 1; the worker also refuses it under attention DP and with a negative
    --speculative-domino-candidate-pool-size."""

    errors = _domino_errors(ctx)
    if errors:
        return Hit(
            f"the Domino draft config is incomplete: {'; '.join(errors)}",
            about="speculative_draft_model_path",
            fix="fix the draft's config.json (dflash_config)",
        )
    if attn_dp_size(ctx) > 1:
        return Hit(
            "DFLASH with DP attention supports plain DFlash drafts; a Domino head is not supported",
            about="enable_dp_attention",
            fix="remove the attention DP settings (or use a plain DFlash draft)",
        )
    pool = ctx.get("speculative_domino_candidate_pool_size")
    if isinstance(pool, int) and pool < 0:
        return Hit(
            f"--speculative-domino-candidate-pool-size must be non-negative, got {pool}",
            about="speculative_domino_candidate_pool_size",
            fix="remove speculative-domino-candidate-pool-size",
            edits={"speculative_domino_candidate_pool_size": None},
        )
    tokens = ctx.draft_tokens()
    if tokens is not None and tokens <= 1:
        return Hit(
            f"DFLASH Domino requires more than one draft token per block, got {tokens}",
            about="speculative_dflash_block_size",
            fix="set speculative-dflash-block-size: 16",
        )
    return None
