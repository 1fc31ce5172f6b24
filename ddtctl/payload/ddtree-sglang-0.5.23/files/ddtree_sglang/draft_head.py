"""The drafter's top-K log-probabilities over the target's (vocab-parallel) head, for the draft tree.

`topk_lse(logits, k)` -> (vals, ids, lse) of one vocab shard: SGLang's tiled scan + select for a small K (its select
walks K times over K tiles of 1024 logits, so its cost grows with K^2), torch's radix top-K plus the same one-pass
tiled log-sum-exp above that. `DraftTopK` runs it on the draft positions of a block and combines the TP shards (K
candidates and one LSE per row are gathered, never the vocabulary). As a draft-graph tail (SGLang's DFLASH draft
sampler slot: `capture_tail_hooks`) it is captured into the drafter's CUDA graph and writes static buffers, so a
replayed draft pass hands the tree build its top-K with no eager head in between.
"""

from __future__ import annotations

import os

import torch

# SGLang's tiled select keeps K x 1024 logits per row in one program and selects K times: fine for K <= 16
TILED_TOPK_MAX = 16


def _tiled_lse(logits: torch.Tensor) -> torch.Tensor:
    """Full-row log-sum-exp in one pass over the logits (SGLang's lilicorr tiled scan), fp32 [rows]."""
    try:
        from sglang.kernels.ops.speculative import lilicorr as lc

        n, vocab = int(logits.shape[0]), int(logits.shape[1])
        tiles = (vocab + lc._TILE - 1) // lc._TILE
        parts = (tiles + lc._TILES_PER_PROGRAM - 1) // lc._TILES_PER_PROGRAM
        tmax = torch.empty((n, tiles), dtype=torch.float32, device=logits.device)
        pm = torch.full((n, parts), lc._NEG, dtype=torch.float32, device=logits.device)
        ps = torch.zeros((n, parts), dtype=torch.float32, device=logits.device)
        lc._tiled_scan[(n, parts)](logits, tmax, pm, ps, vocab, tiles, logits.stride(0), tmax.stride(0),
                                   pm.stride(0), TILE=lc._TILE, TPP=lc._TILES_PER_PROGRAM, num_warps=lc._NUM_WARPS)
        return lc._combine_lse(pm, ps)
    except (ImportError, AttributeError):
        return torch.logsumexp(logits.float(), dim=-1)


def topk_lse(logits: torch.Tensor, k: int, impl: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k values (fp32, descending), their column ids (int64) and the row's log-sum-exp (fp32) of [rows, V]."""
    impl = impl or os.environ.get("DDTREE_TOPK_IMPL", "auto")
    logits = logits.contiguous()
    if not logits.is_cuda:
        vals, ids = torch.topk(logits.float(), k, dim=-1)
        return vals, ids.to(torch.int64), torch.logsumexp(logits.float(), dim=-1)
    if impl == "tiled" or (impl == "auto" and k <= TILED_TOPK_MAX):
        from sglang.kernels.ops.speculative.lilicorr import lilicorr_topk_lse

        vals, ids, lse = lilicorr_topk_lse(logits, k)
        return vals.float(), ids.to(torch.int64), lse.float()
    vals, ids = torch.topk(logits, k, dim=-1, sorted=True)
    return vals.float(), ids.to(torch.int64), _tiled_lse(logits).float()


class DraftTopK:
    """Draft positions 1.. of every block -> lp [rows, K] (logit - full-vocab LSE, descending) and global token ids
    [rows, K], over a vocab-sharded head (`num_org` rows of `weight` from `org_vocab_start`)."""

    def __init__(self, *, weight: torch.Tensor, block_size: int, k: int, num_org: int, org_vocab_start: int,
                 max_bs: int, tp_group=None):
        self.weight, self.block_size, self.k = weight, int(block_size), int(k)
        self.num_org, self.org_vocab_start = int(num_org), int(org_vocab_start)
        self.tp_group = tp_group
        self.tp_size = int(tp_group.world_size) if tp_group is not None else 1
        rows = int(max_bs) * (self.block_size - 1)
        device = weight.device
        self.lp_out = torch.empty((rows, self.k), dtype=torch.float32, device=device)
        self.ids_out = torch.empty((rows, self.k), dtype=torch.int64, device=device)
        if self.tp_size > 1:  # static gather buffers: fixed addresses keep a replayed graph's collectives valid
            self.g_vals = torch.empty((self.tp_size * rows, self.k), dtype=torch.float32, device=device)
            self.g_ids = torch.empty((self.tp_size * rows, self.k), dtype=torch.int64, device=device)
            self.g_lse = torch.empty((self.tp_size * rows,), dtype=torch.float32, device=device)
        self.captured = False

    def draft_rows(self, hidden_states: torch.Tensor) -> torch.Tensor:
        bs = hidden_states.shape[0] // self.block_size
        return hidden_states[: bs * self.block_size].view(bs, self.block_size, -1)[:, 1:, :].reshape(
            -1, hidden_states.shape[-1])

    def compute(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """lp, ids [rows, K] for draft-row hidden states (eager or under capture)."""
        n = rows.shape[0]
        logits = torch.matmul(rows.to(self.weight.dtype), self.weight[: self.num_org].T)
        vals, ids, lse = topk_lse(logits, self.k)
        ids = ids + self.org_vocab_start
        if self.tp_size > 1:
            if self.tp_size * n <= self.g_lse.shape[0]:
                g_vals, g_ids, g_lse = (self.g_vals[: self.tp_size * n], self.g_ids[: self.tp_size * n],
                                        self.g_lse[: self.tp_size * n])
            else:  # an eager batch above the captured sizes
                g_vals, g_ids, g_lse = (vals.new_empty((self.tp_size * n, self.k)),
                                        ids.new_empty((self.tp_size * n, self.k)), lse.new_empty((self.tp_size * n,)))
            self.tp_group.all_gather_into_tensor(g_vals, vals.contiguous())
            self.tp_group.all_gather_into_tensor(g_ids, ids.contiguous())
            self.tp_group.all_gather_into_tensor(g_lse, lse.contiguous())
            all_vals = g_vals.view(self.tp_size, n, self.k).permute(1, 0, 2).reshape(n, self.tp_size * self.k)
            all_ids = g_ids.view(self.tp_size, n, self.k).permute(1, 0, 2).reshape(n, self.tp_size * self.k)
            vals, sel = torch.topk(all_vals, self.k, dim=-1, sorted=True)
            ids = torch.gather(all_ids, 1, sel)
            lse = torch.logsumexp(g_lse.view(self.tp_size, n), dim=0)
        return vals - lse[:, None], ids

    def __call__(self, hidden_states: torch.Tensor, input_ids=None) -> None:
        """The draft-graph tail: fills lp_out / ids_out for the captured batch."""
        lp, ids = self.compute(self.draft_rows(hidden_states))
        n = lp.shape[0]
        self.lp_out[:n].copy_(lp)
        self.ids_out[:n].copy_(ids)
        self.captured = True

    def read(self, bs: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What a replayed draft graph left for `bs` requests: lp, ids [bs, L, K]."""
        n = bs * (self.block_size - 1)
        return (self.lp_out[:n].view(bs, self.block_size - 1, self.k),
                self.ids_out[:n].view(bs, self.block_size - 1, self.k))


def build(lm_head, *, block_size: int, k: int, max_bs: int, tp_group,
          graph: bool = True) -> tuple[DraftTopK | None, str]:
    """A DraftTopK over the target's lm_head, or None and why (SGLang's candidate_topk then serves, eagerly).
    graph: for the draft CUDA graph's tail (DDTREE_DRAFT_TOPK_GRAPH=0 keeps the head eager)."""
    if graph and os.environ.get("DDTREE_DRAFT_TOPK_GRAPH", "1") == "0":
        return None, "DDTREE_DRAFT_TOPK_GRAPH=0"
    weight = getattr(lm_head, "weight", None)
    if weight is None or weight.dim() != 2 or weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return None, "no dense lm_head weight"
    tp = int(tp_group.world_size) if tp_group is not None else 1
    shard = getattr(lm_head, "shard_indices", None)
    if tp == 1:  # as SGLang's candidate_topk: the org vocabulary of the unsharded head
        num_org, start = int(getattr(lm_head, "org_vocab_size", None) or weight.shape[0]), 0
    elif shard is None:
        return None, "tp > 1 without shard_indices"
    elif int(getattr(shard, "num_added_elements", 0)) != 0:
        return None, "added vocab"
    else:
        num_org, start = int(shard.num_org_elements), int(shard.org_vocab_start_index)
    if num_org < k:
        return None, f"top-{k} over a vocabulary shard of {num_org}"
    return DraftTopK(weight=weight, block_size=block_size, k=k, num_org=num_org, org_vocab_start=start,
                     max_bs=max_bs, tp_group=tp_group if tp > 1 else None), \
        "folded into the draft CUDA graph" if graph else "eager"
