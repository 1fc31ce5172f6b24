"""Health: poll the new server until it answers /health and serves the arguments that were resolved for it.

`expected_identity` and `identity_mismatches` are plain data in, decisions out: what must match, and what
differs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ddtctl.remote.protocol import Probe
from ddtctl.remote.transport import Connection
from ddtctl.server_argv import TypedLaunch

from .events import EventLog, Level, Stage
from .secrets import mask_info
from .spec import Target

# Served fields that must equal what was resolved (the identity of the launch).
IDENTITY_FIELDS = ("speculative_algorithm", "tp_size", "pp_size", "dp_size", "nnodes", "node_rank")
DDTREE_PREFIX = "speculative_ddtree_"
LOG_TAIL_LINES = 50
MAX_POLL_INTERVAL_S = 5.0


@dataclass
class HealthResult:
    ok: bool
    message: str
    elapsed_s: float
    server_info: dict | None = None
    mismatches: list[tuple[str, Any, Any]] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = self.__dict__.copy()
        d["server_info"] = mask_info(self.server_info)
        return d


def expected_identity(launch: TypedLaunch, resolved: dict | None) -> dict[str, Any]:
    """The served values that must match: algorithm, tp/pp/dp, multi-node rank, every DDTREE knob. SGLang's
    resolved value (from the remote dry-run) wins over the launch's."""
    flags = dict(launch.values)  # dest -> value as SGLang types it (`--tp 2` is tp_size 2)
    for key, value in launch.flags().items():  # a recorded release's DDTREE knobs of a newer payload
        dest = key.replace("-", "_")
        if dest.startswith(DDTREE_PREFIX) and dest not in flags:
            flags[dest] = value
    out: dict[str, Any] = {}
    for key in IDENTITY_FIELDS:
        if resolved and key in resolved and resolved[key] is not None:
            out[key] = resolved[key]
        elif key in flags:
            out[key] = flags[key]
    for key, value in flags.items():
        if key.startswith(DDTREE_PREFIX):
            out[key] = resolved.get(key, value) if resolved else value
    return out


def same_value(served: Any, expected: Any) -> bool:
    """Served and expected agree, across the forms they come in: "4" and 4, "true" and True, "ddtree" and
    "DDTREE"."""
    if isinstance(served, bool) or isinstance(expected, bool):
        if isinstance(expected, bool) and expected:
            return str(served).lower() in ("true", "1")
        return str(served).lower() == str(expected).lower()
    try:
        return float(served) == float(expected)
    except (TypeError, ValueError):
        return str(served).upper() == str(expected).upper()


def identity_mismatches(expected: dict[str, Any], served: dict) -> list[tuple[str, Any, Any]]:
    """(field, expected, served) for each expected value the server does not serve; a DDTREE knob the server
    does not report at all is a mismatch too (a server without the DDTREE payload)."""
    out = [
        (k, v, served.get(k)) for k, v in expected.items() if k in served and not same_value(served.get(k), v)
    ]
    out += [(k, v, None) for k, v in expected.items() if k not in served and k.startswith(DDTREE_PREFIX)]
    return out


def judge_served(expected: dict[str, Any], info: dict, elapsed: float, tail: list[str]) -> HealthResult:
    mism = identity_mismatches(expected, info)
    if mism:
        what = ", ".join(f"{k}: served {s!r}, expected {e!r}" for k, e, s in mism)
        return HealthResult(
            False, f"served args differ from the resolved ones ({what})", elapsed, info, mism, tail
        )
    return HealthResult(True, f"healthy after {elapsed:.1f}s; served args match", elapsed, info, [], tail)


def wait_healthy(
    conn: Connection,
    target: Target,
    release_id: str,
    *,
    timeout_s: float,
    expected: dict[str, Any],
    emit: EventLog,
    interval_s: float = 0.5,
    log_offset: int = 0,
) -> HealthResult:
    """Poll /health then /get_server_info (from the host itself) until ready or timeout; stream the log
    meanwhile (from log_offset: where this start's output begins)."""
    start = time.monotonic()
    offset = log_offset
    tail: list[str] = []
    last_state = None
    wait = interval_s
    while True:
        p = conn.call(Probe(target.port, target.probe_host, offset, release_id), retry=True)
        offset = p.log.log_offset
        for line in p.log.log.splitlines():
            tail.append(emit.mask(line))
            emit(Stage.LOG, line, target.name, Level.LOG)
        tail = tail[-LOG_TAIL_LINES:]
        elapsed = time.monotonic() - start
        if not p.running:
            return HealthResult(False, "the server process exited", elapsed, log_tail=tail)
        state = f"/health {p.health}" if p.health else f"not listening yet ({p.health_error or 'no answer'})"
        if state != last_state:
            emit(Stage.HEALTH, f"{state} after {elapsed:.1f}s", target.name)
            last_state = state
        if p.health == 200 and p.server_info is not None:
            return judge_served(expected, p.server_info, elapsed, tail)
        if elapsed >= timeout_s:
            return HealthResult(False, f"not healthy after {timeout_s:g}s ({state})", elapsed, log_tail=tail)
        time.sleep(min(wait, max(0.0, timeout_s - elapsed)))
        wait = min(wait * 1.5, MAX_POLL_INTERVAL_S)


def check_alive(conn: Connection, target: Target, emit: EventLog) -> HealthResult:
    """A rank other than 0 serves no HTTP: it must just be running."""
    p = conn.call(Probe(target.port, server_info=False, lines=20), retry=True)
    if p.running:
        return HealthResult(True, f"rank {target.rank} running (pid {p.pid})", 0.0)
    return HealthResult(False, f"rank {target.rank} exited", 0.0, log_tail=emit.mask(p.log.log).splitlines())
