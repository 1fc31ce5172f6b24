"""`ddtctl deploy` as an ordered list of stages over one DeployRun.

Each stage is a small function of the run that returns an Outcome: go on, stop with a status (the deploy is
done: planned, unchanged, checked, deployed...), or fail with a status and an error (rejected, rolled back).
`deploy()` runs them in order; whatever happens, the locks are released and the connections closed. Nothing on
a host changes before the plan is confirmed and the deploy lock is held.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, TypeVar

from ddtctl.argv import secret_values
from ddtctl.errors import ExitCode
from ddtctl.remote.facts import HostFacts, gather_facts
from ddtctl.remote.inventory import Host
from ddtctl.remote.protocol import Batch, Gc, Journal, LockHolder, SetStatus, Start
from ddtctl.remote.ship import ShipResult
from ddtctl.remote.transport import Connection
from ddtctl.safeio import write_new

from .events import Event, EventLog, Level, Stage, Status
from .health import HealthResult, check_alive, expected_identity, wait_healthy
from .launch import (
    mark_release,
    restart_previous,
    restore_previous,
    start_order,
    stop_and_install,
    warm_up,
    warmup_argv,
)
from .lock import RemoteLock, locked_call
from .plan import HostPlan, Plan, describe_plan, make_plan_for_host
from .preflight import Check, preflight_checks
from .remote_dryrun import remote_dry_run
from .secrets import mask_strings
from .ship import Survey, describe_shipped, ship_release, survey_host
from .spec import DeploySpec, Target

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class DeployOptions:
    dry_run: bool = False  # stop after the plan (read-only: no lock, nothing shipped)
    check_only: bool = (
        False  # also ship into the store and run SGLang's resolver on the host; install/launch nothing
    )
    restart: bool = False
    trust_new_host: bool = False
    lock_wait_s: float = 0.0
    remote_dry_run: bool = True
    keep_releases: int = 5
    health_interval_s: float = 0.5
    stop_grace_s: float = 20.0
    health_timeout_s: float | None = None  # override the profile's
    warmup_timeout_s: float = 900.0
    confirm: Callable[[Plan], bool] | None = None  # None = yes
    on_event: Callable[[Event], None] | None = None
    # test hook: called after each uploaded file (host, done, total)
    on_ship_progress: Callable[[str, int, int], None] | None = None


@dataclass
class DeployResult:
    status: Status
    spec_name: str
    release: dict[str, str] = field(default_factory=dict)  # host -> release id now serving (or attempted)
    facts: dict[str, HostFacts] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    plan: Plan | None = None
    shipped: dict[str, ShipResult] = field(default_factory=dict)
    dry_run: Any = None  # ddtctl.dryrun.DryRunResult of SGLang's resolver on the host
    health: HealthResult | None = None
    rolled_back_to: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None
    events: list[Event] = field(default_factory=list)
    elapsed_s: float = 0.0
    secrets: set[str] = field(default_factory=set, repr=False)

    @property
    def ok(self) -> bool:
        return Status(self.status).ok

    @property
    def exit_code(self) -> int:
        if self.ok:
            return ExitCode.OK
        return ExitCode.INVALID if self.status == Status.REJECTED else ExitCode.DEPLOY

    def to_json(self) -> dict:
        """Secrets (from the profile's argv/env) are masked everywhere in the report, SGLang's answers
        included."""
        return mask_strings(json.loads(json.dumps(self._json(), default=str)), self.secrets)

    def _json(self) -> dict:
        return {
            "status": str(self.status),
            "profile": self.spec_name,
            "release": self.release,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
            "facts": {k: v.to_json() for k, v in self.facts.items()},
            "checks": [c.to_json() for c in self.checks],
            "plan": self.plan.to_json() if self.plan else None,
            "shipped": {k: v.to_json() for k, v in self.shipped.items()},
            "dry_run": self.dry_run.to_json() if self.dry_run is not None else None,
            "health": self.health.to_json() if self.health else None,
            "rolled_back_to": self.rolled_back_to,
        }


class Next(Enum):
    CONTINUE = "continue"
    STOP = "stop"  # the deploy is done, with a status
    FAIL = "fail"  # the deploy ends with a status and an error


@dataclass(frozen=True)
class Outcome:
    next: Next
    status: Status | None = None
    error: str | None = None


CONTINUE = Outcome(Next.CONTINUE)


def stop(status: Status) -> Outcome:
    return Outcome(Next.STOP, status)


def fail(status: Status, error: str) -> Outcome:
    return Outcome(Next.FAIL, status, error)


@dataclass
class DeployRun:
    """The state one deploy carries from stage to stage."""

    spec: DeploySpec
    targets: list[Target]
    opts: DeployOptions
    emit: EventLog
    result: DeployResult
    conns: dict[str, Connection] = field(default_factory=dict)
    locks: list[RemoteLock] = field(default_factory=list)
    surveys: dict[str, Survey] = field(default_factory=dict)
    plan: Plan | None = None
    log_offsets: dict[str, int] = field(default_factory=dict)  # where each new server's output starts

    @property
    def rank0(self) -> Target:
        return self.targets[0]

    def planned(self) -> list[tuple[Target, HostPlan]]:
        """(target, its HostPlan) in rank order."""
        assert self.plan is not None
        return list(zip(self.targets, self.plan.hosts, strict=True))

    def close(self) -> None:
        for lock in self.locks:
            lock.release()
        for conn in self.conns.values():
            conn.close()


def parallel(fn: Callable[[T], R], items: list[T]) -> list[R]:
    if len(items) == 1:
        return [fn(items[0])]
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(fn, items))


def connect(host: Host, *, trust_new_host: bool = False, emit: EventLog | None = None) -> Connection:
    log = (lambda msg: emit(Stage.SSH, msg, host.name, Level.WARN)) if emit else None
    conn = Connection(host, trust_new_host=trust_new_host, log=log).open()
    if conn.trusted_key and emit:
        emit(
            Stage.FACTS,
            f"trusted new host key {conn.trusted_key} (saved to {host.known_hosts})",
            host.name,
            Level.WARN,
        )
    return conn


# ----------------------------------------------------------------------------------------------- stages
def connect_hosts(run: DeployRun) -> Outcome:
    for t in run.targets:
        run.emit(Stage.FACTS, f"connecting to {t.host.describe()}", t.name)
    opened = parallel(
        lambda t: connect(t.host, trust_new_host=run.opts.trust_new_host, emit=run.emit), run.targets
    )
    run.conns = {t.name: c for t, c in zip(run.targets, opened, strict=True)}
    return CONTINUE


def _describe_facts(f: HostFacts) -> str:
    gpus = f"{len(f.gpus)}x {f.gpu_name}" if f.gpus else f"no GPUs ({f.gpu_error})"
    server = f"running {f.server.get('release')}" if f.server_running and f.server else "not running"
    return (
        f"{f.hostname}: {gpus}, CUDA {f.cuda}, python {f.python_version}, "
        f"sglang {f.sglang_version or 'absent'}, "
        f"{f.disk_free_bytes / 2**30:.0f} GiB free, server {server}"
    )


def gather_host_facts(run: DeployRun) -> Outcome:
    facts = parallel(lambda t: gather_facts(run.conns[t.name], model_paths=run.spec.model_paths), run.targets)
    run.result.facts = {t.name: f for t, f in zip(run.targets, facts, strict=True)}
    for t, f in zip(run.targets, facts, strict=True):
        run.emit(Stage.FACTS, _describe_facts(f), t.name)
    return CONTINUE


def run_preflight(run: DeployRun) -> Outcome:
    for t in run.targets:
        run.result.checks.extend(
            preflight_checks(run.spec, t, run.result.facts[t.name], remote_dry_run=run.opts.remote_dry_run)
        )
    for c in run.result.checks:
        fix = f" (fix: {c.fix})" if c.fix and not c.ok else ""
        level = Level.OK if c.ok else (Level.ERROR if c.blocks else Level.WARN)
        run.emit(Stage.PREFLIGHT, f"{c.name}: {c.message}{fix}", c.host, level)
    errors = [c for c in run.result.checks if c.blocks]
    if errors:
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return fail(Status.REJECTED, f"preflight failed: {errors[0].message}{more}")
    return CONTINUE


def take_locks(run: DeployRun) -> Outcome:
    if run.opts.dry_run:  # the plan is read-only
        return CONTINUE
    holder = f"{getpass.getuser()}@{socket.gethostname()} deploy {run.spec.name}"
    for t in sorted(run.targets, key=lambda t: t.name):  # one order everywhere: no lock-order deadlock

        def on_wait(held: LockHolder, name: str = t.name) -> None:
            run.emit(Stage.LOCK, f"waiting for the deploy lock held by {held.holder}", name, Level.WARN)

        lock = RemoteLock(run.conns[t.name], holder=holder, wait_s=run.opts.lock_wait_s, on_wait=on_wait)
        run.locks.append(lock.acquire())
        for found in lock.findings():
            run.emit(Stage.LOCK, found, t.name, Level.WARN)
        run.emit(Stage.LOCK, "deploy lock taken", t.name)
    return CONTINUE


def make_plan(run: DeployRun) -> Outcome:
    surveys = parallel(lambda t: survey_host(run.conns[t.name], run.spec), run.targets)
    run.surveys = {t.name: s for t, s in zip(run.targets, surveys, strict=True)}
    run.plan = Plan(
        [
            make_plan_for_host(run.spec, t, s.state, s.missing, restart=run.opts.restart)
            for t, s in zip(run.targets, surveys, strict=True)
        ]
    )
    run.result.plan = run.plan
    for hp in run.plan.hosts:
        run.emit(Stage.PLAN, describe_plan(hp), hp.host)
    if run.opts.dry_run:
        return stop(Status.PLANNED)
    if run.plan.unchanged and not run.opts.check_only:
        run.result.release = {hp.host: hp.release_id for hp in run.plan.hosts}
        run.emit(Stage.PLAN, "nothing to do: 0 files to ship, server left running", None, Level.OK)
        return stop(Status.UNCHANGED)
    if run.opts.confirm is not None and not run.opts.check_only and not run.opts.confirm(run.plan):
        run.emit(Stage.PLAN, "aborted: nothing was changed", None, Level.WARN)
        return stop(Status.ABORTED)
    return CONTINUE


def ship_to_hosts(run: DeployRun) -> Outcome:
    """Ship (all hosts in parallel) and materialize the release; nothing is installed yet."""

    def one(pair: tuple[Target, HostPlan]) -> ShipResult:
        t, hp = pair
        return ship_release(
            run.conns[t.name], run.spec, t, hp, run.surveys[t.name], run.opts.on_ship_progress
        )

    shipped = parallel(one, run.planned())
    run.result.shipped = {t.name: s for t, s in zip(run.targets, shipped, strict=True)}
    for t, s in zip(run.targets, shipped, strict=True):
        run.emit(Stage.SHIP, describe_shipped(s), t.name, Level.OK)
    return CONTINUE


def dry_run_on_host(run: DeployRun) -> Outcome:
    """SGLang's resolver on the rank 0 host, payload staged, nothing installed yet."""
    if not run.opts.remote_dry_run:
        return CONTINUE
    rank0, hp0 = run.planned()[0]
    run.emit(Stage.DRY_RUN, "SGLang's resolver on the host, payload staged (not installed)", rank0.name)
    dr = remote_dry_run(run.conns[rank0.name], rank0, hp0.release_id, run.spec, run.result.facts[rank0.name])
    run.result.dry_run = dr
    if not dr.accepted:
        err = dr.error or {}
        for t, hp in run.planned():
            if hp.new_release:
                mark_release(run.conns[t.name], hp.release_id, "rejected", err.get("message"))
        error = f"SGLang rejected the launch on {rank0.name}: {err.get('type')}: {err.get('message')}"
        run.emit(Stage.DRY_RUN, error, rank0.name, Level.ERROR)
        return fail(Status.REJECTED, error)
    run.emit(
        Stage.DRY_RUN, f"accepted ({len(dr.overrides)} value(s) resolved by SGLang)", rank0.name, Level.OK
    )
    return CONTINUE


def warm_up_kernels(run: DeployRun) -> Outcome:
    """The payload's kernels on each host's GPU, before anything running is touched."""
    for t, hp in run.planned():
        argv = warmup_argv(run.spec, t)
        if not argv or not hp.start:
            continue
        shown = "kernel self-test on the GPU" if argv[1:2] == ["-c"] else " ".join(argv)
        run.emit(Stage.WARMUP, f"compiling the payload's kernels ({shown})", t.name)
        w = warm_up(run.conns[t.name], t, hp, argv, run.opts.warmup_timeout_s)
        if not w.ok:
            for line in w.tail.splitlines()[-15:]:
                run.emit(Stage.LOG, line, t.name, Level.LOG)
            mark_release(run.conns[t.name], hp.release_id, "rejected", "warm-up failed")
            error = f"kernel warm-up failed on {t.name} (exit {w.rc}; log {w.log_path})"
            run.emit(Stage.WARMUP, error, t.name, Level.ERROR)
            return fail(Status.REJECTED, error)
        run.emit(
            Stage.WARMUP, f"done in {w.elapsed_s:.1f}s (Triton cache {w.triton_cache})", t.name, Level.OK
        )
    return CONTINUE


def stop_if_staged(run: DeployRun) -> Outcome:
    if run.opts.check_only:
        run.emit(Stage.PLAN, "check only: preflight passed; nothing installed or restarted", None, Level.OK)
        return stop(Status.CHECKED)
    return CONTINUE


def launch_release(run: DeployRun) -> Outcome:
    """Stop the old servers and install the payload everywhere, then start (other ranks first, rank 0
    last)."""
    for t, hp in run.planned():
        stop_and_install(
            run.conns[t.name],
            run.spec,
            t,
            hp,
            run.result.facts[t.name].sglang_root,
            run.opts.stop_grace_s,
            run.emit,
        )
    plans = {t.name: hp for t, hp in run.planned()}
    for t in start_order(run.targets):
        hp = plans[t.name]
        if hp.start:
            started = locked_call(run.conns[t.name], Start(hp.release_id))
            run.log_offsets[t.name] = started.log_offset
            run.emit(
                Stage.LAUNCH,
                f"started release {hp.release_id} (pid {started.pid}, log {started.log_path})",
                t.name,
            )
    return CONTINUE


def check_health(run: DeployRun) -> Outcome:
    """Rank 0 serves HTTP with the resolved arguments; the other ranks stay alive. Failure: roll back."""
    rank0, hp0 = run.planned()[0]
    expected = expected_identity(rank0.launch, run.result.dry_run.resolved if run.result.dry_run else None)
    health = wait_healthy(
        run.conns[rank0.name],
        rank0,
        hp0.release_id,
        timeout_s=run.opts.health_timeout_s or run.spec.health_timeout_s,
        expected=expected,
        emit=run.emit,
        interval_s=run.opts.health_interval_s,
        log_offset=run.log_offsets.get(rank0.name, 0),
    )
    for t in run.targets[1:] if health.ok else []:
        alive = check_alive(run.conns[t.name], t, run.emit)
        if not alive.ok:
            health = HealthResult(
                False, f"{t.name}: {alive.message}", health.elapsed_s, log_tail=alive.log_tail
            )
            break
    run.result.health = health
    if health.ok:
        run.emit(Stage.HEALTH, health.message, rank0.name, Level.OK)
        return CONTINUE
    run.emit(Stage.HEALTH, health.message, rank0.name, Level.ERROR)  # its log was streamed above
    error = f"health check failed on {rank0.name}: {health.message}"
    return fail(Status.ROLLED_BACK if roll_back(run, error) else Status.FAILED, error)


def roll_back(run: DeployRun, error: str) -> bool:
    """Every host back on its previous release (or stopped and uninstalled, with none); True when a previous
    release serves again."""
    for t, hp in run.planned():
        run.result.rolled_back_to[t.name] = restore_previous(
            run.conns[t.name],
            t,
            hp,
            run.result.facts[t.name].sglang_root,
            error,
            run.opts.stop_grace_s,
            run.emit,
        )
    ok = restart_previous(
        run.conns,
        run.targets,
        run.result.rolled_back_to,
        run.surveys[run.rank0.name].state,
        default_timeout_s=run.spec.health_timeout_s,
        interval_s=run.opts.health_interval_s,
        emit=run.emit,
    )
    for t in run.targets:  # rolled back as reported: nothing left for the next lock holder to undo
        locked_call(run.conns[t.name], Journal("end"))
    return ok and any(run.result.rolled_back_to.values())


def record_release(run: DeployRun) -> Outcome:
    for t, hp in run.planned():
        replies = locked_call(
            run.conns[t.name],
            Batch((SetStatus(hp.release_id, "ok", make_current=True), Gc(run.opts.keep_releases))),
        )
        removed = replies[1].removed_releases
        run.emit(
            Stage.RECORD,
            f"release {hp.release_id} recorded as current"
            + (f"; removed {len(removed)} old release(s)" if removed else ""),
            t.name,
            Level.OK,
        )
    return stop(Status.DEPLOYED)


StageFn = Callable[[DeployRun], Outcome]
STAGES: tuple[StageFn, ...] = (
    connect_hosts,
    gather_host_facts,
    run_preflight,
    take_locks,
    make_plan,
    ship_to_hosts,
    dry_run_on_host,
    warm_up_kernels,
    stop_if_staged,
    launch_release,
    check_health,
    record_release,
)


# Test-only hook (tests/remote/test_deploy_faults.py): DDTCTL_TEST_PAUSE_AT=STAGE[:N] pauses the deploy at
# the Nth event of STAGE (`ship:N`: after N uploaded files): it writes DDTCTL_TEST_PAUSE_FILE and waits until
# that file is gone, so a test can kill this process, or the host's sshd, or fill its disk at a known point.
TEST_PAUSE_ENV, TEST_PAUSE_FILE_ENV = "DDTCTL_TEST_PAUSE_AT", "DDTCTL_TEST_PAUSE_FILE"


def _test_pause_hook(opts: DeployOptions) -> DeployOptions:
    at, marker = os.environ.get(TEST_PAUSE_ENV), os.environ.get(TEST_PAUSE_FILE_ENV)
    if not at or not marker:
        return opts
    stage, _, nth = at.partition(":")
    seen = [0]

    def pause(stage_seen: str) -> None:
        if stage_seen != stage:
            return
        seen[0] += 1
        if seen[0] == int(nth or 1):
            write_new(marker, str(os.getpid()))
            while os.path.exists(marker):
                time.sleep(0.02)

    on_event, on_ship = opts.on_event, opts.on_ship_progress

    def event(ev: Event) -> None:
        if on_event:
            on_event(ev)
        if ev.stage != Stage.SHIP:
            pause(str(ev.stage))

    def ship_progress(host: str, done: int, total: int) -> None:
        if on_ship:
            on_ship(host, done, total)
        pause("ship")

    return dataclasses.replace(opts, on_event=event, on_ship_progress=ship_progress)


def deploy(spec: DeploySpec, hosts: list[Host], opts: DeployOptions | None = None) -> DeployResult:
    """Take the hosts from whatever they run to `spec` serving, or leave them as they were."""
    opts = _test_pause_hook(opts or DeployOptions())
    t0 = time.monotonic()
    targets = spec.targets(hosts)
    emit = EventLog(opts.on_event, set().union(*(secret_values(t.argv, t.env) for t in targets)))
    result = DeployResult(status=Status.FAILED, spec_name=spec.name, events=emit.items, secrets=emit.secrets)
    run = DeployRun(spec, targets, opts, emit, result)
    try:
        for stage_fn in STAGES:
            outcome = stage_fn(run)
            if outcome.next is Next.CONTINUE:
                continue
            assert outcome.status is not None
            result.status, result.error = outcome.status, outcome.error
            if outcome.status == Status.DEPLOYED and run.plan is not None:
                result.release = {hp.host: hp.release_id for hp in run.plan.hosts}
            break
        return result
    finally:
        run.close()
        result.elapsed_s = time.monotonic() - t0
