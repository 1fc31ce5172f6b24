"""ddtctl.remote.protocol against the agent itself (run in-process on a temp work dir, no SSH): every
operation has a typed request, the agent's replies parse into the reply types, and a reply lacking a field is
a RemoteError."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from ddtctl.errors import ExitCode, RemoteError
from ddtctl.remote import protocol as p

AGENT = Path(__file__).resolve().parents[2] / "ddtctl" / "remote" / "agent.py"
STANDIN_SMI = Path(__file__).resolve().parent / "standins" / "standin_nvidia_smi.py"


@pytest.fixture
def agent(tmp_path):
    spec = importlib.util.spec_from_file_location("ddtctl_agent_protocol_test", AGENT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.W = str(tmp_path / "w")
    Path(mod.W).mkdir()
    return mod


def _run(agent, request: p.Request):
    """The request's wire parameters through JSON (as they travel), the agent's result back through JSON."""
    params = json.loads(json.dumps(request.params()))
    return request.parse(json.loads(json.dumps(agent.OPS[request.OP.value](params))))


def _request_classes() -> dict[str, type]:
    return {
        cls.OP.value: cls
        for cls in vars(p).values()
        if isinstance(cls, type) and issubclass(cls, p.Request) and cls is not p.Request
    }


def test_every_agent_operation_has_a_typed_request(agent):
    assert set(agent.OPS) == {op.value for op in p.Op} == set(_request_classes())


def test_state_probe_and_logs_parse_from_the_agents_own_replies(agent):
    st = _run(agent, p.State())
    assert (
        isinstance(st, p.StateReply) and st.state.current is None and st.releases == [] and st.server is None
    )
    logs = Path(agent.W) / "logs"
    logs.mkdir()
    (logs / "r1.log").write_text("one\ntwo\nthree\n")
    tail = _run(agent, p.Logs(lines=2, log_release="r1"))
    assert (tail.log, tail.log_offset) == ("two\nthree", 14) and tail.log_path.endswith("logs/r1.log")
    more = _run(agent, p.Logs(log_offset=4, log_release="r1"))
    assert more.log == "two\nthree\n" and more.log_offset == 14
    probe = _run(agent, p.Probe(30000, log_offset=0, log_release="r1"))
    assert not probe.running and probe.health is None and probe.log.log == "one\ntwo\nthree\n"


def test_params_leave_out_none_and_keep_tuples_as_lists():
    assert p.Probe(30000).params() == {"port": 30000}
    assert p.Probe(1, "h", 0, "r", server_info=False).params() == {
        "port": 1,
        "host": "h",
        "log_offset": 0,
        "log_release": "r",
        "server_info": False,
    }
    assert p.Warmup("r1", ("python", "-c", "x"), 60).params() == {
        "id": "r1",
        "argv": ["python", "-c", "x"],
        "timeout_s": 60,
    }


def test_batch_sends_each_operation_and_parses_each_reply():
    batch = p.Batch((p.SetStatus("r1", "ok", make_current=True), p.Gc(5)))
    assert batch.params() == {
        "ops": [["set_status", {"id": "r1", "status": "ok", "make_current": True}], ["gc", {"keep": 5}]]
    }
    status, gc = batch.parse(
        [{"state": {"current": "r1"}}, {"removed_releases": ["r0"], "dropped_objects": 3}]
    )
    assert status.state.current == "r1" and gc.removed_releases == ["r0"] and gc.dropped_objects == 3
    with pytest.raises(RemoteError, match="1 results for 2 operations"):
        batch.parse([{"state": {}}])


def test_release_records_and_the_server_parse_with_their_raw_json():
    st = p.State().parse(
        {
            "state": {"current": "r1", "installed_payload": {"hash": "h1", "release": "r1"}},
            "releases": [
                {
                    "id": "r1",
                    "argv": ["--port", "1"],
                    "port": 1,
                    "rank": 0,
                    "env": {"A": 1},
                    "health_timeout_s": 30,
                    "status": "ok",
                }
            ],
            "server": {"running": True, "pid": 7, "release": "r1", "port": 1, "argv": ["x"]},
        }
    )
    rel = st.release("r1")
    assert (
        rel is not None
        and rel.argv == ["--port", "1"]
        and rel.env == {"A": "1"}
        and rel.health_timeout_s == 30.0
    )
    assert rel.nnodes == 1 and rel.probe_host == "127.0.0.1" and rel.raw["status"] == "ok"
    assert st.state.installed_hash == "h1" and st.server is not None and st.server.pid == 7
    assert st.server.raw["argv"] == ["x"] and st.release("r2") is None


def test_a_reply_lacking_a_field_names_the_operation_and_the_field():
    with pytest.raises(RemoteError, match="the agent's `warmup` reply lacks 'triton_cache'"):
        p.Warmup("r1", ("x",), 1).parse({"rc": 0, "elapsed_s": 1.0, "log": "l", "tail": ""})
    with pytest.raises(RemoteError, match="`probe` reply lacks 'log_offset'"):
        p.Probe(1).parse({"running": False, "log": "", "log_path": "x"})
    lock = p.Lock("t", "me", 0).parse(
        {"ok": False, "error": "locked", "held_by": {"holder": "ci", "since": 5}}
    )
    assert lock.error == "locked" and lock.held_by == p.LockHolder("ci", 5.0) and not lock.locked


def _agent_facts(agent, tmp_path: Path) -> dict:
    """The agent's own `facts` result (through JSON, as it travels): two stand-in GPUs, one model config."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN_SMI} --gpus 2 "$@"\n')
    smi.chmod(0o755)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    params = json.loads(json.dumps(p.Facts(str(smi), (str(tmp_path / "model"), "/no/such/model")).params()))
    return json.loads(json.dumps(agent.OPS["facts"](params)))


def test_facts_parse_from_the_agents_own_reply(agent, tmp_path):
    raw = _agent_facts(agent, tmp_path)
    facts = p.Facts().parse(raw)
    assert isinstance(facts, p.FactsReply) and facts.hostname == raw["hostname"] and facts.work_dir == agent.W
    assert (facts.python, facts.python_version) == (raw["python"]["executable"], raw["python"]["version"])
    assert [(g.index, g.name, g.memory_total_mib, g.compute_capability, g.sm) for g in facts.gpus] == [
        (0, "NVIDIA H200", 143771, (9, 0), 90),
        (1, "NVIDIA H200", 143771, (9, 0), 90),
    ]
    assert (facts.cuda, facts.driver, facts.gpu_error) == ("13.0", "580.65.06", None)
    assert facts.server is None and facts.current_release is None
    assert facts.ports_in_use == raw["ports_in_use"]
    assert facts.models[str(tmp_path / "model")] == {"config": {"architectures": ["Qwen3ForCausalLM"]}}
    assert "no config.json" in facts.models["/no/such/model"]["error"]


_DROP = object()


def _edited(result: dict, path: str, value: Any) -> dict:
    """`result` with the value at the dotted `path` (keys, list indexes) set to `value` (dropped: _DROP)."""
    *parents, last = path.split(".")
    node: Any = result
    for key in parents:
        node = node[int(key) if isinstance(node, list) else key]
    where = int(last) if isinstance(node, list) else last
    if value is _DROP:
        del node[where]
    else:
        node[where] = value
    return result


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("hostname", _DROP, "the agent's `facts` reply lacks 'hostname'"),
        ("gpus", "GPU 0: H200", "the agent's `facts` reply has 'gpus' as a string, not a list"),
        ("gpus.1", "H200", "has 'gpus[1]' as a string, not an object"),
        ("gpus.0.name", _DROP, "the agent's `facts` reply lacks 'gpus[0].name'"),
        ("gpus.1.index", "1", "has 'gpus[1].index' as a string, not an integer"),
        ("gpus.0.memory_free_mib", "lots", "has 'gpus[0].memory_free_mib' as a string, not an integer"),
        ("gpus.0.compute_capability", [9], "has 'gpus[0].compute_capability' = [9], not [major, minor]"),
        ("gpus.0.compute_capability", ["9", "0"], "has 'gpus[0].compute_capability[0]' as a string"),
        ("python.version", _DROP, "lacks 'python.version'"),
        ("sglang", None, "has 'sglang' as null, not an object"),
        ("sglang.version", 523, "has 'sglang.version' as an integer, not a string"),
        ("disk_free_bytes", "57 GiB", "has 'disk_free_bytes' as a string, not an integer"),
        ("ports_in_use", [22, "ssh"], "has 'ports_in_use[1]' as a string, not an integer"),
        ("server", ["pid", 7], "has 'server' as a list, not an object"),
        ("current_release", 7, "has 'current_release' as an integer, not a string"),
        ("models./m", "config.json", "has 'models[/m]' as a string, not an object"),
    ],
)
def test_a_malformed_facts_reply_is_the_protocols_one_line_error(agent, tmp_path, path, value, message):
    with pytest.raises(RemoteError, match=re.escape(message)) as caught:
        p.Facts().parse(_edited(_agent_facts(agent, tmp_path), path, value))
    assert caught.value.exit_code == ExitCode.REMOTE and "\n" not in caught.value.one_line()
    assert caught.value.fix == "the host runs another agent version: re-run, ddtctl sends its own agent"


def test_a_facts_result_that_is_not_an_object_is_the_error_of_any_other_reply():
    with pytest.raises(RemoteError, match="the agent's `facts` reply is not an object: 'gpus'") as caught:
        p.Facts().parse("gpus")
    with pytest.raises(RemoteError, match="the agent's `stop` reply is not an object: 'gpus'") as other:
        p.Stop(5).parse("gpus")
    assert caught.value.exit_code == other.value.exit_code == ExitCode.REMOTE
