#!/usr/bin/env python3
"""How fast is `ddtctl validate` from a cold process, and what would SGLang's own parse+resolve cost?

Prints one table. Columns measured side by side in this run:
  - ddtctl validate, a fresh process (what pre-commit pays), for 1 and for 50 profiles: median of N runs;
  - SGLang 0.5.23's own prepare_server_args + resolve_once over the same profiles, in one process of the managed env
    (import + all resolves), when the env exists (`ddtctl env create`); otherwise that column says "n/a".
Also checks with `python -X importtime` that the validate path imports no torch, sglang or paramiko.
  - ddtctl validate --format json of one hostile 1 MB profile of ~29k unknown keys (every key reported), 3 runs.
Goals (issue #2): 1 profile < 0.15 s, 50 profiles < 0.4 s; (issue #14) the 1 MB profile < 5 s.

First, the cold start (issue #33: keep it within 10% of the day's): `ddtctl validate <bundled profile>` in a
fresh process beside a bare `python -c pass` and `python -c "import ddtctl"`, interleaved (each repeat runs each
once, in a rotated order) so that a busy machine slows them alike; median, and the ratio to `python -c pass`.
`--against DIR` (repeatable) times another checkout's ddtctl in the same interleaving (PYTHONPATH=DIR), e.g.
main's before a change; `--cold-only` prints that table alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "profiles" / "qwen36-27b-ddtree.yaml"


def make_profiles(root: Path, n: int) -> list[Path]:
    """n variants of the bundled profiles (budgets and ports differ, so none is a cached copy of another)."""
    sources = sorted((REPO / "profiles").glob("*.yaml"))
    out = []
    for i in range(n):
        text = sources[i % len(sources)].read_text().replace("port: 30000", f"port: {30000 + i}")
        path = root / f"p{i:03d}.yaml"
        path.write_text(text)
        out.append(path)
    return out


def time_cmd(cmd: list[str], runs: int, env=None) -> float:
    return statistics.median(_once(cmd, env) for _ in range(runs))


def cold_start(ddtctl: str, runs: int, trees: list[Path]) -> list[tuple[str, float]]:
    """(command, median seconds) of a fresh process each, interleaved: `python -c pass`, then per tree
    (PYTHONPATH=tree) `python -c "import ddtctl"` and `ddtctl validate SEED`."""
    cmds: list[tuple[str, list[str], dict[str, str]]] = [
        ("python -c pass", [sys.executable, "-c", "pass"], dict(os.environ, PYTHONPATH=str(REPO)))
    ]
    for tree in trees:
        env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(tree))
        tag = "" if tree == REPO else f"  [{tree}]"
        cmds.append((f"python -c 'import ddtctl'{tag}", [sys.executable, "-c", "import ddtctl"], env))
        cmds.append((f"ddtctl validate {SEED.name}{tag}", [ddtctl, "validate", str(SEED)], env))
    samples: dict[str, list[float]] = {label: [] for label, _, _ in cmds}
    for r in range(runs):
        turn = r % len(cmds)
        for label, cmd, env in cmds[turn:] + cmds[:turn]:
            samples[label].append(_once(cmd, env))
    return [(label, statistics.median(samples[label])) for label, _, _ in cmds]


def _once(cmd: list[str], env) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:4]} failed: {proc.stderr.decode()[-400:]}")
    return took


def print_cold_start(rows: list[tuple[str, float]], runs: int) -> None:
    floor = rows[0][1]
    print(f"cold start, a fresh process each, {runs} interleaved runs (median):")
    width = max(len(label) for label, _ in rows)
    print(f"| {'command':<{width}} | {'median':>9} | {'/ python -c pass':>16} |")
    print(f"|{'-' * (width + 2)}|{'-' * 11}|{'-' * 18}|")
    for label, took in rows:
        print(f"| {label:<{width}} | {took * 1000:>6.1f} ms | {took / floor:>15.2f}x |")
    print()


def sglang_time(profiles: list[Path]) -> float | None:
    try:
        from ddtctl.envs import managed_env
    except ImportError:
        return None
    env = managed_env()
    if not env.exists:
        return None
    from ddtctl.profile import load_profile
    from ddtctl.render import render_argv

    argvs = []
    for p in profiles:
        prof = load_profile(p).profile
        if prof.server.get("speculative-algorithm") == "DDTREE":  # plain SGLang does not know DDTREE
            prof.server["speculative-algorithm"] = "DFLASH"
            for k in [k for k in prof.server if "ddtree" in k]:
                del prof.server[k]
        argvs.append(render_argv(prof))
    script = (
        "import sys, json\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "for argv in json.loads(sys.stdin.read()):\n"
        "    try:\n"
        "        prepare_server_args(argv).resolve_once()\n"
        "    except BaseException:\n"
        "        pass\n"
        "import os; os._exit(0)\n"
    )
    import json

    start = time.perf_counter()
    subprocess.run([str(env.python), "-c", script], input=json.dumps(argvs).encode(), capture_output=True)
    return time.perf_counter() - start


def heavy_imports() -> list[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddtctl", "validate", str(SEED)],
                          capture_output=True, text=True)
    names = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    return sorted({n.split(".")[0] for n in names if n.split(".")[0] in ("torch", "sglang", "paramiko", "triton")})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--cold-runs", type=int, default=21, help="repeats of the cold-start table")
    parser.add_argument("--against", type=Path, action="append", default=[],
                        help="another checkout timed in the same cold-start run (repeatable)")
    parser.add_argument("--cold-only", action="store_true", help="print the cold-start table only")
    args = parser.parse_args()
    ddtctl = shutil.which("ddtctl", path=str(Path(sys.executable).parent)) or "ddtctl"
    trees = [t.resolve() for t in args.against] + [REPO]
    print_cold_start(cold_start(ddtctl, args.cold_runs, trees), args.cold_runs)
    if args.cold_only:
        return
    tmp = Path(tempfile.mkdtemp(prefix="ddtctl-bench-"))
    try:
        one = make_profiles(tmp / "one", 1) if (tmp / "one").mkdir() is None else []
        fifty = make_profiles(tmp / "fifty", 50) if (tmp / "fifty").mkdir() is None else []
        env = dict(os.environ, NO_COLOR="1")
        bare = time_cmd([sys.executable, "-c", "pass"], args.runs)
        rows = []
        for label, paths, goal in (("1 profile", one, 0.15), ("50 profiles", fifty, 0.4)):
            fast = time_cmd([ddtctl, "validate", *map(str, paths)], args.runs, env)
            typer_path = time_cmd([ddtctl, "validate", *map(str, paths)], args.runs,
                                  dict(env, DDTCTL_NO_FASTPATH="1"))
            sg = sglang_time(paths)
            rows.append((label, fast, typer_path, sg, goal))
        sys.path.insert(0, str(REPO / "tests"))
        from hostile_profiles import unknown_keys_profile  # the profile the hardening tests feed to validate

        unknown_keys_profile(tmp / "hostile.yaml")
        hostile = [str(tmp / "hostile.yaml")]
        json_cmd = [ddtctl, "validate", "--format", "json", *hostile]
        hostile_runs = min(3, args.runs)
        rows.append(("1 MB unknown keys", time_cmd(json_cmd, hostile_runs, env),
                     time_cmd(json_cmd, hostile_runs, dict(env, DDTCTL_NO_FASTPATH="1")), None, 5.0))
        heavy = heavy_imports()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"python -c pass (floor): {bare * 1000:.0f} ms; runs per cell: {args.runs} (median)")
    print(f"heavy imports on the validate path: {', '.join(heavy) if heavy else 'none (no torch, sglang, paramiko)'}")
    print()
    print(f"| {'case':<17} | {'ddtctl validate':>16} | {'via typer (no fast path)':>24} | {'SGLang parse+resolve':>21} "
          f"| {'goal':>6} | {'met':>4} | {'SGLang / ddtctl':>15} |")
    print(f"|{'-' * 19}|{'-' * 18}|{'-' * 26}|{'-' * 23}|{'-' * 8}|{'-' * 6}|{'-' * 17}|")
    for label, fast, typer_path, sg, goal in rows:
        sg_cell = f"{sg:.2f} s" if sg is not None else "n/a (no env)"
        ratio = f"{sg / fast:.0f}x" if sg is not None else "n/a"
        print(f"| {label:<17} | {fast * 1000:>13.0f} ms | {typer_path * 1000:>21.0f} ms | {sg_cell:>21} "
              f"| {goal:>4.2f} s | {'yes' if fast < goal else 'no':>4} | {ratio:>15} |")


if __name__ == "__main__":
    main()
