#!/usr/bin/env python3
"""How much the flag catalog adds to the `ddtctl validate` path (goal: < 10 ms per release loaded).

Each row is measured in fresh interpreters (the way a CLI run pays it): the time to import ddtctl.schema.catalog and
load one release's catalog, minus nothing (the interpreter start itself is reported separately). Median of N runs.

    python bench/catalog_speed.py [-n 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

SNIPPET = r"""
import time, json, sys
t0 = time.perf_counter()
import ddtctl.schema.catalog as m
t1 = time.perf_counter()
c = m.load_catalog(sys.argv[1])
t2 = time.perf_counter()
for key in ("tp-size", "tp_size", "--tensor-parallel-size", "speculative-algorithm", "mamba-radix-cache-strategy"):
    c.get(key)
t3 = time.perf_counter()
c.suggest("tp-sise")
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "get5": t3 - t2, "suggest": t4 - t3, "flags": len(c)}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=15)
    args = ap.parse_args()
    from ddtctl.schema.catalog import CATALOG_DIR, available_versions

    print(f"{'release':<9} {'flags':>5} {'size KiB':>8} {'import ms':>9} {'load ms':>8} {'5x get us':>9} "
          f"{'suggest ms':>10}")
    for version in available_versions():
        rows = []
        for _ in range(args.n):
            out = subprocess.run([sys.executable, "-c", SNIPPET, version], capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout))
        med = {k: statistics.median(r[k] for r in rows) for k in ("import", "load", "get5", "suggest")}
        size = (CATALOG_DIR / f"sglang-{version}.json").stat().st_size / 1024
        print(f"{version:<9} {rows[0]['flags']:>5} {size:>8.0f} {med['import'] * 1e3:>9.2f} {med['load'] * 1e3:>8.2f} "
              f"{med['get5'] * 1e6:>9.1f} {med['suggest'] * 1e3:>10.2f}")
    print(f"(median of {args.n} fresh interpreters each; 'import' includes dataclasses/pathlib/json, which the validate "
          "path imports anyway)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
