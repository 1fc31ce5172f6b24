#!/usr/bin/env python3
"""The compact GDN tree verify (ddtctl/kernels/gdn_tree.py) against SGLang 0.5.23's own kernels, one GPU.

Per (heads, batch, verify width): DDTREE trees from the best-first build (ddtctl/kernels/reference.py) over
random log-probs, depth <= 15, one per request; q/k/v/a/b random (bf16), SSM states random (fp32).
  exact     compact outputs and committed states against SGLang's tree kernel (`fused_sigmoid_gating_delta_
            rule_update` with retrieve_parent_token, every node's state written) and its scatter of the last
            accepted node's state (`fused_mamba_state_scatter_with_mask`), plus the float64 node-by-node
            reference; the same for every --variants launch (its outputs, and the states a commit from its
            records gives), all held to the default launch's tolerances;
  time      microseconds per layer (CUDA events, median of repeated launches): SGLang's tree verify, SGLang's
            chain verify at the drafter's block (what DFLASH runs, no parents), the compact verify and its
            variants; the commit of all layers at once (SGLang's scatter vs the compact replay);
            x layers = per step.
Shapes: Qwen3.6-27B's GDN layers (16 key heads, 48 value heads, K = V = 128, 48 GDN layers) at tp 1 and tp 2.

    pip install -q --no-index --no-deps --target /tmp/site .carry/whl/*.whl
    PYTHONPATH=tests/gpu_standins:/tmp/site:. DDTREE_GPU_STANDINS=1 SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 \\
        python3 bench/gdn_tree_gpu.py
Prints a table; $OUT/gdn_tree_gpu.json when OUT is set; exit 1 when a compact result (the default launch or a
variant that ran) leaves the tolerance. A variant that raised (e.g. out of shared memory) is reported, not
counted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ddtctl.kernels import gdn_levels, gdn_tree  # noqa: E402
from ddtctl.kernels.reference import build, visibility_from_parents  # noqa: E402

GDN_LAYERS = 48
TOL_OUT = 2e-2  # bf16 outputs of O(1): a few bf16 ulps
TOL_STATE = 1e-3  # fp32 states
# lv1_* / lv2_* / lv4_* / lv16_*: the level-step verify (gdn_levels.py, 1 / 2 / 4 / 16 tree levels a step;
# DDTREE_GDN_SOLVE=levels / levels2 / levels4 / levels16); anc_b2_64_bv64: today's server launch at 65..128
# nodes (shared ancestors, block 2 on 64 rows, bv 64). Key: (levels a step, ancestors given, block_v, num_warps
# or None: the launch's own)
LEVEL_VARIANTS = {
    "lv1_anc_bv64": (1, True, 64, None), "lv2_anc_bv64": (2, True, 64, None),
    "lv1_anc_bv32": (1, True, 32, None), "lv2_anc_bv32": (2, True, 32, None),
    "lv1_bv64": (1, False, 64, None), "lv1_anc_bv64_w4": (1, True, 64, 4),
    "lv1_anc_bv64_w16": (1, True, 64, 16),
    # log-depth stages first (DDTREE_GDN_SOLVE=levels4 / levels16): 2 log2(depth) dependent products
    "lv4_anc_bv64": (4, True, 64, None), "lv16_anc_bv64": (16, True, 64, None),
}
VARIANTS = ("anc", "bv64", "bv128", "tf32x3", "anc_bv64", "anc_tf32x3_bv64", "scratch", "b2_64", "b2_64_bv64",
            "anc_b2_64_bv64", *LEVEL_VARIANTS)
# the depth-follows-nodes bench (issue #30 item 2): chain16 vs today's server launch vs the level verify
LEVELS_COMMAND = ("--widths 17,65,97,128 --batches 1,8 --heads 16x48 --variants "
                  "anc_bv64,anc_b2_64_bv64,lv2_anc_bv64,lv4_anc_bv64,lv16_anc_bv64")


def ddtree_parents(rng: random.Random, width: int, depth: int = 15) -> list[int]:
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    lp = torch.log_softmax(torch.randn(depth, 64, generator=gen) * 2.5, -1)
    top = lp.topk(min(width - 1, 64), -1)
    tree = build(top.values.numpy(), top.indices.numpy().astype("int64"), width - 1)
    return [int(p) for p in tree.parents]


def timed(fn, iters: int = 20) -> float:
    """Microseconds of device time per call: `iters` calls captured in one CUDA graph (as a server replays its
    verify), so Python and launch overheads are not counted; median of 5 replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000 / iters)
    times.sort()
    return times[len(times) // 2]


def make_inputs(H: int, HV: int, bs: int, width: int, seed: int, dev, dtype=torch.bfloat16,
                dim: int = 128) -> SimpleNamespace:
    """One layer's verify: q/k/v/a/b random (`dtype`), fp32 SSM states random in bs + 3 slots, a DDTREE tree
    per request, and the compact verify's scratch at SGLang's full row size."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    total, slots = bs * width, bs + 3
    inp = SimpleNamespace(H=H, HV=HV, K=dim, V=dim, bs=bs, width=width, rng=rng)
    inp.q = torch.randn(1, total, H, dim, device=dev, dtype=dtype)
    inp.k = torch.randn(1, total, H, dim, device=dev, dtype=dtype)
    inp.v = torch.randn(1, total, HV, dim, device=dev, dtype=dtype)
    inp.a = torch.randn(total, HV, device=dev, dtype=dtype)
    inp.b = torch.randn(total, HV, device=dev, dtype=dtype)
    inp.A_log = (torch.rand(HV, device=dev) * 2 - 1).float()
    inp.dt_bias = torch.randn(HV, device=dev).float() * 0.5
    inp.states = torch.randn(1, slots, HV, dim, dim, device=dev) * 0.2  # one layer of the stacked pool
    inp.cache_idx = torch.tensor(rng.sample(range(slots), bs), device=dev, dtype=torch.int32)
    inp.rows = torch.arange(bs, device=dev, dtype=torch.int32)
    inp.cu = torch.arange(0, total + 1, width, device=dev, dtype=torch.int32)
    inp.parents = [ddtree_parents(rng, width) for _ in range(bs)]
    inp.par = torch.tensor([[0] + p[1:] for p in inp.parents], device=dev, dtype=torch.int64)
    inp.inter_compact = torch.zeros(1, bs + 1, width, HV, dim, dim, device=dev)
    return inp


def reference_output(inp: SimpleNamespace) -> torch.Tensor:
    """Request 0's outputs from the float64 node-by-node reference (on the CPU)."""
    r0 = slice(0, inp.width)
    q, k, v, a, b = (t.cpu() for t in (inp.q[0, r0], inp.k[0, r0], inp.v[0, r0], inp.a[r0], inp.b[r0]))
    h0 = inp.states[0, int(inp.cache_idx[0])].cpu()
    A_log, dt_bias = inp.A_log.cpu(), inp.dt_bias.cpu()
    return gdn_tree.tree_gdn_reference(q, k, v, a, b, A_log, dt_bias, h0, inp.parents[0])[0]


def accepted_paths(inp: SimpleNamespace, block: int) -> SimpleNamespace:
    """A random accepted path per request (root .. a random node), as the commit takes it."""
    acc, lens, last = [], [], []
    for r in range(inp.bs):
        node, path = inp.rng.randrange(inp.width), []
        while True:
            path.append(node)
            if node == 0:
                break
            node = inp.parents[r][node]
        path.reverse()
        acc.append([r * inp.width + x for x in path] + [-1] * (block - len(path)))
        lens.append(len(path))
        last.append(path[-1])
    dev = inp.states.device
    return SimpleNamespace(index=torch.tensor(acc, device=dev), last=torch.tensor(last, device=dev),
                           lens=torch.tensor(lens, device=dev, dtype=torch.int32))


def compact_verify(inp: SimpleNamespace, block: int, records: torch.Tensor, **launch) -> torch.Tensor:
    """The compact verify writing its records to `records`; `launch` overrides its launch options."""
    call = dict(A_log=inp.A_log, dt_bias=inp.dt_bias, q=inp.q, k=inp.k, v=inp.v, a=inp.a, b=inp.b,
                ssm_states=inp.states[0], cache_indices=inp.cache_idx, query_start_loc=inp.cu,
                intermediate_states_buffer=records, intermediate_state_indices=inp.rows,
                retrieve_parent_token=inp.par, depth_bound=block - 1)
    call.update(launch)
    if "levels_per_step" in call:
        return gdn_levels.tree_gdn_verify_levels(**call)
    return gdn_tree.tree_gdn_verify(**call)


def compact_commit(inp: SimpleNamespace, records: torch.Tensor, accepted: SimpleNamespace) -> torch.Tensor:
    """A copy of the states after the compact commit of the accepted paths from `records` [1, rows, ...]."""
    got = inp.states.clone()
    gdn_tree.tree_gdn_commit(temporal=got, intermediate_ssm=records, state_indices=inp.cache_idx,
                             scratch_rows=inp.rows, accept_index=accepted.index, accept_lens=accepted.lens,
                             width=inp.width, n_heads=inp.H)
    return got


def max_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.to(got.device).double()).abs().max())


def variant_launches(inp: SimpleNamespace, keys) -> list[tuple[str, dict]]:
    """The launch options of each named variant (VARIANTS)."""
    unknown = [key for key in keys if key not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    dev = inp.states.device
    anc = torch.from_numpy(np.stack([visibility_from_parents(np.asarray(p)) for p in inp.parents])).to(dev)
    bv = min(64, inp.V)
    known = {"anc": lambda: {"ancestors": anc}, "bv64": lambda: {"block_v": bv},
             "bv128": lambda: {"block_v": 128}, "tf32x3": lambda: {"precision": "tf32x3"},
             "anc_bv64": lambda: {"ancestors": anc, "block_v": bv},
             "anc_tf32x3_bv64": lambda: {"ancestors": anc, "block_v": bv, "precision": "tf32x3"},
             # the records-only scratch a compact pool allocates (hybrid.compact_scratch)
             "scratch": lambda: {"intermediate_states_buffer": torch.zeros(gdn_tree.compact_scratch_shape(
                 1, inp.bs + 1, inp.width, inp.HV, inp.V, inp.K), device=dev)[0]},
             # 65..128 nodes: block 2 on the full 64-row tile (the kernel before block 2 took only its rows)
             "b2_64": lambda: {"block2": gdn_tree.TWO_BLOCK_TILE},
             "b2_64_bv64": lambda: {"block2": gdn_tree.TWO_BLOCK_TILE, "block_v": bv},  # as the server (bv64)
             "anc_b2_64_bv64": lambda: {"block2": gdn_tree.TWO_BLOCK_TILE, "block_v": bv, "ancestors": anc}}
    for key, (levels, given, block_v, warps) in LEVEL_VARIANTS.items():
        launch = {"levels_per_step": levels, "block_v": min(block_v, inp.V), "num_warps": warps}
        known[key] = lambda launch=launch, given=given: dict(launch, **({"ancestors": anc} if given else {}))
    return [(key, known[key]()) for key in keys]


def check_variants(inp: SimpleNamespace, tried: list[tuple[str, dict]], block: int, o_ref: torch.Tensor,
                   ref_out0: torch.Tensor, want_states: torch.Tensor, accepted: SimpleNamespace) -> dict:
    """Each variant launched once on zeroed records: out_err_vs_sglang_<key> (all outputs against SGLang's
    `o_ref`), out_err_vs_f64_<key> (request 0's against the float64 reference), state_err_vs_sglang_<key>
    (the states a commit from its records gives against SGLang's scatter). A variant that raises (it does not
    fit: shared memory) gets error_<key> instead. Its records are left in the scratch (inp.inter_compact
    unless the variant brings its own)."""
    out: dict = {}
    for key, launch in tried:
        records = launch.get("intermediate_states_buffer", inp.inter_compact[0])
        try:
            records.zero_()
            o = compact_verify(inp, block, records, **{k: v for k, v in launch.items()
                                                       if k != "intermediate_states_buffer"})
            got = compact_commit(inp, records[None], accepted)
        except Exception as exc:  # noqa: BLE001 - a variant that does not fit is reported, not fatal
            out[f"error_{key}"] = f"{type(exc).__name__}: {str(exc)[:120]}"
            continue
        out[f"out_err_vs_sglang_{key}"] = max_err(o, o_ref)
        out[f"out_err_vs_f64_{key}"] = max_err(o[0, : inp.width], ref_out0)
        out[f"state_err_vs_sglang_{key}"] = max_err(got, want_states)
    return out


def case(H: int, HV: int, bs: int, width: int, seed: int, block: int = 16, variants: tuple = ()) -> dict:
    from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import (
        fused_sigmoid_gating_delta_rule_update,
    )
    from sglang.kernels.ops.mamba.mamba_state_scatter_triton import fused_mamba_state_scatter_with_mask

    inp = make_inputs(H, HV, bs, width, seed, torch.device("cuda"))
    inter_sglang = torch.zeros_like(inp.inter_compact)

    def sglang_tree():
        return fused_sigmoid_gating_delta_rule_update(
            A_log=inp.A_log, a=inp.a, dt_bias=inp.dt_bias, softplus_beta=1.0, softplus_threshold=20.0,
            q=inp.q, k=inp.k, v=inp.v, b=inp.b, initial_state_source=inp.states[0],
            initial_state_indices=inp.cache_idx, use_qk_l2norm_in_kernel=True, cu_seqlens=inp.cu,
            disable_state_update=True, intermediate_states_buffer=inter_sglang[0],
            intermediate_state_indices=inp.rows, cache_steps=width, retrieve_parent_token=inp.par)

    def compact():
        return compact_verify(inp, block, inp.inter_compact[0])

    o_ref, o_new = sglang_tree(), compact()
    torch.cuda.synchronize()
    out = {"H": H, "HV": HV, "bs": bs, "width": width, "seed": seed,
           "out_err_vs_sglang": max_err(o_new, o_ref)}
    ref_out0 = reference_output(inp)
    out["out_err_vs_f64"] = max_err(o_new[0, :width], ref_out0)
    out["sglang_err_vs_f64"] = max_err(o_ref[0, :width], ref_out0)
    accepted = accepted_paths(inp, block)
    want = inp.states.clone()
    fused_mamba_state_scatter_with_mask(want, inter_sglang, inp.cache_idx, accepted.last, None)
    out["state_err_vs_sglang"] = max_err(compact_commit(inp, inp.inter_compact, accepted), want)
    tried = variant_launches(inp, variants)
    out["variants"] = [key for key, _ in tried]
    out.update(check_variants(inp, tried, block, o_ref, ref_out0, want, accepted))
    out.update(time_case(inp, block, sglang_tree, compact, tried, accepted, out))
    return out


def time_case(inp: SimpleNamespace, block: int, sglang_tree, compact, tried: list[tuple[str, dict]],
              accepted: SimpleNamespace, row: dict) -> dict:
    """One layer's verify: SGLang's tree, its chain at the drafter's block (DFLASH's verify), the compact one
    and each variant that ran in check_variants; the commit of all layers."""
    from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import (
        fused_sigmoid_gating_delta_rule_update,
    )
    from sglang.kernels.ops.mamba.mamba_state_scatter_triton import fused_mamba_state_scatter_with_mask

    bs, dev = inp.bs, inp.states.device
    chain_total = bs * block
    qc, kc = inp.q[:, :chain_total].contiguous(), inp.k[:, :chain_total].contiguous()
    vc, ac = inp.v[:, :chain_total].contiguous(), inp.a[:chain_total].contiguous()
    bc = inp.b[:chain_total].contiguous()
    cu_c = torch.arange(0, chain_total + 1, block, device=dev, dtype=torch.int32)
    inter_c = torch.zeros(bs + 1, block, inp.HV, inp.V, inp.K, device=dev)

    def sglang_chain():
        return fused_sigmoid_gating_delta_rule_update(
            A_log=inp.A_log, a=ac, dt_bias=inp.dt_bias, softplus_beta=1.0, softplus_threshold=20.0, q=qc,
            k=kc, v=vc, b=bc, initial_state_source=inp.states[0], initial_state_indices=inp.cache_idx,
            use_qk_l2norm_in_kernel=True, cu_seqlens=cu_c, disable_state_update=True,
            intermediate_states_buffer=inter_c, intermediate_state_indices=inp.rows, cache_steps=block,
            retrieve_parent_token=None)

    out = {"us_sglang_tree": timed(sglang_tree), "us_sglang_chain16": timed(sglang_chain),
           "us_compact": timed(compact)}
    for key, launch in tried:
        out[f"us_compact_{key}"] = float("nan")
        if f"error_{key}" in row:
            continue
        records = launch.get("intermediate_states_buffer", inp.inter_compact[0])
        others = {k: v for k, v in launch.items() if k != "intermediate_states_buffer"}
        try:
            out[f"us_compact_{key}"] = timed(lambda: compact_verify(inp, block, records, **others))  # noqa: B023
        except Exception as exc:  # noqa: BLE001 - e.g. a graph capture it does not survive: reported
            out[f"error_{key}"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    try:  # all layers' states and records at once: 162 GiB at batch 8 x 128 nodes, so it may not fit
        layers_state = inp.states.expand(GDN_LAYERS, *inp.states.shape[1:]).contiguous()
        layers_inter = inp.inter_compact.expand(GDN_LAYERS, *inp.inter_compact.shape[1:]).contiguous()
    except torch.OutOfMemoryError:
        out["error_commit_all_layers"] = "OutOfMemoryError: every layer's records at once do not fit"
        return out
    out["us_commit_sglang_all_layers"] = timed(lambda: fused_mamba_state_scatter_with_mask(
        layers_state, layers_inter, inp.cache_idx, accepted.last, None), 20)
    out["us_commit_compact_all_layers"] = timed(lambda: gdn_tree.tree_gdn_commit(
        temporal=layers_state, intermediate_ssm=layers_inter, state_indices=inp.cache_idx,
        scratch_rows=inp.rows, accept_index=accepted.index, accept_lens=accepted.lens, width=inp.width,
        n_heads=inp.H), 20)
    return out


def _within(r: dict, suffix: str) -> bool:
    inf = float("inf")  # a missing measurement fails, and so does a NaN (its comparisons are false)
    return (r.get(f"out_err_vs_sglang{suffix}", inf) <= TOL_OUT
            and r.get(f"out_err_vs_f64{suffix}", inf) <= TOL_OUT
            and r.get(f"state_err_vs_sglang{suffix}", inf) <= TOL_STATE)


def ok_of(r: dict) -> bool:
    """The default launch and every variant that ran within the default launch's tolerances; a variant that
    raised (error_<key>: it does not fit, e.g. shared memory) is reported and does not fail the row."""
    return _within(r, "") and all(_within(r, f"_{key}") for key in r.get("variants", ())
                                  if f"error_{key}" not in r)


def variants_line(r: dict) -> str:
    parts = []
    for key in r.get("variants", ()):
        us = r.get(f"us_compact_{key}", float("nan"))
        if f"error_{key}" in r:
            parts.append(f"{key} raised, not counted ({r[f'error_{key}']})")
            continue
        parts.append(f"{key} {us:.1f} us (out {r[f'out_err_vs_sglang_{key}']:.1e} f64 "
                     f"{r[f'out_err_vs_f64_{key}']:.1e} state {r[f'state_err_vs_sglang_{key}']:.1e} "
                     f"{'ok' if _within(r, f'_{key}') else 'OUT OF TOLERANCE'})")
    return f"  variants {r['H']}x{r['HV']} bs={r['bs']} T={r['width']}: " + ("; ".join(parts) or "none")


def table(rows: list[dict]) -> str:
    hdr = (f"{'heads':>6} {'bs':>3} {'T':>3} | {'sglang tree':>11} {'chain16':>8} {'compact':>8} | "
           f"{'x48 tree ms':>11} {'x48 chain':>9} {'x48 compact':>11} | {'commit sgl':>10} {'compact':>8} | "
           f"{'err out':>8} {'err state':>9} ok")
    lines = [hdr, "-" * len(hdr)]
    for r in rows:
        lines.append(
            f"{r['H']:>2}x{r['HV']:<3} {r['bs']:>3} {r['width']:>3} | {r['us_sglang_tree']:>11.1f} "
            f"{r['us_sglang_chain16']:>8.1f} {r['us_compact']:>8.1f} | "
            f"{r['us_sglang_tree'] * 48 / 1000:>11.2f} {r['us_sglang_chain16'] * 48 / 1000:>9.2f} "
            f"{r['us_compact'] * 48 / 1000:>11.2f} | "
            f"{r['us_commit_sglang_all_layers']:>10.1f} {r['us_commit_compact_all_layers']:>8.1f} | "
            f"{r['out_err_vs_sglang']:>8.1e} {r['state_err_vs_sglang']:>9.1e} {'yes' if r['ok'] else 'NO'}")
    lines.append("ok: the default launch and every variant that ran within tolerance (out vs SGLang and vs "
                 f"float64 <= {TOL_OUT:g}, state <= {TOL_STATE:g}); a variant that raised (e.g. out of "
                 "shared memory) is listed as raised above and does not count")
    return "\n".join(lines)


def levels_table(rows: list[dict]) -> str:
    """Per-layer us: SGLang's chain at 16 tokens (DFLASH), today's server launch (shared ancestors, bv 64,
    block 2 on 64 rows at 65..128 nodes), each level-step variant; the best level variant against both."""
    keys = [k for k in LEVEL_VARIANTS if any(k in r.get("variants", ()) for r in rows)]
    if not keys:
        return ""
    hdr = f"{'heads':>6} {'bs':>3} {'T':>3} | {'chain16':>8} {'server':>8} | "
    hdr += " ".join(f"{k:>13}" for k in keys)
    lines = [hdr + " | best/chain16 best/server", "-" * (len(hdr) + 26)]
    for r in rows:
        nan = float("nan")
        wide = r["width"] > gdn_tree.MAX_SINGLE_TILE
        server = r.get("us_compact_anc_b2_64_bv64", nan) if wide else r.get("us_compact_anc_bv64", nan)
        lv = [r.get(f"us_compact_{k}", float("nan")) if _within(r, f"_{k}") else float("nan") for k in keys]
        best = min((x for x in lv if x == x), default=float("nan"))
        chain = r["us_sglang_chain16"]
        head = f"{r['H']:>2}x{r['HV']:<3} {r['bs']:>3} {r['width']:>3} | {chain:>8.1f} {server:>8.1f} | "
        lv_us = " ".join(f"{x:>13.1f}" for x in lv)
        lines.append(f"{head}{lv_us} | {best / chain:>12.2f} {best / server:>11.2f}")
    lines.append("level variants out of tolerance show nan; server = anc_b2_64_bv64 above 64 nodes, "
                 "anc_bv64 at 64 or fewer")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", action="store_true", help=f"issue #30's level-step table: {LEVELS_COMMAND}")
    ap.add_argument("--widths", default="17,33,64")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--heads", default="16x48,8x24", help="key x value heads per GPU (tp 1, tp 2)")
    ap.add_argument("--seed", type=int, default=1201)
    ap.add_argument("--variants", default="anc,anc_bv64,bv64,bv128,tf32x3,scratch",
                    help="other compact launches to check and time, held to the same tolerances (anc, bv64, "
                    "bv128, tf32x3, anc_bv64, anc_tf32x3_bv64, scratch = the records-only scratch, b2_64 "
                    "and b2_64_bv64 = block 2 of 65..128 nodes on a 64-row tile, raise at <= 64 nodes; "
                    "empty: the default launch only)")
    args = ap.parse_args(argv)
    if args.levels:
        args = ap.parse_args([*LEVELS_COMMAND.split(), *(argv if argv is not None else sys.argv[1:])])
    variants = tuple(v for v in args.variants.split(",") if v)
    print(f"seed {args.seed}; {torch.cuda.get_device_name()}; "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    rows = []
    for hk in args.heads.split(","):
        H, HV = (int(x) for x in hk.split("x"))
        for bs in (int(x) for x in args.batches.split(",")):
            for width in (int(x) for x in args.widths.split(",")):
                r = case(H, HV, bs, width, args.seed + len(rows), variants=variants)
                torch.cuda.empty_cache()  # the case's scratch (GBs at bs 8, T 64) before the next one
                r["ok"] = ok_of(r)
                rows.append(r)
                print(json.dumps(r), flush=True)
    text = table(rows)
    if any(k in variants for k in LEVEL_VARIANTS):
        text += "\n\nthe level-step verify (gdn_levels.py), us per layer:\n" + levels_table(rows)
    print("\nper-layer verify (us, device time in CUDA graphs), per-step x48 GDN layers (ms), commit of 48 "
          "layers (us); variants: time, max error of the outputs vs SGLang's and vs float64 (request 0), of "
          "the states a commit from its records gives vs SGLang's scatter")
    return report(rows, text, "gdn_tree_gpu", variants_line)


def report(rows: list[dict], text: str, name: str, variants_line) -> int:
    """Print the variant lines and the table, write $OUT/<name>.json and <name>_table.txt when OUT is set, print
    the verdict line; exit status 1 when a row is out of tolerance."""
    for r in rows:
        print(variants_line(r))
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["OUT"]) / f"{name}.json").write_text(json.dumps(rows, indent=1))
        (Path(os.environ["OUT"]) / f"{name}_table.txt").write_text(
            "\n".join([*(variants_line(r) for r in rows), text]) + "\n")
    bad = sum(not r["ok"] for r in rows)
    print(f"RESULT {'PASS' if not bad else 'FAIL'} ({len(rows) - bad}/{len(rows)} cases within tolerance)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
