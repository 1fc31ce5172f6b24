"""Checks of sglang 0.5.23 srt/arg_groups/speculative_hook.py that every speculative algorithm goes through
(handle_speculative_decoding around the per-algorithm handlers): the algorithm name (DDT800), the draft
window and sink (DDT801, DDT802), block verification (DDT803), the decode radix cache under PD
disaggregation (DDT804) and speculative flags without an algorithm (DDT805). The handlers have their own
modules: speculative_dflash.py, speculative_eagle.py, speculative_ngram.py, speculative.py (UNO, DSPARK,
IQuest)."""

from __future__ import annotations

from ddtctl.rules.engine import (
    KNOWN_ALGORITHMS,
    WARNING,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.common import SPEC_HOOK


@rule(
    "DDT800",
    "speculative algorithm name is known",
    reads=("speculative_algorithm",),
    applies=lambda ctx: ctx.algorithm is not None,
    reference=f"{SPEC_HOOK} (SpeculativeAlgorithm.from_string)",
)
def unknown_algorithm(ctx: Context):
    """SGLang upper-cases the name and fails in resolve with `Unknown speculative algorithm name`. NEXTN is
    EAGLE; DDTREE needs the ddtctl payload."""
    algo = ctx.algorithm
    if algo is not None and algo not in KNOWN_ALGORITHMS:
        import difflib

        close = difflib.get_close_matches(algo, KNOWN_ALGORITHMS, n=1)
        return Hit(
            f"unknown speculative algorithm {ctx.given['speculative_algorithm']!r}"
            + (f" (did you mean {close[0]}?)" if close else ""),
            fix=f"use one of {', '.join(KNOWN_ALGORITHMS)}",
            edits={"speculative_algorithm": close[0]} if close else {},
        )


@rule(
    "DDT801",
    "draft window size is positive",
    reads=("speculative_draft_window_size",),
    applies=lambda ctx: ctx.is_set("speculative_draft_window_size"),
    reference=SPEC_HOOK,
)
def window_positive(ctx: Context):
    """`--speculative-draft-window-size` must be > 0."""
    window = ctx.get("speculative_draft_window_size")
    if window <= 0:
        return Hit(
            f"--speculative-draft-window-size must be positive, got {window}",
            fix="remove speculative-draft-window-size or set it >= the block size",
            edits={"speculative_draft_window_size": None},
        )


@rule(
    "DDT802",
    "draft sink size needs a window and is non-negative",
    reads=("speculative_draft_sink_size",),
    applies=lambda ctx: ctx.is_set("speculative_draft_sink_size"),
    reference=SPEC_HOOK,
)
def sink_size(ctx: Context):
    """`--speculative-draft-sink-size` must be >= 0 and requires `--speculative-draft-window-size`."""
    sink = ctx.get("speculative_draft_sink_size")
    if sink < 0:
        return Hit(
            f"--speculative-draft-sink-size must be non-negative, got {sink}",
            fix="set speculative-draft-sink-size: 0 or remove it",
        )
    if not ctx.is_set("speculative_draft_window_size"):
        return Hit(
            "--speculative-draft-sink-size requires --speculative-draft-window-size",
            fix="set speculative-draft-window-size or remove speculative-draft-sink-size",
        )


@rule(
    "DDT803",
    "block verification is for EAGLE/EAGLE3/DFLASH/DSPARK on CUDA",
    reads=("speculative_use_block_verification",),
    applies=lambda ctx: bool(ctx.get("speculative_use_block_verification")),
    reference=SPEC_HOOK,
)
def block_verification(ctx: Context):
    """`--speculative-use-block-verification` supports only EAGLE / EAGLE3 / NEXTN / DFLASH / DSPARK, on
    CUDA."""
    if ctx.algorithm not in ("EAGLE", "EAGLE3", "DFLASH", "DSPARK"):
        return Hit(
            f"--speculative-use-block-verification only supports EAGLE/EAGLE3/NEXTN/DFLASH/DSPARK, "
            f"not {ctx.algorithm}",
            fix="remove speculative-use-block-verification",
            edits={"speculative_use_block_verification": None},
        )
    if ctx.get("device", "cuda") not in ("cuda", None):
        return Hit("--speculative-use-block-verification only supports CUDA", about="device")


@rule(
    "DDT804",
    "decode radix cache in PD disaggregation only with EAGLE/EAGLE3/DSPARK",
    reads=("disaggregation_decode_enable_radix_cache",),
    applies=lambda ctx: (
        ctx.algorithm is not None
        and ctx.get("disaggregation_mode") == "decode"
        and bool(ctx.get("disaggregation_decode_enable_radix_cache"))
    ),
    reference=SPEC_HOOK,
)
def disagg_radix(ctx: Context):
    """`--disaggregation-decode-enable-radix-cache` is incompatible with speculative algorithms other than
    EAGLE, EAGLE3 and DSPARK."""
    if ctx.algorithm not in ("EAGLE", "EAGLE3", "DSPARK"):
        return Hit(
            f"--disaggregation-decode-enable-radix-cache is incompatible with {ctx.algorithm}",
            fix="remove disaggregation-decode-enable-radix-cache",
            edits={"disaggregation_decode_enable_radix_cache": None},
        )


_SPEC_ONLY = (
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_dflash_block_size",
    "speculative_ddtree_budget",
    "speculative_ddtree_topk_cap",
)


@rule(
    "DDT805",
    "speculative flags without an algorithm have no effect",
    severity=WARNING,
    reads=_SPEC_ONLY,
    applies=lambda ctx: ctx.algorithm is None,
    reference=SPEC_HOOK,
    sglang_enforces=False,
)
def spec_flags_without_algorithm(ctx: Context):
    """Speculative flags are ignored unless `--speculative-algorithm` is set: usually a forgotten line."""
    for dest in _SPEC_ONLY:
        if ctx.is_set(dest):
            yield Hit(
                f"--{dest.replace('_', '-')} has no effect without --speculative-algorithm",
                about=dest,
                fix="set speculative-algorithm, or remove the speculative flags",
            )
