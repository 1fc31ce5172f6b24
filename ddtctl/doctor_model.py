"""`ddtctl doctor`'s data: what a profile asks of its host (Launch), what the host has (DoctorFacts), what a
pinned SGLang release needs (PINS), and the checklist's rows: the ground floor of doctor.py and
doctor_checks.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ddtctl import PINNED_SGLANG
from ddtctl.remote.facts import HostFacts
from ddtctl.remote.protocol import CheckupReply


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIPPED = "skipped"


@dataclass
class Row:
    name: str
    status: Status
    found: str
    fix: str | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "status": str(self.status), "found": self.found, "fix": self.fix}


@dataclass(frozen=True)
class Pins:
    """What a pinned SGLang release needs of its host: its wheel's Requires-Python and Requires-Dist (sglang
    0.5.23: python >= 3.11, torch==2.14.1, cuda-python>=13.0, flashinfer_python[cu13]: CUDA 13), and the
    driver NVIDIA's CUDA 13.0 release notes name as its minimum on Linux."""

    python: tuple[int, int]
    torch: str
    cuda_major: int
    driver_min: str


PINS = {"0.5.23": Pins(python=(3, 11), torch="2.14.1", cuda_major=13, driver_min="580.65.06")}


@dataclass
class Launch:
    """What a profile asks of its host (doctor without a profile: the defaults, the host-only checks)."""

    source: str | None = None
    sglang: str = PINNED_SGLANG
    gpu: str | None = None
    gpu_count: int | None = None
    tp: int = 1
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    nnodes: int = 1
    port: int = 30000  # SGLang's default
    algorithm: str | None = None
    model_path: str | None = None
    architecture: str | None = None
    draft_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def per_node(self) -> int:
        """GPUs this launch needs on each host: tp x pp (x dp without dp-attention), shared over the nodes."""
        need = self.tp * self.pp * (1 if self.dp_attention else self.dp)
        return max(1, need // max(1, self.nnodes))

    @property
    def layout(self) -> str:
        dp = f" x dp {self.dp}" if self.dp > 1 and not self.dp_attention else ""
        over = f" over {self.nnodes} nodes" if self.nnodes > 1 else ""
        return f"tp {self.tp} x pp {self.pp}{dp}{over}"


@dataclass
class DoctorFacts:
    """Everything the checks read, from one round trip: the agent's facts, its checkup, the payload its state
    records as installed, and the inventory's env for the host (a profile's env wins over it)."""

    facts: HostFacts
    checkup: CheckupReply
    installed_payload: dict | None = None
    host_env: dict[str, str] = field(default_factory=dict)
