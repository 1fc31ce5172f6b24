"""Running another program on this machine, with a bound on what it prints and a deadline (issue #31).

Every local subprocess ddtctl starts goes through here (tests/test_io_boundary.py checks it):

- `run_bounded(cmd, timeout_s=..., limit=...)`: runs `cmd` to its end, reading stdout and stderr together
  with at most `limit` bytes and `timeout_s` seconds; on an overrun the whole process group is killed and a
  one-line error is raised (in the spirit of pre-commit's `cmd_output`). An interpreter that floods, drips or
  hangs costs at most the deadline and the bound, never the machine's memory.
- `python_output(python, args_or_code, ...)`: `run_bounded` for another Python interpreter (the target's,
  the managed env's): `python -I` unless told otherwise, a str is a program run with `-c`. The one way ddtctl
  starts another Python locally to its end (tests/test_procs.py checks that no other `[python, "-c", ...]`
  is built); `spawn_python` is its long-lived sibling (the resolver worker).
- `spawn(cmd, ...)`: a long-lived child (the resolver bridge) in its own process group, tied to ddtctl's life;
  `kill_group(proc)` ends it with everything it started; `pump_lines` reads its output in bounded lines.

The code that runs on the GPU host (ddtctl/remote/agent.py, the payload) is standard-library only and has its
own limits; it does not import this module.
"""

from __future__ import annotations

import os
import queue
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ddtctl.errors import DdtctlError, EnvironmentMissing

DEFAULT_LIMIT = 64 * 1024 * 1024  # bytes of stdout + stderr: far above any catalog dump or pip log
MAX_LINE = 16 * 1024 * 1024  # one protocol line (a resolved ServerArgs is tens of KiB)
OVERFLOW = object()  # put by pump_lines when a line or the total is over its bound


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str  # "" when stderr was merged into stdout


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: SIGKILL the child when ddtctl dies, so an interrupted run leaves nothing behind."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


def spawn(cmd: Sequence[str], *, error: type[DdtctlError] = EnvironmentMissing, what: str = "", **kw: Any):
    """Popen(cmd) in a new process group (so `kill_group` ends its children too), killed with ddtctl.
    PR_SET_PDEATHSIG follows the creating thread: only the main thread ties the child to its own life."""
    kw.setdefault("start_new_session", True)
    if threading.current_thread() is threading.main_thread():
        kw.setdefault("preexec_fn", _die_with_parent)
    try:
        return subprocess.Popen(list(cmd), **kw)
    except (OSError, ValueError) as err:
        text = getattr(err, "strerror", None) or str(err)
        raise error(f"cannot start {what or cmd[0]}: {text}", where=str(cmd[0])) from None


def kill_group(proc: subprocess.Popen, *, wait_s: float = 10.0) -> None:
    """SIGKILL `proc`'s process group (spawn made it the leader) and reap it. Only while the leader is not
    yet reaped: its pid, and so the group id, cannot belong to anyone else then."""
    if proc.returncode is None:  # not reaped (maybe a zombie): the group id is still its own
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignored
        pass


def pump_lines(stream: IO[str], sink: queue.Queue, *, max_line: int = MAX_LINE, max_total: int = 0) -> None:
    """Put each line of `stream` on `sink`, then None at EOF. A line longer than `max_line`, or more than
    `max_total` characters in all (0: no total bound), puts OVERFLOW and stops reading (the writer then blocks
    until it is killed; nothing piles up in memory)."""
    total = 0
    try:
        while True:
            line = stream.readline(max_line + 1)
            if not line:
                break
            total += len(line)
            if len(line) > max_line or (max_total and total > max_total):
                sink.put(OVERFLOW)
                return
            sink.put(line)
    except (OSError, ValueError):
        pass
    sink.put(None)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    try:
        assert proc.stdin is not None
        proc.stdin.write(data)
        proc.stdin.close()
    except (OSError, ValueError):
        pass  # it exited or closed its stdin: its status says why


def _overrun(proc: subprocess.Popen, error: type[DdtctlError], message: str, where: str) -> DdtctlError:
    kill_group(proc)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return error(message, where=where)


def run_bounded(
    cmd: Sequence[str],
    *,
    timeout_s: float,
    limit: int = DEFAULT_LIMIT,
    what: str = "",
    input: str | bytes | None = None,
    merge_stderr: bool = False,
    on_output: Callable[[bytes], None] | None = None,
    error: type[DdtctlError] = EnvironmentMissing,
    start_error: type[DdtctlError] | None = None,
    **kw: Any,
) -> Completed:
    """Run `cmd` to its end with at most `limit` bytes of stdout + stderr and `timeout_s` seconds in all;
    `error` (one line, where=cmd[0]) when it overruns (its process group is then killed), `start_error`
    (default: `error`) when it cannot start.
    `on_output` sees each chunk as it comes (a log, a progress line). Output is decoded as UTF-8 (replace)."""
    label = what or os.path.basename(str(cmd[0]))
    where = str(cmd[0])
    proc = spawn(
        cmd,
        error=start_error or error,
        what=label,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        **kw,
    )
    if input is not None:
        data = input.encode("utf-8") if isinstance(input, str) else input
        threading.Thread(target=_feed, args=(proc, data), daemon=True).start()
    deadline = time.monotonic() + timeout_s
    streams = {proc.stdout.fileno(): bytearray()}
    if not merge_stderr:
        streams[proc.stderr.fileno()] = bytearray()
    total = 0
    with selectors.DefaultSelector() as sel:
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _overrun(proc, error, f"{label} did not finish within {timeout_s:g} s (killed)", where)
            for key, _ in sel.select(remaining):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                total += len(chunk)
                if total > limit:
                    raise _overrun(
                        proc, error, f"{label} printed more than {limit >> 20} MiB (killed)", where
                    )
                streams[key.fd] += chunk
                if on_output is not None:
                    on_output(chunk)
    try:
        code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise _overrun(proc, error, f"{label} did not exit within {timeout_s:g} s (killed)", where) from None
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    outs = [bytes(b).decode("utf-8", "replace") for b in streams.values()]
    return Completed(code, outs[0], outs[1] if len(outs) > 1 else "")


def python_argv(
    python: str | os.PathLike[str],
    args_or_code: str | Sequence[str],
    *,
    isolated: bool = True,
    unbuffered: bool = False,
) -> list[str]:
    """The argv that runs another Python: `python [-I] [-u] -c CODE` for a str, else
    `python [-I] [-u] ARGS...` (a script and its arguments, `-m module ...`). -I (isolated: no script
    directory, user site-packages or PYTHON* variables) unless `isolated=False`."""
    flags = (["-I"] if isolated else []) + (["-u"] if unbuffered else [])
    args = ["-c", args_or_code] if isinstance(args_or_code, str) else [str(a) for a in args_or_code]
    return [str(python), *flags, *args]


def python_output(
    python: str | os.PathLike[str],
    args_or_code: str | Sequence[str],
    *,
    timeout_s: float,
    limit: int = DEFAULT_LIMIT,
    what: str = "",
    isolated: bool = True,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    error: type[DdtctlError] = EnvironmentMissing,
    start_error: type[DdtctlError] | None = None,
    **kw: Any,
) -> Completed:
    """Run another Python interpreter to its end (`python_argv`) through `run_bounded`: at most `limit` bytes
    of output and `timeout_s` seconds, else `error` in one line naming `what`; `start_error` when `python`
    cannot start. `env`: its whole environment (None: ddtctl's; `isolated` ignores the PYTHON* ones)."""
    return run_bounded(
        python_argv(python, args_or_code, isolated=isolated),
        timeout_s=timeout_s,
        limit=limit,
        what=what,
        input=input,
        env=env,
        error=error,
        start_error=start_error,
        **kw,
    )


def spawn_python(
    python: str | os.PathLike[str],
    args_or_code: str | Sequence[str],
    *,
    isolated: bool = True,
    unbuffered: bool = False,
    error: type[DdtctlError] = EnvironmentMissing,
    what: str = "",
    **kw: Any,
):
    """`spawn` for a long-lived Python child (`python_argv`): its own process group, killed with ddtctl."""
    argv = python_argv(python, args_or_code, isolated=isolated, unbuffered=unbuffered)
    return spawn(argv, error=error, what=what, **kw)
