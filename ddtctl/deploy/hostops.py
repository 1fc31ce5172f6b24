"""Operations on one host outside a deploy: facts, status, releases, logs, stop, rollback."""

from __future__ import annotations

import getpass
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ddtctl.argv import secret_values
from ddtctl.remote.facts import HostFacts, gather_facts
from ddtctl.remote.inventory import Host, Inventory, load_inventory, resolve_host
from ddtctl.remote.protocol import (
    Install,
    Journal,
    Logs,
    Probe,
    ReleaseRecord,
    SetStatus,
    Start,
    State,
    StateReply,
    Stop,
    Uninstall,
)
from ddtctl.remote.transport import Connection

from .events import Event, EventLog, Level, Stage
from .health import HealthResult, expected_identity, wait_healthy
from .launch import INSTALL_TIMEOUT_S, STOP_TIMEOUT_EXTRA_S, target_from_release
from .lock import RemoteLock, locked_call
from .releases import release_summary, rollback_target
from .secrets import mask_info

DEFAULT_ROLLBACK_HEALTH_TIMEOUT_S = 600.0
LOG_FOLLOW_POLL_S = 0.5


@dataclass
class HostStatus:
    host: str
    current: str | None
    previous: str | None
    server: dict | None  # the server's pid file as the agent reports it (running: bool added)
    health: int | None
    server_info: dict | None
    installed_payload: dict | None
    releases: list[dict]
    lock: dict | None = None  # who holds the deploy lock; `stale`: its holder died holding it
    interrupted: dict | None = None  # a deploy that changed the server and died: release, previous, holder

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["server"] = mask_info(self.server)
        d["server_info"] = mask_info(self.server_info)
        d["releases"] = [release_summary(r) for r in self.releases]
        return d


def _open(host: Host, trust_new_host: bool = False) -> Connection:
    return Connection(host, trust_new_host=trust_new_host).open()


def host_facts(
    host: Host, *, model_paths: list[str] | None = None, trust_new_host: bool = False
) -> HostFacts:
    with _open(host, trust_new_host) as conn:
        return gather_facts(conn, model_paths=list(model_paths or []))


def host_status(host: Host, *, trust_new_host: bool = False, probe: bool = True) -> HostStatus:
    """State, releases and server process of HOST; with `probe`, also the server's /health and
    /get_server_info."""
    with _open(host, trust_new_host) as conn:
        st = conn.call(State(), retry=True)
        server = st.server
        health = info = None
        if probe and server and server.running and server.port:
            p = conn.call(Probe(server.port, lines=0), retry=True)
            health, info = p.health, p.server_info
        return HostStatus(
            host.name,
            st.state.current,
            st.state.previous,
            server.raw if server else None,
            health,
            info,
            st.state.installed_payload,
            [r.raw for r in st.releases],
            st.lock,
            interrupted_deploy(st),
        )


def interrupted_deploy(st: StateReply) -> dict | None:
    """The host's deploy journal when its deploy is not running any more (its lock is free, stale, or held by
    another session): the next deploy, rollback or stop puts `previous` back."""
    j, lock = st.journal, st.lock
    if j is None or (lock and not lock.get("stale") and lock.get("session") == j.get("session")):
        return None
    keys = ("release", "previous", "holder", "since")
    return {k: j.get(k) for k in keys}


def host_releases(host: Host, *, trust_new_host: bool = False) -> list[dict]:
    return host_status(host, trust_new_host=trust_new_host, probe=False).releases


@dataclass
class LogsResult:
    host: str
    path: str
    text: str
    offset: int


def _release_secrets(state: StateReply) -> set[str]:
    """Every secret of every release on the host: the server prints its argv (--api-key ...) and may print its
    env (issue #14: `ddtctl logs` printed them)."""
    out: set[str] = set()
    for rel in state.releases:
        out |= secret_values(rel.argv, rel.env)
    return out


def host_logs(
    host: Host,
    *,
    lines: int = 100,
    release: str | None = None,
    follow: bool = False,
    on_text: Callable[[str], None] | None = None,
    follow_for_s: float | None = None,
    trust_new_host: bool = False,
) -> LogsResult:
    """The server log's last lines; with follow, keep streaming new bytes to on_text until interrupted (or for
    follow_for_s seconds)."""

    def show(chunk: str) -> str:
        if on_text and chunk:
            on_text(chunk)
        return chunk

    with _open(host, trust_new_host) as conn:
        mask = EventLog(None, _release_secrets(conn.call(State(), retry=True)))
        r = conn.call(Logs(lines=lines, log_release=release), retry=True)
        text = mask.mask(r.log)
        show(text + "\n" if text else "")
        pending = ""  # a partial last line waits for its end: a secret split across two reads is still masked
        start = time.monotonic()
        while follow and (follow_for_s is None or time.monotonic() - start < follow_for_s):
            time.sleep(LOG_FOLLOW_POLL_S)
            r = conn.call(Logs(log_offset=r.log_offset, log_release=release), retry=True)
            if not r.log:
                continue
            head, nl, pending = (pending + r.log).rpartition("\n")
            if nl:
                text += show(mask.mask(head + nl))
        if pending:
            text += show(mask.mask(pending))
        return LogsResult(host.name, r.log_path, text, r.log_offset)


@dataclass
class StopResult:
    host: str
    was_running: bool
    release: str | None
    forced: bool
    lock_findings: list[str] = field(default_factory=list)  # a stale lock taken over, a deploy undone

    def to_json(self) -> dict:
        return self.__dict__.copy()


def stop_server(
    host: Host, *, grace_s: float = 20.0, lock_wait_s: float = 0.0, trust_new_host: bool = False
) -> StopResult:
    with (
        _open(host, trust_new_host) as conn,
        RemoteLock(conn, holder=f"{getpass.getuser()} stop", wait_s=lock_wait_s) as lock,
    ):
        r = locked_call(conn, Stop(grace_s), timeout=grace_s + STOP_TIMEOUT_EXTRA_S)
        return StopResult(host.name, r.was_running, r.release, r.forced, lock.findings())


@dataclass
class RollbackResult:
    host: str
    from_release: str | None
    to_release: str
    health: HealthResult
    events: list[Event] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.health.ok

    def to_json(self) -> dict:
        return {
            "host": self.host,
            "from": self.from_release,
            "to": self.to_release,
            "health": self.health.to_json(),
        }


def rollback(
    host: Host,
    release: str | None = None,
    *,
    lock_wait_s: float = 0.0,
    stop_grace_s: float = 20.0,
    health_timeout_s: float | None = None,
    on_event: Callable[[Event], None] | None = None,
    trust_new_host: bool = False,
    allow_sweep: bool = False,
) -> RollbackResult:
    """Make an earlier release current again: reinstall its payload, restart its server, wait for health.
    `allow_sweep`: `release` may be a sweep point of `ddtctl tune` (tune putting its starting release
    back)."""
    emit = EventLog(on_event)
    holder = f"{getpass.getuser()} rollback"
    with _open(host, trust_new_host) as conn, RemoteLock(conn, holder=holder, wait_s=lock_wait_s) as lock:
        for found in lock.findings():
            emit(Stage.LOCK, found, host.name, Level.WARN)
        st = conn.call(State())
        undone = lock.recovered
        if release is None and undone is not None and undone.previous:
            # the lock's take-over already undid an interrupted deploy: that was the rollback asked for
            rel = rollback_target(st, undone.previous, host.name, allow_sweep=True)
            emit.secrets |= secret_values(rel.argv, rel.env)
            h = _wait_restored(conn, host, rel, health_timeout_s, emit, started_offset=None)
            return RollbackResult(host.name, undone.release, rel.id, h, emit.items)
        cur = st.state.current
        rel = rollback_target(st, release, host.name, allow_sweep=allow_sweep)
        emit.secrets |= secret_values(rel.argv, rel.env)
        facts = gather_facts(conn, cache=False)
        emit(Stage.ROLLBACK, f"{cur} -> {rel.id}", host.name)
        locked_call(conn, Journal("begin", rel.id, cur, facts.sglang_root))
        locked_call(conn, Stop(stop_grace_s), timeout=stop_grace_s + STOP_TIMEOUT_EXTRA_S)
        if rel.payload_hash:
            locked_call(conn, Install(rel.id, facts.sglang_root), timeout=INSTALL_TIMEOUT_S)
        else:
            locked_call(conn, Uninstall(facts.sglang_root), timeout=INSTALL_TIMEOUT_S)
        started = locked_call(conn, Start(rel.id))
        h = _wait_restored(conn, host, rel, health_timeout_s, emit, started_offset=started.log_offset)
        if h.ok:  # also ends the journal
            locked_call(conn, SetStatus(rel.id, "ok", make_current=True, note=f"rollback from {cur}"))
        else:  # reported as it is: nothing for the next lock holder to undo
            locked_call(conn, Journal("end"))
        return RollbackResult(host.name, cur, rel.id, h, emit.items)


def _wait_restored(
    conn: Connection,
    host: Host,
    rel: ReleaseRecord,
    health_timeout_s: float | None,
    emit: EventLog,
    *,
    started_offset: int | None,
) -> HealthResult:
    target = target_from_release(host, rel)
    return wait_healthy(
        conn,
        target,
        rel.id,
        timeout_s=health_timeout_s or rel.health_timeout_s or DEFAULT_ROLLBACK_HEALTH_TIMEOUT_S,
        expected=expected_identity(target.launch, None),
        emit=emit,
        log_offset=started_offset or 0,
    )


# ------------------------------------------------------------------------------------------ inventory helper
def host_by_name(name: str, inventory: str | None = None) -> Host:
    inv: Inventory = load_inventory(inventory)
    return resolve_host(name, inv)


def iter_hosts(names: list[str], inventory: str | None = None) -> Iterator[Host]:
    inv = load_inventory(inventory)
    for n in names:
        yield resolve_host(n, inv)
