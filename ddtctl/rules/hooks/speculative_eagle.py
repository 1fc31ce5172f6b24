"""Checks of sglang 0.5.23 srt/arg_groups/speculative_hook.py `_handle_eagle_family` and
`_init_adaptive_speculative_params`: EAGLE, EAGLE3, NEXTN and STANDALONE (DDT301-DDT308)."""

from __future__ import annotations

from ddtctl.model_facts import BUILTIN_MTP_ARCHITECTURES
from ddtctl.rules.engine import (
    EAGLE_FAMILY,
    FACT_MODEL,
    INFO,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.common import SPEC_HOOK, attn_dp_size
from ddtctl.rules.hooks.resolution import backends, effective_attention


def adaptive_effective(ctx: Context) -> bool:
    """Whether `--speculative-adaptive` survives adaptive_spec_params.py:56-100
    adaptive_unsupported_reason."""

    if not ctx.get("speculative_adaptive") or ctx.algorithm not in ("EAGLE", "EAGLE3"):
        return False
    topk = ctx.given.get("speculative_eagle_topk")
    return (
        topk in (None, 1)
        and attn_dp_size(ctx) <= 1
        and not ctx.get("enable_two_batch_overlap")
        and not ctx.get("enable_pdmux")
    )


ADAPTIVE_CANDIDATE_STEPS = (0, 1, 3, 5, 7)  # adaptive_spec_params.py:28-53 DEFAULT_ADAPTIVE_CONFIG


@rule(
    "DDT308",
    "adaptive speculative decoding steps are candidate steps",
    reads=("speculative_num_steps",),
    applies=lambda ctx: (
        adaptive_effective(ctx)
        and ctx.is_set("speculative_num_steps")
        and not ctx.is_set("speculative_adaptive_config")
    ),
    reference=f"{SPEC_HOOK}:1392-1421 _init_adaptive_speculative_params",
)
def adaptive_steps(ctx: Context):
    """With `--speculative-adaptive` (and SGLang's default adaptive config) `--speculative-num-steps` must be
    one of the config's candidate steps 0, 1, 3, 5, 7."""
    steps = ctx.get("speculative_num_steps")
    if steps not in ADAPTIVE_CANDIDATE_STEPS:
        return Hit(
            f"--speculative-num-steps {steps} is not a candidate step of the default adaptive config "
            f"({', '.join(map(str, ADAPTIVE_CANDIDATE_STEPS))})",
            about="speculative_num_steps",
            fix="set speculative-num-steps: 3",
            edits={"speculative_num_steps": 3},
        )


@rule(
    "DDT301",
    "EAGLE steps, topk and draft tokens are set together",
    reads=("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"),
    # an IQuest Q1 target's MTP hook declares steps, topk 1 and steps + 1 draft tokens first
    # (speculative_hook.py:1014-1061 _handle_iquest_q1_mtp_draft; DDT964 checks them)
    applies=lambda ctx: (
        ctx.algorithm in EAGLE_FAMILY
        and not adaptive_effective(ctx)
        and not (ctx.model is not None and ctx.model.architecture == "IQuestQ1ForCausalLM")
    ),
    reference=f"{SPEC_HOOK}:1159-1163 _handle_eagle_family (assert / TypeError); "
    "speculative_hook.py:261-264, "
    "1369-1389 _maybe_disable_adaptive",
)
def eagle_params(ctx: Context):
    """When `--speculative-num-steps` is unset SGLang chooses steps/topk/draft tokens itself and *asserts*
    that topk and draft tokens are unset too (a bare AssertionError). When steps are set, topk must be set
    too: SGLang compares it with numbers and fails with a TypeError on None. `--speculative-adaptive` fills
    steps and topk itself, but only where adaptive runs (EAGLE/EAGLE3 with topk 1, no attention DP, no
    two-batch overlap, no PDMux); elsewhere SGLang turns it off first and the rule applies."""
    if not ctx.is_set("speculative_num_steps"):
        given = [d for d in ("speculative_eagle_topk", "speculative_num_draft_tokens") if ctx.is_set(d)]
        if given:
            names = " and ".join(f"--{d.replace('_', '-')}" for d in given)
            return Hit(
                f"{names} set without --speculative-num-steps: SGLang auto-chooses all three and fails with "
                "an AssertionError",
                about=given[0],
                fix="set speculative-num-steps too (e.g. 3), or remove "
                + ", ".join(d.replace("_", "-") for d in given),
            )
    elif not ctx.is_set("speculative_eagle_topk"):
        return Hit(
            "--speculative-num-steps set without --speculative-eagle-topk: SGLang fails with a TypeError "
            "(topk stays None)",
            about="speculative_num_steps",
            fix="set speculative-eagle-topk (1 for a chain) and speculative-num-draft-tokens",
            edits={"speculative_eagle_topk": 1},
        )


@rule(
    "DDT302",
    "STANDALONE does not support DP attention",
    reads=("enable_dp_attention",),
    applies=lambda ctx: ctx.algorithm == "STANDALONE" and ctx.dp_attention,
    reference=f"{SPEC_HOOK} _handle_eagle_family",
)
def standalone_dp(ctx: Context):
    """Standalone speculative decoding does not support DP attention."""
    return Hit(
        "STANDALONE speculative decoding does not support DP attention",
        fix="remove enable-dp-attention",
        edits={"enable_dp_attention": None},
    )


@rule(
    "DDT303",
    "rejection sampling is EAGLE/EAGLE3 with topk 1 and default thresholds",
    reads=("speculative_use_rejection_sampling",),
    applies=lambda ctx: (
        ctx.algorithm is not None
        and (
            bool(ctx.get("speculative_use_rejection_sampling"))
            or (bool(ctx.get("speculative_use_block_verification")) and ctx.algorithm in ("EAGLE", "EAGLE3"))
        )
    ),
    reference=(
        f"{SPEC_HOOK}:175-194 (block verification turns rejection sampling on), "
        ":1209-1226 _handle_eagle_family"
    ),
)
def rejection_sampling(ctx: Context):
    """`--speculative-use-rejection-sampling` works only for EAGLE/EAGLE3/NEXTN, needs topk 1, and ignores the
    accept thresholds (so setting them is an error)."""
    if ctx.algorithm not in ("EAGLE", "EAGLE3"):
        if ctx.algorithm in EAGLE_FAMILY:  # a NotImplementedError in SGLang
            yield Hit(
                f"--speculative-use-rejection-sampling is only supported for EAGLE/EAGLE3/NEXTN, not "
                f"{ctx.algorithm}",
                fix="remove speculative-use-rejection-sampling",
                edits={"speculative_use_rejection_sampling": None},
            )
        return
    topk = ctx.given.get("speculative_eagle_topk")
    if topk is not None and topk != 1:
        via = (
            ""
            if ctx.get("speculative_use_rejection_sampling")
            else " (--speculative-use-block-verification turns it on for EAGLE/EAGLE3)"
        )
        yield Hit(
            f"--speculative-use-rejection-sampling{via} requires --speculative-eagle-topk 1",
            about="speculative_eagle_topk",
            fix="set speculative-eagle-topk: 1",
            edits={"speculative_eagle_topk": 1},
        )
    for dest in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc"):
        if ctx.get(dest, 1.0) != 1.0:
            yield Hit(
                f"--speculative-use-rejection-sampling is incompatible with --{dest.replace('_', '-')}",
                about=dest,
                fix=f"remove {dest.replace('_', '-')}",
                edits={dest: None},
            )


_PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")


def _backends(ctx: Context) -> tuple[str | None, str | None]:

    return backends(ctx)


@rule(
    "DDT304",
    "EAGLE topk > 1 with paged KV needs a tree-capable backend",
    reads=("speculative_eagle_topk", "page_size", "attention_backend"),
    applies=lambda ctx: ctx.algorithm in EAGLE_FAMILY and (ctx.given.get("speculative_eagle_topk") or 1) > 1,
    reference=f"{SPEC_HOOK} _handle_eagle_family; overrides.py (MLA backend auto-selection)",
)
def eagle_topk_paged(ctx: Context):
    """topk > 1 with page_size > 1 needs the two-pass cascade draft decode, implemented only by flashinfer,
    fa3 and triton. SGLang's own choices count too: a DeepSeek-style MLA model on SM100 gets trtllm_mla with
    page size 64."""
    backend, page = effective_attention(ctx)
    if backend is not None and page > 1 and backend not in _PAGE_TREE_BACKENDS:
        chosen = "" if ctx.is_set("attention_backend") else " (chosen by SGLang for this model and GPU)"
        return Hit(
            f"--speculative-eagle-topk > 1 with page size {page} is only supported on "
            f"{'/'.join(_PAGE_TREE_BACKENDS)}, got attention backend {backend!r}{chosen}",
            about="speculative_eagle_topk",
            fix="set speculative-eagle-topk: 1, or page-size: 1 with a tree-capable attention-backend",
            edits={"speculative_eagle_topk": 1} if not ctx.is_set("attention_backend") else {},
        )


@rule(
    "DDT305",
    "trtllm_mha supports only topk 1",
    reads=("attention_backend", "speculative_eagle_topk"),
    applies=lambda ctx: (
        ctx.algorithm in EAGLE_FAMILY
        and "trtllm_mha" in _backends(ctx)
        and (ctx.given.get("speculative_eagle_topk") or 1) > 1
    ),
    reference=f"{SPEC_HOOK}:1177-1181 _handle_eagle_family",
)
def trtllm_topk(ctx: Context):
    """The trtllm_mha attention backend (as attention, prefill or decode backend) supports only
    `--speculative-eagle-topk 1`."""
    return Hit(
        "trtllm_mha attention backend only supports --speculative-eagle-topk 1",
        about="speculative_eagle_topk",
        fix="set speculative-eagle-topk: 1",
        edits={"speculative_eagle_topk": 1},
    )


@rule(
    "DDT306",
    "EAGLE needs a draft model unless the target ships its MTP layer",
    reads=("speculative_draft_model_path",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: ctx.algorithm in EAGLE_FAMILY and not ctx.is_set("speculative_draft_model_path"),
    reference=f"{SPEC_HOOK} _handle_eagle_family; fails at draft model load",
    sglang_enforces=False,
    evidence="the draft worker has no checkpoint to load at start-up (tests/fidelity/cases.yaml "
    "q3-eagle3-no-draft, "
    "stricter_by_design)",
)
def eagle_draft(ctx: Context):
    """Only DeepSeek-V3-style targets (NEXTN/MTP inside the checkpoint) may omit the draft model; for others
    SGLang accepts the flags and fails later when the draft worker loads."""
    arch = ctx.known_model.architecture
    if arch not in BUILTIN_MTP_ARCHITECTURES:
        return Hit(
            f"{ctx.algorithm} on {arch} needs --speculative-draft-model-path "
            "(only DeepSeek-V3-style models carry their own MTP draft layer)",
            fix="set speculative-draft-model-path to the EAGLE/EAGLE3 draft model",
        )


@rule(
    "DDT307",
    "topk 1 forces draft tokens = steps + 1",
    severity=INFO,
    reads=("speculative_num_draft_tokens",),
    applies=lambda ctx: (
        ctx.algorithm in EAGLE_FAMILY
        and ctx.given.get("speculative_eagle_topk") == 1
        and ctx.is_set("speculative_num_steps")
        and ctx.is_set("speculative_num_draft_tokens")
    ),
    reference=f"{SPEC_HOOK} _handle_eagle_family",
)
def eagle_chain_tokens(ctx: Context):
    """With topk 1 the draft is a chain: SGLang silently sets draft tokens to steps + 1."""
    steps, tokens = ctx.get("speculative_num_steps"), ctx.get("speculative_num_draft_tokens")
    if tokens != steps + 1:
        return Hit(
            f"--speculative-num-draft-tokens {tokens} becomes {steps + 1} (steps + 1) with topk 1",
            fix=f"set speculative-num-draft-tokens: {steps + 1}",
            edits={"speculative_num_draft_tokens": steps + 1},
        )
