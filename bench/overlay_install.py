"""How long the overlay steps take with the real payload and the real SGLang 0.5.23 tree (the managed env's, copied so
the env is never touched). Prints a table; asserts nothing.

    .venv/bin/python bench/overlay_install.py [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(fn, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from ddtctl.envs import require_env
    from ddtctl.overlay.build import build
    from ddtctl.overlay.manage import install, uninstall, verify

    py = require_env("0.5.23").python
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddtctl-bench-") as tmp:
        tmp = Path(tmp)
        t, res = timed(lambda: build(None, python=py, out_dir=tmp / "build"), args.runs)
        rows.append(("build (patch, stage, view, byte-compile)", t, f"{len(res.files)} files"))
        t, _ = timed(lambda: build(None, python=py, out_dir=tmp / "build", reuse=True), args.runs)
        rows.append(("build again (reused, hashes checked)", t, ""))
        site = tmp / "site-packages"
        shutil.copytree(res.sglang_root / "sglang", site / "sglang", symlinks=True)
        shutil.copytree(res.sglang_root / "sglang-0.5.23.dist-info", site / "sglang-0.5.23.dist-info")
        n_files = sum(1 for _ in site.rglob("*"))
        state = tmp / "state"
        inst, uninst, noop = [], [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            install(site, payload=res.payload_dir, python=py, state_dir=state)
            inst.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            install(site, payload=res.payload_dir, python=py, state_dir=state)
            noop.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            uninstall(site, python=py, state_dir=state)
            uninst.append(time.perf_counter() - t0)
        rows.append((f"install into a copy of sglang ({n_files} entries)", statistics.median(inst), "journal+rename"))
        rows.append(("install again (same payload: no-op)", statistics.median(noop), ""))
        rows.append(("uninstall (exact restore)", statistics.median(uninst), ""))
        t, v = timed(lambda: verify(None, python=py, checks=["plugin", "registered", "family", "flags", "resolve",
                                                             "rules", "launch_refused"]), 1)
        rows.append(("verify: smoke checks without kernels", t, "ok" if v.ok else "FAILED"))
        t, v = timed(lambda: verify(None, python=py, checks=["kernels"]), 1)
        rows.append(("verify: kernels selftest('cpu') (Triton interpreter)", t, "ok" if v.ok else "FAILED"))
    print(f"overlay timings (median of {args.runs} where repeated; one CPU machine, python {sys.version.split()[0]})")
    print()
    print("| step | seconds | note |")
    print("|---|---:|---|")
    for name, t, note in rows:
        print(f"| {name} | {t:.2f} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
