"""DDTree preparation for SGLang's tree verify, in torch only (no sglang import: CPU-testable on its own).

Per decode round and request (width n = B + 1; node 0 is the root = the previous bonus token):
  draft logits [bs, L, V] -> tree (tokens [bs, B], depths [bs, B], parents [bs, n])
  -> verify inputs: input_ids [bs, n], positions [bs, n] (prefix + depth), visibility [bs, n, n] (ancestor-only),
     retrive_index [bs, n] (global: b * n + i), retrive_next_token / retrive_next_sibling [bs, n] (first child /
     next sibling, -1 if none), and SGLang's flat custom mask (per request row-major [n, prefix + n]).
  target predictions [bs, n] -> accepted path [bs, L + 1] (-1 padded), accept length [bs], bonus [bs]
  -> commit: out_tokens [bs, block] (accepted tokens then the bonus), commit_lens [bs], chain_src [bs, block] (the
     node whose KV / hidden state goes to chain position j; j itself beyond the commit).

Two tree builders, same trees: "reference" (the paper's heap, ddtree_sglang.kernels.reference, on the host) and
"triton" (ddtree_sglang.kernels.triton_kernels.DDTreePlan, on the device, fixed shapes, no host sync).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _kernels():
    try:
        from ddtree_sglang.kernels import reference  # shipped in the payload
    except ImportError:  # running from the ddtctl checkout (tests)
        from ddtctl.kernels import reference
    return reference


def _triton_kernels():
    try:
        from ddtree_sglang.kernels import triton_kernels
    except ImportError:
        from ddtctl.kernels import triton_kernels
    return triton_kernels


def effective_k(depth: int, vocab: int, budget: int, topk_cap: int | None) -> int:
    """K = min(B, topk cap, V); the budget must be fillable (the launch rule DDT107 checks it up front)."""
    ref = _kernels()
    k = ref.check_budget(depth, vocab, budget)
    if topk_cap is not None:
        k = min(k, int(topk_cap))
    if ref.num_prefixes(depth, k) < budget:
        raise ValueError(f"budget {budget} cannot be filled with depth {depth} and top-K {k}")
    return k


def decode_reserve_tokens(block: int, verify_width: int) -> int:
    """The draft-token count DFLASH's prepare_for_decode should see: it reserves twice that past the committed
    length. Under the overlap scheduler the committed length lags the step in flight, which may still commit up to
    `block` tokens; the next round then writes its window (the draft block and the verify window, max(block,
    verify_width) slots) past those. So 2 * tokens >= block + max(block, verify_width)."""
    window = max(int(block), int(verify_width))
    return max(int(block), (int(block) + window + 1) // 2)


def topk_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """lp fp32 [.., k] = logit - logsumexp (full vocabulary), ids int64, sorted descending (torch.topk order)."""
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    top, ids = torch.topk(x, k, dim=-1, largest=True, sorted=True)
    return top - lse, ids


@dataclass
class Trees:
    tokens: torch.Tensor  # int64 [bs, B]
    depths: torch.Tensor  # int64 [bs, B]
    parents: torch.Tensor  # int64 [bs, B+1], parents[:, 0] = -1


def build_reference(lp: torch.Tensor, ids: torch.Tensor, budget: int) -> Trees:
    """The paper's heap per request on the host (one D2H of the top-K, one H2D of the trees)."""
    ref = _kernels()
    lp_h = lp.detach().float().cpu().numpy()
    ids_h = ids.detach().cpu().numpy()
    bs = lp_h.shape[0]
    tokens = torch.empty(bs, budget, dtype=torch.int64)
    depths = torch.empty(bs, budget, dtype=torch.int64)
    parents = torch.empty(bs, budget + 1, dtype=torch.int64)
    for b in range(bs):
        tree = ref.build(lp_h[b], ids_h[b], budget)
        tokens[b] = torch.from_numpy(tree.tokens.astype("int64"))
        depths[b] = torch.from_numpy(tree.depths.astype("int64"))
        parents[b] = torch.from_numpy(tree.parents.astype("int64"))
    dev = lp.device
    return Trees(tokens.to(dev), depths.to(dev), parents.to(dev))


@dataclass
class VerifyInputs:
    input_ids: torch.Tensor  # int64 [bs, n]
    positions: torch.Tensor  # int64 [bs, n]
    visibility: torch.Tensor  # bool [bs, n, n]
    retrive_index: torch.Tensor  # int64 [bs, n], global
    retrive_next_token: torch.Tensor  # int64 [bs, n]
    retrive_next_sibling: torch.Tensor  # int64 [bs, n]
    parents: torch.Tensor  # int64 [bs, n]

    @property
    def width(self) -> int:
        return int(self.input_ids.shape[1])


def visibility_from_parents(parents: torch.Tensor, max_depth: int) -> torch.Tensor:
    """[bs, n] parents -> bool [bs, n, n], row i = ancestors of i and i itself (walk up at most max_depth + 1)."""
    bs, n = parents.shape
    vis = torch.zeros(bs, n, n, dtype=torch.bool, device=parents.device)
    cur = torch.arange(n, device=parents.device).expand(bs, n).clone()
    rows = torch.arange(n, device=parents.device).expand(bs, n)
    bidx = torch.arange(bs, device=parents.device)[:, None].expand(bs, n)
    for _ in range(max_depth + 1):
        ok = cur >= 0
        vis[bidx[ok], rows[ok], cur[ok]] = True
        cur = torch.where(ok, torch.gather(parents, 1, cur.clamp(min=0)), cur)
        cur = torch.where(ok, cur, torch.full_like(cur, -1))
    return vis


def retrive_arrays(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-child / right-sibling arrays of SGLang's tree verify from parents [bs, n] (parents precede children)."""
    bs, n = parents.shape
    dev = parents.device
    idx = torch.arange(n, device=dev)
    big = n
    # first child of p = the smallest node index whose parent is p
    child_of = torch.where(idx[None, :] >= 1, parents, torch.full_like(parents, n))  # root -> dummy bucket n
    first = torch.full((bs, n + 1), big, dtype=torch.int64, device=dev)
    first.scatter_reduce_(1, child_of, idx.expand(bs, n).clone(), reduce="amin", include_self=True)
    next_token = first[:, :n]
    next_token = torch.where(next_token == big, torch.full_like(next_token, -1), next_token)
    # next sibling of c = the smallest c' > c with the same parent: sort nodes by (parent, index)
    key = child_of * (n + 1) + idx[None, :]
    order = torch.argsort(key, dim=1)
    sorted_par = torch.gather(child_of, 1, order)
    nxt_in_order = torch.cat([order[:, 1:], torch.full((bs, 1), -1, dtype=order.dtype, device=dev)], dim=1)
    same = torch.cat([sorted_par[:, 1:] == sorted_par[:, :-1], torch.zeros(bs, 1, dtype=torch.bool, device=dev)], 1)
    sib_sorted = torch.where(same, nxt_in_order, torch.full_like(nxt_in_order, -1))
    next_sibling = torch.full((bs, n), -1, dtype=torch.int64, device=dev)
    next_sibling.scatter_(1, order, sib_sorted)
    next_sibling[:, 0] = -1
    rindex = torch.arange(bs, device=dev)[:, None] * n + idx[None, :]
    return rindex, next_token, next_sibling


def compile_verify(trees: Trees, root_tokens: torch.Tensor, prefix_lens: torch.Tensor, max_depth: int) -> VerifyInputs:
    bs, b = trees.tokens.shape
    dev = trees.tokens.device
    input_ids = torch.cat([root_tokens.view(bs, 1).to(torch.int64), trees.tokens.to(torch.int64)], dim=1)
    depth_all = torch.cat([torch.zeros(bs, 1, dtype=torch.int64, device=dev), trees.depths.to(torch.int64)], dim=1)
    positions = prefix_lens.view(bs, 1).to(torch.int64) + depth_all
    parents = trees.parents.to(torch.int64)
    vis = visibility_from_parents(parents, max_depth)
    rindex, rnext, rsib = retrive_arrays(parents)
    return VerifyInputs(input_ids, positions, vis, rindex, rnext, rsib, parents)


def custom_mask(visibility: torch.Tensor, prefix_lens: torch.Tensor, total: int | None = None) -> torch.Tensor:
    """SGLang's flat TARGET_VERIFY custom mask: per request row-major [n, prefix + n], prefix columns all True,
    tree columns = visibility. ``total`` (= sum n * (prefix + n)) avoids a host sync when the caller knows it."""
    bs, n, _ = visibility.shape
    dev = visibility.device
    seg = n * (prefix_lens.to(torch.int64) + n)
    if total is None:
        total = int(seg.sum())
    starts = torch.cumsum(seg, 0) - seg
    req = torch.repeat_interleave(torch.arange(bs, device=dev), seg, output_size=total)
    local = torch.arange(total, device=dev) - starts[req]
    width = prefix_lens.to(torch.int64)[req] + n
    r = local // width
    c = local % width
    p = prefix_lens.to(torch.int64)[req]
    in_tree = c >= p
    tree_val = visibility[req, r, (c - p).clamp(min=0)]
    return torch.where(in_tree, tree_val, torch.ones_like(tree_val))


def tree_mask_offsets(prefix_lens: torch.Tensor, n: int) -> torch.Tensor:
    """Flat positions [bs, n, n] of the tree cells in SGLang's TARGET_VERIFY mask layout (per request row-major
    [n, prefix + n], requests back to back): request b's cell (r, c) sits at start_b + r * (p_b + n) + p_b + c."""
    p = prefix_lens.to(torch.int64).view(-1)
    seg = n * (p + n)
    starts = torch.cumsum(seg, 0) - seg
    ar = torch.arange(n, device=p.device, dtype=torch.int64)
    return (starts + p)[:, None, None] + ar[None, :, None] * (p + n)[:, None, None] + ar[None, None, :]


def tree_mask(visibility: torch.Tensor, prefix_lens: torch.Tensor, total: int) -> torch.Tensor:
    """The TARGET_VERIFY custom mask with only its tree cells written: O(bs * n^2) work per step whatever the prefix
    length. SGLang's triton extend/verify kernel never reads the prefix columns of a custom mask
    (extend_attention_fwd's skip_prefix_custom_mask defaults to True: every prefix token is visible), so they are
    left unwritten. ``total`` is a host-side size >= sum n * (prefix + n) (an upper bound is fine: the kernel
    addresses the mask through mask_indptr, computed on the device from the real prefix lengths), so building the
    mask needs no device-to-host sync."""
    bs, n, _ = visibility.shape
    out = torch.empty((int(total),), dtype=torch.uint8, device=visibility.device)
    idx = tree_mask_offsets(prefix_lens, n).reshape(-1)
    out.index_copy_(0, idx, visibility.reshape(-1).to(torch.uint8))
    return out


def mask_total_bound(n: int, host_lens: torch.Tensor | None) -> int | None:
    """sum n * (len + n) over host lengths (the exact prefix lengths, or the allocated lengths, an upper bound)."""
    if host_lens is None:
        return None
    return int((n * (host_lens.to(torch.int64) + n)).sum())


@dataclass
class Accepted:
    accepted: torch.Tensor  # int64 [bs, L+1], node indices on the path (root first), -1 padded
    accept_len: torch.Tensor  # int64 [bs], accepted draft tokens
    bonus: torch.Tensor  # int64 [bs]


def follow_greedy(input_ids: torch.Tensor, parents: torch.Tensor, predict: torch.Tensor, max_depth: int) -> Accepted:
    """From the root, descend to the lowest-index child whose token equals the current node's prediction."""
    bs, n = input_ids.shape
    dev = input_ids.device
    idx = torch.arange(n, device=dev)[None, :]
    cur = torch.zeros(bs, dtype=torch.int64, device=dev)
    alive = torch.ones(bs, dtype=torch.bool, device=dev)
    acc = torch.full((bs, max_depth + 1), -1, dtype=torch.int64, device=dev)
    acc[:, 0] = 0
    alen = torch.zeros(bs, dtype=torch.int64, device=dev)
    for s in range(1, max_depth + 1):
        tgt = torch.gather(predict, 1, cur[:, None])
        m = (parents == cur[:, None]) & (input_ids == tgt) & (idx >= 1)
        nxt = torch.where(m, idx.expand(bs, n), torch.full((bs, n), n, device=dev, dtype=torch.int64)).min(1).values
        found = (nxt < n) & alive
        acc[:, s] = torch.where(found, nxt, torch.full_like(nxt, -1))
        cur = torch.where(found, nxt, cur)
        alen += found.to(torch.int64)
        alive = alive & found
    bonus = torch.gather(predict, 1, cur[:, None])[:, 0]
    return Accepted(acc, alen, bonus)


def accepted_from_sglang(accept_index: torch.Tensor, accept_token_num: torch.Tensor, n: int) -> torch.Tensor:
    """SGLang's tree verify writes global node indices (b * n + i) into accept_index [bs, L+1] (-1 padded) and the
    number of accepted drafts into accept_token_num: return local node indices, -1 padded."""
    bs = accept_index.shape[0]
    base = torch.arange(bs, device=accept_index.device)[:, None] * n
    return torch.where(accept_index >= 0, accept_index.to(torch.int64) - base, torch.full_like(accept_index, -1,
                                                                                             dtype=torch.int64))


def flat_accept_index(accepted: torch.Tensor, n: int) -> torch.Tensor:
    """Local accepted node indices [bs, L+1] (-1 padded) -> SGLang's flat accept index (b * n + node, -1 padded), the
    layout its verify-commit helpers (commit_mamba_states_after_verify) read."""
    bs = accepted.shape[0]
    base = torch.arange(bs, device=accepted.device)[:, None] * n
    return torch.where(accepted >= 0, accepted.to(torch.int64) + base, torch.full_like(accepted, -1, dtype=torch.int64))


def branch_accepts(acc: Accepted, retrive_next_token: torch.Tensor) -> torch.Tensor:
    """Per request: accepted nodes that are not their parent's first child (a branch the chain would not have)."""
    bs, width = acc.accepted.shape
    j = torch.arange(1, width, device=acc.accepted.device)[None, :]
    node = acc.accepted[:, 1:]
    parent = acc.accepted[:, :-1]
    first = torch.gather(retrive_next_token.to(torch.int64), 1, parent.clamp(min=0))
    is_branch = (j <= acc.accept_len[:, None]) & (node >= 0) & (node != first)
    return is_branch.sum(1)


@dataclass
class Commit:
    out_tokens: torch.Tensor  # int64 [bs, block]: accepted draft tokens, then the bonus, then 0
    commit_lens: torch.Tensor  # int32 [bs]: accept_len + 1
    chain_src: torch.Tensor  # int64 [bs, block]: node whose KV/hidden goes to chain position j (j itself past it)


def commit(input_ids: torch.Tensor, acc: Accepted, block: int) -> Commit:
    bs, n = input_ids.shape
    dev = input_ids.device
    depth1 = acc.accepted.shape[1]
    j = torch.arange(block, device=dev)[None, :].expand(bs, block)
    src = torch.full((bs, block), 0, dtype=torch.int64, device=dev)
    w = min(block, depth1)
    src[:, :w] = acc.accepted[:, :w]
    valid = (j <= acc.accept_len[:, None]) & (src >= 0)
    chain_src = torch.where(valid, src, j.clamp(max=n - 1))
    # out_tokens[j] = token of accepted node j+1 for j < a; bonus at j = a
    nxt = torch.full((bs, block), 0, dtype=torch.int64, device=dev)
    w2 = min(block, depth1 - 1)
    nxt[:, :w2] = acc.accepted[:, 1 : 1 + w2]
    tok = torch.gather(input_ids, 1, nxt.clamp(min=0, max=n - 1))
    a = acc.accept_len[:, None]
    out = torch.where(j < a, tok, torch.zeros_like(tok))
    out = torch.where(j == a, acc.bonus[:, None].expand(bs, block), out)
    return Commit(out, (acc.accept_len + 1).to(torch.int32), chain_src)


class TreePreparer:
    """Build + compile for one (L, V, B, K); mode "reference" (host heap) or "triton" (device kernels)."""

    def __init__(self, *, depth: int, vocab: int, budget: int, topk_cap: int | None, mode: str, device):
        self.depth, self.vocab, self.budget = int(depth), int(vocab), int(budget)
        self.k = effective_k(self.depth, self.vocab, self.budget, topk_cap)
        self.mode = mode
        self.device = torch.device(device)
        self._plans: dict[int, object] = {}

    def _plan(self, bs: int):
        plan = self._plans.get(bs)
        if plan is None:
            tk = _triton_kernels()
            plan = tk.DDTreePlan(bs, self.depth, self.vocab, self.budget, device=self.device, k=self.k)
            self._plans[bs] = plan
        return plan

    def follow(self, vi: VerifyInputs, predict: torch.Tensor) -> Accepted | None:
        """The greedy walk of `vi` (this preparer's last tree for its batch size) on the device, with the plan's own
        kernel: one program per request, the batch size only the launch grid. SGLang's verify_tree_greedy_triton
        takes the batch size as a compile-time constant, so every batch size a server meets (requests finish one
        by one) compiled the kernel again, mid-serving. None when this preparer builds on the host (reference
        mode) or holds no plan for these inputs."""
        if self.mode != "triton":
            return None
        plan = self._plans.get(int(predict.shape[0]))
        if plan is None or plan.input_ids.data_ptr() != vi.input_ids.data_ptr():
            return None
        accepted, accept_len, bonus = plan.follow(predict.contiguous())
        # the plan's buffers are rewritten by the next step's walk: the step's commit and the next draft input
        # keep their own copies
        return Accepted(accepted.to(torch.int64), accept_len.to(torch.int64), bonus.clone())

    def prepare_from_topk(self, lp: torch.Tensor, ids: torch.Tensor, root_tokens: torch.Tensor,
                          prefix_lens: torch.Tensor) -> VerifyInputs:
        """Build + compile from the draft top-K (lp [bs, L, K] fp32 sorted descending per depth, global ids): what a
        vocab-parallel head yields, gathered over TP ranks without full-vocab logits."""
        bs = int(lp.shape[0])
        if tuple(lp.shape) != (bs, self.depth, self.k) or tuple(ids.shape) != tuple(lp.shape):
            raise ValueError(f"draft top-K shapes {tuple(lp.shape)} / {tuple(ids.shape)} != {(bs, self.depth, self.k)}")
        if self.mode == "triton":
            plan = self._plan(bs)
            plan.build(lp.float().contiguous(), ids)
            return self._compiled(plan, root_tokens, prefix_lens)
        trees = build_reference(lp, ids, self.budget)
        return compile_verify(trees, root_tokens, prefix_lens, self.depth)

    @staticmethod
    def _compiled(plan, root_tokens: torch.Tensor, prefix_lens: torch.Tensor) -> VerifyInputs:
        ids, pos, vis, _packed = plan.compile(root_tokens.to(torch.int64).contiguous(),
                                              prefix_lens.to(torch.int64).contiguous())
        return VerifyInputs(ids, pos, vis, plan.retrive_index, plan.retrive_next_token, plan.retrive_next_sibling,
                            plan.parents.to(torch.int64))

    def prepare(self, draft_logits: torch.Tensor, root_tokens: torch.Tensor, prefix_lens: torch.Tensor) -> VerifyInputs:
        bs = int(draft_logits.shape[0])
        if self.mode == "triton":
            plan = self._plan(bs)
            plan.topk(draft_logits.contiguous())
            plan.build()
            return self._compiled(plan, root_tokens, prefix_lens)
        lp, ids = topk_logprobs(draft_logits, self.k)
        trees = build_reference(lp, ids, self.budget)
        return compile_verify(trees, root_tokens, prefix_lens, self.depth)
