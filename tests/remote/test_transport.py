"""The SSH transport against the real loopback sshd: host-key verification, timeouts, quoting."""

from __future__ import annotations

import socket
import threading

import pytest

from ddtctl.deploy import DeployOptions, deploy, spec_from_profile
from ddtctl.errors import RemoteError
from ddtctl.remote.transport import Connection, HostKeyError

pytestmark = pytest.mark.ssh


def test_unknown_host_key_is_refused_with_fingerprint_and_fix(lab):
    lab.known_hosts.write_text("")
    spec = spec_from_profile(str(lab.profile()), payload_dir=str(lab.payload))
    with pytest.raises(HostKeyError) as exc:
        deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False))
    msg = exc.value.one_line()
    fp = __import__("subprocess").run(["ssh-keygen", "-lf", str(lab.sshd.root / "host_ed25519.pub")],
                                      capture_output=True, text=True).stdout.split()[1]
    assert fp.startswith("SHA256:") and fp in msg
    assert f"[127.0.0.1]:{lab.sshd.port}" in msg and "--trust-new-host" in msg
    assert f"ssh-keyscan -p {lab.sshd.port} 127.0.0.1 >> {lab.known_hosts}" in msg
    assert not lab.work().exists()  # nothing ran on the host
    assert lab.known_hosts.read_text() == ""


def test_trust_new_host_saves_the_key_once(lab):
    lab.known_hosts.unlink()
    with Connection(lab.host(), trust_new_host=True) as conn:
        assert conn.trusted_key and conn.trusted_key.startswith("ssh-ed25519 SHA256:")
        assert conn.run(["true"]).rc == 0
    saved = lab.known_hosts.read_text()
    assert saved.startswith(f"[127.0.0.1]:{lab.sshd.port} ssh-ed25519 ")
    with Connection(lab.host()) as conn:  # now known: no trust flag needed, nothing re-added
        assert conn.trusted_key is None
    assert lab.known_hosts.read_text() == saved


def test_changed_host_key_is_refused_even_with_trust(lab, tmp_path):
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    kind, b64 = (tmp_path / "other.pub").read_text().split()[:2]
    lab.known_hosts.write_text(f"[127.0.0.1]:{lab.sshd.port} {kind} {b64}\n")
    with pytest.raises(HostKeyError, match="HOST KEY MISMATCH"):
        Connection(lab.host(), trust_new_host=True).open()


def test_command_timeout_and_quoting(lab, tmp_path):
    marker = tmp_path / "pwned"
    with Connection(lab.host()) as conn:
        res = conn.run(["printf", "%s|", f"$(touch {marker})", f"; touch {marker}", "`id`", "a b"])
        assert res.stdout == f"$(touch {marker})|; touch {marker}|`id`|a b|"
        with pytest.raises(RemoteError, match="timed out after 0.5s"):
            conn.run(["sleep", "30"], timeout=0.5)
        assert conn.run(["true"]).rc == 0  # the connection survives a timed-out command
    assert not marker.exists()


def test_connect_timeout_on_a_silent_server(lab):
    """A TCP peer that never speaks SSH: connect must give up after connect_timeout_s, not hang."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    accepted = []
    threading.Thread(target=lambda: accepted.append(srv.accept()), daemon=True).start()
    host = lab.host()
    from dataclasses import replace

    silent = replace(host, port=srv.getsockname()[1], connect_timeout_s=1.0)
    try:
        with pytest.raises(RemoteError, match="timed out|cannot connect"):
            Connection(silent).open()
    finally:
        srv.close()


def test_bad_key_is_an_authentication_error(lab, tmp_path):
    import subprocess
    from dataclasses import replace

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
    host = replace(lab.host(), key_files=(str(tmp_path / "stranger"),))
    with pytest.raises(RemoteError, match="authentication failed"):
        Connection(host).open()


def test_dropped_connection_is_retried_only_where_safe(lab):
    import os
    import signal

    from ddtctl.remote.transport import ConnectionLost

    with Connection(lab.host()) as conn:
        assert conn.agent("hello")["work_dir"] == str(lab.work())
        for pid in lab.sshd.session_pids():
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(ConnectionLost):
            conn.run(["true"])  # not marked safe: a clear error, no silent re-run
        assert conn.agent("state", retry=True)["state"]["current"] is None  # read-only: reconnected once


def test_big_file_ships_as_ranges_and_is_verified_on_the_host(lab, tmp_path):
    import hashlib
    import os

    from ddtctl.remote.ship import RANGE_MIN_BYTES, _plan_uploads, build_manifest, ship

    src = tmp_path / "big"
    src.mkdir()
    data = os.urandom(RANGE_MIN_BYTES + 12345)
    (src / "weights.bin").write_bytes(data)
    (src / "small.txt").write_text("x")
    m = build_manifest(src)
    todo = [(e.sha256, (src / rel, e.size)) for rel, e in m.files.items()]
    jobs, n = _plan_uploads(todo, workers=4)
    if (os.cpu_count() or 1) > 1:
        assert n >= 2 and sum(1 for j in jobs if j[4] != j[2]) >= 2  # the big file is split into ranges
    with Connection(lab.host()) as conn:
        res = ship(conn, [m])
    assert (res.files_sent, res.verified, res.bytes_sent) == (2, 2, len(data) + 1)
    sha = hashlib.sha256(data).hexdigest()
    assert hashlib.sha256((lab.work() / "store" / sha).read_bytes()).hexdigest() == sha


def test_home_relative_work_dir(lab):
    """work_dir: ~/... resolves on the host (sshd starts commands and SFTP in the login dir)."""
    import shutil
    import uuid
    from dataclasses import replace
    from pathlib import Path

    from ddtctl.remote.ship import list_store

    name = f".ddtctl-test-{uuid.uuid4().hex[:8]}"
    host = replace(lab.host(), work_dir=f"~/{name}")
    try:
        with Connection(host) as conn:
            assert conn.agent("hello")["work_dir"] == str(Path.home() / name)
            listing = list_store(conn)
            assert listing.stored == set() and (Path.home() / name / "incoming").is_dir()
    finally:
        shutil.rmtree(Path.home() / name, ignore_errors=True)
