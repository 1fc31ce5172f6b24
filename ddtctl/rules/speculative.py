"""Speculative-decoding rules of sglang 0.5.23 (arg_groups/speculative_hook.py, validation_hook.py): the ones
common to every algorithm and the DFLASH family's (DDTREE included). EAGLE-family and NGRAM rules:
eagle.py."""

from __future__ import annotations

from ddtctl.rules.engine import (
    DFLASH_FAMILY,
    INFO,
    KNOWN_ALGORITHMS,
    WARNING,
    Context,
    Hit,
    rule,
)

SPEC_HOOK = "sglang 0.5.23 srt/arg_groups/speculative_hook.py"


def _algo_in(*names: str):
    return lambda ctx: ctx.algorithm in names


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


# speculative/spec_info.py SpeculativeAlgorithm.supports_mixed_chunk; custom (plugin) algorithms say no.
MIXED_CHUNK_OK = ("EAGLE", "EAGLE3", "DFLASH", "DSPARK")
# Their resolution hooks switch it off with a warning: speculative_hook.py:1108-1112 (_handle_eagle_family:
# STANDALONE), :1307 (_handle_ngram), :596-600 (_handle_uno), :1002-1006 (_handle_frozen_kv_mtp).
MIXED_CHUNK_TURNED_OFF = ("STANDALONE", "NGRAM", "UNO", "FROZEN_KV_MTP")


@rule(
    "DDT806",
    "mixed chunked prefill is supported by this speculative algorithm",
    reads=("enable_mixed_chunk",),
    applies=lambda ctx: ctx.algorithm is not None and bool(ctx.get("enable_mixed_chunk")),
    reference="sglang 0.5.23 srt/arg_groups/validation_hook.py check_server_args; speculative/spec_info.py",
)
def mixed_chunk(ctx: Context):
    """Only EAGLE, EAGLE3, DFLASH and DSPARK keep mixed chunked prefill; STANDALONE, NGRAM, UNO and
    FROZEN_KV_MTP turn it off with a warning (an override); plugin algorithms such as DDTREE fail
    `check_server_args` (validation_hook.py:229-237)."""
    if ctx.algorithm in MIXED_CHUNK_OK:
        return None
    if ctx.algorithm in MIXED_CHUNK_TURNED_OFF:
        return Hit(
            f"--enable-mixed-chunk is turned off by SGLang for {ctx.algorithm}",
            severity=INFO,
            fix="remove enable-mixed-chunk",
            edits={"enable_mixed_chunk": None},
        )
    return Hit(
        f"--enable-mixed-chunk is not supported with {ctx.algorithm}",
        fix="remove enable-mixed-chunk",
        edits={"enable_mixed_chunk": None},
    )


# ---------------------------------------------------------------- DFLASH (and DDTREE, a member of the family)


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
