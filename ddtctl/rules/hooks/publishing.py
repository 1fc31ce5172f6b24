"""DDT971: the load publisher, retired or out-of-range serving variables and the multimodal feature transports
(sglang 0.5.23 srt/arg_groups/validation_hook.py:440-475 check_load_publish_args, 675-683
validate_sampling_mask_max_tokens; serving_hook.py:386-390 handle_deprecated_args, 886-917
handle_multimodal_feature_transport); DDT972: the pipeline-parallel speculative relay (SGLANG_ENABLE_PP_SPEC,
validation_hook.py:119-160 check_pipeline_parallel_compat)."""

from __future__ import annotations

import json
import re
from typing import Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size, env_flag, env_int

_WILDCARD = ("*", "0.0.0.0", "::")  # disaggregation/kv_events.py:88


def _tcp(endpoint: object) -> tuple[str, int] | None:
    """(host, port) of a tcp:// endpoint with a legal port (kv_events.py:91-137), else None."""
    if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
        return None
    match = re.fullmatch(r"\[?([^\]]*)\]?:(\d+)", endpoint[len("tcp://") :])
    if match is None or not 0 < int(match.group(2)) <= 65535:
        return None
    return match.group(1), int(match.group(2))


def _range_problem(ctx: Context, config: dict, mode: str) -> str | None:
    """kv_events.py:140-227 resolve_load_pub_range: why the load range cannot bind (None: it can)."""
    dp = (ctx.get("dp_size", 1) or 1) * attn_dp_size(ctx)
    kv, replay = _tcp(config.get("endpoint", "tcp://*:5557")), _tcp(config.get("replay_endpoint"))
    if mode.lower() == "auto":
        if kv is None or kv[0] not in _WILDCARD:
            return (
                "--load-publish-endpoint auto needs a bindable wildcard-host tcp:// --kv-events-config "
                "endpoint"
            )
        base = kv[1] + dp
        if replay is not None and base < replay[1] + dp and replay[1] < base + dp:
            base = replay[1] + dp
    else:
        load = _tcp(mode)
        if kv is None:
            return f"--load-publish-endpoint {mode} needs a routable tcp:// --kv-events-config endpoint"
        if load is None or load[0] not in _WILDCARD:
            return f"--load-publish-endpoint {mode} is not a bindable (wildcard-host) tcp:// address"
        base = load[1]
        for other in (kv, replay):
            if other is not None and base < other[1] + dp and other[1] < base + dp:
                return f"--load-publish-endpoint range [{base}, {base + dp}) overlaps the kv-events range"
    if base + dp - 1 > 65535:
        return f"the load port range from {base} would run past 65535"
    return None


def _load_publishing(ctx: Context) -> Iterator[Hit]:
    mode = str(ctx.given.get("load_publish_endpoint") or "").strip()
    if not mode or mode.lower() == "off":
        return
    raw = ctx.given.get("kv_events_config")
    if not raw:
        yield Hit(
            "--load-publish-endpoint requires --kv-events-config (routers discover the load range there)",
            about="load_publish_endpoint",
        )
        return
    try:
        config = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as err:
        yield Hit(f"--kv-events-config is not parseable JSON: {err}", about="kv_events_config")
        return
    if not isinstance(config, dict):
        yield Hit("--kv-events-config must be a JSON object", about="kv_events_config")
        return
    if config.get("publisher", "null") == "null" or not config.get("endpoint", "tcp://*:5557"):
        yield Hit(
            "--load-publish-endpoint needs an active --kv-events-config publisher (not null, with an "
            "endpoint)",
            about="kv_events_config",
        )
        return
    problem = _range_problem(ctx, config, mode)
    if problem:
        yield Hit(problem, about="load_publish_endpoint")


@rule(
    "DDT971",
    "the load publisher, retired serving variables, multimodal feature transports",
    reads=("load_publish_endpoint", "kv_events_config", "mm_feature_transport", "pp_size", "nnodes"),
    applies=lambda ctx: (
        bool(ctx.given.get("load_publish_endpoint"))
        or ctx.get("mm_feature_transport") in ("cuda_vmm", "cuda_ipc")
        or "SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS" in ctx.env
        or "SGLANG_GRPC_WORKER_THREADS" in ctx.env
    ),
    reference=f"{AG}validation_hook.py:440-475 check_load_publish_args, 675-683; serving_hook.py:386-390, "
    "886-917",
)
def serving_transports(ctx: Context) -> Iterator[Hit]:
    """`--load-publish-endpoint` (auto or a wildcard tcp:// address) needs a parseable `--kv-events-config`
    with an active publisher and a range that binds without overlapping the KV-event ports;
    SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS is retired; SGLANG_GRPC_WORKER_THREADS is >= 1 with gRPC;
    `--mm-feature-transport cuda_vmm` runs without PP and `cuda_ipc` on one node (both off for encoder-only
    servers)."""
    yield from _load_publishing(ctx)
    if "SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS" in ctx.env:
        yield Hit(
            "SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS is no longer supported: unset it (use "
            "SGLANG_ENABLE_DISAGG_SAMPLING_MASK=1 and --sampling-mask-max-tokens)",
            about="env.SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS",
        )
    threads = env_int(ctx, "SGLANG_GRPC_WORKER_THREADS", 4)
    if ctx.given.get("grpc_port") is not None and threads is not None and threads < 1:
        yield Hit(
            f"SGLANG_GRPC_WORKER_THREADS ({threads}) must be >= 1", about="env.SGLANG_GRPC_WORKER_THREADS"
        )
    transport = ctx.get("mm_feature_transport")
    if ctx.get("encoder_only"):
        return
    if transport == "cuda_vmm" and (ctx.get("pp_size", 1) or 1) != 1:
        yield Hit(
            "--mm-feature-transport cuda_vmm does not support pipeline parallelism",
            about="mm_feature_transport",
        )
    if transport == "cuda_ipc" and (ctx.get("nnodes", 1) or 1) != 1:
        yield Hit("--mm-feature-transport cuda_ipc only supports a single node", about="mm_feature_transport")


@rule(
    "DDT972",
    "the pipeline-parallel speculative relay (SGLANG_ENABLE_PP_SPEC)",
    reads=("pp_size", "speculative_algorithm", "disaggregation_mode", "speculative_adaptive", "attn_dp_size"),
    applies=lambda ctx: (
        env_flag(ctx, "SGLANG_ENABLE_PP_SPEC")
        and (ctx.get("pp_size", 1) or 1) > 1
        and ctx.algorithm in ("EAGLE", "DSPARK")
    ),
    reference=f"{AG}validation_hook.py:119-160 check_pipeline_parallel_compat",
)
def pp_spec_relay(ctx: Context) -> Iterator[Hit]:
    """With SGLANG_ENABLE_PP_SPEC=1 and pipeline parallelism, speculation relays an EAGLE tree across the
    stages: not for DSPARK (PD prefill), not under PD disaggregation, not adaptive, not with attention DP."""
    if ctx.algorithm == "DSPARK":
        yield Hit(
            "SGLANG_ENABLE_PP_SPEC does not support DSPARK PD prefill", about="env.SGLANG_ENABLE_PP_SPEC"
        )
        return
    if (ctx.get("disaggregation_mode") or "null") != "null":
        yield Hit(
            "SGLANG_ENABLE_PP_SPEC is not compatible with --disaggregation-mode", about="disaggregation_mode"
        )
    if ctx.get("speculative_adaptive"):
        yield Hit(
            "SGLANG_ENABLE_PP_SPEC is not compatible with --speculative-adaptive",
            about="speculative_adaptive",
        )
    if attn_dp_size(ctx) > 1:
        yield Hit("SGLANG_ENABLE_PP_SPEC is not compatible with attention DP", about="attn_dp_size")
