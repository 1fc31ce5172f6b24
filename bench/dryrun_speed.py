"""Benchmark: N profiles through `ddtctl dry-run` (one warm resolver) vs one `python -c` process per profile doing
the same SGLang calls (import sglang, declare the GPU, prepare_server_args + resolve_once + check_server_args).

    .venv/bin/python bench/dryrun_speed.py [--sizes 1,10,50]

Profiles are written from the fidelity corpus (tests/fidelity/cases.yaml, accepted and rejected cases mixed) into
a temp dir. Both ways resolve the same rendered argv with the same declared GPU; the verdicts are compared too.
Prints a table; goal: 50 profiles at least 10x faster than the per-process way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fidelity"))

# One process per profile: the same worker code the bridge runs, minus the warm loop; normal interpreter exit.
PER_PROCESS = """
import json, sys
sys.path.insert(0, {bridge!r})
import resolver_worker as w
worker = w.Worker(None)
worker.boot()
result = worker.resolve(json.loads({request!r}))
print(json.dumps({{"accepted": result["accepted"], "error": result["error"]}}))
"""


def _profiles(n: int, out: Path) -> list[tuple[Path, list[str], str]]:
    import corpus

    from ddtctl.argv import parse_launch_argv
    from ddtctl.profile import load_profile
    from ddtctl.render import render_argv
    from ddtctl.schema.catalog import load_catalog

    cases = [c for c in corpus.load_cases() if c.gpu and "--config" not in c.argv_text]
    catalog = load_catalog("0.5.23")
    made = []
    i = -1
    while len(made) < n:
        i += 1
        case = cases[i % len(cases)]
        argv = case.argv
        server = parse_launch_argv(argv, config=False).flags()
        model = server.pop("model-path")
        text = [f"name: bench-{i:03d}", 'sglang: "0.5.23"', f"hardware: {{gpu: {json.dumps(case.gpu)}}}",
                f"model: {{path: {model}}}", "server:" if server else "server: {}"]
        text += [f"  {k}: {json.dumps(v)}" for k, v in server.items()]
        path = out / f"bench-{i:03d}.yaml"
        path.write_text("\n".join(text) + "\n")
        try:
            rendered = render_argv(load_profile(path).profile, catalog)
        except Exception:  # a case the profile layer refuses before SGLang (e.g. an unknown flag): skip it
            path.unlink()
            continue
        made.append((path, rendered, case.gpu))
    return made


def run_ddtctl(paths: list[Path]) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ddtctl"), "dry-run", "--format", "json", *map(str, paths)],
                          capture_output=True, text=True, cwd=REPO)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ddtctl dry-run failed ({proc.returncode}): {proc.stderr}")
    profiles = json.loads(proc.stdout)["results"]["profiles"]  # the --format json envelope (ddtctl/report.py)
    return dt, [{"accepted": p["ok"], "error": p["error"]} for p in profiles]


def run_per_process(items: list[tuple[Path, list[str], str]], python: Path) -> tuple[float, list[dict]]:
    from ddtctl.dryrun import platform_for

    out = []
    t0 = time.perf_counter()
    for _path, argv, gpu in items:
        platform, _ = platform_for(gpu)
        request = json.dumps({"argv": argv + ["--device", "cuda"], "platform": platform})
        code = PER_PROCESS.format(bridge=str(REPO / "ddtctl" / "bridge"), request=request)
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=REPO)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        out.append(json.loads(lines[-1]) if lines else {"accepted": None, "error": proc.stderr[-300:]})
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,10,50")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    from ddtctl.envs import require_env

    python = require_env().python
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            d = Path(tmp) / f"n{n}"
            d.mkdir()
            items = _profiles(n, d)
            warm_s, warm = run_ddtctl([p for p, _, _ in items])
            cold_s, cold = run_per_process(items, python)
            same = sum(
                w["accepted"] == c["accepted"] and (w["error"] or {}).get("message") == (c["error"] or {}).get("message")
                for w, c in zip(warm, cold)
            )
            rows.append((len(items), warm_s, cold_s, same, sum(1 for w in warm if not w["accepted"])))
            print(f"  done n={len(items)}: {warm_s:.1f}s vs {cold_s:.1f}s", file=sys.stderr)
    print("| profiles | rejected | ddtctl dry-run (one warm resolver) | python -c per profile | speedup | same verdicts |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, warm_s, cold_s, same, rejected in rows:
        print(f"| {n} | {rejected} | {warm_s:.1f} s ({warm_s / n * 1000:.0f} ms/profile) | {cold_s:.1f} s "
              f"({cold_s / n:.1f} s/profile) | {cold_s / warm_s:.1f}x | {same}/{n} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
