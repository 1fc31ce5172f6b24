"""draft_head: the drafter's top-K log-probs over a (vocab-parallel) target head, as computed eagerly and as the draft
CUDA graph's tail writes them. Tensor parallelism is played by threads, one per rank, exchanging through a small
all-gather stand-in (test-only: no process group exists on the CPU)."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from ddtree_sglang import draft_head  # noqa: E402

SEED = 4242


class _Group:
    """all_gather_into_tensor over threads: rank r's input lands at rows [r * n, (r + 1) * n) of every output."""

    def __init__(self, world: int):
        self.world_size = world
        self._barrier = threading.Barrier(world)
        self._slots: dict[int, dict[int, torch.Tensor]] = {}
        self._calls: dict[int, int] = {}
        self._lock = threading.Lock()

    def rank_view(self, rank: int):
        group = self

        class View:
            world_size = group.world

            def all_gather_into_tensor(self, out, inp):
                with group._lock:
                    call = group._calls.get(rank, 0)
                    group._calls[rank] = call + 1
                    group._slots.setdefault(call, {})[rank] = inp.clone()
                group._barrier.wait()
                parts = [group._slots[call][r] for r in range(group.world)]
                out.copy_(torch.cat(parts, dim=0))
                group._barrier.wait()

        View.world = self.world_size
        return View()

    @property
    def world(self):
        return self.world_size


def _head(vocab: int, hidden: int, gen) -> torch.Tensor:
    return torch.randn(vocab, hidden, generator=gen)


def _expected(weight, rows, k):
    logits = rows @ weight.T
    vals, ids = torch.topk(logits, k, dim=-1)
    return vals - torch.logsumexp(logits, dim=-1, keepdim=True), ids


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_top_k_log_probs_equal_the_full_vocabulary_reference(tp):
    print(f"seed {SEED + tp}")
    gen = torch.Generator().manual_seed(SEED + tp)
    vocab, hidden, block, bs, k = 96, 16, 5, 3, 8
    weight = _head(vocab, hidden, gen)
    states = torch.randn(bs * block, hidden, generator=gen)
    rows = states.view(bs, block, -1)[:, 1:, :].reshape(-1, hidden)
    want_lp, want_ids = _expected(weight, rows, k)
    shard = vocab // tp
    group = _Group(tp) if tp > 1 else None
    results: dict[int, tuple] = {}

    def rank(r: int):
        head = draft_head.DraftTopK(weight=weight[r * shard:(r + 1) * shard], block_size=block, k=k, num_org=shard,
                                    org_vocab_start=r * shard, max_bs=bs,
                                    tp_group=group.rank_view(r) if group else None)
        head(states)  # the graph tail's path: static buffers
        lp_static, ids_static = head.read(bs)
        lp, ids = head.compute(rows)  # the eager path
        results[r] = (lp_static, ids_static, lp, ids)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(tp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == list(range(tp))
    for lp_static, ids_static, lp, ids in results.values():  # every rank holds the same global candidates
        assert torch.equal(ids, want_ids)
        assert torch.allclose(lp, want_lp, atol=1e-5)
        assert torch.equal(ids_static.reshape(-1, k), want_ids)
        assert torch.allclose(lp_static.reshape(-1, k), want_lp, atol=1e-5)
        assert bool((lp[:, :-1] >= lp[:, 1:]).all())  # best first, as the tree build reads them


def test_build_folds_a_dense_head_and_says_why_it_will_not():
    weight = torch.zeros(64, 8)
    dense = type("Head", (), {"weight": weight, "org_vocab_size": 60})()
    head, why = draft_head.build(dense, block_size=4, k=8, max_bs=2, tp_group=None)
    assert head is not None and head.num_org == 60 and "graph" in why
    assert head.lp_out.shape == (2 * 3, 8)
    none, why = draft_head.build(type("Q", (), {"weight": None})(), block_size=4, k=8, max_bs=2, tp_group=None)
    assert none is None and "dense" in why
    tiny, why = draft_head.build(dense, block_size=4, k=100, max_bs=2, tp_group=None)
    assert tiny is None and "top-100" in why


def test_graph_fold_can_be_switched_off_but_the_eager_head_stays(monkeypatch):
    monkeypatch.setenv("DDTREE_DRAFT_TOPK_GRAPH", "0")
    dense = type("Head", (), {"weight": torch.zeros(64, 8)})()
    assert draft_head.build(dense, block_size=4, k=8, max_bs=2, tp_group=None)[0] is None
    eager, why = draft_head.build(dense, block_size=4, k=8, max_bs=1, tp_group=None, graph=False)
    assert eager is not None and why == "eager"
