"""Exact DDTree reference (numpy + heapq): top-K log-probs, best-first build, compile, follow.

This is the specification the Triton kernels are checked against, bit for bit given the same top-K.

Conventions (shared with the kernels):
- Top-K per depth: ``lp = fl32(x - lse)`` with ``x`` the logits in fp32 and ``lse`` the log-sum-exp over the
  whole vocabulary; tokens are ranked by logit (equivalently by log-prob), ties to the lower token id.
  ``-0.0`` counts as ``+0.0``. Logits must be finite or ``-inf``, with at least one finite value per row.
- ``build`` takes the top-K log-probs as given but likewise reads ``-0.0`` as ``+0.0`` (a caller's table may
  hold ``-0.0``; the scores are then never ``-0.0``, so a ``-0.0`` and a ``+0.0`` score tie and break on the
  rank tuple).
- Score of a prefix = fp32 sum of its log-probs in depth order:
  ``score(child) = fl32(score(parent) + lp[d-1, r])``. (Paper: sibling score ``s - lp[d-1,r] + lp[d-1,r+1]``;
  the same number in exact arithmetic, and the parent-plus-one-term form is what both implementations compute,
  without cancellation.)
- Heap entries are ordered by (score descending, rank tuple ascending): Python tuple order, so a prefix
  precedes its extensions and siblings are taken in rank order. Node 0 is the root; nodes 1..B are numbered in
  pop order, so a parent's index is always smaller than its child's and children of a node appear in rank
  order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

MAX_DEPTH = 30  # the GPU build packs depths into 5 bits
MAX_BUDGET = 2046  # ... and node indices / insertion points into 11 bits


def _canonical_f32(x) -> np.ndarray:
    """float32 copy of ``x`` with -0.0 replaced by +0.0 (they compare
    equal, so they must rank and score equal)."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    return np.where(x == 0.0, np.float32(0.0), x).astype(np.float32, copy=False)


def logsumexp_f32(x: np.ndarray) -> np.ndarray:
    """Log-sum-exp over the last axis, computed in float64 and rounded to float32."""
    x64 = x.astype(np.float64)
    m = np.max(x64, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    s = np.log(np.sum(np.exp(x64 - m), axis=-1)) + m[..., 0]
    return s.astype(np.float32)


def topk_logprobs(logits, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k log-probs per row of ``logits[..., V]``: returns (lp float32 [..., k], ids int64 [..., k]).

    Sorted by logit descending, ties to the lower token id (stable sort of the negated logits)."""
    x = _canonical_f32(logits)
    v = x.shape[-1]
    if not 1 <= k <= v:
        raise ValueError(f"k={k} must be in [1, V={v}]")
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    top = np.take_along_axis(x, order, axis=-1)
    lse = logsumexp_f32(x)
    lp = (top - lse[..., None]).astype(np.float32)
    return lp, order.astype(np.int64)


def num_prefixes(depth: int, k: int) -> int:
    return sum(k**d for d in range(1, depth + 1))


def check_budget(depth: int, vocab: int, budget: int) -> int:
    """Validate (L, V, B) and return K = min(B, V)."""
    if depth < 1 or depth > MAX_DEPTH:
        raise ValueError(f"draft depth L={depth} must be in [1, {MAX_DEPTH}]")
    if budget < 1 or budget > MAX_BUDGET:
        raise ValueError(f"budget B={budget} must be in [1, {MAX_BUDGET}]")
    k = min(budget, vocab)
    if num_prefixes(depth, k) < budget:
        raise ValueError(
            f"budget B={budget} exceeds the {num_prefixes(depth, k)} prefixes of depth <= {depth}"
        )
    return k


@dataclass
class Tree:
    """One request's draft tree. Node 0 is the root; node i (1..B) has
    token tokens[i-1], depth depths[i-1]."""

    tokens: np.ndarray  # int64 [B]
    depths: np.ndarray  # int32 [B], 1..L
    parents: np.ndarray  # int32 [B+1], parents[0] = -1
    ranks: np.ndarray  # int32 [B], rank of the node's token among its depth's top-K
    scores: np.ndarray  # float32 [B], prefix log-prob under the factorized drafter
    visibility: np.ndarray = field(repr=False)  # bool [B+1, B+1], row i = ancestors of i and i itself

    @property
    def budget(self) -> int:
        return int(self.tokens.shape[0])

    def expected_accept_length(self) -> float:
        """Surrogate expected number of accepted draft tokens: sum over nodes of P(prefix) = exp(score)."""
        return float(np.sum(np.exp(self.scores.astype(np.float64))))

    def rank_tuple(self, node: int) -> tuple[int, ...]:
        out: list[int] = []
        while node > 0:
            out.append(int(self.ranks[node - 1]))
            node = int(self.parents[node])
        return tuple(reversed(out))


def visibility_from_parents(parents: np.ndarray) -> np.ndarray:
    n = parents.shape[0]
    vis = np.zeros((n, n), dtype=bool)
    for i in range(n):
        p = int(parents[i])
        if p >= 0:
            if p >= i:
                raise ValueError(f"parent {p} of node {i} does not precede it")
            vis[i] = vis[p]
        vis[i, i] = True
    return vis


def build(lp: np.ndarray, ids: np.ndarray, budget: int) -> Tree:
    """Best-first heap build over top-K log-probs ``lp[L, K]`` (rows sorted descending) and ``ids[L, K]``."""
    # -0.0 -> +0.0, as the build kernel loads lp: with no -0.0 in, no sum
    # is -0.0, so every score is bit-identical
    lp = _canonical_f32(lp)
    ids = np.asarray(ids)
    depth_l, k = lp.shape
    if depth_l < 1 or depth_l > MAX_DEPTH or budget < 1 or budget > MAX_BUDGET:
        raise ValueError(f"bad sizes L={depth_l}, B={budget}")
    if num_prefixes(depth_l, k) < budget:
        raise ValueError(f"budget B={budget} exceeds the {num_prefixes(depth_l, k)} prefixes")
    tokens = np.zeros(budget, dtype=np.int64)
    depths = np.zeros(budget, dtype=np.int32)
    ranks = np.zeros(budget, dtype=np.int32)
    scores = np.zeros(budget, dtype=np.float32)
    parents = np.full(budget + 1, -1, dtype=np.int32)
    node_score = [np.float32(0.0)]
    # heap entry: (-score, rank tuple, parent node, depth, rank)
    heap: list[tuple[float, tuple[int, ...], int, int, int]] = [(-float(lp[0, 0]), (0,), 0, 1, 0)]
    n = 0
    while n < budget:
        neg, rt, parent, d, r = heapq.heappop(heap)
        n += 1
        s = np.float32(-neg)
        tokens[n - 1] = ids[d - 1, r]
        depths[n - 1] = d
        ranks[n - 1] = r
        scores[n - 1] = s
        parents[n] = parent
        node_score.append(s)
        if r + 1 < k:  # next sibling: same parent, rank r+1
            s_sib = np.float32(node_score[parent] + lp[d - 1, r + 1])
            heapq.heappush(heap, (-float(s_sib), rt[:-1] + (r + 1,), parent, d, r + 1))
        if d < depth_l:  # first child
            s_child = np.float32(s + lp[d, 0])
            heapq.heappush(heap, (-float(s_child), rt + (0,), n, d + 1, 0))
    return Tree(tokens, depths, parents, ranks, scores, visibility_from_parents(parents))


def build_from_logits(logits, budget: int) -> Tree:
    x = np.asarray(logits)
    k = check_budget(x.shape[0], x.shape[-1], budget)
    lp, ids = topk_logprobs(x, k)
    return build(lp, ids, budget)


@dataclass
class Compiled:
    input_ids: np.ndarray  # int64 [B+1]: root token, then node tokens
    positions: np.ndarray  # int64 [B+1]: start + depth
    mask: np.ndarray  # bool [B+1, P+B+1]: whole prefix, then ancestor-only inside the tree
    packed: np.ndarray  # int32 [B+1, ceil((B+1)/32)]: tree part, bit j%32 of word j//32 = visibility[i, j]
    retrive_index: np.ndarray  # int64 [B+1]: local index (SGLang adds bid*(B+1) for the batch)
    retrive_next_token: np.ndarray  # int64 [B+1]: first child (lowest index), -1 if none
    retrive_next_sibling: np.ndarray  # int64 [B+1]: next sibling (next higher index), -1 if none


def pack_bits(vis: np.ndarray) -> np.ndarray:
    """Bool [..., N] -> int32 [..., ceil(N/32)], little-endian bit order
    (so a byte view is column-ordered too)."""
    n = vis.shape[-1]
    words = (n + 31) // 32
    padded = np.zeros(vis.shape[:-1] + (words * 32,), dtype=np.uint64)
    padded[..., :n] = vis
    shifts = np.arange(32, dtype=np.uint64)
    w = (padded.reshape(vis.shape[:-1] + (words, 32)) << shifts).sum(axis=-1)
    return w.astype(np.uint32).view(np.int32)


def unpack_bits(packed: np.ndarray, n: int) -> np.ndarray:
    u = packed.astype(np.int64) & 0xFFFFFFFF
    bits = (u[..., :, None] >> np.arange(32)) & 1
    return bits.reshape(packed.shape[:-1] + (-1,))[..., :n].astype(bool)


def compile_tree(tree: Tree, root_token: int, start: int, prefix_len: int) -> Compiled:
    """Verify inputs for one request: the root (previous bonus token) sits at position ``start``."""
    b = tree.budget
    input_ids = np.concatenate([[root_token], tree.tokens]).astype(np.int64)
    depth_all = np.concatenate([[0], tree.depths]).astype(np.int64)
    positions = start + depth_all
    mask = np.zeros((b + 1, prefix_len + b + 1), dtype=bool)
    mask[:, :prefix_len] = True
    mask[:, prefix_len:] = tree.visibility
    next_token = np.full(b + 1, -1, dtype=np.int64)
    next_sibling = np.full(b + 1, -1, dtype=np.int64)
    last_child: dict[int, int] = {}
    for i in range(1, b + 1):
        p = int(tree.parents[i])
        if next_token[p] == -1:
            next_token[p] = i
        else:
            next_sibling[last_child[p]] = i
        last_child[p] = i
    return Compiled(
        input_ids=input_ids,
        positions=positions,
        mask=mask,
        packed=pack_bits(tree.visibility),
        retrive_index=np.arange(b + 1, dtype=np.int64),
        retrive_next_token=next_token,
        retrive_next_sibling=next_sibling,
    )


def gumbel_noise(seed: int, position: int, vocab: int) -> np.ndarray:
    """Position-keyed Gumbel noise: the same position always gets the same noise (so sample-then-walk with
    this noise reproduces autoregressive sampling with it, token for token)."""
    rng = np.random.default_rng([seed, position])
    u = rng.random(vocab)
    return -np.log(-np.log(np.clip(u, 1e-300, 1.0)))


def posterior_tokens(target_logits, temperature: float = 0.0, noise=None) -> np.ndarray:
    """Posterior token at each node: argmax (T=0; ties to the lower id)
    or a Gumbel-max sample of softmax(x/T)."""
    x = np.asarray(target_logits, dtype=np.float64)
    if temperature <= 0.0:
        return np.argmax(x, axis=-1).astype(np.int64)
    if noise is None:
        raise ValueError("temperature > 0 needs Gumbel noise")
    return np.argmax(x / temperature + np.asarray(noise, dtype=np.float64), axis=-1).astype(np.int64)


@dataclass
class Followed:
    accepted: list[int]  # node indices on the accepted path, starting with the root 0
    accept_length: int  # accepted draft tokens (len(accepted) - 1)
    bonus: int  # posterior token at the last accepted node: the next root

    def padded(self, depth: int) -> np.ndarray:
        out = np.full(depth + 1, -1, dtype=np.int64)
        out[: len(self.accepted)] = self.accepted
        return out


def follow(input_ids: np.ndarray, parents: np.ndarray, posterior: np.ndarray) -> Followed:
    """Walk from the root: descend to the (lowest-index) child whose token equals the current posterior."""
    children: dict[int, list[int]] = {}
    for i in range(1, len(parents)):
        children.setdefault(int(parents[i]), []).append(i)
    cur = 0
    path = [0]
    while True:
        target = int(posterior[cur])
        nxt = next((c for c in children.get(cur, []) if int(input_ids[c]) == target), None)
        if nxt is None:
            break
        path.append(nxt)
        cur = nxt
    return Followed(path, len(path) - 1, int(posterior[cur]))


# ------------------------------------------------------------------------------------------------------------
# Batched helpers (used to compare with the GPU kernels' fixed-shape outputs)


def build_batch(lp: np.ndarray, ids: np.ndarray, budget: int) -> list[Tree]:
    return [build(lp[i], ids[i], budget) for i in range(lp.shape[0])]


def trees_equal(a: Tree, tokens, depths, parents) -> bool:
    return (
        np.array_equal(a.tokens, np.asarray(tokens, dtype=np.int64))
        and np.array_equal(a.depths, np.asarray(depths, dtype=np.int32))
        and np.array_equal(a.parents, np.asarray(parents, dtype=np.int32))
    )
