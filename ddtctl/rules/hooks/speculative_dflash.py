"""Checks of sglang 0.5.23 srt/arg_groups/speculative_hook.py `_handle_dflash`: the DFLASH family
(DDT201-DDT209; DDTREE is a member, its own rules are in ddtctl/rules/ddtree/)."""

from __future__ import annotations

from ddtctl.rules.engine import (
    DFLASH_FAMILY,
    INFO,
    WARNING,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.common import SPEC_HOOK


def _algo_in(*names: str):
    return lambda ctx: ctx.algorithm in names


@rule(
    "DDT201",
    "DFLASH needs a draft model",
    reads=("speculative_draft_model_path",),
    applies=_algo_in("DFLASH"),
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_draft(ctx: Context):
    """DFLASH drafts with a separate block-diffusion model: `--speculative-draft-model-path` is required."""
    if not ctx.is_set("speculative_draft_model_path"):
        return Hit(
            "DFLASH speculative decoding requires --speculative-draft-model-path",
            fix="set speculative-draft-model-path to the DFlash draft model directory",
        )


@rule(
    "DDT202",
    "DFLASH block size is positive",
    reads=("speculative_dflash_block_size",),
    applies=lambda ctx: ctx.algorithm == "DFLASH" and ctx.is_set("speculative_dflash_block_size"),
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_block_positive(ctx: Context):
    """`--speculative-dflash-block-size` must be > 0."""
    if ctx.get("speculative_dflash_block_size") <= 0:
        return Hit(
            "--speculative-dflash-block-size must be positive, "
            f"got {ctx.get('speculative_dflash_block_size')}",
            fix="set speculative-dflash-block-size to the drafter's block_size (e.g. 16)",
        )


@rule(
    "DDT203",
    "DFLASH draft tokens equal the block size",
    reads=("speculative_num_draft_tokens", "speculative_dflash_block_size"),
    applies=lambda ctx: (
        ctx.algorithm == "DFLASH"
        and ctx.is_set("speculative_num_draft_tokens")
        and ctx.is_set("speculative_dflash_block_size")
    ),
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_tokens_match(ctx: Context):
    """For DFLASH, `--speculative-num-draft-tokens` and `--speculative-dflash-block-size` must match."""
    tokens, block = ctx.get("speculative_num_draft_tokens"), ctx.get("speculative_dflash_block_size")
    if block > 0 and tokens != block:
        return Hit(
            f"--speculative-num-draft-tokens ({tokens}) differs from "
            f"--speculative-dflash-block-size ({block})",
            fix="remove speculative-num-draft-tokens (it is taken from the block size)",
            edits={"speculative_num_draft_tokens": None},
        )


@rule(
    "DDT204",
    "draft window covers the block",
    reads=("speculative_draft_window_size",),
    applies=lambda ctx: (
        ctx.algorithm in DFLASH_FAMILY
        and ctx.is_set("speculative_draft_window_size")
        and ctx.get("speculative_draft_window_size") > 0
    ),
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_window(ctx: Context):
    """The compact draft KV window must hold at least one block: window >= speculative_num_draft_tokens."""
    block = ctx.draft_tokens() or 16
    window = ctx.get("speculative_draft_window_size")
    if window < block:
        return Hit(
            f"--speculative-draft-window-size ({window}) must be >= the block size ({block})",
            fix=f"set speculative-draft-window-size to at least {block}",
            edits={"speculative_draft_window_size": block},
        )


@rule(
    "DDT205",
    "DFLASH family runs with pipeline parallel size 1",
    reads=("pp_size",),
    applies=_algo_in("DFLASH"),
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_pp(ctx: Context):
    """DFLASH speculative decoding supports only `pp_size == 1`."""
    if ctx.get("pp_size", 1) != 1:
        return Hit(
            f"DFLASH supports only --pp-size 1, got {ctx.get('pp_size')}",
            fix="set pp-size: 1",
            edits={"pp_size": 1},
        )


@rule(
    "DDT206",
    "DFLASH family with DP attention needs the DP LM head and no context parallelism",
    reads=("enable_dp_attention", "enable_dp_lm_head"),
    applies=lambda ctx: ctx.algorithm in DFLASH_FAMILY and ctx.dp_attention,
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_dp_attention(ctx: Context):
    """With DP attention the drafter borrows the target LM head: `--enable-dp-lm-head` is required, and
    `--attn-cp-size` must be 1."""
    if not ctx.get("enable_dp_lm_head"):
        yield Hit(
            f"{ctx.algorithm} with DP attention requires --enable-dp-lm-head",
            fix="set enable-dp-lm-head: true",
            edits={"enable_dp_lm_head": True},
        )
    if (ctx.get("attn_cp_size") or 1) != 1:
        yield Hit(
            f"{ctx.algorithm} with DP attention does not support context parallelism",
            about="attn_cp_size",
            fix="set attn-cp-size: 1",
        )


@rule(
    "DDT207",
    "DFLASH family needs a CUDA/NPU/XPU device",
    reads=("device",),
    applies=lambda ctx: ctx.algorithm in DFLASH_FAMILY and ctx.is_set("device"),
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_device(ctx: Context):
    """DFLASH is not supported on the CPU platform."""
    device = str(ctx.get("device"))
    if not (device.startswith("cuda") or device in ("npu", "xpu")):
        return Hit(
            f"{ctx.algorithm} is not supported on device {device!r}",
            fix="set device: cuda (or remove it)",
            edits={"device": None},
        )


@rule(
    "DDT208",
    "DFLASH family forces steps and topk to 1",
    severity=INFO,
    reads=("speculative_num_steps", "speculative_eagle_topk"),
    applies=lambda ctx: ctx.algorithm in DFLASH_FAMILY,
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_steps_topk(ctx: Context):
    """DFLASH has no EAGLE steps/topk: values other than 1 are overridden to 1 with a warning."""
    for dest in ("speculative_num_steps", "speculative_eagle_topk"):
        value = ctx.given.get(dest)
        if value is not None and value != 1:
            yield Hit(
                f"--{dest.replace('_', '-')} {value} is ignored by {ctx.algorithm} (SGLang forces 1)",
                about=dest,
                fix=f"remove {dest.replace('_', '-')}",
                edits={dest: None},
            )


@rule(
    "DDT209",
    "DFLASH block size is known",
    severity=WARNING,
    reads=("speculative_dflash_block_size",),
    needs=(),
    applies=lambda ctx: (
        ctx.algorithm in DFLASH_FAMILY
        and ctx.draft_tokens() is None
        and ctx.draft is not None
        and ctx.draft.known
    ),
    reference=f"{SPEC_HOOK} _handle_dflash",
)
def dflash_block_unknown(ctx: Context):
    """Without `--speculative-dflash-block-size`/`--speculative-num-draft-tokens` and without `block_size` in
    the draft config, SGLang falls back to 16 with a warning."""
    return Hit(
        "the draft config has no block_size and no block size is set: SGLang falls back to 16",
        fix="set speculative-dflash-block-size to the drafter's block size",
    )
