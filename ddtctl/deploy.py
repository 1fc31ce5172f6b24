"""`ddtctl deploy` and the host operations around it: facts -> preflight -> plan -> ship -> launch -> health -> record.

Every function here returns a result object; the CLI (ddtctl/cli/remote.py) only parses and prints. Progress is
reported through an `on_event(Event)` callback. The host ends either serving the new release or exactly as it was:
nothing on the host changes before the plan is confirmed and the deploy lock is held; files are shipped into a
content-addressed store and only activated by install + launch; a failed health check rolls back to the previous
release (payload and server), or, with none, stops the new server and uninstalls the payload.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import re
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ddtctl.errors import RemoteError, UsageError
from ddtctl.remote.facts import HostFacts, gather_facts
from ddtctl.remote.inventory import Host, Inventory, load_inventory, resolve_host
from ddtctl.remote.ship import (
    Manifest,
    ShipResult,
    build_manifest,
    list_store,
    manifest_from_files,
    missing_objects,
    ship,
)
from ddtctl.remote.transport import AGENT_SOURCE, Connection, ConnectionLost, LockHeld

SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL)", re.I)
# A flag is secret by its words (dash-separated), not by substrings: `--api-key`, `--admin-api-key`, `--hf-token`,
# `--ssl-keyfile-password`, `--watermark-key-b` are; `--max-total-tokens`, `--skip-tokenizer-init` and
# `--speculative-token-map` (a path) are not.
SECRET_WORDS = frozenset({"key", "apikey", "secret", "password", "passwd", "credential", "credentials"})


def is_secret_flag(flag: str) -> bool:
    words = flag.lstrip("-").split("=", 1)[0].replace("_", "-").lower().split("-")
    return bool(SECRET_WORDS & set(words)) or words[-1] == "token"

# Served fields that must equal what was resolved (the identity of the launch).
IDENTITY_FIELDS = ("speculative_algorithm", "tp_size", "pp_size", "dp_size", "nnodes", "node_rank")
DDTREE_PREFIX = "speculative_ddtree_"
PAYLOAD_MANIFEST = "ddtree-manifest.json"


# ----------------------------------------------------------------------------------------------- events
@dataclass
class Event:
    stage: str  # facts | preflight | plan | lock | ship | dry-run | install | launch | health | log | record | rollback
    message: str
    host: str | None = None
    level: str = "info"  # info | ok | warn | error | log
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        return self.__dict__.copy()


class _Events:
    def __init__(self, callback: Callable[[Event], None] | None):
        self.callback = callback
        self.items: list[Event] = []
        self.secrets: set[str] = set()  # values never shown (server log lines included)

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def __call__(self, stage: str, message: str, host: str | None = None, level: str = "info") -> None:
        ev = Event(stage, self.mask(message), host, level)
        self.items.append(ev)
        if self.callback:
            self.callback(ev)


def mask_env(env: dict[str, str]) -> dict[str, str]:
    return {k: ("***" if SECRET_ENV.search(k) else v) for k, v in env.items()}


def mask_argv(argv: list[str]) -> list[str]:
    """`--api-key X` -> `--api-key ***` (also `--x-token=X`): secrets never reach a terminal or a JSON report."""
    out = list(argv)
    for i, a in enumerate(out):
        if a.startswith("--") and is_secret_flag(a):
            if "=" in a:
                out[i] = a.split("=", 1)[0] + "=***"
            elif i + 1 < len(out) and not out[i + 1].startswith("--"):
                out[i + 1] = "***"
    return out


def secret_values(argv: list[str], env: dict[str, str]) -> set[str]:
    vals = {v for k, v in env.items() if SECRET_ENV.search(k)}
    for i, a in enumerate(argv):
        if a.startswith("--") and is_secret_flag(a):
            if "=" in a:
                vals.add(a.split("=", 1)[1])
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):  # a switch takes no value
                vals.add(argv[i + 1])
    return {v for v in vals if len(v) >= 4}


def _mask_strings(value, secrets: set[str]):
    """Every string inside a JSON value with each secret replaced (keys too); numbers and structure untouched."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "***")
        return value
    if isinstance(value, list):
        return [_mask_strings(v, secrets) for v in value]
    if isinstance(value, dict):
        return {_mask_strings(k, secrets): _mask_strings(v, secrets) for k, v in value.items()}
    return value


def mask_info(info: dict | None) -> dict | None:
    if not isinstance(info, dict):
        return info
    out = {}
    for k, v in info.items():
        if is_secret_flag(k) and v not in (None, "", False):
            out[k] = "***"
        elif k in ("argv", "launch_argv", "launch_command") and isinstance(v, list):
            out[k] = mask_argv([str(x) for x in v])
        elif k == "env" and isinstance(v, dict):
            out[k] = mask_env(v)
        else:
            out[k] = v
    return out


# ----------------------------------------------------------------------------------------------- spec
@dataclass
class Target:
    """One host of a deploy: what runs there."""

    host: Host
    rank: int
    nnodes: int
    argv: list[str]  # SGLang argv (multi-node flags included)
    launch_argv: list[str]  # launcher + argv
    env: dict[str, str]
    port: int
    probe_host: str

    @property
    def name(self) -> str:
        return self.host.name


@dataclass
class DeploySpec:
    """Everything a deploy needs that does not depend on the host's current state."""

    name: str
    source: str
    profile_hash: str
    sglang: str
    gpu: str | None
    gpu_count: int | None
    server_argv: list[str]
    env: dict[str, str]
    health_timeout_s: float
    launcher: list[str] | None
    host_names: list[str]
    model_paths: list[str]
    payload: Manifest | None = None
    tools: Manifest | None = None
    algorithm: str | None = None
    dist_init_addr: str | None = None  # override for multi-node

    def targets(self, hosts: list[Host]) -> list[Target]:
        n = len(hosts)
        out = []
        port = _flag_value(self.server_argv, "--port")
        bind = _flag_value(self.server_argv, "--host") or "127.0.0.1"
        probe = "127.0.0.1" if bind in ("0.0.0.0", "::", "localhost") else bind
        for rank, host in enumerate(hosts):
            argv = list(self.server_argv)
            if n > 1:
                for flag in ("--nnodes", "--node-rank", "--dist-init-addr"):
                    if _flag_value(argv, flag) is not None:
                        raise UsageError(f"{flag} is set in the profile; deploy renders it per host",
                                         where=self.source, fix=f"remove {flag} from server:")
                addr = self.dist_init_addr or f"{hosts[0].address}:{hosts[0].dist_init_port}"
                argv += ["--nnodes", str(n), "--node-rank", str(rank), "--dist-init-addr", addr]
            launcher = [p.replace("{python}", host.python) for p in self.launcher] if self.launcher \
                else host.launcher_argv()
            env = {**host.env, **self.env}
            out.append(Target(host, rank, n, argv, launcher + argv, env, int(port or 30000), probe))
        return out


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def argv_to_flags(argv: list[str]) -> dict[str, Any]:
    """`--a 1 --b --c x` -> {"a": "1", "b": True, "c": "x"} (order kept; the value form SGLang's argparse sees)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            key, eq, inline = a[2:].partition("=")
            if eq:
                out[key] = inline
                i += 1
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[key] = argv[i + 1]
                i += 2
            else:
                out[key] = True
                i += 1
        else:
            i += 1
    return out


def tools_manifest() -> Manifest:
    """Files every release carries besides the payload: the overlay installer and the resolver worker."""
    root = Path(__file__).resolve().parent
    return manifest_from_files({
        "installer.py": root / "overlay" / "installer.py",
        "resolver_worker.py": root / "bridge" / "resolver_worker.py",
    })


def spec_from_profile(path: str, *, host: str | None = None, algo: str | None = None,
                      payload_dir: str | None = None) -> DeploySpec:
    """Load and render a profile (ddtctl.profile / ddtctl.render) into a DeploySpec."""
    from ddtctl.profile import load_profile
    from ddtctl.render import render_argv

    loaded = load_profile(path)
    prof = loaded.profile
    if algo:
        prof.server["speculative-algorithm"] = algo.upper()
    argv = render_argv(prof)
    hosts = list(prof.hosts or ([prof.host] if prof.host else []))
    if host and hosts and host not in hosts and len(hosts) > 1:
        raise UsageError(f"host {host} is not one of the profile's hosts ({', '.join(hosts)})", where=loaded.source)
    if host and len(hosts) <= 1:
        hosts = [host]
    if not hosts:
        raise UsageError("no host to deploy to", where=loaded.source, fix="pass HOST or set `host:` in the profile")
    model_paths = [prof.model.path]
    draft = _flag_value(argv, "--speculative-draft-model-path")
    if draft:
        model_paths.append(draft)
    algorithm = str(prof.server.get("speculative-algorithm") or "").upper() or None
    payload = None
    if payload_dir is None and algorithm == "DDTREE":
        payload_dir = default_payload_dir(prof.sglang)
    if payload_dir:
        expected = None
        mf = Path(payload_dir) / PAYLOAD_MANIFEST
        if mf.is_file():
            data = json.loads(mf.read_text())
            expected = {f"files/{e['path']}": e["sha256"] for e in data.get("files", [])}
        payload = build_manifest(payload_dir)
        if expected:
            got = {k: v.sha256 for k, v in payload.files.items() if k.startswith("files/")}
            if got != expected:
                from ddtctl.errors import OverlayError

                bad = sorted(set(got) ^ set(expected)) or sorted(k for k in got if got[k] != expected.get(k))
                raise OverlayError(f"payload does not match its {PAYLOAD_MANIFEST} (e.g. {bad[0]})",
                                   where=str(payload_dir), fix="rebuild the payload")
    return DeploySpec(
        name=prof.name,
        source=loaded.source,
        profile_hash=hashlib.sha256(loaded.text.encode()).hexdigest(),
        sglang=prof.sglang,
        gpu=prof.hardware.gpu if prof.hardware else None,
        gpu_count=prof.hardware.count if prof.hardware else None,
        server_argv=argv,
        env=dict(prof.env),
        health_timeout_s=float(prof.launch.health_timeout_s),
        launcher=list(prof.launch.launcher) if prof.launch.launcher else None,
        host_names=hosts,
        model_paths=model_paths,
        payload=payload,
        tools=tools_manifest(),
        algorithm=algorithm,
    )


def default_payload_dir(sglang: str) -> str:
    """The built DDTREE payload for this SGLang release (ddtctl.overlay.build against the local managed env's
    pristine SGLang files, whose hashes the installer checks again on the host)."""
    from ddtctl.overlay.build import build

    res = build(None, reuse=True)
    if res.sglang != sglang:
        raise UsageError(f"the DDTREE payload is for sglang {res.sglang}, the profile targets {sglang}",
                         fix="pass --payload DIR built for that release")
    return str(res.payload_dir)


# ----------------------------------------------------------------------------------------------- preflight
@dataclass
class Check:
    name: str
    ok: bool
    message: str
    host: str | None = None
    severity: str = "error"  # error | warning | info
    fix: str | None = None

    def to_json(self) -> dict:
        return self.__dict__.copy()


def preflight_checks(spec: DeploySpec, target: Target, facts: HostFacts, *, remote_dry_run: bool) -> list[Check]:
    """Static checks with host facts. Nothing remote is run here (the remote dry-run comes after shipping)."""
    h = target.name
    checks: list[Check] = []

    def add(name, ok, msg, severity="error", fix=None):
        checks.append(Check(name, ok, msg, h, "info" if ok else severity, fix))

    # GPUs
    flags = argv_to_flags(target.argv)
    tp, pp, dp = (int(flags.get(k, 1) or 1) for k in ("tp-size", "pp-size", "dp-size"))
    need = tp * pp * (1 if flags.get("enable-dp-attention") else dp)
    need_here = max(1, need // max(1, target.nnodes))
    visible = len(facts.gpus)
    cvd = target.env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        visible = min(visible, len([x for x in cvd.split(",") if x.strip()]))
    if facts.gpu_error and not facts.gpus:
        add("gpus", False, f"no GPU information: {facts.gpu_error}", fix="check nvidia-smi works on the host")
    else:
        add("gpus", visible >= need_here,
            f"{need_here} GPU(s) needed here (tp {tp} x pp {pp} x dp {dp}"
            f"{f' over {target.nnodes} nodes' if target.nnodes > 1 else ''}), {visible} visible"
            + (f" ({facts.gpus[0].name})" if facts.gpus else ""),
            fix="lower tp-size/dp-size or deploy to a host with more GPUs")
    # GPU generation the profile was written for
    if spec.gpu and facts.gpus:
        from ddtctl.schema.gpus import resolve_gpu

        want = resolve_gpu(spec.gpu)
        have_sm = facts.gpus[0].sm
        try:
            have = resolve_gpu(facts.gpus[0].name)
            have_sm = have.sm
        except UsageError:
            pass
        add("gpu-generation", have_sm == want.sm,
            f"profile is for {spec.gpu} (sm{want.sm}); host has {facts.gpus[0].name} (sm{have_sm})",
            fix=f"set hardware.gpu to the host's GPU ({facts.gpus[0].name}) and re-validate")
    # SGLang on the host
    if facts.sglang_version is None:
        add("sglang", False, f"sglang is not importable by {facts.python} on the host",
            "error" if remote_dry_run else "warning",
            fix="set the host's `python:` in the inventory to the interpreter that has SGLang")
    else:
        add("sglang", facts.sglang_version == spec.sglang,
            f"host has sglang {facts.sglang_version}, profile targets {spec.sglang}",
            fix=f"install sglang=={spec.sglang} on the host or change the profile's `sglang:`")
    # payload needs a site-packages to install into
    if spec.payload is not None:
        add("sglang-root", bool(facts.sglang_root),
            f"payload installs into {facts.sglang_root or '(unknown: sglang not found)'}",
            fix="set sglang_root: in the inventory")
    # port
    ours = facts.server_running and (facts.server or {}).get("port") == target.port
    add("port", ours or target.port not in facts.ports_in_use,
        f"port {target.port} is " + ("used by our server" if ours else
                                     "in use by another process" if target.port in facts.ports_in_use else "free"),
        fix="stop whatever listens there or change server.port")
    # disk
    need_bytes = (spec.payload.total_bytes if spec.payload else 0) * 3 + (1 << 30)
    add("disk", facts.disk_free_bytes >= need_bytes,
        f"{facts.disk_free_bytes / 2**30:.1f} GiB free in {facts.work_dir}", fix="free disk space on the host")
    # models present on the host
    for path in spec.model_paths:
        info = facts.models.get(path) or {}
        add("model", "config" in info, f"{path}: " + ("config.json found" if "config" in info else
                                                      info.get("error", "not checked")),
            fix="copy the model to the host or fix model.path")
    # static validation of the rendered argv with the host's GPU and the cached model configs
    checks.extend(_static_validation(spec, target, facts))
    return checks


WORKER_CAPABILITY_RULE = "DDT120"
BUNDLED_WORKER = "ddtree_sglang/worker.py"


def ships_bundled_worker(spec: DeploySpec) -> bool:
    """Whether the payload of this deploy carries ddtctl's own DDTREE worker, byte for byte (a payload built from
    the bundled sources does; a hand-made one may carry another worker, which DDT120 says nothing about)."""
    from ddtctl.overlay.source import PAYLOADS_DIR, sha256_file

    if spec.payload is None:
        return False
    entry = spec.payload.files.get(f"files/{BUNDLED_WORKER}")
    bundled = PAYLOADS_DIR / f"ddtree-sglang-{spec.sglang}" / "files" / BUNDLED_WORKER
    if entry is None or not bundled.is_file():
        return False
    return sha256_file(bundled) == entry.sha256


def _static_validation(spec: DeploySpec, target: Target, facts: HostFacts) -> list[Check]:
    try:
        from ddtctl.dryrun import ModelConfigMissing, localize_model_paths
        from ddtctl.validate import validate_argv
    except ImportError:  # pragma: no cover - the lead's validator not present
        return [Check("validate", True, "static validation unavailable", target.name, "warning")]
    try:
        argv, _ = localize_model_paths(target.argv, target.name)
    except ModelConfigMissing:
        argv = list(target.argv)
    gpu = facts.gpu_name or spec.gpu
    try:
        from ddtctl.schema.gpus import resolve_gpu

        if gpu:
            resolve_gpu(gpu)
    except UsageError:
        gpu = spec.gpu
    try:
        res = validate_argv(argv, gpu=gpu, sglang=spec.sglang, source=spec.source)
    except UsageError as err:
        return [Check("validate", False, err.one_line(), target.name)]
    out = []
    bundled_worker = ships_bundled_worker(spec)
    for f in res.findings:
        if f.rule == WORKER_CAPABILITY_RULE and bundled_worker:
            # a warning for validate (the configuration itself is right), but this deploy ships the worker that
            # refuses the launch at start: stop before shipping, launching and rolling back
            out.append(Check(f"validate:{f.rule}", False,
                             f.message + " -- the payload this deploy ships is that worker", target.name, "error",
                             f.fix))
        elif f.severity == "error":
            out.append(Check(f"validate:{f.rule}", False, f.message, target.name, "error", f.fix))
        elif f.severity == "warning":
            out.append(Check(f"validate:{f.rule}", False, f.message, target.name, "warning", f.fix))
    if res.valid:
        out.append(Check("validate", True, f"static rules pass for {gpu or 'any GPU'}", target.name, "info"))
    return out


# ----------------------------------------------------------------------------------------------- plan
@dataclass
class HostPlan:
    host: str
    rank: int
    release_id: str
    fingerprint: str
    current_release: str | None
    current_running: bool
    files_total: int
    files_to_ship: list[str]
    bytes_to_ship: int
    install: bool
    uninstall: bool
    stop: bool
    start: bool
    argv_diff: list[tuple[str, Any, Any]]
    env: dict[str, str]
    launch_argv: list[str]
    reason: str

    @property
    def unchanged(self) -> bool:
        return not (self.files_to_ship or self.install or self.uninstall or self.stop or self.start)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["env"] = mask_env(self.env)
        d["launch_argv"] = mask_argv(self.launch_argv)
        d["argv_diff"] = [(k, "***" if is_secret_flag(k) else o, "***" if is_secret_flag(k) else n)
                          for k, o, n in self.argv_diff]
        d["unchanged"] = self.unchanged
        return d


@dataclass
class Plan:
    hosts: list[HostPlan]

    @property
    def unchanged(self) -> bool:
        return all(h.unchanged for h in self.hosts)

    def to_json(self) -> dict:
        return {"unchanged": self.unchanged, "hosts": [h.to_json() for h in self.hosts]}


def release_fingerprint(spec: DeploySpec, target: Target) -> str:
    data = {
        "launch_argv": target.launch_argv,
        "env": target.env,
        "payload": spec.payload.digest if spec.payload else None,  # what runs; the tools (installer, resolver)
        "port": target.port,                                        # do not change a running release
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _argv_diff(old: list[str] | None, new: list[str]) -> list[tuple[str, Any, Any]]:
    a, b = argv_to_flags(old or []), argv_to_flags(new)
    return [(k, a.get(k), b.get(k)) for k in list(dict.fromkeys([*b, *a])) if a.get(k) != b.get(k)]


def make_plan_for_host(spec: DeploySpec, target: Target, state: dict, missing: set[str], *,
                       restart: bool) -> HostPlan:
    fp = release_fingerprint(spec, target)
    st = state["state"]
    current = st.get("current")
    releases = {r["id"]: r for r in state["releases"]}
    cur_rel = releases.get(current) if current else None
    server = state.get("server") or {}
    running = bool(server.get("running"))
    same = bool(cur_rel and cur_rel.get("fingerprint") == fp)
    manifests = [m for m in (spec.payload, spec.tools) if m is not None]
    to_ship = sorted({rel for m in manifests for rel, e in m.files.items() if e.sha256 in missing})
    nbytes = sum(e.size for m in manifests for e in m.files.values() if e.sha256 in missing)
    total = sum(len(m.files) for m in manifests)
    installed = (st.get("installed_payload") or {}).get("hash")
    want_payload = spec.payload.digest if spec.payload else None
    install = want_payload is not None and want_payload != installed
    uninstall = want_payload is None and installed is not None
    if same and running and server.get("release") == current and not restart:
        release_id, stop, start, reason = current, False, False, "no change: the same release is running"
        install = uninstall = False
        to_ship, nbytes = [], 0  # newer tools alone are no reason to touch a running release
    elif same and not restart:
        release_id, stop, start, reason = current, running, True, "same release, server not running: start it"
    else:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        release_id = f"{stamp}-{fp[:8]}"
        stop, start = running, True
        reason = "restart requested" if (same and restart) else ("first deploy" if not current else "release changed")
    return HostPlan(
        host=target.name, rank=target.rank, release_id=release_id, fingerprint=fp, current_release=current,
        current_running=running, files_total=total, files_to_ship=to_ship, bytes_to_ship=nbytes, install=install,
        uninstall=uninstall, stop=stop, start=start,
        argv_diff=[] if (same or not cur_rel) else _argv_diff(cur_rel.get("argv"), target.argv),
        env=target.env, launch_argv=target.launch_argv, reason=reason,
    )


# ----------------------------------------------------------------------------------------------- remote lock
class RemoteLock:
    """The host's deploy lock, held by a remote agent process for as long as our channel stays open (a killed
    connection releases it)."""

    def __init__(self, conn: Connection, *, holder: str, wait_s: float = 0.0,
                 on_wait: Callable[[dict], None] | None = None):
        self.conn = conn
        self.holder = holder
        self.wait_s = wait_s
        self.on_wait = on_wait
        self.token = uuid.uuid4().hex
        self.chan = None

    def acquire(self) -> "RemoteLock":
        argv = self.conn.agent_argv("lock", {"token": self.token, "holder": self.holder, "wait_s": self.wait_s})
        chan = self.conn.open_channel(argv)
        chan.settimeout(self.wait_s + self.conn.host.command_timeout_s)
        buf = b""
        try:
            while True:
                data = chan.recv(4096)
                if not data:
                    chan.status_event.wait(5)
                    err = chan.recv_stderr(4096).decode(errors="replace").strip() if chan.recv_stderr_ready() else ""
                    raise RemoteError(f"lock: the agent exited without taking the lock {err}".strip(),
                                      where=self.conn.host.name)
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip() == b"NEED":  # the boot found no verified agent on the host: it installs ours
                        chan.sendall(AGENT_SOURCE)
                        continue
                    if not line.startswith(b"{"):
                        continue
                    msg = json.loads(line)
                    if msg.get("locked"):
                        self.chan = chan
                        self.conn.lock_token = self.token  # type: ignore[attr-defined]
                        self.conn._deploy_lock = self  # type: ignore[attr-defined]
                        return self
                    if msg.get("waiting"):
                        if self.on_wait:
                            self.on_wait(msg.get("held_by") or {})
                        continue
                    if msg.get("error") == "locked":
                        held = msg.get("held_by") or {}
                        since = time.strftime("%H:%M:%S", time.localtime(held.get("since", 0)))
                        raise LockHeld(
                            f"another deploy holds the lock on this host ({held.get('holder', '?')}, since {since})",
                            where=self.conn.host.name,
                            fix="wait for it to finish, or pass --lock-wait SECONDS to queue behind it")
                    raise RemoteError(f"lock: {msg.get('error')}", where=self.conn.host.name)
        except (OSError, EOFError) as err:
            chan.close()
            if isinstance(err, socket.timeout):
                raise LockHeld("timed out waiting for the deploy lock", where=self.conn.host.name) from None
            raise ConnectionLost(f"connection lost while taking the lock: {err}", where=self.conn.host.name) from None
        except BaseException:
            chan.close()
            raise

    @property
    def alive(self) -> bool:
        return self.chan is not None and not self.chan.closed and self.conn.alive

    def reacquire(self) -> "RemoteLock":
        """After the connection dropped (which released the lock on the host), take it again — unless another
        deploy took it meanwhile (LockHeld)."""
        self.chan = None
        self.token = uuid.uuid4().hex
        self.acquire()
        self.conn.log("deploy lock re-taken after the reconnect")
        return self

    def release(self) -> None:
        if self.chan is not None:
            try:
                self.chan.shutdown_write()
                self.chan.close()
            except Exception:
                pass
            self.chan = None
            self.conn.lock_token = None  # type: ignore[attr-defined]

    def __enter__(self) -> "RemoteLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _locked_agent(conn: Connection, op: str, params: dict | None = None, **kw) -> Any:
    """A lock-holding agent operation. These operations are idempotent (stop, install, start of the same release,
    status, gc, materialize), so after a dropped connection they are re-run once: reconnect, re-take the lock."""
    for attempt in (0, 1):
        lock = getattr(conn, "_deploy_lock", None)
        if attempt and lock is not None and not lock.alive:
            lock.reacquire()
        try:
            return conn.agent(op, dict(params or {}, lock_token=getattr(conn, "lock_token", None)), retry=True, **kw)
        except RemoteError as err:
            lost = isinstance(err, ConnectionLost) or "lock is not held" in err.message
            if attempt or not lost or lock is None:
                raise
    raise AssertionError("unreachable")


# ----------------------------------------------------------------------------------------------- health
@dataclass
class HealthResult:
    ok: bool
    message: str
    elapsed_s: float
    server_info: dict | None = None
    mismatches: list[tuple[str, Any, Any]] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = self.__dict__.copy()
        d["server_info"] = mask_info(self.server_info)
        return d


def expected_identity(argv: list[str], resolved: dict | None) -> dict[str, Any]:
    """The served values that must match: algorithm, tp/pp/dp, multi-node rank, every DDTREE knob."""
    flags = {k.replace("-", "_"): v for k, v in argv_to_flags(argv).items()}
    out = {}
    for key in IDENTITY_FIELDS:
        if resolved and key in resolved and resolved[key] is not None:
            out[key] = resolved[key]
        elif key in flags:
            out[key] = flags[key]
    for key, value in flags.items():
        if key.startswith(DDTREE_PREFIX):
            out[key] = resolved.get(key, value) if resolved else value
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() in ("true", "1") if isinstance(b, bool) and b else str(a).lower() == str(b).lower()
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).upper() == str(b).upper()


def wait_healthy(conn: Connection, target: Target, release_id: str, *, timeout_s: float, expected: dict[str, Any],
                 emit: _Events, interval_s: float = 0.5, log_offset: int = 0) -> HealthResult:
    """Poll /health then /get_server_info (from the host itself) until ready or timeout; stream the log meanwhile
    (from log_offset: where this start's output begins)."""
    start = time.monotonic()
    offset = log_offset
    tail: list[str] = []
    last_state = None
    wait = interval_s
    while True:
        p = conn.agent("probe", {"port": target.port, "host": target.probe_host, "log_offset": offset,
                                 "log_release": release_id}, retry=True)
        offset = p["log_offset"]
        for line in p["log"].splitlines():
            tail.append(emit.mask(line))
            emit("log", line, target.name, "log")
        tail = tail[-50:]
        elapsed = time.monotonic() - start
        if not p["running"]:
            return HealthResult(False, "the server process exited", elapsed, log_tail=tail)
        state = f"/health {p['health']}" if p["health"] else f"not listening yet ({p['health_error'] or 'no answer'})"
        if state != last_state:
            emit("health", f"{state} after {elapsed:.1f}s", target.name)
            last_state = state
        if p["health"] == 200 and p["server_info"] is not None:
            info = p["server_info"]
            mism = [(k, v, info.get(k)) for k, v in expected.items() if k in info and not _same(info.get(k), v)]
            mism += [(k, v, None) for k, v in expected.items() if k not in info and k.startswith(DDTREE_PREFIX)]
            if mism:
                what = ", ".join(f"{k}: served {s!r}, expected {e!r}" for k, e, s in mism)
                return HealthResult(False, f"served args differ from the resolved ones ({what})", elapsed, info,
                                    mism, tail)
            return HealthResult(True, f"healthy after {elapsed:.1f}s; served args match", elapsed, info, [], tail)
        if elapsed >= timeout_s:
            return HealthResult(False, f"not healthy after {timeout_s:g}s ({state})", elapsed, log_tail=tail)
        time.sleep(min(wait, max(0.0, timeout_s - elapsed)))
        wait = min(wait * 1.5, 5.0)


def _wait_alive(conn: Connection, target: Target, emit: _Events) -> HealthResult:
    p = conn.agent("probe", {"port": target.port, "server_info": False, "lines": 20}, retry=True)
    if p["running"]:
        return HealthResult(True, f"rank {target.rank} running (pid {p['pid']})", 0.0)
    return HealthResult(False, f"rank {target.rank} exited", 0.0, log_tail=emit.mask(p["log"]).splitlines())


# ----------------------------------------------------------------------------------------------- remote dry-run
def remote_dry_run(conn: Connection, target: Target, release_id: str, spec: DeploySpec, facts: HostFacts,
                   *, timeout_s: float = 600) -> "Any":
    """SGLang's own resolver on the host (its python, its model configs) with the release's payload staged as a
    read-only view (installer.py view) first on sys.path. Returns a ddtctl.dryrun.DryRunResult."""
    from ddtctl.bridge.client import stderr_cause
    from ddtctl.dryrun import DryRunResult, platform_for

    wd = conn.work_dir
    rel_dir = f"{wd}/releases/{release_id}"
    extra = ""
    if spec.payload is not None:
        view = f"{rel_dir}/view"
        res = conn.run([conn.host.python, f"{rel_dir}/tools/installer.py", "view", "--sglang-root",
                        facts.sglang_root or "", "--payload", f"{rel_dir}/payload", "--out", view], timeout=120)
        reply = _last_json(res.stdout)
        if res.rc != 0 or not reply.get("ok"):
            return DryRunResult(spec.source, False, {"type": "PayloadView", "message": reply.get("error") or
                                                     res.stderr.strip()[-400:], "hook": None}, setup_error=True)
        extra = view
    gpu = facts.gpu_name or spec.gpu
    try:
        platform, _ = platform_for(gpu)
    except UsageError:
        platform, _ = platform_for(spec.gpu) if spec.gpu else (None, None)
    argv = list(target.argv)
    if platform is not None and _flag_value(argv, "--device") is None:
        argv += ["--device", "cuda"]
    req = json.dumps({"id": 1, "argv": argv, "platform": platform}) + "\n" + json.dumps({"op": "exit"}) + "\n"
    cmd = ["env", f"DDTCTL_EXTRA_SYS_PATH={extra}", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1",
           "PYTHONWARNINGS=ignore", conn.host.python, "-I", "-u", f"{rel_dir}/tools/resolver_worker.py"]
    res = conn.run(cmd, stdin=req.encode(), timeout=timeout_s)
    msgs = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    ready = next((m for m in msgs if "ready" in m), None)
    answer = next((m for m in msgs if m.get("id") == 1), None)
    if not ready or not ready.get("ready") or answer is None:
        why = (ready or {}).get("error") or {}
        msg = f"{why.get('type')}: {why.get('message')}" if why else stderr_cause(res.stderr)
        return DryRunResult(spec.source, False, {"type": "ResolverStart", "message": msg, "hook": None},
                            argv=argv, setup_error=True)
    return DryRunResult(spec.source, bool(answer.get("accepted")), answer.get("error"), answer.get("resolved") or {},
                        answer.get("overrides") or [], argv=argv, gpu=gpu, warnings=answer.get("warnings") or [],
                        error_at=answer.get("error_at"), elapsed_s=answer.get("elapsed_s"))


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {}


# ----------------------------------------------------------------------------------------------- deploy
@dataclass
class DeployOptions:
    dry_run: bool = False  # stop after the plan (read-only: no lock, nothing shipped)
    check_only: bool = False  # also ship into the store and run SGLang's resolver on the host; install/launch nothing
    restart: bool = False
    trust_new_host: bool = False
    lock_wait_s: float = 0.0
    remote_dry_run: bool = True
    keep_releases: int = 5
    health_interval_s: float = 0.5
    stop_grace_s: float = 20.0
    health_timeout_s: float | None = None  # override the profile's
    warmup_timeout_s: float = 900.0
    confirm: Callable[[Plan], bool] | None = None  # None = yes
    on_event: Callable[[Event], None] | None = None
    # test hook: called after each uploaded file (host, done, total)
    on_ship_progress: Callable[[str, int, int], None] | None = None


@dataclass
class DeployResult:
    status: str  # planned | checked | unchanged | deployed | aborted | rejected | rolled_back | failed
    spec_name: str
    release: dict[str, str] = field(default_factory=dict)  # host -> release id now serving (or attempted)
    facts: dict[str, HostFacts] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    plan: Plan | None = None
    shipped: dict[str, ShipResult] = field(default_factory=dict)
    dry_run: Any = None
    health: HealthResult | None = None
    rolled_back_to: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None
    events: list[Event] = field(default_factory=list)
    elapsed_s: float = 0.0
    secrets: set[str] = field(default_factory=set, repr=False)

    @property
    def ok(self) -> bool:
        return self.status in ("planned", "checked", "unchanged", "deployed", "aborted")

    @property
    def exit_code(self) -> int:
        from ddtctl.errors import ExitCode

        if self.ok:
            return ExitCode.OK
        return ExitCode.INVALID if self.status == "rejected" else ExitCode.DEPLOY

    def to_json(self) -> dict:
        """Secrets (from the profile's argv/env) are masked everywhere in the report, SGLang's answers included."""
        return _mask_strings(json.loads(json.dumps(self._json(), default=str)), self.secrets)

    def _json(self) -> dict:
        return {
            "status": self.status, "profile": self.spec_name, "release": self.release, "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
            "facts": {k: v.to_json() for k, v in self.facts.items()},
            "checks": [c.to_json() for c in self.checks],
            "plan": self.plan.to_json() if self.plan else None,
            "shipped": {k: v.to_json() for k, v in self.shipped.items()},
            "dry_run": self.dry_run.to_json() if self.dry_run is not None else None,
            "health": self.health.to_json() if self.health else None,
            "rolled_back_to": self.rolled_back_to,
        }


def _parallel(fn: Callable, items: list) -> list:
    if len(items) == 1:
        return [fn(items[0])]
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(fn, items))


def connect(host: Host, *, trust_new_host: bool = False, emit: _Events | None = None) -> Connection:
    log = (lambda msg: emit("ssh", msg, host.name, "warn")) if emit else None
    conn = Connection(host, trust_new_host=trust_new_host, log=log).open()
    if conn.trusted_key and emit:
        emit("facts", f"trusted new host key {conn.trusted_key} (saved to {host.known_hosts})", host.name, "warn")
    return conn


def deploy(spec: DeploySpec, hosts: list[Host], opts: DeployOptions | None = None) -> DeployResult:
    """Take the hosts from whatever they run to `spec` serving, or leave them as they were."""
    opts = opts or DeployOptions()
    emit = _Events(opts.on_event)
    t0 = time.monotonic()
    result = DeployResult(status="failed", spec_name=spec.name, events=emit.items)
    targets = spec.targets(hosts)
    for t in targets:
        emit.secrets |= secret_values(t.argv, t.env)
    result.secrets = emit.secrets
    conns: dict[str, Connection] = {}
    locks: list[RemoteLock] = []
    try:
        # 1. facts
        for t in targets:
            emit("facts", f"connecting to {t.host.describe()}", t.name)
        opened = _parallel(lambda t: connect(t.host, trust_new_host=opts.trust_new_host, emit=emit), targets)
        conns = {t.name: c for t, c in zip(targets, opened, strict=True)}
        facts = _parallel(lambda t: gather_facts(conns[t.name], model_paths=spec.model_paths), targets)
        result.facts = {t.name: f for t, f in zip(targets, facts, strict=True)}
        for t, f in zip(targets, facts, strict=True):
            gpus = f"{len(f.gpus)}x {f.gpu_name}" if f.gpus else f"no GPUs ({f.gpu_error})"
            emit("facts", f"{f.hostname}: {gpus}, CUDA {f.cuda}, python {f.python_version}, sglang "
                          f"{f.sglang_version or 'absent'}, {f.disk_free_bytes / 2**30:.0f} GiB free, server "
                          f"{'running ' + str(f.server.get('release')) if f.server_running else 'not running'}",
                 t.name)
        # 2. preflight (static, with host facts)
        for t, f in zip(targets, facts, strict=True):
            result.checks.extend(preflight_checks(spec, t, f, remote_dry_run=opts.remote_dry_run))
        for c in result.checks:
            emit("preflight", f"{c.name}: {c.message}" + (f" (fix: {c.fix})" if c.fix and not c.ok else ""), c.host,
                 "ok" if c.ok else ("error" if c.severity == "error" else "warn"))
        errors = [c for c in result.checks if not c.ok and c.severity == "error"]
        if errors:
            result.status = "rejected"
            result.error = f"preflight failed: {errors[0].message}" + (f" (+{len(errors) - 1} more)"
                                                                       if len(errors) > 1 else "")
            return result
        # 3. lock + plan
        if not opts.dry_run:
            holder = f"{getpass.getuser()}@{socket.gethostname()} deploy {spec.name}"
            for t in sorted(targets, key=lambda t: t.name):  # one order everywhere: no lock-order deadlock
                def _on_wait(held, _t=t):
                    emit("lock", f"waiting for the deploy lock held by {held.get('holder', '?')}", _t.name, "warn")
                locks.append(RemoteLock(conns[t.name], holder=holder, wait_s=opts.lock_wait_s,
                                        on_wait=_on_wait).acquire())
                emit("lock", "deploy lock taken", t.name)
        manifests = [m for m in (spec.payload, spec.tools) if m is not None]

        def _survey(t: Target):
            c = conns[t.name]
            with ThreadPoolExecutor(1) as pool:  # the state (agent) and the store listing (SFTP) overlap
                fut = pool.submit(c.agent, "state", None, retry=True)
                listing = list_store(c)
                st = fut.result()
            return st, missing_objects(listing, manifests), listing

        surveys = _parallel(_survey, targets)
        states = {t.name: s[0] for t, s in zip(targets, surveys, strict=True)}
        plan = Plan([make_plan_for_host(spec, t, s[0], s[1], restart=opts.restart)
                     for t, s in zip(targets, surveys, strict=True)])
        result.plan = plan
        for hp in plan.hosts:
            emit("plan", _describe_plan(hp), hp.host)
        if opts.dry_run:
            result.status = "planned"
            return result
        if plan.unchanged and not opts.check_only:
            result.status = "unchanged"
            result.release = {hp.host: hp.release_id for hp in plan.hosts}
            emit("plan", "nothing to do: 0 files to ship, server left running", None, "ok")
            return result
        if opts.confirm is not None and not opts.check_only and not opts.confirm(plan):
            result.status = "aborted"
            emit("plan", "aborted: nothing was changed", None, "warn")
            return result
        # 4. ship (all hosts in parallel) and materialize the release
        def _ship(pair):
            t, (st, missing, listing) = pair
            c = conns[t.name]
            hp = next(h for h in plan.hosts if h.host == t.name)
            progress = (lambda what, done, total, _n=t.name: opts.on_ship_progress(_n, done, total)) \
                if opts.on_ship_progress else None
            return ship(c, manifests, listing=listing, on_progress=progress,
                        then=[("materialize", {"release": _release_record(spec, t, hp)})])

        shipped = _parallel(_ship, list(zip(targets, surveys, strict=True)))
        result.shipped = {t.name: s for t, s in zip(targets, shipped, strict=True)}
        for t, s in zip(targets, shipped, strict=True):
            emit("ship", f"{s.files_sent} file(s) sent ({s.bytes_sent} bytes), {s.skipped} skipped (already there, "
                         f"same sha256), {s.verified} verified on the host"
                 + (f", {s.reused} reused from an interrupted deploy" if s.reused else ""), t.name, "ok")
        # 2b. the real dry-run on the (rank 0) host, payload staged, nothing installed yet
        rank0 = targets[0]
        hp0 = plan.hosts[0]
        if opts.remote_dry_run:
            emit("dry-run", "SGLang's resolver on the host, payload staged (not installed)", rank0.name)
            dr = remote_dry_run(conns[rank0.name], rank0, hp0.release_id, spec, result.facts[rank0.name])
            result.dry_run = dr
            if not dr.accepted:
                err = dr.error or {}
                for t, hp in zip(targets, plan.hosts, strict=True):
                    if hp.release_id != hp.current_release:
                        _locked_agent(conns[t.name], "set_status", {"id": hp.release_id, "status": "rejected",
                                                                    "note": err.get("message")})
                result.status = "rejected"
                result.error = f"SGLang rejected the launch on {rank0.name}: {err.get('type')}: {err.get('message')}"
                emit("dry-run", result.error, rank0.name, "error")
                return result
            emit("dry-run", f"accepted ({len(dr.overrides)} value(s) resolved by SGLang)", rank0.name, "ok")
        # 5a. kernel warm-up on the host's GPU, before anything running is touched
        for t, hp in zip(targets, plan.hosts, strict=True):
            wargv = warmup_argv(spec, t)
            if not wargv or not hp.start:
                continue
            shown = "kernel self-test on the GPU" if wargv[1:2] == ["-c"] else " ".join(wargv)
            emit("warmup", f"compiling the payload's kernels ({shown})", t.name)
            w = _locked_agent(conns[t.name], "warmup", {"id": hp.release_id, "argv": wargv,
                                                        "timeout_s": opts.warmup_timeout_s},
                              timeout=opts.warmup_timeout_s + 30)
            if w["rc"] != 0:
                for line in w["tail"].splitlines()[-15:]:
                    emit("log", line, t.name, "log")
                _locked_agent(conns[t.name], "set_status", {"id": hp.release_id, "status": "rejected",
                                                            "note": "warm-up failed"})
                result.status = "rejected"
                result.error = f"kernel warm-up failed on {t.name} (exit {w['rc']}; log {w['log']})"
                emit("warmup", result.error, t.name, "error")
                return result
            emit("warmup", f"done in {w['elapsed_s']:.1f}s (Triton cache {w['triton_cache']})", t.name, "ok")
        if opts.check_only:
            result.status = "checked"
            emit("plan", "check only: preflight passed; nothing installed or restarted", None, "ok")
            return result
        # 5. launch: stop old, install payload, start (other ranks first, rank 0 last)
        for t, hp in zip(targets, plan.hosts, strict=True):
            c = conns[t.name]
            ops: list[tuple[str, dict]] = []
            if hp.stop:
                ops.append(("stop", {"grace_s": opts.stop_grace_s}))
            if hp.install or hp.uninstall:
                ops.append(("install", {"id": hp.release_id, "sglang_root": result.facts[t.name].sglang_root}))
            if not ops:
                continue
            res = _locked_agent(c, "batch", {"ops": ops}, timeout=opts.stop_grace_s + 630)
            for (name, _), r in zip(ops, res, strict=True):
                if name == "stop" and r.get("was_running"):
                    emit("launch", f"stopped release {r.get('release')} (pid {r['pid']}"
                                   f"{', forced with SIGKILL' if r.get('forced') else ''})", t.name)
                elif name == "install":
                    emit("install", "payload installed into " + str(result.facts[t.name].sglang_root)
                         if spec.payload else "payload uninstalled", t.name, "ok")
        offsets = {}
        for t, hp in sorted(zip(targets, plan.hosts, strict=True), key=lambda th: -th[0].rank):
            if hp.start:
                r = _locked_agent(conns[t.name], "start", {"id": hp.release_id})
                offsets[t.name] = r.get("log_offset", 0)
                emit("launch", f"started release {hp.release_id} (pid {r['pid']}, log {r['log']})", t.name)
        # 6. health (rank 0 serves HTTP; the others must stay alive)
        expected = expected_identity(rank0.argv, result.dry_run.resolved if result.dry_run else None)
        timeout = opts.health_timeout_s or spec.health_timeout_s
        health = wait_healthy(conns[rank0.name], rank0, hp0.release_id, timeout_s=timeout, expected=expected,
                              emit=emit, interval_s=opts.health_interval_s, log_offset=offsets.get(rank0.name, 0))
        if health.ok:
            for t in targets[1:]:
                alive = _wait_alive(conns[t.name], t, emit)
                if not alive.ok:
                    health = HealthResult(False, f"{t.name}: {alive.message}", health.elapsed_s,
                                          log_tail=alive.log_tail)
                    break
        result.health = health
        if health.ok:
            emit("health", health.message, rank0.name, "ok")
            # 7. record
            for t, hp in zip(targets, plan.hosts, strict=True):
                _, gc = _locked_agent(conns[t.name], "batch", {"ops": [
                    ("set_status", {"id": hp.release_id, "status": "ok", "make_current": True}),
                    ("gc", {"keep": opts.keep_releases})]})
                emit("record", f"release {hp.release_id} recorded as current"
                     + (f"; removed {len(gc['removed_releases'])} old release(s)" if gc["removed_releases"] else ""),
                     t.name, "ok")
            result.status = "deployed"
            result.release = {hp.host: hp.release_id for hp in plan.hosts}
            return result
        # failure: show the log, roll back
        emit("health", health.message, rank0.name, "error")  # its log was streamed above
        result.error = f"health check failed on {rank0.name}: {health.message}"
        rolled = _rollback_after_failure(spec, targets, plan, conns, states, result, opts, emit)
        result.status = "rolled_back" if rolled else "failed"
        return result
    finally:
        for lock in locks:
            lock.release()
        for c in conns.values():
            c.close()
        result.elapsed_s = time.monotonic() - t0


KERNEL_SELFTEST = "files/ddtree_sglang/kernels/selftest.py"


def warmup_argv(spec: DeploySpec, t: Target) -> list[str] | None:
    """The host's `warmup:` command, or (by default) the payload's kernel self-test when the payload has one."""
    explicit = t.host.warmup_argv()
    if explicit is not None:
        return explicit or None
    if spec.payload is not None and KERNEL_SELFTEST in spec.payload.files:
        return [t.host.python, "-c", KERNEL_WARMUP]
    return None


# The payload's Triton kernels against their exact reference at server sizes on the host's GPU: this compiles them
# into TRITON_CACHE_DIR (shared with the server) and refuses a GPU/driver on which they are wrong.
KERNEL_WARMUP = """\
import sys
from ddtree_sglang.kernels.selftest import selftest
r = selftest(device="cuda")
for c in r.checks:
    print("ok  " if c.ok else "FAIL", c.name, c.detail)
print("kernel selftest", "ok" if r.ok else "FAILED", "in %.1fs" % r.seconds)
sys.exit(0 if r.ok else 1)
"""


def _release_record(spec: DeploySpec, t: Target, hp: HostPlan) -> dict:
    import ddtctl

    return {
        "id": hp.release_id, "fingerprint": hp.fingerprint, "profile": {"name": spec.name, "source": spec.source,
                                                                        "sha256": spec.profile_hash},
        "sglang": spec.sglang, "algorithm": spec.algorithm, "argv": t.argv, "launch_argv": t.launch_argv,
        "env": t.env, "port": t.port, "probe_host": t.probe_host, "rank": t.rank, "nnodes": t.nnodes,
        "health_timeout_s": spec.health_timeout_s,
        "payload_hash": spec.payload.digest if spec.payload else None,
        "payload": spec.payload.to_json() if spec.payload else None,
        "tools": spec.tools.to_json() if spec.tools else None,
        "deployed_by": f"{getpass.getuser()}@{socket.gethostname()}", "ddtctl": ddtctl.__version__,
        "created_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _describe_plan(hp: HostPlan) -> str:
    if hp.unchanged:
        return f"{hp.reason}; release {hp.release_id}; 0/{hp.files_total} files to ship"
    parts = [hp.reason, f"release {hp.release_id}",
             f"ship {len(hp.files_to_ship)}/{hp.files_total} files ({hp.bytes_to_ship} bytes), "
             f"{hp.files_total - len(hp.files_to_ship)} unchanged by sha256"]
    if hp.install:
        parts.append("install payload")
    if hp.uninstall:
        parts.append("uninstall payload")
    if hp.stop:
        parts.append(f"stop {hp.current_release}")
    if hp.start:
        parts.append("start server")
    if hp.argv_diff:
        parts.append("argv: " + ", ".join(f"--{k} {o!r} -> {n!r}" if not is_secret_flag(k) else f"--{k} changed"
                                          for k, o, n in hp.argv_diff[:8]))
    return "; ".join(parts)


def _rollback_after_failure(spec, targets, plan, conns, states, result, opts, emit) -> bool:
    ok = True
    for t, hp in zip(targets, plan.hosts, strict=True):
        c = conns[t.name]
        _locked_agent(c, "stop", {"grace_s": opts.stop_grace_s}, timeout=opts.stop_grace_s + 30)
        _locked_agent(c, "set_status", {"id": hp.release_id, "status": "failed", "note": result.error})
        prev = hp.current_release if hp.current_release != hp.release_id else None
        result.rolled_back_to[t.name] = prev
        if prev:
            emit("rollback", f"restoring release {prev}", t.name, "warn")
            _locked_agent(c, "install", {"id": prev, "sglang_root": result.facts[t.name].sglang_root}, timeout=600)
        else:
            emit("rollback", "no previous release: server stopped, payload uninstalled", t.name, "warn")
            _locked_agent(c, "uninstall", {"sglang_root": result.facts[t.name].sglang_root}, timeout=600)
    # restart previous releases (other ranks first)
    offsets = {}
    for t, _hp in sorted(zip(targets, plan.hosts, strict=True), key=lambda th: -th[0].rank):
        prev = result.rolled_back_to.get(t.name)
        if prev:
            offsets[t.name] = _locked_agent(conns[t.name], "start", {"id": prev}).get("log_offset", 0)
    rank0 = targets[0]
    prev0 = result.rolled_back_to.get(rank0.name)
    if prev0:
        rel = next((r for r in states[rank0.name]["releases"] if r["id"] == prev0), {})
        h = wait_healthy(conns[rank0.name], _target_from_release(rank0.host, rel), prev0,
                         timeout_s=float(rel.get("health_timeout_s") or spec.health_timeout_s),
                         expected=expected_identity(rel.get("argv") or [], None), emit=emit,
                         interval_s=opts.health_interval_s, log_offset=offsets.get(rank0.name, 0))
        emit("rollback", f"release {prev0}: {h.message}", rank0.name, "ok" if h.ok else "error")
        ok = h.ok
    return ok and any(result.rolled_back_to.values())


def _target_from_release(host: Host, rel: dict) -> Target:
    return Target(host, int(rel.get("rank", 0)), int(rel.get("nnodes", 1)), list(rel.get("argv") or []),
                  list(rel.get("launch_argv") or []), dict(rel.get("env") or {}), int(rel.get("port") or 30000),
                  rel.get("probe_host") or "127.0.0.1")


# ----------------------------------------------------------------------------------------------- host operations
@dataclass
class HostStatus:
    host: str
    current: str | None
    previous: str | None
    server: dict | None
    health: int | None
    server_info: dict | None
    installed_payload: dict | None
    releases: list[dict]

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["server"] = mask_info(self.server)
        d["server_info"] = mask_info(self.server_info)
        d["releases"] = [_release_summary(r) for r in self.releases]
        return d


def _release_summary(r: dict) -> dict:
    return {"id": r["id"], "status": r.get("status"), "created": r.get("created_iso"),
            "profile": (r.get("profile") or {}).get("name"), "profile_sha256": (r.get("profile") or {}).get("sha256"),
            "payload_hash": r.get("payload_hash"), "algorithm": r.get("algorithm"),
            "argv": mask_argv(list(r.get("argv") or [])),
            "port": r.get("port")}


def _open(host: Host, trust_new_host: bool = False) -> Connection:
    return Connection(host, trust_new_host=trust_new_host).open()


def host_facts(host: Host, *, model_paths: list[str] = (), trust_new_host: bool = False) -> HostFacts:  # type: ignore[assignment]
    with _open(host, trust_new_host) as conn:
        return gather_facts(conn, model_paths=list(model_paths))


def host_status(host: Host, *, trust_new_host: bool = False, probe: bool = True) -> HostStatus:
    """State, releases and server process of HOST; with `probe`, also the server's /health and /get_server_info."""
    with _open(host, trust_new_host) as conn:
        st = conn.agent("state", retry=True)
        server = st.get("server")
        health = info = None
        if probe and server and server.get("running") and server.get("port"):
            p = conn.agent("probe", {"port": server["port"], "lines": 0}, retry=True)
            health, info = p["health"], p["server_info"]
        return HostStatus(host.name, st["state"].get("current"), st["state"].get("previous"), server, health, info,
                          st["state"].get("installed_payload"), st["releases"])


def host_releases(host: Host, *, trust_new_host: bool = False) -> list[dict]:
    return host_status(host, trust_new_host=trust_new_host, probe=False).releases


@dataclass
class LogsResult:
    host: str
    path: str
    text: str
    offset: int


def host_logs(host: Host, *, lines: int = 100, release: str | None = None, follow: bool = False,
              on_text: Callable[[str], None] | None = None, follow_for_s: float | None = None,
              trust_new_host: bool = False) -> LogsResult:
    """The server log's last lines; with follow, keep streaming new bytes to on_text until interrupted (or for
    follow_for_s seconds)."""
    with _open(host, trust_new_host) as conn:
        # The server prints its argv (--api-key ...) and may print its env: mask every secret of every release on the
        # host, as deploy masks its live log (issue #14: `ddtctl logs` printed them).
        st = conn.agent("state", retry=True)
        secrets: set[str] = set()
        for rel in st.get("releases") or []:
            secrets |= secret_values([str(a) for a in rel.get("argv") or []],
                                     {str(k): str(v) for k, v in (rel.get("env") or {}).items()})
        mask = _Events(None)
        mask.secrets = secrets
        r = conn.agent("logs", {"lines": lines, "log_release": release}, retry=True)
        text = mask.mask(r["log"])
        if on_text and text:
            on_text(text + "\n")
        offset = r["log_offset"]
        pending = ""  # a partial last line waits for its end: a secret split across two reads is still masked
        start = time.monotonic()
        while follow and (follow_for_s is None or time.monotonic() - start < follow_for_s):
            time.sleep(0.5)
            r = conn.agent("logs", {"log_offset": offset, "log_release": release}, retry=True)
            offset = r["log_offset"]
            if not r["log"]:
                continue
            head, nl, pending = (pending + r["log"]).rpartition("\n")
            if nl:
                chunk = mask.mask(head + nl)
                text += chunk
                if on_text:
                    on_text(chunk)
        if pending:
            chunk = mask.mask(pending)
            text += chunk
            if on_text:
                on_text(chunk)
        return LogsResult(host.name, r["log_path"], text, offset)


@dataclass
class StopResult:
    host: str
    was_running: bool
    release: str | None
    forced: bool

    def to_json(self) -> dict:
        return self.__dict__.copy()


def stop_server(host: Host, *, grace_s: float = 20.0, lock_wait_s: float = 0.0,
                trust_new_host: bool = False) -> StopResult:
    with _open(host, trust_new_host) as conn, RemoteLock(conn, holder=f"{getpass.getuser()} stop", wait_s=lock_wait_s):
        r = _locked_agent(conn, "stop", {"grace_s": grace_s}, timeout=grace_s + 30)
        return StopResult(host.name, bool(r.get("was_running")), r.get("release"), bool(r.get("forced")))


@dataclass
class RollbackResult:
    host: str
    from_release: str | None
    to_release: str
    health: HealthResult
    events: list[Event] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.health.ok

    def to_json(self) -> dict:
        return {"host": self.host, "from": self.from_release, "to": self.to_release, "health": self.health.to_json()}


def rollback(host: Host, release: str | None = None, *, lock_wait_s: float = 0.0, stop_grace_s: float = 20.0,
             health_timeout_s: float | None = None, on_event: Callable[[Event], None] | None = None,
             trust_new_host: bool = False) -> RollbackResult:
    """Make an earlier release current again: reinstall its payload, restart its server, wait until healthy."""
    emit = _Events(on_event)
    with _open(host, trust_new_host) as conn, RemoteLock(conn, holder=f"{getpass.getuser()} rollback",
                                                         wait_s=lock_wait_s):
        st = conn.agent("state")
        cur = st["state"].get("current")
        rels = {r["id"]: r for r in st["releases"]}
        if release is None:
            good = [r["id"] for r in sorted(st["releases"], key=lambda r: r["id"])
                    if r.get("status") == "ok" and r["id"] != cur]
            if not good:
                raise UsageError("no earlier healthy release to roll back to", where=host.name,
                                 fix="see `ddtctl releases HOST`")
            release = st["state"].get("previous") if st["state"].get("previous") in good else good[-1]
        if release not in rels:
            raise UsageError(f"no release {release} on the host", where=host.name,
                             fix=f"known: {', '.join(sorted(rels)) or 'none'}")
        rel = rels[release]
        emit.secrets |= secret_values(list(rel.get("argv") or []), dict(rel.get("env") or {}))
        facts = gather_facts(conn, cache=False)
        emit("rollback", f"{cur} -> {release}", host.name)
        _locked_agent(conn, "stop", {"grace_s": stop_grace_s}, timeout=stop_grace_s + 30)
        if rel.get("payload_hash"):
            _locked_agent(conn, "install", {"id": release, "sglang_root": facts.sglang_root}, timeout=600)
        else:
            _locked_agent(conn, "uninstall", {"sglang_root": facts.sglang_root}, timeout=600)
        started = _locked_agent(conn, "start", {"id": release})
        target = _target_from_release(host, rel)
        h = wait_healthy(conn, target, release, timeout_s=health_timeout_s or float(rel.get("health_timeout_s") or 600),
                         expected=expected_identity(target.argv, None), emit=emit,
                         log_offset=started.get("log_offset", 0))
        if h.ok:
            _locked_agent(conn, "set_status", {"id": release, "status": "ok", "make_current": True,
                                               "note": f"rollback from {cur}"})
        return RollbackResult(host.name, cur, release, h, emit.items)


# ----------------------------------------------------------------------------------------------- inventory helper
def host_by_name(name: str, inventory: str | None = None) -> Host:
    inv: Inventory = load_inventory(inventory)
    return resolve_host(name, inv)


def iter_hosts(names: list[str], inventory: str | None = None) -> Iterator[Host]:
    inv = load_inventory(inventory)
    for n in names:
        yield resolve_host(n, inv)
