"""Typed pydantic models of the speculative, mamba, DFLASH and DDTree flags of an SGLang release.

Built from the release's flag catalog (real argparse types, defaults and choices) plus
the value ranges argparse does not express. Used to check those flags' values and to
type `server:` in the profile's JSON Schema.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from ddtctl.schema.catalog import Catalog, FlagSpec

TYPED_PREFIXES = ("speculative_", "mamba_", "enable_mamba_")
TYPED_EXTRA = {"max_mamba_cache_size", "linear_attn_backend", "enable_multi_layer_eagle", "enable_dp_lm_head"}
# Ranges SGLang expects but argparse does not check. Fields whose range a rule reports (block size,
# DDTree budget, mamba ratio and counters, draft window/sink) are left to the rule, so each mistake is
# reported once, with the rule's fix. Besides these, every float flag must be finite (NaN passes every <
# / > test) and every integer must fit int64; every port is 1..65535 (issue #14: .nan, .inf, 1e999,
# tp-size -8 and port -1 were accepted).
# Not here: --speculative-num-steps / --speculative-eagle-topk / --speculative-num-draft-tokens. SGLang
# 0.5.23 takes 0 at launch and, for DFLASH / DSPARK / UNO, replaces it (an override, reported as info); the
# algorithm rules check what SGLang refuses (UNO top-k >= 1: DDT956) and DDT974 warns where 0 is kept.
RANGES: dict[str, dict[str, Any]] = {
    "speculative_accept_threshold_single": {"ge": 0, "le": 1},
    "speculative_accept_threshold_acc": {"ge": 0, "le": 1},
    "speculative_ngram_min_bfs_breadth": {"ge": 1},
    "speculative_ngram_max_bfs_breadth": {"ge": 1},
    "mamba_track_interval": {"ge": 1},
    "max_mamba_cache_size": {"ge": 1},
    # parallelism: group sizes are counts of GPUs / nodes, ranks and GPU ids are indexes
    **{
        dest: {"ge": 1}
        for dest in (
            "tp_size",
            "pp_size",
            "dp_size",
            "ep_size",
            "attn_cp_size",
            "attn_dp_size",
            "dcp_size",
            "moe_dp_size",
            "dwdp_size",
            "moe_dense_tp_size",
            "shared_experts_tp_size",
            "nnodes",
            "gpu_id_step",
        )
    },
    "node_rank": {"ge": 0},
    "base_gpu_id": {"ge": 0},
    # memory and scheduling
    "mem_fraction_static": {"gt": 0, "le": 1},
    "hicache_host_memory_fraction": {"gt": 0, "le": 1},
    "hicache_ratio": {"gt": 0},
    "hicache_size": {"ge": 0},
    "cpu_offload_gb": {"ge": 0},
    "max_running_requests": {"ge": 1},
    "max_total_tokens": {"ge": 1},
    "context_length": {"ge": 1},
    "stream_interval": {"ge": 1},
    "tokenizer_worker_num": {"ge": 1},
    "detokenizer_worker_num": {"ge": 1},
    "watchdog_timeout": {"gt": 0},
    "random_seed": {
        "ge": 0,
        "le": 2**32 - 1,
    },  # numpy's seed range; SGLang seeds random, numpy and torch with it
}
PORT_RANGE = {"ge": 1, "le": 65535}
# The sides ("low" / "high") of those ranges that SGLang 0.5.23's resolver rejects itself, a value just
# outside alone on a dense launch (tests/fidelity/range_probe.py measures it; test_range_probe.py holds this
# equal). Out of one of these, or of a side whose start-up failure is shown (RUNTIME_EVIDENCE), a value is an
# error (DDT002); out of any other side it is a warning (DDT013): SGLang launches it, so a static error would
# block a launch SGLang takes (issue #32 item 1).
RESOLVER_ENFORCED: frozenset[tuple[str, str]] = frozenset(
    {
        ("attn_dp_size", "low"),
        ("base_gpu_id", "low"),
        ("dcp_size", "low"),
        ("detokenizer_worker_num", "low"),
        ("gpu_id_step", "low"),
        ("grpc_port", "high"),
        ("grpc_port", "low"),
        ("hicache_host_memory_fraction", "high"),
        ("hicache_host_memory_fraction", "low"),
        ("moe_dense_tp_size", "low"),
        ("moe_dp_size", "low"),
        ("nnodes", "low"),
        ("shared_experts_tp_size", "low"),
        ("tokenizer_worker_num", "low"),
    }
)
RUNTIME_EVIDENCE: dict[tuple[str, str], str] = {
    ("mem_fraction_static", "high"): (
        "the KV pool is sized from more than the GPU's memory: mem_cache/kv_cache_configurator.py:3007 "
        "slack_gb = pre_model_load_memory * (1 - mem_fraction_static) turns negative, so rest_memory (:3038) "
        "exceeds the free memory and the pool allocation fails at start-up"
    ),
}
INT64_MAX = 2**63 - 1


def value_range(spec: FlagSpec) -> dict[str, Any]:
    """The range of a flag's values beyond its argparse type (empty when it has none)."""
    if spec.dest in RANGES:
        return RANGES[spec.dest]
    if is_port(spec):
        return PORT_RANGE
    return {}


def _requirement(bounds: dict[str, Any]) -> str:
    lo = (">", bounds["gt"]) if "gt" in bounds else (">=", bounds["ge"]) if "ge" in bounds else None
    hi = ("<", bounds["lt"]) if "lt" in bounds else ("<=", bounds["le"]) if "le" in bounds else None
    if lo and hi:
        return f"in {'(' if lo[0] == '>' else '['}{lo[1]}, {hi[1]}{')' if hi[0] == '<' else ']'}"
    side = lo or hi
    if side is None:  # domain_problem asks only after one of the four bounds was broken
        raise ValueError(f"no gt/ge/lt/le bound in {bounds}")
    op, bound = side
    return f"{op} {bound}"


def range_side(spec: FlagSpec, value: Any) -> str | None:
    """Which side of the flag's range a number falls outside ("low" / "high"), or None (inside, no range, or
    not a number; a non-finite or over-wide number is outside every domain, not one side of a range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if (isinstance(value, float) and not math.isfinite(value)) or (
        isinstance(value, int) and abs(value) > INT64_MAX
    ):
        return None
    bounds = value_range(spec)
    if ("gt" in bounds and not value > bounds["gt"]) or ("ge" in bounds and not value >= bounds["ge"]):
        return "low"
    if ("lt" in bounds and not value < bounds["lt"]) or ("le" in bounds and not value <= bounds["le"]):
        return "high"
    return None


# The ports every SGLang start binds or connects: the HTTP server's (--port) and the NCCL rendezvous'
# (--nccl-port, the TCP store of torch.distributed's init). Python's socket module refuses a port outside
# 0-65535 (CPython socketmodule.c getsockaddrarg: "OverflowError: bind(): port must be 0-65535"), so those
# fail at start-up; port 0 binds a free port the OS picks (SGLang starts: a warning). The other ports serve
# one mode (disaggregation, encoder, gRPC, ...), and SGLang starts without that mode whatever they hold:
# warnings.
ALWAYS_BOUND_PORTS = frozenset({"port", "nccl_port"})
PORT_EVIDENCE = "Python's socket refuses it at start-up: OverflowError: bind(): port must be 0-65535"


def is_port(spec: FlagSpec) -> bool:
    return spec.type == "int" and (spec.dest == "port" or spec.dest.endswith("_port"))


def range_enforced(spec: FlagSpec, value: Any) -> bool:
    """Whether a number outside the flag's range stops SGLang: its resolver rejects that side of the range
    (RESOLVER_ENFORCED), or its start-up is shown to fail (RUNTIME_EVIDENCE, PORT_EVIDENCE). A problem that is
    not one side of a range (a non-finite or over-wide number) always does."""
    side = range_side(spec, value)
    if side is None:
        return True
    if (spec.dest, side) in RESOLVER_ENFORCED or (spec.dest, side) in RUNTIME_EVIDENCE:
        return True
    return spec.dest in ALWAYS_BOUND_PORTS and not 0 <= value <= 65535


def domain_problem(spec: FlagSpec, value: Any) -> str | None:
    """Why one typed value is outside the flag's domain ("... must be >= 1"), or None. Non-numbers (e.g. "4k"
    of a human-readable int, which SGLang converts itself) are not checked here."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number: must be a finite number"
    if isinstance(value, int) and abs(value) > INT64_MAX:
        return f"{value} is out of range: must be a 64-bit integer"
    bounds = value_range(spec)
    if not bounds:
        return None
    bad = (
        ("gt" in bounds and not value > bounds["gt"])
        or ("ge" in bounds and not value >= bounds["ge"])
        or ("lt" in bounds and not value < bounds["lt"])
        or ("le" in bounds and not value <= bounds["le"])
    )
    return f"{value} is out of range: must be {_requirement(bounds)}" if bad else None


_PY = {"int": int, "float": float, "str": str, "bool": bool, "json": str}


def is_typed_flag(spec: FlagSpec) -> bool:
    return spec.dest.startswith(TYPED_PREFIXES) or spec.dest in TYPED_EXTRA or "dflash" in spec.dest


def _annotation(spec: FlagSpec) -> Any:
    if Catalog.is_boolean_switch(spec):
        return Optional[bool]
    base: Any = _PY.get(spec.type or "str", str)
    if spec.converter == "common.human_readable_int":
        base = int | str
    if spec.choices:
        base = Literal[tuple(spec.choices)]
    if spec.nargs in ("+", "*") or isinstance(spec.nargs, int):
        base = list[base]
    return Optional[base]


@functools.lru_cache(maxsize=None)
def typed_flag_model(catalog: Catalog) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for spec in catalog.flags:
        if not is_typed_flag(spec) or spec.deprecated or spec.dest in fields:
            continue
        default = spec.default if isinstance(spec.default, (int, float, str, bool, type(None))) else None
        fields[spec.dest] = (
            _annotation(spec),
            Field(default=default, alias=spec.name, description=spec.help or None, **value_range(spec)),
        )
    return create_model(
        f"SpeculativeFlags_{catalog.version.replace('.', '_')}",
        __config__=ConfigDict(extra="ignore", populate_by_name=True, strict=False),
        **fields,
    )
