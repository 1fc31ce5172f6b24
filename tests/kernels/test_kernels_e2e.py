"""Lossless end to end: DDTree decoding reproduces greedy (and position-keyed sampled) autoregressive decoding of
a tiny random Hugging Face Llama token for token, with a noisy stand-in drafter (so acceptance is partial)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ddtctl.kernels import decode as D  # noqa: E402

PROMPT = [1, 5, 9, 33, 2]
DEPTH = 4


@pytest.fixture(scope="module")
def target():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: threads only add overhead on a shared 2-core machine
    yield D.hf_target(D.tiny_llama(vocab=96, seed=0))
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def greedy(target):
    return D.autoregressive(target, PROMPT, 30)


@pytest.mark.parametrize("budget", [1, 4, 8, 32])
def test_reference_path_greedy_is_lossless(target, greedy, budget):
    out = D.ddtree_decode(target, D.NoisyChainDrafter(target, DEPTH, noise=2.0, seed=1), D.ReferenceTreePath(budget),
                          PROMPT, 30)
    assert out.tokens == greedy
    assert out.rounds < 30  # drafts were accepted at some point


def test_tree_accepts_more_than_chain(target, greedy):
    chain = D.ddtree_decode(target, D.NoisyChainDrafter(target, DEPTH, noise=2.0, seed=1),
                            D.ReferenceTreePath(DEPTH, chain=True), PROMPT, 30)
    tree = D.ddtree_decode(target, D.NoisyChainDrafter(target, DEPTH, noise=2.0, seed=1), D.ReferenceTreePath(32),
                           PROMPT, 30)
    assert chain.tokens == greedy and tree.tokens == greedy
    assert tree.mean_accept > chain.mean_accept


def test_sample_then_walk_reproduces_sampling(target):
    sampled = D.autoregressive(target, PROMPT, 25, temperature=1.0, seed=7)
    out = D.ddtree_decode(target, D.NoisyChainDrafter(target, DEPTH, noise=1.0, seed=2), D.ReferenceTreePath(16),
                          PROMPT, 25, temperature=1.0, seed=7)
    assert out.tokens == sampled
    assert out.tokens != D.autoregressive(target, PROMPT, 25)  # it really sampled


def test_triton_path_greedy_is_lossless(target, greedy):
    pytest.importorskip("triton")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = D.ddtree_decode(target, D.NoisyChainDrafter(target, DEPTH, noise=2.0, seed=1),
                          D.TritonTreePath(DEPTH, 96, 8, dev), PROMPT, 16)
    assert out.tokens == greedy[: len(PROMPT) + 16]
