#!/usr/bin/env python3
"""Expected accepted length of DFLASH (a chain) and DDTREE (budget B) under the test drafter's rank model, from
DDTREE's own best-first build (ddtctl/kernels/reference.py). CPU only, seconds.

The calibrated stand-in drafter (tests/gpu_standins/oracle_drafter.py) puts the target's next token at rank r with
probability rank_p[r] at every depth, independently, and states those probabilities as its log-probs. So the tree is
the same every step (tokens = ranks), and a step accepts down the path of the true ranks while the tree has it.

    python3 bench/accept_sim.py --rank-p 0.88,0.08,0.02 --budgets 16,32,64,128,256 --seed 7
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddtctl.kernels.reference import build  # noqa: E402


def tree_children(rank_p: list[float], depth: int, budget: int) -> dict[tuple[int, int], int]:
    """(parent node, rank) -> child node of the best-first tree over `depth` identical rows."""
    left = max(1.0 - sum(rank_p), 1e-9)
    probs = list(rank_p) + [left / 2]  # the 4th slot, as the stand-in's calibrated values
    k = len(probs)
    lp = np.tile(np.log(np.asarray(probs, dtype=np.float64)), (depth, 1)).astype(np.float32)
    ids = np.tile(np.arange(k, dtype=np.int64), (depth, 1))
    tree = build(lp, ids, budget)
    return {(int(tree.parents[n]), int(tree.tokens[n - 1])): n for n in range(1, budget + 1)}


def chain_children(depth: int) -> dict[tuple[int, int], int]:
    """DFLASH's draft: the rank-0 token at every depth."""
    return {(d, 0): d + 1 for d in range(depth)}


def accepted_length(children: dict, rank_p: list[float], depth: int, steps: int, rng: random.Random) -> float:
    total = 0
    for _ in range(steps):
        node, length = 0, 0
        for _ in range(depth):
            u, acc, rank = rng.random(), 0.0, -1
            for r, p in enumerate(rank_p):
                acc += p
                if u < acc:
                    rank = r
                    break
            nxt = children.get((node, rank)) if rank >= 0 else None
            if nxt is None:
                break
            node, length = nxt, length + 1
        total += length + 1  # the bonus token
    return total / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank-p", default="0.88,0.08,0.02")
    ap.add_argument("--budgets", default="16,32,64,128,256")
    ap.add_argument("--depth", type=int, default=15, help="draft depth (block size - 1)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rank_p = [float(x) for x in args.rank_p.split(",")]
    print(f"seed {args.seed}; rank_p {rank_p}; depth {args.depth}; {args.steps} steps per budget")
    chain = sum(rank_p[0] ** d for d in range(args.depth + 1))
    print(f"{'draft':>12} {'accepted length':>16} {'vs DFLASH':>10}")
    base = accepted_length(chain_children(args.depth), rank_p, args.depth, args.steps, random.Random(args.seed))
    print(f"{'DFLASH':>12} {base:>16.3f} {1.0:>10.3f}")
    for budget in (int(b) for b in args.budgets.split(",")):
        rng = random.Random(args.seed)
        length = accepted_length(tree_children(rank_p, args.depth, budget), rank_p, args.depth, args.steps, rng)
        print(f"{'DDTREE B=' + str(budget):>12} {length:>16.3f} {length / base:>10.3f}")
    print(f"chain in closed form: {chain:.3f} (sum of rank_p[0]^d, d = 0..{args.depth}); "
          f"log-probs {[round(math.log(p), 3) for p in rank_p]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
