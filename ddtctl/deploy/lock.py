"""The host's deploy lock, and the agent operations that need it."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any, Callable, TypeVar

import paramiko

from ddtctl.errors import RemoteError
from ddtctl.remote.protocol import Lock, LockHolder, LockMessage, Recovered, Request
from ddtctl.remote.transport import AGENT_SOURCE, Connection, ConnectionLost, LockHeld

ReplyT = TypeVar("ReplyT")


class RemoteLock:
    """The host's deploy lock, held by a remote agent process for as long as our channel stays open (a killed
    connection releases it). While held, it is the connection's `lock`: lock-holding operations present its
    token."""

    def __init__(
        self,
        conn: Connection,
        *,
        holder: str,
        wait_s: float = 0.0,
        on_wait: Callable[[LockHolder], None] | None = None,
    ):
        self.conn = conn
        self.holder = holder
        self.wait_s = wait_s
        self.on_wait = on_wait
        self.token = uuid.uuid4().hex
        self.session = uuid.uuid4().hex  # the same across reacquire(): this holder resumes its own deploy
        self.chan: paramiko.Channel | None = None
        self.took_over: LockHolder | None = None  # the stale lock of a holder that died, taken over
        self.recovered: Recovered | None = None  # an interrupted deploy undone before the lock was granted

    def acquire(self) -> "RemoteLock":
        request = Lock(self.token, self.holder, self.wait_s, self.session)
        chan = self.conn.open_channel(self.conn.agent_argv(request.OP.value, request.params()))
        chan.settimeout(self.wait_s + self.conn.host.command_timeout_s)
        try:
            self._wait_for_lock(chan, request)
        except (OSError, EOFError) as err:
            chan.close()
            if isinstance(err, socket.timeout):
                raise LockHeld("timed out waiting for the deploy lock", where=self.conn.host.name) from None
            raise ConnectionLost(
                f"connection lost while taking the lock: {err}", where=self.conn.host.name
            ) from None
        except BaseException:
            chan.close()
            raise
        self.chan = chan
        self.conn.lock = self
        return self

    def _wait_for_lock(self, chan: paramiko.Channel, request: Lock) -> None:
        """Read the agent's status lines until it holds the lock (LockHeld when another deploy keeps it)."""
        buf = b""
        while True:
            data = chan.recv(4096)
            if not data:
                chan.status_event.wait(5)
                err = (
                    chan.recv_stderr(4096).decode(errors="replace").strip()
                    if chan.recv_stderr_ready()
                    else ""
                )
                raise RemoteError(
                    f"lock: the agent exited without taking the lock {err}".strip(), where=self.conn.host.name
                )
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip() == b"NEED":  # the boot found no verified agent on the host: it installs ours
                    chan.sendall(AGENT_SOURCE)
                    continue
                if not line.startswith(b"{"):
                    continue
                if self._answered(request.parse(json.loads(line))):
                    return

    def _answered(self, msg: LockMessage) -> bool:
        if msg.locked:
            self.took_over, self.recovered = msg.took_over, msg.recovered
            return True
        if msg.waiting:
            if self.on_wait:
                self.on_wait(msg.held_by)
            return False
        if msg.error == "locked":
            raise LockHeld(
                f"locked by {msg.held_by.describe()}: another deploy holds the lock on this host",
                where=self.conn.host.name,
                fix="wait for it to finish, or pass --lock-wait SECONDS to queue behind it",
            )
        raise RemoteError(f"lock: {msg.error}", where=self.conn.host.name)

    @property
    def alive(self) -> bool:
        return self.chan is not None and not self.chan.closed and self.conn.alive

    def reacquire(self) -> "RemoteLock":
        """After the connection dropped (which released the lock on the host), take it again — unless another
        deploy took it meanwhile (LockHeld)."""
        self.chan = None
        self.token = uuid.uuid4().hex
        self.acquire()
        self.conn.log("deploy lock re-taken after the reconnect")
        return self

    def findings(self) -> list[str]:
        """What taking the lock found, one line each: a dead holder's stale lock, an interrupted deploy
        undone."""
        out = []
        if self.took_over:
            out.append(
                f"took over the stale deploy lock of {self.took_over.describe()}: its holder died without "
                "releasing it"
            )
        r = self.recovered
        if r:
            back = f"restored release {r.previous}" if r.previous else "no previous release, payload removed"
            done = f" ({', '.join(r.actions)})" if r.actions else ""
            out.append(f"the interrupted deploy of {r.release} by {r.holder} was undone: {back}{done}")
        return out

    def release(self) -> None:
        if self.chan is not None:
            try:
                self.chan.sendall(b"RELEASE\n")  # a clean end: the host forgets this holder
                self.chan.shutdown_write()
                self.chan.close()
            except Exception:
                pass
            self.chan = None
        if self.conn.lock is self:
            self.conn.lock = None

    def __enter__(self) -> "RemoteLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def locked_call(conn: Connection, request: Request[ReplyT], *, timeout: float | None = None) -> ReplyT:
    """A lock-holding agent operation. These operations are idempotent (stop, install, start of the same
    release, status, gc, materialize), so after a dropped connection they are re-run once: reconnect, re-take
    the lock."""
    lock = conn.lock
    try:
        return conn.call(request, timeout=timeout, retry=True, locked=True)
    except RemoteError as err:
        lost = isinstance(err, ConnectionLost) or "lock is not held" in err.message
        if not lost or lock is None:
            raise
    if not lock.alive:
        lock.reacquire()
    return conn.call(request, timeout=timeout, retry=True, locked=True)
