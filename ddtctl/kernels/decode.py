"""A small DDTree decoding loop, used to check losslessness end to end (tests on CPU, bench on the GPU).

The target is any causal LM callable as
``target(tokens[T], positions[T], visible[T, T] bool) -> logits[T, V]``; `hf_target` wraps a Hugging Face
model (a tiny randomly initialised Llama from `tiny_llama`, no downloads). The drafter stand-in,
`NoisyChainDrafter`, is the target's own next-token logits along its greedy chain plus Gaussian noise: its
top-1 is often wrong, so acceptance is partial and the tree's alternatives matter. It is a stand-in for a
DFlash drafter (one block of L logits per step, not conditioned on the drafted tokens), not a model of one.

One round: root = last committed token at position n-1; the tree is built from the draft logits,
verified in one target forward over prefix + [root] + nodes (ancestor-only attention inside the tree,
positions start + depth), followed with the posterior tokens (argmax, or a position-keyed Gumbel-max
sample), and the accepted nodes plus the bonus token are committed. With position-keyed noise,
sampling too is reproduced token for token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ddtctl.kernels import reference as R


def tiny_llama(vocab: int = 96, seed: int = 0, device: str = "cpu", layers: int = 2, hidden: int = 64):
    """A tiny random Llama (float64, eager attention) built in code."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    # attn_implementation is a PretrainedConfig keyword that LlamaConfig's signature does not declare
    settings: dict[str, Any] = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=0.3,
        attn_implementation="eager",
    )
    cfg = LlamaConfig(**settings)
    torch.manual_seed(seed)
    # typed as nn.Module: transformers wraps `to` with functools.wraps, which mypy cannot bind to self
    model = cast(torch.nn.Module, LlamaForCausalLM(cfg))
    return model.to(device=device, dtype=torch.float64).eval()


def hf_target(model):
    import torch

    def run(tokens, positions, visible):
        dev = model.device
        t = torch.as_tensor(np.asarray(tokens), dtype=torch.long, device=dev)[None]
        p = torch.as_tensor(np.asarray(positions), dtype=torch.long, device=dev)[None]
        vis = torch.as_tensor(visible, device=dev)
        add = torch.zeros(vis.shape, dtype=torch.float64, device=dev).masked_fill(
            ~vis, torch.finfo(torch.float64).min
        )
        with torch.no_grad():
            return model(input_ids=t, position_ids=p, attention_mask=add[None, None]).logits[0]

    return run


def _causal(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), dtype=bool))


def _to_np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def next_token(logits_row, position: int, temperature: float, seed: int) -> int:
    if temperature <= 0:
        return int(R.posterior_tokens(logits_row[None])[0])
    noise = R.gumbel_noise(seed, position, logits_row.shape[-1])
    return int(R.posterior_tokens(logits_row[None], temperature, noise[None])[0])


def autoregressive(
    target, prompt: list[int], max_new: int, temperature: float = 0.0, seed: int = 0
) -> list[int]:
    seq = list(prompt)
    while len(seq) < len(prompt) + max_new:
        n = len(seq)
        logits = _to_np(target(seq, np.arange(n), _causal(n)))
        seq.append(next_token(logits[-1], n, temperature, seed))
    return seq


class NoisyChainDrafter:
    """Stand-in drafter: the target's logits along its own greedy
    chain, plus N(0, noise^2) noise (float32)."""

    def __init__(self, target, depth: int, noise: float, seed: int = 0):
        self.target, self.depth, self.noise = target, depth, noise
        self.rng = np.random.default_rng(seed)

    def __call__(self, seq: list[int]) -> np.ndarray:
        cur = list(seq)
        rows = []
        for _ in range(self.depth):
            n = len(cur)
            row = _to_np(self.target(cur, np.arange(n), _causal(n)))[-1]
            rows.append(row)
            cur.append(int(np.argmax(row)))
        x = np.stack(rows) + self.rng.normal(0.0, self.noise, size=(self.depth, rows[0].shape[-1]))
        return x.astype(np.float32)


@dataclass
class DecodeResult:
    tokens: list[int]
    rounds: int = 0
    accept_lengths: list[int] = field(default_factory=list)

    @property
    def mean_accept(self) -> float:
        return float(np.mean(self.accept_lengths)) if self.accept_lengths else 0.0


class ReferenceTreePath:
    """Tree preparation with the numpy reference (CPU)."""

    def __init__(self, budget: int, chain: bool = False):
        self.budget, self.chain = budget, chain

    def prepare(self, draft: np.ndarray, root: int, start: int, prefix_len: int):
        k = 1 if self.chain else R.check_budget(draft.shape[0], draft.shape[1], self.budget)
        lp, ids = R.topk_logprobs(draft, k)
        tree = R.build(lp, ids, self.budget)
        c = R.compile_tree(tree, root, start, prefix_len)
        return c.input_ids, c.positions, tree.visibility, tree.parents

    def follow(self, input_ids, parents, posterior):
        f = R.follow(input_ids, parents, posterior)
        return f.accepted, f.bonus


class TritonTreePath:
    """Tree preparation with the Triton kernels (batch 1; GPU, or the interpreter on CPU)."""

    def __init__(self, depth: int, vocab: int, budget: int, device: str, chain: bool = False):
        import torch

        from ddtctl.kernels.triton_kernels import DDTreePlan

        self.torch = torch
        self.device = device
        self.plan = DDTreePlan(1, depth, vocab, budget, device, k=1 if chain else None)

    def prepare(self, draft: np.ndarray, root: int, start: int, prefix_len: int):
        torch, plan = self.torch, self.plan
        x = torch.from_numpy(np.ascontiguousarray(draft))[None].to(self.device)
        plan.topk(x)
        plan.build()
        ii, pos, vis, _ = plan.compile(
            torch.tensor([root], device=self.device), torch.tensor([start], device=self.device)
        )
        return _to_np(ii[0]), _to_np(pos[0]), _to_np(vis[0]), _to_np(plan.parents[0])

    def follow(self, input_ids, parents, posterior):
        torch = self.torch
        acc, alen, bonus = self.plan.follow(
            torch.as_tensor(posterior, dtype=torch.int64, device=self.device)[None]
        )
        acc = _to_np(acc[0])
        return [int(a) for a in acc[: int(alen[0]) + 1]], int(bonus[0])


def ddtree_decode(
    target, drafter, path, prompt: list[int], max_new: int, temperature: float = 0.0, seed: int = 0
) -> DecodeResult:
    seq = list(prompt)
    res = DecodeResult(tokens=seq)
    while len(seq) < len(prompt) + max_new:
        n = len(seq)
        root, start, prefix_len = seq[-1], n - 1, n - 1
        draft = drafter(seq)
        input_ids, positions, vis, parents = path.prepare(draft, root, start, prefix_len)
        m = len(input_ids)
        tokens = np.concatenate([np.asarray(seq[:-1], dtype=np.int64), input_ids])
        pos = np.concatenate([np.arange(prefix_len), positions])
        visible = np.zeros((prefix_len + m, prefix_len + m), dtype=bool)
        visible[:prefix_len, :prefix_len] = _causal(prefix_len)
        visible[prefix_len:, :prefix_len] = True
        visible[prefix_len:, prefix_len:] = vis
        logits = _to_np(target(tokens, pos, visible))[prefix_len:]
        if temperature <= 0:
            posterior = R.posterior_tokens(logits)
        else:
            noise = np.stack([R.gumbel_noise(seed, int(p) + 1, logits.shape[-1]) for p in positions])
            posterior = R.posterior_tokens(logits, temperature, noise)
        accepted, bonus = path.follow(input_ids, parents, posterior)
        seq.extend(int(input_ids[a]) for a in accepted[1:])
        seq.append(int(bonus))
        res.rounds += 1
        res.accept_lengths.append(len(accepted) - 1)
    del seq[len(prompt) + max_new :]
    return res
