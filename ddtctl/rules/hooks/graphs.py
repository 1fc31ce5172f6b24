"""The CUDA-graph backends SGLang 0.5.23 settles on per phase (decode / prefill), as far as the elastic-EP and
MoE checks need them: srt/arg_groups/cuda_graph_hook.py:32-102 parse_cuda_graph_config (explicit JSON >
per-phase flags > off-switches > defaults: decode `full`, prefill `breakable`), then the prefill
auto-disable cascade (cuda_graph_hook.py:136-256 apply_cuda_graph_compatibility, skipped when the prefill
backend is given), the all-to-all backends (moe_hook.py handle_a2a_moe) and the PD roles
(cuda_graph_hook.py:557-580). DDT973 checks `--cuda-graph-config` itself."""

from __future__ import annotations

import json
from typing import Any, Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.model import derived_context_length
from ddtctl.rules.hooks.resolution import resolved_page

FULL, BREAKABLE, DISABLED = "full", "breakable", "disabled"
# cuda_graph_hook.py:227-232: a2a backends the breakable prefill graph is validated with
_BCG_A2A = ("none", "deepep", "megamoe", "flashinfer")


def _explicit(ctx: Context) -> dict[str, dict[str, Any]]:
    raw = ctx.given.get("cuda_graph_config")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return {k: v for k, v in raw.items() if isinstance(v, dict)} if isinstance(raw, dict) else {}


def _given_backend(ctx: Context, phase: str) -> str | None:
    """The phase's backend as the flags set it (None: the default, unlocked)."""
    value = None
    if ctx.get("disable_cuda_graph"):
        value = DISABLED
    if ctx.get(f"disable_{phase}_cuda_graph"):
        value = DISABLED
    if ctx.given.get(f"cuda_graph_backend_{phase}") is not None:
        value = ctx.given[f"cuda_graph_backend_{phase}"]
    explicit = _explicit(ctx).get(phase, {}).get("backend")
    return str(explicit) if explicit is not None else value


def a2a_backend(ctx: Context) -> str:
    return str(ctx.get("moe_a2a_backend") or "none")


def _deepep_normal(ctx: Context) -> bool:
    """moe_hook.py:386-400: DeepEP normal dispatch turns both graphs off, given or not."""
    return a2a_backend(ctx) == "deepep" and ctx.get("deepep_mode") == "normal"


def decode_graph(ctx: Context) -> str:
    """full | breakable | disabled: the decode CUDA graph SGLang runs with."""
    if _deepep_normal(ctx):
        return DISABLED
    given = _given_backend(ctx, "decode")
    if given is not None:
        return given
    if ctx.get("disaggregation_mode") == "prefill":
        return DISABLED  # cuda_graph_hook.py:557-568 a prefill server decodes nothing
    return FULL


def prefill_graph(ctx: Context) -> str:
    """full | breakable | disabled: the prefill CUDA graph SGLang runs with (its auto-disable cascade as
    far as a launch's flags decide it)."""
    if _deepep_normal(ctx):
        return DISABLED
    given = _given_backend(ctx, "prefill")
    if given is not None:
        return given
    a2a = a2a_backend(ctx)
    if (
        (ctx.get("pp_size", 1) or 1) > 1
        or (ctx.get("dcp_size", 1) or 1) > 1
        or ctx.get("enable_two_batch_overlap")
        or a2a not in _BCG_A2A
        or ctx.get("disaggregation_mode") == "decode"
    ):
        return DISABLED
    return BREAKABLE


@rule(
    "DDT973",
    "CUDA-graph config backends and the prefill graph's context size",
    reads=("cuda_graph_config", "cuda_graph_prefill_max_context", "context_length", "page_size"),
    applies=lambda ctx: bool(_explicit(ctx)) or ctx.given.get("cuda_graph_prefill_max_context") is not None,
    reference="sglang 0.5.23 srt/arg_groups/cuda_graph_hook.py:410-447 validate_cuda_graph_config, "
    "_resolve_max_context_size",
)
def cuda_graph_config(ctx: Context) -> Iterator[Hit]:
    """Each phase of `--cuda-graph-config` names a backend full, breakable or disabled; the prefill graph's
    max context (`--cuda-graph-prefill-max-context` or the config's max_context_size), rounded up to whole
    pages, fits the model's context length (`--context-length`, else config.json's)."""
    explicit = _explicit(ctx)
    for phase in ("decode", "prefill"):
        backend = explicit.get(phase, {}).get("backend")
        if backend is not None and backend not in (FULL, BREAKABLE, DISABLED):
            yield Hit(
                f"--cuda-graph-config {phase} backend {backend!r} is not full, breakable or disabled",
                about="cuda_graph_config",
            )
    size = explicit.get("prefill", {}).get("max_context_size") or ctx.given.get(
        "cuda_graph_prefill_max_context"
    )
    if not isinstance(size, int) or size <= 0 or ctx.model is None or not ctx.model.known:
        return

    limit = ctx.given.get("context_length") or derived_context_length(ctx.model.raw or {})
    page = resolved_page(ctx)
    aligned = -(-size // page) * page
    if limit and aligned > limit:
        yield Hit(
            f"the prefill CUDA graph's max context ({aligned}, page-aligned) exceeds the model context "
            f"length ({limit})",
            about="cuda_graph_prefill_max_context",
            fix=f"set cuda-graph-prefill-max-context: {limit // page * page}",
        )
