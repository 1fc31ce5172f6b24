"""What a deploy launches, independent of the hosts' current state: a profile's typed launch
(ddtctl.server_argv.TypedLaunch) in a DeploySpec, and the per-host Target (the launch with the multi-node
flags, launcher, env, port) it becomes on each host. Preflight, plan and health read the launch's typed
values; its argv is for the wire (the release record, the agent's Start, the resolver's request)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ddtctl.argv import refuse_multi_node_flags
from ddtctl.errors import OverlayError, UsageError
from ddtctl.profile import LoadedProfile, load_profile
from ddtctl.remote.inventory import Host
from ddtctl.remote.ship import Manifest, build_manifest, manifest_from_files
from ddtctl.safeio import load_json
from ddtctl.server_argv import TypedLaunch, typed_launch

PAYLOAD_MANIFEST = "ddtree-manifest.json"
DEFAULT_PORT = 30000


@dataclass
class Target:
    """One host of a deploy: what runs there."""

    host: Host
    rank: int
    nnodes: int
    launch: TypedLaunch  # what SGLang runs here (multi-node flags included)
    launch_argv: list[str]  # launcher + argv
    env: dict[str, str]
    port: int
    probe_host: str

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def argv(self) -> list[str]:
        """The launch as SGLang argv, for the wire (the release record, the agent's Start, the resolver)."""
        return self.launch.argv()


@dataclass
class DeploySpec:
    """Everything a deploy needs that does not depend on the host's current state."""

    name: str
    source: str
    profile_hash: str
    sglang: str
    gpu: str | None
    gpu_count: int | None
    launch: TypedLaunch  # the profile's launch: typed values by dest, env, catalog
    health_timeout_s: float
    launcher: list[str] | None
    host_names: list[str]
    model_paths: list[str]
    payload: Manifest | None = None
    tools: Manifest | None = None
    algorithm: str | None = None
    dist_init_addr: str | None = None  # override for multi-node
    # the profile's `ignore:` entries, rule id -> reason: preflight applies them as `ddtctl validate` does
    ignore: dict[str, str] = field(default_factory=dict)
    # what the release record says it is: "release", or "sweep" (a point `ddtctl tune` deployed: `rollback`
    # never returns to it, `releases --prune` removes it first); `tune`: {"run", "point"} of the tune run
    # behind it
    kind: str = "release"
    tune: dict[str, str] | None = None

    @property
    def env(self) -> dict[str, str]:
        """The profile's `env:`."""
        return self.launch.env

    @property
    def manifests(self) -> list[Manifest]:
        """What every release of this spec ships: the payload (if any) and the tools."""
        return [m for m in (self.payload, self.tools) if m is not None]

    def targets(self, hosts: list[Host]) -> list[Target]:
        n = len(hosts)
        port = self.launch.get("port")
        bind = self.launch.get("host") or "127.0.0.1"
        probe = "127.0.0.1" if bind in ("0.0.0.0", "::", "localhost") else bind
        if n > 1:
            refuse_multi_node_flags(self.launch.values, self.source, "deploy renders it per host")
        out = []
        for rank, host in enumerate(hosts):
            launch = self.launch
            if n > 1:
                addr = self.dist_init_addr or f"{hosts[0].address}:{hosts[0].dist_init_port}"
                launch = launch.with_values({"nnodes": n, "node_rank": rank, "dist_init_addr": addr})
            if self.launcher:
                launcher = [p.replace("{python}", host.python) for p in self.launcher]
            else:
                launcher = host.launcher_argv()
            env = {**host.env, **self.env}
            argv = launch.argv()
            out.append(Target(host, rank, n, launch, launcher + argv, env, int(port or DEFAULT_PORT), probe))
        return out


def tools_manifest() -> Manifest:
    """Files every release carries besides the payload: the overlay installer and the resolver worker."""
    root = Path(__file__).resolve().parent.parent
    return manifest_from_files(
        {
            "installer.py": root / "overlay" / "installer.py",
            "resolver_worker.py": root / "bridge" / "resolver_worker.py",
        }
    )


def _deploy_hosts(profile_hosts: list[str], host: str | None, source: str) -> list[str]:
    if host and profile_hosts and host not in profile_hosts and len(profile_hosts) > 1:
        raise UsageError(
            f"host {host} is not one of the profile's hosts ({', '.join(profile_hosts)})", where=source
        )
    if host and len(profile_hosts) <= 1:
        return [host]
    if not profile_hosts:
        raise UsageError("no host to deploy to", where=source, fix="pass HOST or set `host:` in the profile")
    return profile_hosts


def load_payload(payload_dir: str) -> Manifest:
    """The payload's manifest, checked against the ddtree-manifest.json it was built with (if any)."""
    expected = None
    mf = Path(payload_dir) / PAYLOAD_MANIFEST
    if mf.is_file():
        data = load_json(mf, 64 << 20, what="payload manifest")  # bounded (issue #31)
        expected = {f"files/{e['path']}": e["sha256"] for e in data.get("files", [])}
    payload = build_manifest(payload_dir)
    if expected:
        got = {k: v.sha256 for k, v in payload.files.items() if k.startswith("files/")}
        if got != expected:
            bad = sorted(set(got) ^ set(expected)) or sorted(k for k in got if got[k] != expected.get(k))
            raise OverlayError(
                f"payload does not match its {PAYLOAD_MANIFEST} (e.g. {bad[0]})",
                where=str(payload_dir),
                fix="rebuild the payload",
            )
    return payload


def spec_from_profile(
    path: str, *, host: str | None = None, algo: str | None = None, payload_dir: str | None = None
) -> DeploySpec:
    """Load a profile (ddtctl.profile) and make its typed launch (ddtctl.server_argv) a DeploySpec."""
    return spec_from_loaded(load_profile(path), host=host, algo=algo, payload_dir=payload_dir)


def spec_from_loaded(
    loaded: LoadedProfile,
    *,
    host: str | None = None,
    algo: str | None = None,
    payload_dir: str | None = None,
    payload: bool = True,
) -> DeploySpec:
    """A loaded profile's typed launch (ddtctl.server_argv.typed_launch) in a DeploySpec; `payload=False`
    leaves the DDTREE payload out (`ddtctl render --host` shows the launch, it ships nothing)."""
    prof = loaded.profile
    if algo:
        prof.server["speculative-algorithm"] = algo.upper()
    launch = typed_launch(prof)
    hosts = _deploy_hosts(list(prof.hosts or ([prof.host] if prof.host else [])), host, loaded.source)
    model_paths = [prof.model.path]
    draft = launch.get("speculative_draft_model_path")
    if draft:
        model_paths.append(draft)
    algorithm = str(prof.server.get("speculative-algorithm") or "").upper() or None
    if payload_dir is None and algorithm == "DDTREE" and payload:
        payload_dir = default_payload_dir(prof.sglang)
    return DeploySpec(
        name=prof.name,
        source=loaded.source,
        profile_hash=hashlib.sha256(loaded.text.encode()).hexdigest(),
        sglang=prof.sglang,
        gpu=prof.hardware.gpu if prof.hardware else None,
        gpu_count=prof.hardware.count if prof.hardware else None,
        launch=launch,
        health_timeout_s=float(prof.launch.health_timeout_s),
        launcher=list(prof.launch.launcher) if prof.launch.launcher else None,
        host_names=hosts,
        model_paths=model_paths,
        payload=load_payload(payload_dir) if payload_dir and payload else None,
        tools=tools_manifest(),
        algorithm=algorithm,
        ignore={entry.rule.strip().upper(): entry.reason for entry in prof.ignore},
    )


def default_payload_dir(sglang: str) -> str:
    """The built DDTREE payload for this SGLang release (ddtctl.overlay.build against the local managed env's
    pristine SGLang files, whose hashes the installer checks again on the host)."""
    from ddtctl.overlay.build import build

    res = build(None, reuse=True)
    if res.sglang != sglang:
        raise UsageError(
            f"the DDTREE payload is for sglang {res.sglang}, the profile targets {sglang}",
            fix="pass --payload DIR built for that release",
        )
    return str(res.payload_dir)
