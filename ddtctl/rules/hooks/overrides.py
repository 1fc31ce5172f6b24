"""DDT950: values this launch sets that SGLang's resolver replaces (declare_resolution / post-process
overrides)."""

from __future__ import annotations

from typing import Any

from ddtctl.rules.engine import (
    FACT_MODEL,
    INFO,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.common import AG
from ddtctl.rules.hooks.mamba import effective_strategy, mamba_cache_active, mamba_strategy
from ddtctl.rules.hooks.model import derived_context_length
from ddtctl.rules.hooks.moe import EP_SPANNING, resolved_a2a
from ddtctl.rules.hooks.resolution import RADIX_DETERMINISTIC_BACKENDS, Resolution, is_deterministic, resolve
from ddtctl.rules.hooks.speculative_eagle import adaptive_effective

# (dest, the launch's value, SGLang's, where)
Override = tuple[str, object, object, str]

# choices.py:103-111 DRAFT_ATTENTION_BACKEND_CHOICES
DRAFT_ATTENTION_BACKENDS = ("flashinfer", "fa3", "fa4", "triton", "ascend", "trtllm_mha", "intel_xpu")


def dflash_draft_backend(ctx: Context, res: Resolution) -> str | None:
    """speculative_hook.py:886-986 _resolve_dflash_draft_attention_backend (CUDA)."""
    backend = ctx.get("speculative_draft_attention_backend")
    if backend is None:
        backend = res.pair[0]
    if backend is None:
        return "flashinfer"
    if backend not in DRAFT_ATTENTION_BACKENDS:
        return "flashinfer"
    if backend == "trtllm_mha":
        raw = (ctx.draft.raw if ctx.draft is not None else None) or {}
        text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
        layers = (raw.get("dflash_config") or {}).get("layer_types") or text.get("layer_types") or ()
        all_sliding = (
            layers and len(layers) == text.get("num_hidden_layers") and set(layers) == {"sliding_attention"}
        )
        if not (all_sliding or text.get("is_causal") is True):
            return "fa4" if ctx.known_gpu.sm in (100, 103) else "flashinfer"
    return backend


def predicted_overrides(ctx: Context) -> list[Override]:
    """(dest, the launch's value, SGLang's, where) for values this launch sets that SGLang's resolver
    replaces, as far as ddtctl models them (the rest: `ddtctl dry-run` lists SGLang's own overrides). Left
    out: the rules that report their own override (DDT115, DDT208, DDT307, DDT507, DDT605, DDT806, DDT904)."""
    out = _speculative_overrides(ctx) + _launch_overrides(ctx)
    res = resolve(ctx)
    if res is None:
        return out
    return out + _resolved_overrides(ctx, res)


def _speculative_overrides(ctx: Context) -> list[Override]:
    """The algorithm's spelling, adaptive speculation where it cannot run, NGRAM's topk, DSPARK's chain."""
    out: list[Override] = []
    raw_algo = ctx.given.get("speculative_algorithm")
    algo = ctx.algorithm
    if raw_algo is not None and algo is not None and str(raw_algo) != algo and algo != "DDTREE":
        out.append(
            (
                "speculative_algorithm",
                raw_algo,
                algo,
                "speculative_hook.py:162 (NEXTN is EAGLE; names are upper-cased)",
            )
        )
    if (
        ctx.get("speculative_adaptive")
        and ctx.given.get("speculative_adaptive")
        and not adaptive_effective(ctx)
    ):
        out.append(
            (
                "speculative_adaptive",
                True,
                False,
                "speculative_hook.py:261-264, 1369-1389 "
                "_maybe_disable_adaptive (EAGLE/EAGLE3 with topk 1 only)",
            )
        )
    topk = ctx.given.get("speculative_eagle_topk")
    if algo == "NGRAM" and topk is not None:
        breadth = ctx.get("speculative_ngram_max_bfs_breadth") or 10
        if topk != breadth:
            out.append(
                (
                    "speculative_eagle_topk",
                    topk,
                    breadth,
                    "speculative_hook.py:1309-1313 _handle_ngram (topk is the max BFS breadth)",
                )
            )
    if algo == "DSPARK":
        for dest in ("speculative_num_steps", "speculative_eagle_topk"):
            if ctx.given.get(dest) not in (None, 1):
                out.append((dest, ctx.given.get(dest), 1, "speculative_hook.py:760-790 _handle_dspark"))
    return out


def _launch_overrides(ctx: Context) -> list[Override]:
    """Overrides decided from the flags alone: MoE backends and EP size, deterministic sampling, dp-size."""
    out: list[Override] = []
    if ctx.get("moe_runner_backend") == "megamoe":
        out.append(
            (
                "moe_runner_backend",
                "megamoe",
                "auto",
                "mega_moe_hook.py:259-276 (an alias for --moe-a2a-backend megamoe)",
            )
        )
    a2a_given = ctx.given.get("moe_a2a_backend")
    a2a = resolved_a2a(ctx)
    if a2a_given is not None and a2a != a2a_given:
        out.append(
            (
                "moe_a2a_backend",
                a2a_given,
                a2a,
                "moe_hook.py:459-468 (ascend_tp), overrides.py:1596-1607 "
                "(Waterfill), mega_moe_hook.py:259-276",
            )
        )
    ep_given = ctx.given.get("ep_size")
    if ep_given is not None and resolved_a2a(ctx) in EP_SPANNING and ep_given != (ctx.get("tp_size", 1) or 1):
        out.append(("ep_size", ep_given, ctx.get("tp_size", 1) or 1, "overrides.py:1610-1620 _a2a_ep_size"))
    if is_deterministic(ctx) and ctx.given.get("sampling_backend") not in (None, "pytorch", "ascend"):
        out.append(
            (
                "sampling_backend",
                ctx.given.get("sampling_backend"),
                "pytorch",
                "overrides.py:1029-1036 _deterministic_sampling_backend",
            )
        )
    if (
        ctx.get("enable_dp_attention")
        and (ctx.given.get("attn_dp_size") or 1) == 1
        and (ctx.given.get("dp_size") or 1) > 1
    ):
        out.append(
            (
                "dp_size",
                ctx.given.get("dp_size"),
                1,
                "parallel_hook.py:39-61 handle_deprecated_dp_attention "
                f"(the deprecated spelling of --attn-dp-size "
                f"{ctx.given.get('dp_size')})",
            )
        )
    return out


def _resolved_overrides(ctx: Context, res: Resolution) -> list[Override]:
    """Overrides that follow from SGLang's resolution (`resolve`): radix cache, workspace, backends, KV dtype,
    page size, DFLASH's draft backend."""
    out: list[Override] = []
    algo = ctx.algorithm
    if (
        res.radix_disabled
        and not ctx.get("disable_radix_cache")
        and not ctx.given.get("enable_hierarchical_cache")
    ):
        why = (
            "deterministic inference on attention backend "
            + repr(res.attention)
            + " (attention_hook.py:656-662)"
            if res.deterministic and res.attention not in RADIX_DETERMINISTIC_BACKENDS
            else "a PD decode server (pd_disaggregation_hook.py:98-129)"
            if ctx.get("disaggregation_mode") == "decode"
            else "--enable-mis (attention_hook.py:556-562)"
        )
        out.append(("disable_radix_cache", False, True, f"no prefix caching: {why}"))
    mem = ctx.given.get("mem_fraction_static")
    context = ctx.given.get("context_length") or derived_context_length(ctx.known_model.raw or {}) or 0
    if res.attention == "aiter" and isinstance(mem, (int, float)) and context > 8192:
        out.append(
            (
                "mem_fraction_static",
                mem,
                round(mem * 0.85, 6),
                "attention_hook.py:244-268 (aiter with a context above 8192 keeps 15% for workspace)",
            )
        )
    for dest, value in (
        ("attention_backend", res.final_attention),
        ("prefill_attention_backend", res.prefill),
        ("decode_attention_backend", res.decode),
    ):
        given = ctx.given.get(dest)
        if given is not None and value is not None and value != given:
            out.append(
                (
                    dest,
                    given,
                    value,
                    "serving_hook.py:304-333 (deprecated spellings), kv_cache_hook.py:34-92 "
                    "(NVFP4), overrides.py:1126-1266 (default fill, fa3 + fp8_e5m2)",
                )
            )
    given_kv = ctx.given.get("kv_cache_dtype")
    if given_kv is not None and res.kv_cache_dtype != given_kv:
        out.append(
            (
                "kv_cache_dtype",
                given_kv,
                res.kv_cache_dtype,
                "serving_hook.py:324-329 (tokenspeed_mla implies fp8_e4m3)",
            )
        )
    page = ctx.given.get("page_size")
    if page is not None and res.final_page != page:
        out.append(
            (
                "page_size",
                page,
                res.final_page,
                "model_overrides/qwen3_5.py:24-48, overrides.py:1142-1337 (the "
                "attention backend's page sizes)",
            )
        )
    if algo == "DFLASH" and ctx.given.get("speculative_draft_attention_backend") is not None:
        draft = dflash_draft_backend(ctx, res)
        if draft != ctx.given.get("speculative_draft_attention_backend"):
            out.append(
                (
                    "speculative_draft_attention_backend",
                    ctx.given.get("speculative_draft_attention_backend"),
                    draft,
                    "speculative_hook.py:886-986 _resolve_dflash_draft_attention_backend",
                )
            )
    return out


@rule(
    "DDT950",
    "SGLang overrides a value this launch sets",
    severity=INFO,
    reads=(),
    applies=lambda ctx: bool(predicted_overrides(ctx)),
    reference=f"{AG} declare_resolution / register_post_process overrides "
    "(inventory: ddtctl/rules/overrides.yaml)",
)
def overridden(ctx: Context):
    """SGLang accepts the launch but runs with a different value than the one given: a deprecated or
    lower-case spelling, a backend or page size the attention backend or the model needs, an all-to-all
    backend's EP size, adaptive speculation where it cannot run, NGRAM's topk. Reported so the launch can say
    what runs."""
    for dest, given, value, where in predicted_overrides(ctx):
        flag = dest.replace("_", "-")
        yield Hit(
            f"SGLang runs --{flag} {value} instead of {given} ({where})",
            about=dest,
            severity=INFO,
            fix=f"set {flag}: {value}",
            edits={dest: value},
        )


@rule(
    "DDT507",
    "auto mamba strategy silently turns overlap scheduling off",
    severity=INFO,
    reads=("mamba_radix_cache_strategy",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        mamba_cache_active(ctx) and mamba_strategy(ctx) == "auto" and not ctx.get("disable_overlap_schedule")
    ),
    reference="sglang 0.5.23 overrides.py _mamba_radix_cache_resolution",
)
def auto_strategy(ctx: Context):
    """`auto` becomes extra_buffer when supported; otherwise no_buffer, and overlap scheduling is turned off
    without an error. Say what you want explicitly."""
    if effective_strategy(ctx) == "no_buffer":
        return Hit(
            "mamba strategy auto resolves to no_buffer here and disables overlap scheduling",
            about="disable_overlap_schedule",
            fix="set mamba-radix-cache-strategy explicitly",
            edits={},
        )
