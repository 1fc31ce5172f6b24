#!/usr/bin/env python3
"""The compact GDN tree verify (ddtctl/kernels/gdn_tree.py) against SGLang 0.5.23's own kernels, one GPU, seconds.

Per (heads, batch, verify width): DDTREE trees from the best-first build (ddtctl/kernels/reference.py) over random
log-probs, depth <= 15, one per request; q/k/v/a/b random (bf16), SSM states random (fp32).
  exact     compact outputs and committed states against SGLang's tree kernel (`fused_sigmoid_gating_delta_rule_
            update` with retrieve_parent_token, every node's state written) and its scatter of the last accepted
            node's state (`fused_mamba_state_scatter_with_mask`), plus the float64 node-by-node reference;
  time      microseconds per layer (CUDA events, median of repeated launches): SGLang's tree verify, SGLang's chain
            verify at the drafter's block (what DFLASH runs, no parents), and the compact verify; the commit of all
            layers at once (SGLang's scatter vs the compact replay). x layers = per step.
Shapes: Qwen3.6-27B's GDN layers (16 key heads, 48 value heads, K = V = 128, 48 GDN layers) at tp 1 and tp 2.

    pip install -q --no-index --no-deps --target /tmp/site .carry/whl/*.whl
    PYTHONPATH=tests/gpu_standins:/tmp/site:. DDTREE_GPU_STANDINS=1 SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 \\
        python3 bench/gdn_tree_gpu.py
Prints a table; $OUT/gdn_tree_gpu.json when OUT is set; exit 1 when a compact result leaves the tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ddtctl.kernels import gdn_tree  # noqa: E402
from ddtctl.kernels.reference import build, visibility_from_parents  # noqa: E402

GDN_LAYERS = 48
TOL_OUT = 2e-2  # bf16 outputs of O(1): a few bf16 ulps
TOL_STATE = 1e-3  # fp32 states


def ddtree_parents(rng: random.Random, width: int, depth: int = 15) -> list[int]:
    lp = torch.log_softmax(torch.randn(depth, 64, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
                           * 2.5, -1)
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


def case(H: int, HV: int, bs: int, width: int, seed: int, block: int = 16, variants: tuple = ()) -> dict:
    from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import (
        fused_sigmoid_gating_delta_rule_update,
    )
    from sglang.kernels.ops.mamba.mamba_state_scatter_triton import fused_mamba_state_scatter_with_mask

    rng = random.Random(seed)
    torch.manual_seed(seed)
    dev = torch.device("cuda")
    K = V = 128
    total = bs * width
    slots = bs + 3
    q = torch.randn(1, total, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, total, H, K, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, total, HV, V, device=dev, dtype=torch.bfloat16)
    a = torch.randn(total, HV, device=dev, dtype=torch.bfloat16)
    b = torch.randn(total, HV, device=dev, dtype=torch.bfloat16)
    A_log = (torch.rand(HV, device=dev) * 2 - 1).float()
    dt_bias = torch.randn(HV, device=dev).float() * 0.5
    states = torch.randn(1, slots, HV, V, K, device=dev) * 0.2  # one layer of the stacked pool
    cache_idx = torch.tensor(rng.sample(range(slots), bs), device=dev, dtype=torch.int32)
    rows = torch.arange(bs, device=dev, dtype=torch.int32)
    cu = torch.arange(0, total + 1, width, device=dev, dtype=torch.int32)
    parents = [ddtree_parents(rng, width) for _ in range(bs)]
    par = torch.tensor([[0] + p[1:] for p in parents], device=dev, dtype=torch.int64)
    inter_sglang = torch.zeros(1, bs + 1, width, HV, V, K, device=dev)
    inter_compact = torch.zeros_like(inter_sglang)

    def sglang_tree():
        return fused_sigmoid_gating_delta_rule_update(
            A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0, q=q, k=k, v=v, b=b,
            initial_state_source=states[0], initial_state_indices=cache_idx, use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu, disable_state_update=True, intermediate_states_buffer=inter_sglang[0],
            intermediate_state_indices=rows, cache_steps=width, retrieve_parent_token=par)

    def compact():
        return gdn_tree.tree_gdn_verify(
            A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=states[0], cache_indices=cache_idx,
            query_start_loc=cu, intermediate_states_buffer=inter_compact[0], intermediate_state_indices=rows,
            retrieve_parent_token=par, depth_bound=block - 1)

    o_ref, o_new = sglang_tree(), compact()
    torch.cuda.synchronize()
    out = {"H": H, "HV": HV, "bs": bs, "width": width, "seed": seed,
           "out_err_vs_sglang": float((o_ref.float() - o_new.float()).abs().max())}
    # float64 reference of request 0
    r0 = slice(0, width)
    ro, rs = gdn_tree.tree_gdn_reference(q[0, r0].cpu(), k[0, r0].cpu(), v[0, r0].cpu(), a[r0].cpu(), b[r0].cpu(),
                                         A_log.cpu(), dt_bias.cpu(), states[0, int(cache_idx[0])].cpu(), parents[0])
    out["out_err_vs_f64"] = float((o_new[0, r0].double().cpu() - ro).abs().max())
    out["sglang_err_vs_f64"] = float((o_ref[0, r0].double().cpu() - ro).abs().max())

    # commit: a random accepted path per request (root .. a random node)
    acc, lens, last = [], [], []
    for r in range(bs):
        node, path = rng.randrange(width), []
        while True:
            path.append(node)
            if node == 0:
                break
            node = parents[r][node]
        path.reverse()
        acc.append([r * width + x for x in path] + [-1] * (block - len(path)))
        lens.append(len(path))
        last.append(path[-1])
    acc_t = torch.tensor(acc, device=dev)
    lens_t = torch.tensor(lens, device=dev, dtype=torch.int32)
    last_t = torch.tensor(last, device=dev, dtype=torch.int64)
    want = states.clone()
    fused_mamba_state_scatter_with_mask(want, inter_sglang, cache_idx, last_t, None)
    got = states.clone()
    gdn_tree.tree_gdn_commit(temporal=got, intermediate_ssm=inter_compact, state_indices=cache_idx,
                             scratch_rows=rows, accept_index=acc_t, accept_lens=lens_t, width=width, n_heads=H)
    torch.cuda.synchronize()
    out["state_err_vs_sglang"] = float((want - got).abs().max())

    # timing: one layer's verify; the chain at the drafter's block (DFLASH's verify); the commit of all layers
    chain_total = bs * block
    qc, kc = q[:, :chain_total].contiguous(), k[:, :chain_total].contiguous()
    vc, ac, bc = v[:, :chain_total].contiguous(), a[:chain_total].contiguous(), b[:chain_total].contiguous()
    cu_c = torch.arange(0, chain_total + 1, block, device=dev, dtype=torch.int32)
    inter_c = torch.zeros(bs + 1, block, HV, V, K, device=dev)

    def sglang_chain():
        return fused_sigmoid_gating_delta_rule_update(
            A_log=A_log, a=ac, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0, q=qc, k=kc, v=vc, b=bc,
            initial_state_source=states[0], initial_state_indices=cache_idx, use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu_c, disable_state_update=True, intermediate_states_buffer=inter_c,
            intermediate_state_indices=rows, cache_steps=block, retrieve_parent_token=None)

    out["us_sglang_tree"] = timed(sglang_tree)
    out["us_sglang_chain16"] = timed(sglang_chain)
    out["us_compact"] = timed(compact)
    anc = torch.from_numpy(np.stack([visibility_from_parents(np.asarray(p)) for p in parents])).to(dev)
    known = {"anc": {"ancestors": anc}, "bv64": {"block_v": 64}, "bv128": {"block_v": 128},
             "tf32x3": {"precision": "tf32x3"}, "anc_bv64": {"ancestors": anc, "block_v": 64},
             "anc_tf32x3_bv64": {"ancestors": anc, "block_v": 64, "precision": "tf32x3"},
             # the records-only scratch a compact pool allocates (hybrid.compact_scratch)
             "scratch": {"intermediate_states_buffer": torch.zeros(
                 gdn_tree.compact_scratch_shape(1, bs + 1, width, HV, V, K), device=dev)[0]}}
    tried = [(key, known[key]) for key in (variants or ())]
    for key, kw in tried:
        call = dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=states[0],
                    cache_indices=cache_idx, query_start_loc=cu, intermediate_states_buffer=inter_compact[0],
                    intermediate_state_indices=rows, retrieve_parent_token=par, depth_bound=block - 1)
        call.update(kw)
        try:
            out[f"us_compact_{key}"] = timed(lambda: gdn_tree.tree_gdn_verify(**call))
        except Exception as exc:  # noqa: BLE001 - a variant that does not fit (shared memory) is reported, not fatal
            out[f"us_compact_{key}"] = float("nan")
            out[f"error_{key}"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    layers_state = states.expand(GDN_LAYERS, *states.shape[1:]).contiguous()
    layers_inter = inter_compact.expand(GDN_LAYERS, *inter_compact.shape[1:]).contiguous()
    out["us_commit_sglang_all_layers"] = timed(
        lambda: fused_mamba_state_scatter_with_mask(layers_state, layers_inter, cache_idx, last_t, None), 20)
    out["us_commit_compact_all_layers"] = timed(
        lambda: gdn_tree.tree_gdn_commit(temporal=layers_state, intermediate_ssm=layers_inter,
                                         state_indices=cache_idx, scratch_rows=rows, accept_index=acc_t,
                                         accept_lens=lens_t, width=width, n_heads=H), 20)
    del layers_state, layers_inter, inter_sglang, inter_compact, inter_c
    torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", default="17,33,64")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--heads", default="16x48,8x24", help="key x value heads per GPU (tp 1, tp 2)")
    ap.add_argument("--seed", type=int, default=1201)
    ap.add_argument("--variants", default="anc,anc_bv64,bv64,bv128,tf32x3,scratch",
                    help="other compact launches to time (anc, bv64, bv128, tf32x3, anc_bv64, anc_tf32x3_bv64, "
                    "scratch = the records-only scratch; empty: the default launch only)")
    args = ap.parse_args()
    print(f"seed {args.seed}; {torch.cuda.get_device_name()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    rows, bad = [], 0
    for hk in args.heads.split(","):
        H, HV = (int(x) for x in hk.split("x"))
        for bs in (int(x) for x in args.batches.split(",")):
            for width in (int(x) for x in args.widths.split(",")):
                r = case(H, HV, bs, width, args.seed + len(rows), variants=tuple(v for v in args.variants.split(",") if v))
                ok = (r["out_err_vs_sglang"] <= TOL_OUT and r["state_err_vs_sglang"] <= TOL_STATE
                      and r["out_err_vs_f64"] <= TOL_OUT)
                r["ok"] = ok
                bad += not ok
                rows.append(r)
                print(json.dumps(r), flush=True)
    hdr = (f"{'heads':>6} {'bs':>3} {'T':>3} | {'sglang tree':>11} {'chain16':>8} {'compact':>8} | "
           f"{'x48 tree ms':>11} {'x48 chain':>9} {'x48 compact':>11} | {'commit sgl':>10} {'compact':>8} | "
           f"{'err out':>8} {'err state':>9} ok")
    lines = [hdr, "-" * len(hdr)]
    for r in rows:
        lines.append(
            f"{r['H']:>2}x{r['HV']:<3} {r['bs']:>3} {r['width']:>3} | {r['us_sglang_tree']:>11.1f} "
            f"{r['us_sglang_chain16']:>8.1f} {r['us_compact']:>8.1f} | {r['us_sglang_tree'] * 48 / 1000:>11.2f} "
            f"{r['us_sglang_chain16'] * 48 / 1000:>9.2f} {r['us_compact'] * 48 / 1000:>11.2f} | "
            f"{r['us_commit_sglang_all_layers']:>10.1f} {r['us_commit_compact_all_layers']:>8.1f} | "
            f"{r['out_err_vs_sglang']:>8.1e} {r['state_err_vs_sglang']:>9.1e} {'yes' if r['ok'] else 'NO'}")
    print("\nper-layer verify (us, device time in CUDA graphs), per-step x48 GDN layers (ms), commit of 48 layers (us)")
    for r in rows:
        print(f"  variants {r['H']}x{r['HV']} bs={r['bs']} T={r['width']}: "
              + " ".join(f"{k[len('us_compact_'):]} {v:.1f}" for k, v in r.items() if k.startswith("us_compact_")))
    print("\n".join(lines))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["OUT"]) / "gdn_tree_gpu.json").write_text(json.dumps(rows, indent=1))
        (Path(os.environ["OUT"]) / "gdn_tree_gpu_table.txt").write_text("\n".join(lines) + "\n")
    print(f"RESULT {'PASS' if not bad else 'FAIL'} ({len(rows) - bad}/{len(rows)} cases within tolerance)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
