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
        self.head_graph_steps = 0  # steps whose draft top-K came from the draft CUDA graph's tail
        self.gdn_tree_kernel: str | None = None  # hybrid targets: "compact" (gdn_tree.py) or "sglang"
        self.hist: dict[int, int] = {}

        # Device-side accumulators (record_device): read back only by summary(), so a decode step never waits for
        # the GPU to report its accept lengths (that would serialise the overlap scheduler).
        self._hist_dev = None  # int64 [max_depth + 1] on the device
        self._branch_dev = None  # int64 [] on the device

    def record(self, accept_lens: list[int], prep_s: float, graph: bool = False, branch_nodes: int = 0) -> None:
        self.steps += 1
        self.branch_nodes += int(branch_nodes)
        self.graph_steps += int(bool(graph))
        self.requests += len(accept_lens)
        self._add_hist(_count(accept_lens))
        self.prep_s += prep_s

    def record_device(self, accept_lens, branch_nodes, prep_s: float, max_depth: int, graph: bool = False) -> None:
        """One step from device tensors (accept_lens [bs] int, branch_nodes [] int): no device-to-host sync."""
        import torch

        self.steps += 1
        self.graph_steps += int(bool(graph))
        self.requests += int(accept_lens.numel())
        self.prep_s += prep_s
        if self._hist_dev is None or self._hist_dev.device != accept_lens.device:
            self._flush()
            self._hist_dev = torch.zeros(max_depth + 1, dtype=torch.int64, device=accept_lens.device)
            self._branch_dev = torch.zeros((), dtype=torch.int64, device=accept_lens.device)
        idx = accept_lens.view(-1).to(torch.int64).clamp(0, max_depth)
        self._hist_dev.scatter_add_(0, idx, torch.ones_like(idx))
        self._branch_dev += branch_nodes.to(torch.int64).sum()

    def _add_hist(self, counts: dict[int, int]) -> None:
        for a, c in counts.items():
            if c:
                self.hist[a] = self.hist.get(a, 0) + c
                self.accepted += a * c
                self.max_accepted = max(self.max_accepted, a)

    def _flush(self) -> None:
        """Fold the device accumulators into the host counters (one sync; only when the metrics are read)."""
        if self._hist_dev is None:
            return
        hist = self._hist_dev.tolist()
        self.branch_nodes += int(self._branch_dev.item())
        self._hist_dev.zero_()
        self._branch_dev.zero_()
        self._add_hist(dict(enumerate(hist)))

    def summary(self) -> dict:
        self._flush()
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
            "draft_head_graph_steps": self.head_graph_steps,
            "gdn_tree_kernel": self.gdn_tree_kernel,
            "conv_tree_kernel": self._conv_tree_kernel(),
            "verify_attention": self._verify_attention(),
        }

    @staticmethod
    def _verify_attention() -> str:
        """"splitkv" once verify_attn.py's tree kernel has served a verify call in this process, else "extend"."""
        from ddtree_sglang import verify_attn

        return "splitkv" if verify_attn.STATE["served"] else "extend"

    def _conv_tree_kernel(self) -> str | None:
        """Hybrid tree targets: "compact" once hybrid.py's hook has run the compact tree conv, else "sglang"."""
        if self.gdn_tree_kernel is None:
            return None
        from ddtree_sglang import hybrid

        return "compact" if hybrid.STATE.get("conv_tree_calls") else "sglang"

    def line(self) -> str:
        s = self.summary()
        return (
            f"DDTREE metrics: steps={s['steps']} mean_accept_len={s['mean_accept_len']:.3f} "
            f"max_accepted={s['max_accepted_drafts']} tree_size={s['tree_size']} verify_width={s['verify_width']} "
            f"prep_ms={s['mean_prep_ms']:.3f} graph_steps={s['verify_graph_steps']} "
            f"branch_nodes={s['accepted_branch_nodes']} head_graph_steps={s['draft_head_graph_steps']} "
            f"prep={s['prep_mode']} "
            f"accept={s['accept_mode']}"
            + (f" gdn_tree={s['gdn_tree_kernel']}" if s["gdn_tree_kernel"] else "")
            + (f" conv_tree={s['conv_tree_kernel']}" if s["conv_tree_kernel"] else "")
            + f" verify_attn={s['verify_attention']}"
        )


def _count(values: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for v in values:
        out[int(v)] = out.get(int(v), 0) + 1
    return out


_LIVE: list[DdtreeMetrics] = []


def register(metrics: DdtreeMetrics) -> None:
    _LIVE.append(metrics)


def live_metrics() -> list[dict]:
    """Summaries of this process's DDTREE workers (the scheduler process: one per TP rank)."""
    return [m.summary() for m in _LIVE]
