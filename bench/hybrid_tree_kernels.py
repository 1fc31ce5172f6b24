#!/usr/bin/env python3
"""Kernel-level exactness proof (tier a): SGLang 0.5.23's own GDN tree-verify kernels give every node of a DDTREE draft
tree the recurrent state of its own root-to-node path.

What runs (float32, SGLang's kernels only, no server):
  tree     exactly what gdn_backend.forward_extend does for TARGET_VERIFY with topk > 1 (Triton path, no ReplaySSM):
           causal_conv1d_update(x [bs, dim, n] view, conv pool, w, bias, "silu", conv_state_indices,
           intermediate_conv_window (DENSE [slots+1, n, dim, K-1]), intermediate_state_indices,
           retrieve_next_token, retrieve_next_sibling, retrieve_parent_token = empty_like(next_token)), then
           torch.split + view of q/k/v (the strided route the backend takes for tree verify), then
           TritonGDNKernel.target_verify = fused_sigmoid_gating_delta_rule_update(..., disable_state_update=True,
           intermediate_states_buffer [slots+1, n, HV, V, K], intermediate_state_indices, cache_steps=n,
           retrieve_parent_token) -- the tree_verify_kernel the dispatcher always routes trees to;
  chain    every node's root-to-node path as its own request, through the same two kernels in chain mode
           (retrieve arrays None), from a copy of the request's initial conv/SSM state (paths right-padded, read at
           the node's depth: both kernels are causal);
  torch64  the same path chains in plain torch float64 (conv1d update + gated delta rule), the CPU-testable spec;
  neg a    the chain kernels (topk <= 1 mode) on the tree-ordered tokens: must NOT match the path chains;
  neg b    the tree kernels writing SGLang's deduplicated (overlapping as_strided) conv-window layout, the one
           memory_pool uses when topk <= 1 (`_allocate_deduplicated_conv_window`): must NOT match either;
  commit   a random accepted path per request, committed by SGLang's scatter_mamba_states_after_mtp_verify (what
           update_mamba_state_after_mtp_verify runs, last_correct_step_indices = last accepted node): the main
           conv/SSM slot must equal the path chain's state at that node, other slots untouched;
  compact  the payload's compact kernels as DDTREE_GDN_TREE=compact DDTREE_CONV_TREE=compact run them:
           the tree conv through hybrid.compact_tree_conv (ddtctl/kernels/conv_tree.py, into SGLang's
           deduplicated window layout; its output must equal SGLang's tree conv's), the GDN verify through
           hybrid.CompactTreeVerify (ddtctl/kernels/gdn_tree.py) on that output and its
           retrieve_parent_token, then SGLang's commit entry wrapped by hybrid.commit_tree_states with the
           accepted paths: outputs and committed conv/SSM slots must equal the path chains' too.
Trees: DDTREE's best-first build (ddtctl/kernels/reference.py `build`) from random log-probs, depth 15, different
per request; left-child/right-sibling arrays from the payload's tree_prep.retrive_arrays.

On CUDA it runs compiled; without CUDA under TRITON_INTERPRET=1 (set here before triton is imported), with two
interpreter-only shims: comparison results are retagged int1 (a Triton 3.9 interpreter defect, see
_fix_interpreter_compares), and the commit wrappers' `is_cuda` check is met by a CUDA-looking tensor subclass so that
SGLang's own wrapper code runs unchanged. Cases run in parallel processes (--jobs): on the GPU nearly all the time is
Triton compiling SGLang's tree conv kernel, which unrolls every verify token (~30-40 s cold at 65 tokens).

    CPU (the managed SGLang env, `ddtctl env create`):
        ~/.cache/ddtctl/sglang-0.5.23/bin/python bench/hybrid_tree_kernels.py [--quick] [--seed 0]
    GPU (the H200 image; sglang from the carried wheels, see ../shared/docs/sglang-on-h200.md):
        pip install -q --no-index --no-deps --target /tmp/site .carry/whl/*.whl
        PYTHONPATH=tests/gpu_standins:/tmp/site:. DDTREE_GPU_STANDINS=1 SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 \
            python3 bench/hybrid_tree_kernels.py

Prints a table, writes $OUT/hybrid_tree_kernels.json when OUT is set, exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
TREE_PREP_DIR = REPO / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files"

TOL = 1e-5  # (--tol) relative (max |diff| / max |reference|) for every node's output, conv window and SSM state
MISMATCH = 1e-3  # a negative control must differ by more than this (relative)
DEPTH = 15
VOCAB = 128


@dataclass
class Case:
    name: str
    budget: int
    bs: int
    h: int = 2  # key heads
    hv: int = 4  # value heads
    dk: int = 16  # head_k_dim
    dv: int = 16  # head_v_dim
    width: int = 4  # conv kernel size
    bias: bool = True
    idx_dtype: str = "int64"  # retrieve_next_token / _sibling dtype (EAGLE's build uses torch.long)

    @property
    def n(self) -> int:
        return self.budget + 1

    @property
    def conv_dim(self) -> int:
        return 2 * self.h * self.dk + self.hv * self.dv


def set_tol(tol: float) -> None:
    global TOL
    TOL = float(tol)


def cases(device: str, quick: bool) -> list[Case]:
    out = [
        Case("b1", 1, 2),
        Case("b7", 7, 3, idx_dtype="int32"),
        Case("b15", 15, 3),
        Case("b15-w3-nobias", 15, 2, width=3, bias=False, idx_dtype="int32"),
        Case("b32", 32, 2),
        Case("b64", 64, 3, idx_dtype="int32"),
    ]
    # head dims 128 select the SM90 BV=4 launch of the tree verify (N = bs <= 64); the path chains (N > 64) use BV=32
    out.append(Case("b32-d128", 32, 2 if device == "cuda" else 1, h=1, hv=2, dk=128, dv=128))
    if quick:  # the CPU test's share: a chain, a tree, and the other conv width without bias
        out = [c for c in out if c.name in ("b1", "b7")] + [Case("b7-w3-nobias", 7, 2, width=3, bias=False)]
    return out


# --------------------------------------------------------------------------------------------------- environment
def _prepare(device: str) -> str:
    """Pick the device and set TRITON_INTERPRET before anything imports triton."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    # PyPI's torchvision is a CUDA build: beside a CPU torch, sglang's import of it needs these schemas first. Only
    # for a CPU torch: where torchvision's own ops load (the GPU image), a second definition aborts the process.
    if torch.version.cuda is None:
        for qualname, schema in (
            ("torchvision::nms", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"),
            ("torchvision::qnms", "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor"),
        ):
            try:
                torch.library.define(qualname, schema)
            except Exception:
                pass
    return device


def _fix_interpreter_compares() -> bool:
    """Triton's interpreter (seen with 3.9.0) gives a comparison's result handle the OPERANDS' type instead of int1
    (InterpreterBuilder.binary_op uses lhs.dtype); a later splat of such a scalar (e.g. `(slot < num_cache_lines) &
    block_mask` in causal_conv1d_update) then becomes an int64 array and `tl.load` fails with "mask has unsupported
    dtype". Comparisons are int1 in Triton, so retag their results. Interpreter only; the kernels are untouched."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    if getattr(builder, "_ddtctl_cmp_fixed", False):
        return True
    for name in [n for n in dir(builder) if n.startswith(("create_icmp", "create_fcmp"))]:
        orig = getattr(builder, name)

        def fixed(self, lhs, rhs, _orig=orig):
            r = _orig(self, lhs, rhs)
            return interp.TensorHandle(np.asarray(r.data).astype(np.bool_), tl.int1)

        setattr(builder, name, fixed)
    builder._ddtctl_cmp_fixed = True
    return True


def _sglang_functions(relpath: str, names: list[str]) -> dict:
    """SGLang's own source of a few module-level functions / class methods, without importing the (heavy) module."""
    import typing

    import sglang
    import torch

    path = Path(sglang.__file__).parent / relpath
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names and node.name not in found:
            found[node.name] = node
    missing = set(names) - set(found)
    if missing:
        raise RuntimeError(f"{relpath}: no {sorted(missing)}")
    ns = {"torch": torch, **{k: getattr(typing, k) for k in ("Optional", "Tuple", "List", "Union", "Any")}}
    mod = ast.Module(body=[ast.parse("from __future__ import annotations").body[0], *found.values()], type_ignores=[])
    exec(compile(mod, str(path), "exec"), ns)
    return {k: ns[k] for k in names}


class Kernels:
    """SGLang 0.5.23's kernels, imported once."""

    def __init__(self, device: str):
        import torch

        from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import (
            fused_sigmoid_gating_delta_rule_update,
        )
        from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
        from sglang.kernels.ops.mamba.mamba_state_scatter_triton import scatter_mamba_states_after_mtp_verify

        self.device = device
        self.conv_update = causal_conv1d_update
        self.fused_recurrent = fused_sigmoid_gating_delta_rule_update
        self.commit = scatter_mamba_states_after_mtp_verify
        fns = _sglang_functions("srt/mem_cache/memory_pool.py", ["conv_window_dedup_enabled",
                                                                   "_allocate_deduplicated_conv_window"])
        self.dedup_enabled = fns["conv_window_dedup_enabled"]
        self._alloc_dedup = fns["_allocate_deduplicated_conv_window"]
        # the object the dispatcher routes tree verify to (gdn_backend.GDNKernelDispatcher.tree_verify_kernel)
        self.verify_entry = "fused_sigmoid_gating_delta_rule_update (TritonGDNKernel.target_verify's arguments)"
        self._triton_gdn = None
        if device == "cuda":
            try:
                from sglang.srt.layers.attention.linear.kernels.gdn_triton import TritonGDNKernel

                self._triton_gdn = TritonGDNKernel()
                self.verify_entry = "TritonGDNKernel().target_verify"
            except Exception as e:  # noqa: BLE001 - report and use the same kernel directly
                self.verify_entry += f" (TritonGDNKernel import failed: {type(e).__name__}: {e})"
        self.torch = torch

    def alloc_dedup(self, *, conv_shape, num_layers, slots, n, dtype):
        from types import SimpleNamespace

        owner = SimpleNamespace(conv_window_axis=-1, device=self.device)
        return self._alloc_dedup(owner, conv_shape=conv_shape, num_mamba_layers=num_layers, spec_state_size=slots,
                                 speculative_num_draft_tokens=n, conv_dtype=dtype)

    def target_verify(self, **kw):
        if self._triton_gdn is not None:
            return self._triton_gdn.target_verify(**kw)
        return self.fused_recurrent(
            A_log=kw["A_log"], dt_bias=kw["dt_bias"], q=kw["q"], k=kw["k"], v=kw["v"], a=kw["a"], b=kw["b"],
            initial_state_source=kw["ssm_states"], initial_state_indices=kw["cache_indices"],
            cu_seqlens=kw["query_start_loc"], use_qk_l2norm_in_kernel=True, softplus_beta=1.0,
            softplus_threshold=20.0, is_kda=False, disable_state_update=True,
            intermediate_states_buffer=kw["intermediate_states_buffer"],
            intermediate_state_indices=kw["intermediate_state_indices"], cache_steps=kw["cache_steps"],
            retrieve_parent_token=kw["retrieve_parent_token"],
        )


def _cuda_looking(t):
    """A CPU tensor whose `is_cuda` is True, so that SGLang's commit wrappers (which refuse non-CUDA tensors) run
    their own argument preparation and launch under the Triton interpreter. Only used on the CPU."""
    import torch

    class _CudaLooking(torch.Tensor):
        @property
        def is_cuda(self):  # noqa: D401
            return True

    return t.as_subclass(_CudaLooking)


# ------------------------------------------------------------------------------------------------------- trees
def make_trees(budget: int, bs: int, rng):
    """parents [bs, B+1] int64 from DDTREE's best-first build over random log-probs (depth 15), one tree each."""
    import numpy as np
    import torch

    sys.path[:0] = [p for p in (str(REPO),) if p not in sys.path]
    from ddtctl.kernels import reference

    out = []
    for r in range(bs):
        # a confident drafter (one boosted token per depth) gives deep trees, a flat one bushy shallow trees
        boost = (8.0, 5.5, 1.0)[r % 3] + float(rng.uniform(-0.5, 0.5))
        logits = rng.standard_normal((DEPTH, VOCAB)).astype(np.float32) * float(rng.uniform(0.5, 2.0))
        logits[np.arange(DEPTH), rng.integers(0, VOCAB, DEPTH)] += boost
        lp, ids = reference.topk_logprobs(logits, min(budget, VOCAB))
        tree = reference.build(lp, ids, budget)
        out.append(torch.from_numpy(tree.parents.astype(np.int64)))
    return torch.stack(out)


def retrive_arrays(parents):
    sys.path[:0] = [p for p in (str(TREE_PREP_DIR), str(REPO)) if p not in sys.path]
    from ddtree_sglang.tree_prep import retrive_arrays as _ra

    return _ra(parents)


def paths_of(parents) -> list[list[list[int]]]:
    """Per request, per node: the root-to-node path (node indices)."""
    out = []
    for row in parents.tolist():
        ps = []
        for i in range(len(row)):
            p, cur = [], i
            while cur >= 0:
                p.append(cur)
                cur = row[cur]
            ps.append(p[::-1])
        out.append(ps)
    return out


def is_chain(parents_row) -> bool:
    return all(int(parents_row[i]) == i - 1 for i in range(1, parents_row.shape[0]))


# ------------------------------------------------------------------------------------------------------ inputs
@dataclass
class Inputs:
    mixed_qkv: object  # [bs*n, conv_dim] (projection output, before the conv)
    a: object  # [bs*n, HV]
    b: object  # [bs*n, HV]
    A_log: object
    dt_bias: object
    weight: object  # [conv_dim, width]
    bias: object  # [conv_dim] or None
    conv0: object  # conv pool [1, slots+1, conv_dim, width-1] (layer dim first, as SpeculativeState)
    ssm0: object  # ssm pool [1, slots+1, HV, V, K]
    cache_indices: object  # int32 [bs], distinct pool slots
    scratch_rows: object  # int32 [bs], intermediate_state_indices (= arange, build_verify_intermediate_state_indices)


def make_inputs(c: Case, gen, device: str) -> Inputs:
    import torch

    f = dict(dtype=torch.float32)
    bs, n = c.bs, c.n
    slots = 2 * bs + 1
    t = bs * n
    r = lambda *s: torch.randn(*s, generator=gen, **f)  # noqa: E731
    inp = Inputs(
        mixed_qkv=r(t, c.conv_dim), a=r(t, c.hv), b=r(t, c.hv), A_log=r(c.hv) * 0.5, dt_bias=r(c.hv) * 0.5,
        weight=r(c.conv_dim, c.width) * 0.5, bias=r(c.conv_dim) * 0.1 if c.bias else None,
        conv0=r(1, slots + 1, c.conv_dim, c.width - 1), ssm0=r(1, slots + 1, c.hv, c.dv, c.dk) * 0.3,
        cache_indices=torch.randperm(slots, generator=gen)[:bs].to(torch.int32),
        scratch_rows=torch.arange(bs, dtype=torch.int32),
    )
    for k, v in list(vars(inp).items()):
        if v is not None:
            setattr(inp, k, v.to(device))
    return inp


# ------------------------------------------------------------------------------------------ SGLang verify (kernels)
def sglang_verify(K: Kernels, c: Case, inp: Inputs, n: int, retrieve=None, layout: str = "dense", x=None):
    """One GDN layer's TARGET_VERIFY as gdn_backend.forward_extend runs it (Triton, no ReplaySSM), on copies of the
    pools. retrieve = (next_token, next_sibling) for topk > 1, None for the chain (topk <= 1) mode.
    x = (mixed_qkv, a, b, conv pool, ssm pool, cache_indices, scratch_rows) to override the inputs (path chains).
    Returns dict(out [bs, n, HV, V], win [bs, n, dim, K-1], ssm [bs, n, HV, V, K], parent, conv, ssm_pool, ...)."""
    import torch

    if x is None:
        x = (inp.mixed_qkv, inp.a, inp.b, inp.conv0, inp.ssm0, inp.cache_indices, inp.scratch_rows)
    mixed_qkv, a, b, conv0, ssm0, cache_indices, scratch_rows = x
    dev = mixed_qkv.device
    bs = cache_indices.shape[0]
    seq_len = bs * n
    conv_pool = conv0.clone()
    ssm_pool = ssm0.clone()
    slots1 = conv_pool.shape[1]  # size + 1
    win_shape = (conv_pool.shape[2], conv_pool.shape[3])
    if layout == "dense":
        icw = torch.zeros(1, slots1, n, *win_shape, dtype=torch.float32, device=dev)
    else:
        _, icw = K.alloc_dedup(conv_shape=win_shape, num_layers=1, slots=slots1 - 1, n=n, dtype=torch.float32)
    issm = torch.zeros(1, slots1, n, *ssm_pool.shape[2:], dtype=torch.float32, device=dev)
    conv_states, ssm_states = conv_pool[0], ssm_pool[0]  # mamba2_layer_cache(layer).conv[0] / .temporal
    query_start_loc = torch.arange(0, seq_len + 1, step=n, dtype=torch.int32, device=dev)
    if retrieve is not None:
        rnt, rns = retrieve
        rpt = torch.empty_like(rnt)  # hybrid_linear_attn_backend: filled by the fused conv kernel
    else:
        rnt = rns = rpt = None

    xr = mixed_qkv.view(bs, n, -1).transpose(1, 2)
    conv_out = K.conv_update(
        xr, conv_states, inp.weight, inp.bias, "silu",
        conv_state_indices=cache_indices[:bs], intermediate_conv_window=icw[0],
        intermediate_state_indices=scratch_rows[:bs], retrieve_next_token=rnt, retrieve_next_sibling=rns,
        retrieve_parent_token=rpt,
    )
    mq = conv_out.transpose(1, 2).view(seq_len, -1)
    q, k, v = torch.split(mq, [c.h * c.dk, c.h * c.dk, c.hv * c.dv], dim=-1)
    q = q.view(1, seq_len, c.h, c.dk)
    k = k.view(1, seq_len, c.h, c.dk)
    v = v.view(1, seq_len, c.hv, c.dv)
    out = K.target_verify(
        A_log=inp.A_log, dt_bias=inp.dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=ssm_states,
        cache_indices=cache_indices, query_start_loc=query_start_loc, intermediate_states_buffer=issm[0],
        intermediate_state_indices=scratch_rows, cache_steps=n, retrieve_parent_token=rpt,
    )
    rows = scratch_rows.long()
    return dict(
        out=out.reshape(bs, n, c.hv, c.dv), win=icw[0][rows].clone(), ssm=issm[0][rows].clone(), parent=rpt,
        conv_pool=conv_pool, ssm_pool=ssm_pool, icw=icw, issm=issm, conv_out=mq.view(bs, n, -1),
        retrieve=retrieve,
    )


def kernel_path_chains(K: Kernels, c: Case, inp: Inputs, paths) -> dict:
    """Every node's root-to-node path as its own chain request through the same kernels in chain mode, from a copy
    of its request's initial state. Returns per node (flattened b*n + i) out / win / ssm at the node's depth."""
    import torch

    dev = inp.mixed_qkv.device
    n = c.n
    flat = [(b, p) for b in range(c.bs) for p in paths[b]]
    t = max(len(p) for _, p in flat)
    rows, depth = [], []
    for b, p in flat:
        rows.append([b * n + j for j in p] + [b * n + p[-1]] * (t - len(p)))  # right pad (causal: not read)
        depth.append(len(p) - 1)
    idx = torch.tensor(rows, device=dev).view(-1)
    m = len(flat)
    req = torch.tensor([b for b, _ in flat], device=dev)
    src_slots = inp.cache_indices.long()[req]
    conv0 = inp.conv0[:, src_slots]
    ssm0 = inp.ssm0[:, src_slots]
    conv0 = torch.cat([conv0, torch.zeros_like(conv0[:, :1])], 1)  # the + 1 padding row of the pool
    ssm0 = torch.cat([ssm0, torch.zeros_like(ssm0[:, :1])], 1)
    ar = torch.arange(m, dtype=torch.int32, device=dev)
    r = sglang_verify(K, c, inp, t, None, "dense",
                      x=(inp.mixed_qkv[idx], inp.a[idx], inp.b[idx], conv0, ssm0, ar, ar))
    d = torch.tensor(depth, device=dev)
    sel = torch.arange(m, device=dev)
    return dict(out=r["out"][sel, d], win=r["win"][sel, d], ssm=r["ssm"][sel, d])


# ------------------------------------------------------------------------------------- torch float64 reference
def torch_path_chains(c: Case, inp: Inputs, paths) -> dict:
    """The spec in plain torch float64: for every node, conv1d update + gated delta rule over its root-to-node path,
    from its request's initial conv/SSM state. Returns per node (flattened b*n + i) out [HV, V], win [dim, K-1]
    (the last K-1 conv inputs), ssm [HV, V, K] (SGLang's state layout)."""
    import torch

    f64 = torch.float64
    cpu = torch.device("cpu")
    n = c.n
    mq = inp.mixed_qkv.to(cpu, f64)
    a_all, b_all = inp.a.to(cpu, f64), inp.b.to(cpu, f64)
    w = inp.weight.to(cpu, f64)
    bias = inp.bias.to(cpu, f64) if inp.bias is not None else torch.zeros(w.shape[0], dtype=f64)
    A = torch.exp(inp.A_log.to(cpu, f64))
    dtb = inp.dt_bias.to(cpu, f64)
    flat = [(b, p) for b in range(c.bs) for p in paths[b]]
    m = len(flat)
    t = max(len(p) for _, p in flat)
    length = torch.tensor([len(p) for _, p in flat])
    idx = torch.tensor([[b * n + j for j in p] + [b * n + p[-1]] * (t - len(p)) for b, p in flat])  # [m, t]
    slots = inp.cache_indices.long().cpu()[torch.tensor([b for b, _ in flat])]
    window = inp.conv0[0].to(cpu, f64)[slots]  # [m, dim, K-1]
    h = inp.ssm0[0].to(cpu, f64)[slots].transpose(-1, -2).clone()  # [m, HV, K, V]
    g_per = c.hv // c.h
    out = torch.zeros(m, c.hv, c.dv, dtype=f64)
    win_at = torch.zeros_like(window)
    h_at = torch.zeros_like(h)
    for s in range(t):
        xs = mq[idx[:, s]]  # [m, dim]
        full = torch.cat([window, xs[:, :, None]], dim=2)  # [m, dim, K]
        y = (full * w).sum(-1) + bias
        y = y * torch.sigmoid(y)  # silu
        window = full[:, :, 1:]
        q, k, v = torch.split(y, [c.h * c.dk, c.h * c.dk, c.hv * c.dv], dim=-1)
        q = q.view(m, c.h, c.dk).repeat_interleave(g_per, dim=1)
        k = k.view(m, c.h, c.dk).repeat_interleave(g_per, dim=1)
        v = v.view(m, c.hv, c.dv)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * c.dk ** -0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        xg = a_all[idx[:, s]] + dtb
        softplus = torch.where(xg <= 20.0, torch.log1p(torch.exp(xg)), xg)
        g = -A * softplus  # [m, HV]
        beta = torch.sigmoid(b_all[idx[:, s]])
        h = h * torch.exp(g)[:, :, None, None]
        vv = (v - torch.einsum("mhkv,mhk->mhv", h, k)) * beta[:, :, None]
        h = h + k[:, :, :, None] * vv[:, :, None, :]
        o = torch.einsum("mhkv,mhk->mhv", h, q)
        at = length - 1 == s
        out[at], win_at[at], h_at[at] = o[at], window[at], h[at]
    return dict(out=out, win=win_at, ssm=h_at.transpose(-1, -2).contiguous())


# ------------------------------------------------------------------------------------------------------- checks
def rel_err(x, ref) -> float:
    import torch

    x = x.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    scale = float(ref.abs().max()) or 1.0
    return float((x - ref).abs().max()) / scale


def compare(tree: dict, ref: dict, bs: int, n: int) -> dict:
    flat = {k: tree[k].reshape(bs * n, *tree[k].shape[2:]) for k in ("out", "win", "ssm")}
    return {k: rel_err(flat[k], ref[k]) for k in ("out", "win", "ssm")}


def run_commit(K: Kernels, inp: Inputs, tree: dict, last_step, device: str):
    """SGLang's commit (hybrid_linear_attn_backend.update_mamba_state_after_mtp_verify, no radix tracking, no PP):
    scatter_mamba_states_after_mtp_verify(mamba_caches, state_indices, last_correct_step_indices, None, None)."""
    from types import SimpleNamespace

    conv, ssm, icw, issm = tree["conv_pool"], tree["ssm_pool"], tree["icw"], tree["issm"]
    wrap = _cuda_looking if device == "cpu" else (lambda t: t)
    caches = SimpleNamespace(temporal=wrap(ssm), intermediate_ssm=wrap(issm), conv=[wrap(conv)],
                             intermediate_conv_window=[wrap(icw)])
    K.commit(caches, wrap(inp.cache_indices), wrap(last_step), None, None)
    return conv, ssm


def check_case(K: Kernels, c: Case, seed: int, device: str, neg_b: bool = True) -> dict:
    import numpy as np
    import torch

    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, c.budget, c.bs, c.width, c.dk])
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    parents = make_trees(c.budget, c.bs, rng)
    _, rnt, rns = retrive_arrays(parents)
    idt = dict(int64=torch.int64, int32=torch.int32)[c.idx_dtype]
    rnt, rns = rnt.to(device, idt), rns.to(device, idt)
    paths = paths_of(parents)
    inp = make_inputs(c, gen, device)
    n, bs = c.n, c.bs
    res: dict = dict(case=c.name, budget=c.budget, bs=bs, n=n, width=c.width, heads=f"{c.h}/{c.hv}",
                     dims=f"{c.dk}x{c.dv}", idx_dtype=c.idx_dtype,
                     max_depth=int(max(len(p) for ps in paths for p in ps) - 1),
                     leaves=[int(sum(1 for i in range(n) if int(rnt[b, i]) == -1)) for b in range(bs)],
                     chains=[is_chain(parents[b]) for b in range(bs)])
    failures: list[str] = []

    # SGLang's own choice of conv-window layout: dense for trees, deduplicated for chains (on CUDA)
    res["sglang_dedup_layout"] = {"topk>1": K.dedup_enabled(False, False, 8, False),
                                  "topk=1": K.dedup_enabled(False, False, 1, False)}
    if res["sglang_dedup_layout"]["topk>1"]:
        failures.append("SGLang would use the deduplicated conv window for topk > 1")

    timing = res["timing_s"] = {}
    tick = time.perf_counter()

    def lap(name):
        nonlocal tick
        if device == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        timing[name] = round(now - tick, 3)
        tick = now

    try:  # the verify kernel's value tile / warps for the tree (N = bs) and the path chains (N = nodes)
        from sglang.kernels.ops.attention.linear import fused_sigmoid_gating_recurrent as fsg

        res["verify_launch_bv_warps"] = {
            "tree": fsg._select_recurrent_launch_config(bs, c.h, c.hv, c.dk, c.dv, False, target_verify=True,
                                                        cache_steps=n),
            "path_chains": fsg._select_recurrent_launch_config(bs * n, c.h, c.hv, c.dk, c.dv, False,
                                                               target_verify=True, cache_steps=0)}
    except Exception as e:  # noqa: BLE001 - informative only
        res["verify_launch_bv_warps"] = f"{type(e).__name__}: {e}"
    lap("setup")
    tree = sglang_verify(K, c, inp, n, (rnt, rns), "dense")
    lap("tree")
    chain_k = kernel_path_chains(K, c, inp, paths)
    lap("path_chains_kernels")
    ref64 = torch_path_chains(c, inp, paths)
    lap("path_chains_torch64")

    # the fused conv kernel fills retrieve_parent_token: it must be the tree's parents (root: 0)
    want_parent = parents.clone()
    want_parent[:, 0] = 0
    res["parent_filled"] = bool(torch.equal(tree["parent"].cpu().long(), want_parent))
    if not res["parent_filled"]:
        failures.append("retrieve_parent_token != parents")
    # disable_state_update: the main SSM slots are untouched by verify; the conv kernel does shift the main conv slot
    res["verify_keeps_ssm_slot"] = bool(torch.equal(tree["ssm_pool"], inp.ssm0))
    res["verify_writes_conv_slot"] = not bool(torch.equal(tree["conv_pool"], inp.conv0))
    if not res["verify_keeps_ssm_slot"]:
        failures.append("verify changed the main SSM slot")

    e_chain = compare(tree, chain_k, bs, n)
    e_ref = compare(tree, ref64, bs, n)
    e_chain_ref = {k: rel_err(chain_k[k], ref64[k]) for k in ("out", "win", "ssm")}
    res["err_tree_vs_chain_kernels"] = e_chain
    res["err_tree_vs_torch64"] = e_ref
    res["err_chain_kernels_vs_torch64"] = e_chain_ref
    for label, e in (("tree vs chain kernels", e_chain), ("tree vs torch64", e_ref),
                     ("chain kernels vs torch64", e_chain_ref)):
        bad = {k: v for k, v in e.items() if not v <= TOL}
        if bad:
            failures.append(f"{label}: {bad}")

    # negative controls
    any_branch = not all(res["chains"])
    neg_a = sglang_verify(K, c, inp, n, None, "dense")
    lap("neg_a")
    res["neg_a_chain_mode"] = compare(neg_a, ref64, bs, n)
    res["neg_applicable"] = any_branch
    res["neg_b_run"] = neg_b
    na = max(res["neg_a_chain_mode"].values())
    if any_branch and not na > MISMATCH:
        failures.append(f"negative control a (chain mode on a tree) matched: {na:.2e}")
    if neg_b:
        nb_run = sglang_verify(K, c, inp, n, (rnt, rns), "dedup")
        lap("neg_b")
        res["neg_b_dedup_window"] = compare(nb_run, ref64, bs, n)
        nb = res["neg_b_dedup_window"]["win"]
        if any_branch and not nb > MISMATCH:
            failures.append(f"negative control b (dedup conv window) matched: {nb:.2e}")
        # the dedup layout does not touch the outputs / SSM states: only the stored windows are wrong
        res["neg_b_out_ssm_unaffected"] = max(res["neg_b_dedup_window"]["out"],
                                              res["neg_b_dedup_window"]["ssm"]) <= TOL

    # commit a random accepted path per request
    acc = torch.tensor([int(rng.integers(n)) for _ in range(bs)], dtype=torch.int64)
    res["accepted_node"] = acc.tolist()
    res["accepted_path"] = [paths[b][int(acc[b])] for b in range(bs)]
    conv_after, ssm_after = run_commit(K, inp, tree, acc.to(device), device)
    slots = inp.cache_indices.long()
    flat_acc = torch.arange(bs) * n + acc
    e_commit = {"conv": rel_err(conv_after[0, slots], ref64["win"][flat_acc]),
                "ssm": rel_err(ssm_after[0, slots], ref64["ssm"][flat_acc])}
    others = torch.ones(conv_after.shape[1], dtype=torch.bool)
    others[slots.cpu()] = False
    others_d = others.to(conv_after.device)
    e_commit["other_slots_untouched"] = bool(torch.equal(conv_after[0, others_d], inp.conv0[0, others_d])
                                             and torch.equal(ssm_after[0, others_d], inp.ssm0[0, others_d]))
    lap("commit")
    res["commit"] = e_commit
    if not (e_commit["conv"] <= TOL and e_commit["ssm"] <= TOL):
        failures.append(f"commit: conv {e_commit['conv']:.2e} ssm {e_commit['ssm']:.2e}")
    if not e_commit["other_slots_untouched"]:
        failures.append("commit touched other slots")

    # the compact tree verify (ddtctl/kernels/gdn_tree.py) and its commit through hybrid.py's hook, on the same tree
    if n > 128:  # wider than the compact kernel takes: the server keeps SGLang's kernel (hybrid.COMPACT_MAX_WIDTH)
        res["compact"] = None
        res["failures"] = failures
        res["ok"] = not failures
        res["seconds"] = round(time.perf_counter() - t0, 3)
        return res
    comp = compact_verify_and_commit(K, c, inp, tree, paths, acc, device)
    lap("compact")
    e_comp = {"out": rel_err(comp["out"].reshape(bs * n, c.hv, c.dv), ref64["out"]),
              "conv": rel_err(comp["conv_pool"][0, slots], ref64["win"][flat_acc]),
              "ssm": rel_err(comp["ssm_pool"][0, slots], ref64["ssm"][flat_acc])}
    e_comp["other_slots_untouched"] = bool(torch.equal(comp["conv_pool"][0, others_d], inp.conv0[0, others_d])
                                           and torch.equal(comp["ssm_pool"][0, others_d], inp.ssm0[0, others_d]))
    e_comp["conv_out_vs_sglang"] = rel_err(comp["conv_out"], tree["conv_out"])
    e_comp["parent_equal"] = bool(torch.equal(comp["parent"], tree["parent"]))
    res["compact"] = e_comp
    if not e_comp["parent_equal"]:
        failures.append("compact tree conv: retrieve_parent_token differs from SGLang's")
    if not all(e_comp[k] <= TOL for k in ("out", "conv", "ssm", "conv_out_vs_sglang")):
        failures.append(f"compact: {e_comp}")
    if not e_comp["other_slots_untouched"]:
        failures.append("compact commit touched other slots")

    res["failures"] = failures
    res["ok"] = not failures
    res["seconds"] = round(time.perf_counter() - t0, 3)
    return res


def compact_verify_and_commit(K: Kernels, c: Case, inp: Inputs, tree: dict, paths, acc, device: str) -> dict:
    """What a DDTREE server runs with DDTREE_GDN_TREE=compact and DDTREE_CONV_TREE=compact: the conv call of
    gdn_backend.forward_extend through hybrid.compact_tree_conv (into the deduplicated window layout the pool
    then allocates), hybrid.CompactTreeVerify's kernel on its output and retrieve_parent_token, then SGLang's
    commit entry (scatter_mamba_states_after_mtp_verify) wrapped by hybrid.commit_tree_states with the
    accepted paths."""
    import torch

    payload = str(Path(__file__).resolve().parents[1] / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files")
    if payload not in sys.path:
        sys.path.insert(0, payload)
    from ddtree_sglang import hybrid

    bs, n = c.bs, c.n
    dev = inp.mixed_qkv.device
    ssm_pool, conv_pool = inp.ssm0.clone(), inp.conv0.clone()
    issm = torch.zeros_like(tree["issm"])
    _, icw = K.alloc_dedup(conv_shape=tuple(conv_pool.shape[2:]), num_layers=1, slots=conv_pool.shape[1] - 1,
                           n=n, dtype=conv_pool.dtype)
    rnt, rns = tree["retrieve"]
    parent = torch.empty_like(rnt)
    saved = hybrid.tree_mode, dict(hybrid.STATE), os.environ.get("DDTREE_CONV_TREE")
    hybrid.tree_mode = lambda: True
    os.environ["DDTREE_CONV_TREE"] = "compact"
    try:
        conv_out = hybrid.compact_tree_conv(
            K.conv_update, inp.mixed_qkv.view(bs, n, -1).transpose(1, 2), conv_pool[0], inp.weight, inp.bias,
            "silu", conv_state_indices=inp.cache_indices, intermediate_conv_window=icw[0],
            intermediate_state_indices=inp.scratch_rows, retrieve_next_token=rnt, retrieve_next_sibling=rns,
            retrieve_parent_token=parent)
        mq = conv_out.transpose(1, 2).reshape(bs * n, -1)
        q, k, v = torch.split(mq, [c.h * c.dk, c.h * c.dk, c.hv * c.dv], dim=-1)
        q, k = q.contiguous().view(1, bs * n, c.h, c.dk), k.contiguous().view(1, bs * n, c.h, c.dk)
        v = v.contiguous().view(1, bs * n, c.hv, c.dv)
        kernel = hybrid.CompactTreeVerify(depth_bound=15)
        kernel.precision = "tf32x3"  # the algorithm and its plumbing at fp32 level (TF32: gdn_tree_gpu.py)
        out = kernel.target_verify(
            A_log=inp.A_log, dt_bias=inp.dt_bias, q=q, k=k, v=v, a=inp.a, b=inp.b, ssm_states=ssm_pool[0],
            cache_indices=inp.cache_indices, query_start_loc=torch.arange(0, bs * n + 1, n, dtype=torch.int32,
                                                                          device=dev),
            intermediate_states_buffer=issm[0], intermediate_state_indices=inp.scratch_rows,
            retrieve_parent_token=parent, cache_steps=n)
        width = max(len(p) for ps in paths for p in ps)
        chosen = [paths[b][int(acc[b])] for b in range(bs)]
        accept = torch.tensor([[b * n + x for x in p] + [-1] * (width - len(p))
                               for b, p in enumerate(chosen)], device=dev)
        lens = torch.tensor([len(p) for p in chosen], dtype=torch.int32, device=dev)
        caches = SimpleNamespace(temporal=ssm_pool, intermediate_ssm=issm, conv=[conv_pool],
                                 intermediate_conv_window=[icw])
        hybrid.STATE["compact_backends"] = 1
        hybrid.pending_path(accept, lens, n)
        # both parts compact: SGLang's scatter (which needs CUDA tensors) is not reached
        hybrid.commit_tree_states(K.commit, caches, inp.cache_indices, acc.to(dev), None, None)
    finally:
        hybrid.tree_mode = saved[0]
        hybrid.STATE.clear()
        hybrid.STATE.update(saved[1])
        if saved[2] is None:
            os.environ.pop("DDTREE_CONV_TREE", None)
        else:
            os.environ["DDTREE_CONV_TREE"] = saved[2]
    return dict(out=out, conv_pool=conv_pool, ssm_pool=ssm_pool, conv_out=mq.view(bs, n, -1), parent=parent)


# -------------------------------------------------------------------------------------------------------- main
def fmt_table(results: list[dict]) -> str:
    head = (f"{'case':<15}{'B':>4}{'bs':>4}{'depth':>6} {'tree vs path (chain kern / torch64)':<37}"
            f"{'neg a':>10}{'neg b':>10}{'commit':>10}{'compact':>10}  {'s':>6}  verdict")
    lines = [head, "-" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"{r['case']:<15}{r['budget']:>4}{r['bs']:>4}  ERROR {r['error']}")
            continue
        ec = max(r["err_tree_vs_chain_kernels"].values())
        er = max(r["err_tree_vs_torch64"].values())
        if r["neg_applicable"]:
            na = f"{max(r['neg_a_chain_mode'].values()):.2e}"
            nb = f"{r['neg_b_dedup_window']['win']:.2e}" if r["neg_b_run"] else "skip"
        else:
            na = nb = "n/a"
        cm = max(r["commit"]["conv"], r["commit"]["ssm"])
        keys = ("out", "conv", "ssm", "conv_out_vs_sglang")
        cp = max(r["compact"][k] for k in keys) if r.get("compact") else float("nan")
        pair = f"{ec:.2e} / {er:.2e}"
        lines.append(f"{r['case']:<15}{r['budget']:>4}{r['bs']:>4}{r['max_depth']:>6} {pair:<37}"
                     f"{na:>10}{nb:>10}{cm:>10.2e}{cp:>10.2e}  {r['seconds']:>6.1f}  {'PASS' if r['ok'] else 'FAIL'}")
    return "\n".join(lines)


def run_here(args, device: str) -> tuple[dict, list[dict]]:
    """The selected cases in this process."""
    import torch
    import triton

    interp_fix = _fix_interpreter_compares() if device == "cpu" else False
    K = Kernels(device)
    sel = select(args, device)
    meta = dict(seed=args.seed, device=device, interpret=os.environ.get("TRITON_INTERPRET") == "1",
                torch=torch.__version__, triton=triton.__version__, tol=TOL, mismatch=MISMATCH,
                interpreter_cmp_fix=interp_fix, verify_entry=K.verify_entry,
                gpu=torch.cuda.get_device_name(0) if device == "cuda" else None)
    results = []
    for c in sel:
        try:
            r = check_case(K, c, args.seed, device, neg_b=c.budget <= args.neg_b_max_budget)
        except Exception as e:  # noqa: BLE001 - a crash is a failure of that case, the table still prints
            import traceback

            traceback.print_exc()
            r = dict(case=c.name, budget=c.budget, bs=c.bs, ok=False, error=f"{type(e).__name__}: {e}")
        results.append(r)
        for f_ in r.get("failures", []):
            print(f"  {c.name}: FAIL {f_}", flush=True)
    return meta, results


def run_jobs(args, device: str, argv: list[str]) -> tuple[dict, list[dict]]:
    """One process per case, `jobs` at a time: on the GPU nearly all the time is Triton compiling (the tree conv
    kernel unrolls every verify token: ~30 s at 65 tokens), which runs on separate cores this way."""
    import subprocess
    import tempfile

    names = [c.name for c in select(args, device)]
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-tree-"))
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    base = [sys.executable, str(Path(__file__).resolve()), "--device", device, "--seed", str(args.seed),
            "--neg-b-max-budget", str(args.neg_b_max_budget), "--tol", repr(args.tol), "--jobs", "1"]
    base += ["--quick"] if args.quick else []
    pending, running, meta, results = list(names), {}, {}, {}
    while pending or running:
        while pending and len(running) < args.jobs:
            name = pending.pop(0)
            log = open(tmp / f"{name}.log", "w")
            running[name] = (subprocess.Popen(base + ["--only", name, "--emit", str(tmp / f"{name}.json")],
                                              stdout=log, stderr=subprocess.STDOUT, env=env), log)
        time.sleep(0.2)
        for name, (proc, log) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[name]
            try:
                doc = json.loads((tmp / f"{name}.json").read_text())
                meta = meta or doc["meta"]
                results[name] = doc["cases"][0]
            except (OSError, ValueError, KeyError, IndexError):
                tail = (tmp / f"{name}.log").read_text()[-1500:]
                print(tail)
                c = next(c for c in cases(device, args.quick) if c.name == name)
                results[name] = dict(case=name, budget=c.budget, bs=c.bs, ok=False,
                                     error=f"case process exited {proc.returncode} without a result")
            for f_ in results[name].get("failures", []):
                print(f"  {name}: FAIL {f_}", flush=True)
    return meta, [results[n] for n in names]


def select(args, device: str) -> list[Case]:
    sel = cases(device, args.quick)
    if args.only:
        want = set(args.only.split(","))
        sel = [c for c in sel if c.name in want]
    return sel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="three small cases (the CPU test uses this)")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--jobs", type=int, default=0, help="cases in parallel processes (0: one per case, at most "
                                                        "the CPU count; 1: all in this process)")
    ap.add_argument("--neg-b-max-budget", type=int, default=-1,
                    help="run negative control b up to this budget (default: all on the CPU; 32 on CUDA, where "
                         "the dedup layout's constexpr strides cost another ~30 s compile of the tree conv at B=64)")
    ap.add_argument("--tol", type=float, default=TOL, help="relative tolerance of every exactness check")
    ap.add_argument("--emit", default="", help=argparse.SUPPRESS)  # a case process's result file
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    device = _prepare(args.device)
    set_tol(args.tol)
    if args.neg_b_max_budget < 0:
        args.neg_b_max_budget = 32 if device == "cuda" else 1 << 20
    if args.jobs <= 0:
        args.jobs = max(1, min(len(select(args, device)), os.cpu_count() or 1))
    if args.jobs > 1 and len(select(args, device)) > 1:
        meta, results = run_jobs(args, device, argv or sys.argv[1:])
    else:
        meta, results = run_here(args, device)
    if args.emit:
        Path(args.emit).write_text(json.dumps(dict(meta=meta, cases=results), default=str))
    print(f"hybrid_tree_kernels: seed={args.seed} device={device} interpret={meta.get('interpret')} "
          f"torch={meta.get('torch')} triton={meta.get('triton')} gpu={meta.get('gpu')} jobs={args.jobs} "
          f"tol={TOL:g} mismatch>{MISMATCH:g} interpreter_cmp_fix={meta.get('interpreter_cmp_fix')}")
    print(f"verify entry: {meta.get('verify_entry')}")
    print(fmt_table(results))
    ok = bool(results) and all(r["ok"] for r in results)
    total = time.perf_counter() - t0
    print(f"{'PASS' if ok else 'FAIL'}: {sum(r['ok'] for r in results)}/{len(results)} cases, {total:.1f} s")
    out = os.environ.get("OUT")
    if out and not args.emit:
        Path(out).mkdir(parents=True, exist_ok=True)
        doc = dict(meta, jobs=args.jobs, neg_b_max_budget=args.neg_b_max_budget, seconds=round(total, 2), ok=ok,
                   cases=results)
        (Path(out) / "hybrid_tree_kernels.json").write_text(json.dumps(doc, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
