"""Host facts: GPUs, CUDA, python, SGLang, disk, ports, our server, models' config.json (cached locally)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddtctl.remote.protocol import Facts
from ddtctl.remote.transport import Connection


@dataclass
class Gpu:
    index: int
    name: str
    memory_total_mib: int | None
    memory_free_mib: int | None
    compute_capability: tuple[int | None, int | None]

    @property
    def sm(self) -> int | None:
        major, minor = self.compute_capability
        return None if major is None else major * 10 + (minor or 0)


@dataclass
class HostFacts:
    host: str
    hostname: str
    work_dir: str
    python: str
    python_version: str
    sglang_version: str | None
    sglang_root: str | None
    gpus: list[Gpu]
    cuda: str | None
    driver: str | None
    gpu_error: str | None
    disk_free_bytes: int
    ports_in_use: list[int]
    server: dict | None  # our server's pid file (with running: bool), or None
    current_release: str | None
    models: dict[str, dict] = field(default_factory=dict)  # path -> {"config": {...}} | {"error": "..."}
    cached_configs: dict[str, str] = field(default_factory=dict)  # path -> local cache dir

    @property
    def gpu_name(self) -> str | None:
        return self.gpus[0].name if self.gpus else None

    @property
    def server_running(self) -> bool:
        return bool(self.server and self.server.get("running"))

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["gpus"] = [
            dict(g.__dict__, compute_capability=list(g.compute_capability), sm=g.sm) for g in self.gpus
        ]
        d["models"] = {
            k: ({"architectures": (v.get("config") or {}).get("architectures")} if "config" in v else v)
            for k, v in self.models.items()
        }
        return d


def gather_facts(conn: Connection, *, model_paths: Sequence[str] = (), cache: bool = True) -> HostFacts:
    raw = conn.call(Facts(conn.host.nvidia_smi, tuple(model_paths)), retry=True)
    facts = HostFacts(
        host=conn.host.name,
        hostname=raw["hostname"],
        work_dir=raw["work_dir"],
        python=raw["python"]["executable"],
        python_version=raw["python"]["version"],
        sglang_version=raw["sglang"].get("version"),
        sglang_root=conn.host.sglang_root or raw["sglang"].get("root"),
        gpus=[
            Gpu(
                g["index"],
                g["name"],
                g["memory_total_mib"],
                g["memory_free_mib"],
                tuple(g["compute_capability"]),
            )
            for g in raw["gpus"]
        ],
        cuda=raw.get("cuda"),
        driver=raw.get("driver"),
        gpu_error=raw.get("gpu_error"),
        disk_free_bytes=raw["disk_free_bytes"],
        ports_in_use=raw["ports_in_use"],
        server=raw.get("server"),
        current_release=raw.get("current_release"),
        models=raw.get("models") or {},
    )
    if cache:
        facts.cached_configs = cache_model_configs(conn.host.name, facts.models)
    return facts


def cache_model_configs(host: str, models: dict[str, dict]) -> dict[str, str]:
    """Write each remote config.json where validate and dry-run read it (dryrun.model_config_cache_dir)."""
    from ddtctl.paths import model_config_cache_dir

    out = {}
    for path, info in models.items():
        if "config" not in info:
            continue
        d = model_config_cache_dir(host, path)
        d.mkdir(parents=True, exist_ok=True)
        target = d / "config.json"
        text = json.dumps(info["config"], indent=1, sort_keys=True)
        if not target.exists() or target.read_text() != text:
            tmp = target.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(target)
        out[path] = str(d)
    return out
