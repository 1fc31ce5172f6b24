"""DDTREE_GDN_ANCESTORS=shared (hybrid.py SharedAncestors): the compact GDN verify's ancestor matrix built
once per verify forward and handed to every GDN layer's kernel call, in Triton's interpreter.

* with the switch on, CompactTreeVerify's outputs and records equal the switch-off launch (the kernel deriving
  the matrix itself) on bushy, chain, two-block (65+ nodes) and batched trees, over several layers;
* the matrix is built once per forward and again after the forward-begin hook, or when the building layer
  calls again (CUDA-graph capture's warm-ups and captured run follow one metadata init) -- never reused stale;
* the capturable builder equals tree_prep.visibility_from_parents on random trees;
* switch off (or an unknown value): no matrix is built.
(The build under a captured CUDA graph, and its speed, are for the GPU: bench/spec_throughput_gpu.py
--anc-budgets.)
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from ddtree_sglang import hybrid  # noqa: E402
from ddtree_sglang import tree_prep as tp  # noqa: E402

SEED = 9173
HEADS, VHEADS, DIM = 2, 4, 16


def _random_tree(rng: random.Random, width: int, depth: int) -> list[int]:
    """Parents of a topologically ordered tree (a parent precedes its children) no deeper than `depth`."""
    parents, levels = [-1], [0]
    for node in range(1, width):
        parent = rng.choice([p for p in range(node) if levels[p] < depth])
        parents.append(parent)
        levels.append(levels[parent] + 1)
    return parents


def _depth(parents: list[int]) -> int:
    levels = [0] * len(parents)
    for node in range(1, len(parents)):
        levels[node] = levels[parents[node]] + 1
    return max(levels)


TREES = {  # name: (trees of one verify batch, depth_bound)
    "bushy9_bs2": (lambda rng: [[-1, 0, 0, 0, 1, 1, 2, 4, 0], _random_tree(rng, 9, 3)], 3),
    "chain17": (lambda rng: [[-1, *range(16)]], 16),
    "two_block70_bs2": (lambda rng: [_random_tree(rng, 70, 15), [-1, *range(14), *([0] * 55)]], 15),
}


def _layer(gen: torch.Generator, bs: int, width: int) -> dict:
    """One GDN layer's verify call (its own SSM state pool, inputs and compact scratch)."""
    total, slots = bs * width, bs + 1
    return dict(
        A_log=torch.rand(VHEADS, generator=gen) * 2 - 1, dt_bias=torch.randn(VHEADS, generator=gen) * 0.5,
        q=torch.randn(1, total, HEADS, DIM, generator=gen),
        k=torch.randn(1, total, HEADS, DIM, generator=gen),
        v=torch.randn(1, total, VHEADS, DIM, generator=gen), a=torch.randn(total, VHEADS, generator=gen),
        b=torch.randn(total, VHEADS, generator=gen),
        ssm_states=torch.randn(slots, VHEADS, DIM, DIM, generator=gen) * 0.3,
        cache_indices=torch.arange(bs, dtype=torch.int32) + 1,
        query_start_loc=torch.arange(0, total + 1, width, dtype=torch.int32),
        intermediate_states_buffer=torch.zeros(
            hybrid._gdn_tree().compact_scratch_shape(1, bs, width, VHEADS, DIM, DIM)[1:]
        ),
        intermediate_state_indices=torch.arange(bs, dtype=torch.int32))


def _parents(trees: list[list[int]], rng: random.Random) -> torch.Tensor:
    """retrieve_parent_token as SGLang's tree conv fills it: int32 [bs, T]; the root's entry is not read."""
    return torch.tensor([[rng.randrange(-1, len(t))] + t[1:] for t in trees], dtype=torch.int32)


def _kernel(monkeypatch, switch: str | None, depth_bound: int) -> hybrid.CompactTreeVerify:
    if switch is None:
        monkeypatch.delenv("DDTREE_GDN_ANCESTORS", raising=False)
    else:
        monkeypatch.setenv("DDTREE_GDN_ANCESTORS", switch)
    return hybrid.CompactTreeVerify(depth_bound=depth_bound)


def _forward(kernel, layers: list[dict], parents: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One verify forward over the layers: each layer's outputs and the records it wrote (fresh scratch)."""
    results = []
    for layer in layers:
        call = dict(layer, intermediate_states_buffer=layer["intermediate_states_buffer"].clone())
        out = kernel.target_verify(**call, retrieve_parent_token=parents, cache_steps=parents.shape[1])
        results.append((out, call["intermediate_states_buffer"]))
    return results


def _assert_same(got, expect) -> None:
    for (out, rec), (out_ref, rec_ref) in zip(got, expect, strict=True):
        assert torch.equal(out, out_ref) and torch.equal(rec, rec_ref)


@pytest.fixture(autouse=True)
def _builds(monkeypatch):
    monkeypatch.setitem(hybrid.STATE, "ancestor_builds", 0)


@pytest.mark.parametrize("name", sorted(TREES))
def test_shared_ancestors_give_the_outputs_and_records_of_the_derived_ones(monkeypatch, name):
    print(f"seed {SEED}")
    rng, gen = random.Random(SEED), torch.Generator().manual_seed(SEED)
    make, depth_bound = TREES[name]
    trees = make(rng)
    assert max(_depth(t) for t in trees) <= depth_bound
    parents = _parents(trees, rng)
    layers = [_layer(gen, len(trees), len(trees[0])) for _ in range(3)]
    derived = _forward(_kernel(monkeypatch, "derive", depth_bound), layers, parents)
    assert hybrid.STATE["ancestor_builds"] == 0
    shared = _kernel(monkeypatch, "shared", depth_bound)
    _assert_same(_forward(shared, layers, parents), derived)
    assert hybrid.STATE["ancestor_builds"] == 1  # one matrix for the three layers
    expect = tp.visibility_from_parents(torch.tensor([[-1] + t[1:] for t in trees]), depth_bound)
    assert torch.equal(shared.ancestors.matrix, expect)


def _two_forwards(monkeypatch):
    """Two trees for one parent buffer (an eager step reusing the address with new contents)."""
    rng, gen = random.Random(SEED + 1), torch.Generator().manual_seed(SEED + 1)
    first, second = [_random_tree(rng, 12, 5) for _ in range(2)], [_random_tree(rng, 12, 5) for _ in range(2)]
    layers = [_layer(gen, 2, 12) for _ in range(3)]
    derive = _kernel(monkeypatch, "derive", 5)
    expect_second = _forward(derive, layers, _parents(second, rng))
    kernel = _kernel(monkeypatch, "shared", 5)
    parents = _parents(first, rng)
    _forward(kernel, layers, parents)
    assert hybrid.STATE["ancestor_builds"] == 1
    parents.copy_(_parents(second, rng))  # the same buffer, the next step's tree
    return kernel, layers, parents, expect_second


def test_the_forward_begin_hook_forgets_the_matrix(monkeypatch):
    kernel, layers, parents, expect_second = _two_forwards(monkeypatch)
    backend = SimpleNamespace(kernel_dispatcher=SimpleNamespace(tree_verify_kernel=kernel))
    hybrid.forget_tree_ancestors(None, backend, SimpleNamespace())
    assert kernel.ancestors.matrix is None
    # a later layer first: the rebuild comes from the hook alone, not from the building layer calling again
    got = _forward(kernel, layers[1:] + layers[:1], parents)
    assert hybrid.STATE["ancestor_builds"] == 2
    _assert_same(got, expect_second[1:] + expect_second[:1])


def test_the_building_layer_calling_again_starts_a_new_forward(monkeypatch):
    """CUDA-graph capture: one metadata init, then warm-up runs and the captured run; each must build."""
    kernel, layers, parents, expect_second = _two_forwards(monkeypatch)
    _assert_same(_forward(kernel, layers, parents), expect_second)
    assert hybrid.STATE["ancestor_builds"] == 2


def test_another_parent_buffer_gets_its_own_matrix(monkeypatch):
    """A capture for another batch size: its own retrieve_parent_token, so its own matrix."""
    rng, gen = random.Random(SEED + 2), torch.Generator().manual_seed(SEED + 2)
    kernel = _kernel(monkeypatch, "shared", 4)
    small, large = [_random_tree(rng, 9, 4)], [_random_tree(rng, 9, 4) for _ in range(3)]
    _forward(kernel, [_layer(gen, 1, 9)], _parents(small, rng))
    _forward(kernel, [_layer(gen, 3, 9)], _parents(large, rng))
    assert hybrid.STATE["ancestor_builds"] == 2 and kernel.ancestors.matrix.shape == (3, 9, 9)


def test_the_hook_leaves_other_kernels_alone():
    stock = SimpleNamespace()
    backend = SimpleNamespace(kernel_dispatcher=SimpleNamespace(tree_verify_kernel=stock))
    hybrid.forget_tree_ancestors(None, backend)
    assert backend.kernel_dispatcher.tree_verify_kernel is stock
    hybrid.forget_tree_ancestors(None, SimpleNamespace())  # a backend without a dispatcher: nothing to forget


@pytest.mark.parametrize("case", range(6))
def test_the_capturable_builder_equals_the_reference_walk(case):
    seed = SEED + 100 + case
    print(f"seed {seed}")
    rng = random.Random(seed)
    bs, width = rng.randint(1, 4), rng.choice([2, 7, 16, 33, 64, 128])
    depth = rng.randint(1, width - 1)
    trees = [_random_tree(rng, width, depth) for _ in range(bs)]
    bound = max(_depth(t) for t in trees)  # as deep as the deepest tree: the squarings must reach its root
    reference = tp.visibility_from_parents(torch.tensor([[-1] + t[1:] for t in trees]), bound)
    for dtype in (torch.int32, torch.int64):
        parents = torch.tensor([[rng.randrange(-1, width)] + t[1:] for t in trees], dtype=dtype)
        assert torch.equal(hybrid.ancestor_matrix(parents, bound), reference)


def test_an_out_of_range_parent_is_no_parent():
    parents = torch.tensor([[-1, 0, 7, -1]], dtype=torch.int32)  # 7 is no node, -1 none: 2 and 3 are roots
    expect = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(hybrid.ancestor_matrix(parents, 3)[0], expect)


@pytest.mark.parametrize("switch", ["derive", "Shared", "off"])
def test_without_the_switch_no_matrix_is_built(monkeypatch, switch):
    rng, gen = random.Random(SEED + 3), torch.Generator().manual_seed(SEED + 3)
    kernel = _kernel(monkeypatch, switch, 4)
    assert kernel.ancestors is None
    _forward(kernel, [_layer(gen, 2, 9) for _ in range(2)], _parents([_random_tree(rng, 9, 4)] * 2, rng))
    assert hybrid.STATE["ancestor_builds"] == 0


def test_unset_the_matrix_is_shared(monkeypatch):
    """DDTREE_GDN_ANCESTORS unset: the shared matrix, the default since its H200 server runs (2026-12-01)."""
    rng, gen = random.Random(SEED + 4), torch.Generator().manual_seed(SEED + 4)
    kernel = _kernel(monkeypatch, None, 4)
    assert kernel.ancestors is not None
    _forward(kernel, [_layer(gen, 2, 9) for _ in range(2)], _parents([_random_tree(rng, 9, 4)] * 2, rng))
    assert hybrid.STATE["ancestor_builds"] == 1


@pytest.mark.parametrize("switch, width, want", [
    (None, 65, 64), ("full", 65, 64), ("Rows", 65, 64),  # the full 64-row block 2 unless "rows" exactly
    ("rows", 65, None), ("rows", 97, None),  # the kernel's own choice: block 2 on its rows
    (None, 33, None), ("rows", 64, None),  # one tile: no block 2 to size
])
def test_the_block2_switch_reaches_the_two_block_kernel_only(monkeypatch, switch, width, want):
    """DDTREE_GDN_BLOCK2 (hybrid.py BLOCK2_DEFAULT "full": the tile the H200 servers ran exact) sets the compact
    verify's block-2 tile at 65..128 nodes; the kernel refuses a block2 at <= 64 nodes, so none is passed there."""
    real, seen = hybrid._gdn_tree(), []

    def spy(**kw):
        seen.append(kw["block2"])
        return torch.zeros(1)

    monkeypatch.setenv("DDTREE_GDN_SOLVE", "squarings")  # auto would verify >= LEVELS_FROM_NODES by levels
    if switch is None:
        monkeypatch.delenv("DDTREE_GDN_BLOCK2", raising=False)
    else:
        monkeypatch.setenv("DDTREE_GDN_BLOCK2", switch)
    rng, gen = random.Random(SEED + 5), torch.Generator().manual_seed(SEED + 5)
    layers, kernel = [_layer(gen, 1, width)], _kernel(monkeypatch, "derive", 15)
    monkeypatch.setattr(hybrid, "_gdn_tree", lambda: SimpleNamespace(
        MAX_SINGLE_TILE=real.MAX_SINGLE_TILE, TWO_BLOCK_TILE=real.TWO_BLOCK_TILE, tree_gdn_verify=spy))
    _forward(kernel, layers, _parents([_random_tree(rng, width, 15)], rng))
    assert seen == [want]


def test_both_block2_tiles_give_the_same_outputs_and_records(monkeypatch):
    rng, gen = random.Random(SEED + 6), torch.Generator().manual_seed(SEED + 6)
    trees, layers = [_random_tree(rng, 65, 15)], [_layer(gen, 1, 65)]
    parents = _parents(trees, rng)
    got = {}
    for switch in ("full", "rows"):
        monkeypatch.setenv("DDTREE_GDN_BLOCK2", switch)
        got[switch] = _forward(_kernel(monkeypatch, "derive", 15), layers, parents)
    for (out, rec), (out_full, rec_full) in zip(got["rows"], got["full"], strict=True):
        assert torch.allclose(out, out_full, atol=1e-6) and torch.allclose(rec, rec_full, atol=1e-6)
