"""Test-only: dummy weights that make a tiny random model's greedy output depend on its context.

SGLang's `--load-format dummy` draws every parameter from uniform(-1e-3, 1e-3) with one seed (so parameters of
equal size are equal) and that includes the RMSNorm weights: logits are then nearly uniform and a tiny Qwen3 greedily
decodes a 2-cycle whatever the prompt, which makes "== plain greedy" weak evidence. With
`DDTREE_TEST_WEIGHTS=informative` the dummy initializer instead gives: norm (and other 1-d) weights 1, biases 0, matrices
uniform(+-sqrt(3 / fan_in)) (unit-variance preserving), embeddings uniform(+-0.5) (logit std ~4.6 at hidden 256) --
each from a generator seeded by the parameter's name, so every server of a run gets the same model.
"""

from __future__ import annotations

import hashlib
import math

import torch

EMBED_RANGE = 0.5


def _seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def initialize_informative_weights(model: torch.nn.Module, *args, **kwargs) -> None:
    for name, param in model.state_dict().items():
        if not torch.is_floating_point(param):
            continue
        if name.endswith("bias"):
            param.zero_()
            continue
        if "norm" in name or param.dim() < 2:
            param.fill_(1.0)
            continue
        gen = torch.Generator(device=param.device)
        gen.manual_seed(_seed(name))
        bound = EMBED_RANGE if ("embed" in name or "lm_head" in name) else math.sqrt(3.0 / param.shape[-1])
        tmp = torch.empty(param.shape, dtype=torch.float32, device=param.device).uniform_(-bound, bound, generator=gen)
        param.copy_(tmp.to(param.dtype))


def install() -> None:
    from post_import import after_import

    def patch(mod):
        mod.initialize_dummy_weights = initialize_informative_weights

    after_import("sglang.srt.model_loader.weight_utils", patch)
    after_import("sglang.srt.model_loader.loader", patch)
