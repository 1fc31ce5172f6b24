#!/usr/bin/env python3
"""The split-KV tree verify attention (ddtctl/kernels/tree_attn.py) against SGLang 0.5.23's
extend_attention_fwd with DDTREE's custom mask (what a DDTREE verify runs on the triton backend), one GPU.

Per (shape, batch, prefix, verify width): a DDTREE tree per request from the best-first build
(ddtctl/kernels/reference.py) over random log-probs, its mask in SGLang's flat TARGET_VERIFY layout (prefix
columns left as garbage: neither kernel reads them), q/k/v and the KV pool random bf16, prefixes in shuffled
pool slots, kv_indices padded to a CUDA-graph buffer's length (--kv-buffer) as a server hands it.
  exact  max |error| of both kernels' outputs against the float64 attention over [prefix + ancestors-or-self]
         (every request), and of the split-KV outputs against SGLang's; the same for every --variants launch
         (s<n>: n prefix splits, m<rows>: query rows per prefix program, s<n>m<rows>: both);
  time   microseconds per layer (CUDA graphs, median): SGLang's kernel, the split-KV at its automatic tiles
         and at each variant; x layers = per step (8B: 36 layers; Qwen3.6-27B: its 16 full-attention
         layers; 64 layers, full_attention_interval 4).
Shapes: an 8B target (32 q / 8 kv heads, head_dim 128) and Qwen3.6-27B's full-attention layers at tp 1 (24 q /
4 kv heads, head_dim 256, tests/fidelity/models/qwen3.6-27b/config.json).

    pip install -q --no-index --no-deps --target /tmp/site .carry/whl/*.whl
    PYTHONPATH=tests/gpu_standins:/tmp/site:. DDTREE_GPU_STANDINS=1 SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 \\
        python3 bench/tree_attn_gpu.py
Prints a table; $OUT/tree_attn_gpu.json when OUT is set; exit 1 when a split-KV result (automatic or a
--variants launch that ran) leaves the tolerance. A launch that raised (e.g. out of shared memory) is reported
and does not count.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "bench"))

from gdn_tree_gpu import ddtree_parents, report, timed  # noqa: E402 - the same trees, timing, report

from ddtctl.kernels import tree_attn  # noqa: E402
from ddtctl.kernels.reference import visibility_from_parents  # noqa: E402

TOL_OUT = 2e-2  # bf16 outputs of O(1): a few ulps over SGLang's own error against float64
SHAPES = {"8b": (32, 8, 128, 36), "27b": (24, 4, 256, 16)}  # q heads, kv heads, head_dim, attention layers


def make_inputs(h_q: int, h_kv: int, dim: int, bs: int, prefix: int, width: int, seed: int, dev,
                dtype=torch.bfloat16, kv_buffer: int = 0) -> SimpleNamespace:
    """One layer's verify call as the triton backend makes it (every request the same prefix length).
    kv_buffer > prefix: kv_indices as long as under CUDA graphs (bs * kv_buffer entries, a max-size buffer;
    the kernels read only the first bs * prefix), so the split-KV picks its tiles as it would in a server."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    total, slots = bs * width, bs * prefix + 64
    c = SimpleNamespace(bs=bs, width=width, prefix=prefix)
    c.q = torch.randn(total, h_q, dim, device=dev, dtype=dtype)
    c.k = torch.randn(total, h_kv, dim, device=dev, dtype=dtype)
    c.v = torch.randn(total, h_kv, dim, device=dev, dtype=dtype)
    c.k_pool = torch.randn(slots, h_kv, dim, device=dev, dtype=dtype)
    c.v_pool = torch.randn(slots, h_kv, dim, device=dev, dtype=dtype)
    c.kv_indices = torch.randperm(slots, device=dev)[: bs * prefix].to(torch.int64)
    if kv_buffer > prefix:
        c.kv_indices = torch.cat([c.kv_indices, c.kv_indices.new_zeros(bs * (kv_buffer - prefix))])
    c.kv_indptr = torch.arange(0, bs * prefix + 1, prefix, device=dev, dtype=torch.int32)
    c.qo_indptr = torch.arange(0, total + 1, width, device=dev, dtype=torch.int32)
    c.vis = [torch.from_numpy(visibility_from_parents(np.asarray(ddtree_parents(rng, width)))).to(dev)
             for _ in range(bs)]
    seg = width * (prefix + width)
    mask = torch.randint(0, 2, (bs, width, prefix + width), device=dev, dtype=torch.uint8)
    mask[:, :, prefix:] = torch.stack(c.vis).to(torch.uint8)
    c.mask = mask.reshape(-1)
    c.mask_indptr = torch.arange(0, bs * seg + 1, seg, device=dev, dtype=torch.int64)
    return c


def call_args(c: SimpleNamespace, o: torch.Tensor) -> tuple:
    """extend_attention_fwd's positional arguments (causal, as the backend calls a target verify)."""
    return (c.q, c.k, c.v, o, c.k_pool, c.v_pool, c.qo_indptr, c.kv_indptr, c.kv_indices, c.mask, True,
            c.mask_indptr, c.width, 1.0, 1.0)


def reference(c: SimpleNamespace) -> torch.Tensor:
    """Every request's outputs in float64 (on the device)."""
    out = []
    for r in range(c.bs):
        rows = slice(r * c.width, (r + 1) * c.width)
        slots = c.kv_indices[r * c.prefix: (r + 1) * c.prefix]
        out.append(tree_attn.tree_attention_reference(c.q[rows], c.k[rows], c.v[rows], c.k_pool, c.v_pool,
                                                      slots, c.vis[r]))
    return torch.cat(out)


def max_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().max())


def variant_launch(key: str) -> dict:
    """tree_verify_fwd's tile overrides of a variant: "s4" -> 4 splits, "m32" -> 32 query rows, "s4m32"."""
    found = re.fullmatch(r"(?:s(\d+))?(?:m(\d+))?", key)
    if not key or found is None:
        raise SystemExit(f"--variants: {key!r} is not s<splits>, m<rows> or s<splits>m<rows>")
    splits, rows = found.groups()
    launch = {"n_splits": int(splits)} if splits else {}
    return {**launch, "block_m": int(rows)} if rows else launch


def check_and_time(c: SimpleNamespace, key: str, want: torch.Tensor, o_sgl: torch.Tensor, row: dict) -> None:
    """One variant launched, checked against float64 and SGLang, timed; one that raises is reported."""
    launch = variant_launch(key)
    try:
        o = torch.zeros_like(c.q)
        tree_attn.tree_verify_fwd(*call_args(c, o), **launch)
        row[f"out_err_vs_f64_{key}"] = max_err(o, want)
        row[f"out_err_vs_sglang_{key}"] = max_err(o, o_sgl)
        row[f"us_tree_{key}"] = timed(lambda: tree_attn.tree_verify_fwd(*call_args(c, o), **launch))
    except Exception as exc:  # noqa: BLE001 - a launch that does not fit is reported, not fatal
        row[f"error_{key}"] = f"{type(exc).__name__}: {str(exc)[:120]}"


def case(shape: str, bs: int, prefix: int, width: int, seed: int, variants: tuple[str, ...],
         device: str = "cuda", dtype=torch.bfloat16, kv_buffer: int = 0) -> dict:
    """One row: both kernels checked and timed (device, dtype: the CPU test runs it in the interpreter)."""
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    h_q, h_kv, dim, layers = SHAPES[shape]
    c = make_inputs(h_q, h_kv, dim, bs, prefix, width, seed, torch.device(device), dtype, kv_buffer)
    o_sgl, o_tree = torch.zeros_like(c.q), torch.zeros_like(c.q)
    extend_attention_fwd(*call_args(c, o_sgl))
    served = tree_attn.tree_verify_fwd(*call_args(c, o_tree))
    launch = tree_attn.choose_launch(bs, h_q, width, dim, c.kv_indices.shape[0] / bs)
    want = reference(c)
    row = {"shape": shape, "h_q": h_q, "h_kv": h_kv, "dim": dim, "layers": layers, "bs": bs, "prefix": prefix,
           "width": width, "seed": seed, "served": served, "auto_splits": launch.n_splits,
           "auto_block_m": launch.block_m, "variants": list(variants),
           "sglang_err_vs_f64": max_err(o_sgl, want), "out_err_vs_f64": max_err(o_tree, want),
           "out_err_vs_sglang": max_err(o_tree, o_sgl)}
    row["us_sglang"] = timed(lambda: extend_attention_fwd(*call_args(c, o_sgl)))
    row["us_tree"] = float("nan")
    if served:
        row["us_tree"] = timed(lambda: tree_attn.tree_verify_fwd(*call_args(c, o_tree)))
    for key in variants:
        check_and_time(c, key, want, o_sgl, row)
    return row


def _within(r: dict, suffix: str) -> bool:
    """Within TOL_OUT of SGLang's outputs and no further from float64 than SGLang's own, plus TOL_OUT
    (SGLang's bf16 outputs are themselves a few ulps off the reference; the kernel being replaced sets the
    floor)."""
    inf = float("inf")  # a missing measurement fails, and so does a NaN (its comparisons are false)
    return (r.get(f"out_err_vs_sglang{suffix}", inf) <= TOL_OUT
            and r.get(f"out_err_vs_f64{suffix}", inf) <= r.get("sglang_err_vs_f64", inf) + TOL_OUT)


def ok_of(r: dict) -> bool:
    """Served, and the automatic launch and every variant that ran within tolerance; one that raised is
    reported and does not fail the row."""
    return bool(r.get("served")) and _within(r, "") and all(
        _within(r, f"_{key}") for key in r.get("variants", ()) if f"error_{key}" not in r)


def best_of(r: dict) -> tuple[str, float]:
    """The fastest split-KV launch that ran within tolerance: ("auto" or the variant, microseconds)."""
    timings = [("auto", r.get("us_tree", float("nan")))] if _within(r, "") else []
    timings += [(key, r[f"us_tree_{key}"]) for key in r.get("variants", ())
                if f"us_tree_{key}" in r and _within(r, f"_{key}")]
    timings = [(k, us) for k, us in timings if us == us]
    return min(timings, key=lambda t: t[1]) if timings else ("none", float("nan"))


def table(rows: list[dict]) -> str:
    hdr = (f"{'shape':>5} {'bs':>2} {'prefix':>6} {'n':>3} | {'sglang':>7} {'tree':>7} {'auto':>7} "
           f"{'best':>7} {'at':>6} | {'xL sgl ms':>9} {'xL tree':>7} {'saved':>6} | "
           f"{'err sgl':>7} {'err tree':>8} {'vs sgl':>7} ok")
    lines = [hdr, "-" * len(hdr)]
    for r in rows:
        at, best = best_of(r)
        layers = r["layers"]
        sgl_ms, tree_ms = r["us_sglang"] * layers / 1000, best * layers / 1000
        lines.append(
            f"{r['shape']:>5} {r['bs']:>2} {r['prefix']:>6} {r['width']:>3} | {r['us_sglang']:>7.1f} "
            f"{r['us_tree']:>7.1f} {'s' + str(r['auto_splits']):>7} {best:>7.1f} {at:>6} | "
            f"{sgl_ms:>9.3f} {tree_ms:>7.3f} {sgl_ms - tree_ms:>6.3f} | {r['sglang_err_vs_f64']:>7.1e} "
            f"{r['out_err_vs_f64']:>8.1e} {r['out_err_vs_sglang']:>7.1e} {'yes' if r['ok'] else 'NO'}")
    lines.append("us per layer (CUDA graphs); tree = automatic tiles (auto: its split count), best = "
                 "fastest launch within tolerance (at: which); xL = x attention layers per step, saved = "
                 f"sglang - best; ok: every launch that ran <= {TOL_OUT:g} from SGLang and <= SGLang's "
                 f"float64 error + {TOL_OUT:g}")
    return "\n".join(lines)


def variants_line(r: dict) -> str:
    parts = []
    for key in r.get("variants", ()):
        if f"error_{key}" in r:
            parts.append(f"{key} raised, not counted ({r[f'error_{key}']})")
            continue
        parts.append(f"{key} {r[f'us_tree_{key}']:.1f} us (f64 {r[f'out_err_vs_f64_{key}']:.1e} "
                     f"{'ok' if _within(r, f'_{key}') else 'OUT OF TOLERANCE'})")
    return f"  {r['shape']} bs={r['bs']} prefix={r['prefix']} n={r['width']}: " + ("; ".join(parts) or "none")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="8b,27b", help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prefixes", default="1024,4096")
    ap.add_argument("--widths", default="17,33,65,129")
    ap.add_argument("--variants", default="s1,s2,s4,s8,s16,m16,m32,m64,m128",
                    help="other split-KV launches, checked and timed: s<n> n prefix splits, m<rows> query "
                    "rows per prefix program, s<n>m<rows> both; empty: the automatic tiles only")
    ap.add_argument("--kv-buffer", type=int, default=40960,
                    help="kv_indices entries per request, as a server's CUDA-graph buffer holds (its context "
                    "length): the split-KV picks its split count from this static length; 0: the prefix")
    ap.add_argument("--seed", type=int, default=1201)
    args = ap.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    for key in variants:
        variant_launch(key)  # a malformed one stops the run before any GPU work
    print(f"seed {args.seed}; {torch.cuda.get_device_name()}; "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    rows = []
    for shape in args.shapes.split(","):
        for bs in (int(x) for x in args.batches.split(",")):
            for prefix in (int(x) for x in args.prefixes.split(",")):
                for width in (int(x) for x in args.widths.split(",")):
                    r = case(shape, bs, prefix, width, args.seed + len(rows), variants,
                             kv_buffer=args.kv_buffer)
                    torch.cuda.empty_cache()
                    r["ok"] = ok_of(r)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    text = table(rows)
    print()
    return report(rows, text, "tree_attn_gpu", variants_line)


if __name__ == "__main__":
    sys.exit(main())
