"""What a remote command leaves running, and how much of its reply ddtctl reads (issue #31: in 14 scenarios
a process was still running on the host after ddtctl gave up: a remote python that hangs, floods, drips, exits
at once leaving a child, prints garbage or deep JSON, or a model config that is a FIFO).

Every command transport.Connection runs is wrapped so that the host reports its process group first: sshd
starts each session's command as a session (and process group) leader, and the wrapper prints that group's id
on stderr before it execs the command, so everything the command starts (unless it leaves the session on
purpose, as the agent does for the server it launches) is in that group. When ddtctl stops waiting (a timeout,
too much output, a reply that is not the agent's, an exception, Ctrl-C) it ends the group: TERM, then KILL
after a grace period, over a session of its own, and says so in its error.

Replies are bounded here too: at most MAX_STDOUT bytes of stdout (a flood is stopped, not buffered), the last
MAX_STDERR bytes of stderr, and JSON at most MAX_JSON_DEPTH deep.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from ddtctl.errors import RemoteError

MAX_STDOUT = 32 * 1024 * 1024
MAX_STDERR = 256 * 1024
MAX_JSON_DEPTH = 64
KILL_GRACE_S = 2.0

_MARK = b"ddtctl-pgid "
# POSIX sh on the host: $$ is the shell sshd started, the session leader (its pid is the group id)
_WRAP = 'echo "ddtctl-pgid $$" >&2; exec "$@"'
_MARK_LINE = re.compile(rb"ddtctl-pgid (\d+)\n")
# TERM the group, KILL it when still there after the grace period (polled every 0.1 s); `kill -SIG -PGID`,
# since dash's kill takes no `--`
_KILL = (
    'kill -TERM "-$1" 2>/dev/null || exit 0; n=0; while [ "$n" -lt "$2" ]; do '
    'kill -0 "-$1" 2>/dev/null || exit 0; sleep 0.1; n=$((n+1)); done; '
    'kill -KILL "-$1" 2>/dev/null; exit 0'
)


def wrap(command: str) -> str:
    """The shell line sshd runs for `command` (an already quoted argv): it reports its process group first."""
    return f"exec sh -c {shlex.quote(_WRAP)} ddtctl {command}"


def kill_argv(pgid: int) -> list[str]:
    return ["sh", "-c", _KILL, "ddtctl", str(int(pgid)), str(int(KILL_GRACE_S * 10))]


@dataclass
class Streams:
    """A command's output as read so far, bounded: stdout up to MAX_STDOUT, stderr's tail, the group id."""

    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    pgid: int | None = None
    _head: bytes = b""  # stderr until the group id line is complete
    _seen: bool = False

    def add_err(self, data: bytes) -> None:
        if not self._seen:
            self._head += data
            m = _MARK_LINE.match(self._head)
            if m:
                self.pgid = int(m.group(1))
                data = self._head[m.end() :]
            elif len(self._head) < 40 and b"\n" not in self._head and _MARK.startswith(self._head[:12]):
                return  # the line is still arriving
            else:  # no wrapper line: plain stderr
                data = self._head
            self._seen, self._head = True, b""
        self.err += data
        if len(self.err) > MAX_STDERR:
            del self.err[: len(self.err) - MAX_STDERR]

    def over(self) -> bool:
        return len(self.out) > MAX_STDOUT


def kill_note(pgid: int | None, ended: bool | None) -> str:
    """What the error says about the command's processes on the host."""
    if pgid is None:
        return ""
    if ended:
        return f"; ended its processes on the host (process group {pgid})"
    return f"; could not end its processes on the host (process group {pgid}: kill -KILL -{pgid} there)"


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_JSON_DEPTH:
            return d
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def _nesting(text: str) -> int:
    """An upper bound on the nesting of a JSON text (brackets outside strings), found before parsing it."""
    deepest = depth = 0
    in_str = esc = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
        elif c in "]}":
            depth -= 1
    return deepest


def load_reply_json(line: str, op: str, where: str) -> dict:
    """One reply line of the agent, parsed: a JSON object at most MAX_JSON_DEPTH deep, else a RemoteError."""
    fix = "check the host's python (inventory `python:`) runs ddtctl's agent: python3 >= 3.8"
    if _nesting(line) > MAX_JSON_DEPTH:
        raise RemoteError(
            f"remote agent `{op}` replied JSON nested more than {MAX_JSON_DEPTH} deep", where=where, fix=fix
        )
    try:
        reply = json.loads(line)
    except (ValueError, RecursionError):
        shown = line[:60] + ("..." if len(line) > 60 else "")
        what = f"remote agent `{op}` replied what is not JSON: {shown!r}"
        raise RemoteError(what, where=where, fix=fix) from None
    if not isinstance(reply, dict) or _depth(reply) > MAX_JSON_DEPTH:
        raise RemoteError(f"remote agent `{op}` replied an unexpected JSON value", where=where, fix=fix)
    return reply


def agent_reply(res: Any, op: str, where: str) -> dict:
    """The agent's reply object (its last JSON line, bounded: rgroup.load_reply_json); RemoteError when the
    command printed none."""
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        detail = (res.stderr or res.stdout).strip().splitlines()
        hint = detail[-1][:200] if detail else f"exit status {res.rc}"
        raise RemoteError(
            f"remote agent `{op}` failed: {hint}",
            where=where,
            fix="check the host's python (inventory `python:`) runs: python3 >= 3.8",
        )
    return load_reply_json(lines[-1], op, where)


def parse_agent_reply(res: Any, op: str, where: str) -> Any:
    reply = agent_reply(res, op, where)
    if not reply.get("ok"):
        raise RemoteError(f"{op}: {reply.get('error')}", where=where)
    return reply.get("result")


def read_stderr(chan: Any, streams: Streams) -> None:
    """What a paramiko channel has on stderr now, into `streams` (which keeps its tail and the group id)."""
    while chan.recv_stderr_ready():
        streams.add_err(chan.recv_stderr(65536))


def await_group(chan: Any, streams: Streams, wait_s: float = 2.0) -> None:
    """Read a paramiko channel's stderr until the command's process-group line arrives (the wrapper writes it
    before anything else runs), for at most `wait_s`: without it nothing on the host can be ended."""
    deadline = time.monotonic() + wait_s
    try:
        while streams.pgid is None and time.monotonic() < deadline and not chan.closed:
            if chan.recv_stderr_ready():
                read_stderr(chan, streams)
            else:
                time.sleep(0.02)
    except Exception:  # noqa: BLE001  (paramiko's SSHException, EOF, OS errors: a closed session has no group)
        return
