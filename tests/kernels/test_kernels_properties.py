"""Property tests of the reference: the heap finds exactly the top-B prefixes (brute force), trees are well formed,
visibility is ancestor-only, compile's arrays list each node's children, follow only walks accepted parents."""

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from seeded_hypothesis import seeded

from ddtctl.kernels import reference as R


@st.composite
def topk_tables(draw):
    depth = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    # few distinct values -> many exact score ties (-0.0 ties with 0.0, issue #14); otherwise continuous values
    if draw(st.booleans()):
        values = st.sampled_from([0.0, -0.0, -0.5, -1.0, -2.0, -np.inf])
    else:
        values = st.floats(-8.0, 0.0, width=32)
    rows = [sorted(draw(st.lists(values, min_size=k, max_size=k)), reverse=True) for _ in range(depth)]
    lp = np.array(rows, dtype=np.float32)
    ids = np.array([draw(st.permutations(range(10)))[:k] for _ in range(depth)], dtype=np.int64)
    total = R.num_prefixes(depth, k)
    budget = draw(st.integers(1, min(total, 40)))
    return lp, ids, budget


def brute_force(lp, ids, budget):
    """All prefixes, scored in depth order in fp32, sorted by (score desc, rank tuple asc)."""
    depth, k = lp.shape
    prefixes = []
    for d in range(1, depth + 1):
        for ranks in itertools.product(range(k), repeat=d):
            s = np.float32(0.0)
            for i, r in enumerate(ranks):
                s = np.float32(s + lp[i, r])
            prefixes.append((-float(s), ranks))
    prefixes.sort()
    return [r for _, r in prefixes[:budget]]


@seeded(max_examples=300)
@given(topk_tables())
def test_build_is_exactly_the_top_budget_prefixes(table):
    lp, ids, budget = table
    tree = R.build(lp, ids, budget)
    got = [tree.rank_tuple(i) for i in range(1, budget + 1)]
    assert got == brute_force(lp, ids, budget)  # same set, and popped in key order


@seeded(max_examples=200)
@given(topk_tables())
def test_tree_is_well_formed(table):
    lp, ids, budget = table
    tree = R.build(lp, ids, budget)
    par = tree.parents
    assert par[0] == -1
    for i in range(1, budget + 1):
        p = int(par[i])
        assert 0 <= p < i  # parents precede children
        assert tree.depths[i - 1] == (0 if p == 0 else tree.depths[p - 1]) + 1
        assert tree.tokens[i - 1] == ids[tree.depths[i - 1] - 1, tree.ranks[i - 1]]
    # children of a node come in rank order 0, 1, 2, ... (a valid tree: no gaps)
    for p in range(budget + 1):
        kids = [i for i in range(1, budget + 1) if par[i] == p]
        assert [int(tree.ranks[i - 1]) for i in kids] == list(range(len(kids)))
    # visibility is exactly ancestors-or-self
    for i in range(budget + 1):
        anc = set()
        j = i
        while j >= 0:
            anc.add(j)
            j = int(par[j])
        assert set(np.flatnonzero(tree.visibility[i]).tolist()) == anc


@seeded(max_examples=150)
@given(topk_tables(), st.integers(0, 5), st.data())
def test_compile_lists_children_in_index_order(table, prefix_len, data):
    lp, ids, budget = table
    tree = R.build(lp, ids, budget)
    c = R.compile_tree(tree, root_token=3, start=prefix_len, prefix_len=prefix_len)
    for p in range(budget + 1):
        kids = [i for i in range(1, budget + 1) if tree.parents[i] == p]
        walk = []
        j = int(c.retrive_next_token[p])
        while j != -1:
            walk.append(j)
            j = int(c.retrive_next_sibling[j])
        assert walk == kids
    assert np.array_equal(R.unpack_bits(c.packed, budget + 1), tree.visibility)
    assert c.mask[:, :prefix_len].all() and np.array_equal(c.mask[:, prefix_len:], tree.visibility)
    assert np.array_equal(c.positions - prefix_len, np.concatenate([[0], tree.depths]))


@seeded(max_examples=200)
@given(topk_tables(), st.data())
def test_follow_accepts_only_children_of_accepted_nodes(table, data):
    lp, ids, budget = table
    tree = R.build(lp, ids, budget)
    input_ids = np.concatenate([[99], tree.tokens])
    # posterior: often a real child's token, sometimes anything
    post = np.array([data.draw(st.sampled_from(sorted(set(input_ids[1:].tolist()) | {7, 98})))
                     for _ in range(budget + 1)])
    f = R.follow(input_ids, tree.parents, post)
    assert f.accepted[0] == 0 and f.accept_length == len(f.accepted) - 1
    for prev, node in zip(f.accepted, f.accepted[1:]):
        assert tree.parents[node] == prev  # never a node whose parent was rejected
        assert input_ids[node] == post[prev]
    last = f.accepted[-1]
    assert f.bonus == post[last]
    # maximal: no child of the last accepted node carries its posterior
    assert not any(tree.parents[i] == last and input_ids[i] == post[last] for i in range(1, budget + 1))
