"""Host keys and key files as transport.Connection reads them: known_hosts and private key files go through
the bounded regular-file reader (ddtctl.safeio.read_regular: a FIFO, /dev/zero, a 20 MB file or a symlink loop
is a one-line usage error, never a hang); a known_hosts line that is not a host key is skipped with a warning
naming file:line, as OpenSSH skips it (issue #31: paramiko's InvalidHostKey crashed ddtctl); an unknown host
key is refused unless --trust-new-host (_Policy).

Imports paramiko: only transport.py imports this module.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Callable

import paramiko
from paramiko.hostkeys import HostKeyEntry

from ddtctl.errors import RemoteError, UsageError
from ddtctl.remote.inventory import Host
from ddtctl.safeio import read_regular

MAX_KNOWN_HOSTS = 8 * 1024 * 1024
MAX_KEY_FILE = 1024 * 1024


class HostKeyError(RemoteError):
    """The host's key is unknown or does not match known_hosts."""


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _present(path: str) -> bool:
    return (
        os.path.lexists(path) and path != os.devnull
    )  # lexists: a dangling link or a loop is read (refused)


def load_known_hosts(keys: paramiko.HostKeys, path: str, log: Callable[[str], None]) -> None:
    """Add the host keys of one known_hosts file to `keys`; lines that are not host keys are skipped."""
    if not _present(path):
        return
    try:
        fix = "point known_hosts (inventory) at a known_hosts file"
        raw = read_regular(path, MAX_KNOWN_HOSTS, what="known_hosts", fix=fix)
    except UsageError as err:  # read_regular's "{what}s are limited to", in English
        text = err.message.replace("known_hostss are", "known_hosts files are")
        raise UsageError(text, where=err.where, fix=err.fix) from None
    for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(line, n)
        except Exception as err:  # paramiko's InvalidHostKey (bad base64, a bad key blob) and the like
            log(f"{path}:{n}: not a host key ({type(err).__name__}); line skipped, as OpenSSH does")
            continue
        if entry is None or entry.key is None:
            log(f"{path}:{n}: not a host key line; skipped, as OpenSSH does")
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)


def check_key_files(host: Host) -> None:
    """Each private key file the inventory (or ssh_config) names is a regular file of sane size, read through
    the bounded reader before paramiko opens it; a missing one is left to paramiko's own message."""
    for key in host.key_files:
        path = os.path.expanduser(key)
        if os.path.lexists(path):
            read_regular(
                path, MAX_KEY_FILE, what="SSH key", fix="point key: (inventory) at a private key file"
            )


class _Policy(paramiko.MissingHostKeyPolicy):
    """Unknown host keys are refused; with --trust-new-host the key is added to known_hosts (and reported)."""

    def __init__(self, host: Host, known_hosts: Path, trust_new: bool):
        self.host = host
        self.known_hosts = known_hosts
        self.trust_new = trust_new
        self.trusted: str | None = None

    def missing_host_key(self, client, hostname, key):
        fp = fingerprint(key)
        name = self.host.known_hosts_key
        if not self.trust_new:
            port = f"-p {self.host.port} " if self.host.port != 22 else ""
            raise HostKeyError(
                f"unknown host key for {name}: {key.get_name()} {fp}; refusing to connect",
                where=self.host.name,
                fix=(
                    "check that fingerprint with the host's owner, then re-run with --trust-new-host, or run "
                    f"`ssh-keyscan {port}{self.host.address} >> {self.known_hosts}`"
                ),
            )
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as f:
            f.write(f"{name} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(name, key.get_name(), key)
        self.trusted = f"{key.get_name()} {fp}"
