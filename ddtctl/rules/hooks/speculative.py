"""Speculative checks of sglang 0.5.23 srt/arg_groups/speculative_hook.py and validation_hook.py that are not
about the DFLASH / EAGLE / NGRAM families (ddtctl/rules/speculative.py and eagle.py have those): UNO,
DSPARK, aux hidden-state capture, watermarking.
"""

from __future__ import annotations

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG


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
    reference=f"{AG}validation_hook.py:82-96 check_watermark",
)
def watermark(ctx: Context):
    """`--enable-watermark` is not supported with PD disaggregation and only with NGRAM / EAGLE / EAGLE3."""
    if ctx.get("disaggregation_mode") not in (None, "null"):
        return Hit("--enable-watermark is not supported with PD disaggregation", about="disaggregation_mode")
    if ctx.algorithm not in (None, "NGRAM", "EAGLE", "EAGLE3"):
        return Hit(
            f"--enable-watermark supports speculative algorithms NGRAM, EAGLE and EAGLE3, not {ctx.algorithm}"
        )
