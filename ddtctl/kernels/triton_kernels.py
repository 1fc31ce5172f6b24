"""DDTree Triton kernels: fused top-K + log-sum-exp, on-GPU best-first build, compile, follow.

All launches have shapes fixed by (batch, L, V, B) and read their data-dependent loop bounds on
the device, so a whole preparation step can be captured in a CUDA graph: no host
synchronisation, no allocation after `DDTreePlan`.

Top-K (two launches):
  pass 1, grid (rows, splits): one read of the logits; per split an online (max, sum-exp), and the maximum of
         every group of GS consecutive logits (written to a small scratch, ~1/64 of the logits).
  pass 2, grid (rows,): log-sum-exp from the partials; t = K-th largest group maximum (at least K logits are
         >= t, so every top-K logit lies in a group whose maximum is >= t); the logits >= t of those groups
         (usually ~K) are compacted and sorted (bitonic, 64-bit keys value|~id), the first K written as
         lp = x - lse. When more than `cap` logits are >= t (heavy ties), the exact K-th largest is found by
         bisection over the order-preserving integer keys instead, ties split by token id with a second
         bisection.
Build, grid (batch,): the best-first heap with one frontier entry per node (the node's next child rank). The
  pop order key is (score desc, rank tuple asc); the rank-tuple order of two frontier entries equals
  (insertion point in the current tree's preorder asc, depth desc), so each node carries its preorder index
  and subtree size and one 64-bit max-reduction per pop replaces the heap. Identical to `reference.build` bit
  for bit (both read a -0.0 in lp as +0.0, so equal scores tie whatever their zero's sign).
Compile, grid (batch, row blocks): input ids, positions, visibility (bool and bit-packed), SGLang retrive
  arrays, all from the build's preorder intervals (no pointer chasing).
Follow, grid (batch,): greedy / sample-then-walk acceptance from posterior tokens, in registers.

Exactness: token selection compares the logits' exact order keys, so the top-K ids equal the reference's;
lp differ from the reference only by the rounding of the log-sum-exp (fp32 online here, fp64 there;
measured <= 4e-6). Given the same top-K the trees (tokens, depths, parents, fp32 scores), compile arrays
and walks are identical to `reference`. End to end from logits two trees can differ only where prefix
scores are within the lp difference times L; `bench/kernels_gpu.py` counts such trees and checks each is
explained by a score gap <= 1e-4 nats (TREE_TOL).
"""

from __future__ import annotations

import torch

from ddtctl.kernels.reference import check_budget

# the kernels live in triton_device.py (which sets TRITON_INTERPRET on CPU before importing triton); they stay
# importable from here (the compile test and the self-test launch them by these names)
from ddtctl.kernels.triton_device import (
    _build_kernel,
    _compile_kernel,
    _follow_kernel,
    _move_chain_rows_kernel,
    _topk_pass1,
    _topk_pass2,
)

# ------------------------------------------------------------------------------------------------------------
# Host side: one plan per (batch, L, V, B, dtype) holds every buffer, so each step launches kernels only.


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


MAX_SPLITS = 64  # one compiled pass 2 for every split count
_KEY_SHIFT = {torch.bfloat16: 16, torch.float16: 13}


class DDTreePlan:
    """Fixed-shape buffers and launch parameters for one (batch, L, V, B, logits dtype)."""

    def __init__(
        self,
        batch: int,
        depth: int,
        vocab: int,
        budget: int,
        device="cuda",
        *,
        group_size: int = 64,
        groups_per_tile: int = 64,
        groups_per_chunk: int = 64,
        splits: int | None = None,
        build_warps: int | None = None,
        topk_warps: int = 16,
        k: int | None = None,
        cand_cap: int | None = None,
        programs_per_sm: int = 16,
    ):
        self.batch, self.depth, self.vocab, self.budget = batch, depth, vocab, budget
        self.K = check_budget(depth, vocab, budget) if k is None else int(k)
        self.device = torch.device(device)
        dev = self.device
        rows = batch * depth
        self.rows = rows
        self.gs, self.ng, self.q = group_size, groups_per_tile, groups_per_chunk
        self.n_groups = _cdiv(vocab, group_size)
        self.g_pad = _next_pow2(self.n_groups)
        self.n_tiles = _cdiv(vocab, group_size * groups_per_tile)
        if splits is None:
            sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 4
            splits = max(1, min(self.n_tiles, _cdiv(programs_per_sm * sms, rows)))
        splits = min(splits, MAX_SPLITS)
        self.tiles_per_split = _cdiv(self.n_tiles, max(1, min(splits, self.n_tiles)))
        self.splits = _cdiv(self.n_tiles, self.tiles_per_split)
        self.k_pad = _next_pow2(self.K)
        # pass 2 sorts up to `cap` candidates (the logits >= the K-th
        # largest group maximum); more -> bisection
        default_cap = max(256, 4 * self.k_pad if self.k_pad <= 64 else 2 * self.k_pad)
        self.cap = _next_pow2(cand_cap) if cand_cap else default_cap
        self.f = _next_pow2(budget + 1)
        self.build_warps = build_warps or max(1, min(8, self.f // 256))
        self.topk_warps = topk_warps
        self.words = _cdiv(budget + 1, 32)
        self.wt = 2
        self.br = 16
        f32, i32, i64 = torch.float32, torch.int32, torch.int64
        self.gmax = torch.empty(rows, self.n_groups, dtype=f32, device=dev)
        self.pm = torch.empty(rows, self.splits, dtype=f32, device=dev)
        self.pl = torch.empty(rows, self.splits, dtype=f32, device=dev)
        self.scr_g = torch.empty(rows, self.g_pad, dtype=i32, device=dev)
        self.scr_k = torch.empty(rows, self.k_pad, dtype=i64, device=dev)
        self.scr_c = torch.empty(rows, self.cap, dtype=i64, device=dev)
        self.lp = torch.empty(batch, depth, self.K, dtype=f32, device=dev)
        self.ids = torch.empty(batch, depth, self.K, dtype=i32, device=dev)
        self.tokens = torch.empty(batch, budget, dtype=i32, device=dev)
        self.depths = torch.empty(batch, budget, dtype=i32, device=dev)
        self.parents = torch.empty(batch, budget + 1, dtype=i32, device=dev)
        self.scores = torch.empty(batch, budget, dtype=f32, device=dev)
        self.pre = torch.empty(batch, budget + 1, dtype=i32, device=dev)  # preorder index of each node
        self.size = torch.empty(batch, budget + 1, dtype=i32, device=dev)  # subtree size of each node
        n1 = budget + 1
        self.input_ids = torch.empty(batch, n1, dtype=i64, device=dev)
        self.positions = torch.empty(batch, n1, dtype=i64, device=dev)
        self.visibility = torch.empty(batch, n1, n1, dtype=torch.bool, device=dev)
        self.packed = torch.empty(batch, n1, self.words, dtype=i32, device=dev)
        self.retrive_index = torch.empty(batch, n1, dtype=i64, device=dev)
        self.retrive_next_token = torch.empty(batch, n1, dtype=i64, device=dev)
        self.retrive_next_sibling = torch.empty(batch, n1, dtype=i64, device=dev)
        self.accepted = torch.empty(batch, depth + 1, dtype=i32, device=dev)
        self.accept_length = torch.empty(batch, dtype=i32, device=dev)
        self.bonus = torch.empty(batch, dtype=i64, device=dev)

    # --- launches -------------------------------------------------------------------------------------------
    def topk(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """lp [batch, L, K] fp32 (sorted desc) and ids [batch, L, K] int32 from logits [batch, L, V]
        (fp32 / bf16 / fp16)."""
        if tuple(logits.shape) != (self.batch, self.depth, self.vocab):
            raise ValueError(f"logits shape {tuple(logits.shape)} != {(self.batch, self.depth, self.vocab)}")
        if (
            logits.stride(-1) != 1
            or logits.stride(1) != self.vocab
            or logits.stride(0) != self.depth * self.vocab
        ):
            raise ValueError("logits must be contiguous")
        self.topk_pass1(logits)
        self.topk_pass2(logits)
        return self.lp, self.ids

    def topk_pass1(self, logits: torch.Tensor) -> None:
        _topk_pass1[(self.rows, self.splits)](
            logits,
            self.gmax,
            self.pm,
            self.pl,
            self.vocab,
            self.n_tiles,
            self.tiles_per_split,
            self.splits,
            self.vocab,
            self.n_groups,
            GS=self.gs,
            NG=self.ng,
            num_warps=4,
        )

    def topk_pass2(self, logits: torch.Tensor) -> None:
        _topk_pass2[(self.rows,)](
            logits,
            self.gmax,
            self.pm,
            self.pl,
            self.scr_g,
            self.scr_k,
            self.scr_c,
            self.lp,
            self.ids,
            self.vocab,
            self.n_groups,
            self.splits,
            self.K,
            self.vocab,
            self.n_groups,
            GS=self.gs,
            G_PAD=self.g_pad,
            S_PAD=MAX_SPLITS,
            K_PAD=self.k_pad,
            Q=self.q,
            SHIFT=_KEY_SHIFT.get(logits.dtype, 0),
            CAP=self.cap,
            num_warps=self.topk_warps,
        )

    def build(self, lp: torch.Tensor | None = None, ids: torch.Tensor | None = None):
        """Tree from top-K (default: this plan's last `topk`). Returns (tokens, depths, parents, scores)."""
        lp = self.lp if lp is None else lp
        ids = self.ids if ids is None else ids
        if lp.shape[-1] != self.K or ids.shape[-1] != self.K:
            raise ValueError(f"top-K width {lp.shape[-1]} != K={self.K}")
        lp = lp.contiguous()
        ids = ids.to(torch.int32).contiguous()
        _build_kernel[(self.batch,)](
            lp,
            ids,
            self.tokens,
            self.depths,
            self.parents,
            self.scores,
            self.pre,
            self.size,
            self.depth,
            self.K,
            self.budget,
            F=self.f,
            num_warps=self.build_warps,
        )
        return self.tokens, self.depths, self.parents, self.scores

    def compile(self, root_tokens: torch.Tensor, starts: torch.Tensor):
        """Verify inputs: input_ids, positions, visibility, packed mask,
        retrive arrays (all [batch, B+1, ...])."""
        n1 = self.budget + 1
        _compile_kernel[(self.batch, _cdiv(n1, self.br))](
            self.parents,
            self.pre,
            self.size,
            self.tokens,
            self.depths,
            root_tokens,
            starts,
            self.input_ids,
            self.positions,
            self.visibility.view(torch.int8),
            self.packed,
            self.retrive_index,
            self.retrive_next_token,
            self.retrive_next_sibling,
            self.budget,
            self.words,
            BR=self.br,
            WT=self.wt,
            num_warps=4,
        )
        return self.input_ids, self.positions, self.visibility, self.packed

    def follow(self, posterior: torch.Tensor):
        """Accepted node indices [batch, L+1] (-1 padded), accept length [batch], bonus token [batch]."""
        _follow_kernel[(self.batch,)](
            self.input_ids,
            self.parents,
            posterior,
            self.accepted,
            self.accept_length,
            self.bonus,
            self.budget,
            self.depth,
            F=self.f,
            num_warps=1 if self.f <= 256 else 4,
        )
        return self.accepted, self.accept_length, self.bonus

    def prepare(self, logits: torch.Tensor, root_tokens: torch.Tensor, starts: torch.Tensor):
        self.topk(logits)
        self.build()
        return self.compile(root_tokens, starts)


class ChainRowMover:
    """Commit accepted tree nodes' KV rows into chain order across all layers in one launch per row width,
    instead of a gather and a scatter per layer (2 x layers launches). Buffers: equal-shape contiguous [slots,
    ...] tensors (one per layer, K and V alike); rows are moved as 32-bit words."""

    def __init__(self, buffers: list[torch.Tensor]):
        if not buffers:
            raise ValueError("no buffers")
        self.groups: list[tuple[torch.Tensor, int]] = []
        by_shape: dict[tuple, list[torch.Tensor]] = {}
        for b in buffers:
            if not b.is_contiguous():
                raise ValueError("KV buffers must be contiguous")
            row_bytes = b[0].numel() * b.element_size()
            if row_bytes % 4:
                raise ValueError(f"a KV row of {row_bytes} bytes is not a whole number of 32-bit words")
            by_shape.setdefault((tuple(b.shape), b.element_size()), []).append(b)
        for group in by_shape.values():
            row_words = group[0][0].numel() * group[0].element_size() // 4
            ptrs = torch.tensor([b.data_ptr() for b in group], dtype=torch.int64, device=group[0].device)
            self.groups.append((ptrs, row_words))
        self._keep = buffers  # the pointers are only valid while the buffers live

    def move(self, tgt: torch.Tensor, src: torch.Tensor) -> None:
        """tgt / src: [batch, L] slot ids (int), src[b, j] >= tgt's chain order (see the kernel)."""
        bs, length = tgt.shape
        if bs == 0 or length == 0:
            return
        tgt = tgt.to(torch.int64).contiguous()
        src = src.to(torch.int64).contiguous()
        for ptrs, row_words in self.groups:
            block = min(1024, _next_pow2(row_words))
            _move_chain_rows_kernel[(ptrs.numel(), bs, _cdiv(row_words, block))](
                ptrs, tgt, src, length, ROW_WORDS=row_words, BLOCK=block, num_warps=4
            )
