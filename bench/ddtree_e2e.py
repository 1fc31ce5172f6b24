#!/usr/bin/env python3
"""Lossless DDTree decoding end to end: a tiny random Hugging Face Llama target (built in code, float64), a noisy
stand-in drafter, and the tree path (numpy reference, or the Triton kernels). Checks that every budget reproduces
greedy autoregressive decoding token for token and prints mean accepted length per budget vs a chain (B = L, top-1).

    python3 bench/ddtree_e2e.py                      # CPU, reference path
    python3 bench/ddtree_e2e.py --path triton        # Triton kernels (GPU if present, else the interpreter)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", choices=["reference", "triton"], default="reference")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--depth", type=int, default=7)
    ap.add_argument("--new", type=int, default=40)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--budgets", default="8,16,32,64")
    args = ap.parse_args()
    import torch

    from ddtctl.kernels import decode as D

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        torch.set_num_threads(1)
    target = D.hf_target(D.tiny_llama(vocab=args.vocab, seed=0, device=dev))
    prompt = [1, 5, 9, 33, 2, 17, 40, 8]
    greedy = D.autoregressive(target, prompt, args.new)

    def path(budget, chain=False):
        if args.path == "reference":
            return D.ReferenceTreePath(budget, chain=chain)
        return D.TritonTreePath(args.depth, args.vocab, budget, dev, chain=chain)

    runs = [("chain (B=L, top-1)", args.depth, True)] + [(f"tree B={b}", int(b), False)
                                                          for b in args.budgets.split(",")]
    print(f"target: tiny Llama V={args.vocab} on {dev}; drafter: target chain logits + N(0, {args.noise}^2); "
          f"L={args.depth}; {args.new} new tokens; path={args.path}")
    print("| run | lossless | rounds | mean accepted | tokens/round | s |")
    print("|---|---|---|---|---|---|")
    ok = True
    for label, budget, chain in runs:
        t = time.perf_counter()
        r = D.ddtree_decode(target, D.NoisyChainDrafter(target, args.depth, noise=args.noise, seed=3),
                            path(budget, chain), prompt, args.new)
        same = r.tokens == greedy
        ok &= same
        print(f"| {label} | {same} | {r.rounds} | {r.mean_accept:.2f} | {args.new / r.rounds:.2f} | "
              f"{time.perf_counter() - t:.1f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
