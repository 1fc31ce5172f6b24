"""ChainRowMover: the accepted nodes' KV rows into chain order, every layer in one launch (Triton's interpreter on
the CPU). Its result must equal a gather of all sources followed by a scatter (SGLang's move_kv_cache_native)."""

from __future__ import annotations

import random

import pytest
import torch

from ddtctl.kernels.triton_kernels import ChainRowMover

SEED = 1207


def _chain_src(rng: random.Random, length: int) -> list[int]:
    """A commit's chain sources: the accepted nodes' indices (strictly increasing, acc[j] >= j) for j <= a, then
    self-copies past the accepted length."""
    a = rng.randrange(length)
    acc, node = [0], 0
    for j in range(1, a + 1):
        node = rng.randrange(max(node + 1, j), 3 * length - (a - j))  # room for the deeper ones
        acc.append(node)
    return acc + list(range(a + 1, length))


@pytest.mark.parametrize("case", range(6))
def test_moves_equal_gather_then_scatter_in_every_layer(case):
    print(f"seed {SEED + case}")
    rng = random.Random(SEED + case)
    torch.manual_seed(SEED + case)
    bs, length, width = rng.randint(1, 4), rng.randint(2, 8), 0
    layers = [torch.randn(64 * 3 * 4, 2, 4, dtype=torch.bfloat16) for _ in range(3)]
    layers += [torch.randn(64 * 3 * 4, 3, 2) for _ in range(2)]  # another row width: its own launch
    expected = [t.clone() for t in layers]
    base = torch.tensor([64 * 3 * b for b in range(bs)])[:, None]
    local = torch.tensor([_chain_src(rng, length) for _ in range(bs)])
    src, tgt = base + local, base + torch.arange(length)[None, :]
    width = int(local.max()) + 1
    assert width <= 3 * length
    for t in expected:
        t[tgt.reshape(-1)] = t[src.reshape(-1)].clone()
    mover = ChainRowMover(layers)
    assert len(mover.groups) == 2
    mover.move(tgt, src)
    for got, want in zip(layers, expected):
        assert torch.equal(got, want)


def test_overlapping_sources_and_targets_read_before_write():
    """acc = [0, 2, 3]: chain position 1 takes node 2 while position 2 takes node 3 -- a parallel copy would race."""
    layer = torch.arange(10 * 4, dtype=torch.float32).view(10, 4)
    want = layer.clone()
    want[[1, 2]] = layer[[2, 3]].clone()
    ChainRowMover([layer]).move(torch.tensor([[0, 1, 2]]), torch.tensor([[0, 2, 3]]))
    assert torch.equal(layer, want)


def test_refuses_buffers_it_cannot_address():
    with pytest.raises(ValueError, match="contiguous"):
        ChainRowMover([torch.zeros(8, 4).t()])
    with pytest.raises(ValueError, match="32-bit words"):
        ChainRowMover([torch.zeros(8, 3, dtype=torch.bfloat16)])
    with pytest.raises(ValueError, match="no buffers"):
        ChainRowMover([])
