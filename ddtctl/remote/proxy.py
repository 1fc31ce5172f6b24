"""How an SSH connection reaches its host (issue #17): a TCP socket (honouring AddressFamily and BindAddress),
a ProxyCommand, or a `direct-tcpip` channel through the previous ProxyJump hop (opened by
transport.Connection).

Imports paramiko: only transport.py imports this module.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import threading
from typing import TYPE_CHECKING

import paramiko

from ddtctl.remote.inventory import Host

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer  # paramiko's ProxyCommand.send takes any buffer

_FAMILIES = {"inet": socket.AF_INET, "inet6": socket.AF_INET6}


def fix_hint(host: Host) -> str:
    cmd = host.ssh_equivalent or f"ssh -p {host.port} {host.user}@{host.address}"
    return f"does `{cmd}` work from this machine?"


def dial(host: Host) -> socket.socket:
    """A TCP connection to the host itself; OSError (socket.timeout on a timeout) when no address answers."""
    infos = socket.getaddrinfo(
        host.address, host.port, _FAMILIES.get(host.address_family, socket.AF_UNSPEC), socket.SOCK_STREAM
    )
    last: OSError = OSError(f"no address for {host.address}")
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(host.connect_timeout_s)
            if host.bind_address:
                sock.bind((host.bind_address, 0))
            sock.connect(addr)
            return sock
        except OSError as err:
            sock.close()
            last = err
    raise last


class ShellProxyCommand(paramiko.ProxyCommand):
    """A ProxyCommand run the way OpenSSH runs one: `$SHELL -c 'exec CMD'` (paramiko's own class splits the
    line itself, so pipes and $VARS do not work). Also unlike paramiko's: end of output reads as end of
    connection (its recv spins until the timeout), stderr is kept for the error message instead of filling its
    pipe, and close() reaps the process."""

    def __init__(self, command: str):  # not super().__init__: that starts the command paramiko's way
        self.cmd = [os.environ.get("SHELL") or "/bin/sh", "-c", f"exec {command}"]
        self.process = subprocess.Popen(
            self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
        )
        self.timeout: float | None = None
        self._stderr = bytearray()
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()

    def _drain_stderr(self) -> None:
        err = self.process.stderr
        assert err is not None
        try:
            while chunk := err.read(4096):
                self._stderr = (self._stderr + chunk)[-4096:]
        except (OSError, ValueError):
            pass

    def send(self, content: ReadableBuffer) -> int:
        try:
            return os.write(self.process.stdin.fileno(), content)  # type: ignore[union-attr]  # a PIPE: never None
        except (OSError, ValueError) as err:
            raise paramiko.ProxyCommandFailure(
                " ".join(self.cmd), getattr(err, "strerror", None) or str(err)
            ) from err

    def recv(self, size: int) -> bytes:
        fd = self.process.stdout.fileno()  # type: ignore[union-attr]  # a PIPE: never None
        try:
            ready, _, _ = select.select([fd], [], [], self.timeout)
            if not ready:
                raise socket.timeout()
            return os.read(fd, size)  # b"" once the command exits: the transport sees the connection closed
        except (OSError, ValueError) as err:
            if isinstance(err, socket.timeout):
                raise
            raise paramiko.ProxyCommandFailure(
                " ".join(self.cmd), getattr(err, "strerror", None) or str(err)
            ) from err

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()  # type: ignore[union-attr]  # both are PIPEs: never None
            except OSError:
                pass

    def failure(self) -> str:
        """What the command said when the connection through it failed ("" while it still runs)."""
        try:
            rc = self.process.wait(1)
        except subprocess.TimeoutExpired:
            return ""
        self._drain.join(1)
        said = self._stderr.decode(errors="replace").strip().splitlines()
        return f"ProxyCommand exited with status {rc}" + (f": {said[-1][:200]}" if said else "")
