"""bench/hybrid_kernels_h200.sh (one device call for DDTREE's verify kernels): every bench it steps through
exists and takes the options it is given, so the call does not die on a renamed flag after a machine start."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "hybrid_kernels_h200.sh"


def _steps() -> list[tuple[str, list[str]]]:
    steps = []
    for line in SCRIPT.read_text().splitlines():
        m = re.match(r"step (\w+) \d+ python3 (bench/\S+\.py)(.*)$", line)
        if m:
            steps.append((m.group(2), re.findall(r"--[\w-]+", m.group(3))))
    return steps


def test_the_script_parses_and_names_its_steps():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    assert [s for s, _ in _steps()] == ["bench/tree_attn_gpu.py", "bench/gdn_tree_gpu.py", "bench/gdn_tree_gpu.py",
                                        "bench/conv_tree_gpu.py", "bench/conv_tree_gpu.py",
                                        "bench/hybrid_tree_kernels.py"]


def test_skip_leaves_steps_out_without_running_them(tmp_path):
    """SKIP names steps to leave out; with every step skipped the script reaches its verdict without a GPU (the
    wheel install is the only thing it runs, so it is stubbed with an empty .carry)."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / ".carry" / "whl").mkdir(parents=True)
    (repo / "bench" / SCRIPT.name).write_text(SCRIPT.read_text())
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "OUT": str(tmp_path / "out"),
           "SKIP": "tree_attn gdn_tree gdn_wide conv_tree conv_tree_tp8 hybrid_tree"}
    (tmp_path / "python3").write_text("#!/bin/sh\nexit 0\n")  # pip install of no wheels
    (tmp_path / "python3").chmod(0o755)
    run = subprocess.run(["bash", str(repo / "bench" / SCRIPT.name)], capture_output=True, text=True, env=env,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("skipped (SKIP)") == 6 and "RESULT: PASS" in run.stdout


def test_every_option_it_passes_is_one_the_bench_takes():
    for script, options in _steps():
        run = subprocess.run([sys.executable, str(REPO / script), "--help"], capture_output=True, text=True,
                             timeout=300, cwd=REPO)
        assert run.returncode == 0, (script, run.stderr[-1500:])
        for option in options:
            assert option in run.stdout, (script, option)
