"""bench/hybrid_kernels_h200.sh (one device call for the GDN-hybrid tree kernels): every bench it steps through
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


def test_the_script_parses_and_names_three_steps():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    assert [s for s, _ in _steps()] == ["bench/conv_tree_gpu.py", "bench/gdn_tree_gpu.py",
                                        "bench/hybrid_tree_kernels.py"]


def test_every_option_it_passes_is_one_the_bench_takes():
    for script, options in _steps():
        run = subprocess.run([sys.executable, str(REPO / script), "--help"], capture_output=True, text=True,
                             timeout=300, cwd=REPO)
        assert run.returncode == 0, (script, run.stderr[-1500:])
        for option in options:
            assert option in run.stdout, (script, option)
