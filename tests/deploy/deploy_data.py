"""Plain-data builders for the deploy unit tests: a spec, a host, its facts and its agent state, no SSH."""

from __future__ import annotations

from typing import Any

from ddtctl.deploy import DeploySpec, Target
from ddtctl.remote.facts import Gpu, HostFacts
from ddtctl.remote.inventory import Host
from ddtctl.remote.protocol import StateReply
from ddtctl.remote.ship import FileEntry, Manifest
from ddtctl.server_argv import read_launch

HOST = Host(name="gpu1", address="10.0.0.1", user="ubuntu", python="/py")


def spec(argv: list[str] | None = None, **kw: Any) -> DeploySpec:
    fields: dict[str, Any] = dict(
        name="p",
        source="p.yaml",
        profile_hash="0",
        sglang="0.5.23",
        gpu="H200",
        gpu_count=1,
        launch=read_launch(
            argv if argv is not None else ["--model-path", "/m", "--port", "30000"], "0.5.23", kw.pop("env", {})
        ),
        health_timeout_s=60,
        launcher=None,
        host_names=[HOST.name],
        model_paths=["/m"],
        tools=Manifest(None, {"installer.py": FileEntry("a" * 64, 10)}),
    )
    fields.update(kw)
    return DeploySpec(**fields)


def target(s: DeploySpec, host: Host = HOST) -> Target:
    return s.targets([host])[0]


def facts(
    *,
    gpus: int = 1,
    gpu: str = "NVIDIA H200",
    sm: tuple[int, int] = (9, 0),
    sglang: str | None = "0.5.23",
    ports: list[int] | None = None,
    server: dict | None = None,
    disk_gib: float = 100,
    models: dict | None = None,
    gpu_error: str | None = None,
) -> HostFacts:
    return HostFacts(
        host=HOST.name,
        hostname="gpu1",
        work_dir="/w",
        python="/py",
        python_version="3.11.7",
        sglang_version=sglang,
        sglang_root="/site" if sglang else None,
        gpus=[Gpu(i, gpu, 143771, 143000, sm) for i in range(gpus)],
        cuda="12.8",
        driver="570",
        gpu_error=gpu_error,
        disk_free_bytes=int(disk_gib * 2**30),
        ports_in_use=list(ports or []),
        server=server,
        current_release=(server or {}).get("release"),
        models=models if models is not None else {"/m": {"config": {"architectures": ["LlamaForCausalLM"]}}},
    )


def state(
    *,
    current: str | None = None,
    releases: list[dict] | None = None,
    server: dict | None = None,
    installed: str | None = None,
) -> StateReply:
    """The agent's `state` reply, as JSON, parsed the way the controller parses it."""
    return StateReply.from_json(
        {
            "state": {
                "current": current,
                "previous": None,
                "installed_payload": {"hash": installed, "release": current} if installed else None,
            },
            "releases": releases or [],
            "server": server,
        }
    )
