"""A real OpenSSH sshd on 127.0.0.1 for tests and the deploy benchmark.

Generated host and client keys, a throwaway authorized_keys and its own sshd_config in a temp dir; random free port.
Runs as the current user (root in CI containers, hence `StrictModes no` and `PermitRootLogin prohibit-password`).
"""

from __future__ import annotations

import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/usr/bin/sshd")


def find_sshd() -> str | None:
    for cand in SSHD_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("sshd")


# Ports for servers the tests start: a block per pytest-xdist worker (`make test` runs the suite in parallel), below
# Linux's ephemeral range (32768-60999), where bind(0) and every outgoing connection take theirs. A port handed out
# here stays unbound until its server starts; from its own block, no other worker's server and no client socket of
# any process takes it in between. Outside pytest-xdist: block 0.
_PORT_BLOCK, _PORT_BASE, _PORT_BLOCKS = 1000, 20000, 12
_port_state: dict[str, int] = {}


def _worker_index() -> int | None:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name[2:] if name.startswith("gw") else ""
    return int(digits) if digits.isdigit() and int(digits) < _PORT_BLOCKS else None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, from this worker's block (see above); a port of the kernel's choosing when
    the block is full or there is none for this worker."""
    index = _worker_index()
    if index is not None:
        base = _PORT_BASE + index * _PORT_BLOCK
        if "next" not in _port_state:  # where this process starts in its block: another process of the same worker
            _port_state["next"] = random.SystemRandom().randrange(_PORT_BLOCK)  # (a bench run) starts elsewhere
        for _ in range(_PORT_BLOCK):
            port = base + _port_state["next"]
            _port_state["next"] = (_port_state["next"] + 1) % _PORT_BLOCK
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_free_port = free_port  # the old private name


def _keygen(path: Path, kind: str = "ed25519", keygen: str = "ssh-keygen", env: dict | None = None) -> None:
    subprocess.run([keygen, "-q", "-t", kind, "-N", "", "-C", "ddtctl-test", "-f", str(path)], check=True, env=env)


@dataclass
class Sshd:
    root: Path
    port: int
    user: str
    client_key: Path
    host_pubkey: str  # "ssh-ed25519 AAAA..."
    proc: subprocess.Popen

    @property
    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_pubkey}\n"

    def write_known_hosts(self, path: Path) -> Path:
        path.write_text(self.known_hosts_line)
        return path

    @staticmethod
    def _parent_of() -> dict[int, int]:
        """pid -> parent pid of every process in /proc."""
        out: dict[int, int] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            out[int(d)] = int(stat[stat.rindex(")") + 2:].split()[1])
        return out

    def session_pids(self) -> list[int]:
        """PIDs of the per-connection sshd processes (children of the listener)."""
        return [pid for pid, ppid in self._parent_of().items() if ppid == self.proc.pid]

    def descendant_pids(self) -> set[int]:
        """PIDs of every process below the listener (per-connection sshd, its privilege-separated children)."""
        children: dict[int, list[int]] = {}
        for pid, ppid in self._parent_of().items():
            children.setdefault(ppid, []).append(pid)
        found: set[int] = set()
        todo = [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_sshd(root: Path, *, sshd: str | None = None, sftp: str | None = None, keygen: str = "ssh-keygen",
               env: dict | None = None, extra_config: str = "", tcp_forwarding: bool = False) -> Sshd:
    """Start sshd (default: the system's) on a free port. bench/deploy_gpu.py passes unpacked Debian binaries
    (sshd, sftp-server, ssh-keygen), `env` for them (LD_LIBRARY_PATH) and `extra_config` (SetEnv lines).
    `tcp_forwarding`: allow direct-tcpip channels (a ProxyJump host for tests/remote/test_proxy_jump.py)."""
    sshd = sshd or find_sshd()
    if not sshd:
        raise RuntimeError("sshd not found; install openssh-server (make system-deps)")
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    _keygen(root / "host_ed25519", keygen=keygen, env=env)
    _keygen(root / "client_ed25519", keygen=keygen, env=env)
    (root / "authorized_keys").write_text((root / "client_ed25519.pub").read_text())
    os.chmod(root / "authorized_keys", 0o600)
    user = getpass.getuser()
    # sshd refuses to start without its privilege-separation dir when run as root
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    sftp = sftp or next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                                     "/usr/lib/ssh/sftp-server") if os.path.exists(p)), "internal-sftp")
    last_err = ""
    for _attempt in range(5):
        port = _free_port()
        (root / "sshd_config").write_text(
            f"""Port {port}
ListenAddress 127.0.0.1
HostKey {root}/host_ed25519
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding {'yes' if tcp_forwarding else 'no'}
X11Forwarding no
PrintMotd no
MaxStartups 64:30:128
MaxSessions 64
LogLevel VERBOSE
Subsystem sftp {sftp}
{extra_config}"""
        )
        log = open(root / "sshd.log", "ab")
        proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(root / "sshd_config")], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, env=env)
        deadline = time.time() + 10
        while time.time() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        pub = (root / "host_ed25519.pub").read_text().split()
                        return Sshd(root, port, user, root / "client_ed25519", f"{pub[0]} {pub[1]}", proc)
            except OSError:
                time.sleep(0.05)
        proc.kill()
        proc.wait()
        last_err = (root / "sshd.log").read_text()[-2000:]
    raise RuntimeError(f"sshd did not start: {last_err}")
