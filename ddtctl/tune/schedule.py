"""`ddtctl tune` on DDTREE: the budget schedule a sweep found (issue #30).

The winning budget moves with the batch: the widest tree at concurrency 1, the chain from about 8 on (the
verify rows, batch x (B + 1), make the target's GEMMs compute-bound). From a sweep over budgets at several
concurrencies, the fastest budget at each one -- the DFLASH baseline standing for the chain, budget 0 --
makes a `speculative-ddtree-budget-schedule`: "1:128,8:16,0" says batches of at most 1 verify a 128-node
tree, at most 8 a 16-node one, larger ones the chain. Only points that differ from the winner in their budget
alone take part (a schedule carries budgets, not the rest of a point's flags). `--write --schedule` writes it,
with the budget its widest tree (ddtctl/rules/ddtree/core.py resolves and checks it, DDT117).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddtctl.tune.results import PointResult, TuneResult

BUDGET = "speculative-ddtree-budget"
SCHEDULE = "speculative-ddtree-budget-schedule"
CHAIN = 0


def _others(flags: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flags.items() if k not in (BUDGET, SCHEDULE)}


def best_budgets(result: TuneResult) -> list[tuple[int, int]]:
    """(concurrency, the fastest budget there; 0: the DFLASH baseline, the chain), for each concurrency where
    a point of the winner's kind or the DFLASH baseline was measured."""
    winner = result.winner
    if winner is None or str(result.algorithm or "").upper() != "DDTREE":
        return []
    group = [
        p
        for p in result.points
        if p.status == "ok"
        and isinstance(p.flags.get(BUDGET), int)
        and _others(p.flags) == _others(winner.flags)
    ]
    base = result.baseline
    dflash = base if base is not None and base.flags.get("speculative-algorithm") == "DFLASH" else None
    out = []
    for c in sorted(result.concurrencies):
        ranked = [(p.tps(c), int(p.flags[BUDGET])) for p in group if p.tps(c) is not None]
        if dflash is not None and dflash.tps(c) is not None:
            ranked.append((dflash.tps(c), CHAIN))
        if ranked:
            out.append((c, max(ranked, key=lambda t: (t[0] or 0.0, t[1]))[1]))
    return out


def schedule_text(best: list[tuple[int, int]]) -> str | None:
    """[(1, 128), (8, 16), (32, 0)] -> "1:128,8:16,0" (equal neighbours merged, the last budget for every
    larger batch); None when one budget wins everywhere (the fixed budget is the answer then)."""
    if len({b for _, b in best}) < 2:
        return None
    runs: list[tuple[int, int]] = []
    for c, b in best:
        if runs and runs[-1][1] == b:
            runs[-1] = (c, b)
        else:
            runs.append((c, b))
    return ",".join([f"{c}:{b}" for c, b in runs[:-1]] + [str(runs[-1][1])])


def budget_schedule(result: TuneResult) -> str | None:
    return schedule_text(best_budgets(result))


def schedule_point(result: TuneResult) -> PointResult | None:
    """The winner with the schedule in place of its budget (the budget: the schedule's widest tree), for
    `--write`; None without a schedule."""
    text = budget_schedule(result)
    if text is None or result.winner is None:
        return None
    widest = max(b for _, b in best_budgets(result))
    flags = dict(result.winner.flags, **{BUDGET: widest, SCHEDULE: text})
    return replace(result.winner, label=f"budget schedule {text}", flags=flags)
