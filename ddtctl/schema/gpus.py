"""GPU generations ddtctl knows, and how a profile names them.

SGLang picks attention backends and kernels by compute capability, so a verdict depends on the GPU generation:
the profile's `hardware.gpu` is declared to SGLang's platform layer by dry-run, and to the static rules here.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ddtctl.errors import UsageError


@dataclass(frozen=True)
class GpuSpec:
    name: str
    sm: int
    memory_gb: int
    family: str  # ampere | ada | hopper | blackwell

    @property
    def capability(self) -> tuple[int, int]:
        return (self.sm // 10, self.sm % 10)


_KNOWN = [
    GpuSpec("A100", 80, 80, "ampere"),
    GpuSpec("A10G", 86, 24, "ampere"),
    GpuSpec("L40S", 89, 48, "ada"),
    GpuSpec("H100", 90, 80, "hopper"),
    GpuSpec("H20", 90, 96, "hopper"),
    GpuSpec("H200", 90, 141, "hopper"),
    GpuSpec("B200", 100, 180, "blackwell"),
    GpuSpec("B300", 103, 288, "blackwell"),
    GpuSpec("GB200", 100, 186, "blackwell"),
    GpuSpec("RTX_PRO_6000_BLACKWELL", 120, 96, "blackwell"),
    GpuSpec("RTX_5090", 120, 32, "blackwell"),
]
GPUS: dict[str, GpuSpec] = {g.name: g for g in _KNOWN}
_FAMILY_BY_SM = {
    80: "ampere",
    86: "ampere",
    89: "ada",
    90: "hopper",
    100: "blackwell",
    103: "blackwell",
    120: "blackwell",
}


# One GPU that stands for its compute capability where a launch names only the generation (dry-run's memory
# figures, the memory hook's rules).
REPRESENTATIVE_BY_SM = {90: "H200", 100: "B200", 103: "B300", 120: "RTX_PRO_6000_BLACKWELL"}


def _normalise(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip()).upper()


def resolve_gpu(name: str) -> GpuSpec:
    """Accepts a product name (H200, 'RTX PRO 6000 Blackwell',
    nvidia-smi's 'NVIDIA H200') or an SM ('sm90')."""
    key = _normalise(name)
    key = key.removeprefix("NVIDIA_")
    if key in GPUS:
        return GPUS[key]
    match = re.fullmatch(r"SM_?(\d{2,3})", key)
    if match:
        sm = int(match.group(1))
        if sm not in _FAMILY_BY_SM:
            known = ", sm".join(map(str, sorted(_FAMILY_BY_SM)))
            raise UsageError(f"unknown GPU generation {name!r}", fix=f"use one of sm{known}")
        return GpuSpec(f"sm{sm}", sm, 0, _FAMILY_BY_SM[sm])
    # nvidia-smi names: "NVIDIA H200", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA H100 80GB HBM3"
    for gpu in sorted(_KNOWN, key=lambda g: -len(g.name)):
        if key.startswith(gpu.name + "_") or key == gpu.name:
            return gpu
    close = difflib.get_close_matches(key, list(GPUS) + ["sm90", "sm100", "sm120"], n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"use one of {', '.join(GPUS)} or smNN"
    raise UsageError(f"unknown GPU {name!r}", fix=hint)
