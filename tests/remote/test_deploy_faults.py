"""Faults during a deploy, against the real loopback sshd (issue #31, item 2): `kill -9` of the local `ddtctl deploy`
during ship, the health wait and the rollback; the connection's sshd killed mid-transfer; the host's disk full during
ship; two deploys at once. After each, the next `deploy`, `status` and `rollback` (real `python -m ddtctl`
subprocesses, `--format json`) must find a consistent host: no half-installed release made current, a stale lock
taken over with a message naming its dead holder, the previous release serving again.

The deploy is paused at a known point by its test-only hook (DDTCTL_TEST_PAUSE_AT / DDTCTL_TEST_PAUSE_FILE in
ddtctl/deploy/pipeline.py): it writes the marker file and waits until the file is gone. The matrix of these faults
is notes/deploy-fault-matrix.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from json_envelope import error, results

from ddtctl.deploy import DeployOptions, deploy, host_status, spec_from_profile
from labkit import _kill_lab_servers, build_lab_payload

pytestmark = pytest.mark.ssh

CLI_TIMEOUT_S = 120


def _deploy(lab, profile, **kw):
    spec = spec_from_profile(str(profile), payload_dir=str(lab.payload))
    opts = DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5, **kw)
    return deploy(spec, [lab.host(n) for n in spec.host_names], opts)


class Cli:
    """One `python -m ddtctl ... --format json` subprocess (stdout and stderr to files)."""

    def __init__(self, lab, name: str, *args: str, pause: str | None = None):
        self.out, self.err = lab.root / f"{name}.out", lab.root / f"{name}.err"
        self.marker = lab.root / f"{name}.paused"
        env = dict(os.environ)
        if pause:
            env.update(DDTCTL_TEST_PAUSE_AT=pause, DDTCTL_TEST_PAUSE_FILE=str(self.marker))
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ddtctl", *args, "--inventory", str(lab.inventory), "--format", "json"],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)

    def wait_paused(self) -> None:
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while not self.marker.exists():
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before the pause: {self.stderr}"
            assert time.monotonic() < deadline, "never reached the pause point"
            time.sleep(0.02)

    def resume(self) -> None:
        self.marker.unlink()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def finish(self) -> int:
        return self.proc.wait(CLI_TIMEOUT_S)

    @property
    def stdout(self) -> str:
        return self.out.read_text()

    @property
    def stderr(self) -> str:
        return self.err.read_text()


def cli(lab, name: str, *args: str, **kw) -> Cli:
    c = Cli(lab, name, *args, **kw)
    c.finish()
    return c


def deploy_args(lab, profile: Path, *extra: str) -> tuple[str, ...]:
    return ("deploy", "lo", "--profile", str(profile), "--payload", str(lab.payload), "--skip-remote-dry-run",
            "--yes", *extra)


def releases_on_disk(lab) -> set[str]:
    root = lab.work() / "releases"
    return {p.name for p in root.iterdir()} if root.exists() else set()


def assert_serves(lab, rid: str, *, via_cli: bool = False) -> dict:
    """Status (`ddtctl status --format json`, or the same report in-process): `rid` is current, its server runs
    and answers /health."""
    if via_cli:
        st = cli(lab, "status", "status", "lo")
        out = results(st.stdout, "status")
        assert st.proc.returncode == 0 and out["healthy"], out
    else:
        out = host_status(lab.host()).to_json()
        assert out["health"] == 200, out
    assert out["current"] == rid and out["server"]["release"] == rid, out
    return out


def lock_events(doc: dict) -> list[str]:
    return [ev["message"] for ev in doc["events"] if ev["stage"] == "lock"]


def test_kill9_during_ship_then_status_deploy_rollback(lab):
    """Killed mid-upload: the old release keeps serving, no release is half-made, the next deploy takes over the
    dead holder's lock with a message naming it and resumes the upload, rollback goes back."""
    r1 = _deploy(lab, lab.profile())
    assert r1.status == "deployed", r1.error
    rid1 = r1.release["lo"]
    build_lab_payload(lab.payload, version="2", extra_files=20)
    killed = Cli(lab, "killed", *deploy_args(lab, lab.profile()), pause="ship:5")
    killed.wait_paused()
    killed.kill9()
    assert killed.stdout == ""  # nothing half-printed on stdout

    st = assert_serves(lab, rid1, via_cli=True)
    assert [r["id"] for r in st["releases"]] == [rid1] and releases_on_disk(lab) == {rid1}
    assert "# payload 1" in (lab.sglang_root / "sglang/srt/speculative/spec_info.py").read_text()
    assert st["lock"]["stale"] and "deploy lab" in st["lock"]["holder"], st["lock"]

    again = cli(lab, "again", *deploy_args(lab, lab.profile()))
    doc = results(again.stdout, "deploy")
    assert again.proc.returncode == 0 and doc["status"] == "deployed", doc["error"]
    took = [m for m in lock_events(doc) if "stale deploy lock" in m]
    assert took and "deploy lab" in took[0] and "pid" in took[0], lock_events(doc)
    assert doc["shipped"]["lo"]["files_sent"] <= 23 - 5  # the 5+ complete uploads were verified, not sent again
    rid2 = doc["release"]["lo"]
    assert_serves(lab, rid2)
    assert "# payload 2" in (lab.sglang_root / "sglang/srt/speculative/spec_info.py").read_text()

    back = cli(lab, "rollback", "rollback", "lo")
    out = results(back.stdout, "rollback")
    assert back.proc.returncode == 0 and (out["from"], out["to"]) == (rid2, rid1), out
    assert_serves(lab, rid1)


def test_kill9_during_health_wait_then_status_and_deploy_restore_the_previous(lab):
    """Killed while the new server warms up: `status` says a deploy was interrupted (the host runs a release that is
    not current); the next deploy takes over, puts the previous release back, and finds nothing else to do."""
    prof = lab.profile()
    r1 = _deploy(lab, prof)
    rid1 = r1.release["lo"]
    slow = lab.profile("slow", server={"speculative-ddtree-budget": 48}, env={"STANDIN_READY_AFTER_S": "600"})
    killed = Cli(lab, "killed", *deploy_args(lab, slow), pause="health")
    killed.wait_paused()
    killed.kill9()
    assert killed.stdout == ""

    st = cli(lab, "status", "status", "lo")
    out = results(st.stdout, "status")
    assert out["current"] == rid1 and out["server"]["release"] != rid1  # the new one, never recorded
    assert out["interrupted"]["previous"] == rid1 and out["interrupted"]["release"] == out["server"]["release"]
    assert out["lock"]["stale"]
    new = out["interrupted"]["release"]
    assert {r["id"]: r["status"] for r in out["releases"]}[new] == "new"  # not made current, not called ok

    again = cli(lab, "again", *deploy_args(lab, prof))
    doc = results(again.stdout, "deploy")
    assert again.proc.returncode == 0 and doc["status"] == "unchanged", doc
    said = " | ".join(lock_events(doc))
    assert "stale deploy lock" in said and "deploy slow" in said, said
    assert f"restored release {rid1}" in said and new in said, said
    out = assert_serves(lab, rid1)
    assert {r["id"]: r["status"] for r in out["releases"]}[new] == "interrupted"
    assert out["interrupted"] is None and not out["lock"]


def test_kill9_during_rollback_then_rollback_restores_the_previous(lab):
    """Killed while rolling a failed release back (its server stopped, the previous not yet reinstalled): the next
    `rollback` takes over and finishes the job: the previous release serves, the failed one stays failed."""
    r1 = _deploy(lab, lab.profile())
    rid1 = r1.release["lo"]
    spec_info = lab.sglang_root / "sglang/srt/speculative/spec_info.py"
    v1_text = spec_info.read_text()
    build_lab_payload(lab.payload, version="2")
    bad = lab.profile("bad", env={"STANDIN_HEALTH": "fail"})
    killed = Cli(lab, "killed", *deploy_args(lab, bad, "--health-timeout", "1"), pause="rollback")
    killed.wait_paused()
    killed.kill9()
    assert killed.stdout == ""

    st = cli(lab, "status", "status", "lo")
    out = results(st.stdout, "status")
    assert st.proc.returncode == 5 and out["current"] == rid1 and not (out["server"] or {}).get("running")
    assert out["interrupted"]["previous"] == rid1

    back = cli(lab, "rollback", "rollback", "lo")
    doc = results(back.stdout, "rollback")
    assert back.proc.returncode == 0 and doc["to"] == rid1 and doc["health"]["ok"], doc
    said = " | ".join(ev["message"] for ev in doc["events"])
    assert "stale deploy lock" in said and "deploy bad" in said and f"restored release {rid1}" in said, said
    out = assert_serves(lab, rid1)
    assert spec_info.read_text() == v1_text  # payload 1 reinstalled
    assert sorted(r["status"] for r in out["releases"]) == ["failed", "ok"]


def test_sshd_killed_mid_transfer_then_deploy_resumes(lab):
    """The connection's sshd dies mid-upload: one-line JSON error (exit 3), the old release serves, nothing
    half-made; the next deploy resumes and finishes."""
    r1 = _deploy(lab, lab.profile())
    rid1 = r1.release["lo"]
    build_lab_payload(lab.payload, version="2", extra_files=20)
    cut = Cli(lab, "cut", *deploy_args(lab, lab.profile()), pause="ship:5")
    cut.wait_paused()
    for pid in lab.sshd.session_pids():
        os.kill(pid, signal.SIGKILL)
    cut.resume()
    assert cut.finish() == 3
    err = error(cut.stdout, "deploy", 3)
    assert err["message"].startswith("connection lost") and "\n" not in err["message"]  # shipping, or the verifier

    st = assert_serves(lab, rid1, via_cli=True)
    assert releases_on_disk(lab) == {rid1} and [r["id"] for r in st["releases"]] == [rid1]
    again = cli(lab, "again", *deploy_args(lab, lab.profile()))
    doc = results(again.stdout, "deploy")
    assert doc["status"] == "deployed" and doc["shipped"]["lo"]["files_sent"] <= 23 - 5, doc
    assert_serves(lab, doc["release"]["lo"])


@pytest.fixture
def small_disk(lab):
    """The host's work dir on its own tmpfs (root, and a kernel that lets a container mount one): big enough for
    preflight's 1 GiB headroom, filled by the test when it wants the disk full."""
    work = lab.work()
    work.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200m,mode=0700", "tmpfs", str(work)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield work
    finally:
        _kill_lab_servers(lab.root)  # their logs are open on the tmpfs
        subprocess.run(["umount", "-l", str(work)], check=False)


def _fill(path: Path, leave_bytes: int) -> Path:
    """A file that takes all but about `leave_bytes` of the filesystem's free space."""
    filler = path / "filler"
    with open(filler, "wb") as f:
        size = 0
        for step in (64 << 20, 1 << 20, 64 << 10):
            while True:
                st = os.statvfs(path)
                if st.f_bavail * st.f_frsize - step < leave_bytes:
                    break
                try:
                    os.posix_fallocate(f.fileno(), size, step)
                except OSError:
                    break
                size += step
    return filler


def test_disk_full_during_ship_then_deploy_after_space_is_freed(lab, small_disk):
    r1 = _deploy(lab, lab.profile())
    rid1 = r1.release["lo"]
    big = {f"ddtree_sglang/data/blob{i}.py": f"# blob {i}\n" + "z = 0\n" * 150_000 for i in range(3)}  # ~0.9 MB each
    build_lab_payload(lab.payload, version="2", extra_files=3, new_files=big)
    full = Cli(lab, "full", *deploy_args(lab, lab.profile()), pause="plan")  # planned, nothing sent yet
    full.wait_paused()
    filler = _fill(small_disk, 64 << 10)
    full.resume()
    rc = full.finish()
    err = error(full.stdout, "deploy", rc)
    assert rc == 3 and "disk" in err["message"] and "\n" not in err["message"], err
    assert "Traceback" not in full.stderr

    filler.unlink()
    st = assert_serves(lab, rid1, via_cli=True)
    assert [r["id"] for r in st["releases"]] == [rid1] and releases_on_disk(lab) == {rid1}
    again = cli(lab, "again", *deploy_args(lab, lab.profile()))
    doc = results(again.stdout, "deploy")
    assert again.proc.returncode == 0 and doc["status"] == "deployed", doc["error"]
    assert_serves(lab, doc["release"]["lo"])


def test_two_deploys_at_once_one_refused_one_queued_nothing_interleaves(lab):
    r0 = _deploy(lab, lab.profile())
    rid0 = r0.release["lo"]
    a = Cli(lab, "a", *deploy_args(lab, lab.profile("first", server={"speculative-ddtree-budget": 40})),
            pause="launch")
    a.wait_paused()  # A holds the lock, its new server started
    b = cli(lab, "b", *deploy_args(lab, lab.profile("second", server={"speculative-ddtree-budget": 48})))
    err = error(b.stdout, "deploy", 3)
    assert err["message"].startswith("locked by ") and "deploy first" in err["message"], err
    assert "\n" not in err["message"] and "--lock-wait" in (err["fix"] or "")
    c = Cli(lab, "c", *deploy_args(lab, lab.profile("third", server={"speculative-ddtree-budget": 56}),
                                   "--lock-wait", "60"))
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while "waiting for the deploy lock held by" not in c.stderr:
        assert c.proc.poll() is None and time.monotonic() < deadline, c.stderr
        time.sleep(0.05)
    a.resume()
    assert a.finish() == 0 and c.finish() == 0, (a.stdout, c.stdout)
    ra, rc = results(a.stdout, "deploy")["release"]["lo"], results(c.stdout, "deploy")["release"]["lo"]
    out = assert_serves(lab, rc)
    assert out["previous"] == ra
    assert releases_on_disk(lab) == {rid0, ra, rc}  # B left nothing
    recs = {r: json.loads((lab.work() / "releases" / r / "release.json").read_text()) for r in (ra, rc)}
    a_done = max(ev["time"] for ev in recs[ra]["events"])
    assert recs[rc]["created"] > a_done  # C's release was made after A had recorded its own
    assert [r["profile"]["name"] for r in (recs[ra], recs[rc])] == ["first", "third"]


def test_status_text_names_a_stale_lock_and_an_interrupted_deploy():
    from ddtctl.cli.remote import _lock_lines
    from ddtctl.deploy.hostops import HostStatus

    st = HostStatus("lo", "R1", None, None, None, None, None, [],
                    lock={"holder": "ann@laptop deploy lab", "pid": 4242, "since": 0, "stale": True},
                    interrupted={"release": "R2", "previous": "R1", "holder": "ann@laptop deploy lab"})
    stale, undo = _lock_lines(st)
    assert stale.startswith("  stale deploy lock of ann@laptop deploy lab (pid 4242 on the host") and "died" in stale
    assert "interrupted deploy of R2 by ann@laptop deploy lab" in undo and "puts R1 back" in undo
    assert _lock_lines(HostStatus("lo", "R1", None, None, None, None, None, [])) == []
