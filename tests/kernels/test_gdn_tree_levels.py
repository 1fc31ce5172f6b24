"""The level-step GDN tree verify (ddtctl/kernels/gdn_levels.py) in Triton's interpreter: on chains, stars,
brooms and DDTREE trees of 17..128 nodes (one tile), every node's output and the committed (and track) states
equal SGLang's node-by-node recurrence along the node's own path (gdn_tree.tree_gdn_reference, float64), with
the ancestor matrix given and derived, one and two levels a step, and Qwen3.6-27B's heads at tp 1 and tp 8."""

from __future__ import annotations

import random

import pytest
import torch
from test_gdn_tree import PAYLOAD_FILES, SEED, _check_verify_and_commit, _deepest, _depths, _inputs, _tree

from ddtctl.kernels import gdn_levels, gdn_tree


def _chain(width: int) -> list[int]:
    return [-1, *range(width - 1)]


def _star(width: int) -> list[int]:
    return [-1] + [0] * (width - 1)


def _broom(width: int) -> list[int]:
    """A 16-node handle (nodes 0..15), then the bristles: each further node hung on a handle node."""
    handle = min(width, 16)
    return _chain(handle) + [(5 * i) % handle for i in range(handle, width)]


def _random_deep(rng: random.Random, width: int, max_depth: int = 16) -> list[int]:
    """A random tree, each node under a random earlier node shallower than `max_depth`; node 1..16 a chain so
    the deepest path is `max_depth` long (parents precede children, as the best-first build lays them out)."""
    parents = _chain(min(width, max_depth + 1))
    depth = list(range(len(parents)))
    for _ in range(len(parents), width):
        p = rng.choice([i for i in range(len(parents)) if depth[i] < max_depth])
        parents.append(p)
        depth.append(depth[p] + 1)
    return parents


def _levels_verify(levels: int, block_v: int = 32):
    def verify(**call):
        return gdn_levels.tree_gdn_verify_levels(levels_per_step=levels, block_v=block_v, **call)

    return verify


def _trees(rng: random.Random, kind: str, width: int, bs: int) -> list[list[int]]:
    make = {"chain": lambda: _chain(width), "star": lambda: _star(width), "broom": lambda: _broom(width),
            "random": lambda: _random_deep(rng, width), "ddtree": lambda: _tree(rng, width, 15)}[kind]
    return [make() for _ in range(bs)]


CASES = [  # width, kind, bs, (heads, vheads, dim), levels, ancestors given, padding request
    (17, "chain", 2, (2, 4, 16), 1, False, True),
    (17, "chain", 1, (1, 2, 16), 2, True, False),  # depth 16: the bound, an even step count
    (16, "chain", 1, (1, 2, 16), 2, False, False),  # depth 15: odd
    (17, "ddtree", 3, (2, 6, 32), 1, True, True),  # one of 8 tp ranks of Qwen3.6-27B (16 / 48 heads)
    (65, "star", 2, (2, 4, 16), 1, False, False),
    (65, "broom", 2, (1, 2, 16), 2, True, True),
    (65, "ddtree", 2, (2, 4, 16), 1, True, False),
    (97, "random", 2, (2, 6, 16), 1, True, True),
    (97, "broom", 1, (1, 2, 16), 1, False, False),
    (97, "ddtree", 1, (2, 4, 16), 2, False, False),
    (128, "random", 2, (1, 2, 16), 2, True, False),
    (128, "ddtree", 2, (2, 6, 32), 1, False, True),  # padding: the last request (no state, no scratch row)
    (128, "star", 1, (1, 1, 16), 2, False, False),
    (128, "broom", 1, (2, 4, 16), 1, True, False),
    # log-depth stages (levels 4 / 16): a depth-16 chain needs the last squaring and one step at 16, depth 15
    # none; shallow stars skip the stages their depth does not need
    (17, "chain", 1, (1, 2, 16), 16, True, False),
    (16, "chain", 1, (1, 2, 16), 16, False, False),
    (17, "chain", 2, (2, 4, 16), 4, False, True),
    (65, "star", 2, (2, 4, 16), 16, True, False),
    (97, "ddtree", 1, (2, 4, 16), 16, True, False),
    (128, "random", 2, (1, 2, 16), 4, True, False),
    (128, "broom", 2, (2, 4, 16), 16, False, True),
    (128, "ddtree", 2, (2, 6, 32), 8, True, False),
]


def _case_id(c) -> str:
    return f"{c[0]}-{c[1]}-bs{c[2]}-hv{c[3][1]}-l{c[4]}-anc{int(c[5])}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_every_node_and_the_commit_equal_the_path_run_as_a_chain(case):
    width, kind, bs, (heads, vheads, dim), levels, ancestors, padding = case
    seed = SEED + 100 + CASES.index(case)
    print(f"seed {seed}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    trees = _trees(rng, kind, width, bs)
    depth = max(max(_depths(t)) for t in trees)
    _check_verify_and_commit(rng, trees, heads, vheads, dim, max(depth, 1), padding=padding,
                             compact_scratch=True, ancestors=ancestors, pick=_deepest if width % 2 else None,
                             verify=_levels_verify(levels))


@pytest.mark.parametrize("width, heads, vheads, levels", [(97, 16, 48, 1), (128, 2, 6, 2), (65, 2, 6, 1),
                                                           (128, 2, 6, 16)])
def test_qwen36_27b_head_dims_at_tp1_and_tp8(width, heads, vheads, levels):
    """K = V = 128 with the server's block_v 64 (two value tiles a head); tp 1 (16 / 48 heads, one request)
    and tp 8 (2 / 6); TF32 is what the server runs, the interpreter computes dots in fp32."""
    seed = SEED + 200 + width
    print(f"seed {seed}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    trees = [_tree(rng, width, 15)]
    _check_verify_and_commit(rng, trees, heads, vheads, 128, 15, padding=False, compact_scratch=True,
                             ancestors=True, pick=_deepest, verify=_levels_verify(levels, block_v=64))


def test_the_steps_follow_the_trees_depth_not_a_bound():
    """The kernel reads the depth from the tree: a 16-deep chain is exact with a given ancestor matrix
    whatever the (unused) bound; and a matrix that cuts the chain's last link changes the last output, so the
    outputs follow the matrix the steps are counted from."""
    rng = random.Random(SEED + 300)
    torch.manual_seed(SEED + 300)
    width = 17
    trees = [_chain(width)]
    _check_verify_and_commit(rng, trees, 1, 2, 16, 1, padding=False, compact_scratch=True, ancestors=True,
                             pick=_deepest, verify=_levels_verify(1))
    q, k, v, a, b, A_log, dt_bias, par = _inputs(rng, 1, width, 1, 2, 16, trees)
    anc = torch.tril(torch.ones(1, width, width, dtype=torch.bool))
    common = dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=torch.randn(1, 2, 16, 16),
                  cache_indices=torch.tensor([0], dtype=torch.int32),
                  query_start_loc=torch.tensor([0, width]),
                  intermediate_state_indices=torch.tensor([0], dtype=torch.int32), retrieve_parent_token=par,
                  depth_bound=1)
    whole = gdn_levels.tree_gdn_verify_levels(intermediate_states_buffer=torch.zeros(1, width, 2, 16, 16),
                                              ancestors=anc, **common)
    derived = gdn_levels.tree_gdn_verify_levels(intermediate_states_buffer=torch.zeros(1, width, 2, 16, 16),
                                                **dict(common, depth_bound=16))
    assert torch.allclose(whole, derived, atol=1e-5)
    cut = anc.clone()
    cut[0, width - 1, : width - 1] = False  # the last node's ancestors dropped: it becomes a root child only
    cut_out = gdn_levels.tree_gdn_verify_levels(intermediate_states_buffer=torch.zeros(1, width, 2, 16, 16),
                                                ancestors=cut, **common)
    assert torch.allclose(whole[0, : width - 1], cut_out[0, : width - 1], atol=1e-5)
    assert not torch.allclose(whole[0, width - 1], cut_out[0, width - 1], atol=1e-3)


def test_the_levels_and_the_two_block_kernel_agree_on_a_wide_tree():
    rng = random.Random(SEED + 400)
    torch.manual_seed(SEED + 400)
    width, bs = 97, 2
    trees = [_tree(rng, width, 15) for _ in range(bs)]
    q, k, v, a, b, A_log, dt_bias, par = _inputs(rng, bs, width, 2, 4, 16, trees)
    common = dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=torch.randn(3, 4, 16, 16),
                  cache_indices=torch.tensor([2, 0], dtype=torch.int32),
                  query_start_loc=torch.tensor([0, width, 2 * width]),
                  intermediate_state_indices=torch.arange(bs, dtype=torch.int32), retrieve_parent_token=par,
                  depth_bound=15)
    scratch = [torch.zeros(gdn_tree.compact_scratch_shape(1, bs, width, 4, 16, 16))[0] for _ in range(2)]
    old = gdn_tree.tree_gdn_verify(intermediate_states_buffer=scratch[0], **common)
    new = gdn_levels.tree_gdn_verify_levels(intermediate_states_buffer=scratch[1], **common)
    assert torch.allclose(old, new, atol=1e-5)
    assert torch.allclose(scratch[0], scratch[1], atol=1e-5)  # the same records: the same commit follows


def test_refuses_too_wide_trees_and_unknown_step_sizes():
    q = torch.randn(1, 129, 1, 16)
    common = dict(A_log=torch.zeros(1), dt_bias=torch.zeros(1), q=q, k=q, v=q, a=torch.zeros(129, 1),
                  b=torch.zeros(129, 1), ssm_states=torch.zeros(1, 1, 16, 16),
                  cache_indices=torch.tensor([0], dtype=torch.int32),
                  intermediate_states_buffer=torch.zeros(1, 129, 1, 16, 16),
                  intermediate_state_indices=torch.tensor([0], dtype=torch.int32),
                  retrieve_parent_token=torch.zeros(1, 129, dtype=torch.int64), depth_bound=15)
    with pytest.raises(ValueError, match="at most 128 nodes"):
        gdn_levels.tree_gdn_verify_levels(query_start_loc=torch.tensor([0, 129]), **common)
    with pytest.raises(ValueError, match="levels_per_step"):
        gdn_levels.tree_gdn_verify_levels(query_start_loc=torch.tensor([0, 129]), levels_per_step=3,
                                          **dict(common, q=q[:, :128], k=q[:, :128], v=q[:, :128]))


@pytest.mark.parametrize("solve, levels", [("levels", 1), ("levels2", 2), ("auto", 2), ("levels16", 16)])
def test_the_servers_level_launch_is_exact(monkeypatch, solve, levels):
    """DDTREE_GDN_SOLVE=levels / levels2 / levels16: the payload's CompactTreeVerify launches the level kernel
    (one / two / sixteen levels a step, block_v 64, TF32), exact at 128 nodes with Qwen3.6-27B's dims at tp 8."""
    monkeypatch.syspath_prepend(str(PAYLOAD_FILES))
    monkeypatch.delenv("DDTREE_GDN_TREE_PRECISION", raising=False)
    monkeypatch.setenv("DDTREE_GDN_SOLVE", solve)
    from ddtree_sglang import hybrid

    monkeypatch.setitem(hybrid.STATE, "key_heads", None)
    assert hybrid._gdn_levels() is gdn_levels  # the kernels are shipped at install: here, ddtctl's own
    calls = []
    real = gdn_levels.tree_gdn_verify_levels

    def spy(**call):
        calls.append((call["levels_per_step"], call["block_v"]))
        return real(**call)

    monkeypatch.setattr(gdn_levels, "tree_gdn_verify_levels", spy)

    def verify(*, depth_bound: int, ancestors, precision: str, **call):
        return hybrid.CompactTreeVerify(depth_bound=depth_bound).target_verify(**call)

    seed = SEED + 500 + levels
    print(f"seed {seed}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    _check_verify_and_commit(rng, [_tree(rng, 128, 15)], 2, 6, 128, 15, padding=False, compact_scratch=True,
                             pick=_deepest, verify=verify)
    assert calls == [(levels, hybrid.CompactTreeVerify.BLOCK_V)]
