"""The exact reference on hand-checked cases."""

import numpy as np
import pytest

from ddtctl.kernels import reference as R


def lp_table(rows):
    return np.log(np.asarray(rows, dtype=np.float64)).astype(np.float32)


def test_topk_logprobs_sorted_ties_to_lower_id_and_normalised():
    x = np.array([[1.0, 3.0, 3.0, -np.inf, 2.0, 3.0]], dtype=np.float32)
    lp, ids = R.topk_logprobs(x, 4)
    assert ids.tolist() == [[1, 2, 5, 4]]
    lse = np.log(np.sum(np.exp(x[0].astype(np.float64))))
    assert np.allclose(lp[0], x[0, [1, 2, 5, 4]] - lse, atol=1e-6)
    assert lp.dtype == np.float32 and np.all(np.diff(lp[0]) <= 0)


def test_negative_zero_ranks_as_zero():
    x = np.array([[-0.0, 0.0, -1.0]], dtype=np.float32)
    _, ids = R.topk_logprobs(x, 2)
    assert ids.tolist() == [[0, 1]]


# issue #14: hypothesis's falsifying example for the build kernel (-0.0 and +0.0 scores ordered differently).
SIGNED_ZERO_LP = [[-0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -0.0, 0.0]]


def test_build_signed_zero_lp_ties_with_zero_and_breaks_on_rank_tuple():
    # every prefix scores 0: the pops go by rank tuple alone, and no score is -0.0 (bit for bit +0.0, as the kernel)
    lp = np.array(SIGNED_ZERO_LP, dtype=np.float32)
    tree = R.build(lp, np.array([[10, 11, 12, 13, 14], [20, 21, 22, 23, 24]]), 5)
    assert [tree.rank_tuple(i) for i in range(1, 6)] == [(0,), (0, 0), (0, 1), (0, 2), (0, 3)]
    assert tree.tokens.tolist() == [10, 20, 21, 22, 23]
    assert tree.parents.tolist() == [-1, 0, 1, 1, 1, 1]
    assert tree.scores.view(np.uint32).tolist() == [0] * 5


def test_build_small_tree_by_hand():
    # depth 1: p = .6 (tok 10), .3 (tok 11), .1 (tok 12); depth 2: .9 (tok 20), .1 (tok 21)
    lp = lp_table([[0.6, 0.3, 0.1], [0.9, 0.1, 1e-9]])
    ids = np.array([[10, 11, 12], [20, 21, 22]])
    tree = R.build(lp, ids, 4)
    # scores: [10]=.6, [10,20]=.54, [11]=.3, [11,20]=.27, [12]=.1, [10,21]=.06
    assert tree.tokens.tolist() == [10, 20, 11, 20]
    assert tree.depths.tolist() == [1, 2, 1, 2]
    assert tree.parents.tolist() == [-1, 0, 1, 0, 3]
    assert tree.ranks.tolist() == [0, 0, 1, 0]
    assert tree.visibility.astype(int).tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 0, 0, 1, 0],
        [1, 0, 0, 1, 1],
    ]
    assert tree.expected_accept_length() == pytest.approx(0.6 + 0.54 + 0.3 + 0.27, rel=1e-5)


def test_exact_ties_break_on_rank_tuple():
    # every prefix of equal depth scores the same: order is shorter first, then lexicographic rank tuples
    lp = np.zeros((2, 2), dtype=np.float32)
    ids = np.array([[1, 2], [3, 4]])
    tree = R.build(lp, ids, 6)
    assert [tree.rank_tuple(i) for i in range(1, 7)] == [(0,), (0, 0), (0, 1), (1,), (1, 0), (1, 1)]


def test_budget_limits():
    assert R.check_budget(15, 248320, 64) == 64
    assert R.check_budget(2, 3, 12) == 3
    with pytest.raises(ValueError):
        R.check_budget(2, 3, 13)  # only 3 + 9 prefixes
    with pytest.raises(ValueError):
        R.check_budget(31, 100, 4)


def test_compile_arrays_and_mask():
    lp = lp_table([[0.6, 0.3, 0.1], [0.9, 0.1, 1e-9]])
    tree = R.build(lp, np.array([[10, 11, 12], [20, 21, 22]]), 4)
    c = R.compile_tree(tree, root_token=7, start=100, prefix_len=3)
    assert c.input_ids.tolist() == [7, 10, 20, 11, 20]
    assert c.positions.tolist() == [100, 101, 102, 101, 102]
    assert c.mask.shape == (5, 8) and c.mask[:, :3].all()
    assert np.array_equal(c.mask[:, 3:], tree.visibility)
    assert c.retrive_next_token.tolist() == [1, 2, -1, 4, -1]
    assert c.retrive_next_sibling.tolist() == [-1, 3, -1, -1, -1]
    assert c.retrive_index.tolist() == [0, 1, 2, 3, 4]
    assert c.packed.tolist() == [[1], [3], [7], [9], [25]]


def test_pack_unpack_roundtrip_past_32_columns():
    rng = np.random.default_rng(0)
    vis = rng.random((3, 70)) < 0.5
    packed = R.pack_bits(vis)
    assert packed.shape == (3, 3) and packed.dtype == np.int32
    assert np.array_equal(R.unpack_bits(packed, 70), vis)


def test_follow_greedy_walk():
    lp = lp_table([[0.6, 0.3, 0.1], [0.9, 0.1, 1e-9]])
    tree = R.build(lp, np.array([[10, 11, 12], [20, 21, 22]]), 4)
    ids = np.array([7, 10, 20, 11, 20])
    # root predicts 11 (second child), node 3 predicts 20 (accepted), node 4 predicts 5 (bonus)
    f = R.follow(ids, tree.parents, np.array([11, 0, 0, 20, 5]))
    assert (f.accepted, f.accept_length, f.bonus) == ([0, 3, 4], 2, 5)
    assert f.padded(3).tolist() == [0, 3, 4, -1]
    # nothing matches at the root: accept nothing, the root's posterior is the bonus
    f = R.follow(ids, tree.parents, np.array([99, 20, 0, 20, 5]))
    assert (f.accepted, f.accept_length, f.bonus) == ([0], 0, 99)


def test_posterior_sampling_is_gumbel_max_and_position_keyed():
    x = np.log(np.array([[0.7, 0.2, 0.1]]))
    a = R.gumbel_noise(3, 17, 3)
    assert np.array_equal(a, R.gumbel_noise(3, 17, 3))
    assert not np.array_equal(a, R.gumbel_noise(3, 18, 3))
    counts = np.bincount([int(R.posterior_tokens(x, 1.0, R.gumbel_noise(1, p, 3)[None])[0]) for p in range(3000)],
                         minlength=3)
    assert np.allclose(counts / 3000, [0.7, 0.2, 0.1], atol=0.04)
    assert R.posterior_tokens(x).tolist() == [0]
