"""bench/accept_sim.py: the accepted length of DDTREE's best-first tree under the stand-in drafter's rank model."""

from __future__ import annotations

import random

import pytest
from bench_scripts import load_bench

pytest.importorskip("numpy")

SEED = 7


@pytest.fixture(scope="module")
def sim():
    yield from load_bench("accept_sim")


def test_a_perfect_drafter_accepts_the_whole_chain(sim):
    children = sim.tree_children([1.0 - 1e-9], 15, 15)
    assert sim.accepted_length(children, [1.0], 15, 50, random.Random(SEED)) == 16.0


def test_the_chain_matches_its_closed_form_and_trees_accept_more(sim):
    print(f"seed {SEED}")
    p = [0.7, 0.2, 0.05]
    chain = sim.accepted_length(sim.chain_children(15), p, 15, 4000, random.Random(SEED))
    assert chain == pytest.approx(sum(0.7**d for d in range(16)), rel=0.05)
    trees = [sim.accepted_length(sim.tree_children(p, 15, b), p, 15, 4000, random.Random(SEED)) for b in (15, 64)]
    assert chain < trees[0] < trees[1]  # at 0.7 a 15-node best-first tree already beats the 15-node chain


def test_the_tree_is_best_first_over_the_stated_ranks(sim):
    """Budget 16 over p = (0.88, 0.08, 0.02): the 15-node chain of rank 0 plus the root's rank-1 child."""
    children = sim.tree_children([0.88, 0.08, 0.02], 15, 16)
    assert (0, 1) in children and (0, 2) not in children
    node, depth = 0, 0
    while (node, 0) in children:
        node, depth = children[(node, 0)], depth + 1
    assert depth == 15
