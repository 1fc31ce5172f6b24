"""The agent's `bench` operation (agent.py `op_bench`), re-exported by ddtctl/remote/protocol.py: a load
generator (SGLang's benchmark client, `python -m sglang.benchmark.serving`) run on the host against the served
release, as `ddtctl tune` measures each point (ddtctl/tune/bench.py).

The agent runs `argv` with `--output-file` in a private temporary directory (removed afterwards) and returns
the JSON lines the benchmark wrote, its exit status and the tail of its output (at most `tail_bytes`). What
must stay off the host's command line travels on the operation's stdin, never in its parameters: `env` (the
server's API key as OPENAI_API_KEY) and `prompts` (a JSON-lines dataset, written into the temporary directory
and passed as `--dataset-path`). Parsed here and nowhere else; a reply of another shape is the protocol's
one-line RemoteError naming the field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ddtctl.remote.wire import Op, Request, _checked, _dict, _typed

_OP = Op.BENCH
TIMED_OUT_RC = 124  # the benchmark ran past timeout_s (killed)
NOT_RUN_RC = 127  # the benchmark could not be started (no such program, ...)


@dataclass
class BenchReply:
    """The benchmark's exit status (TIMED_OUT_RC, NOT_RUN_RC), the tail of its output and the rows (JSON
    objects) of its --output-file, in order."""

    rc: int
    tail: str
    rows: list[dict]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.rc == 0 and bool(self.rows)

    @classmethod
    def from_json(cls, data: Any) -> "BenchReply":
        d = _dict(data, _OP)
        rows = _typed(d, "rows", _OP, list)
        return cls(
            _typed(d, "rc", _OP, int),
            _typed(d, "tail", _OP, str),
            [_checked(row, dict, _OP, f"rows[{i}]") for i, row in enumerate(rows)],
            _typed(d, "elapsed_s", _OP, float),
        )


@dataclass(frozen=True)
class Bench(Request[BenchReply]):
    """Run `argv` (the benchmark, without --output-file and --dataset-path: the agent adds them) for at most
    `timeout_s`; `env` and `prompts` go on stdin (they never appear in the request's parameters or repr)."""

    OP = Op.BENCH
    argv: tuple[str, ...]
    timeout_s: float
    tail_bytes: int = 3000
    env: dict[str, str] = field(default_factory=dict, repr=False)
    prompts: str | None = field(default=None, repr=False)

    REPLY = BenchReply

    def params(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "timeout_s": self.timeout_s, "tail_bytes": self.tail_bytes}

    def stdin(self) -> bytes:
        return json.dumps({"env": dict(self.env), "prompts": self.prompts}).encode()
