"""The agent's `checkup` operation (agent.py `op_checkup`), re-exported by ddtctl/remote/protocol.py: what
`ddtctl doctor` needs beyond `facts` (package versions and requirements of the host's python, torch's CUDA
build, /dev/shm, the GPU topology, the DDTREE payload's files in the SGLang root, the model dirs). Parsed here
and nowhere else; a reply of another shape is the protocol's one-line RemoteError naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddtctl.remote.wire import Op, Request, _checked, _dict, _typed

_OP = Op.CHECKUP


@dataclass
class Space:
    """A file system's size and free bytes at `path` (`error`: statvfs failed, e.g. no /dev/shm)."""

    path: str
    total_bytes: int | None
    free_bytes: int | None
    error: str | None

    @classmethod
    def from_json(cls, data: Any, where: str) -> "Space":
        d = _checked(data, dict, _OP, where)
        at = where + "."
        return cls(
            _typed(d, "path", _OP, str, at=at),
            _typed(d, "total_bytes", _OP, int, at=at, required=False),
            _typed(d, "free_bytes", _OP, int, at=at, required=False),
            _typed(d, "error", _OP, str, at=at, required=False),
        )


@dataclass
class PayloadFiles:
    """The DDTREE payload in an SGLang root: its package (ddtree_sglang/) and its entry point (dist-info)."""

    root: str | None
    package: bool
    entry_point: bool

    @property
    def present(self) -> bool:
        return self.package and self.entry_point


@dataclass
class ModelDir:
    """A model dir on the host. Absent: only where its files would go (`free_at`, the nearest existing
    parent) and the free bytes there. Present: its size and weight files (a bounded walk: `truncated`), and
    the shards its safetensors index names that are missing (`index`: shards, missing, missing_count, or
    error)."""

    exists: bool
    free_at: str
    free_bytes: int | None
    size_bytes: int | None = None
    weight_files: int | None = None
    weight_bytes: int | None = None
    truncated: bool = False
    index: dict | None = None

    @classmethod
    def from_json(cls, data: Any, where: str) -> "ModelDir":
        d = _checked(data, dict, _OP, where)
        at = where + "."
        return cls(
            _typed(d, "exists", _OP, bool, at=at),
            _typed(d, "free_at", _OP, str, at=at),
            _typed(d, "free_bytes", _OP, int, at=at, required=False),
            _typed(d, "size_bytes", _OP, int, at=at, required=False),
            _typed(d, "weight_files", _OP, int, at=at, required=False),
            _typed(d, "weight_bytes", _OP, int, at=at, required=False),
            bool(_typed(d, "truncated", _OP, bool, at=at, required=False)),
            _typed(d, "index", _OP, dict, at=at, required=False),
        )


@dataclass
class CheckupReply:
    packages: dict[str, str | None]  # distribution -> version (None: not installed)
    requires: dict[str, list[str] | None]  # sglang / torch -> their requirements on torch, NCCL, CUDA
    torch_found: bool
    torch_cuda: str | None  # torch's CUDA build (None: a CPU build, or torch not found)
    shm: Space
    topology: str | None  # `nvidia-smi topo -m` as printed (asked only for tp > 1)
    topology_error: str | None
    payload: PayloadFiles
    models: dict[str, ModelDir]

    @classmethod
    def from_json(cls, data: Any) -> "CheckupReply":
        d = _dict(data, _OP)
        packages = _typed(d, "packages", _OP, dict)
        requires = _typed(d, "requires", _OP, dict)
        torch = _typed(d, "torch_cuda", _OP, dict)
        pay = _typed(d, "payload", _OP, dict)
        models = _typed(d, "models", _OP, dict)
        return cls(
            packages={k: _checked(v, str, _OP, f"packages.{k}", nullable=True) for k, v in packages.items()},
            requires={
                k: None
                if v is None
                else [
                    _checked(r, str, _OP, f"requires.{k}[{i}]")
                    for i, r in enumerate(_checked(v, list, _OP, f"requires.{k}"))
                ]
                for k, v in requires.items()
            },
            torch_found=bool(_typed(torch, "found", _OP, bool, at="torch_cuda.")),
            torch_cuda=_typed(torch, "cuda", _OP, str, at="torch_cuda.", required=False),
            shm=Space.from_json(_typed(d, "shm", _OP, dict), "shm"),
            topology=_typed(d, "topology", _OP, str, required=False),
            topology_error=_typed(d, "topology_error", _OP, str, required=False),
            payload=PayloadFiles(
                _typed(pay, "root", _OP, str, at="payload.", required=False),
                _typed(pay, "package", _OP, bool, at="payload."),
                _typed(pay, "entry_point", _OP, bool, at="payload."),
            ),
            models={str(p): ModelDir.from_json(m, f"models[{p}]") for p, m in models.items()},
        )


@dataclass(frozen=True)
class Checkup(Request[CheckupReply]):
    """`ddtctl doctor`'s facts beyond `facts`; `topology`: also run `nvidia-smi topo -m`; `sglang_root`: where
    to look for the payload (default: where the host's python finds sglang)."""

    OP = Op.CHECKUP
    nvidia_smi: str | None = None
    topology: bool | None = None
    sglang_root: str | None = None
    model_paths: tuple[str, ...] = ()

    REPLY = CheckupReply
