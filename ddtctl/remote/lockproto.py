"""The deploy lock's operations of the host agent (agent.py `op_lock`, `op_journal`), re-exported by
ddtctl/remote/protocol.py: the lock, what taking it found (a dead holder's stale lock, an interrupted deploy
undone), and the journal a deploy keeps while it changes the running server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddtctl.remote.wire import Op, Request, _dict, _typed


@dataclass
class LockHolder:
    holder: str
    since: float
    pid: int | None = None  # the holder's lock process on the host

    @classmethod
    def from_json(cls, data: Any) -> "LockHolder":
        d = data if isinstance(data, dict) else {}
        pid = d.get("pid")
        return cls(
            str(d.get("holder") or "?"), float(d.get("since") or 0), pid if isinstance(pid, int) else None
        )

    def describe(self) -> str:
        import time

        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since)) if self.since else "?"
        return f"{self.holder} (pid {self.pid if self.pid is not None else '?'} on the host, since {since})"


@dataclass
class Recovered:
    """An interrupted deploy the new lock holder undid on the host: `previous` put back in place of
    `release`."""

    release: str | None
    previous: str | None
    holder: str
    actions: list[str]

    @classmethod
    def from_json(cls, data: Any) -> "Recovered | None":
        if data is None:
            return None
        d = _dict(data, Op.LOCK)
        return cls(
            d.get("release"), d.get("previous"), str(d.get("holder") or "?"), list(d.get("actions") or [])
        )


@dataclass
class LockMessage:
    """One status line of the `lock` operation: taken (and what was found: the stale lock of a holder that
    died, an interrupted deploy undone), waiting behind another holder, or refused."""

    locked: bool = False
    waiting: bool = False
    error: str | None = None
    held_by: LockHolder = field(default_factory=lambda: LockHolder("?", 0.0))
    took_over: LockHolder | None = None
    recovered: Recovered | None = None

    @classmethod
    def from_json(cls, data: Any) -> "LockMessage":
        d = _dict(data, Op.LOCK)
        stale = d.get("took_over")
        return cls(
            bool(d.get("locked")),
            bool(d.get("waiting")),
            d.get("error"),
            LockHolder.from_json(d.get("held_by")),
            LockHolder.from_json(stale) if stale else None,
            Recovered.from_json(d.get("recovered")),
        )


@dataclass
class JournalReply:
    journal: dict | None

    @classmethod
    def from_json(cls, data: Any) -> "JournalReply":
        return cls(_typed(_dict(data, Op.JOURNAL), "journal", Op.JOURNAL, dict, nullable=True))


@dataclass(frozen=True)
class Lock(Request[LockMessage]):
    """Held for as long as the channel's stdin stays open (a clean release writes RELEASE first); each status
    line parses as a LockMessage. `session` is the same across a holder's reconnects: it resumes its own
    deploy instead of undoing it."""

    OP = Op.LOCK
    token: str
    holder: str
    wait_s: float
    session: str | None = None

    REPLY = LockMessage


@dataclass(frozen=True)
class Journal(Request[JournalReply]):
    """`begin`: the holder is about to stop/install/start `release` in place of `previous` (if it dies before
    `end` or before `release` is made current, the next holder puts `previous` back); `end`: done."""

    OP = Op.JOURNAL
    action: str
    release: str | None = None
    previous: str | None = None
    sglang_root: str | None = None

    REPLY = JournalReply
