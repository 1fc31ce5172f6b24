"""`ddtctl doctor`: each pure check with fact fixtures (a failing and a passing case), the agent's `checkup`
operation and its typed reply, the host and profile doctor picks, and one end-to-end run through the real sshd
(the GPU faked by the stand-in nvidia-smi only)."""

from __future__ import annotations

import importlib.util
import json
import re
import stat
import sys
from pathlib import Path

import pytest
from json_envelope import results

from ddtctl import doctor_checks as dc
from ddtctl.cli import main
from ddtctl.doctor import DoctorFacts, DoctorReport, Launch, Row, Status, doctor_target
from ddtctl.errors import ExitCode, RemoteError, UsageError
from ddtctl.remote import protocol as p
from ddtctl.remote.facts import HostFacts

HERE = Path(__file__).resolve().parent
AGENT = HERE.parents[1] / "ddtctl" / "remote" / "agent.py"
STANDIN_SMI = HERE / "standins" / "standin_nvidia_smi.py"
GIB = 1 << 30

TOPO_NV = (
    "\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tSYS\t56-111,168-223\t1\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tSYS\t56-111,168-223\t1\t\tN/A\n"
    "NIC0\tSYS\tSYS\tSYS\tSYS\t X \n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well"
    "\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
)
TOPO_PCIE = TOPO_NV.replace("NV18", "NODE").replace("GPU0\t X \tNODE", "GPU0\t X \tPIX").replace(
    "GPU1\tNODE", "GPU1\tPIX")


# ------------------------------------------------------------------------------------------------ fixtures
def facts(*, gpus: int = 4, name: str = "NVIDIA H200", sm=(9, 0), free_mib: int = 143000, **kw) -> HostFacts:
    base = dict(
        host="gpu1",
        hostname="gpu1",
        work_dir="/w",
        python="/py",
        python_version="3.11.7",
        sglang_version="0.5.23",
        sglang_root="/site",
        gpus=[p.Gpu(i, name, 143771, free_mib, sm) for i in range(gpus)],
        cuda="13.0",
        driver="580.65.06",
        gpu_error=None,
        disk_free_bytes=100 * GIB,
        ports_in_use=[22],
        server=None,
        current_release=None,
        models={
            "/m": {"config": {"architectures": ["Qwen3ForCausalLM"]}},
            "/d": {"config": {"architectures": ["DFlashDraftModel"]}},
        },
    )
    base.update(kw)
    return HostFacts(**base)


def model_dir(**kw) -> dict:
    d = {"exists": True, "free_at": "/m", "free_bytes": 500 * GIB, "size_bytes": 16 * GIB, "weight_files": 4,
         "weight_bytes": 16 * GIB, "truncated": False, "index": {"shards": 4, "missing": [], "missing_count": 0}}
    d.update(kw)
    return d


def checkup_json(**kw) -> dict:
    d = {
        "packages": {"torch": "2.14.1", "nvidia-nccl-cu13": "2.28.3", "nvidia-nccl-cu12": None},
        "requires": {"sglang": ["torch==2.14.1", "cuda-python>=13.0"],
                     "torch": ['nvidia-nccl-cu13==2.28.3; platform_system == "Linux"']},
        "torch_cuda": {"found": True, "cuda": "13.0"},
        "shm": {"path": "/dev/shm", "total_bytes": 64 * GIB, "free_bytes": 64 * GIB},
        "topology": TOPO_NV,
        "topology_error": None,
        "payload": {"root": "/site", "package": True, "entry_point": True},
        "models": {"/m": model_dir(), "/d": model_dir(size_bytes=GIB)},
    }
    d.update(kw)
    return d


def df(*, checkup: dict | None = None, installed: dict | None = None, env=None, **fact_kw) -> DoctorFacts:
    c = p.CheckupReply.from_json(json.loads(json.dumps(checkup or checkup_json())))
    return DoctorFacts(facts(**fact_kw), c, installed if installed is not None else {"hash": "abc", "release": "r1"},
                       dict(env or {}))


def launch(**kw) -> Launch:
    base = dict(source="p.yaml", gpu="H200", gpu_count=4, tp=4, port=30000, algorithm="DDTREE", model_path="/m",
                architecture="Qwen3ForCausalLM", draft_path="/d")
    base.update(kw)
    return Launch(**base)


def status(row: Row | list[Row]) -> str | list[str]:
    return [str(r.status) for r in row] if isinstance(row, list) else str(row.status)


# ------------------------------------------------------------------------------------------- pure checks
def test_every_check_passes_on_a_host_that_fits_the_profile():
    rows = dc.run_checks(launch(), df())
    assert [r.name for r in rows] == list(dc.ROW_NAMES)
    assert {r.name: str(r.status) for r in rows if r.status != Status.OK} == {}, rows
    assert "NVLink between all 4 GPUs (NV18)" in rows[2].found


@pytest.mark.parametrize(("kw", "want", "text"), [
    (dict(gpus=2), "fail", "2 x NVIDIA H200 visible; tp 4 x pp 1 needs 4 per host"),
    (dict(gpus=0, gpu_error="nvidia-smi not found"), "fail", "no GPU: nvidia-smi not found"),
    (dict(gpus=8), "warn", "hardware.count is 4, the host has 8"),
    (dict(free_mib=100000), "warn", "memory in use with no server of ours running"),
    (dict(gpus=4), "ok", "4 x NVIDIA H200 visible"),
])
def test_gpus(kw, want, text):
    row = dc.check_gpus(launch(), df(**kw))
    assert (str(row.status), text in row.found) == (want, True), row


def test_gpus_count_only_those_cuda_visible_devices_shows():
    row = dc.check_gpus(launch(), df(gpus=8, env={"CUDA_VISIBLE_DEVICES": "0,1"}))
    assert row.status == Status.FAIL and "2 x NVIDIA H200 visible" in row.found
    two_hosts = launch(tp=2, pp=2, nnodes=2, gpu_count=None)  # 4 GPUs over 2 hosts: 2 each
    assert status(dc.check_gpus(two_hosts, df(gpus=2))) == "ok"


@pytest.mark.parametrize(("gpu", "host", "sm", "want"), [
    ("H200", "NVIDIA H200", (9, 0), "ok"),
    ("H100", "NVIDIA H200", (9, 0), "warn"),  # same sm90, not the same memory
    ("B200", "NVIDIA H200", (9, 0), "fail"),
    ("sm90", "NVIDIA H100 80GB HBM3", (9, 0), "ok"),
    ("H200", "NVIDIA Future GPU", (10, 0), "fail"),  # unknown to ddtctl: nvidia-smi's compute capability
    (None, "NVIDIA H200", (9, 0), "skipped"),
])
def test_gpu_kind(gpu, host, sm, want):
    row = dc.check_gpu_kind(launch(gpu=gpu), df(name=host, sm=sm))
    assert str(row.status) == want, row
    if want in ("warn", "fail"):
        assert row.fix and row.fix.startswith("set hardware.gpu:")


def test_topology_parses_nvidia_smis_matrix():
    links = dc.parse_topology(TOPO_PCIE)
    assert links[(0, 1)] == links[(1, 0)] == "PIX" and links[(2, 3)] == "NODE" and (0, 4) not in links


@pytest.mark.parametrize(("tp", "topo", "env", "want", "text"), [
    (4, TOPO_NV, {}, "ok", "NVLink between all 4 GPUs"),
    (4, TOPO_PCIE, {}, "warn", "custom all-reduce is off on more than two PCIe-only GPUs"),
    (2, TOPO_PCIE, {}, "ok", "PCIe peer-to-peer"),
    (2, TOPO_NV.replace("NV18", "SYS"), {}, "warn", "crosses the CPU interconnect"),
    (2, TOPO_PCIE, {"NCCL_P2P_DISABLE": "1"}, "warn", "NCCL_P2P_DISABLE=1"),
    (1, None, {}, "skipped", "one GPU per host"),
    (4, None, {}, "warn", "cannot read the GPU topology: nvidia-smi topo -m timed out"),
    (8, TOPO_NV, {}, "skipped", "4 of the 8 GPUs needed are visible (see gpus)"),
    (4, "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n", {}, "warn", "does not list GPU0-GPU2, GPU0-GPU3"),
])
def test_topology(tp, topo, env, want, text):
    c = checkup_json(topology=topo, topology_error=None if topo else "nvidia-smi topo -m timed out")
    row = dc.check_topology(launch(tp=tp), df(checkup=c, env=env))
    assert (str(row.status), text in row.found) == (want, True), row


def test_topology_takes_the_gpus_cuda_visible_devices_names():
    c = checkup_json(topology=TOPO_PCIE)
    row = dc.check_topology(launch(tp=2), df(checkup=c, env={"CUDA_VISIBLE_DEVICES": "2,3"}))
    assert row.status == Status.OK and "GPU2-GPU3: NODE" in row.found


@pytest.mark.parametrize(("cuda", "driver", "torch_cuda", "want"), [
    ("13.0", "580.65.06", "13.0", "ok"),
    ("12.8", "570.86.10", "13.0", "fail"),  # SGLang 0.5.23 needs CUDA 13
    ("13.0", "580.65.06", "13.2", "warn"),  # minor version compatibility only
    (None, "580.65.06", "13.0", "warn"),
])
def test_driver(cuda, driver, torch_cuda, want):
    c = checkup_json(torch_cuda={"found": True, "cuda": torch_cuda})
    row = dc.check_driver(launch(), df(cuda=cuda, driver=driver, checkup=c))
    assert str(row.status) == want, row
    if cuda == "12.8":
        assert row.fix == "upgrade the NVIDIA driver to >= 580.65.06 (CUDA 13)"


@pytest.mark.parametrize(("version", "cuda", "want"), [
    ("2.14.1", "13.0", "ok"),
    ("2.14.0", "13.0", "warn"),
    ("2.13.0", "13.0", "fail"),
    ("2.14.1+cpu", None, "fail"),
    (None, None, "fail"),
])
def test_torch(version, cuda, want):
    c = checkup_json(packages={"torch": version}, torch_cuda={"found": version is not None, "cuda": cuda})
    row = dc.check_torch(launch(), df(checkup=c))
    assert str(row.status) == want, row
    assert want == "ok" or row.fix.endswith("pip install torch==2.14.1")


@pytest.mark.parametrize(("version", "want"), [("3.11.7", "ok"), ("3.12.3", "ok"), ("3.10.12", "fail")])
def test_python(version, want):
    assert status(dc.check_python(launch(), df(python_version=version))) == want


@pytest.mark.parametrize(("version", "want"), [("0.5.23", "ok"), ("0.5.12", "fail"), (None, "fail")])
def test_sglang(version, want):
    row = dc.check_sglang(launch(), df(sglang_version=version))
    assert str(row.status) == want and (want == "ok" or row.fix)


@pytest.mark.parametrize(("package", "entry", "installed", "want"), [
    (True, True, {"hash": "abc", "release": "r1"}, "ok"),
    (True, True, {}, "warn"),  # there, but not by ddtctl
    (False, False, {}, "warn"),  # not yet: deploy installs it
    (False, False, {"hash": "abc", "release": "r1"}, "fail"),  # recorded, gone
    (True, False, {}, "fail"),  # half installed
])
def test_ddtree_payload(package, entry, installed, want):
    c = checkup_json(payload={"root": "/site", "package": package, "entry_point": entry})
    assert status(dc.check_payload(launch(), df(checkup=c, installed=installed))) == want
    assert status(dc.check_payload(launch(algorithm="DFLASH"), df(checkup=c))) == "skipped"


@pytest.mark.parametrize(("packages", "want"), [
    ({"nvidia-nccl-cu13": "2.28.3"}, "ok"),
    ({"nvidia-nccl-cu13": "2.27.7"}, "warn"),
    ({"nvidia-nccl-cu12": "2.27.3"}, "warn"),
    ({}, "warn"),
])
def test_nccl(packages, want):
    row = dc.check_nccl(launch(), df(checkup=checkup_json(packages=packages)))
    assert str(row.status) == want, row
    assert want == "ok" or row.fix == "pip install nvidia-nccl-cu13==2.28.3"
    assert status(dc.check_nccl(launch(tp=1), df(checkup=checkup_json(packages=packages)))) == "skipped"


@pytest.mark.parametrize(("free", "want"), [(100 * GIB, "ok"), (GIB // 2, "fail")])
def test_disk(free, want):
    assert status(dc.check_disk(launch(), df(disk_free_bytes=free))) == want


@pytest.mark.parametrize(("path", "info", "want", "text"), [
    ("/m", model_dir(), "ok", "/m: 16.0 GiB, 4 weight file(s); 500.0 GiB free"),
    ("/m", {"exists": False, "free_at": "/", "free_bytes": 3 * GIB}, "fail", "no such directory (3.0 GiB free in /)"),
    ("/m", model_dir(index={"shards": 4, "missing": ["model-00004-of-00004.safetensors"], "missing_count": 1}),
     "fail", "1 of 4 indexed shards missing"),
    ("/m", model_dir(weight_files=0, index=None), "fail", "no weights"),
    ("Qwen/Qwen3-8B", {"exists": False, "free_at": ".", "free_bytes": GIB}, "warn", "a hub id"),
])
def test_model_dir(path, info, want, text):
    c = checkup_json(models={path: info})
    row = dc.check_model_dir("model-dir", path, df(checkup=c))
    assert (str(row.status), text in row.found) == (want, True), row


@pytest.mark.parametrize(("models", "want_arch", "want", "text"), [
    ({"/m": {"config": {"architectures": ["Qwen3ForCausalLM"]}}}, "Qwen3ForCausalLM", "ok", "as the profile says"),
    ({"/m": {"config": {"architectures": ["Qwen3_5ForCausalLM"]}}}, "Qwen3ForCausalLM", "fail", "the profile says"),
    ({"/m": {"config": {"architectures": ["Qwen3_5ForCausalLM"]}}}, None, "ok", "Qwen3_5ForCausalLM"),
    ({"/m": {"error": "no config.json at /m/config.json"}}, None, "fail", "no config.json"),
])
def test_model_config(models, want_arch, want, text):
    row = dc.check_model_config("model-config", "/m", want_arch, df(models=models))
    assert (str(row.status), text in row.found) == (want, True), row
    assert status(dc.check_model_config("draft-config", None, None, df())) == "skipped"


@pytest.mark.parametrize(("ports", "server", "want", "text"), [
    ([22], None, "ok", "port 30000 is free"),
    ([22, 30000], None, "fail", "in use by another process"),
    ([22, 30000], {"running": True, "port": 30000, "release": "r1"}, "ok", "held by our server (release r1)"),
])
def test_port(ports, server, want, text):
    row = dc.check_port(launch(), df(ports_in_use=ports, server=server))
    assert (str(row.status), text in row.found) == (want, True), row


@pytest.mark.parametrize(("shm", "tp", "want"), [
    ({"path": "/dev/shm", "total_bytes": 64 << 20, "free_bytes": 64 << 20}, 4, "fail"),  # Docker's default
    ({"path": "/dev/shm", "total_bytes": 64 << 20, "free_bytes": 64 << 20}, 1, "warn"),
    ({"path": "/dev/shm", "error": "No such file or directory"}, 4, "fail"),
    ({"path": "/dev/shm", "total_bytes": 32 * GIB, "free_bytes": 32 * GIB}, 4, "ok"),
])
def test_shm(shm, tp, want):
    assert status(dc.check_shm(launch(tp=tp), df(checkup=checkup_json(shm=shm)))) == want


def test_without_a_profile_only_the_host_checks_run():
    rows = dc.run_checks(Launch(), df(gpus=1))
    skipped = {r.name for r in rows if r.status == Status.SKIPPED}
    assert skipped == dc.PROFILE_ROWS and {"port", "gpu-kind", "model-dir"} <= skipped
    assert all(r.found == "no profile" and r.fix is None for r in rows if r.name in skipped)
    assert rows[0].found == "1 x NVIDIA H200 visible" and rows[0].status == Status.OK


def test_the_report_maps_rows_to_the_exit_codes():
    ok, warn, fail = Row("a", Status.OK, ""), Row("b", Status.WARN, ""), Row("c", Status.FAIL, "")
    assert DoctorReport("h", "u@a:22", None, [ok, warn]).exit_code == ExitCode.OK
    assert DoctorReport("h", "u@a:22", None, [ok, fail]).exit_code == ExitCode.INVALID
    assert DoctorReport("h", "u@a:22", None, [Row("ssh", Status.FAIL, "")]).exit_code == ExitCode.REMOTE


# ------------------------------------------------------------------------------------- the agent's checkup
@pytest.fixture
def agent(tmp_path):
    spec = importlib.util.spec_from_file_location("ddtctl_agent_doctor_test", AGENT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.W = str(tmp_path / "w")
    Path(mod.W).mkdir()
    return mod


def test_checkup_parses_from_the_agents_own_reply(agent, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN_SMI} --gpus 2 --link PIX "$@"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model-00001-of-00002.safetensors").write_bytes(b"x" * 1000)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    site = tmp_path / "site"
    (site / "ddtree_sglang").mkdir(parents=True)
    (site / "ddtree_sglang" / "__init__.py").write_text("")
    req = p.Checkup(str(smi), True, str(site), (str(model), str(tmp_path / "nope" / "m")))
    reply = req.parse(json.loads(json.dumps(agent.OPS["checkup"](json.loads(json.dumps(req.params()))))))
    assert dc.parse_topology(reply.topology or "") == {(0, 1): "PIX", (1, 0): "PIX"}
    assert reply.payload.package and not reply.payload.entry_point and not reply.payload.present
    m = reply.models[str(model)]
    assert m.exists and m.weight_files == 1 and m.size_bytes and m.size_bytes > 1000 and m.free_bytes
    assert m.index == {"shards": 2, "missing": ["model-00002-of-00002.safetensors"], "missing_count": 1}
    gone = reply.models[str(tmp_path / "nope" / "m")]
    assert not gone.exists and gone.free_at == str(tmp_path) and gone.size_bytes is None
    assert reply.packages["torch"] and reply.shm.path == "/dev/shm"
    assert p.Checkup(str(smi)).parse(agent.OPS["checkup"]({"nvidia_smi": str(smi)})).topology is None  # not asked


@pytest.mark.parametrize(("key", "value", "message"), [
    ("shm", None, "the agent's `checkup` reply lacks 'shm'"),
    ("packages", {"torch": 2}, "has 'packages.torch' as an integer, not a string"),
    ("models", {"/m": {"exists": "yes", "free_at": "/"}}, "has 'models[/m].exists' as a string, not a boolean"),
    ("payload", {"root": "/s", "package": True}, "lacks 'payload.entry_point'"),
])
def test_a_malformed_checkup_reply_is_the_protocols_one_line_error(key, value, message):
    data = checkup_json()
    if value is None:
        del data[key]
    else:
        data[key] = value
    with pytest.raises(RemoteError, match=re.escape(message)) as caught:
        p.Checkup().parse(data)
    assert caught.value.exit_code == ExitCode.REMOTE


# ---------------------------------------------------------------------------------- which host, which profile
def _inventory(tmp_path: Path, hosts: dict) -> Path:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(json.dumps({"ssh_config": str(tmp_path / "none"), "hosts": hosts}))
    return inv


def test_without_host_doctor_takes_the_only_host_or_says_which(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("name: p\nhost: b\nhardware: {gpu: H200, count: 2}\nmodel: {path: /m}\nserver: {tp-size: 2}\n")
    one = _inventory(tmp_path, {"a": {"address": "10.0.0.1", "profile": "p.yaml"}})
    h, la = doctor_target(None, None, str(one))
    assert h.name == "a" and la.tp == 2 and la.source == str(prof) and la.port == 30000  # the host's profile
    two = _inventory(tmp_path, {"a": {"address": "10.0.0.1"}, "b": {"address": "10.0.0.2"}})
    with pytest.raises(UsageError, match=r"no HOST given and the inventory has 2 hosts \(a, b\)"):
        doctor_target(None, None, str(two))
    h, la = doctor_target(None, str(prof), str(two))  # the profile's host
    assert h.name == "b" and la.gpu == "H200" and la.per_node == 2
    h, la = doctor_target("a", None, str(two))
    assert h.name == "a" and la == Launch()  # no profile: the host checks only


# ------------------------------------------------------------------------------------------- end to end
@pytest.mark.ssh
def test_doctor_end_to_end_over_ssh(lab, capsys):
    """Two stand-in H200s joined by NVLink, a tp 2 DDTREE profile: one round trip, every row, the envelope."""
    smi = lab.root / "nvidia-smi"
    smi.write_text(smi.read_text().replace("--gpus 1", "--gpus 2"))
    prof = lab.profile("doc", server={"tp-size": 2})
    prof.write_text(prof.read_text().replace("count: 1", "count: 2"))
    args = ["doctor", "lo", "--profile", str(prof), "--inventory", str(lab.inventory), "--format", "json"]
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    doc = results(out.out, "doctor")
    rows = {r["name"]: r for r in doc["checks"]}
    assert list(rows) == ["ssh", *dc.ROW_NAMES] and out.err == ""
    assert all(set(r) == {"name", "status", "found", "fix"} for r in doc["checks"])
    got = {n: r["status"] for n, r in rows.items()}
    fine = ("ssh", "gpus", "gpu-kind", "topology", "driver", "python", "disk", "port")
    assert {k: got[k] for k in fine} == dict.fromkeys(fine, "ok"), got
    assert "NVLink between all 2 GPUs (NV18)" in rows["topology"]["found"]
    assert got["model-dir"] == got["draft-dir"] == "fail" and "no weights" in rows["model-dir"]["found"]
    assert got["model-config"] == "ok" and "Qwen3ForCausalLM; as the profile says" in rows["model-config"]["found"]
    assert got["ddtree-payload"] == "warn" and got["sglang"] == "fail"  # the lab's python has no sglang
    assert exc.value.code == ExitCode.INVALID and json.loads(out.out)["ok"] is False
    assert doc["counts"]["fail"] == sum(s == "fail" for s in got.values())

    lab.known_hosts.write_text("")  # an unknown host key: the ssh row fails, the rest is skipped, exit 3
    with pytest.raises(SystemExit) as exc:
        main(args[:-2])
    text = capsys.readouterr().out
    assert exc.value.code == ExitCode.REMOTE and re.search(r"fail +ssh +unknown host key", text)
    assert "fix: check that fingerprint" in text
    assert len(re.findall(r"(?m)^  skipped .* SSH failed$", text)) == len(dc.ROW_NAMES)
