"""The plan: per host, which release, what to ship, whether to stop, install, uninstall, start. Plain data in
(the spec, the target, the host's state and the store's missing objects), a HostPlan out; nothing here touches
a host."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from ddtctl.argv import MASK, is_secret_flag, mask_argv, mask_env, parse_launch_argv
from ddtctl.remote.protocol import SWEEP, StateReply
from ddtctl.server_argv import TypedLaunch

from .spec import DeploySpec, Target

ARGV_DIFF_SHOWN = 8


@dataclass
class HostPlan:
    host: str
    rank: int
    release_id: str
    fingerprint: str
    current_release: str | None
    current_running: bool
    files_total: int
    files_to_ship: list[str]
    bytes_to_ship: int
    install: bool
    uninstall: bool
    stop: bool
    start: bool
    argv_diff: list[tuple[str, Any, Any]]
    env: dict[str, str]
    launch_argv: list[str]
    reason: str

    @property
    def unchanged(self) -> bool:
        return not (self.files_to_ship or self.install or self.uninstall or self.stop or self.start)

    @property
    def new_release(self) -> bool:
        return self.release_id != self.current_release

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["env"] = mask_env(self.env)
        d["launch_argv"] = mask_argv(self.launch_argv)
        d["argv_diff"] = [
            (k, MASK if is_secret_flag(k) else o, MASK if is_secret_flag(k) else n)
            for k, o, n in self.argv_diff
        ]
        d["unchanged"] = self.unchanged
        return d


@dataclass
class Plan:
    hosts: list[HostPlan]

    @property
    def unchanged(self) -> bool:
        return all(h.unchanged for h in self.hosts)

    def to_json(self) -> dict:
        return {"unchanged": self.unchanged, "hosts": [h.to_json() for h in self.hosts]}


def release_fingerprint(spec: DeploySpec, target: Target) -> str:
    data = {
        "launch_argv": target.launch_argv,
        "env": target.env,
        "payload": spec.payload.digest
        if spec.payload
        else None,  # what runs; the tools (installer, resolver)
        "port": target.port,  # do not change a running release
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def argv_diff(old: list[str] | None, new: TypedLaunch) -> list[tuple[str, Any, Any]]:
    """(flag, old value, new value) for each flag whose value changed, new flags first: the host's recorded
    argv (from outside: read by the one reader) against the launch (its values as written)."""
    a = parse_launch_argv(old or [], config=False).flags()
    b = new.flags()
    return [(k, a.get(k), b.get(k)) for k in list(dict.fromkeys([*b, *a])) if a.get(k) != b.get(k)]


def new_release_id(fingerprint: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"{stamp}-{fingerprint[:8]}"


def make_plan_for_host(
    spec: DeploySpec, target: Target, state: StateReply, missing: set[str], *, restart: bool
) -> HostPlan:
    fp = release_fingerprint(spec, target)
    current = state.state.current
    cur_rel = state.release(current) if current else None
    server = state.server
    running = bool(server and server.running)
    # the same launch as the current release; a sweep point of `ddtctl tune` is never taken for a release: a
    # deploy of the same launch records its own (and restarts the server under it)
    same = bool(cur_rel and cur_rel.fingerprint == fp and not (cur_rel.sweep and spec.kind != SWEEP))
    manifests = spec.manifests
    to_ship = sorted({rel for m in manifests for rel, e in m.files.items() if e.sha256 in missing})
    nbytes = sum(e.size for m in manifests for e in m.files.values() if e.sha256 in missing)
    total = sum(len(m.files) for m in manifests)
    want_payload = spec.payload.digest if spec.payload else None
    install = want_payload is not None and want_payload != state.state.installed_hash
    uninstall = want_payload is None and state.state.installed_hash is not None
    if same and running and server is not None and server.release == current and not restart:
        release_id, stop, start, reason = current, False, False, "no change: the same release is running"
        install = uninstall = False
        to_ship, nbytes = [], 0  # newer tools alone are no reason to touch a running release
    elif same and not restart:
        release_id, stop, start, reason = current, running, True, "same release, server not running: start it"
    else:
        release_id = new_release_id(fp)
        stop, start = running, True
        reason = (
            "restart requested"
            if (same and restart)
            else ("first deploy" if not current else "release changed")
        )
        if cur_rel is not None and cur_rel.sweep and cur_rel.fingerprint == fp:
            reason = f"the launch of tune's sweep point {current}, recorded as a release of its own"
    assert release_id is not None
    return HostPlan(
        host=target.name,
        rank=target.rank,
        release_id=release_id,
        fingerprint=fp,
        current_release=current,
        current_running=running,
        files_total=total,
        files_to_ship=to_ship,
        bytes_to_ship=nbytes,
        install=install,
        uninstall=uninstall,
        stop=stop,
        start=start,
        argv_diff=[] if (same or cur_rel is None) else argv_diff(cur_rel.argv, target.launch),
        env=target.env,
        launch_argv=target.launch_argv,
        reason=reason,
    )


def describe_plan(hp: HostPlan) -> str:
    """One line per host, as the plan event shows it (secret values never: only that they changed)."""
    if hp.unchanged:
        return f"{hp.reason}; release {hp.release_id}; 0/{hp.files_total} files to ship"
    parts = [
        hp.reason,
        f"release {hp.release_id}",
        f"ship {len(hp.files_to_ship)}/{hp.files_total} files ({hp.bytes_to_ship} bytes), "
        f"{hp.files_total - len(hp.files_to_ship)} unchanged by sha256",
    ]
    if hp.install:
        parts.append("install payload")
    if hp.uninstall:
        parts.append("uninstall payload")
    if hp.stop:
        parts.append(f"stop {hp.current_release}")
    if hp.start:
        parts.append("start server")
    if hp.argv_diff:
        parts.append(
            "argv: "
            + ", ".join(
                f"--{k} changed" if is_secret_flag(k) else f"--{k} {o!r} -> {n!r}"
                for k, o, n in hp.argv_diff[:ARGV_DIFF_SHOWN]
            )
        )
    return "; ".join(parts)
