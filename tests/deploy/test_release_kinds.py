"""Sweep points of `ddtctl tune` in a host's releases, from plain data (no SSH): never a rollback target, pruned
first, never taken for a release by a deploy of the same launch; and the agent's side (its `prune` and `gc`), run
in-process under a held lock."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
from deploy_data import spec, target

from ddtctl.deploy import make_plan_for_host, prune_plan, release_fingerprint, rollback_target
from ddtctl.errors import UsageError
from ddtctl.remote.protocol import StateReply

AGENT = Path(__file__).resolve().parents[2] / "ddtctl" / "remote" / "agent.py"


def _rel(rid: str, kind: str = "release", status: str = "ok", **kw) -> dict:
    rec = {"id": rid, "status": status, "kind": kind, "argv": ["--model-path", "/m"], **kw}
    if kind == "sweep":
        rec["tune"] = {"run": "RUN1", "point": f"budget={rid}"}
    return rec


def _state(releases: list[dict], current: str | None, previous: str | None = None, **kw) -> StateReply:
    return StateReply.from_json(
        {
            "state": {"current": current, "previous": previous, "installed_payload": kw.get("installed")},
            "releases": releases,
            "server": None,
            "journal": kw.get("journal"),
        }
    )


# what tune leaves: the starting release r4 current again, the last sweep point r3 its `previous`
HOST = [_rel("r0", status="failed"), _rel("r1"), _rel("r2", "sweep"), _rel("r3", "sweep"), _rel("r4")]


def test_rollback_skips_sweep_points_and_refuses_one_by_name():
    st = _state(HOST, "r4", previous="r3")
    assert rollback_target(st, None, "gpu1").id == "r1"  # not r3, the previous: a sweep point
    with pytest.raises(UsageError) as err:
        rollback_target(st, "r3", "gpu1")
    assert err.value.message == "release r3 is a sweep point of `ddtctl tune` (run RUN1), not a rollback target"
    assert "--write --deploy" in err.value.fix and "\n" not in err.value.one_line()
    assert rollback_target(st, "r3", "gpu1", allow_sweep=True).id == "r3"  # tune restoring where it started
    assert rollback_target(st, "r1", "gpu1").id == "r1"
    # nothing but sweep points behind the current release: none to roll back to, and why
    only = _state([_rel("r2", "sweep"), _rel("r4")], "r4", previous="r2")
    with pytest.raises(UsageError, match=r"no earlier healthy release .*sweep points are not rollback targets"):
        rollback_target(only, None, "gpu1")


def test_a_record_from_before_kinds_is_a_release():
    old = {"id": "r1", "status": "ok", "argv": []}
    st = _state([old, _rel("r2")], "r2")
    assert st.release("r1").kind == "release" and not st.release("r1").sweep
    assert rollback_target(st, None, "gpu1").id == "r1"


def test_prune_removes_sweep_points_first_and_never_the_current_or_rollback_release():
    st = _state(HOST, "r4", previous="r3")
    plan = prune_plan(st, 2, "gpu1")
    assert [r.id for r in plan.remove] == ["r2", "r3", "r0"]  # sweep points (oldest first), then the failed one
    assert plan.protected == {"r4": "the current release", "r1": "the release `rollback` returns to"}
    assert [r.id for r in plan.kept] == ["r1", "r4"]
    assert [r.id for r in prune_plan(st, 3, "gpu1").remove] == ["r2", "r3"]  # room for one more: the failed one
    assert [r.id for r in prune_plan(st, 4, "gpu1").remove] == ["r2"]  # then the newest sweep point
    assert prune_plan(st, 0, "gpu1").remove == plan.remove  # the protected ones stay whatever --keep says
    assert prune_plan(st, 5, "gpu1").remove == []
    # an installed payload's release and an interrupted deploy's releases stay too
    guarded = _state(HOST, "r4", previous="r3", installed={"hash": "h", "release": "r0"},
                     journal={"release": "r3", "previous": "r2"})
    assert prune_plan(guarded, 0, "gpu1").remove == []
    with pytest.raises(UsageError, match="--keep -1: give 0 or more"):
        prune_plan(st, -1, "gpu1")


def _record(s, t, release_id: str, **kw) -> dict:
    return {"id": release_id, "fingerprint": release_fingerprint(s, t), "argv": t.argv, "status": "ok", **kw}


def test_a_deploy_of_a_sweep_points_launch_records_a_release_of_its_own():
    s = spec()
    t = target(s)
    running = {"running": True, "release": "r3", "pid": 7}
    swept = _state([_record(s, t, "r3", kind="sweep")], "r3")
    swept.server = StateReply.from_json({"state": {}, "releases": [], "server": running}).server
    hp = make_plan_for_host(s, t, swept, set(), restart=False)
    assert hp.release_id != "r3" and hp.stop and hp.start
    assert hp.reason == "the launch of tune's sweep point r3, recorded as a release of its own"
    # a sweep point of the same launch as the release serving is measured on that release (nothing restarts)
    s.kind = "sweep"
    served = _state([_record(s, t, "r1")], "r1")
    served.server = swept.server
    served.server.release = "r1"
    hp = make_plan_for_host(s, t, served, set(), restart=False)
    assert hp.release_id == "r1" and hp.unchanged


# -- the agent's side ------------------------------------------------------------------------------------------
@pytest.fixture
def agent(tmp_path):
    loaded = importlib.util.spec_from_file_location("ddtctl_agent_releases", AGENT)
    mod = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(mod)
    mod.W = str(tmp_path / "w")
    return mod


def _hold_lock(agent, token: str) -> int:
    """The deploy lock as the lock agent takes it (tests/remote/test_inventory.py does the same)."""
    import fcntl
    import os

    Path(agent.W).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(agent.W) / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    start = agent._proc_starttime(os.getpid())[0]
    (Path(agent.W) / "lock.json").write_text(json.dumps({"token": token, "pid": os.getpid(), "starttime": start}))
    return fd


def _host_dir(agent, releases: list[dict], current: str, previous: str | None = None) -> Path:
    """A work dir as deploys leave it: each release with one store object of its own."""
    w = Path(agent.W)
    for rel in releases:
        blob = f"payload of {rel['id']}".encode()
        sha = hashlib.sha256(blob).hexdigest()
        (w / "store").mkdir(parents=True, exist_ok=True)
        (w / "store" / sha).write_bytes(blob)
        d = w / "releases" / rel["id"]
        d.mkdir(parents=True)
        (d / "release.json").write_text(json.dumps(dict(rel, payload={"files": {"a.py": {"sha256": sha}}})))
    (w / "state.json").write_text(json.dumps({"current": current, "previous": previous, "history": []}))
    return w


def test_agent_prune_removes_whole_releases_and_refuses_the_current_one(agent):
    import os

    fd = _hold_lock(agent, "t")
    w = _host_dir(agent, HOST, "r4", previous="r3")
    with pytest.raises(agent.AgentError, match="refusing to remove release r4: it is the current release"):
        agent.op_prune({"ids": ["r2", "r4"], "lock_token": "t"})
    assert (w / "releases" / "r2").is_dir()  # refused before anything was removed
    with pytest.raises(agent.AgentError, match="lock is not held"):
        agent.op_prune({"ids": ["r2"], "lock_token": "other"})
    out = agent.op_prune({"ids": ["r2", "r3", "gone"], "lock_token": "t"})
    assert out == {"removed_releases": ["r2", "r3"], "dropped_objects": 2}
    assert sorted(os.listdir(w / "releases")) == ["r0", "r1", "r4"] and len(os.listdir(w / "store")) == 3
    assert json.loads((w / "state.json").read_text())["previous"] is None  # it named a release now gone
    assert agent.op_prune({"ids": ["r2", "r3"], "lock_token": "t"})["removed_releases"] == []  # a re-run
    os.close(fd)


def test_agent_gc_drops_sweep_points_before_older_releases(agent):
    import os

    fd = _hold_lock(agent, "t")
    w = _host_dir(agent, [_rel("r1"), _rel("r2", "sweep"), _rel("r3", "sweep"), _rel("r4"), _rel("r5")], "r5",
                  previous="r4")
    out = agent.op_gc({"keep": 3, "lock_token": "t"})
    assert out["removed_releases"] == ["r2", "r3"]  # the oldest release, r1, stays: sweep points went first
    assert sorted(os.listdir(w / "releases")) == ["r1", "r4", "r5"]
    os.close(fd)
