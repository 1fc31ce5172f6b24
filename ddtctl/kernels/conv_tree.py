"""Tree causal conv1d of DDTREE verify on Gated-DeltaNet hybrids: one record per node instead of a window.

Every GDN layer first runs a depthwise causal conv (width W, over the mixed qkv channels) along each verify
node's ancestor chain: node i's output uses its own input, its parent's, its grandparent's ... (W - 1
ancestors), and above the root the request's conv state (its last W - 1 inputs before the step). SGLang's tree
conv (`causal_conv1d_update` with retrieve_next_token / retrieve_next_sibling) walks the nodes one after
another, chasing parents inside the loop, and writes every node's whole window ([dim, W - 1]) to
`intermediate_conv_window`; its commit copies the last accepted node's window to the conv state.

Here the nodes are tiles: a small kernel derives the parents from the left-child / right-sibling arrays by
pointer jumping (no node-by-node loop), the verify tiles follow them W - 1 hops up (one load of the parent row
each), and every ancestor's inputs are read as one [nodes, channels] tile. A node's record is its own input
only -- the last column of its window slot, so SGLang's deduplicated (overlapping, as_strided) window layout
holds the records of a whole tree -- and the conv state is left as it was. The commit then builds the window
of the last accepted node (and of the mamba-track node) from the accepted path's records, and from the
pre-step conv state where the path is shorter than W - 1.

Products and sums follow SGLang's kernel term for term (inputs times weights in the inputs' dtype, accumulated
in fp32 from the bias, the node's own term first), so the outputs are bit-equal to it.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # CPU: Triton's interpreter (read when the kernels are defined)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 - TRITON_INTERPRET must be set before triton is imported
import triton.language as tl  # noqa: E402


@triton.jit
def _tree_parents_kernel(
    next_tok, next_sib, parent, T, s_nt, s_ns, s_par, TP: tl.constexpr, LOG_TP: tl.constexpr,
):  # fmt: skip
    """parent[r, :] of request r's tree from the left-child / right-sibling arrays (root and orphans: 0, as
    SGLang's conv derives them), once per call: the verify tiles then read their ancestors from memory.

    A first child's parent is the node pointing at it; any other child's is its previous sibling's, found by
    pointer jumping along the sibling chain (LOG_TP rounds cover chains of up to TP nodes). The jumping state
    (done, value, pointer: 1 + 10 + 10 bits) lives in the parent row itself, scattered and gathered through
    memory: register gathers over [TP, TP] tiles cost ~25 us at 65 nodes (H200). Loads bypass L1 (.cg) and
    barriers fence every round, so each round reads what the round before wrote."""
    i_n = tl.program_id(0).to(tl.int64)
    t = tl.arange(0, TP)
    live = t < T
    row = parent + i_n * s_par
    nt = tl.load(next_tok + i_n * s_nt + t, mask=live, other=-1).to(tl.int32)
    ns = tl.load(next_sib + i_n * s_ns + t, mask=live, other=-1).to(tl.int32)
    tl.store(row + t, ((1 << 20) + t).to(parent.dtype.element_ty), mask=live)  # done, parent 0: root, orphans
    tl.debug_barrier()
    sib = live & (ns >= 0) & (ns < T)  # ns[s] = c: c pending, pointing at its previous sibling s
    tl.store(row + tl.maximum(ns, 0), t.to(parent.dtype.element_ty), mask=sib)
    tl.debug_barrier()
    first = live & (nt >= 0) & (nt < T)  # nt[p] = c: c's parent is p
    linked = ((1 << 20) + t * (1 << 10) + nt).to(parent.dtype.element_ty)
    tl.store(row + tl.maximum(nt, 0), linked, mask=first)
    tl.debug_barrier()
    packed = tl.load(row + t, mask=live, other=1 << 20, cache_modifier=".cg").to(tl.int32)
    done = (packed >> 20) != 0
    val = (packed >> 10) & 1023
    ptr = packed & 1023
    for _ in tl.static_range(LOG_TP):
        other = tl.load(row + ptr, mask=live & ~done, other=1 << 20, cache_modifier=".cg").to(tl.int32)
        tl.debug_barrier()
        hit = (other >> 20) != 0
        val = tl.where(done, val, tl.where(hit, (other >> 10) & 1023, val))
        ptr = tl.where(done | hit, ptr, other & 1023)
        done = done | hit
        tl.store(
            row + t,
            (done.to(tl.int32) * (1 << 20) + val * (1 << 10) + ptr).to(parent.dtype.element_ty),
            mask=live,
        )
        tl.debug_barrier()
    tl.store(row + t, val.to(parent.dtype.element_ty), mask=live)


@triton.jit
def _tree_conv_verify_kernel(
    x, w, bias, state, state_idx, out, rec, rec_idx, parent,
    T, dim, s_x_seq, s_x_dim, s_x_tok, s_w_dim, s_w_win, s_st_slot, s_st_dim, s_st_win,
    s_o_seq, s_o_dim, s_o_tok, s_rec_slot, s_rec_step, s_rec_dim, s_rec_win, s_par,
    W: tl.constexpr, BT: tl.constexpr, BN: tl.constexpr, HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr, SAME_DTYPE: tl.constexpr,
):  # fmt: skip
    i_n = tl.program_id(0).to(tl.int64)
    i_d = tl.program_id(1)
    i_t = tl.program_id(2)
    slot = tl.load(state_idx + i_n).to(tl.int64)
    if slot < 0:  # a CUDA-graph padding request: no state, output unused
        return
    t = i_t * BT + tl.arange(0, BT)
    live = t < T
    par_row = parent + i_n * s_par
    feats = i_d * BN + tl.arange(0, BN)
    fm = feats < dim
    tile = live[:, None] & fm[None, :]
    acc = tl.zeros([BT, BN], dtype=tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias + feats, mask=fm, other=0.0).to(tl.float32)[None, :]
    x_cols = x + i_n * s_x_seq + feats[None, :] * s_x_dim
    st_cols = state + slot * s_st_slot + feats[None, :] * s_st_dim
    anc = t  # the node itself, then its ancestors; a < 0: column W - 1 + a of the conv state, above the root
    for j in tl.static_range(W):
        wj = tl.load(w + feats * s_w_dim + (W - 1 - j) * s_w_win, mask=fm, other=0.0)[None, :]
        in_tree = anc >= 0
        xv = tl.load(x_cols + tl.maximum(anc, 0)[:, None] * s_x_tok, mask=tile & in_tree[:, None], other=0.0)
        st_col = W - 1 + tl.minimum(anc, -1)
        sv = tl.load(st_cols + st_col[:, None] * s_st_win, mask=tile & ~in_tree[:, None], other=0.0)
        if SAME_DTYPE:  # SGLang's `acc += x * w`, the same multiply-add the compiler may fuse
            acc += tl.where(in_tree[:, None], xv, sv) * wj
        else:  # its product in each operand's own dtype
            acc += tl.where(in_tree[:, None], xv * wj, sv * wj)
        if j == 0:  # the node's record: its own input, in the last column of its window slot
            ridx = tl.load(rec_idx + i_n).to(tl.int64)
            node_rec = rec + ridx * s_rec_slot + t[:, None] * s_rec_step + feats[None, :] * s_rec_dim
            tl.store(node_rec + (W - 2) * s_rec_win, xv.to(rec.dtype.element_ty), mask=tile)
        if j < W - 1:
            up = tl.load(par_row + tl.maximum(anc, 0), mask=live & (anc > 0), other=0).to(tl.int32)
            anc = tl.where(anc > 0, up, anc - 1)
    if SILU:
        acc = acc / (1 + tl.exp(-acc))
    o_ptr = out + i_n * s_o_seq + t[:, None] * s_o_tok + feats[None, :] * s_o_dim
    tl.store(o_ptr, acc.to(out.dtype.element_ty), mask=tile)


@triton.jit
def _path_window(st_cols, rec_cols, node, p, length, s_st_win, s_rec_step, fm,
                 W: tl.constexpr, WP: tl.constexpr):  # fmt: skip
    """[WP, BN] the conv window after the first `length` nodes of the path: its last W - 1 inputs, the
    pre-step state's columns before the path's first node."""
    c = tl.arange(0, WP)
    q = length - (W - 1) + c  # position on the path; q < 0: state column W - 1 + q
    on_path = (q >= 0) & (c < W - 1)
    from_state = (q < 0) & (c < W - 1)
    nq = tl.sum(tl.where(p[None, :] == q[:, None], node[None, :], 0), 1)
    xr = tl.load(rec_cols + nq[:, None] * s_rec_step, mask=on_path[:, None] & fm[None, :], other=0.0)
    st_col = W - 1 + tl.minimum(q, -1)
    xs = tl.load(st_cols + st_col[:, None] * s_st_win, mask=from_state[:, None] & fm[None, :], other=0.0)
    return tl.where(on_path[:, None], xr.to(xs.dtype), xs)


@triton.jit
def _tree_conv_commit_kernel(
    state, rec, state_idx, rec_idx, acc_idx, acc_len, track_idx, track_node,
    T, dim, s_st_layer, s_st_slot, s_st_dim, s_st_win, s_rec_layer, s_rec_slot, s_rec_step, s_rec_dim,
    s_rec_win, s_acc,
    AP: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, BN: tl.constexpr, HAS_TRACK: tl.constexpr,
):  # fmt: skip
    i_n = tl.program_id(0).to(tl.int64)
    i_d = tl.program_id(1)
    layer = tl.program_id(2).to(tl.int64)
    sidx = tl.load(state_idx + i_n).to(tl.int64)
    ridx = tl.load(rec_idx + i_n).to(tl.int64)
    if (sidx >= 0) & (ridx >= 0):
        feats = i_d * BN + tl.arange(0, BN)
        fm = feats < dim
        p = tl.arange(0, AP)
        n_acc = tl.load(acc_len + i_n).to(tl.int32)
        on = p < n_acc
        node = tl.load(acc_idx + i_n * s_acc + p, mask=on, other=0).to(tl.int64) - i_n * T
        st_cols = state + layer * s_st_layer + sidx * s_st_slot + feats[None, :] * s_st_dim
        rec_cols = rec + layer * s_rec_layer + ridx * s_rec_slot + (W - 2) * s_rec_win
        rec_cols += feats[None, :] * s_rec_dim
        c = tl.arange(0, WP)
        cols = (c < W - 1)[:, None] & fm[None, :]
        if HAS_TRACK:  # before the request's own slot is overwritten: both windows start from its old state
            slot = tl.load(track_idx + i_n).to(tl.int64)
            at = tl.load(track_node + i_n).to(tl.int64)
            pos = tl.max(tl.where(on & (node == at), p, -1))
            if (slot >= 0) & (at >= 0) & (pos >= 0):
                win = _path_window(st_cols, rec_cols, node, p, pos + 1, s_st_win, s_rec_step, fm, W, WP)
                dst = state + layer * s_st_layer + slot * s_st_slot + feats[None, :] * s_st_dim
                tl.store(dst + c[:, None] * s_st_win, win, mask=cols)
        win = _path_window(st_cols, rec_cols, node, p, n_acc, s_st_win, s_rec_step, fm, W, WP)
        tl.debug_barrier()  # every column read before any is overwritten
        tl.store(st_cols + c[:, None] * s_st_win, win, mask=cols)


def _pow2(x: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, (int(x) - 1).bit_length()))


# H200, bench/conv_tree_gpu.py (2026-12-01 19:00 UTC, Qwen3.6-27B conv, bf16, batch 1): 64 channels x 16 node
# rows was the fastest of 9 launches at 17 / 33 / 65 nodes at tp 1 (5.5 / 9.4 / 29.8 us a layer) and at one
# tp 8 rank's 1280 channels (4.9 / 8.4 at 17 / 33)
VERIFY_BLOCK_N = 64
# node rows a verify program takes: the ancestors come from the parents kernel's output, any tiling is exact
VERIFY_BLOCK_T = 16


def tree_conv_verify(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation,
    *, conv_state_indices: torch.Tensor, intermediate_conv_window: torch.Tensor,
    intermediate_state_indices: torch.Tensor, retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor, retrieve_parent_token: torch.Tensor, block_n: int = VERIFY_BLOCK_N,
    block_t: int = VERIFY_BLOCK_T,
) -> torch.Tensor:  # fmt: skip
    """SGLang's tree `causal_conv1d_update` call, compact: x [bs, dim, T] (any strides); conv_state [slots,
    dim, W - 1] (read, not written); weight [dim, W]; intermediate_conv_window [rows, T, dim, W - 1] (dense or
    SGLang's deduplicated view): node t's input goes to [row, t, :, W - 2]; retrieve_parent_token [bs, T] is
    filled. Returns the outputs in a tensor like x."""
    if isinstance(activation, bool):
        activation = "silu" if activation else None
    if activation not in (None, "silu", "swish"):
        raise ValueError(f"tree conv activation {activation!r}: only silu / swish or none")
    bs, dim, width = x.shape
    kernel_w = weight.shape[1]
    cols = (conv_state.shape[-1], intermediate_conv_window.shape[-1])
    if kernel_w < 2 or cols != (kernel_w - 1, kernel_w - 1):
        raise ValueError(f"tree conv: conv state / window columns {cols} for a width-{kernel_w} kernel")
    if width > 1024:
        raise ValueError(f"tree conv: {width} nodes, the parents kernel packs node indices in 10 bits")
    out = torch.empty_like(x)
    if bs == 0:
        return out
    tp = _pow2(width)
    _tree_parents_kernel[(bs,)](
        retrieve_next_token, retrieve_next_sibling, retrieve_parent_token, width,
        retrieve_next_token.stride(0), retrieve_next_sibling.stride(0), retrieve_parent_token.stride(0),
        TP=tp, LOG_TP=(tp - 1).bit_length(),
        num_warps=4 if tp <= 32 else 8,
    )  # fmt: skip
    block_t = min(block_t, _pow2(width))
    grid = (bs, triton.cdiv(dim, block_n), triton.cdiv(width, block_t))
    _tree_conv_verify_kernel[grid](
        x, weight, bias if bias is not None else weight, conv_state, conv_state_indices, out,
        intermediate_conv_window, intermediate_state_indices, retrieve_parent_token, width, dim, *x.stride(),
        *weight.stride(), *conv_state.stride(), *out.stride(), *intermediate_conv_window.stride(),
        retrieve_parent_token.stride(0),
        W=kernel_w, BT=block_t, BN=block_n, HAS_BIAS=bias is not None, SILU=activation is not None,
        SAME_DTYPE=x.dtype == conv_state.dtype, num_warps=4,
    )  # fmt: skip
    return out


def tree_conv_commit(
    *, conv: torch.Tensor, intermediate_conv_window: torch.Tensor, state_indices: torch.Tensor,
    scratch_rows: torch.Tensor, accept_index: torch.Tensor, accept_lens: torch.Tensor, width: int,
    track_indices: torch.Tensor | None = None, track_nodes: torch.Tensor | None = None, block_n: int = 256,
) -> None:  # fmt: skip
    """Every layer's conv state of each request <- the window after its last accepted node (and, where the
    track interval is crossed, the track slot <- the window after the track node), from the pre-step state and
    the accepted path's records. conv [layers, slots, dim, W - 1]; intermediate_conv_window [layers, rows,
    width, dim, W - 1]; accept_index [bs, A] global node indices (request r's nodes are r * width + node),
    accept_lens [bs] incl. the root."""
    n_layers, _, dim, cols = conv.shape
    n_req = state_indices.shape[0]
    if n_req == 0:
        return
    has_track = track_indices is not None and track_nodes is not None
    accept_index = accept_index.contiguous()
    grid = (n_req, triton.cdiv(dim, block_n), n_layers)
    _tree_conv_commit_kernel[grid](
        conv, intermediate_conv_window, state_indices, scratch_rows, accept_index, accept_lens,
        track_indices if has_track else state_indices, track_nodes if has_track else state_indices,
        width, dim, *conv.stride(), *intermediate_conv_window.stride(), accept_index.stride(0),
        AP=_pow2(accept_index.shape[1]), W=cols + 1, WP=_pow2(cols, 1), BN=block_n, HAS_TRACK=has_track,
        num_warps=4,
    )  # fmt: skip


def tree_conv_reference(x, weight, bias, state, parents, silu: bool = True):
    """The tree conv node by node in float64 (tests, the GPU bench): one request. x [T, dim]; weight [dim, W];
    bias [dim] or None; state [dim, W - 1] (the last W - 1 inputs before the step, oldest first); parents [T]
    (parents[0] ignored). Returns (out [T, dim], windows [T, dim, W - 1]: each node's last W - 1 inputs)."""
    x, weight, state = x.double(), weight.double(), state.double()
    n, dim = x.shape
    kernel_w = weight.shape[1]
    windows = torch.empty(n, dim, kernel_w - 1, dtype=torch.float64)
    out = torch.empty(n, dim, dtype=torch.float64)
    for i in range(n):
        prev = state if i == 0 else windows[int(parents[i])]
        full = torch.cat([prev, x[i][:, None]], 1)  # [dim, W]
        y = (full * weight).sum(1) + (bias.double() if bias is not None else 0.0)
        out[i] = y * torch.sigmoid(y) if silu else y
        windows[i] = full[:, 1:]
    return out, windows
