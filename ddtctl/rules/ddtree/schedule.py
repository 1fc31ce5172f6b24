"""DDT117: the DDTREE budget schedule (`--speculative-ddtree-budget-schedule`), decided by core.py like
DDT101-DDT115 (checks.py), in a module of its own."""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.ddtree.checks import core_hits, core_rule
from ddtctl.rules.engine import Context, Hit


@core_rule(
    "DDT117",
    "DDTREE budget schedule is well formed and fillable",
    reads=("speculative_ddtree_budget_schedule", "speculative_ddtree_budget", "speculative_ddtree_topk_cap"),
)
def ddtree_budget_schedule(ctx: Context) -> Iterator[Hit]:
    """`--speculative-ddtree-budget-schedule "2:127,4:64,8:16,0"` lets the worker pick its verify width
    per batch: a batch of at most 2 requests verifies a 127-node tree, at most 4 a 64-node one, at most 8 a
    16-node one, larger batches the chain (budget 0 or `chain`: the drafter's top-1 at every depth, DFLASH's
    block). Past batch 8 the verify rows (batch x (B + 1)) make the target's GEMMs compute-bound, and the
    chain wins (notes/step-cost-h200.md). Batch sizes must increase and the last entry is a bare budget;
    every budget must be fillable by the drafter at the topk cap (as DDT107), at most
    `--speculative-ddtree-budget` when that is given (unset, the budget is the schedule's widest tree: the
    verify width, the draft top-K and DDT114's scratch are sized for it), and on hybrid targets at most 127,
    the widest tree the compact GDN verify takes."""
    return core_hits(ctx, "DDT117")
