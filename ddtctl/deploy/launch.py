"""Launch: warm the payload's kernels, stop the old server, install the payload, start the new server; and the
way back (rollback to the previous release after a failed health check)."""

from __future__ import annotations

from ddtctl.remote.inventory import Host
from ddtctl.remote.protocol import (
    Batch,
    Install,
    Journal,
    ReleaseRecord,
    Request,
    SetStatus,
    Start,
    StateReply,
    Stop,
    StopReply,
    Uninstall,
    Warmup,
    WarmupReply,
)
from ddtctl.remote.transport import Connection
from ddtctl.server_argv import read_launch

from .events import EventLog, Level, Stage
from .health import expected_identity, wait_healthy
from .lock import locked_call
from .plan import HostPlan
from .spec import DeploySpec, Target

KERNEL_SELFTEST = "files/ddtree_sglang/kernels/selftest.py"
INSTALL_TIMEOUT_S = 600
STOP_TIMEOUT_EXTRA_S = 30  # on top of the grace period: the SIGKILL wait and the round trip

# The payload's Triton kernels against their exact reference at server sizes on the host's GPU: this compiles
# them into TRITON_CACHE_DIR (shared with the server) and refuses a GPU/driver on which they are wrong.
KERNEL_WARMUP = """\
import sys
from ddtree_sglang.kernels.selftest import selftest
r = selftest(device="cuda")
for c in r.checks:
    print("ok  " if c.ok else "FAIL", c.name, c.detail)
print("kernel selftest", "ok" if r.ok else "FAILED", "in %.1fs" % r.seconds)
sys.exit(0 if r.ok else 1)
"""


def warmup_argv(spec: DeploySpec, t: Target) -> list[str] | None:
    """The host's `warmup:` command, or (by default) the payload's kernel self-test if the payload has one."""
    explicit = t.host.warmup_argv()
    if explicit is not None:
        return explicit or None
    if spec.payload is not None and KERNEL_SELFTEST in spec.payload.files:
        return [t.host.python, "-c", KERNEL_WARMUP]
    return None


def warm_up(conn: Connection, t: Target, hp: HostPlan, argv: list[str], timeout_s: float) -> WarmupReply:
    return locked_call(
        conn, Warmup(hp.release_id, tuple(argv), timeout_s), timeout=timeout_s + STOP_TIMEOUT_EXTRA_S
    )


def mark_release(conn: Connection, release_id: str, status: str, note: str | None = None) -> None:
    locked_call(conn, SetStatus(release_id, status, note=note))


def stop_and_install(
    conn: Connection,
    spec: DeploySpec,
    t: Target,
    hp: HostPlan,
    sglang_root: str | None,
    grace_s: float,
    emit: EventLog,
) -> None:
    """Stop the running server and (un)install the payload in one round trip (the new one starts later). The
    journal goes first: if this deploy dies before its release is recorded, the next lock holder puts the
    current release back."""
    previous = hp.current_release if hp.current_release != hp.release_id else None
    ops: list[Request] = [Journal("begin", hp.release_id, previous, sglang_root)]
    if hp.stop:
        ops.append(Stop(grace_s))
    if hp.install or hp.uninstall:
        ops.append(Install(hp.release_id, sglang_root))
    replies = locked_call(conn, Batch(tuple(ops)), timeout=grace_s + INSTALL_TIMEOUT_S + STOP_TIMEOUT_EXTRA_S)
    for reply in replies[1:]:
        if isinstance(reply, StopReply):
            if reply.was_running:
                forced = ", forced with SIGKILL" if reply.forced else ""
                emit(Stage.LAUNCH, f"stopped release {reply.release} (pid {reply.pid}{forced})", t.name)
        else:
            done = f"payload installed into {sglang_root}" if spec.payload else "payload uninstalled"
            emit(Stage.INSTALL, done, t.name, Level.OK)


def start_order(targets: list[Target]) -> list[Target]:
    """Other ranks first, rank 0 (the one serving HTTP) last."""
    return sorted(targets, key=lambda t: -t.rank)


def target_from_release(host: Host, rel: ReleaseRecord) -> Target:
    """A recorded release as a target: its argv comes from the host, read by the one reader (read_launch)."""
    launch = read_launch(rel.argv, env=rel.env)
    return Target(host, rel.rank, rel.nnodes, launch, rel.launch_argv, rel.env, rel.port, rel.probe_host)


def restore_previous(
    conn: Connection,
    t: Target,
    hp: HostPlan,
    sglang_root: str | None,
    error: str | None,
    grace_s: float,
    emit: EventLog,
) -> str | None:
    """Stop the failed release, mark it failed, reinstall the previous release's payload (or uninstall, with
    none). Returns the previous release id (not started yet)."""
    locked_call(conn, Stop(grace_s), timeout=grace_s + STOP_TIMEOUT_EXTRA_S)
    mark_release(conn, hp.release_id, "failed", error)
    prev = hp.current_release if hp.current_release != hp.release_id else None
    if prev:
        emit(Stage.ROLLBACK, f"restoring release {prev}", t.name, Level.WARN)
        locked_call(conn, Install(prev, sglang_root), timeout=INSTALL_TIMEOUT_S)
    else:
        emit(Stage.ROLLBACK, "no previous release: server stopped, payload uninstalled", t.name, Level.WARN)
        locked_call(conn, Uninstall(sglang_root), timeout=INSTALL_TIMEOUT_S)
    return prev


def restart_previous(
    conns: dict[str, Connection],
    targets: list[Target],
    rolled_back_to: dict[str, str | None],
    rank0_state: StateReply,
    *,
    default_timeout_s: float,
    interval_s: float,
    emit: EventLog,
) -> bool:
    """Start the previous releases again (other ranks first) and wait for rank 0's to be healthy."""
    offsets = {}
    for t in start_order(targets):
        prev = rolled_back_to.get(t.name)
        if prev:
            offsets[t.name] = locked_call(conns[t.name], Start(prev)).log_offset
    rank0 = targets[0]
    prev0 = rolled_back_to.get(rank0.name)
    if not prev0:
        return True
    rel = rank0_state.release(prev0)
    if rel is None:
        emit(Stage.ROLLBACK, f"release {prev0} is not on the host any more", rank0.name, Level.ERROR)
        return False
    restored = target_from_release(rank0.host, rel)
    h = wait_healthy(
        conns[rank0.name],
        restored,
        prev0,
        timeout_s=rel.health_timeout_s or default_timeout_s,
        expected=expected_identity(restored.launch, None),
        emit=emit,
        interval_s=interval_s,
        log_offset=offsets.get(rank0.name, 0),
    )
    emit(Stage.ROLLBACK, f"release {prev0}: {h.message}", rank0.name, Level.OK if h.ok else Level.ERROR)
    return h.ok
