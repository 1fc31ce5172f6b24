"""Split-KV attention for DDTREE's target verify: each node sees the whole prefix and its tree ancestors.

On the triton attention backend a verify step runs SGLang's prefill kernel (`extend_attention_fwd`) with the
tree as a custom mask. That kernel walks the (long) prefix serially per (request, head, query block); at
batch 1 its grid is a few dozen programs and the step is latency-bound. Here the prefix is split across
programs (flash-decode style) and the tree is handled apart:

  stage 1  per (request, query block, head, split): attention of the block's rows over the split's slice of
           the prefix (no mask: the tree mask only restricts node-vs-node) -> a normalised partial output
           and its log-sum-exp per row, in preallocated fp32 scratch;
  stage 2  per (request, query block, head): the partials merged by their LSE (an empty split, LSE -inf,
           weighs 0), then the node-vs-node block as `tl.dot` tiles under the tree mask read from SGLang's
           custom mask, continued in the same online softmax, and the output written.

`tree_verify_fwd` takes `extend_attention_fwd`'s positional arguments and returns True when it served the
call, False (doing nothing) for what it does not serve, so the caller falls back to SGLang's kernel. Every
decision is made from static shapes and Python scalars (no device read): the call runs inside CUDA graph
capture.

Numerics follow `_fwd_kernel`: q cast to the KV pool's dtype for the prefix dot, scores scaled by
sm_scale * k_scale on the prefix and sm_scale on the nodes, probabilities cast to V's dtype for the P.V
dots, fp32 accumulation, the prefix output scaled by v_scale.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

if not torch.cuda.is_available():  # CPU: Triton's interpreter (read when the kernels are defined)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 - TRITON_INTERPRET must be set before triton is imported
import triton.language as tl  # noqa: E402

MAX_L_EXT = 256  # verify nodes per request served (DDTREE: budget + 1 <= 129 in practice)
MAX_HEAD_DIM = 256
MAX_SPLITS = 16
MIN_SPLIT_KEYS = 128  # a split shorter than this costs more in partials than it saves in latency (a multiple
# of every BLOCK_N)
# H200, bench/tree_attn_gpu.py (2026-12-01): one 128-row tile beat 32/64-row tiles at 65 and 129 nodes on
# both shapes (8B: 69 vs 112 us, 27B: 88 vs 180 us, batch 1, 4k prefix); smaller trees take the next power
# of two
MAX_BLOCK_M = 128
TARGET_PROGRAMS = 4 * 132  # stage-1 programs to aim for: a few per SM of an H200


@triton.jit
def _prefix_partials_kernel(
    Q, K_Buffer, V_Buffer, qo_indptr, kv_indptr, kv_indices, Part_O, Part_Lse,
    sm_scale, k_scale, v_scale,
    s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_ps, s_pt, s_ph, s_ls, s_lt,
    GROUP: tl.constexpr, N_QB: tl.constexpr, N_SPLITS: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    MIN_KEYS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0) // N_QB
    qb = tl.program_id(0) % N_QB
    head = tl.program_id(1)
    split = tl.program_id(2)
    kv_head = head // GROUP
    q_start = tl.load(qo_indptr + b)
    l_ext = tl.load(qo_indptr + b + 1) - q_start
    if qb * BLOCK_M < l_ext:
        rows = qb * BLOCK_M + tl.arange(0, BLOCK_M)
        live = rows < l_ext
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        kv_start = tl.load(kv_indptr + b)
        prefix = tl.load(kv_indptr + b + 1) - kv_start
        # at least MIN_KEYS keys a split: a short prefix leaves the last splits empty (under CUDA graphs the
        # split count is chosen without knowing the prefix)
        per_split = tl.maximum(tl.cdiv(tl.cdiv(prefix, N_SPLITS), BLOCK_N) * BLOCK_N, MIN_KEYS)
        lo = per_split * split
        hi = tl.minimum(lo + per_split, prefix)
        tok = (q_start + rows).to(tl.int64)
        lse_at = Part_Lse + split * s_ls + tok * s_lt + head
        if hi > lo:
            q = tl.load(
                Q + tok[:, None] * s_qt + head * s_qh + offs_d[None, :],
                mask=live[:, None] & (offs_d[None, :] < D),
                other=0.0,
            )
            q = q.to(K_Buffer.dtype.element_ty)
            e_max = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
            e_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
            acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
            for start in tl.range(lo, hi, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                in_split = cols < hi
                loc = tl.load(kv_indices + kv_start + cols, mask=in_split, other=0).to(tl.int64)
                k = tl.load(
                    K_Buffer + loc[None, :] * s_kt + kv_head * s_kh + offs_d[:, None],
                    mask=in_split[None, :] & (offs_d[:, None] < D),
                    other=0.0,
                )
                qk = tl.dot(q, k) * (sm_scale * k_scale)
                qk = tl.where(in_split[None, :], qk, float("-inf"))
                v = tl.load(
                    V_Buffer + loc[:, None] * s_vt + kv_head * s_vh + offs_dv[None, :],
                    mask=in_split[:, None] & (offs_dv[None, :] < DV),
                    other=0.0,
                )
                n_max = tl.maximum(tl.max(qk, 1), e_max)
                rescale = tl.exp(e_max - n_max)
                p = tl.exp(qk - n_max[:, None])
                acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
                e_sum = e_sum * rescale + tl.sum(p, 1)
                e_max = n_max
            out = acc * (v_scale / e_sum[:, None])
            tl.store(
                Part_O + split * s_ps + tok[:, None] * s_pt + head * s_ph + offs_dv[None, :],
                out,
                mask=live[:, None] & (offs_dv[None, :] < DV),
            )
            tl.store(lse_at, e_max + tl.log(e_sum), mask=live)
        else:  # an empty split (short prefix): LSE -inf, weight 0 in the merge, its output never read
            tl.store(lse_at, tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf"), mask=live)


@triton.jit
def _merge_prefix(
    Part_O,
    Part_Lse,
    tok,
    live,
    head,
    offs_dv,
    s_ps,
    s_pt,
    s_ph,
    s_ls,
    s_lt,
    N_SPLITS: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """The prefix splits merged by LSE as an online-softmax state (max, sum, unnormalised output); no prefix
    at all gives (-inf, 0, 0)."""
    e_max = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    for s in tl.range(0, N_SPLITS):
        e_max = tl.maximum(
            e_max, tl.load(Part_Lse + s * s_ls + tok * s_lt + head, mask=live, other=float("-inf"))
        )
    base = tl.where(e_max == float("-inf"), 0.0, e_max)
    e_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    for s in tl.range(0, N_SPLITS):
        lse = tl.load(Part_Lse + s * s_ls + tok * s_lt + head, mask=live, other=float("-inf"))
        ran = live & (lse != float("-inf"))  # an empty split's output slot holds stale scratch
        part = tl.load(
            Part_O + s * s_ps + tok[:, None] * s_pt + head * s_ph + offs_dv[None, :],
            mask=ran[:, None] & (offs_dv[None, :] < DV),
            other=0.0,
        )
        w = tl.exp(lse - base)
        e_sum += w
        acc += w[:, None] * part
    return e_max, e_sum, acc


@triton.jit
def _tree_combine_kernel(
    Q, K_Ext, V_Ext, Out, Part_O, Part_Lse, qo_indptr, kv_indptr, Mask, mask_indptr, sm_scale,
    s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_ot, s_oh, s_ps, s_pt, s_ph, s_ls, s_lt,
    GROUP: tl.constexpr, N_QB: tl.constexpr, N_SPLITS: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0) // N_QB
    qb = tl.program_id(0) % N_QB
    head = tl.program_id(1)
    kv_head = head // GROUP
    q_start = tl.load(qo_indptr + b)
    l_ext = tl.load(qo_indptr + b + 1) - q_start
    if qb * BLOCK_M < l_ext:
        rows = qb * BLOCK_M + tl.arange(0, BLOCK_M)
        live = rows < l_ext
        tok = (q_start + rows).to(tl.int64)
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        e_max, e_sum, acc = _merge_prefix(
            Part_O,
            Part_Lse,
            tok,
            live,
            head,
            offs_dv,
            s_ps,
            s_pt,
            s_ph,
            s_ls,
            s_lt,
            N_SPLITS,
            DV,
            BLOCK_M,
            BLOCK_DV,
        )
        prefix = tl.load(kv_indptr + b + 1) - tl.load(kv_indptr + b)
        # request b's mask: [l_ext rows, prefix + l_ext columns] row-major; node columns after the prefix
        mask_rows = Mask + tl.load(mask_indptr + b) + rows.to(tl.int64) * (prefix + l_ext) + prefix
        q = tl.load(
            Q + tok[:, None] * s_qt + head * s_qh + offs_d[None, :],
            mask=live[:, None] & (offs_d[None, :] < D),
            other=0.0,
        )
        # SGLang's causal bound: no key past the block's last row (a tree lists ancestors before descendants)
        end = tl.minimum(l_ext, (qb + 1) * BLOCK_M) if IS_CAUSAL else l_ext
        for start in tl.range(0, end, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            key_live = cols < end
            pair = live[:, None] & key_live[None, :]
            bits = tl.load(mask_rows[:, None] + cols[None, :], mask=pair, other=0)
            seen = pair & (bits != 0)
            key_tok = (q_start + cols).to(tl.int64)
            k = tl.load(
                K_Ext + key_tok[None, :] * s_kt + kv_head * s_kh + offs_d[:, None],
                mask=key_live[None, :] & (offs_d[:, None] < D),
                other=0.0,
            )
            qk = tl.where(seen, tl.dot(q, k) * sm_scale, float("-inf"))
            v = tl.load(
                V_Ext + key_tok[:, None] * s_vt + kv_head * s_vh + offs_dv[None, :],
                mask=key_live[:, None] & (offs_dv[None, :] < DV),
                other=0.0,
            )
            row_max = tl.max(qk, 1)
            n_max = tl.maximum(tl.where(row_max == float("-inf"), -1e20, row_max), e_max)
            rescale = tl.exp(e_max - n_max)
            p = tl.exp(qk - n_max[:, None])
            acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
            e_sum = e_sum * rescale + tl.sum(p, 1)
            e_max = n_max
        out = acc / tl.where(e_sum == 0.0, 1.0, e_sum)[:, None]  # a row that sees nothing: 0, as SGLang's
        tl.store(
            Out + tok[:, None] * s_ot + head * s_oh + offs_dv[None, :],
            out.to(Out.dtype.element_ty),
            mask=live[:, None] & (offs_dv[None, :] < DV),
        )


@dataclass(frozen=True)
class Launch:
    """The tiles of one call: query rows per program, key columns per step and warps of each stage, and the
    prefix split count. Stage 2 takes smaller tiles than stage 1: it holds the merged partials, the node
    tiles and the mask at once (bigger tiles spilled registers when compiled for sm_90 with Triton 3.9)."""

    block_m: int
    block_n: int
    num_warps: int
    n_splits: int
    combine_block_m: int
    combine_block_n: int
    combine_warps: int


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def choose_launch(
    bs: int,
    h_q: int,
    l_ext: int,
    head_dim: int,
    avg_prefix: float,
    n_splits: int | None = None,
    block_m: int | None = None,
) -> Launch:
    """Tiles from static shapes only. Splits: enough stage-1 programs to fill the GPU (TARGET_PROGRAMS), no
    more than the average prefix (kv_indices' length / bs, an upper bound under CUDA graphs, where kv_indices
    is a max-size buffer) gives MIN_SPLIT_KEYS each, a power of two in [1, MAX_SPLITS]."""
    wide = head_dim > 128
    if block_m is None:  # one query tile over the whole tree up to 128 nodes: each tile re-reads the prefix
        block_m = min(MAX_BLOCK_M, max(16, _pow2_at_least(l_ext)))
    n_qb = -(-l_ext // block_m)
    if n_splits is None:
        base = max(1, bs * h_q * n_qb)
        want = _pow2_at_least(max(1, -(-TARGET_PROGRAMS // base)))
        by_len = max(1, int(avg_prefix) // MIN_SPLIT_KEYS)
        n_splits = max(1, min(MAX_SPLITS, want, 1 << (by_len.bit_length() - 1)))
    return Launch(
        block_m=block_m,
        block_n=32 if wide else 64,
        num_warps=8,
        n_splits=n_splits,
        combine_block_m=min(16 if wide else 32, max(16, _pow2_at_least(l_ext))),
        combine_block_n=32,
        combine_warps=8,
    )


class TreeVerifyScratch:
    """fp32 partials [splits, tokens, heads, Dv] and their LSE [splits, tokens, heads] of one split count,
    reused by every call (they are transient within a call) so their addresses stay fixed for CUDA graph
    replay. Sized by the largest call so far: SGLang captures its largest batch first. A buffer outgrown later
    is kept alive, not freed, so a graph captured on it still writes memory of its own."""

    def __init__(self, n_splits: int, h_q: int, dv: int, device: torch.device) -> None:
        self.n_splits, self.h_q, self.dv, self.device = n_splits, h_q, dv, device
        self.tokens = 0
        self.part_o = torch.empty(0, device=device)
        self.part_lse = torch.empty(0, device=device)
        self.retired: list[torch.Tensor] = []

    def ensure(self, tokens: int) -> None:
        if tokens > self.tokens:
            self.retired += [self.part_o, self.part_lse]
            self.tokens = tokens
            self.part_o = torch.empty(
                self.n_splits, tokens, self.h_q, self.dv, dtype=torch.float32, device=self.device
            )
            self.part_lse = torch.empty(
                self.n_splits, tokens, self.h_q, dtype=torch.float32, device=self.device
            )


_SCRATCH: dict[tuple, TreeVerifyScratch] = {}


def scratch_for(n_splits: int, h_q: int, dv: int, device: torch.device, tokens: int) -> TreeVerifyScratch:
    key = (n_splits, h_q, dv, str(device))
    found = _SCRATCH.get(key)
    if found is None:
        found = _SCRATCH[key] = TreeVerifyScratch(n_splits, h_q, dv, device)
    found.ensure(tokens)
    return found


def served_l_ext(
    q,
    k,
    v,
    o,
    k_buffer,
    v_buffer,
    qo_indptr,
    custom_mask,
    max_len_extend,
    k_scale,
    v_scale,
    logit_cap,
    sliding_window_size,
    sinks,
    window_kv_offsets,
    xai_temperature_len,
) -> int | None:
    """The per-request verify width when this kernel serves the call (from static shapes only), else None."""
    if custom_mask is None or sinks is not None or window_kv_offsets is not None:
        return None
    if (logit_cap or 0) > 0 or (sliding_window_size or -1) > 0 or (xai_temperature_len or -1) > 0:
        return None
    if isinstance(k_scale, torch.Tensor) or isinstance(v_scale, torch.Tensor):
        return None  # reading a device scale would sync; SGLang passes Python floats
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or k_buffer.dim() != 3 or v_buffer.dim() != 3:
        return None
    h_q, h_kv, dim = q.shape[1], k.shape[1], q.shape[2]
    if h_kv == 0 or h_q % h_kv or k_buffer.shape[1] != h_kv or v_buffer.shape[1] != h_kv:
        return None
    if not (k.shape[2] == dim == k_buffer.shape[2] == v.shape[2] == v_buffer.shape[2]) or dim > MAX_HEAD_DIM:
        return None  # MLA (Dk != Dv) and wider heads are not tiled
    if dim < 16 or any(t.stride(2) != 1 for t in (q, k, v, o, k_buffer, v_buffer)):
        return None
    bs = qo_indptr.shape[0] - 1
    if bs < 1 or q.shape[0] % bs or k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        return None
    l_ext = q.shape[0] // bs
    try:
        if int(max_len_extend) != l_ext:
            return None
    except (TypeError, ValueError):
        return None
    return l_ext if 1 <= l_ext <= MAX_L_EXT else None


def tree_verify_fwd(
    q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr,
    max_len_extend, k_scale, v_scale, sm_scale=None, logit_cap=0.0, skip_prefix_custom_mask=True,
    sliding_window_size=-1, sinks=None, window_kv_offsets=None, xai_temperature_len=-1,
    max_bs: int | None = None, n_splits: int | None = None, block_m: int | None = None,
) -> bool:  # fmt: skip
    """`extend_attention_fwd` for a DDTREE verify (custom tree mask, every request the same width): writes o
    and returns True, or returns False and touches nothing. q/k/v/o [tokens, heads, D] (k/v the nodes' own),
    k_buffer/v_buffer the KV pool [slots, kv heads, D]. max_bs (SGLang's split-KV call site passes its request
    pool size) is accepted and not used: the scratch is sized by the calls (TreeVerifyScratch), not by a pool
    that may be far larger than any verify batch. n_splits and block_m override the automatic tiles."""
    if not skip_prefix_custom_mask:
        return False  # a mask over the prefix columns too: every prefix key here is seen by every node
    l_ext = served_l_ext(
        q,
        k,
        v,
        o,
        k_buffer,
        v_buffer,
        qo_indptr,
        custom_mask,
        max_len_extend,
        k_scale,
        v_scale,
        logit_cap,
        sliding_window_size,
        sinks,
        window_kv_offsets,
        xai_temperature_len,
    )
    if l_ext is None:
        return False
    bs, h_q, dim = qo_indptr.shape[0] - 1, q.shape[1], q.shape[2]
    launch = choose_launch(bs, h_q, l_ext, dim, kv_indices.shape[0] / bs, n_splits, block_m)
    scratch = scratch_for(launch.n_splits, h_q, dim, q.device, bs * l_ext)
    part_o, part_lse = scratch.part_o, scratch.part_lse
    sm_scale = sm_scale or dim**-0.5
    block_d = max(16, _pow2_at_least(dim))
    shared = dict(
        GROUP=h_q // k.shape[1],
        N_SPLITS=launch.n_splits,
        D=dim,
        DV=dim,
        BLOCK_D=block_d,
        BLOCK_DV=block_d,
        num_stages=1,
    )
    part_strides = (
        part_o.stride(0),
        part_o.stride(1),
        part_o.stride(2),
        part_lse.stride(0),
        part_lse.stride(1),
    )
    n_qb = -(-l_ext // launch.block_m)
    _prefix_partials_kernel[(bs * n_qb, h_q, launch.n_splits)](
        q, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, part_o, part_lse,
        sm_scale, float(k_scale), float(v_scale),
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0),
        v_buffer.stride(1), *part_strides, N_QB=n_qb, BLOCK_M=launch.block_m, BLOCK_N=launch.block_n,
        MIN_KEYS=MIN_SPLIT_KEYS,
        num_warps=launch.num_warps, **shared,
    )  # fmt: skip
    n_qb = -(-l_ext // launch.combine_block_m)
    _tree_combine_kernel[(bs * n_qb, h_q)](
        q, k, v, o, part_o, part_lse, qo_indptr, kv_indptr, custom_mask, mask_indptr, sm_scale,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0),
        o.stride(1), *part_strides, IS_CAUSAL=bool(is_causal), N_QB=n_qb, BLOCK_M=launch.combine_block_m,
        BLOCK_N=launch.combine_block_n, num_warps=launch.combine_warps, **shared,
    )  # fmt: skip
    return True


def tree_attention_reference(
    q,
    k,
    v,
    k_pool,
    v_pool,
    prefix_slots,
    visibility,
    sm_scale=None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """One request in float64: q/k/v [n, heads, D] the nodes', k_pool/v_pool [slots, kv heads, D],
    prefix_slots [p] the prefix's pool slots, visibility bool [n, n] (row i: the nodes node i sees). Returns
    [n, heads, D]."""
    n, h_q, dim = q.shape
    group = h_q // k.shape[1]
    scale = sm_scale or dim**-0.5
    kp = k_pool[prefix_slots].double().repeat_interleave(group, 1)
    vp = v_pool[prefix_slots].double().repeat_interleave(group, 1)
    kn, vn = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    qd = q.double()
    s_pre = torch.einsum("nhd,phd->hnp", qd, kp) * scale * k_scale
    s_node = torch.einsum("nhd,mhd->hnm", qd, kn) * scale
    s_node = s_node.masked_fill(~visibility.bool()[None], float("-inf"))
    w = torch.softmax(torch.cat([s_pre, s_node], -1), -1)
    p = kp.shape[0]
    return torch.einsum("hnp,phd->nhd", w[..., :p], vp) * v_scale + torch.einsum(
        "hnm,mhd->nhd", w[..., p:], vn
    )
