"""DDT957: elastic expert parallelism (sglang 0.5.23 srt/arg_groups/parallel_hook.py:519-750
handle_elastic_ep) past its flag dependencies (DDT907): the EPLB algorithm, PP 1, and the runtime scale-up's
topology, launch paths and CUDA graphs."""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size
from ddtctl.rules.hooks.graphs import DISABLED, FULL, a2a_backend, decode_graph, prefill_graph

_EPLB_ALGORITHMS = ("auto", "elasticity_aware", "elasticity_aware_hierarchical")


def _scaling(ctx: Context) -> bool:
    """parallel_hook.py:578-582: an elastic backend with --max-ep-size above --tp-size."""
    max_ep = ctx.given.get("max_ep_size")
    return (
        ctx.given.get("elastic_ep_backend") is not None
        and isinstance(max_ep, int)
        and max_ep > (ctx.get("tp_size", 1) or 1)
    )


def _topology(ctx: Context) -> Iterator[Hit]:
    """parallel_hook.py:585-612: the attention topology and each EP size in whole attention replicas."""
    tp, dp, cp = ctx.get("tp_size", 1) or 1, attn_dp_size(ctx), ctx.get("attn_cp_size", 1) or 1
    if tp % (dp * cp):
        yield Hit(
            f"elastic EP scale-up: invalid attention topology tp-size {tp}, attn-dp-size {dp}, "
            f"attn-cp-size {cp}",
            about="tp_size",
        )
        return
    replica = tp // dp
    sizes = [
        ("--max-ep-size", ctx.given.get("max_ep_size")),
        ("--elastic-ep-initial-size", ctx.given.get("elastic_ep_initial_size") or tp),
    ]
    if ctx.get("ep_join_mode") == "scale":
        sizes.append(("--elastic-ep-join-rank-offset", ctx.given.get("ep_join_rank_offset") or 0))
    for flag, size in sizes:
        if not isinstance(size, int) or size <= 0 or size % replica:
            yield Hit(
                f"elastic EP scale-up: {flag} {size} must be a positive multiple of the attention replica "
                f"size {replica} (tp-size / attn-dp-size)",
                about="max_ep_size",
            )
    if tp // dp // cp > 1 and ctx.given.get("moe_dense_tp_size") != 1:
        yield Hit(
            "elastic EP scale-up with attention TP greater than one requires --moe-dense-tp-size 1",
            about="moe_dense_tp_size",
            fix="set moe-dense-tp-size: 1",
            edits={"moe_dense_tp_size": 1},
        )


def _launch(ctx: Context) -> Iterator[Hit]:
    """parallel_hook.py:620-681: the launch paths and sizes scale-up supports."""
    if (ctx.get("elastic_ep_scale_timeout") or 0) <= 0:
        yield Hit("--elastic-ep-scale-timeout must be greater than zero", about="elastic_ep_scale_timeout")
    for dest, bad, text in (
        ("tokenizer_worker_num", lambda v: (v or 1) != 1, "requires --tokenizer-worker-num 1"),
        ("use_ray", bool, "does not support --use-ray"),
        ("enable_elastic_expert_backup", bool, "does not support --enable-elastic-expert-backup"),
    ):
        if bad(ctx.get(dest)):
            yield Hit(f"elastic EP runtime scale-up {text}", about=dest)
    tp = ctx.get("tp_size", 1) or 1
    initial, offset = ctx.given.get("elastic_ep_initial_size"), ctx.given.get("ep_join_rank_offset") or 0
    if ctx.get("ep_join_mode") == "scale":
        if initial is None or initial <= 0:
            yield Hit(
                "an elastic EP scale joiner needs a positive --elastic-ep-initial-size (the primary's "
                "launch-time EP size)",
                about="ep_join_mode",
            )
        elif initial > offset:
            yield Hit(
                f"--elastic-ep-initial-size {initial} cannot exceed the current EP size "
                f"(--elastic-ep-join-rank-offset {offset})",
                about="elastic_ep_initial_size",
            )
        if offset + tp > ctx.given["max_ep_size"]:
            yield Hit(
                f"the elastic EP joining group ({offset} + tp-size {tp}) exceeds --max-ep-size "
                f"{ctx.given['max_ep_size']}",
                about="max_ep_size",
            )
        if tp == 1 and ctx.given.get("moe_dense_tp_size") != 1:
            yield Hit(
                "a single-rank elastic EP joining group requires --moe-dense-tp-size 1", about="tp_size"
            )
    elif initial is not None and initial != tp:
        yield Hit(
            f"the primary --elastic-ep-initial-size must equal its launch-time tp-size ({tp}), got {initial}",
            about="elastic_ep_initial_size",
            edits={"elastic_ep_initial_size": None},
        )
    method = ctx.get("load_balance_method") or "auto"
    if method == "auto":
        method = "follow_bootstrap_room" if ctx.get("disaggregation_mode") == "prefill" else "round_robin"
    if method != "round_robin":
        yield Hit(
            f"elastic EP scale-up requires --load-balance-method round_robin, got {method}",
            about="load_balance_method",
            fix="set load-balance-method: round_robin",
            edits={"load_balance_method": "round_robin"},
        )
    if ctx.given.get("elastic_ep_backend") != "mooncake":
        yield Hit(
            "elastic EP runtime scale-up requires --elastic-ep-backend mooncake", about="elastic_ep_backend"
        )
    dcp = ctx.get("dcp_size", 1) or 1
    attn_tp = tp // attn_dp_size(ctx) // (ctx.get("attn_cp_size", 1) or 1)
    if attn_tp and attn_tp % dcp:
        yield Hit(
            f"elastic EP scale-up requires --dcp-size to divide the attention TP width ({attn_tp}), "
            f"got {dcp}",
            about="dcp_size",
        )


def _graphs(ctx: Context) -> Iterator[Hit]:
    """parallel_hook.py:687-719: decode graph full or disabled, prefill graph disabled; a full decode graph
    is recaptured, which needs CUDA and a plain generation server."""
    decode = decode_graph(ctx)
    if decode not in (FULL, DISABLED):
        yield Hit(f"elastic EP scale-up supports the decode CUDA graph full or disabled, got {decode}")
    if prefill_graph(ctx) != DISABLED:
        yield Hit(
            "elastic EP runtime scale-up requires the prefill CUDA graph disabled",
            fix="set disable-prefill-cuda-graph: true",
            edits={"disable_prefill_cuda_graph": True},
        )
    if decode != FULL:
        return
    device = ctx.given.get("device")
    not_cuda = device is not None and not str(device).startswith("cuda")
    for bad, text, dest in (
        (not_cuda, f"requires CUDA (got --device {device})", "device"),
        (ctx.algorithm is not None, "does not support speculative decoding", "speculative_algorithm"),
        (bool(ctx.get("is_embedding")), "does not support embedding models", "is_embedding"),
        (ctx.given.get("dllm_algorithm") is not None, "does not support diffusion models", "dllm_algorithm"),
        (bool(ctx.get("encoder_only")), "does not support encoder-only models", "encoder_only"),
        (bool(ctx.given.get("forward_hooks")), "does not support forward hooks", "forward_hooks"),
        (bool(ctx.get("enable_pdmux")), "does not support PDMux", "enable_pdmux"),
    ):
        if bad:
            yield Hit(
                f"elastic EP CUDA graph recapture {text} (or disable the decode CUDA graph)", about=dest
            )


def _parallel(ctx: Context) -> Iterator[Hit]:
    """parallel_hook.py:722-747: attention DP with DP LM heads, no CP / MoE DP, EP over the whole TP span
    through the NIXL all-to-all."""
    if attn_dp_size(ctx) <= 1:
        yield Hit("elastic EP scale-up requires attention DP (--attn-dp-size > 1)", about="attn_dp_size")
    elif not ctx.get("enable_dp_lm_head"):
        yield Hit(
            "elastic EP scale-up requires --enable-dp-lm-head",
            fix="set enable-dp-lm-head: true",
            edits={"enable_dp_lm_head": True},
        )
    if (ctx.get("attn_cp_size", 1) or 1) != 1:
        yield Hit("elastic EP scale-up requires --attn-cp-size 1", about="attn_cp_size")
    if (ctx.get("moe_dp_size", 1) or 1) != 1:
        yield Hit("elastic EP scale-up requires --moe-dp-size 1", about="moe_dp_size")
    a2a = a2a_backend(ctx)
    if a2a != "nixl":  # the NIXL all-to-all also spans EP over the TP group (overrides.py:1611 _a2a_ep_size)
        yield Hit(
            f"elastic EP scale-up requires --moe-a2a-backend nixl, got {a2a}",
            about="moe_a2a_backend",
            fix="set moe-a2a-backend: nixl",
            edits={"moe_a2a_backend": "nixl"},
            unsafe=True,
        )


@rule(
    "DDT957",
    "elastic EP: EPLB algorithm, PP 1, and what runtime scale-up supports",
    reads=(
        "elastic_ep_backend",
        "max_ep_size",
        "enable_eplb",
        "eplb_algorithm",
        "pp_size",
        "elastic_ep_initial_size",
        "ep_join_rank_offset",
        "moe_dense_tp_size",
        "load_balance_method",
        "moe_a2a_backend",
        "enable_dp_lm_head",
        "attn_dp_size",
    ),
    applies=lambda ctx: ctx.given.get("elastic_ep_backend") is not None,
    reference=f"{AG}parallel_hook.py:519-747 handle_elastic_ep (assert)",
)
def elastic_scale_up(ctx: Context) -> Iterator[Hit]:
    """An elastic-EP launch (`--elastic-ep-backend`) runs EPLB with the `auto` or
    `elasticity_aware(_hierarchical)` algorithm and PP 1. With `--max-ep-size` above `--tp-size` (runtime
    scale-up): each EP size is a whole number of attention replicas, attention TP > 1 needs
    `--moe-dense-tp-size 1`; a positive scale timeout, one tokenizer worker, no Ray, no expert backup; a
    primary's `--elastic-ep-initial-size` is its tp-size, a joiner's fits below the current EP size and
    `--max-ep-size`; round-robin load balancing over the mooncake backend; `--dcp-size` divides the attention
    TP width; decode CUDA graph full or disabled (full: CUDA, no speculation, embedding, diffusion,
    encoder-only, forward hooks or PDMux), prefill CUDA graph disabled; attention DP with
    `--enable-dp-lm-head`, no attention CP or MoE DP, ep-size = tp-size and the NIXL all-to-all."""
    algorithm = ctx.get("eplb_algorithm") or "auto"
    if ctx.get("enable_eplb") and algorithm not in _EPLB_ALGORITHMS:
        yield Hit(
            f"elastic EP needs --eplb-algorithm auto or elasticity_aware(_hierarchical), got {algorithm}",
            about="eplb_algorithm",
            fix="set eplb-algorithm: elasticity_aware",
            edits={"eplb_algorithm": "elasticity_aware"},
        )
    if (ctx.get("pp_size", 1) or 1) != 1:
        yield Hit("elastic EP requires --pp-size 1", about="pp_size")
        return
    device = ctx.given.get("mooncake_ib_device")
    if ctx.given.get("elastic_ep_backend") == "mooncake" and isinstance(device, str) and not device.strip():
        # validation_hook.py:530-533 validate_ib_devices (parallel_hook.py:540-545)
        yield Hit("--mooncake-ib-device names no IB device", about="mooncake_ib_device")
    if not _scaling(ctx):
        return
    for check in (_topology, _launch, _graphs, _parallel):
        yield from check(ctx)
