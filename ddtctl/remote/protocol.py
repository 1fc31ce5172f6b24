"""The host agent's operations as typed requests and replies: the controller's side of ddtctl/remote/agent.py.

The agent (standard library only, run by the host's python) takes `OP BASE64_JSON` and answers one JSON line
`{"ok": true, "result": ...}`. Here each operation is a request dataclass (its parameters, the wire name `OP`)
and a reply dataclass parsed from the agent's `result` in one place: controller code reads `reply.log_offset`,
never `result["log_offset"]`. A reply that lacks a field the controller needs is a RemoteError naming the
operation and the field (an agent and a controller of different versions), not a KeyError. The operation
names, the request base, Batch and those checks are in ddtctl/remote/wire.py.

Open-ended records (a release as the deploy wrote it, the server's pid file) keep their JSON as `raw` next to
the fields the controller reads, for the reports that show them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddtctl.errors import RemoteError
from ddtctl.remote.benchproto import Bench as Bench  # `ddtctl tune`'s benchmark run (re-exported)
from ddtctl.remote.benchproto import BenchReply as BenchReply
from ddtctl.remote.checkupproto import Checkup as Checkup  # `ddtctl doctor`'s facts (re-exported)
from ddtctl.remote.checkupproto import CheckupReply as CheckupReply
from ddtctl.remote.lockproto import Journal as Journal  # the deploy lock's operations (re-exported)
from ddtctl.remote.lockproto import JournalReply as JournalReply
from ddtctl.remote.lockproto import Lock as Lock
from ddtctl.remote.lockproto import LockHolder as LockHolder
from ddtctl.remote.lockproto import LockMessage as LockMessage
from ddtctl.remote.lockproto import Recovered as Recovered
from ddtctl.remote.wire import Batch as Batch  # an operation too, made of the others
from ddtctl.remote.wire import Op, Request, _checked, _dict, _field, _malformed, _typed

SWEEP = "sweep"  # the release kind of a point `ddtctl tune` deployed


# ----------------------------------------------------------------------------------------------- replies
@dataclass
class HelloReply:
    work_dir: str
    python: str
    pid: int

    @classmethod
    def from_json(cls, data: Any) -> "HelloReply":
        return cls(
            _field(data, "work_dir", Op.HELLO),
            _field(data, "python", Op.HELLO),
            _field(data, "pid", Op.HELLO),
        )


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

    @classmethod
    def from_json(cls, data: Any, where: str) -> "Gpu":
        op, at = Op.FACTS, where + "."
        d = _checked(data, dict, op, where)
        cap = _typed(d, "compute_capability", op, list, at=at)
        if len(cap) != 2:
            raise _malformed(op, f"has '{at}compute_capability' = {str(cap)[:40]}, not [major, minor]")
        major, minor = (
            _checked(c, int, op, f"{at}compute_capability[{i}]", nullable=True) for i, c in enumerate(cap)
        )
        return cls(
            _typed(d, "index", op, int, at=at),
            _typed(d, "name", op, str, at=at),
            _typed(d, "memory_total_mib", op, int, at=at, nullable=True),
            _typed(d, "memory_free_mib", op, int, at=at, nullable=True),
            (major, minor),
        )


@dataclass
class FactsReply:
    """What the agent found on the host (ddtctl.remote.facts.HostFacts adds the host's inventory name)."""

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
    models: dict[str, dict]  # path -> {"config": {...}} | {"error": "..."}

    @classmethod
    def from_json(cls, data: Any) -> "FactsReply":
        op = Op.FACTS
        d = _dict(data, op)
        py, sg = _typed(d, "python", op, dict), _typed(d, "sglang", op, dict)
        ports = _typed(d, "ports_in_use", op, list)
        models = _typed(d, "models", op, dict, required=False) or {}
        return cls(
            hostname=_typed(d, "hostname", op, str),
            work_dir=_typed(d, "work_dir", op, str),
            python=_typed(py, "executable", op, str, at="python."),
            python_version=_typed(py, "version", op, str, at="python."),
            sglang_version=_typed(sg, "version", op, str, at="sglang.", required=False),
            sglang_root=_typed(sg, "root", op, str, at="sglang.", required=False),
            gpus=[Gpu.from_json(g, f"gpus[{i}]") for i, g in enumerate(_typed(d, "gpus", op, list))],
            cuda=_typed(d, "cuda", op, str, required=False),
            driver=_typed(d, "driver", op, str, required=False),
            gpu_error=_typed(d, "gpu_error", op, str, required=False),
            disk_free_bytes=_typed(d, "disk_free_bytes", op, int),
            ports_in_use=[_checked(port, int, op, f"ports_in_use[{i}]") for i, port in enumerate(ports)],
            server=_typed(d, "server", op, dict, required=False),
            current_release=_typed(d, "current_release", op, str, required=False),
            models={path: _checked(info, dict, op, f"models[{path}]") for path, info in models.items()},
        )


@dataclass
class ServerProcess:
    """The server ddtctl started (the agent's run/server.json, with `running` checked against /proc)."""

    running: bool
    pid: int | None
    release: str | None
    port: int | None
    raw: dict

    @classmethod
    def from_json(cls, data: Any) -> "ServerProcess | None":
        if data is None:
            return None
        d = _dict(data, Op.STATE)
        return cls(bool(d.get("running")), d.get("pid"), d.get("release"), d.get("port"), d)


@dataclass
class ReleaseRecord:
    """A release as its release.json holds it (what the deploy wrote, plus the agent's status and events)."""

    id: str
    status: str | None
    fingerprint: str | None
    argv: list[str]
    launch_argv: list[str]
    env: dict[str, str]
    port: int
    probe_host: str
    rank: int
    nnodes: int
    health_timeout_s: float | None
    payload_hash: str | None
    raw: dict
    kind: str = "release"  # "sweep": a point `ddtctl tune` deployed (never a rollback target)
    tune: dict | None = (
        None  # {"run": the tune run's id, "point": its label}: a sweep point, or a winner deployed
    )

    @property
    def sweep(self) -> bool:
        return self.kind == SWEEP

    @classmethod
    def from_json(cls, data: Any) -> "ReleaseRecord":
        d = _dict(data, Op.STATE)
        return cls(
            id=str(_field(d, "id", Op.STATE)),
            status=d.get("status"),
            fingerprint=d.get("fingerprint"),
            argv=[str(a) for a in d.get("argv") or []],
            launch_argv=[str(a) for a in d.get("launch_argv") or []],
            env={str(k): str(v) for k, v in (d.get("env") or {}).items()},
            port=int(d.get("port") or 30000),
            probe_host=d.get("probe_host") or "127.0.0.1",
            rank=int(d.get("rank") or 0),
            nnodes=int(d.get("nnodes") or 1),
            health_timeout_s=float(d["health_timeout_s"]) if d.get("health_timeout_s") else None,
            payload_hash=d.get("payload_hash"),
            raw=d,
            kind=str(d.get("kind") or "release"),  # a record from before sweep points were tagged: a release
            tune=_typed(d, "tune", Op.STATE, dict, required=False),
        )


@dataclass
class HostState:
    """The agent's state.json: the current release, the previous one, the payload installed into SGLang."""

    current: str | None
    previous: str | None
    installed_payload: dict | None  # {"hash", "release", "time"}
    raw: dict

    @property
    def installed_hash(self) -> str | None:
        return (self.installed_payload or {}).get("hash")

    @classmethod
    def from_json(cls, data: Any, op: str = Op.STATE) -> "HostState":
        d = _dict(data, op)
        return cls(d.get("current"), d.get("previous"), d.get("installed_payload"), d)


@dataclass
class StateReply:
    state: HostState
    releases: list[ReleaseRecord]
    server: ServerProcess | None
    lock: dict | None = None  # lock.json: holder, pid, since, session, stale (its holder died holding it)
    journal: dict | None = None  # a deploy that touched the server and has not finished (see Journal)

    def release(self, release_id: str | None) -> ReleaseRecord | None:
        return next((r for r in self.releases if r.id == release_id), None)

    @classmethod
    def from_json(cls, data: Any) -> "StateReply":
        return cls(
            HostState.from_json(_field(data, "state", Op.STATE)),
            [ReleaseRecord.from_json(r) for r in _field(data, "releases", Op.STATE)],
            ServerProcess.from_json(data.get("server")),
            _typed(data, "lock", Op.STATE, dict, required=False),
            _typed(data, "journal", Op.STATE, dict, required=False),
        )


@dataclass
class LogReply:
    log: str
    log_offset: int
    log_path: str

    @classmethod
    def from_json(cls, data: Any, op: str = Op.LOGS) -> "LogReply":
        return cls(
            str(_field(data, "log", op)),
            int(_field(data, "log_offset", op)),
            str(_field(data, "log_path", op)),
        )


@dataclass
class ProbeReply:
    """One health poll: the process, /health, /get_server_info, and the log bytes since the asked offset."""

    running: bool
    pid: int | None
    release: str | None
    health: int | None
    health_error: str | None
    server_info: dict | None
    log: LogReply

    @classmethod
    def from_json(cls, data: Any) -> "ProbeReply":
        d = _dict(data, Op.PROBE)
        return cls(
            bool(_field(d, "running", Op.PROBE)),
            d.get("pid"),
            d.get("release"),
            d.get("health"),
            d.get("health_error"),
            d.get("server_info"),
            LogReply.from_json(d, Op.PROBE),
        )


@dataclass
class StartReply:
    pid: int
    log_path: str
    log_offset: int
    already_running: bool

    @classmethod
    def from_json(cls, data: Any) -> "StartReply":
        return cls(
            int(_field(data, "pid", Op.START)),
            str(_field(data, "log", Op.START)),
            int(data.get("log_offset") or 0),
            bool(data.get("already")),
        )


@dataclass
class WarmupReply:
    rc: int
    elapsed_s: float
    log_path: str
    tail: str
    triton_cache: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @classmethod
    def from_json(cls, data: Any) -> "WarmupReply":
        op = Op.WARMUP
        return cls(
            int(_field(data, "rc", op)),
            float(_field(data, "elapsed_s", op)),
            str(_field(data, "log", op)),
            str(_field(data, "tail", op)),
            str(_field(data, "triton_cache", op)),
        )


@dataclass
class StopReply:
    was_running: bool
    pid: int | None = None
    release: str | None = None
    forced: bool = False

    @classmethod
    def from_json(cls, data: Any) -> "StopReply":
        d = _dict(data, Op.STOP)
        return cls(
            bool(_field(d, "was_running", Op.STOP)), d.get("pid"), d.get("release"), bool(d.get("forced"))
        )


@dataclass
class GcReply:
    removed_releases: list[str]
    dropped_objects: int

    @classmethod
    def from_json(cls, data: Any) -> "GcReply":
        return cls(list(_field(data, "removed_releases", Op.GC)), int(_field(data, "dropped_objects", Op.GC)))


@dataclass
class SetStatusReply:
    state: HostState

    @classmethod
    def from_json(cls, data: Any) -> "SetStatusReply":
        return cls(HostState.from_json(_field(data, "state", Op.SET_STATUS), Op.SET_STATUS))


@dataclass
class InstallReply:
    changed: bool

    @classmethod
    def from_json(cls, data: Any) -> "InstallReply":
        return cls(bool(_field(data, "changed", Op.INSTALL)))


@dataclass
class MaterializeReply:
    id: str
    existed: bool

    @classmethod
    def from_json(cls, data: Any) -> "MaterializeReply":
        return cls(str(_field(data, "id", Op.MATERIALIZE)), bool(_field(data, "existed", Op.MATERIALIZE)))


@dataclass
class BadUpload:
    name: str
    reason: str


@dataclass
class CommitReply:
    """Uploads verified on the host (sha256 recomputed there) and moved into the store, and those refused."""

    stored: list[str]
    bad: list[BadUpload]
    disk_free_bytes: int | None = None  # in the work dir, after the commit (a full disk truncates uploads)

    @classmethod
    def from_json(cls, data: Any) -> "CommitReply":
        op = Op.COMMIT_STREAM
        return cls(
            list(_field(data, "stored", op)),
            [
                BadUpload(str(_field(b, "name", op)), str(_field(b, "reason", op)))
                for b in _field(data, "bad", op)
            ],
            _typed(_dict(data, op), "disk_free_bytes", op, int, required=False),
        )


@dataclass
class ShipReply:
    commit: CommitReply
    then: list[Any]  # the replies of the operations run after the commit (materialize, ...)


# ----------------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Hello(Request[HelloReply]):
    OP = Op.HELLO

    REPLY = HelloReply


@dataclass(frozen=True)
class Facts(Request[FactsReply]):
    """GPUs, python, SGLang, disk, ports, server, model configs (remote.facts.gather_facts caches these)."""

    OP = Op.FACTS
    nvidia_smi: str | None = None
    model_paths: tuple[str, ...] = ()

    REPLY = FactsReply


@dataclass(frozen=True)
class State(Request[StateReply]):
    OP = Op.STATE

    REPLY = StateReply


@dataclass(frozen=True)
class Probe(Request[ProbeReply]):
    """`log_offset` None: the last `lines` lines of the log; else the bytes from that offset."""

    OP = Op.PROBE
    port: int
    host: str | None = None
    log_offset: int | None = None
    log_release: str | None = None
    lines: int | None = None
    server_info: bool | None = None  # False: /health only

    REPLY = ProbeReply


@dataclass(frozen=True)
class Logs(Request[LogReply]):
    OP = Op.LOGS
    lines: int | None = None
    log_offset: int | None = None
    log_release: str | None = None

    REPLY = LogReply


@dataclass
class MissingReply:
    missing: list[str]
    salvaged: int

    @classmethod
    def from_json(cls, data: Any) -> "MissingReply":
        return cls(list(_field(data, "missing", Op.MISSING)), int(_field(data, "salvaged", Op.MISSING)))


@dataclass(frozen=True)
class Missing(Request[MissingReply]):
    """Which objects the store lacks, asked of the agent (deploy lists the store over SFTP: no process)."""

    OP = Op.MISSING
    hashes: tuple[str, ...]

    REPLY = MissingReply


@dataclass(frozen=True)
class Commit(Request[CommitReply]):
    """Verify uploads in incoming/ (name -> sha256) in one call (deploy streams them: CommitStream)."""

    OP = Op.COMMIT
    files: dict[str, str]

    REPLY = CommitReply


@dataclass(frozen=True)
class Materialize(Request[MaterializeReply]):
    OP = Op.MATERIALIZE
    release: dict

    REPLY = MaterializeReply


@dataclass(frozen=True)
class SetStatus(Request[SetStatusReply]):
    OP = Op.SET_STATUS
    id: str
    status: str
    make_current: bool | None = None
    note: str | None = None

    REPLY = SetStatusReply


@dataclass(frozen=True)
class Install(Request[InstallReply]):
    OP = Op.INSTALL
    id: str
    sglang_root: str | None

    REPLY = InstallReply


@dataclass(frozen=True)
class Uninstall(Request[InstallReply]):
    OP = Op.UNINSTALL
    sglang_root: str | None

    REPLY = InstallReply


@dataclass(frozen=True)
class Warmup(Request[WarmupReply]):
    OP = Op.WARMUP
    id: str
    argv: tuple[str, ...]
    timeout_s: float

    REPLY = WarmupReply


@dataclass(frozen=True)
class Start(Request[StartReply]):
    OP = Op.START
    id: str

    REPLY = StartReply


@dataclass(frozen=True)
class Stop(Request[StopReply]):
    OP = Op.STOP
    grace_s: float

    REPLY = StopReply


@dataclass(frozen=True)
class Gc(Request[GcReply]):
    OP = Op.GC
    keep: int

    REPLY = GcReply


@dataclass
class PruneReply:
    removed_releases: list[str]
    dropped_objects: int

    @classmethod
    def from_json(cls, data: Any) -> "PruneReply":
        return cls(
            [str(r) for r in _field(data, "removed_releases", Op.PRUNE)],
            int(_field(data, "dropped_objects", Op.PRUNE)),
        )


@dataclass(frozen=True)
class Prune(Request[PruneReply]):
    """Remove these releases (their record and payload dirs) and the store objects no release uses any more;
    the agent refuses the current release, the one whose payload is installed and an interrupted deploy's."""

    OP = Op.PRUNE
    ids: tuple[str, ...]

    REPLY = PruneReply


@dataclass(frozen=True)
class CommitStream(Request[ShipReply]):
    """Verify uploads as they land (stdin lines `NAME SHA256`, then `END`), then run `then` (e.g.
    Materialize)."""

    OP = Op.COMMIT_STREAM
    then: tuple[Request, ...] = ()
    lock_token: str | None = None

    def params(self) -> dict[str, Any]:
        return {"then": [[r.OP.value, r.params()] for r in self.then], "lock_token": self.lock_token}

    def parse(self, result: Any) -> ShipReply:
        if not isinstance(result, list) or not result:
            raise RemoteError("the agent's `commit_stream` reply is not a list of results")
        return ShipReply(
            CommitReply.from_json(result[0]),
            [r.parse(x) for r, x in zip(self.then, result[1:], strict=False)],
        )
