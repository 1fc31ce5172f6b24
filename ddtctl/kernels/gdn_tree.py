"""Tree verify of Gated-DeltaNet layers without per-node state snapshots (DDTREE on hybrid targets).

SGLang's tree verify (`fused_sigmoid_gating_delta_rule_update` with `retrieve_parent_token`) walks the verify
window one node at a time, reloads every node's parent state from global memory and writes every node's full
state ([HV, V, K] fp32, ~3 MB per node per layer on Qwen3.6-27B) to `intermediate_ssm`. Its time grows with
the number of nodes, and so does its memory traffic: 2 x T x 151 MB per request per step on that model. At
batch 8 and 33 nodes that is more than the whole DFLASH step.

Here the verify computes the same outputs in closed form over the tree: the chunked delta rule with the
ancestor mask in place of the causal one. It writes, per node, only what a commit needs: the update vector u
[HV, V], the normalized key [H, K] and the path-cumulative log decay [HV], into the same scratch rows. The
commit then materialises one state per request and layer, that of the last accepted node, plus the mamba-track
node when the track interval is crossed, from the request's state and the accepted path's records.

Per request and v-head, for node i with ancestors-or-self anc(i) and strict ancestors sanc(i); g the log
decay, b = sigmoid(beta logit), k and q L2-normalized, q scaled:
    gc_i = sum_{j in anc(i)} g_j
    h_i  = exp(gc_i) h0 + sum_{j in anc(i)} exp(gc_i - gc_j) k_j u_j^T
    u_i  = b_i (v_i - k_i^T exp(gc_i) h0) - sum_{j in sanc(i)} b_i exp(gc_i - gc_j) (k_i . k_j) u_j,
         so (I + A) U = R, A_ij = b_i exp(gc_i - gc_j) (k_i . k_j) on strict ancestors,
         R = b V - b exp(gc) K h0
    o_i  = exp(gc_i) q_i^T h0 + sum_{j in anc(i)} exp(gc_i - gc_j) (q_i . k_j) u_j
A is nilpotent (A^m = 0 once m exceeds the deepest path), so (I + A)^-1 = prod_{s < S} (I + (-A)^(2^s)) when
2^S exceeds the depth: S matrix squarings instead of a node-by-node walk. The ancestor matrix comes the same
way from the parent one-hot P: sum_{m < 2^S} P^m = prod_{s < S} (I + P^(2^s)).

A single [TP, TP] tile of 128 nodes needs more shared memory than an H200 block has, so 65..128 nodes take a
second kernel with tiles of at most 64 rows: nodes come in topological order (a parent precedes its children:
the best-first build), so with block 1 = nodes 0..63 and block 2 = the rest, A, the ancestor matrix and P are
block lower-triangular (no node of block 1 descends from one of block 2) and
    U_1 = (I + A_11)^-1 R_1,  U_2 = (I + A_22)^-1 (R_2 - A_21 U_1),  O_1 = ... W_11 U_1,
    O_2 = ... W_21 U_1 + W_22 U_2  (W = the ancestor-masked, decay-weighted q.k products).
Block 1 takes [64, 64] tiles; block 2 only the rows it has, the next power of two >= T - 64 (at least 16, what
a dot takes): [16, ...] at 65 nodes (budget 64), not a [64, ...] tile of 63 padding rows."""

from __future__ import annotations

import math
import os

import torch

if not torch.cuda.is_available():  # CPU: Triton's interpreter (read when the kernels are defined)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 - TRITON_INTERPRET must be set before triton is imported
import triton.language as tl  # noqa: E402

SOFTPLUS_THRESHOLD = 20.0  # SGLang's verify call: softplus_beta 1.0, threshold 20.0
# Single tiles of 128 nodes need more shared memory than an H200 block has (K = 128) and faulted at K = 16
# (Triton 3.6, tf32x3; bench/gdn_tree_probe.py): wider trees take the two-block kernel's [64, 64] tiles.
MAX_SINGLE_TILE = 64
TWO_BLOCK_TILE = 64  # block 1 = nodes 0..63, block 2 = nodes 64..T-1
MIN_DOT = 16  # tl.dot's smallest tile side: the floor of block 2's rows
MAX_WIDTH = 2 * TWO_BLOCK_TILE


@triton.jit
def _tree_gdn_verify_kernel(
    q, k, v, a, b, A_log, dt_bias, o,
    h0, h0_idx, rec, rec_idx, parent, cu, anc_in,
    scale, T,
    sq_t, sk_t, sv_t, sa_t, sb_t, s_h0, s_rec, s_rec_step, s_par, s_anc,
    TP: tl.constexpr, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    S: tl.constexpr, PREC: tl.constexpr, THRESHOLD: tl.constexpr, ANC_GIVEN: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0)
    i_n = tl.program_id(1).to(tl.int64)
    i_hv = tl.program_id(2)
    i_h = i_hv // (HV // H)
    bos = tl.load(cu + i_n).to(tl.int64)
    t = tl.arange(0, TP)
    live = t < T
    ok = tl.arange(0, K)
    ov = i_v * BV + tl.arange(0, BV)
    rows = bos + t
    tok = live[:, None]
    qt = tl.load(q + rows[:, None] * sq_t + i_h * K + ok[None, :], mask=tok, other=0.0).to(tl.float32)
    kt = tl.load(k + rows[:, None] * sk_t + i_h * K + ok[None, :], mask=tok, other=0.0).to(tl.float32)
    vt = tl.load(v + rows[:, None] * sv_t + i_hv * V + ov[None, :], mask=tok, other=0.0).to(tl.float32)
    x = tl.load(a + rows * sa_t + i_hv, mask=live, other=0.0).to(tl.float32)
    x += tl.load(dt_bias + i_hv).to(tl.float32)
    softplus = tl.where(x <= THRESHOLD, tl.log(1.0 + tl.exp(x)), x)
    g = tl.where(live, -tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * softplus, 0.0)
    beta = 1.0 / (1.0 + tl.exp(-tl.load(b + rows * sb_t + i_hv, mask=live, other=0.0).to(tl.float32)))
    qt = qt * (1.0 / tl.sqrt(tl.sum(qt * qt, 1) + 1e-6))[:, None] * scale
    kt = kt * (1.0 / tl.sqrt(tl.sum(kt * kt, 1) + 1e-6))[:, None]

    if ANC_GIVEN:  # the step's ancestor matrix, built once for all layers (bool [bs, T, T])
        pair = live[:, None] & live[None, :]
        is_anc = tl.load(anc_in + i_n * s_anc + t[:, None] * T + t[None, :], mask=pair, other=0) != 0
    else:  # ancestors-or-self from the parents (node 0 is the root; padding rows have none)
        par = tl.load(parent + i_n * s_par + t, mask=live & (t > 0), other=-1)
        eye = (t[:, None] == t[None, :]).to(tl.float16)
        hop = ((par[:, None] == t[None, :]) & (t[:, None] > 0)).to(tl.float16)
        anc = eye + hop
        for _ in tl.static_range(S - 1):
            hop = tl.dot(hop, hop).to(tl.float16)
            anc = tl.dot(anc, eye + hop).to(tl.float16)
        is_anc = anc > 0.5
    strict = is_anc & (t[:, None] != t[None, :])

    gc = tl.sum(tl.where(is_anc, g[None, :], 0.0), 1)
    diff = gc[:, None] - gc[None, :]
    kk = tl.dot(kt, tl.trans(kt), input_precision=PREC)
    neg_a = tl.where(strict, -beta[:, None] * kk * tl.exp(tl.where(strict, diff, 0.0)), 0.0)

    idx = tl.load(h0_idx + i_n).to(tl.int64)
    safe = tl.maximum(idx, 0)
    h0t = tl.load(h0 + safe * s_h0 + i_hv * V * K + ov[:, None] * K + ok[None, :])
    h0t = tl.where(idx >= 0, h0t, 0.0)
    egc = tl.exp(gc)
    r = beta[:, None] * vt - (beta * egc)[:, None] * tl.dot(kt, tl.trans(h0t), input_precision=PREC)
    u = r + tl.dot(neg_a, r, input_precision=PREC)
    for _ in tl.static_range(S - 1):
        neg_a = tl.dot(neg_a, neg_a, input_precision=PREC)
        u = u + tl.dot(neg_a, u, input_precision=PREC)

    qk = tl.dot(qt, tl.trans(kt), input_precision=PREC)
    w = tl.where(is_anc, qk * tl.exp(tl.where(is_anc, diff, 0.0)), 0.0)
    out = egc[:, None] * tl.dot(qt, tl.trans(h0t), input_precision=PREC) + tl.dot(w, u, input_precision=PREC)
    tl.store(o + rows[:, None] * (HV * V) + i_hv * V + ov[None, :], out.to(o.dtype.element_ty), mask=tok)

    ridx = tl.load(rec_idx + i_n).to(tl.int64)
    if ridx >= 0:  # the records in the node's scratch row: u [HV, V] | k [H, K] | gc [HV]
        node = rec + ridx * s_rec + t * s_rec_step
        tl.store(node[:, None] + i_hv * V + ov[None, :], u, mask=live[:, None])
        if i_v == 0:
            tl.store(node + HV * V + H * K + i_hv, gc, mask=live)
            if i_hv % (HV // H) == 0:
                tl.store(node[:, None] + HV * V + i_h * K + ok[None, :], kt, mask=live[:, None])


@triton.jit
def _node_gates(a, b, A_log, dt_bias, rows, live, i_hv, sa_t, sb_t, THRESHOLD: tl.constexpr):
    """Log decay g and beta = sigmoid(b) of a block of nodes (0 and 0.5 on padding rows)."""
    x = tl.load(a + rows * sa_t + i_hv, mask=live, other=0.0).to(tl.float32)
    x += tl.load(dt_bias + i_hv).to(tl.float32)
    softplus = tl.where(x <= THRESHOLD, tl.log(1.0 + tl.exp(x)), x)
    g = tl.where(live, -tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * softplus, 0.0)
    beta = 1.0 / (1.0 + tl.exp(-tl.load(b + rows * sb_t + i_hv, mask=live, other=0.0).to(tl.float32)))
    return g, beta


@triton.jit
def _unit_rows(x, rows, live, stride, col0, cols, scale):
    """Rows of x (a block of nodes, one head) L2-normalized and scaled; zero on padding rows."""
    t = tl.load(x + rows[:, None] * stride + col0 + cols[None, :], mask=live[:, None], other=0.0)
    t = t.to(tl.float32)
    return t * (1.0 / tl.sqrt(tl.sum(t * t, 1) + 1e-6))[:, None] * scale


@triton.jit
def _block_ancestors(parent, anc_in, i_n, s_par, s_anc, T, t, t2, live1, live2,
                     BT: tl.constexpr, S: tl.constexpr, ANC_GIVEN: tl.constexpr):  # fmt: skip
    """The ancestors-or-self matrix in its three non-zero blocks, 11 [BT, BT], 21 [BT2, BT] and 22 [BT2, BT2]
    (t2 = arange(BT2), block 2's rows BT + t2): given, or from the parents by squaring block lower-triangular
    products ((XY)_21 = X_21 Y_11 + X_22 Y_21)."""
    r2 = BT + t2
    if ANC_GIVEN:
        base = anc_in + i_n * s_anc
        in1, in2 = live1[None, :], live2[None, :]
        a11 = tl.load(base + t[:, None] * T + t[None, :], mask=live1[:, None] & in1, other=0) != 0
        a21 = tl.load(base + r2[:, None] * T + t[None, :], mask=live2[:, None] & in1, other=0) != 0
        a22 = tl.load(base + r2[:, None] * T + r2[None, :], mask=live2[:, None] & in2, other=0) != 0
    else:
        p1 = tl.load(parent + i_n * s_par + t, mask=live1 & (t > 0), other=-1)
        p2 = tl.load(parent + i_n * s_par + r2, mask=live2, other=-1)
        eye = (t[:, None] == t[None, :]).to(tl.float16)
        eye2 = (t2[:, None] == t2[None, :]).to(tl.float16)
        h11 = ((p1[:, None] == t[None, :]) & (t[:, None] > 0)).to(tl.float16)
        h21 = (p2[:, None] == t[None, :]).to(tl.float16)
        h22 = (p2[:, None] == r2[None, :]).to(tl.float16)
        f11, f21, f22 = eye + h11, h21, eye2 + h22
        for _ in tl.static_range(S - 1):
            h21 = (tl.dot(h21, h11) + tl.dot(h22, h21)).to(tl.float16)
            h11 = tl.dot(h11, h11).to(tl.float16)
            h22 = tl.dot(h22, h22).to(tl.float16)
            f21 = (tl.dot(f21, eye + h11) + tl.dot(f22, h21)).to(tl.float16)
            f11 = tl.dot(f11, eye + h11).to(tl.float16)
            f22 = tl.dot(f22, eye2 + h22).to(tl.float16)
        a11, a21, a22 = f11 > 0.5, f21 > 0.5, f22 > 0.5
    return a11, a21, a22


@triton.jit
def _nilpotent_solve(neg_a, u, S: tl.constexpr, PREC: tl.constexpr):
    """(I + A)^-1 u for strictly lower-triangular A of depth < 2^S, as prod_s (I + (-A)^(2^s)) u."""
    u = u + tl.dot(neg_a, u, input_precision=PREC)
    for _ in tl.static_range(S - 1):
        neg_a = tl.dot(neg_a, neg_a, input_precision=PREC)
        u = u + tl.dot(neg_a, u, input_precision=PREC)
    return u


@triton.jit
def _decayed(mask, prod, gc_rows, gc_cols, scale):
    """scale_i * prod_ij * exp(gc_i - gc_j) where mask, else 0 (the exponent is masked before exp)."""
    diff = gc_rows[:, None] - gc_cols[None, :]
    return tl.where(mask, scale[:, None] * prod * tl.exp(tl.where(mask, diff, 0.0)), 0.0)


@triton.jit
def _store_block(o, rec, rows, live, t, u, out, gc, kt, ridx, s_rec, s_rec_step, i_v, i_hv, i_h, ok, ov,
                 H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr):  # fmt: skip
    """A block's outputs, and (with a scratch row) its records: u [HV, V] | k [H, K] | gc [HV]."""
    dst = o + rows[:, None] * (HV * V) + i_hv * V + ov[None, :]
    tl.store(dst, out.to(o.dtype.element_ty), mask=live[:, None])
    if ridx >= 0:
        node = rec + ridx * s_rec + t * s_rec_step
        tl.store(node[:, None] + i_hv * V + ov[None, :], u, mask=live[:, None])
        if i_v == 0:
            tl.store(node + HV * V + H * K + i_hv, gc, mask=live)
            if i_hv % (HV // H) == 0:
                tl.store(node[:, None] + HV * V + i_h * K + ok[None, :], kt, mask=live[:, None])


@triton.jit
def _tree_gdn_verify_two_block_kernel(
    q, k, v, a, b, A_log, dt_bias, o,
    h0, h0_idx, rec, rec_idx, parent, cu, anc_in,
    scale, T,
    sq_t, sk_t, sv_t, sa_t, sb_t, s_h0, s_rec, s_rec_step, s_par, s_anc,
    BT: tl.constexpr, BT2: tl.constexpr, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BV: tl.constexpr, S: tl.constexpr, PREC: tl.constexpr, THRESHOLD: tl.constexpr, ANC_GIVEN: tl.constexpr,
):  # fmt: skip
    """_tree_gdn_verify_kernel for BT < T <= BT + BT2 nodes: block 1 = nodes 0..BT-1 on [BT, BT] tiles solved
    and written first, then block 2 = nodes BT..T-1 against it on BT2 rows (the module docstring)."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1).to(tl.int64)
    i_hv = tl.program_id(2)
    i_h = i_hv // (HV // H)
    bos = tl.load(cu + i_n).to(tl.int64)
    t, t2 = tl.arange(0, BT), tl.arange(0, BT2)
    live1, live2 = t < T, BT + t2 < T
    rows1, rows2 = bos + t, bos + BT + t2
    ok = tl.arange(0, K)
    ov = i_v * BV + tl.arange(0, BV)
    g1, beta1 = _node_gates(a, b, A_log, dt_bias, rows1, live1, i_hv, sa_t, sb_t, THRESHOLD)
    g2, beta2 = _node_gates(a, b, A_log, dt_bias, rows2, live2, i_hv, sa_t, sb_t, THRESHOLD)
    a11, a21, a22 = _block_ancestors(parent, anc_in, i_n, s_par, s_anc, T, t, t2, live1, live2, BT, S,
                                     ANC_GIVEN)  # fmt: skip
    gc1 = tl.sum(tl.where(a11, g1[None, :], 0.0), 1)
    gc2 = tl.sum(tl.where(a21, g1[None, :], 0.0), 1) + tl.sum(tl.where(a22, g2[None, :], 0.0), 1)
    egc1, egc2 = tl.exp(gc1), tl.exp(gc2)
    not_self, not_self2 = t[:, None] != t[None, :], t2[:, None] != t2[None, :]
    ones, ones2 = tl.full([BT], 1.0, tl.float32), tl.full([BT2], 1.0, tl.float32)

    idx = tl.load(h0_idx + i_n).to(tl.int64)
    h0t = tl.load(h0 + tl.maximum(idx, 0) * s_h0 + i_hv * V * K + ov[:, None] * K + ok[None, :])
    h0t = tl.where(idx >= 0, h0t, 0.0)
    ridx = tl.load(rec_idx + i_n).to(tl.int64)

    k1 = _unit_rows(k, rows1, live1, sk_t, i_h * K, ok, 1.0)
    v1 = tl.load(v + rows1[:, None] * sv_t + i_hv * V + ov[None, :], mask=live1[:, None], other=0.0)
    r1 = beta1[:, None] * v1.to(tl.float32)
    r1 -= (beta1 * egc1)[:, None] * tl.dot(k1, tl.trans(h0t), input_precision=PREC)
    kk11 = tl.dot(k1, tl.trans(k1), input_precision=PREC)
    u1 = _nilpotent_solve(_decayed(a11 & not_self, kk11, gc1, gc1, -beta1), r1, S, PREC)
    q1 = _unit_rows(q, rows1, live1, sq_t, i_h * K, ok, scale)
    w11 = _decayed(a11, tl.dot(q1, tl.trans(k1), input_precision=PREC), gc1, gc1, ones)
    out1 = egc1[:, None] * tl.dot(q1, tl.trans(h0t), input_precision=PREC)
    out1 += tl.dot(w11, u1, input_precision=PREC)
    _store_block(o, rec, rows1, live1, t, u1, out1, gc1, k1, ridx, s_rec, s_rec_step, i_v, i_hv, i_h, ok, ov,
                 H, HV, K, V)  # fmt: skip

    k2 = _unit_rows(k, rows2, live2, sk_t, i_h * K, ok, 1.0)
    v2 = tl.load(v + rows2[:, None] * sv_t + i_hv * V + ov[None, :], mask=live2[:, None], other=0.0)
    r2 = beta2[:, None] * v2.to(tl.float32)
    r2 -= (beta2 * egc2)[:, None] * tl.dot(k2, tl.trans(h0t), input_precision=PREC)
    neg_a21 = _decayed(a21, tl.dot(k2, tl.trans(k1), input_precision=PREC), gc2, gc1, -beta2)
    r2 += tl.dot(neg_a21, u1, input_precision=PREC)
    kk22 = tl.dot(k2, tl.trans(k2), input_precision=PREC)
    u2 = _nilpotent_solve(_decayed(a22 & not_self2, kk22, gc2, gc2, -beta2), r2, S, PREC)
    q2 = _unit_rows(q, rows2, live2, sq_t, i_h * K, ok, scale)
    w21 = _decayed(a21, tl.dot(q2, tl.trans(k1), input_precision=PREC), gc2, gc1, ones2)
    w22 = _decayed(a22, tl.dot(q2, tl.trans(k2), input_precision=PREC), gc2, gc2, ones2)
    out2 = egc2[:, None] * tl.dot(q2, tl.trans(h0t), input_precision=PREC)
    out2 += tl.dot(w21, u1, input_precision=PREC) + tl.dot(w22, u2, input_precision=PREC)
    _store_block(o, rec, rows2, live2, BT + t2, u2, out2, gc2, k2, ridx, s_rec, s_rec_step, i_v, i_hv, i_h,
                 ok, ov, H, HV, K, V)  # fmt: skip


@triton.jit
def _tree_gdn_commit_kernel(
    state, rec, state_idx, rec_idx, acc_idx, acc_len, track_idx, track_node,
    T, s_state_layer, s_state_slot, s_rec_layer, s_rec_slot, s_rec_step, s_acc,
    AP: tl.constexpr, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    HAS_TRACK: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0)
    i_n = tl.program_id(1).to(tl.int64)
    layer = (tl.program_id(2) // HV).to(tl.int64)  # int64: a layer's pitch times 47 passes 2^31 elements
    i_hv = tl.program_id(2) % HV
    i_h = i_hv // (HV // H)
    sidx = tl.load(state_idx + i_n).to(tl.int64)
    ridx = tl.load(rec_idx + i_n).to(tl.int64)
    if (sidx >= 0) & (ridx >= 0):
        ok = tl.arange(0, K)
        ov = i_v * BV + tl.arange(0, BV)
        p = tl.arange(0, AP)
        n_acc = tl.load(acc_len + i_n)
        on = p < n_acc
        node = tl.load(acc_idx + i_n * s_acc + p, mask=on, other=0).to(tl.int64) - i_n * T
        recs = rec + layer * s_rec_layer + ridx * s_rec_slot + node * s_rec_step
        u = tl.load(recs[:, None] + i_hv * V + ov[None, :], mask=on[:, None], other=0.0)
        kn = tl.load(recs[:, None] + HV * V + i_h * K + ok[None, :], mask=on[:, None], other=0.0)
        gc = tl.load(recs + HV * V + H * K + i_hv, mask=on, other=0.0)
        tile = ov[:, None] * K + ok[None, :] + i_hv * V * K
        src = state + layer * s_state_layer + sidx * s_state_slot + tile
        h0t = tl.load(src)
        g_last = tl.sum(tl.where(p == n_acc - 1, gc, 0.0))
        coef = tl.where(on, tl.exp(g_last - gc), 0.0)
        h_last = tl.exp(g_last) * h0t + tl.dot(tl.trans(u * coef[:, None]), kn, input_precision=PREC)
        if HAS_TRACK:
            slot = tl.load(track_idx + i_n).to(tl.int64)
            at = tl.load(track_node + i_n).to(tl.int64)
            if (slot >= 0) & (at >= 0):
                pos = tl.max(tl.where(on & (node == at), p, -1))
                g_at = tl.sum(tl.where(p == pos, gc, 0.0))
                coef_at = tl.where(on & (p <= pos), tl.exp(g_at - gc), 0.0)
                upd = tl.dot(tl.trans(u * coef_at[:, None]), kn, input_precision=PREC)
                h_at = tl.exp(g_at) * h0t + upd
                tl.store(state + layer * s_state_layer + slot * s_state_slot + tile, h_at)
        tl.store(src, h_last)


def _pow2(x: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, (int(x) - 1).bit_length()))


def _block2_rows(width: int, block2: int | None) -> int:
    """The two-block kernel's block-2 tile rows BT2 for `width` nodes: the next power of two >= width - 64 (at
    least MIN_DOT), or `block2` when forced (e.g. 64, the full tile, to time it against the automatic one)."""
    rows = width - TWO_BLOCK_TILE
    if block2 is None:
        return _pow2(rows, MIN_DOT)
    if block2 < rows or block2 < MIN_DOT or block2 > TWO_BLOCK_TILE or block2 & (block2 - 1):
        lo = max(MIN_DOT, rows)  # a dot's smallest side; nodes 64..T-1
        raise ValueError(
            f"block2 must be a power of two from {lo} to {TWO_BLOCK_TILE} at {width} nodes, not {block2}"
        )
    return block2


def _squarings(depth_bound: int) -> int:
    """S with 2^S > depth_bound: the factors that make the nilpotent series exact."""
    return max(1, int(depth_bound).bit_length())


def _row_floats(scratch: torch.Tensor, first: int) -> int:
    """Elements of one node's scratch row: the product of the dims after (slot, node)."""
    return math.prod(int(d) for d in scratch.shape[first:])


def compact_scratch_shape(layers: int, slots: int, width: int, hv: int, v: int, k: int) -> tuple[int, ...]:
    """The scratch a compact verify needs, [layers, slots, width, 1, 1, records], instead of SGLang's
    [layers, slots, width, HV, V, K]; key heads (unknown where the pool is sized) are bounded by HV."""
    return (layers, slots, width, 1, 1, record_width(hv, hv, k, v))


def record_width(h: int, hv: int, k: int, v: int) -> int:
    """Floats of one node's records (u, normalized key, cumulative log decay) in its HV*V*K scratch row."""
    return hv * v + h * k + hv


def tree_gdn_verify(
    *, A_log, dt_bias, q, k, v, a, b, ssm_states, cache_indices, query_start_loc, intermediate_states_buffer,
    intermediate_state_indices, retrieve_parent_token, depth_bound: int, precision: str = "tf32",
    block_v: int = 32, ancestors: torch.Tensor | None = None, block2: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """Outputs [1, tokens, HV, V] of the verify window (every request has the same node count T), and each
    node's records in its `intermediate_states_buffer` row. q, k [1, tokens, H, K]; v [1, tokens, HV, V];
    a, b [tokens, HV]; states [slots, HV, V, K] fp32. TF32 dots by default, as SGLang's own ReplaySSM verify
    reconstructs outputs on fp32 checkpoints (3-5x faster than tf32x3 on the H200: bench/gdn_tree_gpu.py);
    `precision="tf32x3"` for fp32-level results. `ancestors` (bool [bs, T, T], row i = the ancestors of i
    and i, contiguous rows) replaces the in-kernel derivation from the parents. `block2` forces the two-block
    kernel's block-2 tile rows (65..128 nodes; a power of two, 16..64, >= T - 64); None: the smallest."""
    _, total, n_heads, dim_k = k.shape
    n_vheads, dim_v = v.shape[2], v.shape[3]
    n_req = query_start_loc.shape[0] - 1
    width = total // max(n_req, 1)
    if ssm_states.dtype != torch.float32 or intermediate_states_buffer.dtype != torch.float32:
        raise ValueError("the compact tree verify needs fp32 SSM states (--mamba-ssm-dtype float32)")
    if record_width(n_heads, n_vheads, dim_k, dim_v) > _row_floats(intermediate_states_buffer, 2):
        raise ValueError("a node's records do not fit its scratch row")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1 or t.stride(-2) != t.shape[-1]:
            raise ValueError(f"{name} must have contiguous heads")
    if width > MAX_WIDTH:
        raise ValueError(f"the compact tree verify takes at most {MAX_WIDTH} nodes per request, not {width}")
    if block2 is not None and width <= MAX_SINGLE_TILE:
        raise ValueError(
            f"block2 sets the two-block kernel's tile ({MAX_SINGLE_TILE + 1}..{MAX_WIDTH} "
            f"nodes), not the single tile of {width}"
        )
    out = q.new_empty(1, total, n_vheads, dim_v)
    block_v = min(block_v, dim_v)
    if dim_k < 64:  # tf32x3 dots over K < 64 gave wrong values on the H200 (Triton 3.6): exact fp32 there
        precision = "ieee"
    grid = (triton.cdiv(dim_v, block_v), n_req, n_vheads)
    if width > MAX_SINGLE_TILE:  # block lower-triangular: [64, 64] tiles, [BT2, ...] for block 2
        # sm_90, block 2 on 64 rows: 240 KiB of shared memory at BV = 32, 216 KiB at 16 (227 KiB). On 16 or 32
        # rows BV = 32 compiles to 160 KiB, but was never run on the device: the clamp stays for every block 2
        if precision == "tf32x3":
            block_v = min(block_v, 16)
        grid = (triton.cdiv(dim_v, block_v), n_req, n_vheads)
        tile = {"BT": TWO_BLOCK_TILE, "BT2": _block2_rows(width, block2)}
        kernel, warps = _tree_gdn_verify_two_block_kernel, 8
    else:
        tp = _pow2(width)
        kernel, tile, warps = _tree_gdn_verify_kernel, {"TP": tp}, 4 if tp <= 32 else (8 if tp <= 64 else 16)
    kernel[grid](
        q, k, v, a, b, A_log, dt_bias, out,
        ssm_states, cache_indices, intermediate_states_buffer, intermediate_state_indices,
        retrieve_parent_token,
        query_start_loc, retrieve_parent_token if ancestors is None else ancestors, dim_k**-0.5, width,
        q.stride(1), k.stride(1), v.stride(1), a.stride(-2), b.stride(-2), ssm_states.stride(0),
        intermediate_states_buffer.stride(0), intermediate_states_buffer.stride(1),
        retrieve_parent_token.stride(0), 0 if ancestors is None else ancestors.stride(0),
        **tile, H=n_heads, HV=n_vheads, K=dim_k, V=dim_v, BV=block_v, S=_squarings(depth_bound),
        PREC=precision, THRESHOLD=SOFTPLUS_THRESHOLD, ANC_GIVEN=ancestors is not None, num_warps=warps,
    )  # fmt: skip
    return out


def tree_gdn_commit(
    *, temporal, intermediate_ssm, state_indices, scratch_rows, accept_index, accept_lens, width: int,
    n_heads: int, track_indices=None, track_nodes=None, precision: str = "tf32x3", block_v: int = 32,
) -> None:  # fmt: skip
    """Every layer's state of each request <- the state after its last accepted node (and, where the track
    interval is crossed, the track slot <- the state after the track node), from the accepted path's records.
    temporal [layers, slots, HV, V, K]; intermediate_ssm [layers, rows, width, HV, V, K]; accept_index [bs, A]
    global node indices (request r's nodes are r * width + node), accept_lens [bs] incl. the root."""
    n_layers, _, n_vheads, dim_v, dim_k = temporal.shape
    n_req = state_indices.shape[0]
    if n_req == 0:
        return
    block_v = min(block_v, dim_v)
    has_track = track_indices is not None and track_nodes is not None
    grid = (triton.cdiv(dim_v, block_v), n_req, n_layers * n_vheads)
    accept_index = accept_index.contiguous()
    _tree_gdn_commit_kernel[grid](
        temporal, intermediate_ssm, state_indices, scratch_rows, accept_index, accept_lens,
        track_indices if has_track else state_indices, track_nodes if has_track else state_indices,
        width, temporal.stride(0), temporal.stride(1), intermediate_ssm.stride(0), intermediate_ssm.stride(1),
        intermediate_ssm.stride(2), accept_index.stride(0),
        AP=_pow2(accept_index.shape[1]), H=n_heads, HV=n_vheads, K=dim_k, V=dim_v, BV=block_v,
        HAS_TRACK=has_track, PREC=precision, num_warps=4,
    )  # fmt: skip


def tree_gdn_reference(q, k, v, a, b, A_log, dt_bias, h0, parents, scale=None):
    """SGLang's tree recurrence node by node, in float64 (tests, the GPU bench): one request. q, k [T, H, K];
    v [T, HV, V]; a, b [T, HV]; h0 [HV, V, K]; parents [T] (parents[0] ignored). Returns (o [T, HV, V], states
    [T, HV, V, K])."""
    n, n_heads, dim_k = k.shape
    n_vheads = v.shape[1]
    scale = dim_k**-0.5 if scale is None else scale
    q, k, v, a, b = (x.double() for x in (q, k, v, a, b))
    x = a + dt_bias.double()
    g = -torch.exp(A_log.double()) * torch.where(x <= SOFTPLUS_THRESHOLD, torch.log1p(torch.exp(x)), x)
    beta = torch.sigmoid(b)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * scale
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    group = n_vheads // n_heads
    states = torch.empty(n, n_vheads, v.shape[2], dim_k, dtype=torch.float64)
    out = torch.empty(n, n_vheads, v.shape[2], dtype=torch.float64)
    for i in range(n):
        prev = h0.double() if i == 0 else states[int(parents[i])]
        kk, qq = k[i].repeat_interleave(group, 0), q[i].repeat_interleave(group, 0)  # [HV, K]
        h = prev * torch.exp(g[i])[:, None, None]
        upd = beta[i][:, None] * (v[i] - torch.einsum("hvk,hk->hv", h, kk))
        h = h + upd[:, :, None] * kk[:, None, :]
        states[i] = h
        out[i] = torch.einsum("hvk,hk->hv", h, qq)
    return out, states
