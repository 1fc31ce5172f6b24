#!/usr/bin/env python3
"""Which compact GDN tree launch faults, one launch per process (CUDA_LAUNCH_BLOCKING=1): a fault poisons the CUDA
context, so each (shape, stage, precision, warps) runs alone and reports ok / the error's first line.

    PYTHONPATH=/tmp/site:. python3 bench/gdn_tree_probe.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, random, sys, torch
sys.path.insert(0, %(repo)r)
from ddtctl.kernels import gdn_tree as G
H, HV, K, V, bs, n, layers, stage, prec, bv, act = %(args)s
act = getattr(torch, act)
dev = torch.device("cuda")
torch.manual_seed(0)
rng = random.Random(0)
tot = bs * n
q = torch.randn(1, tot, H, K, device=dev, dtype=act)
k = torch.randn(1, tot, H, K, device=dev, dtype=act)
v = torch.randn(1, tot, HV, V, device=dev, dtype=act)
a = torch.randn(tot, HV, device=dev, dtype=act)
b = torch.randn(tot, HV, device=dev, dtype=act)
A = torch.rand(HV, device=dev)
dt = torch.randn(HV, device=dev)
slots = bs + 2
ssm = torch.randn(layers, slots, HV, V, K, device=dev)
issm = torch.zeros(layers, bs + 1, n, HV, V, K, device=dev)
ci = torch.randperm(slots)[:bs].int().to(dev)
rows = torch.arange(bs, dtype=torch.int32, device=dev)
par = [[-1] + [rng.randrange(max(0, i - 3), i) for i in range(1, n)] for _ in range(bs)]
pt = torch.tensor([[0] + p[1:] for p in par], device=dev)
cu = torch.arange(0, tot + 1, n, dtype=torch.int32, device=dev)
if stage == "verify":
    G.tree_gdn_verify(A_log=A, dt_bias=dt, q=q, k=k, v=v, a=a, b=b, ssm_states=ssm[0], cache_indices=ci,
                      query_start_loc=cu, intermediate_states_buffer=issm[0], intermediate_state_indices=rows,
                      retrieve_parent_token=pt, depth_bound=15, precision=prec, block_v=bv)
else:
    acc, lens = [], []
    for r in range(bs):
        node = n - 1
        path = [node]
        while node:
            node = par[r][node]
            path.append(node)
        path = path[::-1][:16]
        acc.append([r * n + x for x in path] + [-1] * (16 - len(path)))
        lens.append(len(path))
    G.tree_gdn_commit(temporal=ssm, intermediate_ssm=issm, state_indices=ci, scratch_rows=rows,
                      accept_index=torch.tensor(acc, device=dev), accept_lens=torch.tensor(lens, device=dev,
                      dtype=torch.int32), width=n, n_heads=H, precision=prec, block_v=bv)
torch.cuda.synchronize()
print("PROBE-OK")
"""


def probe(args: tuple) -> str:
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    p = subprocess.run([sys.executable, "-c", CHILD % {"repo": str(REPO), "args": repr(args)}], capture_output=True,
                       text=True, env=env, timeout=240)
    if "PROBE-OK" in p.stdout:
        return "ok"
    lines = [x for x in (p.stderr or "").splitlines() if "Error" in x or "error" in x]
    return (lines[-1] if lines else p.stderr[-300:]).strip()[:200]


def main() -> int:
    cases = []
    for prec in ("tf32x3",):
        for shape in ((2, 4, 16, 16), (16, 48, 128, 128)):
            for n in (17, 33):
                cases.append((*shape, 2, n, 1, "verify", prec, 32, "bfloat16"))
    cases += [(16, 48, 128, 128, 1, 17, 48, "commit", "tf32x3", 32, "bfloat16"),
              (16, 48, 128, 128, 8, 33, 48, "commit", "tf32x3", 32, "bfloat16"),
              (2, 4, 16, 16, 2, 33, 1, "verify", "tf32x3", 32, "float32"),
              (16, 48, 128, 128, 8, 64, 1, "verify", "tf32x3", 32, "bfloat16"),
              (8, 24, 128, 128, 8, 33, 1, "verify", "tf32x3", 32, "bfloat16")]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as ex:
        out = [{"case": c, "result": r} for c, r in zip(cases, ex.map(probe, cases))]
    for row in out:
        print(json.dumps(row), flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gdn_tree_probe.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
