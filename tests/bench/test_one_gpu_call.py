"""bench/one_gpu_call.sh (#30's one device call) on the CPU: what it runs on each card, in what order and with
how much of the call's time, and that the JIT caches go out and come back as the carry expects. A device call
costs a machine start (60-130 s) and often several refused tries: the script must not fail on its own logic.

Stand-ins (nothing else can exist here): `nvidia-smi` prints the card's memory; bench/step_cost_x4.sh prints
the settings it was called with, as `=== STEP` lines, and writes an exactness log where the real one would."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "one_gpu_call.sh"
H100_MIB, H200_MIB = 81559, 143771

STEP_STANDIN = """#!/usr/bin/env bash
echo "=== STEP TARGET=${TARGET:-} CAPS=${CAPS:-} ONLY_E2E=${ONLY_E2E:-} E2E_SUITES=${E2E_SUITES:-} \
E2E_ONLY=${E2E_ONLY:-} CALL_S=${CALL_S:-} ARGS=${THROUGHPUT_ARGS:-}"
[ "${ONLY_E2E:-0}" = 1 ] && { mkdir -p "$OUT/e2e-hybrid"; echo RESULT: PASS > "$OUT/e2e_hybrid.log"; }
exit 0
"""


def _call(tmp_path: Path, mib: int, call_s: int, carry_cache: bool = False, **env: str):
    repo, home, out, bin_ = (tmp_path / d for d in ("repo", "home", "out", "bin"))
    cache = home / ".cache"
    for d in (repo / "bench", repo / ".carry", cache / "sglang" / "jit", cache / "pip", bin_):
        d.mkdir(parents=True, exist_ok=True)
    (repo / "bench" / SCRIPT.name).write_text(SCRIPT.read_text())
    (repo / "bench" / "step_cost_x4.sh").write_text(STEP_STANDIN)
    (cache / "sglang" / "jit" / "kernel.so").write_text("built on the device")
    (cache / "pip" / "wheel").write_text("not a JIT build")
    if carry_cache:  # the last call's caches, as .carry/ holds them
        (tmp_path / "last" / ".cache" / "sglang" / "triton").mkdir(parents=True)
        (tmp_path / "last" / ".cache" / "sglang" / "triton" / "old.cubin").write_text("from the last call")
        subprocess.run(["tar", "cJf", str(repo / ".carry" / "jit_cache.tar.xz"), "-C", str(tmp_path / "last"),
                        ".cache"], check=True)
    smi = bin_ / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncase "$*" in *memory.total*) echo {mib};; *) echo "stand-in card";; esac\n')
    smi.chmod(0o755)
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(home), "OUT": str(out), "CALL_S": str(call_s), **env}
    script = repo / "bench" / SCRIPT.name
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, env=env)
    steps = re.findall(r"^=== STEP (.*)$", run.stdout, flags=re.M)
    return run, [dict(re.findall(r"(\w+)=(\S*)", s.split(" ARGS=")[0])) | {"ARGS": s.split(" ARGS=")[1]}
                 for s in steps], out


def test_an_h200_runs_the_27b_table_alone_with_the_whole_call(tmp_path):
    run, steps, _ = _call(tmp_path, H200_MIB, 570)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(steps) == 1, run.stdout
    table = steps[0]
    assert table["TARGET"] == "qwen36-27b" and table["CAPS"] == "DFLASH:16" and table["ONLY_E2E"] == ""
    assert 560 <= int(table["CALL_S"]) <= 570
    assert "--env-variant sglangwalk:127:DDTREE_ACCEPT=sglang" in table["ARGS"]


def test_an_h100_runs_the_8b_table_then_the_hybrid_exactness_tail(tmp_path):
    run, steps, out = _call(tmp_path, H100_MIB, 570)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [s["TARGET"] or s["E2E_SUITES"] for s in steps] == ["qwen3-8b", "hybrid"], run.stdout
    tail = steps[1]
    assert tail["ONLY_E2E"] == "1" and "ddtree-sched-g1" in tail["E2E_ONLY"].split(",")
    assert int(tail["CALL_S"]) > 170
    with tarfile.open(out / "e2e.tar.gz") as t:  # the suite's files travel as one archive (8 files come back)
        assert "e2e_hybrid.log" in t.getnames()
    assert not (out / "e2e_hybrid.log").exists() and not (out / "e2e-hybrid").exists()


def test_e2e_runs_both_exactness_suites_before_the_table_and_no_tail(tmp_path):
    run, steps, _ = _call(tmp_path, H100_MIB, 570, E2E="1", E2E_S="300")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [s["ONLY_E2E"] for s in steps] == ["1", ""], run.stdout
    assert steps[0]["E2E_SUITES"] == ""  # both suites: step_cost_x4.sh's default
    assert steps[0]["CALL_S"] == "300"


@pytest.mark.parametrize("mib", [H100_MIB, H200_MIB])
def test_too_short_a_call_runs_nothing_and_still_returns_the_caches(tmp_path, mib):
    run, steps, out = _call(tmp_path, mib, 100, carry_cache=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert steps == [] and "too little time left" in run.stdout
    assert (tmp_path / "home" / ".cache" / "sglang" / "triton" / "old.cubin").exists()  # the carried caches
    with tarfile.open(out / "jit_cache.tar.xz") as t:
        names = t.getnames()
    assert ".cache/sglang/jit/kernel.so" in names and ".cache/sglang/triton/old.cubin" in names
    assert not [n for n in names if n.startswith(".cache/pip")]


def test_every_option_the_table_passes_is_one_the_bench_takes(tmp_path):
    _, steps, _ = _call(tmp_path, H200_MIB, 570)
    help_text = subprocess.run([sys.executable, str(REPO / "bench" / "spec_throughput_gpu.py"), "--help"],
                               capture_output=True, text=True, timeout=300, cwd=REPO).stdout
    options = re.findall(r"--[\w-]+", steps[0]["ARGS"])
    assert options and all(o in help_text for o in options), options
