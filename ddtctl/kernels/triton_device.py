"""The DDTree Triton kernels themselves (device code, `@triton.jit`). Their design and exactness, and the host
side that launches them (DDTreePlan, ChainRowMover), are in triton_kernels.py, which imports them."""

from __future__ import annotations

import os

import torch

if (
    not torch.cuda.is_available()
):  # CPU: run the kernels in Triton's interpreter (read when the kernels are defined)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 - TRITON_INTERPRET must be set before triton is imported
import triton.language as tl  # noqa: E402

INT64_MIN_PAD = tl.constexpr(-9223372036854775807)


@triton.jit
def _skey(x):
    """fp32 -> int32 whose signed order is the float order (x must not be NaN; -0.0 canonicalised before)."""
    b = x.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF)


@triton.jit
def _from_skey(k):
    b = tl.where(k >= 0, k, k ^ 0x7FFFFFFF)
    return b.to(tl.float32, bitcast=True)


@triton.jit
def _ukey(x):
    """fp32 -> int64 in [0, 2^32), float order."""
    return _skey(x).to(tl.int64) + 2147483648


@triton.jit
def _load_f32(ptr, mask):
    """fp32 value (-inf where masked) with -0.0 canonicalised to +0.0, the precondition of _skey."""
    x = tl.load(ptr, mask=mask, other=float("-inf")).to(tl.float32)
    return tl.where(x == 0.0, 0.0, x)


@triton.jit(do_not_specialize=["n_tiles", "tiles_per_split", "S", "G_STRIDE"])
def _topk_pass1(
    X,
    GMAX,
    PM,
    PL,
    V,
    n_tiles,
    tiles_per_split,
    S,
    stride_row,
    G_STRIDE,
    GS: tl.constexpr,
    NG: tl.constexpr,
):
    row = tl.program_id(0)
    s = tl.program_id(1)
    t0 = s * tiles_per_split
    t1 = tl.minimum(t0 + tiles_per_split, n_tiles)
    g = tl.arange(0, NG)
    offs2 = g[:, None] * GS + tl.arange(0, GS)[None, :]
    m = tl.max(tl.full([NG], float("-inf"), tl.float32), axis=0)
    acc = tl.sum(tl.zeros([NG], tl.float32), axis=0)
    xrow = X + row.to(tl.int64) * stride_row
    for t in range(t0, t1):
        offs = t * (NG * GS) + offs2
        x = _load_f32(xrow + offs, offs < V)
        gm = tl.max(x, axis=1)
        gidx = t * NG + g
        tl.store(GMAX + row.to(tl.int64) * G_STRIDE + gidx, gm, mask=gidx * GS < V)
        m_new = tl.maximum(m, tl.max(gm, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        acc = acc * tl.exp(m - shift) + tl.sum(tl.sum(tl.exp(x - shift), axis=1), axis=0)
        m = m_new
    tl.store(PM + row * S + s, m)
    tl.store(PL + row * S + s, acc)


@triton.jit
def _chunk(xrow, sel_groups, q0, n_sel, V, GS: tl.constexpr, QG: tl.constexpr, SHIFT: tl.constexpr):
    """Logits of selected groups q0 .. q0+QG-1 (flattened): (shifted keys, valid, token ids, fp32 values)."""
    e = tl.arange(0, QG * GS)
    eq = e // GS
    qv = (q0 + eq) < n_sel
    gid = tl.load(sel_groups + q0 + eq, mask=qv, other=0)
    offs = gid * GS + e % GS
    em = qv & (offs < V)
    x = _load_f32(xrow + offs, em)
    return _ukey(x) >> SHIFT, em, offs, x


@triton.jit(do_not_specialize=["V", "n_groups", "S", "K", "stride_row", "G_STRIDE"])
def _topk_pass2(
    X,
    GMAX,
    PM,
    PL,
    SCR_G,
    SCR_K,
    SCR_C,
    LP_OUT,
    ID_OUT,
    V,
    n_groups,
    S,
    K,
    stride_row,
    G_STRIDE,
    GS: tl.constexpr,
    G_PAD: tl.constexpr,
    S_PAD: tl.constexpr,
    K_PAD: tl.constexpr,
    Q: tl.constexpr,
    SHIFT: tl.constexpr,
    CAP: tl.constexpr,
):
    # SHIFT: low bits of the order keys that are constant for the input dtype (16 for bf16, 13 for fp16, 0 for
    # fp32); bisection runs on key >> SHIFT, which orders and separates that dtype's values exactly.
    row = tl.program_id(0)
    row64 = row.to(tl.int64)
    xrow = X + row64 * stride_row
    sel_groups = SCR_G + row64 * G_PAD
    # ---- log-sum-exp from the split partials
    so = tl.arange(0, S_PAD)
    pm = tl.load(PM + row * S + so, mask=so < S, other=float("-inf"))
    pl = tl.load(PL + row * S + so, mask=so < S, other=0.0)
    mx = tl.max(pm, axis=0)
    mshift = tl.where(mx == float("-inf"), 0.0, mx)
    lse = mshift + tl.log(tl.sum(pl * tl.exp(pm - mshift), axis=0))
    # ---- t = K-th largest group maximum (every group is kept when there are fewer than K groups)
    go = tl.arange(0, G_PAD)
    gv = go < n_groups
    gu = _ukey(_load_f32(GMAX + row64 * G_STRIDE + go, gv)) >> SHIFT
    hi = tl.max(tl.where(gv, gu, 0), axis=0)
    row_max = hi
    lo = tl.min(tl.where(gv, gu, hi), axis=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ok = tl.sum((gv & (gu >= mid)).to(tl.int32), axis=0) >= K
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
    t = tl.where(n_groups >= K, lo, 0)
    sel = gv & (gu >= t)
    n_sel = tl.sum(sel.to(tl.int32), axis=0)
    pos = tl.cumsum(sel.to(tl.int32), axis=0) - 1
    tl.store(sel_groups + pos, go, mask=sel)
    tl.debug_barrier()
    # ---- fast path: compact every logit >= t of the selected groups (usually ~K of them) and sort them
    cbase = n_sel * 0
    co = tl.arange(0, CAP)
    for q0 in range(0, n_sel, Q):
        u, em, offs, x = _chunk(xrow, sel_groups, q0, n_sel, V, GS, Q, SHIFT)
        cand = em & (u >= t)
        cpos = cbase + tl.cumsum(cand.to(tl.int32), axis=0) - 1
        key = (_skey(x).to(tl.int64) << 32) | (2147483647 - offs).to(tl.int64)
        tl.store(SCR_C + row64 * CAP + cpos, key, mask=cand & (cpos < CAP))
        cbase += tl.sum(cand.to(tl.int32), axis=0)
    tl.debug_barrier()
    if cbase <= CAP:
        ckeys = tl.load(SCR_C + row64 * CAP + co, mask=co < cbase, other=INT64_MIN_PAD)
        ckeys = tl.sort(ckeys, descending=True)
        cxv = _from_skey((ckeys >> 32).to(tl.int32))
        cids = 2147483647 - (ckeys & 0xFFFFFFFF).to(tl.int32)
        tl.store(LP_OUT + row64 * K + co, cxv - lse, mask=co < K)
        tl.store(ID_OUT + row64 * K + co, cids, mask=co < K)
    else:
        # ---- fallback (heavy ties): exact K-th largest key by bisection, first chunk kept in registers
        u0, em0, offs0, x0 = _chunk(xrow, sel_groups, 0, n_sel, V, GS, Q, SHIFT)
        lo = t
        hi = row_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            cnt = tl.sum((em0 & (u0 >= mid)).to(tl.int32), axis=0)
            for q0 in range(Q, n_sel, Q):
                u, em, offs, x = _chunk(xrow, sel_groups, q0, n_sel, V, GS, Q, SHIFT)
                cnt += tl.sum((em & (u >= mid)).to(tl.int32), axis=0)
            ok = cnt >= K
            lo = tl.where(ok, mid, lo)
            hi = tl.where(ok, hi, mid - 1)
        thr = lo
        # ---- ties at the threshold: keep the lowest token ids
        n_gt = tl.sum((em0 & (u0 > thr)).to(tl.int32), axis=0)
        n_eq = tl.sum((em0 & (u0 == thr)).to(tl.int32), axis=0)
        for q0 in range(Q, n_sel, Q):
            u, em, offs, x = _chunk(xrow, sel_groups, q0, n_sel, V, GS, Q, SHIFT)
            n_gt += tl.sum((em & (u > thr)).to(tl.int32), axis=0)
            n_eq += tl.sum((em & (u == thr)).to(tl.int32), axis=0)
        need = K - n_gt
        split = n_eq > need
        jlo = tl.where(split, 0, V)
        jhi = tl.where(split, V - 1, V)
        while jlo < jhi:
            mid = (jlo + jhi) // 2
            cnt = tl.sum((em0 & (u0 == thr) & (offs0 <= mid)).to(tl.int32), axis=0)
            for q0 in range(Q, n_sel, Q):
                u, em, offs, x = _chunk(xrow, sel_groups, q0, n_sel, V, GS, Q, SHIFT)
                cnt += tl.sum((em & (u == thr) & (offs <= mid)).to(tl.int32), axis=0)
            ok = cnt >= need
            jhi = tl.where(ok, mid, jhi)
            jlo = tl.where(ok, jlo, mid + 1)
        jthr = jlo
        # ---- compact the K survivors, sort them, write lp and ids
        take = em0 & ((u0 > thr) | ((u0 == thr) & (offs0 <= jthr)))
        tpos = tl.cumsum(take.to(tl.int32), axis=0) - 1
        key = (_skey(x0).to(tl.int64) << 32) | (2147483647 - offs0).to(tl.int64)
        tl.store(SCR_K + row64 * K_PAD + tpos, key, mask=take)
        base = tl.sum(take.to(tl.int32), axis=0)
        for q0 in range(Q, n_sel, Q):
            u, em, offs, x = _chunk(xrow, sel_groups, q0, n_sel, V, GS, Q, SHIFT)
            take = em & ((u > thr) | ((u == thr) & (offs <= jthr)))
            tpos = base + tl.cumsum(take.to(tl.int32), axis=0) - 1
            key = (_skey(x).to(tl.int64) << 32) | (2147483647 - offs).to(tl.int64)
            tl.store(SCR_K + row64 * K_PAD + tpos, key, mask=take)
            base += tl.sum(take.to(tl.int32), axis=0)
        tl.debug_barrier()
        ko = tl.arange(0, K_PAD)
        keys = tl.load(SCR_K + row64 * K_PAD + ko, mask=ko < K, other=INT64_MIN_PAD)
        keys = tl.sort(keys, descending=True)
        xv = _from_skey((keys >> 32).to(tl.int32))
        ids = 2147483647 - (keys & 0xFFFFFFFF).to(tl.int32)
        tl.store(LP_OUT + row64 * K + ko, xv - lse, mask=ko < K)
        tl.store(ID_OUT + row64 * K + ko, ids, mask=ko < K)


@triton.jit
def _argmax_payload(k1, a1, b1, c1, k2, a2, b2, c2):
    """tl.reduce combine: the larger key (keys of live entries are unique) with its three payloads."""
    take1 = k1 > k2
    return tl.where(take1, k1, k2), tl.where(take1, a1, a2), tl.where(take1, b1, b2), tl.where(take1, c1, c2)


@triton.jit(do_not_specialize=["L", "K", "B"])
def _build_kernel(
    LP,
    IDS,
    TOK_OUT,
    DEP_OUT,
    PAR_OUT,
    SCORE_OUT,
    PRE_OUT,
    SIZE_OUT,
    L,
    K,
    B,
    F: tl.constexpr,
):
    # Lane n holds node n: its preorder index and subtree size in the current tree, depth, parent, score,
    # and its frontier entry (next child rank crank, candidate score cscore, the log-prob after that nlp,
    # and c0/c1 = the first two log-probs one level below, which a new child of n needs). One tuple
    # reduction per pop; the loads a pop issues are merged one iteration later ("pending"), so their
    # latency hides behind the next reduction.
    req = tl.program_id(0).to(tl.int64)
    lpb = LP + req * L * K
    n = tl.arange(0, F)
    zi = tl.zeros([F], tl.int32)
    root = n == 0
    pre = zi
    size = tl.where(root, 1, 0)
    depth = zi
    parent = zi - 1
    flat = zi
    crank = zi
    nscore = tl.zeros([F], tl.float32)
    ninf = tl.full([F], float("-inf"), tl.float32)
    # every lp load goes through _load_f32: -0.0 -> +0.0, else _skey would
    # rank a -0.0 score below +0.0 (issue #14)
    cscore = tl.where(root, _load_f32(lpb, K > 0), ninf)
    nlp = tl.where(root, _load_f32(lpb + 1, K > 1), ninf)
    c0 = tl.where(root, _load_f32(lpb + K, L > 1), ninf)
    c1 = tl.where(root, _load_f32(lpb + K + 1, (L > 1) & (K > 1)), ninf)
    cvalid = root
    pend_p = tl.sum(zi, axis=0) - 1
    pend_c = pend_p
    pend_nlp = tl.max(ninf, axis=0)
    pend_c0 = pend_nlp
    pend_c1 = pend_nlp
    for i in range(1, B + 1):
        ins = pre + size
        low = ((2047 - ins) << 16) | (depth << 11) | n
        key = tl.where(cvalid, (_skey(cscore).to(tl.int64) << 32) | low.to(tl.int64), INT64_MIN_PAD)
        kmax, c0p, c1p, rp = tl.reduce((key, c0, c1, crank), 0, _argmax_payload)
        # merge the loads issued by the previous pop
        nlp = tl.where(n == pend_p, pend_nlp, nlp)
        c0 = tl.where(n == pend_c, pend_c0, c0)
        c1 = tl.where(n == pend_c, pend_c1, c1)
        p = (kmax & 2047).to(tl.int32)
        c0p = tl.where(p == pend_c, pend_c0, c0p)
        c1p = tl.where(p == pend_c, pend_c1, c1p)
        is_p = n == p
        dp = ((kmax >> 11) & 31).to(tl.int32)
        insp = (2047 - ((kmax >> 16) & 2047)).to(tl.int32)
        score_new = _from_skey((kmax >> 32).to(tl.int32))
        d_new = dp + 1
        # preorder bookkeeping: the new node goes at insp, as the last node of p's subtree
        alive = n < i
        anc = alive & (pre < insp) & (insp <= pre + size) & (depth <= dp)
        size = size + anc.to(tl.int32)
        pre = tl.where(alive & (pre >= insp), pre + 1, pre)
        # p's frontier entry moves to its next child rank
        cscore = tl.where(is_p, nscore + nlp, cscore)
        cvalid = tl.where(is_p, rp + 1 < K, cvalid)
        crank = tl.where(is_p, crank + 1, crank)
        pend_p = p
        pend_nlp = _load_f32(lpb + dp * K + rp + 2, rp + 2 < K)
        # the new node i
        newn = n == i
        pre = tl.where(newn, insp, pre)
        size = tl.where(newn, 1, size)
        depth = tl.where(newn, d_new, depth)
        parent = tl.where(newn, p, parent)
        flat = tl.where(newn, dp * K + rp, flat)
        nscore = tl.where(newn, score_new, nscore)
        crank = tl.where(newn, 0, crank)
        cscore = tl.where(newn, score_new + c0p, cscore)
        nlp = tl.where(newn, c1p, nlp)
        cvalid = tl.where(newn, d_new < L, cvalid)
        pend_c = i
        pend_c0 = _load_f32(lpb + (d_new + 1) * K, d_new + 1 < L)
        pend_c1 = _load_f32(lpb + (d_new + 1) * K + 1, (d_new + 1 < L) & (K > 1))
    node = (n >= 1) & (n <= B)
    tok = tl.load(IDS + req * L * K + flat, mask=node, other=0)
    tl.store(TOK_OUT + req * B + n - 1, tok, mask=node)
    tl.store(DEP_OUT + req * B + n - 1, depth, mask=node)
    tl.store(SCORE_OUT + req * B + n - 1, nscore, mask=node)
    tl.store(PAR_OUT + req * (B + 1) + n, parent, mask=n <= B)
    tl.store(PRE_OUT + req * (B + 1) + n, pre, mask=n <= B)
    tl.store(SIZE_OUT + req * (B + 1) + n, size, mask=n <= B)


@triton.jit(do_not_specialize=["B", "W"])
def _compile_kernel(
    PAR,
    PRE,
    SIZE,
    TOK,
    DEP,
    ROOT,
    START,
    IDS_OUT,
    POS_OUT,
    VIS_OUT,
    PACK_OUT,
    RIDX_OUT,
    RNEXT_OUT,
    RSIB_OUT,
    B,
    W,
    BR: tl.constexpr,
    WT: tl.constexpr,
):
    # Node j is an ancestor-or-self of i iff pre[j] <= pre[i] < pre[j] + size[j] (preorder intervals from the
    # build); the first child of i is the node at pre[i] + 1, the next sibling the node at pre[i] + size[i] if
    # it has i's parent. No pointer chasing: every load is a vector load.
    req = tl.program_id(0).to(tl.int64)
    rb = tl.program_id(1)
    n1 = B + 1
    rows = rb * BR + tl.arange(0, BR)
    rv = rows < n1
    base = req * n1
    tok = tl.load(TOK + req * B + rows - 1, mask=rv & (rows >= 1), other=0)
    root_tok = tl.load(ROOT + req)
    dep = tl.load(DEP + req * B + rows - 1, mask=rv & (rows >= 1), other=0)
    start = tl.load(START + req)
    tl.store(IDS_OUT + base + rows, tl.where(rows == 0, root_tok, tok), mask=rv)
    tl.store(POS_OUT + base + rows, start + dep, mask=rv)
    tl.store(RIDX_OUT + base + rows, base + rows, mask=rv)
    par_r = tl.load(PAR + base + rows, mask=rv, other=-2)[:, None, None]
    pre_r = tl.load(PRE + base + rows, mask=rv, other=-5)[:, None, None]
    size_r = tl.load(SIZE + base + rows, mask=rv, other=0)[:, None, None]
    w = tl.arange(0, WT)
    j = tl.arange(0, 32)
    rows3 = rows[:, None, None]
    rv3 = rv[:, None, None]
    big = 1 << 30
    first_child = tl.full([BR], big, tl.int32)
    next_sib = tl.full([BR], big, tl.int32)
    for c0 in range(0, n1, 32 * WT):
        cols3 = c0 + w[None, :, None] * 32 + j[None, None, :]
        cv3 = cols3 < n1
        pre_c = tl.load(PRE + base + cols3, mask=cv3, other=-(1 << 20))
        size_c = tl.load(SIZE + base + cols3, mask=cv3, other=0)
        par_c = tl.load(PAR + base + cols3, mask=cv3, other=-3)
        vis = rv3 & cv3 & (pre_c <= pre_r) & (pre_r < pre_c + size_c)
        tl.store(VIS_OUT + base * n1 + rows3 * n1 + cols3, vis.to(tl.int8), mask=rv3 & cv3)
        bits = tl.sum(vis.to(tl.int32) << j[None, None, :], axis=2)
        wcol = c0 // 32 + w
        tl.store(
            PACK_OUT + base * W + rows[:, None] * W + wcol[None, :],
            bits,
            mask=rv[:, None] & (wcol[None, :] < W),
        )
        fc = tl.where(cv3 & (size_r > 1) & (pre_c == pre_r + 1), cols3, big)
        first_child = tl.minimum(first_child, tl.min(tl.min(fc, axis=2), axis=1))
        ns = tl.where(cv3 & (pre_c == pre_r + size_r) & (par_c == par_r), cols3, big)
        next_sib = tl.minimum(next_sib, tl.min(tl.min(ns, axis=2), axis=1))
    tl.store(RNEXT_OUT + base + rows, tl.where(first_child == big, -1, first_child), mask=rv)
    tl.store(RSIB_OUT + base + rows, tl.where(next_sib == big, -1, next_sib), mask=rv)


@triton.jit(do_not_specialize=["B", "L"])
def _follow_kernel(
    IDS,
    PAR,
    POST,
    ACC_OUT,
    ALEN_OUT,
    BONUS_OUT,
    B,
    L,
    F: tl.constexpr,
):
    # A node matches when its token is its parent's posterior (one gather); the walk descends to the
    # lowest-index matching child of the current node, all in registers.
    req = tl.program_id(0).to(tl.int64)
    n1 = B + 1
    n = tl.arange(0, F)
    nv = n < n1
    par = tl.load(PAR + req * n1 + n, mask=nv, other=-2)
    tok = tl.load(IDS + req * n1 + n, mask=nv, other=-1)
    post_par = tl.load(POST + req * n1 + par, mask=nv & (par >= 0), other=-1)
    ok = nv & (n >= 1) & (tok == post_par)
    cur = tl.sum(tl.zeros([F], tl.int32), axis=0)
    alen = cur
    tl.store(ACC_OUT + req * (L + 1), cur)
    for s in range(1, L + 1):
        nxt = tl.min(tl.where(ok & (par == cur), n, F), axis=0)
        found = nxt < F
        tl.store(ACC_OUT + req * (L + 1) + s, tl.where(found, nxt, -1))
        cur = tl.where(found, nxt, cur)
        alen += found.to(tl.int32)
        ok = ok & found
    tl.store(ALEN_OUT + req, alen)
    tl.store(BONUS_OUT + req, tl.load(POST + req * n1 + cur))


@triton.jit(do_not_specialize=["L"])
def _move_chain_rows_kernel(ptrs, tgt, src, L, ROW_WORDS: tl.constexpr, BLOCK: tl.constexpr):
    """grid (buffers, batch, row chunks): row src[b, j] -> row tgt[b, j] of buffer `ptrs[layer]`, j ascending.

    Chain commits read node acc[j] >= j into chain position j (a node at depth j has j ancestors before it in
    the build order), so walking j upwards inside one program never reads a row this program already wrote;
    programs of different requests or row chunks touch disjoint words."""
    layer = tl.program_id(0)
    req = tl.program_id(1)
    offs = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < ROW_WORDS
    base = tl.load(ptrs + layer).to(tl.pointer_type(tl.int32))
    for j in range(L):
        s = tl.load(src + req * L + j).to(tl.int64)
        d = tl.load(tgt + req * L + j).to(tl.int64)
        if s != d:
            x = tl.load(base + s * ROW_WORDS + offs, mask=mask)
            tl.store(base + d * ROW_WORDS + offs, x, mask=mask)
