"""Test-only: the stand-in drafter's rank model per draft depth, in one place (standard library only).

The oracle drafter (oracle_drafter.py) puts the target's true next token at rank r of its top-4 with probability
P(r | depth), and states those probabilities as its log-probs; bench/accept_sim.py predicts accepted lengths from
the same table, and bench/spec_throughput_gpu.py names the kinds.

Kinds (DDTREE_TEST_ORACLE_DRAFTER):
  calibrated   i.i.d.: rank r with rank_p[r] at every depth (DDTREE_TEST_ORACLE_RANK_P, e.g. 0.88,0.08,0.02); the
               rest is outside the top 4. The rank is a function of (prompt, position) only.
  public       public serving of a Qwen3.6-27B DFlash drafter (../shared/docs/ddtree.md): per-position acceptance
               ~0.82, 0.62, 0.42, 0.30, 0.23 at positions 1-5, i.e. rank 0 with the conditional probability
               PUBLIC_P0 = 0.82, 0.76, 0.68, 0.71, 0.77 at depths 1-5, then PUBLIC_HOLD = 0.75; a miss goes to
               ranks 1 / 2 / 3 with 0.6 / 0.3 / 0.1 of the miss mass (MISS_SPLITS["public"]).
  public-flat  the same rank-0 profile, the miss mass flatter and partly outside the top 4: 0.4 / 0.3 / 0.2 at
               ranks 1 / 2 / 3 and 0.1 nowhere in the top 4 (the sensitivity of the tree's gain to the split).
For depth-profile kinds the rank is drawn per (prompt, position, depth), independently at every depth: the same
position drafted at depth 1 in one step and depth 4 in another has that depth's odds each time.
"""

from __future__ import annotations

PUBLIC_P0 = (0.82, 0.76, 0.68, 0.71, 0.77)  # P(rank 0 at depth d | ranks 0 at depths < d), d = 1..5
PUBLIC_HOLD = 0.75  # the same at every depth past 5
MISS_SPLITS = {"public": (0.6, 0.3, 0.1), "public-flat": (0.4, 0.3, 0.2)}  # share of the miss at ranks 1, 2, 3
DEPTH_KINDS = tuple(MISS_SPLITS)
KINDS = ("calibrated",) + DEPTH_KINDS


def depth_rank_p(kind: str, depth: int) -> tuple[float, float, float, float]:
    """P(true token at rank 0, 1, 2, 3) at draft depth `depth` (1-based) for a depth-profile kind; 1 - sum is the
    chance it is outside the top 4."""
    if kind not in MISS_SPLITS:
        raise ValueError(f"unknown depth-profile drafter {kind!r}; known: {', '.join(DEPTH_KINDS)}")
    if depth < 1:
        raise ValueError(f"draft depths start at 1, got {depth}")
    p0 = PUBLIC_P0[depth - 1] if depth <= len(PUBLIC_P0) else PUBLIC_HOLD
    miss = 1.0 - p0
    s1, s2, s3 = MISS_SPLITS[kind]
    return (p0, miss * s1, miss * s2, miss * s3)


def iid_rank_p(rank_p: tuple[float, ...]) -> tuple[float, float, float, float]:
    """The i.i.d. kind as a 4-slot row: rank_p[:3] and no true token in the 4th slot (its stated probability is half
    of the mass left, calibrated_values' convention)."""
    p = (tuple(rank_p) + (0.0, 0.0, 0.0))[:3]
    return (p[0], p[1], p[2], 0.0)


def stated_probs(true_p: tuple[float, ...], iid: bool = False) -> tuple[float, float, float, float]:
    """What the drafter states for its 4 slots (their softmax probabilities). Depth kinds state the true odds; the
    i.i.d. kind states rank_p[:3] and half the left-over mass in the 4th slot (calibrated_values)."""
    if iid:
        left = max(1.0 - sum(true_p[:3]), 1e-6)
        return (true_p[0], true_p[1], true_p[2], left / 2)
    return tuple(max(p, 1e-6) for p in true_p[:4])  # type: ignore[return-value]


def rest_mass(stated: tuple[float, ...]) -> float:
    """The probability the drafter leaves to the other V - 4 tokens (floored: a drafter never states certainty)."""
    return max(1.0 - sum(stated), 1e-4)


def rows(kind: str, depth: int, rank_p: tuple[float, ...] = (0.88, 0.08, 0.02)) -> list[tuple[float, ...]]:
    """The true rank odds at depths 1..depth, one 4-tuple each."""
    if kind == "calibrated":
        return [iid_rank_p(rank_p)] * depth
    return [depth_rank_p(kind, d) for d in range(1, depth + 1)]


def chain_length(kind: str, depth: int, rank_p: tuple[float, ...] = (0.88, 0.08, 0.02)) -> float:
    """DFLASH's expected accepted length (the bonus included) in closed form: 1 + sum_d prod_{j<=d} P(rank 0 at j)."""
    total, run = 1.0, 1.0
    for p in rows(kind, depth, rank_p):
        run *= p[0]
        total += run
    return total
