"""The verify width per batch size (--speculative-ddtree-budget-schedule), in torch only (CPU-testable).

At batch 1 a verify pass of B + 1 tokens is memory-bound and the widest tree wins; at batch 8 and above the verify
rows (batch x (B + 1)) make the target's GEMMs compute-bound and the chain wins (notes/step-cost-h200.md). A
schedule such as "2:127,4:64,8:16,0" gives every batch size its budget: batches of at most 2 requests verify a
127-node tree, at most 4 a 64-node one, at most 8 a 16-node one, larger batches the chain.

The chain (budget 0) is DFLASH's verify: the drafter's top-1 token at every depth, block_size tokens (root + depth
nodes) with a causal mask, built by the same tree builder from the top-1 column alone (a top-1 tree of `depth`
nodes is the chain), so the worker's accept and commit stay one code path, exact by the same proof.

Every width's tree is built from a prefix of the draft top-K the worker computed once for the widest budget (sorted
descending: its first k columns are the top-k). The schedule's syntax and rules are rules_core's
(parse_budget_schedule, DDT117), the ones ddtctl validates a profile with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddtree_sglang import tree_prep


def _rules():
    try:
        from ddtree_sglang import rules_core  # shipped in the payload (ddtctl/rules/ddtree/core.py, byte for byte)
    except ImportError:  # running from the ddtctl checkout (tests)
        from ddtctl.rules.ddtree import core as rules_core
    return rules_core


@dataclass(frozen=True)
class Width:
    """One verify configuration: `budget` tree nodes (root excluded) built from the top `k` draft candidates."""

    budget: int
    chain: bool
    preparer: tree_prep.TreePreparer

    @property
    def k(self) -> int:
        return self.preparer.k

    @property
    def width(self) -> int:
        return self.budget + 1

    @property
    def label(self) -> str:
        return "chain" if self.chain else f"B={self.budget}"


class WidthSchedule:
    """The schedule's widths, their tree preparers and the choice per batch size."""

    def __init__(self, text: str | None, *, depth: int, vocab: int, budget: int, topk_cap: int | None, mode: str,
                 device):
        rules = _rules()
        entries = rules.parse_budget_schedule(text) if text is not None else ((None, int(budget)),)
        self.text = text
        self.depth = int(depth)
        self._widths: dict[int, Width] = {}
        self.entries: list[tuple[int | None, Width]] = []
        for bound, b in entries:
            chain = b == rules.CHAIN
            nodes = self.depth if chain else int(b)
            if nodes > int(budget) and not chain:
                raise ValueError(f"budget schedule {text!r}: budget {b} is wider than the server's budget {budget}")
            key = 0 if chain else nodes
            if key not in self._widths:
                prep = tree_prep.TreePreparer(depth=self.depth, vocab=vocab, budget=nodes,
                                              topk_cap=1 if chain else topk_cap, mode=mode, device=device)
                self._widths[key] = Width(nodes, chain, prep)
            self.entries.append((bound, self._widths[key]))

    @property
    def scheduled(self) -> bool:
        """More than one width (a real schedule, not the fixed budget)."""
        return len(self._widths) > 1

    def widths(self) -> list[Width]:
        return sorted(self._widths.values(), key=lambda w: -w.width)

    def pick(self, batch_size: int) -> Width:
        for bound, width in self.entries:
            if bound is None or batch_size <= bound:
                return width
        return self.entries[-1][1]

    def prepare(self, width: Width, lp: torch.Tensor, ids: torch.Tensor, root_tokens: torch.Tensor,
                prefix_lens: torch.Tensor) -> tree_prep.VerifyInputs:
        """The verify inputs of `width`'s tree from the widest top-K (lp / ids [bs, depth, K], sorted descending)."""
        k = width.k
        if lp.shape[-1] != k:
            lp, ids = lp[..., :k].contiguous(), ids[..., :k].contiguous()
        return width.preparer.prepare_from_topk(lp, ids, root_tokens, prefix_lens)

    def capture_buckets(self, capture_bs: list[int]) -> dict[int, list[int]]:
        """Verify width -> the graph batch sizes its steps replay: a batch of r requests verifies at pick(r)'s
        width and replays the smallest captured size >= r (SGLang pads the batch), so each width captures the
        padded sizes of the batch sizes it serves."""
        sizes = sorted(set(int(b) for b in capture_bs))
        out: dict[int, set[int]] = {}
        for r in range(1, (sizes[-1] if sizes else 0) + 1):
            padded = next(b for b in sizes if b >= r)
            out.setdefault(self.pick(r).width, set()).add(padded)
        return {w: sorted(bs) for w, bs in out.items()}

    def describe(self) -> str:
        parts = []
        for bound, width in self.entries:
            parts.append(f"bs<={bound}: {width.label}" if bound is not None else f"above: {width.label}")
        return ", ".join(parts)
