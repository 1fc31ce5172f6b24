#!/usr/bin/env python3
"""What a new batch size costs the tree walk (DDTREE's accept step), SGLang's Triton walk beside the tree builder's.

SGLang 0.5.23's `verify_tree_greedy_triton` declares the batch size a compile-time constant, so a server that meets
batch size 31, 30, ... as requests finish compiles the walk again for each. The builder's `_follow_kernel`
(`DDTreePlan.follow`, DDTREE_ACCEPT=device) takes the batch size as its launch grid only. This prints, per batch
size met in descending order (as a batch drains), the first call's and a later call's milliseconds (CUDA
synchronised) of each walk, at the chain's width (16) and a tree's (65), and checks that both walks accept the same
paths.

    python3 bench/accept_walk_gpu.py        # on the device, with SGLang importable (PYTHONPATH=/tmp/site)
    TRITON_INTERPRET=1 python3 bench/accept_walk_gpu.py --smoke   # CPU: the script runs (tiny sizes)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _tree(bs: int, n: int, torch, gen):
    """Random trees in the builder's layout: parents[b, 0] = -1, parents[b, i] < i; tokens; a posterior that walks
    a few levels down."""
    parents = torch.full((bs, n), -1, dtype=torch.int64)
    for i in range(1, n):
        parents[:, i] = torch.randint(0, i, (bs,), generator=gen)
    ids = torch.randint(0, 50, (bs, n), generator=gen)
    post = torch.randint(0, 50, (bs, n), generator=gen)
    return parents, ids, post


def _retrive(parents, torch):
    bs, n = parents.shape
    first = torch.full((bs, n), -1, dtype=torch.int64)
    sib = torch.full((bs, n), -1, dtype=torch.int64)
    for b in range(bs):
        last: dict[int, int] = {}
        for i in range(1, n):
            p = int(parents[b, i])
            if p in last:
                sib[b, last[p]] = i
            else:
                first[b, p] = i
            last[p] = i
    index = torch.arange(bs * n, dtype=torch.int64).view(bs, n)
    return index, first, sib


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--max-bs", type=int, default=32)
    args = ap.parse_args()
    import torch

    from ddtctl.kernels.triton_device import _follow_kernel

    dev = "cpu" if args.smoke else "cuda"
    sync = (lambda: None) if args.smoke else torch.cuda.synchronize
    try:
        from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton
    except Exception as err:  # noqa: BLE001  (a CPU env's SGLang import may fail anywhere in its kernels)
        print(f"SGLang's walk not importable ({type(err).__name__}: {err}): only the builder's walk is timed")
        verify_tree_greedy_triton = None
    depth = 15
    sizes = [args.max_bs] + list(range(args.max_bs - 1, 0, -3)) if not args.smoke else [3, 2]
    gen = torch.Generator().manual_seed(7)
    rows = []
    for n in (16, 65) if not args.smoke else (5,):
        f = 1 << (n - 1).bit_length()
        for bs in sizes:
            parents, ids, post = _tree(bs, n, torch, gen)
            index, first, sib = _retrive(parents, torch)
            parents, ids, post, index, first, sib = (t.to(dev) for t in (parents, ids, post, index, first, sib))
            times = {}
            if verify_tree_greedy_triton is not None:
                for label in ("sglang first", "sglang again"):
                    predicts = torch.full((bs * n,), -1, dtype=torch.int32, device=dev)
                    accept_index = torch.full((bs, depth + 1), -1, dtype=torch.int32, device=dev)
                    accept_num = torch.zeros((bs,), dtype=torch.int32, device=dev)
                    sync()
                    t0 = time.perf_counter()
                    verify_tree_greedy_triton(predicts, accept_index, accept_num, ids, index, first, sib, post)
                    sync()
                    times[label] = 1000 * (time.perf_counter() - t0)
            acc = torch.empty((bs, depth + 1), dtype=torch.int32, device=dev)
            alen = torch.empty((bs,), dtype=torch.int32, device=dev)
            bonus = torch.empty((bs,), dtype=torch.int64, device=dev)
            for label in ("device first", "device again"):
                sync()
                t0 = time.perf_counter()
                _follow_kernel[(bs,)](ids, parents, post, acc, alen, bonus, n - 1, depth, F=f, num_warps=1)
                sync()
                times[label] = 1000 * (time.perf_counter() - t0)
            same = "-"
            if verify_tree_greedy_triton is not None:
                same = "yes" if accept_num.to(torch.int64).equal(alen.to(torch.int64)) else "NO"
            rows.append((n, bs, times, same))
    cols = ["sglang first", "sglang again", "device first", "device again"]
    print(f"\n# tree walk per batch size ({'cpu smoke' if args.smoke else torch.cuda.get_device_name()}), ms")
    print(f"{'width':>5} {'bs':>4} " + " ".join(f"{c:>13}" for c in cols) + "  same accept lengths")
    for n, bs, times, same in rows:
        print(f"{n:>5} {bs:>4} " + " ".join(f"{times.get(c, float('nan')):>13.2f}" for c in cols) + f"  {same}")
    for c in cols:
        firsts = [t[c] for _, _, t, _ in rows if c in t]
        if firsts:
            print(f"total {c}: {sum(firsts):.1f} ms over {len(firsts)} batch sizes")
    return 0 if all(same != "NO" for *_, same in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
