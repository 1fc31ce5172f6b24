"""bench/conv_tree_gpu.py on the CPU: its --help, its smoke run (small fp32 shapes under Triton's interpreter,
SGLang's tree conv from the release's source): every case equal to SGLang's kernel, exit 0, the JSON in $OUT;
and its per-case verdict on bf16-like rows as the H200 reports them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_scripts import load_bench

pytest.importorskip("torch")
pytest.importorskip("triton")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "conv_tree_gpu.py"


@pytest.fixture(scope="module")
def ctg():
    yield from load_bench("conv_tree_gpu")


# A bf16 row as the H200 reported it on 2026-12-01: bit-equal to SGLang's conv, and like SGLang's own outputs
# 0.03 from the float64 reference (bf16 rounding), which is over TOL_OUT on its own.
BF16_ROW = {"out_err_vs_sglang": 0.0, "out_bit_equal": True, "parents_equal": True, "state_untouched": True,
            "out_err_vs_f64": 0.03, "sglang_err_vs_f64": 0.03, "commit_bit_equal": True, "commit_err": 0.0}


def test_a_bf16_row_bit_equal_to_sglang_passes_although_both_are_off_float64_by_more_than_tol(ctg):
    assert BF16_ROW["out_err_vs_f64"] > ctg.TOL_OUT
    assert ctg.ok_of(BF16_ROW)
    assert ctg.ok_of(dict(BF16_ROW, out_err_vs_sglang=ctg.TOL_OUT / 2, out_bit_equal=False,
                          out_err_vs_f64=0.03 + ctg.TOL_OUT / 2))  # a contraction apart, within the slack


@pytest.mark.parametrize("change", [
    {"out_err_vs_f64": 0.2},  # much further from float64 than SGLang's own 0.03
    {"out_err_vs_f64": 0.03 + 1.5 * 2e-2},  # past SGLang's error plus TOL_OUT
    {"out_err_vs_sglang": 0.05, "out_bit_equal": False},  # not bit-equal, beyond TOL_OUT
    {"commit_bit_equal": False, "commit_err": 0.5},
    {"parents_equal": False},
    {"state_untouched": False},
], ids=["f64-much-worse", "f64-past-slack", "out-vs-sglang", "commit", "parents", "state-touched"])
def test_a_row_fails_on_any_difference_that_matters(ctg, change):
    assert not ctg.ok_of(dict(BF16_ROW, **change))


def _run(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "TRITON_INTERPRET")}
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=REPO)


def test_help_runs_without_a_gpu():
    run = _run("--help")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--device" in run.stdout and "--widths" in run.stdout


def test_a_tp_that_does_not_divide_the_channels_is_refused():
    run = _run("--tp", "3")
    assert run.returncode != 0 and "--tp 3: must divide the 10240 conv channels" in run.stderr


def test_cpu_smoke_equals_sglangs_tree_conv(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "worker"))
    from worker_sglang_source import sglang_source

    if sglang_source("sglang/kernels/ops/mamba/causal_conv1d_triton.py") is None:
        pytest.skip("sglang 0.5.23's causal_conv1d_triton.py is not reachable (make test builds the managed "
                    "env)")
    run = _run("--device", "cpu", "--widths", "9,33", "--batches", "2", out=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "RESULT PASS (2/2" in run.stdout
    rows = json.loads((tmp_path / "conv_tree_gpu.json").read_text())
    assert [(r["bs"], r["width"]) for r in rows] == [(2, 9), (2, 33)]
    for r in rows:
        assert r["out_bit_equal"] and r["parents_equal"] and r["commit_bit_equal"] and r["state_untouched"]
        dense, dedup = r["scratch_bytes_per_slot_layer"].values()
        assert dedup * 2 < dense  # (T + 2) columns instead of 3 T
