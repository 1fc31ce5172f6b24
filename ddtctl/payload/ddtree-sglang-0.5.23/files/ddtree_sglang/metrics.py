"""DDTREE per-step metrics (no sglang import): a one-line log summary and a dict for /get_server_info."""

from __future__ import annotations

from ddtree_sglang import ALGORITHM


class DdtreeMetrics:
    """Per-step counters; a one-line summary every `interval` steps and a dict for /get_server_info."""

    def __init__(self, *, budget: int, verify_width: int, prep_mode: str, accept_mode: str, interval: int):
        self.budget, self.verify_width = budget, verify_width
        self.prep_mode, self.accept_mode = prep_mode, accept_mode
        self.interval = max(1, interval)
        self.steps = 0
        self.requests = 0
        self.accepted = 0
        self.max_accepted = 0
        self.prep_s = 0.0
        self.graph_steps = 0
        self.branch_nodes = 0
        self.hist: dict[int, int] = {}

    def record(self, accept_lens: list[int], prep_s: float, graph: bool = False, branch_nodes: int = 0) -> None:
        self.steps += 1
        self.branch_nodes += int(branch_nodes)
        self.graph_steps += int(bool(graph))
        self.requests += len(accept_lens)
        self.accepted += sum(accept_lens)
        for a in accept_lens:
            self.hist[a] = self.hist.get(a, 0) + 1
            self.max_accepted = max(self.max_accepted, a)
        self.prep_s += prep_s

    def summary(self) -> dict:
        reqs = max(1, self.requests)
        return {
            "algorithm": ALGORITHM,
            "steps": self.steps,
            "request_steps": self.requests,
            "mean_accepted_drafts": self.accepted / reqs,
            "mean_accept_len": 1.0 + self.accepted / reqs,  # committed tokens per request step (bonus included)
            "max_accepted_drafts": self.max_accepted,
            "accepted_hist": dict(sorted(self.hist.items())),
            "budget": self.budget,
            "tree_size": self.budget,
            "verify_width": self.verify_width,
            "prep_mode": self.prep_mode,
            "accept_mode": self.accept_mode,
            "mean_prep_ms": 1000.0 * self.prep_s / max(1, self.steps),
            "verify_graph_steps": self.graph_steps,
            "accepted_branch_nodes": self.branch_nodes,
        }

    def line(self) -> str:
        s = self.summary()
        return (
            f"DDTREE metrics: steps={s['steps']} mean_accept_len={s['mean_accept_len']:.3f} "
            f"max_accepted={s['max_accepted_drafts']} tree_size={s['tree_size']} verify_width={s['verify_width']} "
            f"prep_ms={s['mean_prep_ms']:.3f} graph_steps={s['verify_graph_steps']} "
            f"branch_nodes={s['accepted_branch_nodes']} prep={s['prep_mode']} "
            f"accept={s['accept_mode']}"
        )


_LIVE: list[DdtreeMetrics] = []


def register(metrics: DdtreeMetrics) -> None:
    _LIVE.append(metrics)


def live_metrics() -> list[dict]:
    """Summaries of this process's DDTREE workers (the scheduler process: one per TP rank)."""
    return [m.summary() for m in _LIVE]
