"""ssh_config ProxyJump / ProxyCommand and the keyword policy (issue #17), against two real OpenSSH sshd: `sshd` (the
target; no TCP forwarding) and `jump_sshd` (the jump host; forwarding allowed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtctl.errors import RemoteError, UsageError
from ddtctl.remote.inventory import load_inventory, make_host
from ddtctl.remote.transport import Connection, HostKeyError

pytestmark = pytest.mark.ssh

RELAY_NAME = "ddtctl-relay-target.invalid"  # .invalid never resolves: only the relay knows where it is
RELAY = f'''
import os, socket, sys, threading
if len(sys.argv) != 4:
    sys.exit("relay: expected host port user, got %r" % (sys.argv[1:],))
host, port, user = sys.argv[1:]
with open(os.environ.get("RELAY_LOG", "/dev/null"), "a") as f:
    f.write("%s %s %s\\n" % (host, port, user))
sys.stderr.write("relay: started\\n")
s = socket.create_connection(({{"{RELAY_NAME}": "127.0.0.1"}}[host], int(port)))
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            s.shutdown(socket.SHUT_WR)
            return
        s.sendall(data)
threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    os.write(1, data)
'''


def _block(alias: str, server, **extra: str) -> str:
    lines = [f"Host {alias}", "  HostName 127.0.0.1", f"  Port {server.port}", f"  User {server.user}",
             f"  IdentityFile {server.client_key}"]
    lines += [f"  {k} {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def world(sshd, jump_sshd, tmp_path):
    """An ssh_config with `target` (reached through ProxyJump `jump`) and a known_hosts holding both host keys."""
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line + jump_sshd.known_hosts_line)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(_block("target", sshd, ProxyJump="jump") + _block("jump", jump_sshd))
    return tmp_path, cfg, known


def _host(cfg: Path, known: Path, alias: str = "target", **entry):
    return make_host("t", {"address": alias, "known_hosts": str(known), "connect_timeout_s": 5, **entry},
                     ssh_config=str(cfg))


def _socket_owners(local_port: int, remote_port: int) -> set[int]:
    """PIDs holding the TCP socket 127.0.0.1:local_port -> :remote_port (via /proc/net/tcp and /proc/*/fd)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == local_port and int(cols[2].rsplit(":", 1)[1], 16) == remote_port:
                inodes.add(f"socket:[{cols[9]}]")
    owners = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    owners.add(int(pid))
            except OSError:
                pass
    return owners


def _wait_sessions(server, count: int, timeout: float = 10.0) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        n = len(server.session_pids())
        if n == count:
            return n
        time.sleep(0.05)
    return len(server.session_pids())


def _assert_through_jump(conn: Connection, sshd, jump_sshd) -> None:
    """The TCP connection the target's sshd accepted belongs to the jump sshd's processes, not to us."""
    client_ip, client_port, _, server_port = conn.run(["sh", "-c", "echo $SSH_CONNECTION"]).stdout.split()
    assert int(server_port) == sshd.port
    owners = _socket_owners(int(client_port), sshd.port)
    assert owners, "no process holds the target connection's client socket"
    assert os.getpid() not in owners, "ddtctl connected to the target directly"
    assert owners <= jump_sshd.descendant_pids(), f"the target connection is held by {owners}, not the jump sshd"


# -- (a) ProxyJump ---------------------------------------------------------------------------------------------------
def test_proxy_jump_reaches_the_target_through_the_jump_host_and_closes_it(sshd, jump_sshd, world):
    root, cfg, known = world
    inv = root / "hosts.yaml"
    inv.write_text(f"ssh_config: {cfg}\nknown_hosts: {known}\nhosts:\n  gpu1: {{address: target}}\n")
    host = load_inventory(inv).get("gpu1")
    assert (host.address, host.port) == ("127.0.0.1", sshd.port)
    assert [(j.address, j.port, j.user) for j in host.proxy_jump] == [("127.0.0.1", jump_sshd.port, jump_sshd.user)]
    assert _wait_sessions(jump_sshd, 0) == 0  # the jump sshd serves this file only
    with Connection(host) as conn:
        _assert_through_jump(conn, sshd, jump_sshd)
        assert len(jump_sshd.session_pids()) == 1
    assert _wait_sessions(jump_sshd, 0) == 0  # closing the target closed the jump connection
    assert known.read_text() == sshd.known_hosts_line + jump_sshd.known_hosts_line  # nothing added


@pytest.mark.parametrize("how", ["chain", "nested-alias"])
def test_proxy_jump_chains_of_two_hops(sshd, jump_sshd, world, how):
    """`ProxyJump jump,user@127.0.0.1:port` (the second hop reached through the first), or a first hop whose own
    ssh_config block has a ProxyJump: both pass through the jump sshd twice."""
    root, cfg, known = world
    user_at = f"{jump_sshd.user}@127.0.0.1:{jump_sshd.port}"
    if how == "chain":
        text = (_block("target", sshd, ProxyJump=f"jump,{user_at}") + _block("jump", jump_sshd)
                + f"Host 127.0.0.1\n  IdentityFile {jump_sshd.client_key}\n")
    else:
        text = (_block("target", sshd, ProxyJump="inner") + _block("inner", jump_sshd, ProxyJump="jump")
                + _block("jump", jump_sshd))
    cfg.write_text(text)
    host = _host(cfg, known)
    assert _wait_sessions(jump_sshd, 0) == 0  # the jump sshd serves this file only
    with Connection(host) as conn:
        _assert_through_jump(conn, sshd, jump_sshd)
        assert len(jump_sshd.session_pids()) == 2
    assert _wait_sessions(jump_sshd, 0) == 0


def test_a_dropped_target_reconnects_through_the_jump_without_leaking_hops(sshd, jump_sshd, world):
    import signal

    _, cfg, known = world
    assert _wait_sessions(jump_sshd, 0) == 0  # the jump sshd serves this file only
    with Connection(_host(cfg, known)) as conn:
        assert conn.run(["true"]).rc == 0
        for pid in sshd.session_pids():
            os.kill(pid, signal.SIGKILL)
        assert conn.run(["true"], retry=True).rc == 0  # close() + open(): a fresh route
        _assert_through_jump(conn, sshd, jump_sshd)
        assert _wait_sessions(jump_sshd, 1) == 1  # the old jump connection was closed
    assert _wait_sessions(jump_sshd, 0) == 0


# -- (b) the jump host's key is verified like the target's -----------------------------------------------------------
def test_unknown_jump_host_key_is_refused(sshd, jump_sshd, world):
    _, cfg, known = world
    known.write_text(sshd.known_hosts_line)  # the target is known, the jump host is not
    before = len(sshd.session_pids())
    with pytest.raises(HostKeyError) as exc:
        Connection(_host(cfg, known)).open()
    msg = exc.value.one_line()
    assert msg.startswith("jump host jump (for t): unknown host key for ")
    assert f"[127.0.0.1]:{jump_sshd.port}" in msg and "refusing to connect" in msg
    fp = subprocess.run(["ssh-keygen", "-lf", str(jump_sshd.root / "host_ed25519.pub")], capture_output=True,
                        text=True).stdout.split()[1]
    assert fp in msg
    assert known.read_text() == sshd.known_hosts_line  # no auto-add
    assert len(sshd.session_pids()) == before  # the target was never reached


def test_changed_jump_host_key_is_refused_and_trust_new_host_adds_only_new_keys(sshd, jump_sshd, world, tmp_path):
    _, cfg, known = world
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    kind, b64 = (tmp_path / "other.pub").read_text().split()[:2]
    known.write_text(sshd.known_hosts_line + f"[127.0.0.1]:{jump_sshd.port} {kind} {b64}\n")
    with pytest.raises(HostKeyError, match=r"^jump host jump \(for t\): HOST KEY MISMATCH"):
        Connection(_host(cfg, known), trust_new_host=True).open()
    known.write_text(sshd.known_hosts_line)
    with Connection(_host(cfg, known), trust_new_host=True) as conn:  # the user's explicit TOFU, as for a target
        assert conn.run(["true"]).rc == 0
        assert conn.trusted_key and conn.trusted_key.startswith("ssh-ed25519 SHA256:")  # reported, as for a target
        assert conn.trusted_key.endswith(" of jump host jump (for t)")
    assert known.read_text() == sshd.known_hosts_line + jump_sshd.known_hosts_line  # to the target's known_hosts


# -- (c) ProxyCommand ------------------------------------------------------------------------------------------------
def test_proxy_command_runs_in_a_shell_with_tokens_expanded(sshd, tmp_path, monkeypatch):
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY)
    log, err = tmp_path / "relay.log", tmp_path / "relay.err"
    monkeypatch.setenv("RELAY_LOG", str(log))
    cfg = tmp_path / "ssh_config"
    # the shell redirection proves OpenSSH's `$SHELL -c 'exec ...'` (split by hand, the relay gets 5 arguments)
    cfg.write_text(_block("viacmd", sshd).replace("HostName 127.0.0.1", f"HostName {RELAY_NAME}")
                   + f"  ProxyCommand {sys.executable} {relay} %h %p %r 2>>{err}\n")
    known = tmp_path / "known_hosts"
    known.write_text(f"[{RELAY_NAME}]:{sshd.port} {sshd.host_pubkey}\n")
    host = _host(cfg, known, alias="viacmd")
    assert host.address == RELAY_NAME and host.proxy_command is not None
    with Connection(host) as conn:
        assert conn.run(["echo", "hi"]).stdout == "hi\n"
        proxy = conn._sock
        assert proxy.process.poll() is None
    assert proxy.process.poll() is not None  # closed with the connection (and reaped)
    assert log.read_text() == f"{RELAY_NAME} {sshd.port} {sshd.user}\n"
    assert err.read_text() == "relay: started\n"


def test_inventory_user_and_port_feed_the_proxy_command_tokens(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu\n  HostName 10.0.0.7\n  User alice\n  ProxyCommand nc %h %p %r\n")
    assert make_host("gpu", {}, ssh_config=str(cfg)).proxy_command == "nc 10.0.0.7 22 alice"
    host = make_host("gpu", {"user": "bob", "port": 2200}, ssh_config=str(cfg))  # like `ssh -l bob -p 2200 gpu`
    assert host.proxy_command == "nc 10.0.0.7 2200 bob" and (host.user, host.port) == ("bob", 2200)


def test_a_failing_proxy_command_is_one_line_with_what_it_said(sshd, tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(_block("broken", sshd, ProxyCommand="sh -c 'echo no route to %h >&2; exit 3'"))
    with pytest.raises(RemoteError) as exc:
        Connection(_host(cfg, tmp_path / "known_hosts", alias="broken")).open()
    msg = exc.value.one_line()
    assert "ProxyCommand exited with status 3: no route to 127.0.0.1" in msg
    assert f"does `ssh -F {cfg} broken` work from this machine?" in msg


# -- (d) keywords ddtctl cannot honour are refused, naming keyword and file:line --------------------------------------
@pytest.mark.parametrize("line", [
    "HostKeyAlias elsewhere", "CertificateFile ~/.ssh/id_ed25519-cert.pub", "ProxyUseFdpass yes",
    "CanonicalizeHostname yes", "KnownHostsCommand /bin/true", "BindInterface lo", "Ciphers aes128-ctr",
    "HostKeyAlgorithms -ssh-rsa", "IdentityAgent /nonexistent/agent.sock", "PubkeyAuthentication no",
    "GSSAPIAuthentication yes", "UserKnownHostsFile ~/.ssh/known_hosts.d/%k", "NoSuchKeyword 1",
])
def test_unsupported_keyword_is_refused_naming_it(tmp_path, line):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"# ddtctl test\nHost gpu\n  HostName 10.0.0.7\n  {line}\n")
    with pytest.raises(UsageError) as exc:
        make_host("gpu", {}, ssh_config=str(cfg))
    msg = exc.value.one_line()
    assert msg.startswith(f"{cfg}:4: ssh_config keyword {line.split()[0]} "), msg
    assert "\n" not in msg


@pytest.mark.parametrize("line", [
    "LocalForward 8080 127.0.0.1:80", "RemoteForward 9090 127.0.0.1:90", "DynamicForward 1080", "ForwardAgent yes",
    "ControlMaster auto", "ServerAliveInterval 30", "StrictHostKeyChecking accept-new", "Ciphers +aes128-cbc",
    "AddressFamily inet", "IdentityAgent none", "IgnoreUnknown UseFoo\n  UseFoo yes", "CanonicalizeHostname no",
    "ProxyJump none", "ProxyCommand none",
])
def test_irrelevant_or_honoured_keywords_are_accepted(tmp_path, line):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu\n  HostName 10.0.0.7\n  {line}\n")
    host = make_host("gpu", {}, ssh_config=str(cfg))
    assert host.address == "10.0.0.7" and host.proxy_jump == () and host.proxy_command is None


def test_proxy_jump_with_proxy_command_and_keywords_in_included_files(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu\n  ProxyCommand nc %h %p\n  ProxyJump bastion\n")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(cfg))}:3: both ProxyJump and ProxyCommand apply to gpu"):
        make_host("gpu", {}, ssh_config=str(cfg))
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-gpu.conf").write_text("Host gpu\n  HostName 10.0.0.7\n  ProxyJump bastion:2222\n")
    (tmp_path / "conf.d" / "20-alias.conf").write_text("Host bastion\n  HostKeyAlias front\n")
    cfg.write_text(f"Include {tmp_path}/conf.d/10-*.conf\nHost *\n  User carol\n")
    host = make_host("gpu", {}, ssh_config=str(cfg))  # Include is honoured (paramiko alone ignores it)
    assert (host.address, host.user) == ("10.0.0.7", "carol")
    assert [(j.address, j.port, j.user) for j in host.proxy_jump] == [("bastion", 2222, "carol")]
    cfg.write_text(f"Include {tmp_path}/conf.d/*.conf\n")
    included = re.escape(str(tmp_path / "conf.d" / "20-alias.conf"))
    with pytest.raises(UsageError, match=rf"^{included}:2: ssh_config keyword HostKeyAlias"):
        make_host("gpu", {}, ssh_config=str(cfg))  # refused on the jump host too, naming the included file


def test_a_proxy_jump_loop_is_refused(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    with pytest.raises(UsageError, match="more than 8 hops deep"):
        make_host("a", {}, ssh_config=str(cfg))


def test_bind_address_and_address_family_are_honoured(sshd, tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(_block("bound", sshd, BindAddress="127.0.0.2") + _block("v6only", sshd, AddressFamily="inet6"))
    known = tmp_path / "known_hosts"
    sshd.write_known_hosts(known)
    with Connection(_host(cfg, known, alias="bound")) as conn:
        assert conn.run(["sh", "-c", "echo $SSH_CONNECTION"]).stdout.split()[0] == "127.0.0.2"
    with pytest.raises(RemoteError, match=r"^t: cannot connect to 127\.0\.0\.1:"):  # no IPv6 address for 127.0.0.1
        Connection(_host(cfg, known, alias="v6only")).open()


# -- (e) connection failures carry a fix hint --------------------------------------------------------------------------
def test_refused_connection_has_the_ssh_fix_hint(tmp_path):
    from labkit import free_port

    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host deadhost\n  HostName 127.0.0.1\n  Port {free_port()}\n")
    with pytest.raises(RemoteError) as exc:
        Connection(_host(cfg, tmp_path / "known_hosts", alias="deadhost")).open()
    msg = exc.value.one_line()
    assert "cannot connect to 127.0.0.1:" in msg and "Connection refused" in msg
    assert msg.endswith(f"(fix: does `ssh -F {cfg} deadhost` work from this machine?)"), msg


def test_jump_host_failures_say_which_hop_and_why(sshd, jump_sshd, world):
    from labkit import free_port

    root, cfg, known = world
    assert _wait_sessions(jump_sshd, 0) == 0  # the jump sshd serves this file only
    # the target sshd allows no TCP forwarding: used as a jump host, it refuses the channel
    cfg.write_text(_block("target", jump_sshd, ProxyJump="nofwd") + _block("nofwd", sshd))
    with pytest.raises(RemoteError) as exc:
        Connection(_host(cfg, known)).open()
    msg = exc.value.one_line()
    assert f"jump host {sshd.user}@127.0.0.1:{sshd.port} could not open a connection to 127.0.0.1:{jump_sshd.port}" \
        in msg and "AllowTcpForwarding" in msg
    # a jump host that forwards, to a port where nothing listens
    dead = free_port()
    cfg.write_text(_block("target", sshd, ProxyJump="jump").replace(f"Port {sshd.port}", f"Port {dead}")
                   + _block("jump", jump_sshd))
    with pytest.raises(RemoteError) as exc:
        Connection(_host(cfg, known)).open()
    msg = exc.value.one_line()
    assert msg.startswith(f"t: jump host {jump_sshd.user}@127.0.0.1:{jump_sshd.port} could not open a connection to "
                          f"127.0.0.1:{dead}")
    assert f"does `ssh -F {cfg} target` work from this machine?" in msg
    assert _wait_sessions(jump_sshd, 0) == 0  # the failed route's jump connection was closed
