"""The load side of `ddtctl tune`: SGLang's own benchmark (`python -m sglang.benchmark.serving`) run on the
host against the served point, with random token ids or the user's prompt file, and the figures read back.

The run is the agent's typed `bench` operation (ddtctl.remote.protocol.Bench, agent.py `op_bench`). What the
benchmark needs besides its argv travels on the operation's stdin, never on a command line (which `ps` on the
host shows and logs keep): the prompt file, written into the run's private temporary directory and passed as
`--dataset-path`, and the server's `--api-key`, given to the benchmark as OPENAI_API_KEY (SGLang 0.5.23's
benchmark sends it as `Authorization: Bearer KEY`, the header the server checks).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.remote.protocol import Bench
from ddtctl.safeio import loads_json, read_regular
from ddtctl.server_argv import TypedLaunch

DEFAULT_BENCH = ["{python}", "-m", "sglang.benchmark.serving"]
PROMPTS_MAX_BYTES = 64 << 20
MIN_OUTPUT_LEN = 4  # SGLang's custom dataset refuses a fixed output length below 4


@dataclass
class BenchRun:
    """One benchmark run at one concurrency (figures from SGLang's benchmark JSON)."""

    concurrency: int
    ok: bool
    output_tps: float | None = None
    ttft_ms: float | None = None  # median
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    accept_length: float | None = None
    completed: int | None = None
    error: str | None = None
    repeat: int | None = None  # which of the --repeats runs at its concurrency (None: from before --repeats)

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict) -> "BenchRun":
        fields: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        return cls(**fields)


# -- the user's prompt file ----------------------------------------------------------------------------------
@dataclass
class Prompts:
    """A prompt file, read and checked here, in the JSON-lines form of SGLang's `custom` dataset."""

    source: str
    jsonl: str  # one {"conversations": [{"role": "user", ...}, {"role": "assistant", ...}]} per line
    count: int
    sha256: str


def load_prompts(path: str) -> Prompts:
    """`--prompts FILE`: JSON lines (SGLang's custom dataset: `conversations` of `content`/`value` turns, or
    one `{"prompt": ...}` per line) or a ShareGPT-style JSON array. Every record must give a user turn."""
    try:  # a regular file, bounded (a FIFO or /dev/zero is refused, never read)
        raw = read_regular(path, PROMPTS_MAX_BYTES, what="prompt file")
    except UsageError as err:
        raise UsageError(
            f"cannot read the prompt file: {err.message}",
            where=path,
            fix=err.fix
            if "KiB" not in err.message
            else "keep the prompts the benchmark needs (--num-prompts)",
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UsageError(f"the prompt file is not UTF-8 (byte {err.start})", where=path) from None
    records = _records(text, path)
    lines = [
        json.dumps(
            {"conversations": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]},
            ensure_ascii=False,
        )
        for user, answer in (_turns(rec, where) for where, rec in records)
    ]
    if not lines:
        raise UsageError(
            "the prompt file holds no prompts",
            where=path,
            fix='one {"prompt": "..."} or {"conversations": [...]} per line',
        )
    jsonl = "\n".join(lines) + "\n"
    return Prompts(path, jsonl, len(lines), hashlib.sha256(jsonl.encode()).hexdigest())


def _records(text: str, path: str) -> list[tuple[str, Any]]:
    """(where, record) for each record: a JSON array's items, or each non-empty line of JSON lines."""
    if text.lstrip().startswith("["):
        items = loads_json(text, where=path, what="prompt file")
        if not isinstance(items, list):
            raise UsageError("the prompt file is not a JSON array", where=path)
        return [(f"{path}: item {i}", item) for i, item in enumerate(items)]
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"{path}:{number}", loads_json(line, where=path)))
        except UsageError:
            raise UsageError(
                "not a JSON line",
                where=f"{path}:{number}",
                fix="JSON lines (one object per line) or a ShareGPT-style JSON array",
            ) from None
    return out


def _turns(record: Any, where: str) -> tuple[str, str]:
    """(user turn, assistant turn or "") of one record."""
    if isinstance(record, dict) and isinstance(record.get("prompt"), str):
        return record["prompt"], ""
    convs = record.get("conversations", record.get("conversation")) if isinstance(record, dict) else None
    if isinstance(convs, list) and convs and all(isinstance(t, dict) for t in convs):
        texts = [t.get("content", t.get("value")) for t in convs[:2]]
        if all(isinstance(t, str) for t in texts):
            return texts[0], texts[1] if len(texts) > 1 else ""
    raise UsageError(
        "a record without a prompt",
        where=where,
        fix='give {"prompt": "..."} or {"conversations": [{"value": "..."}, ...]}',
    )


# -- the benchmark -------------------------------------------------------------------------------------------
def bench_argv(
    cmd: list[str],
    python: str,
    *,
    host: str,
    port: int,
    tokenizer: str | None,
    concurrency: int,
    opts: Any,
    prompts: Prompts | None = None,
) -> list[str]:
    """The benchmark's argv (`opts`: ddtctl.tune.TuneOptions); with `prompts`, SGLang's custom dataset with
    the output length fixed, so every point generates as much (the agent adds --dataset-path).

    Without, random prompts from SGLang's `random-ids` dataset, sent as token ids (--tokenize-prompt): it
    needs only the tokenizer's vocabulary size, where `random` downloads ShareGPT from Hugging Face (a GPU
    host without the internet fails every point) and sends text that a server launched with
    --skip-tokenizer-init cannot read; token ids also keep the input length exact."""
    argv = [str(a).replace("{python}", python) for a in cmd]
    argv += ["--backend", "sglang", "--host", host, "--port", str(port)]
    if prompts is not None:
        argv += ["--dataset-name", "custom", "--sharegpt-output-len", str(opts.output_len)]
    else:
        argv += [
            "--dataset-name",
            "random-ids",
            "--tokenize-prompt",
            "--random-input-len",
            str(opts.input_len),
            "--random-output-len",
            str(opts.output_len),
            "--random-range-ratio",
            "1.0",
        ]
    argv += [
        "--num-prompts",
        str(opts.num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--seed",
        str(opts.seed),
        "--disable-tqdm",
    ]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    return argv


def api_key(launch: TypedLaunch) -> str | None:
    """The server's `--api-key` (SGLang checks it on the benchmark's requests), if it is launched with one:
    the launch's typed value (the last one given, in any spelling argparse takes)."""
    key = launch.get("api_key")
    return key if isinstance(key, str) else None


def parse_bench_row(row: dict, concurrency: int) -> BenchRun:
    """Figures from one line of SGLang's benchmark --output-file (sglang/benchmark/serving.py's `result`)."""

    def num(*keys: str) -> float | None:
        for k in keys:
            v = row.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
        return None

    tps = num("output_throughput")
    return BenchRun(
        concurrency,
        tps is not None,
        output_tps=tps,
        ttft_ms=num("median_ttft_ms", "mean_ttft_ms"),
        itl_p50_ms=num("median_itl_ms", "p50_itl_ms"),
        itl_p99_ms=num("p99_itl_ms"),
        accept_length=num("accept_length", "spec_accept_length"),
        completed=int(row["completed"]) if isinstance(row.get("completed"), int) else None,
        error=None if tps is not None else "no output_throughput in the benchmark's JSON",
    )


def run_bench(
    conn: Any,
    argv: list[str],
    concurrency: int,
    timeout_s: float,
    *,
    prompts: Prompts | None = None,
    key: str | None = None,
) -> BenchRun:
    """One benchmark run through the agent's `bench` operation; the prompt file and the API key go on its
    stdin."""
    env = {"OPENAI_API_KEY": key} if key else {}
    request = Bench(tuple(argv), timeout_s, env=env, prompts=prompts.jsonl if prompts is not None else None)
    reply = conn.call(request, timeout=timeout_s + 60)
    if not reply.ok:
        tail = [ln for ln in reply.tail.splitlines() if ln.strip()]
        last = tail[-1] if tail else "no output"
        return BenchRun(concurrency, False, error=f"benchmark exit {reply.rc}: {last}")
    return parse_bench_row(reply.rows[-1], concurrency)


def server_metrics(info: dict | None) -> dict | None:
    """The speculative part of /get_server_info: internal_states[0] (avg_spec_accept_length, DDTREE's
    `ddtree`)."""
    if not isinstance(info, dict):
        return None
    if isinstance(info.get("decode"), list) and info["decode"]:
        info = info["decode"][0]
    states = info.get("internal_states")
    if not isinstance(states, list) or not states or not isinstance(states[0], dict):
        return None
    st = states[0]
    keep = {k: v for k, v in st.items() if "spec" in k or "accept" in k or k == "ddtree"}
    return keep or None
