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
from types import SimpleNamespace

import pytest
from bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "one_gpu_call.sh"
H100_MIB, H200_MIB = 81559, 143771


@pytest.fixture(scope="module")
def st():
    yield from load_bench("spec_throughput_gpu")


STEP_STANDIN = """#!/usr/bin/env bash
echo "=== STEP TARGET=${TARGET:-} CALL_S=${CALL_S:-} ONLY_E2E=${ONLY_E2E:-} E2E_SUITES=${E2E_SUITES:-} \
E2E_ONLY=${E2E_ONLY:-} DRAFTERS=${DRAFTERS:-} BUDGETS=${BUDGETS:-} BATCHES=${BATCHES:-} CAPS=${CAPS:-} \
SCHEDULE=${SCHEDULE:-} PROFILE=${PROFILE-unset} OUT=${OUT:-} ARGS=${THROUGHPUT_ARGS:-}"
mkdir -p "$OUT"
[ "${ONLY_E2E:-0}" = 1 ] && { mkdir -p "$OUT/e2e-hybrid"; echo RESULT: PASS > "$OUT/e2e_hybrid.log"; exit 0; }
mkdir -p "$OUT/throughput" && echo table > "$OUT/throughput.log"
echo table > "$OUT/throughput/spec_throughput_table.txt"
echo '{"servers": [{"name": "dflash-public", "status": "'"${STANDIN_DFLASH_STATUS:-done}"'"}]}' \
  > "$OUT/throughput/spec_throughput.json"
echo logs > "$OUT/server_logs.tar.gz"
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
    # (an exactness step's line comes through the script's `cut -c1-220`: its empty ARGS may be cut off)
    return run, [dict(re.findall(r"(\w+)=(\S*)", s.partition(" ARGS=")[0])) | {"ARGS": s.partition(" ARGS=")[2]}
                 for s in steps], out


H100_27B_SERVERS = ["dflash-public", "ddtree-b127-public", "ddtree-b127-public-lv16",
                    "ddtree-b127-public-sglangwalk", "dflash-calibrated", "ddtree-b127-calibrated", "dflash-random",
                    "ddtree-b64-random"]


def _servers(step: dict) -> list[str]:
    return re.search(r"--servers (\S+)", step["ARGS"]).group(1).split(",")


def _archives(out: Path) -> dict[str, list[str]]:
    found = {}
    for f in sorted(out.glob("*.tar.gz")):
        with tarfile.open(f) as t:
            found[f.name] = t.getnames()
    return found


def test_an_h200_runs_the_27b_table_alone_with_the_whole_call(tmp_path):
    run, steps, out = _call(tmp_path, H200_MIB, 570)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(steps) == 1, run.stdout
    table = steps[0]
    assert table["TARGET"] == "qwen36-27b" and table["BATCHES"] == "1,8,32" and table["CAPS"] == "DFLASH:16"
    assert table["ONLY_E2E"] == "" and table["SCHEDULE"] == "2:127,4:64,8:16,0"
    assert 560 <= int(table["CALL_S"]) <= 570
    assert "--env-variant sglangwalk:127:DDTREE_ACCEPT=sglang" in table["ARGS"]
    assert "--server-s 130" in table["ARGS"]  # a 27B server starts in 75-125 s
    assert "--repeats 2" in table["ARGS"]  # a gap between the first and the kept batch: a one-time cost
    assert "t27b/throughput/spec_throughput.json" in _archives(out)["t27b.tar.gz"]
    assert not (out / "t27b").exists()


def test_an_h100_runs_the_27b_shape_at_batch_1_then_the_hybrid_exactness_tail(tmp_path):
    """The flagship's batch-1 goals fit an H100 (DFLASH at --max-running-requests 1): public B=127 first with two
    A/Bs (the GDN verify in log2 stages, SGLang's accept walk), the i.i.d. drafter's pair next, the random
    drafter's B=64 pair last (dropped first when time runs out)."""
    run, steps, out = _call(tmp_path, H100_MIB, 570)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [s["TARGET"] or s["E2E_SUITES"] for s in steps] == ["qwen36-27b", "hybrid"], run.stdout
    table, tail = steps
    assert table["BATCHES"] == "1" and table["CAPS"] == "" and table["SCHEDULE"] == ""
    assert _servers(table) == H100_27B_SERVERS
    assert "--server-s 130" in table["ARGS"] and 560 <= int(table["CALL_S"]) <= 570
    assert "--stop-on-memory" in table["ARGS"]  # a shape that does not fit leaves the call to the 8B table
    assert table["PROFILE"] == "--profile"  # the per-kind profile of DFLASH and DDTREE B=127 (#30's evidence)
    assert "--env-variant lv16:127:DDTREE_GDN_SOLVE=levels16" in table["ARGS"]
    assert "--new-tokens 512" in table["ARGS"] and "--repeats" not in table["ARGS"]  # the table: 512
    assert tail["ONLY_E2E"] == "1" and "ddtree-sched-g1" in tail["E2E_ONLY"].split(",")
    assert int(tail["CALL_S"]) > 170
    archives = _archives(out)
    assert "e2e_hybrid.log" in archives["e2e.tar.gz"]  # the suite's files travel as one archive
    assert "t27b-bs1/throughput/spec_throughput.json" in archives["t27b-bs1.tar.gz"]
    assert not (out / "e2e_hybrid.log").exists() and not (out / "e2e-hybrid").exists()


def test_an_h100_whose_27b_dflash_did_not_come_runs_the_8b_table(tmp_path):
    run, steps, out = _call(tmp_path, H100_MIB, 570, STANDIN_DFLASH_STATUS="died")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [s["TARGET"] or s["E2E_SUITES"] for s in steps] == ["qwen36-27b", "qwen3-8b", "hybrid"], run.stdout
    eight = steps[1]
    assert eight["BATCHES"] == "1,8,32" and eight["SCHEDULE"] == "2:127,4:64,8:16,0"
    assert "--env-variant sglangwalk:127:DDTREE_ACCEPT=sglang" in eight["ARGS"]
    assert eight["PROFILE"] == ""  # step_cost_x4.sh profiles unless PROFILE is set, and empty
    assert "the 27B DFLASH row did not come" in run.stdout
    assert {"t27b-bs1.tar.gz", "t8b.tar.gz", "e2e.tar.gz"} <= set(_archives(out))
    assert len([f for f in out.rglob("*") if f.is_file()]) <= 8  # what a call brings back


def test_e2e_runs_both_exactness_suites_before_the_table_and_no_tail(tmp_path):
    run, steps, _ = _call(tmp_path, H100_MIB, 570, E2E="1", E2E_S="300")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [s["ONLY_E2E"] for s in steps] == ["1", ""], run.stdout
    assert steps[0]["E2E_SUITES"] == ""  # both suites: step_cost_x4.sh's default
    assert steps[0]["CALL_S"] == "300"
    assert steps[1]["TARGET"] == "qwen36-27b"


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


@pytest.mark.parametrize("mib,dflash", [(H200_MIB, "done"), (H100_MIB, "died")])
def test_every_table_names_options_and_servers_the_bench_plans(tmp_path, st, mib, dflash):
    """Each table's options are ones bench/spec_throughput_gpu.py takes, and every server it names is one the
    bench plans from the table's drafters, budgets, schedule and variants (an unplanned name stops the call)."""
    _, steps, _ = _call(tmp_path, mib, 570, STANDIN_DFLASH_STATUS=dflash)
    help_text = subprocess.run([sys.executable, str(REPO / "bench" / "spec_throughput_gpu.py"), "--help"],
                               capture_output=True, text=True, timeout=300, cwd=REPO).stdout
    tables = [s for s in steps if s["TARGET"]]
    assert tables
    for table in tables:
        options = re.findall(r"--[\w-]+", table["ARGS"])
        assert options and all(o in help_text for o in options), options
        variants = re.findall(r"--env-variant (\S+)", table["ARGS"])
        args = SimpleNamespace(port_base=100, drafter=table["DRAFTERS"], budgets=table["BUDGETS"], servers=",".join(_servers(table)),
                               sync_budgets="", sglang_gdn_budgets="", compact_budgets="", extend_budgets="",
                               anc_budgets="", derive_budgets="", env_variant=variants,
                               budget_schedule=table["SCHEDULE"])
        planned = [b.name for b in st.plan(args)]
        assert planned == ["plain", *_servers(table)]
