"""`ddtctl render --as k8s-lws | skypilot` (issue #34 item 4): each output validates against the real schemas
(Kubernetes core/v1 through kubernetes-validate for the Service and both pod templates, SkyPilot's own task
schemas; the LeaderWorkerSet's own fields are not schema-checked: its CRD is in no package this machine reaches), and
each pod's or node's command, expanded as Kubernetes / bash expand it, is the SSH render's argv plus the
multi-node flags, read back by ddtctl's one argv reader."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from ddtctl.argv import parse_server_argv
from ddtctl.errors import UsageError
from ddtctl.profile import load_profile
from ddtctl.render import render_argv
from ddtctl.render_engines import EngineOptions, render_engine
from ddtctl.schema.extensions import extended_catalog

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
FLAGSHIP = str(REPO / "profiles" / "qwen36-27b-ddtree.yaml")
CATALOG = extended_catalog("0.5.23")
K8S = kubernetes_validate.utils.latest_version()
LEADER_HOST = "dense-tp8-0.dense-tp8.default"

DENSE = """name: dense-tp8
sglang: "0.5.23"
hardware: {gpu: H200, count: 4}
model: {path: /models/Qwen3-8B}
server:
  tp-size: 8
  host: 0.0.0.0
  port: 30001
  served-model-name: "q$(LWS_WORKER_INDEX)$$x"
env:
  NCCL_DEBUG: INFO
  HF_TOKEN: hf_not_a_real_token
"""


@pytest.fixture
def dense(tmp_path: Path) -> str:
    path = tmp_path / "dense.yaml"
    path.write_text(DENSE)
    return str(path)


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a command / args / env value (k8s.io/kubernetes
    third_party/forked/golang/expansion/expand.go): `$(NAME)` of a defined NAME becomes its value, `$$`
    becomes `$`, anything else stays as written."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _objects(path: str, **opts: Any) -> tuple[dict, dict, str]:
    rendered = render_engine(path, "k8s-lws", EngineOptions(**opts))
    docs = list(yaml.safe_load_all(rendered.text))
    assert docs == rendered.config["objects"]  # the text is the objects (the header is comments)
    lws, service = docs
    return lws, service, rendered.text


def _pods(lws: dict) -> dict[str, dict]:
    template = lws["spec"]["leaderWorkerTemplate"]
    return {"leader": template["leaderTemplate"], "worker": template["workerTemplate"]}


CASES = [("dense", {}, 2, 4), ("flagship", {"nodes": 2}, 2, 4), ("flagship", {}, 1, 8)]


@pytest.mark.parametrize(("which", "opts", "size", "gpus"), CASES)
def test_lws_and_service_validate_against_the_real_schemas(dense, which, opts, size, gpus):
    lws, service, _ = _objects(dense if which == "dense" else FLAGSHIP, **opts)
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == size
    kubernetes_validate.validate(service, K8S, strict=True)
    for pod in _pods(lws).values():
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": pod}
        kubernetes_validate.validate(wrapped, K8S, strict=True)
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": str(gpus)}
        shm = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert shm["dshm"] == "/dev/shm" and volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    leader = _pods(lws)["leader"]["spec"]["containers"][0]
    assert service["spec"]["ports"][0]["targetPort"] == leader["ports"][0]["containerPort"]
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert "readinessProbe" not in _pods(lws)["worker"]["spec"]["containers"][0]


def _expanded(container: dict, index: str) -> tuple[list[str], dict[str, str]]:
    env = {"LWS_LEADER_ADDRESS": LEADER_HOST, "LWS_WORKER_INDEX": index, "LWS_GROUP_SIZE": "2"}
    command = [k8s_expand(w, env) for w in container["command"]]
    values = {e["name"]: k8s_expand(e["value"], env) for e in container.get("env", []) if "value" in e}
    return command, values


@pytest.mark.parametrize(("which", "opts"), [("dense", {}), ("flagship", {"nodes": 2})])
def test_each_pod_runs_the_ssh_argv_with_its_rank(dense, which, opts):
    path = dense if which == "dense" else FLAGSHIP
    lws, _, _ = _objects(path, **opts)
    ssh = render_argv(load_profile(path).profile)
    profile_flags = parse_server_argv(ssh, CATALOG, config=False).given
    for role, index in (("leader", "0"), ("worker", "1")):
        command, _ = _expanded(_pods(lws)[role]["spec"]["containers"][0], index)
        assert command[:2] == ["sglang", "serve"]
        argv = command[2:]
        assert argv[:-6] == ssh  # the SSH deploy's argv, token for token
        assert argv[-6:] == [
            "--nnodes",
            "2",
            "--node-rank",
            index,
            "--dist-init-addr",
            f"{LEADER_HOST}:50000",
        ]
        read = parse_server_argv(argv, CATALOG, config=False)
        assert read.ok, read.first_error()
        given = read.given
        assert (given.pop("nnodes"), given.pop("node_rank"), given.pop("dist_init_addr")) == (
            2,
            int(index),
            f"{LEADER_HOST}:50000",
        )
        assert given == profile_flags
    if which == "dense":
        assert profile_flags["served_model_name"] == "q$(LWS_WORKER_INDEX)$$x"  # not expanded by Kubernetes


def test_env_secrets_and_the_ddtree_payload(dense):
    lws, _, text = _objects(dense)
    container = _pods(lws)["leader"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "dense-tp8-secrets", "key": "HF_TOKEN"}}
    assert env["NCCL_DEBUG"]["value"] == "INFO" and "hf_not_a_real_token" not in text
    assert "initContainers" not in _pods(lws)["leader"]["spec"]  # not DDTREE
    flagship, _, _ = _objects(FLAGSHIP, payload_volume="hostpath:/srv/ddtree")
    pod = _pods(flagship)["worker"]["spec"]
    (init,) = pod["initContainers"]
    script = k8s_expand(init["command"][2], {})
    assert init["command"][:2] == ["sh", "-c"] and "/ddtree/installer.py view --sglang-root" in script
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["ddtree-payload"]["hostPath"]["path"] == "/srv/ddtree"
    assert volumes["models"]["hostPath"]["path"] == "/root/models"  # the models' directory, at the same path
    _, values = _expanded(pod["containers"][0], "1")
    assert values["PYTHONPATH"] == "/ddtree-view/site" and values["NCCL_P2P_LEVEL"] == "SYS"
    pvc, _, _ = _objects(FLAGSHIP, model_volume="pvc:models")
    models = {v["name"]: v for v in _pods(pvc)["leader"]["spec"]["volumes"]}["models"]
    assert models["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}


def test_one_node_is_a_group_of_one_without_multi_node_flags():
    lws, _, text = _objects(FLAGSHIP)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 1
    command, _ = _expanded(_pods(lws)["leader"]["spec"]["containers"][0], "0")
    assert command[2:] == render_argv(load_profile(FLAGSHIP).profile)
    assert "# 1 pod(s) of 8 GPU(s)" in text
    task = render_engine(FLAGSHIP, "skypilot", EngineOptions(payload_dir="/p")).config
    assert task["num_nodes"] == 1 and "--nnodes" not in task["run"]


# -- SkyPilot ------------------------------------------------------------------------------------------------
def _skypilot_schemas() -> dict[str, Any]:
    return json.loads((DATA / "skypilot-0.14.1-task-schema.json").read_text())


@pytest.mark.parametrize(("which", "opts", "nodes"), [("dense", {}, 2), ("flagship", {"nodes": 2}, 2)])
def test_skypilot_task_validates_and_each_node_runs_the_ssh_argv(dense, tmp_path, which, opts, nodes):
    path = dense if which == "dense" else FLAGSHIP
    rendered = render_engine(path, "skypilot", EngineOptions(payload_dir="/built/payload", **opts))
    task = yaml.safe_load(rendered.text)
    assert task == rendered.config
    schemas = _skypilot_schemas()
    jsonschema.Draft202012Validator(schemas["task"]).validate(task)
    jsonschema.Draft202012Validator(schemas["resources"]).validate(task["resources"])
    assert task["num_nodes"] == nodes and task["resources"]["accelerators"].endswith(":4")
    assert "python3 -m pip install sglang==0.5.23" in task["setup"]
    assert ("/ddtree/installer.py install" in task["setup"]) == (which == "flagship")
    assert subprocess.run(["bash", "-n"], input=task["setup"], text=True).returncode == 0
    stub = tmp_path / "bin" / "sglang"  # prints the argv it was started with
    stub.parent.mkdir()
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    stub.chmod(0o755)
    ssh = render_argv(load_profile(path).profile)
    for rank in range(nodes):
        env = {
            **os.environ,
            "PATH": f"{stub.parent}:{os.environ['PATH']}",
            "SKYPILOT_NODE_IPS": "10.0.0.7\n10.0.0.8\n",
            "SKYPILOT_NODE_RANK": str(rank),
            "SKYPILOT_NUM_NODES": str(nodes),
        }
        run = subprocess.run(["bash", "-c", task["run"]], env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        argv = json.loads(run.stdout)
        assert argv[0] == "serve" and argv[1:-6] == ssh
        read = parse_server_argv(argv[1:], CATALOG, config=False).given
        assert (read["nnodes"], read["node_rank"], read["dist_init_addr"]) == (nodes, rank, "10.0.0.7:50000")


def test_skypilot_secrets_are_named_not_written(dense):
    rendered = render_engine(dense, "skypilot")
    assert rendered.config["secrets"] == {"HF_TOKEN": None} and "hf_not_a_real_token" not in rendered.text
    assert rendered.config["envs"] == {"NCCL_DEBUG": "INFO"}
    assert "--secret HF_TOKEN" in rendered.text


def test_a_secret_flag_is_masked_unless_asked(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text(DENSE.replace("  port: 30001\n", "  port: 30001\n  api-key: sk-not-real\n"))
    masked = render_engine(str(path), "k8s-lws")
    assert "sk-not-real" not in masked.text and any("--show-secrets" in w for w in masked.warnings)
    shown = render_engine(str(path), "k8s-lws", EngineOptions(show_secrets=True))
    command, values = _expanded(_pods(shown.config["objects"][0])["worker"]["spec"]["containers"][0], "1")
    assert (
        command[command.index("--api-key") + 1] == "sk-not-real"
        and values["HF_TOKEN"] == "hf_not_a_real_token"
    )


# -- bad input -----------------------------------------------------------------------------------------------
def _ddtctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddtctl", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--as", "helm"], "--as 'helm': unknown render format"),
        (["--as", "k8s-lws", "--nodes", "3"], "does not split over 3 nodes"),
        (["--as", "k8s-lws", "--model-volume", "nfs:/x"], "--model-volume 'nfs:/x': not a volume"),
        (["--as", "shell", "--nodes", "2"], "--nodes is for --as k8s-lws or --as skypilot"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says):
    r = _ddtctl("render", FLAGSHIP, *args)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and says in r.stderr and "Traceback" not in r.stderr


def test_multi_node_flags_in_the_profile_are_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(DENSE.replace("  tp-size: 8\n", "  tp-size: 8\n  nnodes: 2\n"))
    with pytest.raises(UsageError, match="--nnodes is set in the profile"):
        render_engine(str(path), "skypilot")
    too_wide = tmp_path / "w.yaml"
    too_wide.write_text(DENSE)
    with pytest.raises(UsageError, match=re.escape("8 GPUs per node (tp 8 x pp 1 over 1 node(s))")):
        render_engine(str(too_wide), "k8s-lws", EngineOptions(nodes=1))
