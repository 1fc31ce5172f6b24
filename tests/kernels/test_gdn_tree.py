"""The compact GDN tree verify and commit (ddtctl/kernels/gdn_tree.py) in Triton's interpreter: outputs and committed
states equal SGLang's node-by-node tree recurrence (tree_gdn_reference, float64) on DDTREE-shaped trees, with GQA
heads, padding requests, chains as deep as the bound, and the mamba-track snapshot."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from ddtctl.kernels import gdn_tree
from ddtctl.kernels.reference import build, visibility_from_parents

SEED = 4242
PAYLOAD_FILES = Path(__file__).resolve().parents[2] / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files"


def _tree(rng: random.Random, width: int, depth: int, spread: float = 2.5) -> list[int]:
    """A DDTREE tree (best-first build) of `width` nodes over random log-probs; a larger `spread` makes the
    top token likelier, so the tree deeper."""
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    lp = torch.log_softmax(torch.randn(depth, 16, generator=gen) * spread, -1)
    top = lp.topk(min(width - 1, 16), -1)
    return [int(p) for p in build(top.values.numpy(), top.indices.numpy().astype("int64"), width - 1).parents]


def _path(parents: list[int], node: int) -> list[int]:
    path = [node]
    while node != 0:
        node = parents[node]
        path.append(node)
    return path[::-1]


def _inputs(rng: random.Random, bs: int, width: int, heads: int, vheads: int, dim: int, trees):
    total = bs * width
    q, k = torch.randn(1, total, heads, dim), torch.randn(1, total, heads, dim)
    v = torch.randn(1, total, vheads, dim)
    a, b = torch.randn(total, vheads), torch.randn(total, vheads)
    A_log, dt_bias = torch.rand(vheads) * 2 - 1, torch.randn(vheads) * 0.5
    par = torch.tensor([[rng.randrange(width)] + t[1:] for t in trees], dtype=torch.int64)  # root entry: ignored
    return q, k, v, a, b, A_log, dt_bias, par


@pytest.mark.parametrize("case", range(4))
def test_verify_and_commit_equal_the_node_by_node_recurrence(case):
    seed = SEED + case
    print(f"seed {seed}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    heads, vheads, dim = rng.choice([(1, 1, 16), (2, 4, 16), (2, 6, 32)])
    bs, width, depth = rng.randint(1, 3), rng.choice([5, 9, 17]), rng.choice([3, 6, 15])
    trees = [_tree(rng, width, depth) for _ in range(bs)]
    _check_verify_and_commit(rng, trees, heads, vheads, dim, depth, padding=bs > 1 and case % 2 == 1,
                             compact_scratch=case % 2 == 0)


def _check_verify_and_commit(rng: random.Random, trees, heads: int, vheads: int, dim: int, depth: int, *,
                             padding: bool, compact_scratch: bool, ancestors: bool = False, pick=None,
                             track_pick=None, precision: str = "tf32",
                             verify=gdn_tree.tree_gdn_verify) -> None:
    """Verify `trees` (one per request) and commit an accepted path per request (`pick(parents)` = its last
    node, a random node by default; request 0 also snapshots a node of its path, `track_pick(path)` or a
    random one, to a track slot): outputs and states equal tree_gdn_reference's. `padding`: the last request
    is a CUDA-graph padding row (no state, no scratch row); `compact_scratch`: the records-only scratch a
    compact pool allocates, else SGLang's full rows; `ancestors`: the ancestor matrix given, else derived from
    the parents; `precision`: the verify's dot precision; `verify`: the launch, with tree_gdn_verify's
    keywords."""
    bs, width = len(trees), len(trees[0])
    q, k, v, a, b, A_log, dt_bias, par = _inputs(rng, bs, width, heads, vheads, dim, trees)
    slots = bs + 2
    states = torch.randn(1, slots, vheads, dim, dim) * 0.3
    cache_idx = torch.tensor(rng.sample(range(slots), bs), dtype=torch.int32)
    if padding:
        cache_idx[-1] = -1
    rows = torch.arange(bs, dtype=torch.int32)
    full = (1, bs + 1, width, vheads, dim, dim)
    compact = gdn_tree.compact_scratch_shape(1, bs + 1, width, vheads, dim, dim)
    scratch = torch.zeros(compact if compact_scratch else full)
    cu = torch.arange(0, bs * width + 1, width, dtype=torch.int32)
    anc = torch.from_numpy(np.stack([visibility_from_parents(np.asarray(t)) for t in trees]))
    out = verify(
        A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=states[0], cache_indices=cache_idx,
        query_start_loc=cu, intermediate_states_buffer=scratch[0], intermediate_state_indices=rows,
        retrieve_parent_token=par, depth_bound=depth, ancestors=anc if ancestors else None,
        precision=precision)
    accept, lens, expect = [], [], []
    for r in range(bs):
        sl = slice(r * width, (r + 1) * width)
        h0 = states[0, int(cache_idx[r])] if cache_idx[r] >= 0 else torch.zeros(vheads, dim, dim)
        ref_out, ref_states = gdn_tree.tree_gdn_reference(q[0, sl], k[0, sl], v[0, sl], a[sl], b[sl], A_log,
                                                          dt_bias, h0, trees[r])
        assert (out[0, sl].double() - ref_out).abs().max() < 1e-4
        path = _path(trees[r], rng.randrange(width) if pick is None else pick(trees[r]))
        accept.append([r * width + n for n in path] + [-1] * (depth + 1 - len(path)))
        lens.append(len(path))
        expect.append((path, ref_states))
    track_slot = torch.full((bs,), -1, dtype=torch.int32)
    track_node = torch.full((bs,), -1, dtype=torch.int64)
    free = [s for s in range(slots) if s not in cache_idx.tolist()]
    if lens[0] > 1:  # request 0 crosses the track interval at a node inside its accepted path
        at = expect[0][0][rng.randrange(lens[0] - 1)] if track_pick is None else track_pick(expect[0][0])
        track_slot[0], track_node[0] = free[0], at
    before = states.clone()
    gdn_tree.tree_gdn_commit(
        temporal=states, intermediate_ssm=scratch, state_indices=cache_idx, scratch_rows=rows,
        accept_index=torch.tensor(accept), accept_lens=torch.tensor(lens, dtype=torch.int32), width=width,
        n_heads=heads, track_indices=track_slot, track_nodes=track_node)
    touched = set()
    for r, (path, ref_states) in enumerate(expect):
        if cache_idx[r] < 0:
            continue
        touched.add(int(cache_idx[r]))
        assert (states[0, int(cache_idx[r])].double() - ref_states[path[-1]]).abs().max() < 1e-4
    if track_slot[0] >= 0:
        touched.add(int(track_slot[0]))
        assert (states[0, int(track_slot[0])].double() - expect[0][1][int(track_node[0])]).abs().max() < 1e-4
    for s in set(range(slots)) - touched:
        assert torch.equal(states[0, s], before[0, s])


def test_a_chain_as_deep_as_the_bound_is_exact_and_one_level_short_is_not():
    """The nilpotent series needs 2^S > depth: a 16-node chain (depth 15) with the bound 15 matches; with the bound
    7 (S = 3, series up to power 7) it must not, which shows the bound is what makes it exact."""
    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    width = 16
    chain = [-1] + list(range(width - 1))
    q, k, v, a, b, A_log, dt_bias, par = _inputs(rng, 1, width, 1, 2, 16, [chain])
    a = a - 3.0  # slow decay: deep terms stay large enough to matter
    states = torch.randn(2, 2, 16, 16) * 0.3
    ref_out, _ = gdn_tree.tree_gdn_reference(q[0], k[0], v[0], a, b, A_log, dt_bias, states[0], chain)

    def run(bound: int) -> float:
        out = gdn_tree.tree_gdn_verify(
            A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=states,
            cache_indices=torch.tensor([0], dtype=torch.int32), query_start_loc=torch.tensor([0, width],
                                                                                            dtype=torch.int32),
            intermediate_states_buffer=torch.zeros(2, width, 2, 16, 16),
            intermediate_state_indices=torch.tensor([0], dtype=torch.int32), retrieve_parent_token=par,
            depth_bound=bound)
        return float((out[0].double() - ref_out).abs().max())

    assert run(15) < 1e-4
    assert run(7) > 1e-3


def test_refuses_bf16_states_and_strided_heads():
    q = torch.randn(1, 4, 1, 16)
    common = dict(A_log=torch.zeros(1), dt_bias=torch.zeros(1), k=q, v=q, a=torch.zeros(4, 1), b=torch.zeros(4, 1),
                  cache_indices=torch.tensor([0], dtype=torch.int32), query_start_loc=torch.tensor([0, 4]),
                  intermediate_state_indices=torch.tensor([0], dtype=torch.int32),
                  retrieve_parent_token=torch.zeros(1, 4, dtype=torch.int64), depth_bound=3)
    with pytest.raises(ValueError, match="fp32"):
        gdn_tree.tree_gdn_verify(q=q, ssm_states=torch.zeros(1, 1, 16, 16, dtype=torch.bfloat16),
                                 intermediate_states_buffer=torch.zeros(1, 4, 1, 16, 16), **common)
    wide = torch.randn(1, 4, 2, 16)[:, :, :1]
    with pytest.raises(ValueError, match="contiguous heads"):
        gdn_tree.tree_gdn_verify(q=wide.transpose(2, 3).contiguous().transpose(2, 3), ssm_states=torch.zeros(
            1, 1, 16, 16), intermediate_states_buffer=torch.zeros(1, 4, 1, 16, 16), **common)


def test_a_given_ancestor_matrix_gives_the_same_outputs_as_the_parents():
    rng = random.Random(SEED + 7)
    torch.manual_seed(SEED + 7)
    bs, width = 2, 9
    trees = [_tree(rng, width, 6) for _ in range(bs)]
    q, k, v, a, b, A_log, dt_bias, par = _inputs(rng, bs, width, 2, 4, 16, trees)
    anc = torch.from_numpy(np.stack([visibility_from_parents(np.asarray(t)) for t in trees]))
    common = dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=torch.randn(3, 4, 16, 16),
                  cache_indices=torch.tensor([2, 0], dtype=torch.int32), query_start_loc=torch.tensor([0, 9, 18]),
                  intermediate_state_indices=torch.arange(bs, dtype=torch.int32), retrieve_parent_token=par,
                  depth_bound=6)
    derived = gdn_tree.tree_gdn_verify(intermediate_states_buffer=torch.zeros(3, width, 4, 16, 16), **common)
    given = gdn_tree.tree_gdn_verify(intermediate_states_buffer=torch.zeros(3, width, 4, 16, 16), ancestors=anc,
                                     **common)
    assert torch.allclose(derived, given, atol=1e-6)
    wrong = anc.clone()
    wrong[0, width - 1, 0] = False  # a node cut from the root: its output must change
    assert not torch.allclose(derived, gdn_tree.tree_gdn_verify(
        intermediate_states_buffer=torch.zeros(3, width, 4, 16, 16), ancestors=wrong, **common), atol=1e-4)


def _depths(parents: list[int]) -> list[int]:
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        assert parents[i] < i  # the two-block kernel relies on it: a parent precedes its children
        depth[i] = depth[parents[i]] + 1
    return depth


def _deep_tree(rng: random.Random, width: int) -> list[int]:
    """A DDTREE tree whose deepest node (depth 15) lies in block 2 (its path reaches back into block 1)."""
    for _ in range(50):
        tree = _tree(rng, width, 15, spread=8.0)
        depth = _depths(tree)
        last = max(range(width), key=lambda i: (depth[i], i))
        if depth[last] == 15 and last >= gdn_tree.TWO_BLOCK_TILE:
            return tree
    raise AssertionError("no deep tree crossing the block boundary")


def _deepest(parents: list[int]) -> int:
    depth = _depths(parents)
    return max(range(len(parents)), key=lambda i: (depth[i], i))


def _last_of_block1(path: list[int]) -> int:
    return max(n for n in path[:-1] if n < gdn_tree.TWO_BLOCK_TILE)


def _cross_tree(width: int) -> list[int]:
    """Block 1 a chain 0..47 with nodes 48..63 on it; in block 2 a chain from node 47 (64, 65, ...) with every
    third node hung on block 1 instead (nodes 64..T-1 have parents in both blocks, depth up to 64)."""
    parents = [-1, *range(47)] + [(7 * i) % 47 for i in range(48, 64)]
    last = 47
    for i in range(64, width):
        if i % 3 == 2:
            parents.append((5 * i) % 64)
        else:
            parents.append(last)
            last = i
    return parents


WIDE = {  # trees of 65..128 nodes: the two-block kernel ([64, 64] tiles; block 2 on BT2 rows)
    "deep128_gqa_padding_compact": dict(width=128, kind="deep", bs=3, heads=(2, 4, 16), padding=True,
                                        compact_scratch=True, ancestors=False),
    "deep96_given_ancestors_full_rows": dict(width=96, kind="deep", bs=2, heads=(1, 2, 16), padding=False,
                                             compact_scratch=False, ancestors=True),
    "bushy96_gqa_given_ancestors": dict(width=96, kind="bushy", bs=2, heads=(2, 6, 32), padding=True,
                                        compact_scratch=True, ancestors=True),
    "chain65_parents": dict(width=65, kind="chain", bs=2, heads=(2, 4, 16), padding=False,
                            compact_scratch=False, ancestors=False),
    "bushy128_parents": dict(width=128, kind="bushy", bs=1, heads=(1, 1, 16), padding=False,
                             compact_scratch=True, ancestors=False),
    # K = 64 keeps tf32x3 (below 64 the verify takes exact fp32): the two-block launch caps BV at 16
    "deep112_tf32x3_k64": dict(width=112, kind="deep", bs=1, heads=(1, 2, 64), padding=False,
                               compact_scratch=True, ancestors=False, precision="tf32x3"),
    # block 2 on 16 rows (65, 72, 80 nodes) and on 64 (97): parents in both blocks, derived and given
    "deep65_given_ancestors": dict(width=65, kind="deep", bs=2, heads=(2, 4, 16), padding=True,
                                   compact_scratch=True, ancestors=True),
    "cross72_parents": dict(width=72, kind="cross", bs=2, heads=(1, 2, 16), padding=False,
                            compact_scratch=True, ancestors=False),
    "cross80_given_ancestors": dict(width=80, kind="cross", bs=1, heads=(2, 4, 16), padding=False,
                                    compact_scratch=False, ancestors=True),
    "cross97_parents": dict(width=97, kind="cross", bs=1, heads=(1, 2, 16), padding=False,
                            compact_scratch=True, ancestors=False),
    "deep97_given_ancestors": dict(width=97, kind="deep", bs=1, heads=(1, 2, 16), padding=False,
                                   compact_scratch=True, ancestors=True),
}


@pytest.mark.parametrize("name", sorted(WIDE))
def test_trees_wider_than_one_tile_equal_the_node_by_node_recurrence(name):
    """65..128 nodes: outputs, the committed state of the deepest node (its path in both blocks) and a track
    snapshot at the path's last block-1 node equal the float64 recurrence; depth 15 (deep: a DDTREE tree whose
    depth-15 node is in block 2), 3 (bushy), 64 (chain: every block-1 node is an ancestor of node 64) or up to
    64 (cross: block-2 nodes with parents in block 1 and in block 2)."""
    c = WIDE[name]
    rng = random.Random(SEED + sorted(WIDE).index(name))
    torch.manual_seed(SEED + sorted(WIDE).index(name))
    width, kind = c["width"], c["kind"]
    if kind == "deep":
        trees, depth = [_deep_tree(rng, width) for _ in range(c["bs"])], 15
    elif kind == "bushy":
        trees, depth = [_tree(rng, width, 3) for _ in range(c["bs"])], 3
    elif kind == "cross":
        trees = [_cross_tree(width) for _ in range(c["bs"])]
        depth = max(_depths(trees[0]))
        assert {trees[0][i] < gdn_tree.TWO_BLOCK_TILE for i in range(65, width)} == {True, False}
    else:
        trees, depth = [[-1, *range(width - 1)] for _ in range(c["bs"])], width - 1
    assert max(max(_depths(t)) for t in trees) == depth
    heads, vheads, dim = c["heads"]
    _check_verify_and_commit(rng, trees, heads, vheads, dim, depth, padding=c["padding"],
                             compact_scratch=c["compact_scratch"], ancestors=c["ancestors"], pick=_deepest,
                             track_pick=_last_of_block1, precision=c.get("precision", "tf32"))


def test_a_given_ancestor_matrix_of_a_wide_tree_is_what_the_outputs_follow():
    """Two-block kernel, ancestors given: the same outputs as from the parents; cutting a block-2 node from
    the root (block 21) or from its block-2 parent (block 22) changes its output and no earlier node's."""
    rng = random.Random(SEED + 11)
    torch.manual_seed(SEED + 11)
    width = 100
    tree = _deep_tree(rng, width)
    q, k, v, a, b, A_log, dt_bias, par = _inputs(rng, 1, width, 2, 4, 16, [tree])
    anc = torch.from_numpy(visibility_from_parents(np.asarray(tree)))[None]
    common = dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=torch.randn(2, 4, 16, 16),
                  cache_indices=torch.tensor([1], dtype=torch.int32),
                  query_start_loc=torch.tensor([0, width]), retrieve_parent_token=par, depth_bound=15,
                  intermediate_state_indices=torch.tensor([0], dtype=torch.int32))

    def verify(ancestors):
        return gdn_tree.tree_gdn_verify(intermediate_states_buffer=torch.zeros(1, width, 4, 16, 16),
                                        ancestors=ancestors, **common)[0]

    derived = verify(None)
    assert torch.allclose(derived, verify(anc), atol=1e-6)
    node = _deepest(tree)
    for cut in (0, tree[node]):  # the root (block 1) and the parent (block 2)
        assert cut >= gdn_tree.TWO_BLOCK_TILE or cut == 0
        wrong = anc.clone()
        wrong[0, node, cut] = False
        got = verify(wrong)
        assert not torch.allclose(derived[node], got[node], atol=1e-4)
        assert torch.allclose(derived[:node], got[:node], atol=1e-6)


def _wide_call(width: int, tree: list[int], seed: int) -> dict:
    """tree_gdn_verify's keywords for one request of `tree` (GQA 2 x 4 heads, K = V = 16), scratch aside."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    q, k, v, a, b, A_log, dt_bias, par = _inputs(rng, 1, width, 2, 4, 16, [tree])
    return dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=torch.randn(2, 4, 16, 16),
                cache_indices=torch.tensor([1], dtype=torch.int32), query_start_loc=torch.tensor([0, width]),
                retrieve_parent_token=par, depth_bound=max(_depths(tree)),
                intermediate_state_indices=torch.tensor([0], dtype=torch.int32))


@pytest.mark.parametrize("width, ancestors", [(65, False), (72, True), (80, False), (97, True), (128, False)])
def test_block_2_on_its_own_rows_gives_what_the_full_64_row_tile_gives(width, ancestors):
    """The automatic block-2 tile (16 rows up to 80 nodes, 32 or 64 beyond) and a forced one of 64 rows (the
    earlier kernel) and of every power of two between: the same outputs and the same records in the scratch
    rows (what the commit reads), to float tolerance (padding rows only dropped), on a tree with block-2 nodes
    hung on both blocks."""
    tree = _cross_tree(width)
    call = _wide_call(width, tree, SEED + width)
    if ancestors:
        call["ancestors"] = torch.from_numpy(visibility_from_parents(np.asarray(tree)))[None]
    auto = gdn_tree._block2_rows(width, None)
    assert auto == max(16, 1 << (width - 65).bit_length())

    def verify(block2):
        scratch = torch.zeros(gdn_tree.compact_scratch_shape(1, 2, width, 4, 16, 16))
        return gdn_tree.tree_gdn_verify(intermediate_states_buffer=scratch[0], block2=block2, **call), scratch

    out, records = verify(None)
    ref, _ = gdn_tree.tree_gdn_reference(call["q"][0], call["k"][0], call["v"][0], call["a"], call["b"],
                                         call["A_log"], call["dt_bias"], call["ssm_states"][1], tree)
    assert (out[0].double() - ref).abs().max() < 1e-4
    assert records[0, 0].abs().amax(-1).min() > 0 and not records[0, 1].any()  # every node's row, only ours
    forced = [b2 for b2 in (16, 32, 64) if b2 >= auto]
    assert forced[-1] == gdn_tree.TWO_BLOCK_TILE and (auto < 64) == (len(forced) > 1)
    for block2 in forced:
        out2, records2 = verify(block2)
        assert torch.allclose(out2, out, atol=1e-6, rtol=0), block2
        assert torch.allclose(records2, records, atol=1e-6, rtol=0), block2


def test_a_bad_forced_block_2_tile_is_refused():
    """block2 must cover nodes 64..T-1, be a power of two from 16 (a dot's smallest side) to 64, and
    applies to the two-block kernel only."""
    def call(width, block2):
        tree = [-1, *range(width - 1)]
        common = _wide_call(width, tree, SEED)
        return gdn_tree.tree_gdn_verify(intermediate_states_buffer=torch.zeros(1, width, 4, 16, 16),
                                        block2=block2, **common)

    for width, block2 in ((97, 16), (97, 32), (65, 8), (65, 1), (80, 24), (72, 0), (65, 128)):
        with pytest.raises(ValueError, match="block2 must be a power of two"):
            call(width, block2)
    with pytest.raises(ValueError, match="block2 sets the two-block kernel's tile"):
        call(33, 64)
    assert call(97, 64).shape == (1, 97, 4, 16)  # what is allowed runs


def test_a_deep_64_node_tree_on_the_single_tile_kernel_is_exact_and_129_nodes_are_refused():
    rng = random.Random(SEED + 13)
    torch.manual_seed(SEED + 13)
    tree = _tree(rng, 64, 15, spread=8.0)
    _check_verify_and_commit(rng, [tree], 2, 4, 16, 15, padding=False, compact_scratch=True, pick=_deepest)
    q = torch.randn(1, 129, 1, 16)
    with pytest.raises(ValueError, match="at most 128 nodes"):
        gdn_tree.tree_gdn_verify(
            A_log=torch.zeros(1), dt_bias=torch.zeros(1), q=q, k=q, v=q, a=torch.zeros(129, 1),
            b=torch.zeros(129, 1), ssm_states=torch.zeros(1, 1, 16, 16),
            cache_indices=torch.tensor([0], dtype=torch.int32), query_start_loc=torch.tensor([0, 129]),
            intermediate_states_buffer=torch.zeros(1, 129, 1, 16, 16),
            intermediate_state_indices=torch.tensor([0], dtype=torch.int32),
            retrieve_parent_token=torch.zeros(1, 129, dtype=torch.int64), depth_bound=15)


@pytest.fixture
def server_verify(monkeypatch):
    """The launch the server makes: the payload's CompactTreeVerify (hybrid.py, default precision) as SGLang's
    GDN dispatcher calls it, taking tree_gdn_verify's keywords (its own depth bound; no ancestor matrix)."""
    monkeypatch.syspath_prepend(str(PAYLOAD_FILES))
    monkeypatch.delenv("DDTREE_GDN_TREE_PRECISION", raising=False)
    from ddtree_sglang import hybrid

    monkeypatch.setitem(hybrid.STATE, "key_heads", None)
    assert hybrid._gdn_tree() is gdn_tree  # the kernels are shipped at install: here, ddtctl's own

    def verify(*, depth_bound: int, ancestors, precision: str, **call):
        assert ancestors is None and precision == "tf32"  # what the server passes (none; its default)
        return hybrid.CompactTreeVerify(depth_bound=depth_bound).target_verify(**call)

    return verify


@pytest.mark.parametrize("width, kind, heads, vheads", [
    (33, "deep", 1, 2), (96, "deep", 1, 2), (65, "chain", 1, 2),
    (65, "deep", 2, 6),  # one of 8 tensor-parallel ranks of Qwen3.6-27B (16 / 48 heads), the flagship's budget 64
])
def test_the_servers_launch_is_exact_on_qwen36_27b_head_dims(server_verify, width, kind, heads, vheads):
    """CompactTreeVerify's launch (block_v 64 over V = 128: two value tiles per head; TF32) on the single-tile
    kernel (33 nodes) and the two-block one (65, 96): outputs and committed states equal the float64
    recurrence."""
    rng = random.Random(SEED + 17 + width)
    torch.manual_seed(SEED + 17 + width)
    if kind == "chain":
        trees, depth = [[-1, *range(width - 1)]], width - 1
    else:
        wide = width > gdn_tree.TWO_BLOCK_TILE
        trees, depth = [_deep_tree(rng, width) if wide else _tree(rng, width, 15)], 15
    _check_verify_and_commit(rng, trees, heads, vheads, 128, depth, padding=False, compact_scratch=True,
                             pick=_deepest,
                             track_pick=_last_of_block1 if width > gdn_tree.TWO_BLOCK_TILE else None,
                             verify=server_verify)
