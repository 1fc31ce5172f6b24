"""Tree verify of Gated-DeltaNet layers in as many steps as the tree is deep (DDTREE on hybrid targets).

The same closed form and per-node records as gdn_tree.py (its module docstring has the algebra), solved
differently. There, (I + A) U = R is solved by S = bit_length(depth bound) matrix squarings, and 65..128 nodes
take two blocks solved one after the other: about 32 dependent dots per program, each a round trip through
shared memory; the program's latency is that chain, so it grows with the node count (one block or two).

Here every row of U is the level-by-level forward substitution of the tree, all levels at once:
    U <- R + N U,   N = -A (strict ancestors, N_ij = -b_i exp(gc_i - gc_j) (k_i . k_j)),
run as many times as the tree is deep (its deepest node's depth, read from the ancestor matrix in the
kernel, not the bound). N is nilpotent over the levels: after m steps every node of depth <= m is exact
(its row only reads strict ancestors, which are shallower), so the siblings of a level are solved together
and the step count is the depth, not the node count, like the chain kernel's 16 token steps. With
`levels_per_step=2` a step applies N and N^2 (U <- (R + N R) + N^2 U, one extra [T, T] product up front):
half the steps. In general `levels_per_step=2^j` first takes R through j stages R <- (I + N^(2^s)) R, squaring
N between them (exact to depth 2^j - 1), then steps U <- R + N^(2^j) U: at 16, a DDTREE tree (depth <= 15)
needs no step at all, and the dependent products are 2 log2(depth) instead of depth (the squarings are
[T, T] x [T, T]). Stages a tree's depth does not need are skipped at run time. Every level step is one
[T, T] x [T, BV] dot; a tree of T <= 128 nodes is one tile.

Outputs O = exp(gc) Q h0^T + W U (W: the decay-weighted q.k products on ancestors-or-self), and the records
(u, normalized k, gc) go to the node's scratch row exactly as gdn_tree.py writes them, so its commit kernel
and DDT114's compact scratch are unchanged."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # CPU: Triton's interpreter (read when the kernels are defined)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 - TRITON_INTERPRET must be set before triton is imported
import triton.language as tl  # noqa: E402

from ddtctl.kernels import gdn_tree as G  # noqa: E402
from ddtctl.kernels.gdn_tree import _decayed, _node_gates, _store_block, _unit_rows  # noqa: E402

MAX_WIDTH = G.MAX_WIDTH  # one [128, 128] tile (a power of two; the commit and the scratch are gdn_tree.py's)
LEVELS_PER_STEP = (1, 2, 4, 8, 16)


@triton.jit
def _ancestors_tile(parent, anc_in, i_n, s_par, s_anc, T, t, live, S: tl.constexpr, ANC_GIVEN: tl.constexpr):
    """Ancestors-or-self [TP, TP] of one request: given (bool rows of T), or derived by S squarings."""
    if ANC_GIVEN:
        pair = live[:, None] & live[None, :]
        is_anc = tl.load(anc_in + i_n * s_anc + t[:, None] * T + t[None, :], mask=pair, other=0) != 0
    else:
        par = tl.load(parent + i_n * s_par + t, mask=live & (t > 0), other=-1)
        eye = (t[:, None] == t[None, :]).to(tl.float16)
        hop = ((par[:, None] == t[None, :]) & (t[:, None] > 0)).to(tl.float16)
        anc = eye + hop
        for _ in tl.static_range(S - 1):
            hop = tl.dot(hop, hop).to(tl.float16)
            anc = tl.dot(anc, eye + hop).to(tl.float16)
        is_anc = (anc > 0.5) & live[:, None]
    return is_anc


@triton.jit
def _tree_gdn_verify_levels_kernel(
    q, k, v, a, b, A_log, dt_bias, o,
    h0, h0_idx, rec, rec_idx, parent, cu, anc_in,
    scale, T,
    sq_t, sk_t, sv_t, sa_t, sb_t, s_h0, s_rec, s_rec_step, s_par, s_anc,
    TP: tl.constexpr, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    S: tl.constexpr, PREC: tl.constexpr, THRESHOLD: tl.constexpr, ANC_GIVEN: tl.constexpr,
    LOG_LEVELS: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0)
    i_n = tl.program_id(1).to(tl.int64)
    i_hv = tl.program_id(2)
    i_h = i_hv // (HV // H)
    bos = tl.load(cu + i_n).to(tl.int64)
    t = tl.arange(0, TP)
    live = t < T
    rows = bos + t
    ok = tl.arange(0, K)
    ov = i_v * BV + tl.arange(0, BV)
    g, beta = _node_gates(a, b, A_log, dt_bias, rows, live, i_hv, sa_t, sb_t, THRESHOLD)
    is_anc = _ancestors_tile(parent, anc_in, i_n, s_par, s_anc, T, t, live, S, ANC_GIVEN)
    depth = tl.max(tl.sum(is_anc.to(tl.int32), 1)) - 1  # the deepest node's depth: the level steps
    gc = tl.sum(tl.where(is_anc, g[None, :], 0.0), 1)
    egc = tl.exp(gc)

    idx = tl.load(h0_idx + i_n).to(tl.int64)
    h0t = tl.load(h0 + tl.maximum(idx, 0) * s_h0 + i_hv * V * K + ov[:, None] * K + ok[None, :])
    h0t = tl.where(idx >= 0, h0t, 0.0)
    ridx = tl.load(rec_idx + i_n).to(tl.int64)

    kt = _unit_rows(k, rows, live, sk_t, i_h * K, ok, 1.0)
    vt = tl.load(v + rows[:, None] * sv_t + i_hv * V + ov[None, :], mask=live[:, None], other=0.0)
    r = beta[:, None] * vt.to(tl.float32)
    r -= (beta * egc)[:, None] * tl.dot(kt, tl.trans(h0t), input_precision=PREC)
    strict = is_anc & (t[:, None] != t[None, :])
    neg_a = _decayed(strict, tl.dot(kt, tl.trans(kt), input_precision=PREC), gc, gc, -beta)
    # 2^LOG_LEVELS levels a step: R <- (I + N)(I + N^2)...(I + N^(2^(LOG_LEVELS-1))) R is exact to depth
    # 2^LOG_LEVELS - 1; N is squared between the stages, and a stage runs only if this tree's depth needs it
    # (levels2, the server's launch from 81 nodes, keeps the unbranched stage it was timed with on the H200)
    for s in tl.static_range(LOG_LEVELS):
        if LOG_LEVELS == 1:
            r = r + tl.dot(neg_a, r, input_precision=PREC)
            neg_a = tl.dot(neg_a, neg_a, input_precision=PREC)
        elif depth >= (1 << s):  # R <- (I + N^(2^s)) R: exact to depth 2^(s+1) - 1
            r = r + tl.dot(neg_a, r, input_precision=PREC)
            if depth >= (2 << s):  # N^(2^(s+1)) is read again: by the next stage or by the level steps
                neg_a = tl.dot(neg_a, neg_a, input_precision=PREC)
    u = r
    for _ in range(depth >> LOG_LEVELS):  # U <- R + N^LEVELS U: each step adds LEVELS levels
        u = r + tl.dot(neg_a, u, input_precision=PREC)

    # after the steps, not before: q, k and W are not live across them (registers); k again from L2
    qt = _unit_rows(q, rows, live, sq_t, i_h * K, ok, scale)
    kt = _unit_rows(k, rows, live, sk_t, i_h * K, ok, 1.0)
    w = _decayed(
        is_anc, tl.dot(qt, tl.trans(kt), input_precision=PREC), gc, gc, tl.full([TP], 1.0, tl.float32)
    )
    out = egc[:, None] * tl.dot(qt, tl.trans(h0t), input_precision=PREC) + tl.dot(w, u, input_precision=PREC)
    _store_block(o, rec, rows, live, t, u, out, gc, kt, ridx, s_rec, s_rec_step, i_v, i_hv, i_h, ok, ov,
                 H, HV, K, V)  # fmt: skip


def _warps(tp: int) -> int:
    return 4 if tp <= 32 else 8


def tree_gdn_verify_levels(
    *, A_log, dt_bias, q, k, v, a, b, ssm_states, cache_indices, query_start_loc, intermediate_states_buffer,
    intermediate_state_indices, retrieve_parent_token, depth_bound: int, precision: str = "tf32",
    block_v: int = 32, ancestors: torch.Tensor | None = None, levels_per_step: int = 1,
    num_warps: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """gdn_tree.tree_gdn_verify's call and result (outputs [1, tokens, HV, V], each node's records in its
    scratch row; the same commit follows), solved level by level in one [TP, TP] tile for up to 128 nodes.
    `depth_bound` sizes only the in-kernel derivation of the ancestors (no `ancestors` given); the steps
    follow each request's own depth. `levels_per_step` a power of two up to 16 (module docstring)."""
    _, total, n_heads, dim_k = k.shape
    n_vheads, dim_v = v.shape[2], v.shape[3]
    n_req = query_start_loc.shape[0] - 1
    width = total // max(n_req, 1)
    if ssm_states.dtype != torch.float32 or intermediate_states_buffer.dtype != torch.float32:
        raise ValueError("the compact tree verify needs fp32 SSM states (--mamba-ssm-dtype float32)")
    if G.record_width(n_heads, n_vheads, dim_k, dim_v) > G._row_floats(intermediate_states_buffer, 2):
        raise ValueError("a node's records do not fit its scratch row")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1 or t.stride(-2) != t.shape[-1]:
            raise ValueError(f"{name} must have contiguous heads")
    if width > MAX_WIDTH:
        raise ValueError(
            f"the level-step tree verify takes at most {MAX_WIDTH} nodes per request, not {width}"
        )
    if levels_per_step not in LEVELS_PER_STEP:
        raise ValueError(f"levels_per_step must be one of {LEVELS_PER_STEP}, not {levels_per_step}")
    out = q.new_empty(1, total, n_vheads, dim_v)
    block_v = min(block_v, dim_v)
    if dim_k < 64:  # gdn_tree.py: tf32x3 dots over K < 64 were wrong on the H200 (Triton 3.6)
        precision = "ieee"
    tp = G._pow2(width)
    grid = (triton.cdiv(dim_v, block_v), n_req, n_vheads)
    _tree_gdn_verify_levels_kernel[grid](
        q, k, v, a, b, A_log, dt_bias, out,
        ssm_states, cache_indices, intermediate_states_buffer, intermediate_state_indices,
        retrieve_parent_token,
        query_start_loc, retrieve_parent_token if ancestors is None else ancestors, dim_k**-0.5, width,
        q.stride(1), k.stride(1), v.stride(1), a.stride(-2), b.stride(-2), ssm_states.stride(0),
        intermediate_states_buffer.stride(0), intermediate_states_buffer.stride(1),
        retrieve_parent_token.stride(0), 0 if ancestors is None else ancestors.stride(0),
        TP=tp, H=n_heads, HV=n_vheads, K=dim_k, V=dim_v, BV=block_v, S=G._squarings(depth_bound),
        PREC=precision, THRESHOLD=G.SOFTPLUS_THRESHOLD, ANC_GIVEN=ancestors is not None,
        LOG_LEVELS=levels_per_step.bit_length() - 1, num_warps=num_warps or _warps(tp),
    )  # fmt: skip
    return out
