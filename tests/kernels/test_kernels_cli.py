"""`ddtctl kernels tree` and `ddtctl kernels selftest` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from json_envelope import results

from ddtctl.kernels import reference as R


def ddtctl(*args, timeout=120):
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def logits_file(tmp_path, shape=(4, 40), seed=0):
    path = tmp_path / "draft.npy"
    np.save(path, (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32))
    return path


def test_tree_json_matches_reference(tmp_path):
    path = logits_file(tmp_path)
    run = ddtctl("kernels", "tree", "--logits", path, "--budget", 9, "--format", "json")
    assert run.returncode == 0, run.stderr
    data = results(run.stdout, "kernels tree")
    ref = R.build_from_logits(np.load(path), 9)
    assert [n["token"] for n in data["nodes"]] == ref.tokens.tolist()
    assert [n["parent"] for n in data["nodes"]] == ref.parents[1:].tolist()
    assert [n["depth"] for n in data["nodes"]] == ref.depths.tolist()
    assert data["expected_accept_length"] == __import__("pytest").approx(ref.expected_accept_length())
    assert data["expected_accept_length"] >= data["chain_expected_accept_length"] - 1e-9
    assert (data["depth"], data["vocab"], data["budget"], data["k"]) == (4, 40, 9, 9)


def test_tree_text_draws_every_node(tmp_path):
    path = logits_file(tmp_path)
    run = ddtctl("kernels", "tree", "--logits", path, "--budget", 6)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("root")
    assert len(lines) == 7 and all(("├── #" in ln or "└── #" in ln) for ln in lines[1:])


def test_tree_bad_inputs_are_one_line_errors(tmp_path):
    missing = ddtctl("kernels", "tree", "--logits", tmp_path / "nope.npy", "--budget", 4)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such file" in missing.stderr
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 3, 4), dtype=np.float32))
    run = ddtctl("kernels", "tree", "--logits", bad, "--budget", 4)
    assert run.returncode == 2 and "expected [L, V]" in run.stderr and "Traceback" not in run.stderr
    nan = tmp_path / "nan.npy"
    np.save(nan, np.full((2, 5), np.nan, dtype=np.float32))
    assert "NaN" in ddtctl("kernels", "tree", "--logits", nan, "--budget", 2).stderr
    path = logits_file(tmp_path, shape=(2, 3))
    run = ddtctl("kernels", "tree", "--logits", path, "--budget", 13)
    assert run.returncode == 2 and "--budget 13" in run.stderr


def test_tree_float64_logits_beyond_float32_range_give_no_nan(tmp_path):
    """Issue #14 defect 10: finite float64 logits of +-1e300 passed the finiteness check, became +-inf in the cast to
    float32 and came out as NaN probabilities."""
    path = tmp_path / "wide.npy"
    x = np.array([[1e300, -1e300, 0.0, 5.0], [0.0, 1e300, -1e300, 3.0], [2.0, 1.0, 0.0, -1.0]], dtype=np.float64)
    np.save(path, x)
    run = ddtctl("kernels", "tree", "--logits", path, "--budget", 4, "--format", "json")
    assert run.returncode == 0, run.stderr
    assert "NaN" not in run.stdout and "Infinity" not in run.stdout
    data = results(run.stdout, "kernels tree")
    nodes = data["nodes"]
    # softmax of [1e300, -1e300, 0, 5] puts all mass on token 0, of the next row on token 1: a sure chain first
    assert [(n["token"], n["depth"]) for n in nodes[:3]] == [(0, 1), (1, 2), (0, 3)]
    assert nodes[0]["prob"] == 1.0 and nodes[1]["prob"] == 1.0
    assert all(0.0 <= n["prob"] <= 1.0 for n in nodes)


def test_tree_refuses_a_forged_npy_header_without_allocating_it(tmp_path):
    """Found by the bad-input corpus (issue #14): a header claiming a (99999, 99999) float32 array over 24 bytes of
    data made numpy try to allocate 37 GiB."""
    import io

    from numpy.lib import format as npformat

    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (99999, 99999)})
    buf.write(np.zeros((2, 3), dtype=np.float32).tobytes())
    path = tmp_path / "forged.npy"
    path.write_bytes(buf.getvalue())
    run = ddtctl("kernels", "tree", "--logits", path, "--budget", 2)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "the header says shape (99999, 99999)" in run.stderr and "allocate" not in run.stderr


def test_selftest_cpu_passes_and_reports_json():
    run = ddtctl("kernels", "selftest", "--device", "cpu", "--quick", "--format", "json", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    data = results(run.stdout, "kernels selftest")
    assert data["ok"] is True and data["device"] == "cpu" and len(data["checks"]) == 4
    assert all(c["ok"] for c in data["checks"])


def test_kernels_cli_module_imports_no_torch():
    code = "import sys, ddtctl.cli.kernels; print('torch' in sys.modules, 'triton' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["False", "False"], run.stdout + run.stderr


def test_selftest_cuda_without_gpu_is_a_clear_error():
    import pytest

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    run = ddtctl("kernels", "selftest", "--device", "cuda")
    assert run.returncode == 2 and "no CUDA device" in run.stderr and "Traceback" not in run.stderr
