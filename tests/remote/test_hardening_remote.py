"""Issue #14, remote defects found with hostile input, one regression test (or a few) per defect, each failing on the
code before its fix: 6 the remote agent run without verification, 7 secrets at rest and in `ddtctl logs`, 9 (the
inventory part) non-numeric timeouts crashing, 12 a paramiko traceback before the one-line error, 14 duplicate hosts
in hosts.yaml, 15 the deploy lock (an operation outliving its lock holder, a pid check blind to start time).

6, 7 run against the real loopback sshd (`lab`); 9, 12, 14 need no SSH server; 15 runs the agent as the host runs it
(its own processes, the real flock)."""

from __future__ import annotations

import base64
import json
import re
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddtctl.errors import RemoteError, UsageError

AGENT = Path(__file__).resolve().parents[2] / "ddtctl" / "remote" / "agent.py"


def ddtctl(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- 6: the agent is verified on the host before it runs ------------------------------------------------------------
PLANTED = ("import json, pathlib, sys\n"
           "pathlib.Path({marker!r}).write_text('planted agent ran')\n"
           "print(json.dumps({{'ok': True, 'result': {{'planted': True}}}}))\n")


@pytest.mark.ssh
@pytest.mark.parametrize("how", ["agent", "lock"])
def test_defect6_a_planted_agent_file_is_replaced_not_run(lab, tmp_path, how):
    from ddtctl.deploy import RemoteLock
    from ddtctl.remote.transport import AGENT_SHA, AGENT_SOURCE, Connection

    marker = tmp_path / "pwned"
    planted = lab.work() / ".ddtctl" / f"agent-{AGENT_SHA[:16]}.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(PLANTED.format(marker=str(marker)))
    with Connection(lab.host()) as conn:
        if how == "agent":
            hello = conn.agent("hello")
            assert "planted" not in hello and hello["work_dir"] == str(lab.work())
        else:
            with RemoteLock(conn, holder="test"):
                assert json.loads((lab.work() / "lock.json").read_text())["holder"] == "test"
    assert not marker.exists()  # before: the boot only checked that the file existed, and ran it
    assert planted.read_bytes() == AGENT_SOURCE and _mode(planted) == 0o600


@pytest.mark.ssh
def test_defect6_a_work_dir_writable_by_others_is_refused(lab):
    from ddtctl.deploy import RemoteLock
    from ddtctl.remote.transport import Connection

    work = lab.work()
    work.mkdir()
    work.chmod(0o777)
    with Connection(lab.host()) as conn:
        with pytest.raises(RemoteError, match="writable by others"):
            conn.agent("hello")
        with pytest.raises(RemoteError, match="writable by others"):
            RemoteLock(conn, holder="test").acquire()
    assert not (work / ".ddtctl").exists()  # nothing was installed or run there
    work.chmod(0o755)
    (work / ".ddtctl").mkdir()
    (work / ".ddtctl").chmod(0o777)
    with Connection(lab.host()) as conn, pytest.raises(RemoteError, match="writable by others"):
        conn.agent("hello")


# -- 7: secrets at rest, and in `ddtctl logs` --------------------------------------------------------------------------
@pytest.mark.ssh
def test_defect7_secrets_are_private_at_rest_and_masked_in_logs(lab):
    from ddtctl.deploy import DeployOptions, deploy, host_logs, spec_from_profile

    api_key, token = "sk-live-0123456789", "hf_abcdefghijkl"
    prof = lab.profile(server={"api-key": api_key}, env={"HF_TOKEN": token, "STANDIN_PRINT_ENV": "HF_TOKEN"})
    spec = spec_from_profile(str(prof), payload_dir=str(lab.payload))
    r = deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5))
    assert r.status == "deployed", r.error
    w, rid = lab.work(), r.release["lo"]
    release_json = w / "releases" / rid / "release.json"
    log = w / "logs" / f"{rid}.log"
    assert token in release_json.read_text() and api_key in log.read_text()  # the server needs them: kept, privately
    for path, mode in ((w / "releases", 0o700), (release_json, 0o600), (w / "logs", 0o700), (log, 0o600),
                       (w / "run", 0o700), (w / "run" / "server.json", 0o600), (w / "state.json", 0o600)):
        assert _mode(path) == mode, f"{path}: {oct(_mode(path))}"  # before: 0644 files in 0755 dirs
    text = host_logs(lab.host(), lines=200).text
    assert "HF_TOKEN=***" in text and "--api-key" in text
    assert api_key not in text and token not in text  # before: printed as the server wrote them
    run = ddtctl("logs", "lo", "-i", lab.inventory, "-n", "200")
    assert run.returncode == 0 and "HF_TOKEN=***" in run.stdout, run.stderr
    assert api_key not in run.stdout + run.stderr and token not in run.stdout + run.stderr
    got = []
    host_logs(lab.host(), lines=200, follow=True, on_text=got.append, follow_for_s=1)
    assert token not in "".join(got) and api_key not in "".join(got)


# -- 9 (inventory): numbers in hosts.yaml ------------------------------------------------------------------------------
@pytest.mark.parametrize("entry, needle", [
    ("connect_timeout_s: soon", "connect_timeout_s must be a number, got 'soon'"),
    ("command_timeout_s: .nan", "command_timeout_s must be between"),
    ("command_timeout_s: -5", "command_timeout_s must be between"),
    ("port: 99999", "port must be between 1 and 65535"),
    ("port: twenty-two", "port must be an integer"),
    ("dist_init_port: [1]", "dist_init_port must be an integer"),
])
def test_defect9_bad_numbers_in_the_inventory_are_one_line_errors(tmp_path, entry, needle):
    from ddtctl.remote.inventory import load_inventory

    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"ssh_config: {tmp_path / 'none'}\nhosts:\n  gpu1: {{address: 10.0.0.1, {entry}}}\n")
    with pytest.raises(UsageError, match=re.escape(needle)):
        load_inventory(inv)
    run = ddtctl("status", "gpu1", "-i", inv)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and needle in run.stderr, run.stderr
    assert "internal error" not in run.stderr


# -- 12: no paramiko traceback when the port does not speak SSH -----------------------------------------------------
@pytest.fixture
def not_ssh():
    """A TCP server that answers like a web server and hangs up."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(5)
    srv.close()


def test_defect12_a_port_that_is_not_ssh_is_one_line_without_traceback(tmp_path, not_ssh):
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"ssh_config: {tmp_path / 'none'}\nhosts:\n  web: {{address: 127.0.0.1, port: {not_ssh}, "
                   f"user: nobody, known_hosts: {tmp_path / 'known_hosts'}, connect_timeout_s: 5}}\n")
    for args in (("status", "web"), ("facts", "web"), ("logs", "web")):
        run = ddtctl(*args, "-i", inv)
        assert run.returncode == 3, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ddtctl: error: web: cannot connect"), run.stderr
        assert "Traceback" not in run.stderr  # before: paramiko's transport thread logged one first


# -- 14: duplicate hosts -----------------------------------------------------------------------------------------------
def test_defect14_a_host_listed_twice_is_refused(tmp_path):
    from ddtctl.remote.inventory import load_inventory

    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"ssh_config: {tmp_path / 'none'}\nhosts:\n  gpu1: {{address: 10.0.0.1}}\n"
                   "  gpu2: {address: 10.0.0.2}\n  gpu1: {address: 10.0.0.9}\n")
    with pytest.raises(UsageError, match=r"hosts.yaml:5: .*duplicate host 'gpu1' \(first at line 3\)"):
        load_inventory(inv)  # before: the second gpu1 silently won
    run = ddtctl("status", "gpu1", "-i", inv)
    assert run.returncode == 2 and "duplicate host 'gpu1'" in run.stderr and run.stderr.count("\n") == 1
    inv.write_text(f"ssh_config: {tmp_path / 'none'}\nhosts:\n  gpu1: {{address: 10.0.0.1, port: 22, port: 2222}}\n")
    with pytest.raises(UsageError, match="duplicate key 'port'"):
        load_inventory(inv)


# -- 15: the deploy lock -----------------------------------------------------------------------------------------------
def _agent(op: str, work: Path, stdin=subprocess.DEVNULL, **params) -> subprocess.Popen:
    blob = base64.b64encode(json.dumps(dict(params, work_dir=str(work))).encode()).decode()
    return subprocess.Popen([sys.executable, str(AGENT), op, blob], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _reply(proc: subprocess.Popen, timeout: float) -> dict:
    out, _ = proc.communicate(timeout=timeout)
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])


def _release(work: Path, rid: str = "r1") -> None:
    (work / "releases" / rid).mkdir(parents=True)
    (work / "releases" / rid / "release.json").write_text(json.dumps({"id": rid, "env": {}, "launch_argv": []}))


def test_defect15_a_live_pid_with_another_start_time_does_not_hold_the_lock(tmp_path):
    work = tmp_path / "w"
    _release(work)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for held in ({"token": "t", "pid": sleeper.pid},  # a lock.json left behind; its pid now someone else's
                     {"token": "t", "pid": sleeper.pid, "starttime": 1}):
            (work / "lock.json").write_text(json.dumps(held))
            reply = _reply(_agent("set_status", work, id="r1", status="ok", lock_token="t"), 30)
            assert not reply["ok"] and "lock is not held" in reply["error"], reply  # before: the pid was alive: ok
        assert "status" not in json.loads((work / "releases" / "r1" / "release.json").read_text())
    finally:
        sleeper.kill()
        sleeper.wait()


def test_defect15_a_running_operation_stops_when_its_lock_holder_goes(tmp_path):
    work = tmp_path / "w"
    _release(work)
    lock = _agent("lock", work, stdin=subprocess.PIPE, token="t", holder="test")
    assert json.loads(lock.stdout.readline())["locked"]
    marker = tmp_path / "still-running"
    step = [sys.executable, "-c", f"import time, pathlib; time.sleep(4); pathlib.Path({str(marker)!r}).touch(); "
                                  "time.sleep(40)"]
    warmup = _agent("warmup", work, id="r1", argv=step, lock_token="t", timeout_s=60)
    try:
        time.sleep(1.0)
        assert warmup.poll() is None  # running under the lock
        lock.stdin.close()  # the lock holder's connection dies: sshd closes the lock agent's stdin
        lock.wait(10)
        reply = _reply(warmup, 60)  # before: ran on for the whole 44 s and replied ok
        assert not reply["ok"] and "deploy lock was lost" in reply["error"], reply
        time.sleep(4)
        assert not marker.exists()  # the step itself was stopped, not only the agent
    finally:
        for proc in (warmup, lock):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
