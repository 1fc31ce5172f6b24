#!/usr/bin/env python3
"""Expected accepted length of DFLASH (a chain) and DDTREE (budget B) under the test drafter's rank model, from
DDTREE's own best-first build (ddtctl/kernels/reference.py). CPU only, seconds.

The stand-in drafter (tests/gpu_standins/oracle_drafter.py) puts the target's next token at rank r with probability
P(r | depth), independently at every depth, and states those probabilities as its log-probs
(tests/gpu_standins/drafter_profiles.py holds the table). So the tree is the same every step (tokens = ranks), and a
step accepts down the path of the true ranks while the tree has it. Drafters:
  calibrated   i.i.d., rank_p[r] at every depth (--rank-p);
  public       rank 0 with 0.82, 0.76, 0.68, 0.71, 0.77 at depths 1-5, then 0.75; misses 0.6/0.3/0.1 at ranks 1-3;
  public-flat  the same rank 0, misses 0.4/0.3/0.2 at ranks 1-3 and 0.1 outside the top 4.

    python3 bench/accept_sim.py --rank-p 0.88,0.08,0.02 --budgets 16,32,64,128,256 --seed 7
    python3 bench/accept_sim.py --drafter public --budgets 8,16,32,64,96,127 --seed 7
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu_standins"))

import drafter_profiles as profiles  # noqa: E402

from ddtctl.kernels.reference import build  # noqa: E402


def tree_children_rows(stated: list[tuple[float, ...]], budget: int) -> dict[tuple[int, int], int]:
    """(parent node, rank) -> child node of the best-first tree over the drafter's stated odds, one row per depth
    (the stand-in's log-probs: each slot's probability over the row's total and the rest of the vocabulary)."""
    probs = np.asarray(stated, dtype=np.float64)
    total = probs.sum(axis=1, keepdims=True) + np.asarray([[profiles.rest_mass(tuple(r))] for r in stated])
    lp = np.log(probs / total).astype(np.float32)
    ids = np.tile(np.arange(probs.shape[1], dtype=np.int64), (probs.shape[0], 1))
    tree = build(lp, ids, budget)
    return {(int(tree.parents[n]), int(tree.tokens[n - 1])): n for n in range(1, budget + 1)}


def tree_children(rank_p: list[float], depth: int, budget: int) -> dict[tuple[int, int], int]:
    """(parent node, rank) -> child node of the best-first tree over `depth` identical rows (the i.i.d. drafter)."""
    left = max(1.0 - sum(rank_p), 1e-9)
    probs = list(rank_p) + [left / 2]  # the 4th slot, as the stand-in's calibrated values
    k = len(probs)
    lp = np.tile(np.log(np.asarray(probs, dtype=np.float64)), (depth, 1)).astype(np.float32)
    ids = np.tile(np.arange(k, dtype=np.int64), (depth, 1))
    tree = build(lp, ids, budget)
    return {(int(tree.parents[n]), int(tree.tokens[n - 1])): n for n in range(1, budget + 1)}


def drafter_rows(drafter: str, depth: int, rank_p: list[float]) -> tuple[list[tuple], list[tuple]]:
    """(true odds, stated odds) per depth 1..depth for a drafter kind of drafter_profiles."""
    true = profiles.rows(drafter, depth, tuple(rank_p))
    if drafter == "calibrated":
        return [tuple(rank_p)] * depth, [profiles.stated_probs(tuple(rank_p), iid=True)] * depth
    return true, [profiles.stated_probs(r) for r in true]


def chain_children(depth: int) -> dict[tuple[int, int], int]:
    """DFLASH's draft: the rank-0 token at every depth."""
    return {(d, 0): d + 1 for d in range(depth)}


def accepted_length(children: dict, rank_p: list[float], depth: int, steps: int, rng: random.Random) -> float:
    """The i.i.d. drafter: rank_p at every depth."""
    return accepted_length_rows(children, [tuple(rank_p)] * depth, steps, rng)


def accepted_length_rows(children: dict, true: list[tuple], steps: int, rng: random.Random) -> float:
    """Mean accepted length (the bonus token included) when the true token's rank at depth d has the odds true[d-1]
    (the rest: outside the drafted ranks)."""
    total = 0
    for _ in range(steps):
        node, length = 0, 0
        for odds in true:
            u, acc, rank = rng.random(), 0.0, -1
            for r, p in enumerate(odds):
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


def table(drafter: str, rank_p: list[float], depth: int, budgets: list[int], steps: int, seed: int) -> list[tuple]:
    """[(draft, accepted length, vs DFLASH)]: DFLASH first, then DDTREE at each budget, each from Random(seed)."""
    true, stated = drafter_rows(drafter, depth, rank_p)
    base = accepted_length_rows(chain_children(depth), true, steps, random.Random(seed))
    rows = [("DFLASH", base, 1.0)]
    for budget in budgets:
        length = accepted_length_rows(tree_children_rows(stated, budget), true, steps, random.Random(seed))
        rows.append((f"DDTREE B={budget}", length, length / base))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drafter", default="calibrated", choices=profiles.KINDS)
    ap.add_argument("--rank-p", default="0.88,0.08,0.02", help="the calibrated (i.i.d.) drafter's rank odds")
    ap.add_argument("--budgets", default="16,32,64,128,256")
    ap.add_argument("--depth", type=int, default=15, help="draft depth (block size - 1)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rank_p = [float(x) for x in args.rank_p.split(",")]
    budgets = [int(b) for b in args.budgets.split(",") if b]
    true, _ = drafter_rows(args.drafter, args.depth, rank_p)
    print(f"seed {args.seed}; drafter {args.drafter}; depth {args.depth}; {args.steps} steps per budget")
    print("rank odds by depth: " + " | ".join(",".join(f"{p:.3f}" for p in r) for r in true[:6])
          + (" | ..." if len(true) > 6 else ""))
    print(f"{'draft':>12} {'accepted length':>16} {'vs DFLASH':>10}")
    for name, length, ratio in table(args.drafter, rank_p, args.depth, budgets, args.steps, args.seed):
        print(f"{name:>12} {length:>16.3f} {ratio:>10.3f}")
    chain = profiles.chain_length(args.drafter, args.depth, tuple(rank_p))
    print(f"chain in closed form: {chain:.3f} (1 + sum over d of the product of P(rank 0) at depths 1..d)")
    if args.drafter == "calibrated":
        print(f"log-probs {[round(math.log(p), 3) for p in rank_p]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
