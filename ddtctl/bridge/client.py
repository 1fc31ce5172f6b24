"""The ddtctl side of the resolver bridge: starts resolver_worker.py under the managed env's python and talks
JSON lines to it. Stdlib only; never imports sglang or torch."""

from __future__ import annotations

import collections
import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from ddtctl.errors import DdtctlError
from ddtctl.procs import MAX_LINE, OVERFLOW, kill_group, pump_lines, spawn_python

WORKER_SCRIPT = Path(__file__).resolve().parent / "resolver_worker.py"
# Characters on stdout that are not protocol lines (each counted 1 KiB more), before the worker is killed:
# the worker writes only protocol lines there (fd 1 goes to stderr): this is a broken interpreter.
MAX_NOISE = 8 * 1024 * 1024
_QUEUE_LINES = 16  # lines read ahead of the reader: a flood waits on the pipe, not in memory


def stderr_cause(stderr: str) -> str:
    """The line of a dead process's stderr that says why: a C++ abort ends with stack frames, a Python crash
    with the exception; the last line naming an error or an abort wins over the frames after it."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.strip().startswith("frame #")]
    for markers in (
        ("what():",),
        ("Error", "error:", "Exception", "Aborted", "Segmentation fault", "Killed"),
    ):
        for line in reversed(lines):
            if any(m in line for m in markers):
                return line
    return lines[-1] if lines else "no output on stderr"


class WorkerError(Exception):
    """The worker could not answer (it crashed, hung, or never started)."""

    kind = "WorkerError"

    def __init__(self, message: str, *, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.stderr_tail = stderr_tail


class WorkerStartError(WorkerError):
    kind = "WorkerStartError"


class WorkerCrashed(WorkerError):
    kind = "ResolverCrashed"


class WorkerTimeout(WorkerError):
    kind = "ResolverTimeout"


class ResolverClient:
    """One warm resolver process. `start()` waits until sglang is imported; `resolve()` answers one argv."""

    def __init__(
        self,
        python: str | os.PathLike,
        *,
        extra_sys_path: Sequence[str | os.PathLike] = (),
        startup_timeout_s: float = 180.0,
        env: dict[str, str] | None = None,
        script: str | os.PathLike | None = None,
    ) -> None:
        self.python = str(python)
        self.extra_sys_path = [str(Path(p)) for p in extra_sys_path]
        self.startup_timeout_s = startup_timeout_s
        self.extra_env = dict(env or {})
        self.script = str(script or WORKER_SCRIPT)
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.starts = 0
        self._lines: queue.Queue = queue.Queue(maxsize=_QUEUE_LINES)
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._noise = 0  # characters of non-protocol output on stdout since the start
        self._next_id = 0

    # -- lifecycle -------------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> dict:
        if self.alive:
            return self.info
        env = dict(os.environ)
        env.update(self.extra_env)
        env["DDTCTL_EXTRA_SYS_PATH"] = os.pathsep.join(self.extra_sys_path)
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env.setdefault("PYTHONWARNINGS", "ignore")
        self._lines = queue.Queue(maxsize=_QUEUE_LINES)
        self._stderr = collections.deque(maxlen=200)
        self._noise = 0
        # -I: do not put the script's directory or the user's site-packages on sys.path. Its own process
        # group, tied to ddtctl's life (procs.spawn_python): a kill ends whatever it started too.
        try:
            self.proc = spawn_python(
                self.python,
                [self.script],
                unbuffered=True,
                what="the resolver",
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
            )
        except DdtctlError as exc:
            raise WorkerStartError(f"cannot start the resolver with {self.python}: {exc.message}") from None
        self.starts += 1
        proc = self.proc
        threading.Thread(target=self._pump, args=(proc.stdout, self._lines), daemon=True).start()
        threading.Thread(target=self._drain, args=(proc.stderr, self._stderr), daemon=True).start()
        msg = self._read(self.startup_timeout_s, what="start-up (importing sglang)", start=True)
        if not msg.get("ready"):
            err = msg.get("error") or {}
            self.kill()
            raise WorkerStartError(
                f"the resolver could not import sglang: {err.get('type')}: {err.get('message')}",
                stderr_tail=msg.get("traceback", "") or self.stderr_tail(),
            )
        self.info = msg
        return msg

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                proc.stdin.flush()
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        kill_group(proc)
        self.proc = None

    def __enter__(self) -> "ResolverClient":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- requests --------------------------------------------------------------------------------------------
    def resolve(
        self,
        argv: Sequence[str],
        *,
        platform: dict | None = None,
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> dict:
        """Resolve one argv (with the server environment `env` applied for this resolve only); raises
        WorkerTimeout / WorkerCrashed (the worker is then dead; call start() again)."""
        return self.request(
            {"op": "resolve", "argv": [str(a) for a in argv], "platform": platform, "env": dict(env or {})},
            timeout_s,
        )

    def ping(self, timeout_s: float = 10.0) -> dict:
        return self.request({"op": "ping"}, timeout_s)

    def request(self, payload: dict, timeout_s: float) -> dict:
        if not self.alive:
            self.start()
        self._next_id += 1
        payload = dict(payload, id=self._next_id)
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(payload) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the read below reports the crash with the exit status
        while True:
            msg = self._read(timeout_s, what="the request")
            if msg.get("id") == payload["id"]:
                return msg

    def stderr_tail(self, lines: int = 30) -> str:
        return "\n".join(list(self._stderr)[-lines:])

    def _read(self, timeout_s: float, *, what: str, start: bool = False) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerTimeout(
                    f"the resolver did not answer {what} within {timeout_s:g} s (killed)",
                    stderr_tail=self.stderr_tail(),
                )
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is OVERFLOW:
                self.kill()
                cls = WorkerStartError if start else WorkerCrashed
                raise cls(
                    f"the resolver printed a line over {MAX_LINE >> 20} MiB during {what} (killed)",
                    stderr_tail=self.stderr_tail(),
                )
            if line is None:  # EOF: the process died
                proc = self.proc
                code = None
                if proc is not None:
                    try:
                        code = proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                self.proc = None
                time.sleep(0.05)  # let the stderr pump catch the last lines
                tail = self.stderr_tail()
                cls = WorkerStartError if start else WorkerCrashed
                raise cls(
                    f"the resolver process exited (status {_describe_status(code)}) during {what}"
                    + (f": {_last_line(tail)}" if tail else ""),
                    stderr_tail=tail,
                )
            try:
                return json.loads(line)
            except (ValueError, RecursionError):
                self._stderr.append(f"[non-protocol output] {line.rstrip()[:500]}")
                self._noise += len(line) + 1024  # a line costs a queue hop: many short ones count too
                if self._noise > MAX_NOISE:
                    self.kill()
                    cls = WorkerStartError if start else WorkerCrashed
                    raise cls(
                        f"the resolver printed over {MAX_NOISE >> 20} MiB (or {MAX_NOISE >> 10} lines) that "
                        f"are not its protocol during {what} (killed)",
                        stderr_tail=self.stderr_tail(),
                    ) from None

    @staticmethod
    def _pump(stream, sink: queue.Queue) -> None:
        pump_lines(stream, sink)

    @staticmethod
    def _drain(stream, sink: collections.deque) -> None:
        """Keep the last lines of stderr, each cut at 4 KiB: a flood without newlines costs no memory."""
        try:
            while chunk := stream.readline(4096):
                sink.append(chunk.rstrip("\n"))
        except (OSError, ValueError):
            pass


def _describe_status(code: int | None) -> str:
    if code is None:
        return "unknown"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return str(code)


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return ""
