"""SSH transport on paramiko: verified host keys, key/agent auth only, timeouts on connect and every command.

Every remote command is an argv list joined with shlex.quote; nothing user-supplied is ever interpolated into
a shell string unquoted. Dropped connections become RemoteError; read-only commands may be retried once.
ProxyJump hops are Connections of their own (verified the same way), closed with the connection they carry.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

import paramiko

from ddtctl.errors import RemoteError, printable
from ddtctl.remote import rgroup
from ddtctl.remote.agent_boot import (  # AGENT_SHA, AGENT_SOURCE: also imported from here
    AGENT_BOOT,
    AGENT_MISSING_RC,
    AGENT_SHA,
    AGENT_SOURCE,
)
from ddtctl.remote.hostkeys import HostKeyError, _Policy, check_key_files, fingerprint, load_known_hosts
from ddtctl.remote.inventory import Host
from ddtctl.remote.protocol import Request
from ddtctl.remote.proxy import ShellProxyCommand, dial, fix_hint
from ddtctl.remote.rgroup import agent_reply
from ddtctl.remote.rgroup import parse_agent_reply as parse_agent_reply  # ship.py imports it from here
from ddtctl.remote.wire import Op

ReplyT = TypeVar("ReplyT")

# paramiko logs transport-thread failures (e.g. "Error reading SSH protocol banner" when the port is not SSH)
# with their traceback; with no handler configured, Python's last-resort handler printed them on stderr before
# our one-line error (issue #14). ddtctl reports those failures itself.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class ConnectionLost(RemoteError):
    """The SSH connection dropped while a command or transfer was in flight."""


class LockHeld(RemoteError):
    """Another deploy holds the host's deploy lock."""


def quote_argv(argv: list[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


@dataclass
class CommandResult:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    pgid: int | None = None  # the command's process group on the host (rgroup.py), when it reported one


class HeldLock(Protocol):
    """The host's deploy lock as a connection sees it (ddtctl.deploy.lock.RemoteLock)."""

    token: str

    @property
    def alive(self) -> bool: ...

    def reacquire(self) -> Any: ...


class Connection:
    """One SSH connection to a host; use as a context manager."""

    def __init__(self, host: Host, *, trust_new_host: bool = False, log: Callable[[str], None] | None = None):
        self.host = host
        self.trust_new_host = trust_new_host
        self.log = log or (lambda msg: None)
        self._log_given = log is not None
        self.client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self.work_dir: str | None = None
        self.agent_path: str | None = None
        self.trusted_key: str | None = None
        self._agent_seen = False
        self._sock: Any = (
            None  # what the session runs over: a socket, a ProxyCommand or a jump host's channel
        )
        self._hops: list[Connection] = []
        self.lock: HeldLock | None = None  # the deploy lock held over this connection, if any
        self._last_pgid: int | None = None  # the process group of the last agent command (rgroup.py)

    @property
    def lock_token(self) -> str | None:
        """What lock-holding agent operations present to prove the caller holds the host's deploy lock."""
        return self.lock.token if self.lock is not None else None

    # -------------------------------------------------------------------------------------------- connect
    def open(self, sock: Any = None) -> "Connection":
        """Connect (through the host's ProxyJump hops or ProxyCommand, if any); `sock`: an already open path
        to the host (the channel a previous hop opened)."""
        hops: list[Connection] = []
        client = self._client()  # the local files first: a bad known_hosts or key file is not a remote error
        try:
            if sock is None:
                sock = self._route(hops)
            self._connect(sock, client)
        except BaseException:
            _close_quietly(sock)
            for hop in reversed(hops):
                hop.close()
            raise
        self._sock, self._hops = sock, hops
        # keys --trust-new-host added for jump hosts too (they went to the same known_hosts): report them all
        trusted = [self.trusted_key] + [
            f"{hop.trusted_key} of {hop.host.name}" for hop in hops if hop.trusted_key
        ]
        self.trusted_key = "; ".join(t for t in trusted if t) or None
        return self

    def _route(self, hops: list["Connection"]) -> Any:
        """The socket-like object the SSH session to self.host runs over; opened hops go into `hops`."""
        h = self.host
        if h.proxy_jump:
            prev: Connection | None = None
            for jump in h.proxy_jump:
                hop = Connection(jump, trust_new_host=self.trust_new_host, log=self.log)
                hop.open(None if prev is None else prev._forward(jump))
                hops.append(hop)
                prev = hop
            assert prev is not None
            return prev._forward(h)
        if h.proxy_command:
            try:
                return ShellProxyCommand(h.proxy_command)
            except OSError as err:
                raise RemoteError(
                    f"cannot start ProxyCommand `{h.proxy_command}`: {err}",
                    where=h.name,
                    fix="check the ProxyCommand line in the ssh config",
                ) from None
        try:
            return dial(h)
        except (socket.timeout, TimeoutError):
            raise RemoteError(
                f"connect to {h.address}:{h.port} timed out after {h.connect_timeout_s:g}s",
                where=h.name,
                fix=f"check the address/port and that sshd is reachable; {fix_hint(h)}",
            ) from None
        except OSError as err:
            raise RemoteError(
                f"cannot connect to {h.address}:{h.port}: {err.strerror or err}",
                where=h.name,
                fix=fix_hint(h),
            ) from None

    def _forward(self, dest: Host) -> paramiko.Channel:
        """A direct-tcpip channel from this (jump) host to `dest`, to carry dest's SSH session."""
        j = self.host
        what = (
            f"jump host {j.user}@{j.address}:{j.port} "
            f"could not open a connection to {dest.address}:{dest.port}"
        )
        try:
            return self._transport().open_channel(
                "direct-tcpip", (dest.address, dest.port), ("127.0.0.1", 0), timeout=j.connect_timeout_s
            )
        except paramiko.ChannelException as err:
            if err.code == 1:  # SSH_OPEN_ADMINISTRATIVELY_PROHIBITED
                fix = "the jump host's sshd must allow TCP forwarding (AllowTcpForwarding yes in sshd_config)"
            else:
                fix = (
                    f"check that {dest.address}:{dest.port} is reachable from the jump host; {fix_hint(dest)}"
                )
            raise RemoteError(f"{what}: {err.text or 'refused'}", where=dest.name, fix=fix) from None
        except (paramiko.SSHException, EOFError, OSError) as err:
            raise RemoteError(
                f"{what}: {err or type(err).__name__}", where=dest.name, fix=fix_hint(dest)
            ) from None

    def _client(self) -> paramiko.SSHClient:
        """An SSH client holding the keys of the host's known_hosts files (read bounded, bad lines skipped
        with a warning), after a check of its key files (hostkeys.py)."""
        h = self.host
        client = paramiko.SSHClient()
        warn = self.log if self._log_given else _warn
        for path in (h.known_hosts, *h.more_known_hosts):
            load_known_hosts(client.get_host_keys(), os.path.expanduser(path), warn)
        check_key_files(h)
        return client

    def _connect(self, sock: Any, client: paramiko.SSHClient) -> None:
        h = self.host
        known = Path(os.path.expanduser(h.known_hosts))
        policy = _Policy(h, known, self.trust_new_host)
        client.set_missing_host_key_policy(policy)
        try:
            client.connect(
                h.address,
                port=h.port,
                username=h.user,
                # paramiko takes a list of key files too (documented); its stubs say str only
                key_filename=list(h.key_files) or None,  # type: ignore[arg-type]
                sock=sock,
                timeout=h.connect_timeout_s,
                banner_timeout=h.connect_timeout_s,
                auth_timeout=h.connect_timeout_s,
                channel_timeout=h.connect_timeout_s,
                allow_agent=h.allow_agent,
                look_for_keys=not h.key_files,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.BadHostKeyException as err:
            client.close()
            raise HostKeyError(
                f"HOST KEY MISMATCH for {h.known_hosts_key}: "
                f"got {err.key.get_name()} {fingerprint(err.key)}, "
                f"known_hosts has {fingerprint(err.expected_key)}; "
                "refusing to connect (possible man-in-the-middle)",
                where=h.name,
                fix="if the host was reinstalled, remove the old key: "
                f"ssh-keygen -R '{h.known_hosts_key}' -f {known}",
            ) from None
        except paramiko.AuthenticationException as err:
            client.close()
            keys = ", ".join(h.key_files) or "ssh-agent / default keys"
            raise RemoteError(
                f"authentication failed for {h.user}@{h.address}:{h.port} ({err})",
                where=h.name,
                fix=f"check the key ({keys}) is in the host's authorized_keys; {fix_hint(h)}",
            ) from None
        except (socket.timeout, TimeoutError):
            client.close()
            raise RemoteError(
                f"connect to {h.address}:{h.port} timed out after {h.connect_timeout_s:g}s",
                where=h.name,
                fix=f"check the address/port and that sshd is reachable; {fix_hint(h)}",
            ) from None
        except (OSError, paramiko.SSHException, EOFError) as err:
            client.close()
            said = sock.failure() if isinstance(sock, ShellProxyCommand) else ""
            detail = f"{err or type(err).__name__}" + (f" ({said})" if said else "")
            raise RemoteError(
                f"cannot connect to {h.address}:{h.port}: {detail}", where=h.name, fix=fix_hint(h)
            ) from None
        self.client = client
        self.trusted_key = policy.trusted
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(15)
        # many small messages (agent stdin lines, SFTP requests): no Nagle delay. Only a TCP socket has the
        # option; a ProxyCommand pipe or a ProxyJump channel does not.
        if isinstance(transport.sock, socket.socket):
            try:
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def __enter__(self) -> "Connection":
        if self.client is None:
            self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass
            self._sftp = None
        if self.client is not None:
            self.client.close()
            self.client = None
        _close_quietly(self._sock)
        self._sock = None
        for hop in reversed(self._hops):  # the jump hosts this connection ran through, nearest first
            hop.close()
        self._hops = []

    @property
    def alive(self) -> bool:
        t = self.client.get_transport() if self.client else None
        return bool(t and t.is_active())

    def _transport(self) -> paramiko.Transport:
        t = self.client.get_transport() if self.client else None
        if t is None or not t.is_active():
            raise ConnectionLost(
                f"connection to {self.host.address}:{self.host.port} is closed", where=self.host.name
            )
        return t

    # -------------------------------------------------------------------------------------------- commands
    def run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        retry: bool = False,
        on_stdout: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run argv on the host (quoted, no shell interpretation of arguments). `retry`: reconnect once if the
        connection dropped (only for commands that are safe to repeat)."""
        try:
            return self._run(argv, timeout=timeout, stdin=stdin, on_stdout=on_stdout)
        except ConnectionLost:
            if not retry:
                raise
            self.log(f"connection to {self.host.name} dropped; reconnecting once")
            self.close()
            self.open()
            return self._run(argv, timeout=timeout, stdin=stdin, on_stdout=on_stdout)

    def _run(self, argv, *, timeout, stdin, on_stdout) -> CommandResult:
        timeout = self.host.command_timeout_s if timeout is None else timeout
        label = " ".join(str(a) for a in argv[:3])[:80]
        streams = rgroup.Streams()
        chan: paramiko.Channel | None = None
        try:
            chan = self._transport().open_session(timeout=self.host.connect_timeout_s)
            chan.settimeout(0.05)
            chan.exec_command(rgroup.wrap(quote_argv(argv)))  # reports its process group first (rgroup.py)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            self._collect(chan, label, timeout, on_stdout, streams)
            rc = chan.recv_exit_status()
            chan.close()
        except RemoteError as e:
            if isinstance(e, ConnectionLost):
                raise
            raise type(e)(e.message + self.end_group(streams.pgid), where=e.where, fix=e.fix) from None
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise ConnectionLost(
                f"connection lost while running `{label}`: {e or type(e).__name__}", where=self.host.name
            ) from None
        except BaseException:  # Ctrl-C, a bug: what the command started must not outlive this
            if streams.pgid is None and chan is not None:
                rgroup.await_group(chan, streams)  # a Ctrl-C right after the start can beat its group line
            self.end_group(streams.pgid)
            raise
        out, err = streams.out.decode(errors="replace"), streams.err.decode(errors="replace")
        return CommandResult(list(argv), rc, out, err, streams.pgid)

    def _collect(
        self,
        chan: paramiko.Channel,
        label: str,
        timeout: float,
        on_stdout: Callable[[str], None] | None,
        streams: rgroup.Streams,
    ) -> None:
        """Read the command's stdout and stderr into `streams` until it exits; stdout lines go to `on_stdout`
        as they arrive. ConnectionLost when the connection drops, RemoteError after `timeout` seconds or past
        rgroup.MAX_STDOUT bytes of output (the deadline holds however fast or slowly the output comes)."""
        pending = b""
        eof = False
        deadline = time.monotonic() + timeout
        while True:
            rgroup.read_stderr(chan, streams)
            if not eof:
                try:
                    data = chan.recv(65536)
                except socket.timeout:
                    data = None
                if data:
                    streams.out += data
                    if on_stdout:
                        pending = _emit_lines(pending + data, on_stdout)
                    if streams.over():
                        chan.close()
                        raise RemoteError(
                            f"`{label}` wrote more than {rgroup.MAX_STDOUT // 2**20} MiB of output",
                            where=self.host.name,
                            fix="check the host's python (inventory `python:`) and what it prints",
                        )
                if data == b"":
                    eof = True
            if eof:
                if chan.status_event.wait(0.05):
                    rgroup.read_stderr(chan, streams)
                    return
            if not self.alive or (eof and chan.closed and not chan.exit_status_ready()):
                raise ConnectionLost(f"connection lost while running `{label}`", where=self.host.name)
            if time.monotonic() > deadline:
                chan.close()
                raise RemoteError(
                    f"`{label}` timed out after {timeout:g}s",
                    where=self.host.name,
                    fix="raise command_timeout_s for this host in the inventory",
                )

    def end_group(self, pgid: int | None) -> str:
        """End a command's process group on the host (TERM, then KILL after rgroup.KILL_GRACE_S); what to add
        to the error that made ddtctl stop waiting ("" when the command reported no group)."""
        if pgid is None:
            return ""
        ok = False
        try:
            chan = self._transport().open_session(timeout=self.host.connect_timeout_s)
            try:
                chan.exec_command(quote_argv(rgroup.kill_argv(pgid)))
                ok = chan.status_event.wait(rgroup.KILL_GRACE_S + self.host.connect_timeout_s)
                ok = ok and chan.recv_exit_status() == 0
            finally:
                chan.close()
        except (RemoteError, paramiko.SSHException, EOFError, OSError):
            ok = False
        return rgroup.kill_note(pgid, ok)

    def open_channel(self, argv: list[str]) -> paramiko.Channel:
        """A long-running command whose stdin we keep open (used by the deploy lock and `logs -f`)."""
        try:
            chan = self._transport().open_session(timeout=self.host.connect_timeout_s)
            chan.exec_command(quote_argv(argv))
            return chan
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise ConnectionLost(f"connection lost: {e}", where=self.host.name) from None

    # ------------------------------------------------------------------------------------------- sftp / agent
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = self.client.open_sftp()  # type: ignore[union-attr]  # set while connected
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise ConnectionLost(f"cannot open SFTP: {e}", where=self.host.name) from None
            channel = self._sftp.get_channel()
            assert channel is not None  # open_sftp() opens its channel
            channel.settimeout(self.host.command_timeout_s)
        return self._sftp

    def _remote_work_dir(self) -> str:
        """The work dir as the remote side sees it: relative paths (and ~/...) are relative to the login dir,
        which is where sshd starts every command."""
        wd = self.host.work_dir.rstrip("/") or "/"
        if wd == "~":
            return "."
        if wd.startswith("~/"):
            return wd[2:] or "."
        return wd

    def ensure_agent(self) -> str:
        """The agent's path on the host (the boot installs and verifies it on first use; no round trip)."""
        if not self.agent_path:
            self.agent_path = f"{self._remote_work_dir()}/.ddtctl/agent-{AGENT_SHA[:16]}.py"
        return self.agent_path

    def agent(
        self,
        op: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        retry: bool = False,
        stdin: bytes | None = None,
    ) -> Any:
        """Run one agent operation and return its result (RemoteError with the agent's message on failure).

        Every run goes through AGENT_BOOT, which runs only an agent whose sha256 is ours: the first run on a
        connection sends the agent on stdin, for the boot to install when the host lacks it (or holds anything
        else). `stdin`: the operation's own input, after the agent where the boot reads that first; an
        operation with input runs once the connection has seen the agent (a `hello` first, if not yet)."""
        if stdin is not None and not self._agent_seen:
            self.agent(Op.HELLO.value, retry=True)  # the boot said HAVE: the agent's input is ours alone
        argv = self.agent_argv(op, params)
        own = stdin or b""
        res = self.run(argv, timeout=timeout, retry=retry, stdin=own if self._agent_seen else AGENT_SOURCE)
        if res.rc == AGENT_MISSING_RC and self._agent_seen:  # removed or changed since: send it again
            res = self.run(argv, timeout=timeout, retry=retry, stdin=AGENT_SOURCE + own)
        if res.rc == AGENT_MISSING_RC:
            raise RemoteError(
                f"cannot install the agent in {self.host.work_dir}: {res.stderr.strip()[-300:]}",
                where=self.host.name,
                fix="set work_dir to a writable directory in the inventory",
            )
        self._agent_seen = True
        self._last_pgid = res.pgid
        try:
            reply = agent_reply(res, op, self.host.name)
        except RemoteError as e:  # not the agent's answer: whatever the command left running goes too
            raise RemoteError(e.message + self.end_group(res.pgid), where=e.where, fix=e.fix) from None
        self.work_dir = reply.get("work_dir") if isinstance(reply.get("work_dir"), str) else self.work_dir
        if not reply.get("ok"):
            raise RemoteError(f"{op}: {reply.get('error')}", where=self.host.name)
        return reply.get("result")

    def call(
        self,
        request: Request[ReplyT],
        *,
        timeout: float | None = None,
        retry: bool = False,
        locked: bool = False,
    ) -> ReplyT:
        """Run one typed agent operation (ddtctl.remote.protocol) and return its parsed reply. `locked`:
        present this connection's deploy-lock token (operations that change the host require it)."""
        params = request.params()
        if locked:
            params["lock_token"] = self.lock_token
        result = self.agent(request.OP.value, params, timeout=timeout, retry=retry, stdin=request.stdin())
        try:
            return request.parse(result)
        except RemoteError as e:  # a reply of the wrong shape: not our agent, or a broken one
            raise RemoteError(e.message + self.end_group(self._last_pgid), where=e.where, fix=e.fix) from None

    def open_agent_stream(self, op: str, params: dict[str, Any] | None = None):
        """Start a streaming agent operation (its stdin is ours). Returns (channel, handshake): call
        handshake() (possibly in a thread) before writing to the channel; it sends the agent when the boot
        asks for it."""
        chan = self.open_channel(self.agent_argv(op, params))

        def handshake() -> None:
            agent_handshake(chan, self.host.name)
            self._agent_seen = True

        return chan, handshake

    def agent_argv(self, op: str, params: dict[str, Any] | None = None) -> list[str]:
        """argv of one agent operation: the host's python runs AGENT_BOOT, which checks the work dir, verifies
        the installed agent against AGENT_SHA (installing it from stdin when absent or different) and runs
        it."""
        path = self.ensure_agent()
        payload = dict(params or {}, work_dir=self._remote_work_dir())
        blob = base64.b64encode(json.dumps(payload).encode()).decode()
        return [self.host.python, "-c", AGENT_BOOT, path, AGENT_SHA, str(len(AGENT_SOURCE)), op, blob]


def _warn(message: str) -> None:
    import sys

    sys.stderr.write(f"ddtctl: warning: {printable(message)}\n")


def _emit_lines(pending: bytes, on_stdout: Callable[[str], None]) -> bytes:
    """Pass each complete line of `pending` to `on_stdout`; return the incomplete rest."""
    *lines, rest = pending.split(b"\n")
    for line in lines:
        on_stdout(line.decode(errors="replace"))
    return rest


def _close_quietly(sock: Any) -> None:
    if sock is not None:
        try:
            sock.close()
        except Exception:
            pass


def agent_handshake(chan: paramiko.Channel, where: str) -> None:
    """Read the boot's first line on a channel whose stdin is ours: HAVE (a verified agent runs now) or NEED
    (send it). Anything else is the boot's refusal, one JSON line."""
    line = b""
    while not line.endswith(b"\n"):
        c = chan.recv(1)
        if not c:
            err = chan.recv_stderr(4096).decode(errors="replace").strip() if chan.recv_stderr_ready() else ""
            transport = chan.get_transport()
            if not err and not (transport is not None and transport.is_active()):
                # the connection died before the boot answered (a deploy resumes from ConnectionLost)
                raise ConnectionLost("connection lost while starting the agent", where=where)
            raise RemoteError(f"agent start failed: {err[-300:] or 'no answer'}", where=where)
        line += c
    text = line.strip()
    if text == b"NEED":
        chan.sendall(AGENT_SOURCE)
    elif text != b"HAVE":
        try:
            error = json.loads(text).get("error")
        except ValueError:
            error = text.decode(errors="replace")[:300]
        raise RemoteError(f"agent start failed: {error}", where=where)


def _sftp_makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """mkdir -p over SFTP; relative paths are relative to the login dir."""
    cur = ""
    for part in [p for p in path.split("/") if p]:
        cur = f"{cur}/{part}" if (cur or path.startswith("/")) else part
        try:
            sftp.stat(cur)
        except FileNotFoundError:
            sftp.mkdir(cur)
