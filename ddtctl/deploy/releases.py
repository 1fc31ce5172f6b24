"""The releases a host keeps: which one `rollback` returns to, and `ddtctl releases HOST --prune`.

A release record says what it is (`kind`): a `release` (a deploy), or a `sweep` point that `ddtctl tune`
deployed to measure it. A sweep point is never a rollback target: `rollback` without an id skips it, and
naming one is refused (its profile was a temporary variant; a setting worth keeping goes into the profile and
is deployed as a release). Pruning removes old releases, sweep points first, never the current release nor
the one `rollback` would pick.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from typing import Callable

from ddtctl.argv import mask_argv
from ddtctl.errors import UsageError
from ddtctl.remote.inventory import Host
from ddtctl.remote.protocol import Prune, ReleaseRecord, State, StateReply
from ddtctl.remote.transport import Connection

from .lock import RemoteLock, locked_call

DEFAULT_KEEP = 5  # as deploy's own clean-up (DeployOptions.keep_releases)


def release_summary(r: dict) -> dict:
    """One release as `ddtctl releases` and `status --format json` show it (argv masked)."""
    profile = r.get("profile") or {}
    return {
        "id": r["id"],
        "status": r.get("status"),
        "created": r.get("created_iso"),
        "profile": profile.get("name"),
        "profile_sha256": profile.get("sha256"),
        "payload_hash": r.get("payload_hash"),
        "algorithm": r.get("algorithm"),
        "argv": mask_argv(list(r.get("argv") or [])),
        "port": r.get("port"),
        "kind": r.get("kind") or "release",  # sweep: a point `ddtctl tune` deployed (not a rollback target)
        "tune": r.get("tune"),  # {"run", "point"}: the tune run behind a sweep point or a winner deployed
    }


def rollback_target(
    state: StateReply, release: str | None, where: str, *, allow_sweep: bool = False
) -> ReleaseRecord:
    """The release to roll back to: the one asked for, else the previous healthy one (else the newest healthy
    one that is not current). Sweep points of `ddtctl tune` are skipped, and refused when named (unless
    `allow_sweep`: tune putting its own starting release back, a lock's recovery)."""
    cur = state.state.current
    if release is None:
        ordered = sorted(state.releases, key=lambda r: r.id)
        good = [r.id for r in ordered if r.status == "ok" and r.id != cur and not r.sweep]
        if not good:
            sweeps = any(r.sweep and r.status == "ok" and r.id != cur for r in ordered)
            raise UsageError(
                "no earlier healthy release to roll back to"
                + (" (tune's sweep points are not rollback targets)" if sweeps else ""),
                where=where,
                fix="see `ddtctl releases HOST`",
            )
        release = state.state.previous if state.state.previous in good else good[-1]
    rel = state.release(release)
    if rel is None:
        known = ", ".join(sorted(r.id for r in state.releases if not r.sweep)) or "none"
        raise UsageError(f"no release {release} on the host", where=where, fix=f"known: {known}")
    if rel.sweep and not allow_sweep:
        run = (rel.tune or {}).get("run")
        raise UsageError(
            f"release {release} is a sweep point of `ddtctl tune`"
            + (f" (run {run})" if run else "")
            + ", not a rollback target",
            where=where,
            fix="put its settings into the profile and deploy that (`ddtctl tune ... --write --deploy` does "
            "it for the winner), or roll back to a release `ddtctl releases HOST` lists as kind release",
        )
    return rel


# ------------------------------------------------------------------------------------------------ pruning
@dataclass
class PrunePlan:
    keep: int
    remove: list[ReleaseRecord]  # in the order they go: sweep points, then failed, then the oldest
    kept: list[ReleaseRecord]  # the protected ones included
    protected: dict[str, str]  # release id -> why it stays whatever --keep says (current, rollback target...)

    def to_json(self) -> dict:
        return {
            "keep": self.keep,
            "remove": [release_summary(r.raw) for r in self.remove],
            "kept": [r.id for r in self.kept],
            "protected": self.protected,
        }


def _keep_rank(rel: ReleaseRecord) -> int:
    """The higher, the longer a release is kept: healthy releases, then the others, then sweep points."""
    if rel.sweep:
        return 0
    return 2 if rel.status == "ok" else 1


def prune_plan(state: StateReply, keep: int, where: str) -> PrunePlan:
    """Which releases `--prune --keep N` removes: it keeps N releases, the protected ones (the current
    release, the one `rollback` would pick, the one whose payload is installed, an interrupted deploy's)
    first, then the healthy releases, then the others, then the sweep points, newest first in each."""
    if keep < 0:
        raise UsageError(f"--keep {keep}: give 0 or more", fix=f"e.g. --keep {DEFAULT_KEEP}")
    protected: dict[str, str] = {}

    def protect(rid: str | None, why: str) -> None:
        if rid and state.release(rid) is not None and rid not in protected:
            protected[rid] = why

    protect(state.state.current, "the current release")
    try:
        protect(rollback_target(state, None, where).id, "the release `rollback` returns to")
    except UsageError:
        pass  # none: nothing to protect for it
    protect((state.state.installed_payload or {}).get("release"), "its payload is installed")
    journal = state.journal or {}
    protect(journal.get("release"), "an interrupted deploy's release")
    protect(journal.get("previous"), "the release an interrupted deploy puts back")
    others = sorted(
        (r for r in state.releases if r.id not in protected),
        key=lambda r: (_keep_rank(r), r.id),
        reverse=True,
    )
    room = max(0, keep - len(protected))
    kept = sorted([r for r in state.releases if r.id in protected] + others[:room], key=lambda r: r.id)
    return PrunePlan(keep, others[room:][::-1], kept, protected)


@dataclass
class PruneResult:
    host: str
    plan: PrunePlan
    status: str  # planned (--plan) | nothing (nothing to remove) | aborted (not confirmed) | pruned
    removed: list[str] = field(default_factory=list)
    dropped_objects: int = 0
    lock_findings: list[str] = field(default_factory=list)  # a stale lock taken over, a deploy undone

    def to_json(self) -> dict:
        return {
            "host": self.host,
            "status": self.status,
            **self.plan.to_json(),
            "removed": self.removed,
            "dropped_objects": self.dropped_objects,
            "lock_findings": self.lock_findings,
        }


def prune_releases(
    host: Host,
    *,
    keep: int = DEFAULT_KEEP,
    plan_only: bool = False,
    confirm: Callable[[PrunePlan], bool] | None = None,
    lock_wait_s: float = 0.0,
    trust_new_host: bool = False,
) -> PruneResult:
    """Remove old releases (record and payload dirs) and the store objects left unused, under the deploy
    lock: the plan is made from the state read while holding it, and the agent removes each release at once.
    `plan_only`: read-only, no lock. `confirm` (None = yes) sees the plan before anything is removed."""
    with Connection(host, trust_new_host=trust_new_host).open() as conn:
        if plan_only:
            return PruneResult(
                host.name, prune_plan(conn.call(State(), retry=True), keep, host.name), "planned"
            )
        holder = f"{getpass.getuser()} releases --prune"
        with RemoteLock(conn, holder=holder, wait_s=lock_wait_s) as lock:
            plan = prune_plan(conn.call(State(), retry=True), keep, host.name)
            result = PruneResult(host.name, plan, "nothing", lock_findings=lock.findings())
            if not plan.remove:
                return result
            if confirm is not None and not confirm(plan):
                result.status = "aborted"
                return result
            reply = locked_call(conn, Prune(tuple(r.id for r in plan.remove)))
            result.status, result.removed = "pruned", reply.removed_releases
            result.dropped_objects = reply.dropped_objects
            return result
