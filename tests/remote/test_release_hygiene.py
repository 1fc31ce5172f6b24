"""`ddtctl releases` and `rollback` with tune's sweep points on the host, and `releases --prune`, through the CLI
against the loopback sshd. The host's work dir is written as deploys and a tune run leave it (records, store
objects, state.json: what the agent reads), so no server has to start: tests/remote/test_tune.py tags real sweep
points, tests/deploy/test_release_kinds.py covers the choices on plain data."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from json_envelope import results
from labkit import ddtctl_main

pytestmark = pytest.mark.ssh

# r0 failed; r1, r4 releases; r2, r3 sweep points of tune run RUN1. Current r4, previous r3 (as tune leaves it).
RELEASES = [("r0", "release", "failed"), ("r1", "release", "ok"), ("r2", "sweep", "ok"), ("r3", "sweep", "ok"),
            ("r4", "release", "ok")]


def _host_as_tune_left_it(lab):
    w = lab.work()
    for rid, kind, status in RELEASES:
        blob = f"payload of {rid}".encode()
        sha = hashlib.sha256(blob).hexdigest()
        (w / "store").mkdir(parents=True, exist_ok=True, mode=0o700)
        (w / "store" / sha).write_bytes(blob)
        rec = {"id": rid, "status": status, "kind": kind, "profile": {"name": f"lab.{rid}"}, "port": lab.port,
               "argv": ["--model-path", "/m"], "created_iso": f"2026-12-0{rid[1]}T00:00:00Z",
               "payload": {"files": {"a.py": {"sha256": sha}}}}
        if kind == "sweep":
            rec["tune"] = {"run": "RUN1", "point": f"budget={rid}"}
        (w / "releases" / rid).mkdir(parents=True, mode=0o700)
        (w / "releases" / rid / "release.json").write_text(json.dumps(rec))
    (w / "state.json").write_text(json.dumps({"current": "r4", "previous": "r3", "history": []}))
    return w


def _cli(lab, *args):
    return ddtctl_main(*args, "-i", str(lab.inventory))


def test_releases_shows_sweep_points_and_rollback_refuses_one(lab):
    w = _host_as_tune_left_it(lab)
    text = _cli(lab, "releases", "lo")
    assert text.exit_code == 0, text.output
    ids = [rid for rid, _, _ in RELEASES]
    rows = {line.lstrip("* ").split()[0]: line for line in text.stdout.splitlines()
            if line.lstrip("* ").split()[:1] and line.lstrip("* ").split()[0] in ids}
    assert [rows[rid].lstrip("* ").split()[1] for rid in ids] == [kind for _, kind, _ in RELEASES]
    assert rows["r4"].startswith("*") and "lab.r2" in rows["r2"]
    assert "sweep: a point measured by tune run RUN1; never a rollback target" in text.stdout

    refused = _cli(lab, "rollback", "lo", "r3")
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [
        "ddtctl: error: lo: release r3 is a sweep point of `ddtctl tune` (run RUN1), not a rollback target "
        "(fix: put its settings into the profile and deploy that (`ddtctl tune ... --write --deploy` does it for "
        "the winner), or roll back to a release `ddtctl releases HOST` lists as kind release)"]
    assert json.loads((w / "state.json").read_text())["current"] == "r4"  # nothing changed


def test_prune_previews_asks_and_removes_sweep_points_first(lab):
    w = _host_as_tune_left_it(lab)
    before = sorted(os.listdir(w / "releases"))
    plan = _cli(lab, "releases", "lo", "--prune", "--keep", "2", "--plan")
    assert plan.exit_code == 0, plan.output
    lines = plan.stdout.splitlines()
    assert lines[0].startswith("releases on lo: remove 3, keep 2 (--keep 2; sweep points go first")
    assert [ln.split()[:2] for ln in lines[1:6]] == [["remove", "r2"], ["remove", "r3"], ["remove", "r0"],
                                                      ["keep", "r1"], ["keep", "r4"]]
    assert "(the current release)" in lines[5] and "(the release `rollback` returns to)" in lines[4]
    assert lines[-1] == "plan only (--plan): nothing removed"
    assert sorted(os.listdir(w / "releases")) == before

    unconfirmed = _cli(lab, "releases", "lo", "--prune", "--keep", "2")
    assert unconfirmed.exit_code == 2 and "stdin is not a terminal" in unconfirmed.stderr
    assert "fix: pass --yes, or --plan to see what it removes" in unconfirmed.stderr
    assert sorted(os.listdir(w / "releases")) == before
    no_prune = _cli(lab, "releases", "lo", "--keep", "2")
    assert no_prune.exit_code == 2 and "--keep goes with --prune" in no_prune.stderr

    done = _cli(lab, "releases", "lo", "--prune", "--keep", "2", "--yes", "--format", "json")
    assert done.exit_code == 0, done.output
    out = results(done.stdout, "releases")["prune"]
    assert out["status"] == "pruned" and out["removed"] == ["r2", "r3", "r0"] and out["dropped_objects"] == 3
    assert [r["kind"] for r in out["remove"]] == ["sweep", "sweep", "release"]
    assert sorted(os.listdir(w / "releases")) == ["r1", "r4"]  # record and payload dirs: gone, nothing half-left
    assert len(os.listdir(w / "store")) == 2
    assert json.loads((w / "state.json").read_text())["previous"] is None
    again = _cli(lab, "releases", "lo", "--prune", "--keep", "0")  # r1 and r4 stay whatever --keep says
    assert again.exit_code == 0 and again.stdout.strip() == "nothing to prune: 2 release(s), --keep 0"
