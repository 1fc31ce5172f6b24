"""A profile rendered for launchers beyond one SSH host: a Kubernetes LeaderWorkerSet (`k8s-lws`) and a
SkyPilot task (`skypilot`), both in SGLang's multi-node shape (one server over N nodes: rank 0 serves HTTP,
every rank gets `--nnodes N --node-rank R --dist-init-addr RANK0:PORT`).

The server command is the argv `ddtctl render` prints for an SSH deploy (ddtctl.render.render_profile,
checked by parsing it back), unchanged; the multi-node flags are appended per pod / node exactly as `ddtctl
deploy` appends them per host (ddtctl.deploy.spec), and nothing else is added. Each engine quotes for what
reads it: Kubernetes expands `$(VAR)` in a container's command and env (every `$` of the profile is written
`$$`), SkyPilot runs `run:` with bash (shlex quoting). Checked against the real schemas in
tests/render/test_render_engines.py.

Nodes: `--nodes N`, else the profile's `hosts:` (several), else tp x pp over hardware.count (the profile's
GPUs per host). Each pod / node gets tp x pp / N GPUs (x dp on one node without DP attention)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Sequence

from ddtctl.argv import MASK, SECRET_ENV, refuse_multi_node_flags
from ddtctl.errors import UsageError
from ddtctl.profile import load_profile
from ddtctl.render import Rendered, render_profile
from ddtctl.server_argv import typed_launch

ENGINE_FORMATS = ("k8s-lws", "skypilot")
DIST_INIT_PORT = 50000  # the inventory's dist_init_port default (ddtctl/schema/hosts.py)
DEFAULT_PORT = 30000  # SGLang's --port default
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # set by the LWS controller on every pod of the set
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on the leader
PAYLOAD_MOUNT = "/ddtree"  # the volume the user provides: installer.py and payload/ (`ddtctl overlay build`)
VIEW_MOUNT = "/ddtree-view"  # emptyDir holding the installer's view of SGLang with the payload
VIEW_SITE = f"{VIEW_MOUNT}/site"  # the view itself, first on the server's PYTHONPATH
SITE_OF_SGLANG = (
    "python3 -c 'import importlib.util, os; "
    'print(os.path.dirname(os.path.dirname(importlib.util.find_spec("sglang").origin)))\''
)
# SkyPilot's accelerator names where they differ from ddtctl's GPU names (ddtctl/schema/gpus.py); others are
# passed through as the profile names them (`sky show-gpus` lists SkyPilot's).
SKYPILOT_GPU = {"A100": "A100-80GB"}


@dataclass
class EngineOptions:
    nodes: int | None = None  # None: from the profile
    image: str | None = None  # k8s: the SGLang container image (default lmsysorg/sglang:v<release>)
    model_volume: str = "hostpath"  # k8s: hostpath | hostpath:/DIR | pvc:CLAIM
    payload_volume: str = "pvc:ddtree-payload"  # k8s, DDTREE: hostpath:/DIR | pvc:CLAIM
    payload_dir: str | None = None  # skypilot, DDTREE: the local built payload (default: overlay build's)
    show_secrets: bool = False
    overrides: Sequence[Any] = ()  # `render --set KEY=VALUE` / `--gpu` (ddtctl.profile_overrides)


@dataclass
class Layout:
    """What both engines launch: the SSH render's argv, over `nodes` nodes of `gpus` GPUs each."""

    name: str
    source: str
    sglang: str
    launcher: list[str]
    argv: list[str]
    env: dict[str, str]
    secret_env: list[str]
    nodes: int
    gpus: int
    gpu: str | None
    port: int
    model_paths: list[str]
    ddtree: bool
    warnings: list[str] = field(default_factory=list)

    def rank_flags(self, rank: str, leader: str) -> list[str]:
        """deploy's multi-node flags (ddtctl.deploy.spec.DeploySpec.targets): none on one node."""
        if self.nodes == 1:
            return []
        return [
            "--nnodes",
            str(self.nodes),
            "--node-rank",
            rank,
            "--dist-init-addr",
            f"{leader}:{DIST_INIT_PORT}",
        ]


def _nodes_and_gpus(prof: Any, parsed: Any, nodes: int | None, source: str) -> tuple[int, int]:
    tp, pp = int(parsed.get("tp_size") or 1), int(parsed.get("pp_size") or 1)
    world = tp * pp
    count = prof.hardware.count if prof.hardware else None
    if nodes is None:
        if prof.hosts and len(prof.hosts) > 1:
            nodes = len(prof.hosts)
        elif count and world > count:
            nodes = -(-world // count)
        else:
            nodes = 1
    if nodes < 1:
        raise UsageError(f"--nodes {nodes}: at least one node", fix="pass --nodes 1 or more")
    if world % nodes:
        raise UsageError(
            f"tp x pp ({world}) does not split over {nodes} nodes",
            where=source,
            fix="pass a --nodes that divides tp-size x pp-size, or change tp-size",
        )
    gpus = world // nodes
    if nodes == 1 and not parsed.get("enable_dp_attention"):
        gpus *= int(parsed.get("dp_size") or 1)
    if count and gpus > count:
        raise UsageError(
            f"{gpus} GPUs per node (tp {tp} x pp {pp} over {nodes} node(s)) but hardware.count is {count}",
            where=source,
            fix=f"pass --nodes {-(-world // count)}, or set hardware.count to the GPUs of one node",
        )
    return nodes, gpus


def launch_layout(path: str, opts: EngineOptions) -> Layout:
    """The profile's SSH launch (render_profile's argv, as `ddtctl render --as argv` prints it) and where it
    runs."""

    ssh = render_profile(path, "argv", show_secrets=opts.show_secrets, overrides=opts.overrides)
    prof = load_profile(path, opts.overrides).profile
    parsed = typed_launch(prof)  # the typed values of the argv `ssh` shows
    refuse_multi_node_flags(parsed.values, ssh.source, "the rendered launch sets it per node")
    nodes, gpus = _nodes_and_gpus(prof, parsed, opts.nodes, ssh.source)
    draft = parsed.get("speculative_draft_model_path")
    layout = Layout(
        name=prof.name,
        source=ssh.source,
        sglang=prof.sglang,
        launcher=[w.replace("{python}", "python3") for w in ssh.launcher],
        argv=ssh.argv,
        env=dict(prof.env),
        secret_env=[k for k in prof.env if SECRET_ENV.search(k)],
        nodes=nodes,
        gpus=gpus,
        gpu=prof.hardware.gpu if prof.hardware else None,
        port=int(parsed.get("port") or DEFAULT_PORT),
        model_paths=[p for p in (prof.model.path, draft) if p],
        ddtree=str(parsed.get("speculative_algorithm") or "").upper() == "DDTREE",
    )
    if any(t == MASK or t.endswith(f"={MASK}") for t in ssh.argv):
        layout.warnings.append(
            f"a secret flag's value is written {MASK} (as every render masks it): pass --show-secrets for "
            "the real value, and keep the output out of version control"
        )
    if (parsed.get("host") or "127.0.0.1") in ("127.0.0.1", "localhost", "::1"):
        layout.warnings.append(
            f"the server binds {parsed.get('host') or '127.0.0.1'} (SGLang's default): set server.host: "
            "0.0.0.0 in the profile for a Service or another node to reach rank 0's HTTP port"
        )
    return layout


# -- Kubernetes LeaderWorkerSet ------------------------------------------------------------------------------
def k8s_literal(text: str) -> str:
    """`text` as a Kubernetes command / args / env value that expands to itself: Kubernetes replaces `$(VAR)`
    and reduces `$$` to `$` (k8s.io/kubernetes third_party/forked/golang/expansion): every `$` is doubled."""
    return text.replace("$", "$$")


def k8s_name(name: str) -> str:
    """A profile name as a DNS-1123 label short enough for LWS's pod names (NAME-GROUP-INDEX)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:40].strip("-")
    return slug or "sglang"


def _volume(spec: str, name: str, host_dir: str, what: str) -> dict[str, Any]:
    kind, _, arg = spec.partition(":")
    if kind == "hostpath" and (not arg or arg.startswith("/")):
        return {"name": name, "hostPath": {"path": arg or host_dir, "type": "Directory"}}
    if kind == "pvc" and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", arg or ""):
        return {"name": name, "persistentVolumeClaim": {"claimName": arg, "readOnly": True}}
    raise UsageError(
        f"{what} {spec!r}: not a volume", fix="use hostpath, hostpath:/ABSOLUTE/DIR or pvc:CLAIM-NAME"
    )


def _models_dir(paths: list[str]) -> str | None:
    """The directory that holds every model path (the volume is mounted there, so the argv's paths hold)."""
    import posixpath

    local = [posixpath.normpath(p) for p in paths if p.startswith("/")]
    if not local:
        return None  # hub ids: SGLang downloads them
    common = posixpath.commonpath([posixpath.dirname(p) for p in local])
    return common if common != "/" else None


def _k8s_env(layout: Layout, secret_name: str, show_secrets: bool) -> list[dict[str, Any]]:
    """The profile's env: secret names (HF_TOKEN, *_API_KEY) from the Secret `secret_name` unless
    show_secrets; with DDTREE, the payload's view of SGLang first on PYTHONPATH."""
    env: list[dict[str, Any]] = []
    values = {key: k8s_literal(value) for key, value in layout.env.items()}
    if layout.ddtree:
        values["PYTHONPATH"] = ":".join(
            [VIEW_SITE, *([values["PYTHONPATH"]] if "PYTHONPATH" in values else [])]
        )
    for key, value in values.items():
        if key in layout.secret_env and not show_secrets:
            env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}})
        else:
            env.append({"name": key, "value": value})
    return env


def _payload_init(layout: Layout, image: str) -> dict[str, Any]:
    """The initContainer: `installer.py view` (ddtctl/overlay/installer.py, from the user's payload volume)
    checks the image's SGLang files against the payload's pristine bases and writes the patched view that the
    server puts first on PYTHONPATH. Same image as the server, so the view's links resolve there too."""
    script = (
        "set -eu\n"
        f'python3 {PAYLOAD_MOUNT}/installer.py view --sglang-root "$({SITE_OF_SGLANG})" '
        f"--payload {PAYLOAD_MOUNT}/payload --out {VIEW_SITE}\n"
    )
    return {
        "name": "ddtree-payload",
        "image": image,
        "command": ["sh", "-c", k8s_literal(script)],
        "volumeMounts": [
            {"name": "ddtree-payload", "mountPath": PAYLOAD_MOUNT, "readOnly": True},
            {"name": "ddtree-view", "mountPath": VIEW_MOUNT},
        ],
    }


def _pod(layout: Layout, opts: EngineOptions, command: list[str], leader: bool) -> dict[str, Any]:
    image = opts.image or f"lmsysorg/sglang:v{layout.sglang}"
    name = k8s_name(layout.name)
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    models = _models_dir(layout.model_paths)
    if models:
        mounts.append({"name": "models", "mountPath": models, "readOnly": True})
        volumes.append(_volume(opts.model_volume, "models", models, "--model-volume"))
    container: dict[str, Any] = {
        "name": "sglang",
        "image": image,
        "command": command,
        "env": _k8s_env(layout, f"{name}-secrets", opts.show_secrets),
        "resources": {"limits": {"nvidia.com/gpu": str(layout.gpus)}},
        "volumeMounts": mounts,
    }
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if layout.ddtree:
        mounts.append({"name": "ddtree-view", "mountPath": VIEW_MOUNT, "readOnly": True})
        volumes.append(_volume(opts.payload_volume, "ddtree-payload", PAYLOAD_MOUNT, "--payload-volume"))
        volumes.append({"name": "ddtree-view", "emptyDir": {}})
        spec["initContainers"] = [_payload_init(layout, image)]
    if leader:
        container["ports"] = [{"name": "http", "containerPort": layout.port, "protocol": "TCP"}]
        container["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": layout.port},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
            "failureThreshold": 180,
        }
    if not container["env"]:
        del container["env"]
    return {"spec": spec}


def lws_objects(layout: Layout, opts: EngineOptions) -> list[dict[str, Any]]:
    """The LeaderWorkerSet (one group of `nodes` pods: the leader is rank 0) and the Service of rank 0's
    port."""
    name = k8s_name(layout.name)
    base = [k8s_literal(w) for w in layout.launcher + layout.argv]
    leader = base + layout.rank_flags("0", "$(LWS_LEADER_ADDRESS)")
    worker = base + layout.rank_flags("$(LWS_WORKER_INDEX)", "$(LWS_LEADER_ADDRESS)")
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "ddtctl"}
    lws = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": layout.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",  # NCCL cannot take a rank back
                "leaderTemplate": _pod(layout, opts, leader, leader=True),
                "workerTemplate": _pod(layout, opts, worker, leader=False),
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{name}-leader", "labels": labels},
        "spec": {
            "selector": {LWS_NAME_LABEL: name, LWS_INDEX_LABEL: "0"},
            "ports": [{"name": "http", "port": layout.port, "targetPort": layout.port, "protocol": "TCP"}],
        },
    }
    return [lws, service]


def _lws_header(layout: Layout, opts: EngineOptions) -> list[str]:
    name = k8s_name(layout.name)
    models = _models_dir(layout.model_paths)
    lines = [
        f"# SGLang {layout.sglang} on Kubernetes LeaderWorkerSet, rendered by ddtctl from {layout.source}",
        f"# {layout.nodes} pod(s) of {layout.gpus} GPU(s); rank 0 (the leader) serves HTTP on port "
        f"{layout.port}, Service {name}-leader",
        "# needs the LeaderWorkerSet controller (github.com/kubernetes-sigs/lws) and NVIDIA's device plugin",
        f"# model volume: {opts.model_volume} mounted at {models or '(none: SGLang downloads hub ids)'}",
    ]
    if layout.secret_env:
        lines.append(
            f"# secrets first: kubectl create secret generic {name}-secrets "
            + " ".join(f'--from-literal={k}="${k}"' for k in layout.secret_env)
        )
    if layout.ddtree:
        lines.append(
            f"# DDTREE payload: volume {opts.payload_volume} holds installer.py (ddtctl/overlay/installer.py)"
        )
        lines.append(
            "#   and payload/ (the directory `ddtctl overlay build` writes) for this SGLang release;"
        )
        lines.append(
            f"#   the initContainer runs `installer.py view`, the server reads SGLang through {VIEW_SITE}"
        )
    return lines + [f"# warning: {w}" for w in layout.warnings]


# -- SkyPilot ------------------------------------------------------------------------------------------------
def _block_dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: Any, value: str) -> Any:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def default_payload_dir() -> str:
    """Where `ddtctl overlay build` writes the built payload (ddtctl.overlay.build.default_build_dir)."""
    from ddtctl.overlay.build import default_build_dir
    from ddtctl.overlay.source import load_source_manifest

    return str(default_build_dir(load_source_manifest()) / "payload")


def skypilot_task(layout: Layout, opts: EngineOptions) -> dict[str, Any]:
    """A SkyPilot task: `num_nodes` nodes of `gpu:gpus`; setup installs SGLang at the profile's release (and
    the DDTREE payload with ddtctl's installer); run starts rank $SKYPILOT_NODE_RANK with the SSH render's
    argv."""
    from pathlib import Path

    gpu = SKYPILOT_GPU.get(layout.gpu or "", layout.gpu)
    resources: dict[str, Any] = {"ports": layout.port}
    if gpu:
        resources["accelerators"] = f"{gpu}:{layout.gpus}"
    setup = ["set -e", f"python3 -m pip install {shlex.quote(f'sglang=={layout.sglang}')}"]
    task: dict[str, Any] = {"name": k8s_name(layout.name), "resources": resources, "num_nodes": layout.nodes}
    envs = {k: v for k, v in layout.env.items() if k not in layout.secret_env}
    if envs:
        task["envs"] = envs
    if layout.secret_env:
        task["secrets"] = {k: (layout.env[k] if opts.show_secrets else None) for k in layout.secret_env}
    if layout.ddtree:
        installer = Path(__file__).resolve().parent / "overlay" / "installer.py"
        task["file_mounts"] = {
            f"{PAYLOAD_MOUNT}/installer.py": str(installer),
            f"{PAYLOAD_MOUNT}/payload": opts.payload_dir or default_payload_dir(),
        }
        setup.append(
            f'python3 {PAYLOAD_MOUNT}/installer.py install --sglang-root "$({SITE_OF_SGLANG})" '
            f"--payload {PAYLOAD_MOUNT}/payload --state-dir ~/.ddtctl-ddtree-state"
        )
    task["setup"] = "\n".join(setup) + "\n"
    lines = [" ".join(shlex.quote(w) for w in layout.launcher)]
    for word in layout.argv:  # one flag a line: render writes a value that reads as an option --flag=value
        if word.startswith("-") or len(lines) == 1:
            lines.append("    " + shlex.quote(word))
        else:
            lines[-1] += " " + shlex.quote(word)
    run = ["set -e"]
    if layout.nodes > 1:
        run.append('LEADER_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)')
        lines.append(
            '    --nnodes "$SKYPILOT_NUM_NODES" --node-rank "$SKYPILOT_NODE_RANK"'
            f' --dist-init-addr "$LEADER_IP:{DIST_INIT_PORT}"'
        )
    run.append("exec " + " \\\n".join(lines))
    task["run"] = "\n".join(run) + "\n"
    return task


def _skypilot_header(layout: Layout, task: dict[str, Any]) -> list[str]:
    lines = [
        f"# SGLang {layout.sglang} as a SkyPilot task, rendered by ddtctl from {layout.source}",
        f"# {layout.nodes} node(s) of {layout.gpus} GPU(s); rank 0 serves HTTP on port {layout.port}"
        " (sky launch THIS_FILE.yaml)",
    ]
    if layout.gpu and layout.gpu not in ("H100", "H200", "B200", "A100", "A10G", "L40S"):
        lines.append(f"# accelerator {layout.gpu}: check its SkyPilot name with `sky show-gpus`")
    if layout.secret_env and any(v is None for v in task.get("secrets", {}).values()):
        lines.append(
            "# secrets: pass " + " ".join(f"--secret {k}" for k in layout.secret_env) + " to sky launch"
        )
    if layout.ddtree:
        lines.append(
            "# DDTREE payload: file_mounts carry ddtctl's installer.py and the payload `ddtctl overlay build`"
            " wrote (build it first)"
        )
    return lines + [f"# warning: {w}" for w in layout.warnings]


def render_engine(path: str, engine: str, opts: EngineOptions | None = None) -> Rendered:
    """PROFILE as a LeaderWorkerSet manifest (with its Service) or a SkyPilot task, around the SSH argv."""
    import yaml

    opts = opts or EngineOptions()
    if engine not in ENGINE_FORMATS:
        raise UsageError(f"unknown launcher format {engine!r}", fix=f"use one of {', '.join(ENGINE_FORMATS)}")
    layout = launch_layout(path, opts)
    config: dict[str, Any]
    if engine == "k8s-lws":
        objects = lws_objects(layout, opts)
        config = {"objects": objects}
        header = _lws_header(layout, opts)
        body = yaml.dump_all(objects, Dumper=_block_dumper(), sort_keys=False, default_flow_style=False)
    else:
        config = skypilot_task(layout, opts)
        header = _skypilot_header(layout, config)
        body = yaml.dump(config, Dumper=_block_dumper(), sort_keys=False, default_flow_style=False)
    env = {
        k: ("***" if k in layout.secret_env and not opts.show_secrets else v) for k, v in layout.env.items()
    }
    return Rendered(
        source=layout.source,
        format=engine,
        launcher=layout.launcher,
        argv=layout.argv,
        env=env,
        config=config,
        text="\n".join(header) + "\n" + body,
        warnings=list(layout.warnings),
    )
