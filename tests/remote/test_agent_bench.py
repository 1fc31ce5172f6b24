"""The agent's `bench` operation (ddtctl.remote.protocol.Bench, agent.py `op_bench`) run in-process on a temp work
dir against a small stand-in benchmark (no SSH; `ddtctl tune` runs it over SSH in tests/remote/test_tune.py):
the rows of its --output-file, its bounded output, the API key and the prompts that travel on stdin only, the
temporary directory removed, a timeout and a program that cannot start."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import time
from pathlib import Path

import pytest

from ddtctl.errors import RemoteError
from ddtctl.remote import protocol as p

AGENT = Path(__file__).resolve().parents[2] / "ddtctl" / "remote" / "agent.py"
SECRET = "bench-s3cr3t"

# A stand-in benchmark: argv ends with [--dataset-path F] --output-file OUT; it prints 200 lines and the dataset
# path, and writes two rows (the key it got as OPENAI_API_KEY, the prompts it read) and a torn line to OUT.
FAKE = r"""
import json, os, sys
a = sys.argv[1:]
out = a[a.index("--output-file") + 1]
data = a[a.index("--dataset-path") + 1] if "--dataset-path" in a else None
for i in range(200):
    print("noise line %d" % i)
print("dataset " + str(data))
prompts = open(data).read() if data else None
with open(out, "w") as f:
    f.write(json.dumps({"completed": 1, "key": os.environ.get("OPENAI_API_KEY")}) + "\n")
    f.write(json.dumps({"completed": 2, "output_throughput": 9.5, "prompts": prompts}) + "\n")
    f.write('{"torn": ')
print("done")
"""


@pytest.fixture
def agent(tmp_path):
    spec = importlib.util.spec_from_file_location("ddtctl_agent_bench_test", AGENT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.W = str(tmp_path / "w")
    Path(mod.W).mkdir()
    return mod


def _bench(agent, monkeypatch, request: p.Bench) -> p.BenchReply:
    """The request as it travels: its parameters through JSON, its stdin on the agent's stdin."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(request.stdin())))
    params = json.loads(json.dumps(request.params()))
    return request.parse(json.loads(json.dumps(agent.OPS["bench"](params))))


def test_bench_returns_the_rows_a_bounded_tail_and_keeps_secrets_off_the_parameters(agent, monkeypatch):
    req = p.Bench((sys.executable, "-c", FAKE), 30, tail_bytes=100, env={"OPENAI_API_KEY": SECRET},
                  prompts='{"prompt": "hi"}\n')
    assert SECRET not in json.dumps(req.params()) + repr(req) and '"hi"' not in json.dumps(req.params()) + repr(req)
    reply = _bench(agent, monkeypatch, req)
    assert reply.ok and reply.rc == 0 and reply.elapsed_s >= 0
    assert [r["completed"] for r in reply.rows] == [1, 2]  # the torn last line is left out
    assert reply.rows[0]["key"] == SECRET and reply.rows[1]["prompts"] == '{"prompt": "hi"}\n'
    assert len(reply.tail.encode()) <= 100 and reply.tail.endswith("done\n")
    # the dataset lived in the run's private temporary directory, removed afterwards
    dataset = Path(next(ln for ln in reply.tail.splitlines() if ln.startswith("dataset ")).split(" ", 1)[1])
    assert dataset.name == "prompts.jsonl" and not dataset.parent.exists()


def test_without_prompts_no_dataset_path_and_without_a_key_none_in_the_env(agent, monkeypatch):
    reply = _bench(agent, monkeypatch, p.Bench((sys.executable, "-c", FAKE), 30))
    assert "dataset None" in reply.tail and reply.rows[0]["key"] is None and reply.rows[1]["prompts"] is None


def test_a_benchmark_that_runs_too_long_or_cannot_start_is_a_reply_not_an_error(agent, monkeypatch):
    slow = _bench(agent, monkeypatch, p.Bench((sys.executable, "-c", "import time; time.sleep(10)"), 0.3))
    assert (slow.rc, slow.rows, slow.ok) == (124, [], False) and "timed out after 0.3s" in slow.tail
    missing = _bench(agent, monkeypatch, p.Bench(("/no/such/benchmark",), 5))
    assert missing.rc == 127 and "cannot run the benchmark" in missing.tail and not missing.ok
    failed = _bench(agent, monkeypatch, p.Bench((sys.executable, "-c", "print('boom'); raise SystemExit(3)"), 5))
    assert (failed.rc, failed.rows) == (3, []) and failed.tail == "boom\n"


def test_a_bench_reply_of_another_shape_names_the_field_and_bench_is_not_batched(agent):
    with pytest.raises(RemoteError, match="the agent's `bench` reply lacks 'rows'"):
        p.Bench(("x",), 1).parse({"rc": 0, "tail": "", "elapsed_s": 0.1})
    with pytest.raises(RemoteError, match=r"has 'rows\[0\]' as a list, not an object"):
        p.Bench(("x",), 1).parse({"rc": 0, "tail": "", "rows": [[1]], "elapsed_s": 0.1})
    with pytest.raises(agent.AgentError, match="'bench' cannot be batched"):
        agent.OPS["batch"]({"ops": [["bench", {"argv": ["x"], "timeout_s": 1}]]})


def test_a_timeout_stops_the_benchmarks_own_children_too(agent, monkeypatch, tmp_path):
    """A load generator that starts workers (here: one sleeping grandchild): on a timeout the whole process group
    goes, not only the process the agent started."""
    pid_file = tmp_path / "grandchild.pid"
    spawner = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(60)\n"
    )
    reply = _bench(agent, monkeypatch, p.Bench((sys.executable, "-c", spawner), 2))
    assert reply.rc == 124 and "timed out" in reply.tail
    pid = int(pid_file.read_text())

    def gone() -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        return state in ("Z", "X")  # a zombie nobody reaped yet has stopped running

    deadline = time.time() + 5
    while not gone() and time.time() < deadline:
        time.sleep(0.05)
    assert gone(), f"the benchmark's child {pid} outlived the timeout"


def test_a_bench_input_over_the_limit_is_refused_before_anything_runs(agent, monkeypatch, tmp_path):
    monkeypatch.setattr(agent, "MAX_BENCH_INPUT", 1024)
    marker = tmp_path / "ran"
    req = p.Bench((sys.executable, "-c", f"open({str(marker)!r}, 'w')"), 5, prompts="x" * 2000)
    with pytest.raises(agent.AgentError, match=r"input \(its env and prompts dataset\) is over 0 MiB"):
        _bench(agent, monkeypatch, req)
    assert not marker.exists()


def test_the_bench_input_bound_counts_bytes_not_characters(agent, monkeypatch):
    """700 two-byte characters: under the 1024 limit as text, over it as the bytes that cross the wire."""
    monkeypatch.setattr(agent, "MAX_BENCH_INPUT", 1024)
    raw = json.dumps({"env": {}, "prompts": "é" * 700}, ensure_ascii=False).encode()
    assert len(raw.decode()) < 1024 < len(raw)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    with pytest.raises(agent.AgentError, match="is over 0 MiB"):
        agent.OPS["bench"]({"argv": [sys.executable, "-c", "pass"], "timeout_s": 5})
