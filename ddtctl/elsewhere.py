"""The one list of ddtctl code that runs outside the ddtctl process (issue #33 item 5).

Each entry runs under another interpreter (the GPU host's python, the managed SGLang env's, SGLang itself),
where ddtctl's own modules are not importable, so its constraint is what it may import. The README's table,
the size tool (tools/size_limits.py), the I/O-boundary test and tests/test_elsewhere.py (which runs every
standard-library file under `python -I -S`) read this list; a file that starts to run elsewhere is added here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Elsewhere:
    path: str  # under ddtctl/
    runs: str  # where, under which interpreter
    may_import: tuple[str, ...] = ()  # top-level modules beyond the standard library
    # its shape is set by where it runs (shipped whole), not by tools/size_limits.py
    size_exempt: bool = False


FILES: tuple[Elsewhere, ...] = (
    Elsewhere(
        "remote/agent.py",
        "on the GPU host, with the host's python, one operation per SSH exec "
        "(arguments as base64 JSON, never through a shell)",
        size_exempt=True,
    ),
    Elsewhere(
        "overlay/installer.py",
        "on the host (and locally), installing / uninstalling the payload atomically with a journal",
        size_exempt=True,
    ),
    Elsewhere(
        "bridge/resolver_worker.py",
        "in the managed or the host's SGLang environment, where SGLang's resolver is imported",
        may_import=("sglang", "torch", "torchvision", "msgspec"),
        size_exempt=True,
    ),
    Elsewhere(
        "rules/ddtree/core.py",
        "inside SGLang, copied byte for byte into the payload as "
        "`ddtree_sglang/rules_core.py`; `ddtctl validate` and SGLang-with-payload apply this one copy",
        size_exempt=True,
    ),
    Elsewhere(
        "overlay/smoke.py",
        "under the target SGLang interpreter, after an install (the payload's import smoke test)",
        may_import=("sglang", "torch", "ddtree_sglang"),
    ),
    Elsewhere(
        "schema/argparse_dump.py",
        "under the interpreter whose SGLang flag catalog is dumped",
        may_import=("sglang", "torch", "torchvision"),
    ),
)

# Whole trees that run elsewhere.
TREES: tuple[Elsewhere, ...] = (
    Elsewhere(
        "payload/",
        "inside SGLang on the GPU host (the DDTREE integration: sources, patches, Triton kernels)",
        may_import=("sglang", "torch", "triton", "numpy", "ddtree_sglang"),
        size_exempt=True,
    ),
)


@dataclass(frozen=True)
class Program:
    """A Python program kept in a string constant and run with `python -c` on the host."""

    path: str  # the module under ddtctl/ that holds it
    constant: str
    runs: str
    may_import: tuple[str, ...] = ()


PROGRAMS: tuple[Program, ...] = (
    Program("remote/agent_boot.py", "AGENT_BOOT", "on the GPU host: checks the agent's sha256 and runs it"),
    Program(
        "deploy/launch.py",
        "KERNEL_WARMUP",
        "on the GPU host, under the target SGLang interpreter: the payload's Triton kernel self-test",
        may_import=("ddtree_sglang",),
    ),
)


def size_exempt() -> set[str]:
    """Paths under ddtctl/ (files, and trees ending in '/') that tools/size_limits.py leaves out."""
    return {e.path for e in FILES + TREES if e.size_exempt}
