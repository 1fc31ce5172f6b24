"""Host facts: GPUs, CUDA, python, SGLang, disk, ports, our server, models' config.json (cached locally)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddtctl.paths import model_config_cache_dir
from ddtctl.remote.protocol import Facts, FactsReply
from ddtctl.remote.protocol import Gpu as Gpu  # HostFacts.gpus' type: importable from here too
from ddtctl.remote.transport import Connection
from ddtctl.safeio import write_new


@dataclass
class HostFacts(FactsReply):
    """The agent's facts (protocol.FactsReply) as the controller keeps them: under the host's inventory name,
    with the inventory's sglang_root in place of the one found where the inventory sets one, and where the
    model configs were cached locally."""

    host: str
    cached_configs: dict[str, str] = field(default_factory=dict)  # path -> local cache dir

    @property
    def gpu_name(self) -> str | None:
        return self.gpus[0].name if self.gpus else None

    @property
    def server_running(self) -> bool:
        return bool(self.server and self.server.get("running"))

    def to_json(self) -> dict[str, Any]:
        d = {"host": self.host, **self.__dict__}  # the host first, where `ddtctl facts --format json` has it
        d["gpus"] = [
            dict(g.__dict__, compute_capability=list(g.compute_capability), sm=g.sm) for g in self.gpus
        ]
        d["models"] = {
            k: ({"architectures": (v.get("config") or {}).get("architectures")} if "config" in v else v)
            for k, v in self.models.items()
        }
        return d


def gather_facts(conn: Connection, *, model_paths: Sequence[str] = (), cache: bool = True) -> HostFacts:
    """The host's facts (a malformed reply is the protocol's RemoteError); with `cache`, the model configs
    written where validate and dry-run read them."""
    reply = conn.call(Facts(conn.host.nvidia_smi, tuple(model_paths)), retry=True)
    facts = HostFacts(**vars(reply), host=conn.host.name)
    facts.sglang_root = conn.host.sglang_root or reply.sglang_root
    if cache:
        facts.cached_configs = cache_model_configs(conn.host.name, facts.models)
    return facts


def cache_model_configs(host: str, models: dict[str, dict]) -> dict[str, str]:
    """Write each remote config.json where validate and dry-run read it (dryrun.model_config_cache_dir)."""

    out = {}
    for path, info in models.items():
        if "config" not in info:
            continue
        d = model_config_cache_dir(host, path)
        d.mkdir(parents=True, exist_ok=True)
        target = d / "config.json"
        text = json.dumps(info["config"], indent=1, sort_keys=True)
        write_new(target, text)  # atomic; over a regular file or a new name only (safeio)
        out[path] = str(d)
    return out
