"""Checks of sglang 0.5.23 srt/arg_groups/mamba_hook.py: the hybrid (Mamba / GDN) cache strategies
(validate_mamba_extra_buffer, validate_mamba_no_buffer: DDT502-DDT505, DDT509) and the mamba state counters
(handle_mamba_backend: DDT508), with the predicates other hook modules read (`mamba_strategy`, `at_mamba`,
`mamba_cache_active`, `effective_strategy`). DDT501 (model_hook.py handle_mamba_radix_cache) is in model.py,
DDT507 (overrides.py _mamba_radix_cache_resolution) in overrides.py."""

from __future__ import annotations

from ddtctl.model_facts import EXTRA_BUFFER_ARCHITECTURES
from ddtctl.rules.engine import (
    FACT_MODEL,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.resolution import resolve

MAMBA_HOOK = "sglang 0.5.23 srt/arg_groups/mamba_hook.py"


EXTRA = ("extra_buffer", "extra_buffer_lazy")


def mamba_strategy(ctx: Context) -> str:
    return ctx.get("mamba_radix_cache_strategy") or "auto"


def at_mamba(ctx: Context) -> tuple[int | None, str | None, bool]:
    """(page size, attention backend, radix cache off) when SGLang validates the mamba cache
    (model_hook.py:737, after the model's own overrides: e.g. model_overrides/qwen3_5.py:24-48 sets page 1 /
    64 on SM100)."""

    res = resolve(ctx)
    if res is None:
        return ctx.given.get("page_size"), ctx.get("attention_backend"), bool(ctx.get("disable_radix_cache"))
    return res.page_at_mamba, res.attention_at_mamba, res.radix_at_mamba


def mamba_cache_active(ctx: Context) -> bool:
    return bool(ctx.is_hybrid) and not at_mamba(ctx)[2]


def effective_strategy(ctx: Context) -> str:
    """What `auto` resolves to (overrides.py:454-487 _mamba_radix_cache_resolution)."""
    strategy = mamba_strategy(ctx)
    if strategy != "auto":
        return strategy
    wants_overlap = not ctx.get("disable_overlap_schedule")
    wants_paging = (at_mamba(ctx)[0] or 1) > 1
    supported = (
        ctx.model is not None
        and ctx.model.architecture in EXTRA_BUFFER_ARCHITECTURES
        and (ctx.get("linear_attn_backend") or "triton") == "triton"
    )
    return "extra_buffer" if (wants_overlap or wants_paging) and supported else "no_buffer"


@rule(
    "DDT502",
    "extra_buffer is supported by this architecture",
    reads=("mamba_radix_cache_strategy",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: mamba_strategy(ctx) in EXTRA and mamba_cache_active(ctx),
    reference=f"{MAMBA_HOOK} validate_mamba_extra_buffer",
)
def extra_buffer_supported(ctx: Context):
    """extra_buffer needs an architecture with state snapshots and the triton linear-attention backend."""
    arch = ctx.known_model.architecture
    if arch not in EXTRA_BUFFER_ARCHITECTURES:
        return Hit(
            f"extra_buffer is not supported for {arch}",
            fix="use mamba-radix-cache-strategy: no_buffer",
            edits={"mamba_radix_cache_strategy": "no_buffer"},
        )
    backend = ctx.get("linear_attn_backend") or "triton"
    if backend != "triton":
        return Hit(
            f"extra_buffer needs --linear-attn-backend triton, got {backend}",
            about="linear_attn_backend",
            fix="set linear-attn-backend: triton",
            edits={"linear_attn_backend": "triton"},
        )


@rule(
    "DDT503",
    "mamba track interval covers the speculative block",
    reads=("mamba_track_interval", "speculative_num_draft_tokens"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        mamba_cache_active(ctx) and effective_strategy(ctx) in EXTRA and ctx.algorithm is not None
    ),
    reference=f"{MAMBA_HOOK} validate_mamba_extra_buffer (assert)",
)
def track_interval(ctx: Context):
    """With extra_buffer, `mamba_track_interval >= speculative_num_draft_tokens` (a bare AssertionError in
    SGLang), for an explicit `--speculative-num-draft-tokens` (SGLang checks before deriving it; DDT509 covers
    the derived count)."""
    tokens = ctx.given.get("speculative_num_draft_tokens")
    interval = ctx.get("mamba_track_interval")
    if tokens and interval is not None and interval < tokens:
        return Hit(
            f"--mamba-track-interval ({interval}) must be >= the speculative draft tokens ({tokens})",
            fix=f"set mamba-track-interval to at least {tokens}",
            edits={"mamba_track_interval": max(tokens, 256)},
        )


@rule(
    "DDT509",
    "mamba track interval covers the speculative block SGLang derives",
    reads=("mamba_track_interval", "speculative_dflash_block_size"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        mamba_cache_active(ctx)
        and effective_strategy(ctx) in EXTRA
        and ctx.algorithm is not None
        and not ctx.is_set("speculative_num_draft_tokens")
    ),
    reference=f"{MAMBA_HOOK}:132-133 validate_mamba_extra_buffer (assert), run before speculative_hook.py "
    "resolves the draft tokens",
    sglang_enforces=False,
    evidence="the verify window overruns the mamba track interval at runtime; with the same draft tokens "
    "given "
    "explicitly SGLang's own assert refuses it (tests/fidelity/cases.yaml "
    "next-dflash-track-8-block-from-config, stricter_by_design)",
)
def track_interval_derived(ctx: Context):
    """SGLang asserts `mamba_track_interval >= speculative_num_draft_tokens` (mamba_hook.py:132-133) before
    its speculative hook fills the draft tokens in from `--speculative-dflash-block-size` or the DFlash
    drafter's block size, so a launch that sets only those passes the assert with an interval below the verify
    block, which the assert exists to prevent: ddtctl checks the derived count (stricter than SGLang's
    resolver)."""
    tokens = ctx.draft_tokens()
    interval = ctx.get("mamba_track_interval")
    if tokens and interval is not None and interval < tokens:
        return Hit(
            f"--mamba-track-interval ({interval}) is below the {tokens} draft tokens per verify that SGLang "
            "derives later (its own assert runs before, so it does not catch this)",
            fix=f"set mamba-track-interval to at least {tokens}",
            edits={"mamba_track_interval": max(tokens, 256)},
        )


@rule(
    "DDT504",
    "mamba track interval is a multiple of the page size",
    reads=("mamba_track_interval", "page_size"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        mamba_cache_active(ctx) and effective_strategy(ctx) in EXTRA and at_mamba(ctx)[0] is not None
    ),
    reference=f"{MAMBA_HOOK}:134-135 validate_mamba_extra_buffer (assert); "
    "model_hook.py:737; model_overrides/qwen3_5.py:24-48",
)
def track_interval_page(ctx: Context):
    """With extra_buffer, `mamba_track_interval % page_size == 0` (a bare AssertionError in SGLang). The page
    size is the one SGLang has when it checks: on SM100 without --attention-backend, Qwen3-Next / Qwen3.5 /
    Qwen3.6 hybrids get page size 64 (trtllm_mha) or 1 (triton) from their model override, whatever
    --page-size says."""
    interval, page = ctx.get("mamba_track_interval"), at_mamba(ctx)[0]
    if interval is not None and page and interval % page:
        given = ctx.given.get("page_size")
        source = (
            f"--page-size ({page})"
            if given == page
            else f"the page size SGLang sets for {ctx.known_model.architecture} on this GPU ({page})"
        )
        return Hit(
            f"--mamba-track-interval ({interval}) must be a multiple of {source}",
            fix=f"set mamba-track-interval to a multiple of {page}",
        )


@rule(
    "DDT505",
    "no_buffer needs page size 1, overlap off and no trtllm_mha",
    reads=("mamba_radix_cache_strategy", "page_size", "disable_overlap_schedule"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: mamba_cache_active(ctx) and effective_strategy(ctx) == "no_buffer",
    reference=f"{MAMBA_HOOK}:156-165 validate_mamba_no_buffer (assert); overrides.py:477-486",
)
def no_buffer(ctx: Context):
    """no_buffer keeps no state snapshots: it only supports page_size 1, no overlap scheduling, and not the
    trtllm_mha backend. `auto` falls back to no_buffer where extra_buffer is unsupported (a linear-attention
    backend other than triton), turning overlap off itself but not the page size."""
    page, attention, _ = at_mamba(ctx)
    if (page or 1) != 1:
        yield Hit(
            "mamba strategy no_buffer"
            + (" (what auto resolves to here)" if mamba_strategy(ctx) == "auto" else "")
            + " only supports --page-size 1",
            about="page_size",
            fix="set page-size: 1",
            edits={"page_size": 1},
        )
    if mamba_strategy(ctx) == "no_buffer" and not ctx.get("disable_overlap_schedule"):
        yield Hit(
            "mamba strategy no_buffer does not support overlap scheduling",
            about="disable_overlap_schedule",
            fix="set disable-overlap-schedule: true",
            edits={"disable_overlap_schedule": True},
        )
    if attention == "trtllm_mha":
        yield Hit(
            "mamba strategy no_buffer does not support the trtllm_mha backend", about="attention_backend"
        )


@rule(
    "DDT508",
    "mamba state counters are valid",
    reads=("mamba_max_states_per_path", "mamba_cache_philox_rounds"),
    applies=lambda ctx: ctx.is_set("mamba_max_states_per_path") or ctx.is_set("mamba_cache_philox_rounds"),
    reference=f"{MAMBA_HOOK} handle_mamba_backend",
)
def mamba_counters(ctx: Context):
    """`--mamba-max-states-per-path` is -1 or positive; `--mamba-cache-philox-rounds` is non-negative."""
    states = ctx.get("mamba_max_states_per_path")
    if states is not None and (states == 0 or states < -1):
        yield Hit(
            f"--mamba-max-states-per-path must be -1 (unlimited) or positive, got {states}",
            about="mamba_max_states_per_path",
            edits={"mamba_max_states_per_path": -1},
            fix="set mamba-max-states-per-path: -1",
        )
    rounds = ctx.get("mamba_cache_philox_rounds")
    if rounds is not None and rounds < 0:
        yield Hit(
            f"--mamba-cache-philox-rounds must be non-negative, got {rounds}",
            about="mamba_cache_philox_rounds",
        )
