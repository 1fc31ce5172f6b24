"""The DDTREE worker's CPU-testable pieces: tree -> SGLang verify inputs, acceptance, commit bookkeeping, metrics.

The left-child/right-sibling arrays are checked against SGLang 0.5.23's own greedy tree-verify Triton kernel
(`verify_tree_greedy_kernel_triton` from its spec_tree.py, run under TRITON_INTERPRET=1 on CPU).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from ddtree_sglang import metrics as dmetrics  # noqa: E402
from ddtree_sglang import tree_prep as tp  # noqa: E402

from ddtctl.kernels import reference as ref  # noqa: E402

from worker_sglang_source import load_functions, spec_tree_source  # noqa: E402


def _logits(seed: int, bs: int, depth: int, vocab: int, sharp: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(bs, depth, vocab, generator=g) * sharp


CASES = [(1, 1, 3, 20), (2, 3, 5, 30), (3, 7, 7, 40), (2, 15, 15, 60), (2, 32, 15, 80), (1, 64, 15, 100)]


@pytest.mark.parametrize("bs,budget,depth,vocab", CASES)
def test_verify_inputs_match_the_reference_compile(bs, budget, depth, vocab):
    logits = _logits(budget, bs, depth, vocab)
    roots = torch.arange(bs) + 3
    prefix = torch.tensor([11, 0, 5][:bs])
    prep = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode="reference", device="cpu")
    vi = prep.prepare(logits, roots, prefix)
    n = budget + 1
    assert vi.width == n
    mask = tp.custom_mask(vi.visibility, prefix)
    off = 0
    for b in range(bs):
        tree = ref.build_from_logits(logits[b].numpy(), budget)
        c = ref.compile_tree(tree, int(roots[b]), int(prefix[b]), int(prefix[b]))
        assert vi.input_ids[b].tolist() == c.input_ids.tolist()
        assert vi.positions[b].tolist() == c.positions.tolist()
        assert np.array_equal(vi.visibility[b].numpy(), tree.visibility)
        assert vi.parents[b].tolist() == tree.parents.tolist()
        assert vi.retrive_next_token[b].tolist() == c.retrive_next_token.tolist()
        assert vi.retrive_next_sibling[b].tolist() == c.retrive_next_sibling.tolist()
        assert vi.retrive_index[b].tolist() == (b * n + c.retrive_index).tolist()  # SGLang's global indices
        # SGLang's flat custom mask: per request row-major [n, prefix + n], True = may attend
        seg = n * (int(prefix[b]) + n)
        assert np.array_equal(mask[off: off + seg].numpy(), c.mask.reshape(-1))
        off += seg
    assert off == mask.numel()
    assert tp.custom_mask(vi.visibility, prefix, total=off).equal(mask)


def test_topk_cap_limits_candidates_per_depth():
    logits = _logits(5, 1, 7, 50)
    prep = tp.TreePreparer(depth=7, vocab=50, budget=15, topk_cap=2, mode="reference", device="cpu")
    assert prep.k == 2
    vi = prep.prepare(logits, torch.tensor([1]), torch.tensor([4]))
    top2 = torch.topk(logits[0], 2, dim=-1).indices
    for node in range(1, 16):
        d = int(vi.positions[0, node]) - 4
        assert int(vi.input_ids[0, node]) in top2[d - 1].tolist()
    with pytest.raises(ValueError):
        tp.TreePreparer(depth=2, vocab=50, budget=15, topk_cap=2, mode="reference", device="cpu")  # 2 + 4 < 15


def test_triton_path_builds_the_same_verify_inputs():
    bs, budget, depth, vocab = 2, 7, 5, 64
    logits = _logits(9, bs, depth, vocab)
    roots, prefix = torch.tensor([4, 9]), torch.tensor([6, 2])
    a = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode="reference", device="cpu")
    b = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode="triton", device="cpu")
    va, vb = a.prepare(logits, roots, prefix), b.prepare(logits, roots, prefix)
    for name in ("input_ids", "positions", "visibility", "retrive_index", "retrive_next_token",
                 "retrive_next_sibling", "parents"):
        assert getattr(va, name).to(torch.int64).equal(getattr(vb, name).to(torch.int64)), name


def _predictions_along_random_paths(vi: tp.VerifyInputs, seed: int, vocab: int) -> torch.Tensor:
    """Target predictions that follow a random root-to-leaf path for a random number of steps, then diverge."""
    rng = np.random.default_rng(seed)
    bs, n = vi.input_ids.shape
    pred = torch.from_numpy(rng.integers(0, vocab, size=(bs, n)))
    for b in range(bs):
        parents = vi.parents[b].tolist()
        children = {i: [c for c in range(1, n) if parents[c] == i] for i in range(n)}
        cur, steps = 0, int(rng.integers(0, 6))
        for _ in range(steps):
            if not children[cur]:
                break
            nxt = int(rng.choice(children[cur]))
            pred[b, cur] = vi.input_ids[b, nxt]
            cur = nxt
    return pred


@pytest.fixture(scope="module")
def sglang_verify(tmp_path_factory):
    found = spec_tree_source()
    if found is None:
        pytest.skip("sglang 0.5.23's spec_tree.py is not reachable (make sglang-env)")
    source, _where = found
    return load_functions(source, ["verify_tree_greedy_kernel_triton", "verify_tree_greedy_triton"],
                          tmp_path_factory.mktemp("sgl"), "sglang_spec_tree_kernels")


@pytest.mark.parametrize("bs,budget,depth,vocab", [(2, 7, 5, 12), (3, 15, 7, 9), (2, 32, 15, 40)])
def test_sglang_tree_verify_accepts_what_the_reference_follows(sglang_verify, bs, budget, depth, vocab):
    logits = _logits(budget + 100, bs, depth, vocab)
    prep = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode="reference", device="cpu")
    vi = prep.prepare(logits, torch.arange(bs), torch.full((bs,), 3))
    n = budget + 1
    for seed in range(4):
        pred = _predictions_along_random_paths(vi, seed, vocab)
        predicts = torch.full((bs * n,), -1, dtype=torch.int32)
        accept_index = torch.full((bs, depth + 1), -1, dtype=torch.int32)
        accept_num = torch.zeros(bs, dtype=torch.int32)
        sglang_verify.verify_tree_greedy_triton(
            predicts, accept_index, accept_num, vi.input_ids, vi.retrive_index, vi.retrive_next_token,
            vi.retrive_next_sibling, pred)
        ours = tp.follow_greedy(vi.input_ids, vi.parents, pred, depth)
        local = tp.accepted_from_sglang(accept_index, accept_num, n)
        assert local.tolist() == ours.accepted.tolist()
        assert accept_num.to(torch.int64).tolist() == ours.accept_len.tolist()
        for b in range(bs):
            f = ref.follow(vi.input_ids[b].numpy(), vi.parents[b].numpy(), pred[b].numpy())
            assert ours.accepted[b, : len(f.accepted)].tolist() == f.accepted
            assert int(ours.accept_len[b]) == f.accept_length and int(ours.bonus[b]) == f.bonus
        # SGLang marks each accepted node's prediction (the next token after it) in `predicts`
        for b in range(bs):
            for node in ours.accepted[b, : int(ours.accept_len[b])].tolist():
                assert int(predicts[b * n + node]) == int(pred[b, node])


def test_device_walk_follows_the_reference_walk_at_every_batch_size():
    """TreePreparer.follow (the builder's own walk kernel, DDTREE_ACCEPT=device) accepts what follow_greedy accepts,
    batch size after batch size on one preparer (the sizes a server meets as requests finish); it declines inputs
    that are not its plan's last tree, and a host-built (reference) preparer declines."""
    budget, depth, vocab = 7, 5, 64  # (the Triton interpreter runs the builder slowly: one small shape)
    prep = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode="triton", device="cpu")
    for bs in (3, 1):
        logits = _logits(bs + budget, bs, depth, vocab)
        vi = prep.prepare(logits, torch.arange(bs) + 5, torch.arange(bs) * 3)
        pred = _predictions_along_random_paths(vi, seed=bs, vocab=vocab)
        want = tp.follow_greedy(vi.input_ids, vi.parents, pred, depth)
        got = prep.follow(vi, pred)
        assert got is not None
        assert got.accepted.dtype == got.accept_len.dtype == got.bonus.dtype == torch.int64
        assert got.accepted.equal(want.accepted) and got.accept_len.equal(want.accept_len), bs
        assert got.bonus.equal(want.bonus), bs
        assert tp.flat_accept_index(got.accepted, vi.width).equal(tp.flat_accept_index(want.accepted, vi.width))
        assert int(want.accept_len.max()) >= 1 or bs == 1  # the predictions walk somewhere
    other = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode="reference", device="cpu")
    vi_ref = other.prepare(_logits(1, 2, depth, vocab), torch.tensor([5, 6]), torch.tensor([0, 3]))
    assert other.follow(vi_ref, torch.zeros_like(vi_ref.input_ids)) is None
    assert prep.follow(vi_ref, torch.zeros_like(vi_ref.input_ids)) is None  # not the plan's tree


def test_commit_compacts_the_accepted_path_into_chain_order():
    # root 0; 1,2 children of 0; 3 child of 2; 4 child of 3; 5 child of 1
    parents = torch.tensor([[-1, 0, 0, 2, 3, 1]])
    ids = torch.tensor([[7, 10, 11, 12, 13, 14]])
    block = 6
    pred = torch.tensor([[11, 0, 12, 13, 99, 0]])  # root -> 2 -> 3 -> 4, then bonus 99
    acc = tp.follow_greedy(ids, parents, pred, max_depth=5)
    assert acc.accepted[0].tolist() == [0, 2, 3, 4, -1, -1]
    assert int(acc.accept_len[0]) == 3 and int(acc.bonus[0]) == 99
    cm = tp.commit(ids, acc, block)
    assert cm.out_tokens[0].tolist() == [11, 12, 13, 99, 0, 0]
    assert cm.commit_lens.tolist() == [4]
    assert cm.chain_src[0].tolist() == [0, 2, 3, 4, 4, 5]  # past the commit: own slot (self-copy)
    _, first_child, _ = tp.retrive_arrays(parents)
    assert tp.branch_accepts(acc, first_child).tolist() == [1]  # node 2 is not node 0's first child (1)
    # KV compaction as the worker does it: gather every source first, then scatter (move_kv_cache semantics)
    slots = torch.tensor([[40, 41, 42, 43, 44, 45]])  # req_to_token[prefix + k] for node k
    kv = torch.zeros(64, dtype=torch.int64)
    kv[slots[0]] = torch.tensor([100, 101, 102, 103, 104, 105])  # node k's KV row = 100 + k
    src = torch.gather(slots, 1, cm.chain_src)
    dst = torch.gather(slots, 1, torch.arange(block)[None, :])
    kv[dst.reshape(-1)] = kv[src.reshape(-1)]
    assert kv[slots[0, :4]].tolist() == [100, 102, 103, 104]  # chain positions 0..3 hold nodes 0,2,3,4


def test_commit_batch_with_nothing_and_everything_accepted():
    depth = 3
    parents = torch.tensor([[-1, 0, 1, 2], [-1, 0, 1, 2]])  # chains
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8]])
    pred = torch.tensor([[1, 7, 8, 2], [6, 7, 8, 3]])  # request 0 rejects at once; request 1 takes all 3
    acc = tp.follow_greedy(ids, parents, pred, depth)
    cm = tp.commit(ids, acc, block=depth + 1)
    assert acc.accept_len.tolist() == [0, 3]
    assert cm.out_tokens.tolist() == [[1, 0, 0, 0], [6, 7, 8, 3]]
    assert cm.commit_lens.tolist() == [1, 4]


@pytest.mark.parametrize("block,width,expect", [(16, 2, 16), (16, 16, 16), (16, 33, 25), (16, 65, 41), (4, 9, 7)])
def test_decode_reservation_covers_the_step_in_flight_and_the_next_window(block, width, expect):
    """Overlap scheduler: the committed length lags the step in flight (up to `block` more tokens), and the next
    round writes max(block, width) slots past that; DFLASH's prepare_for_decode reserves 2 * tokens."""
    tokens = tp.decode_reserve_tokens(block, width)
    assert tokens == expect
    assert 2 * tokens >= block + max(block, width)
    assert 2 * (tokens - 1) < block + max(block, width) or tokens == block  # no more than needed


@pytest.mark.parametrize("bs,budget,depth,vocab", CASES)
def test_tree_mask_writes_only_the_tree_cells_at_the_kernel_offsets(bs, budget, depth, vocab):
    """tree_mask == custom_mask on every tree cell, at SGLang's offsets, for an exact and an upper-bound size; the
    prefix cells (never read: skip_prefix_custom_mask) are not written, so the work is O(n^2) per request."""
    logits = _logits(budget, bs, depth, vocab)
    prefix = torch.tensor([11, 0, 5][:bs])
    prep = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode="reference", device="cpu")
    vi = prep.prepare(logits, torch.arange(bs) + 3, prefix)
    n = vi.width
    full = tp.custom_mask(vi.visibility, prefix)
    exact = tp.mask_total_bound(n, prefix)
    assert exact == full.numel()
    for total in (exact, tp.mask_total_bound(n, prefix + 2 * n)):  # the allocated lengths bound the real ones
        mask = tp.tree_mask(vi.visibility, prefix, total)
        assert mask.numel() == total and mask.dtype == torch.uint8
        off = 0
        for b in range(bs):
            p = int(prefix[b])
            rows = mask[off: off + n * (p + n)].view(n, p + n)
            assert rows[:, p:].bool().equal(vi.visibility[b])  # the tree columns
            assert full[off: off + n * (p + n)].view(n, p + n)[:, :p].all()  # what the kernel assumes of the rest
            off += n * (p + n)
    idx = tp.tree_mask_offsets(prefix, n).reshape(-1)
    assert idx.numel() == bs * n * n and idx.unique().numel() == idx.numel() and int(idx.max()) < exact
    assert tp.mask_total_bound(n, None) is None


def test_metrics_accumulate_on_the_device_and_read_back_only_in_the_summary():
    m = dmetrics.DdtreeMetrics(budget=16, verify_width=17, prep_mode="triton", accept_mode="sglang", interval=50)
    m.record_device(torch.tensor([3, 0, 15]), torch.tensor([1, 0, 2]), 0.001, max_depth=15, graph=True)
    m.record_device(torch.tensor([20]), torch.tensor([0]), 0.001, max_depth=15)  # clamped to the depth
    assert m.steps == 2 and m.requests == 4 and m.accepted == 0  # nothing read back yet
    s = m.summary()
    assert s["accepted_hist"] == {0: 1, 3: 1, 15: 2} and s["max_accepted_drafts"] == 15
    assert s["accepted_branch_nodes"] == 3 and s["verify_graph_steps"] == 1
    assert s["mean_accepted_drafts"] == pytest.approx(33 / 4)
    assert m.summary()["accepted_hist"] == {0: 1, 3: 1, 15: 2}  # read back once, not twice


def test_metrics_summary_and_log_line():
    m = dmetrics.DdtreeMetrics(budget=32, verify_width=33, prep_mode="triton", accept_mode="sglang", interval=2)
    m.record([3, 0], 0.002)
    m.record([5], 0.004)
    s = m.summary()
    assert s["steps"] == 2 and s["request_steps"] == 3
    assert s["mean_accepted_drafts"] == pytest.approx(8 / 3)
    assert s["mean_accept_len"] == pytest.approx(1 + 8 / 3)
    assert s["max_accepted_drafts"] == 5 and s["accepted_hist"] == {0: 1, 3: 1, 5: 1}
    assert s["verify_width"] == 33 and s["mean_prep_ms"] == pytest.approx(3.0)
    line = m.line()
    assert line.startswith("DDTREE metrics: steps=2 mean_accept_len=3.667 max_accepted=5")
    dmetrics.register(m)
    assert dmetrics.live_metrics()[-1]["steps"] == 2


def test_metrics_report_the_tree_conv_of_hybrid_tree_targets(monkeypatch):
    from ddtree_sglang import hybrid

    m = dmetrics.DdtreeMetrics(budget=15, verify_width=16, prep_mode="triton", accept_mode="sglang", interval=50)
    assert m.summary()["conv_tree_kernel"] is None and "conv_tree=" not in m.line()  # not a hybrid tree target
    m.gdn_tree_kernel = "sglang"
    monkeypatch.setitem(hybrid.STATE, "conv_tree_calls", 0)
    assert m.summary()["conv_tree_kernel"] == "sglang"
    monkeypatch.setitem(hybrid.STATE, "conv_tree_calls", 48)  # hybrid.compact_tree_conv ran
    assert m.summary()["conv_tree_kernel"] == "compact" and "gdn_tree=sglang conv_tree=compact " in m.line()


def test_metrics_report_the_verify_attention_that_served(monkeypatch):
    from ddtree_sglang import verify_attn

    m = dmetrics.DdtreeMetrics(budget=15, verify_width=16, prep_mode="triton", accept_mode="sglang", interval=50)
    monkeypatch.setitem(verify_attn.STATE, "served", 0)
    assert m.summary()["verify_attention"] == "extend" and m.line().endswith(" verify_attn=extend")
    monkeypatch.setitem(verify_attn.STATE, "served", 3)  # the tree split-KV kernel served verify calls
    assert m.summary()["verify_attention"] == "splitkv" and m.line().endswith(" verify_attn=splitkv")


def test_server_info_hook_publishes_ddtree_metrics_only_for_ddtree():
    from types import SimpleNamespace

    from ddtree_sglang import plugin

    m = dmetrics.DdtreeMetrics(budget=7, verify_width=8, prep_mode="reference", accept_mode="torch", interval=50)
    m.record([2, 4], 0.001, graph=True)
    dmetrics.register(m)
    ddtree = SimpleNamespace(scheduler=SimpleNamespace(spec_algorithm=SimpleNamespace(name="DDTREE")))
    dflash = SimpleNamespace(scheduler=SimpleNamespace(spec_algorithm=SimpleNamespace(name="DFLASH")))
    state: dict = {}
    assert plugin._server_info(None, dflash, state) is None and "ddtree" not in state
    plugin._server_info(None, ddtree, state)
    assert state["ddtree"][-1]["verify_width"] == 8 and state["ddtree"][-1]["verify_graph_steps"] == 1
    assert state["ddtree"][-1]["mean_accept_len"] == pytest.approx(4.0)


def test_graph_hooks_build_the_tree_mask_and_widen_the_mask_buffer_for_ddtree_only(monkeypatch):
    from types import SimpleNamespace

    from ddtree_sglang import graphs

    original = lambda backend: ("TritonAttnBackend", False)  # noqa: E731  (sglang: triton skips the custom mask)
    monkeypatch.setattr(graphs, "STATE", {"mask_at_capture": False, "mask_buffer_widened": False})
    monkeypatch.setenv("DDTREE_VERIFY_GRAPH", "1")
    monkeypatch.setattr(graphs, "_ddtree_width", lambda: None)  # not a DDTREE server
    assert graphs.mask_policy(original, object()) == ("TritonAttnBackend", False)
    target = SimpleNamespace(is_draft_runner=False, num_draft_tokens=16)
    graphs.widen_triton_backend(None, target, None)
    assert target.num_draft_tokens == 16 and not graphs.verify_graph_ready()

    monkeypatch.setattr(graphs, "_ddtree_width", lambda: (65, 16))  # DDTREE, budget 64, block 16
    draft = SimpleNamespace(is_draft_runner=True, num_draft_tokens=16)
    graphs.widen_triton_backend(None, draft, None)
    assert draft.num_draft_tokens == 16 and not graphs.verify_graph_ready()
    assert graphs.mask_policy(original, object()) == ("TritonAttnBackend", True)
    graphs.widen_triton_backend(None, target, None)
    assert target.num_draft_tokens == 65 and graphs.verify_graph_ready()

    monkeypatch.setenv("DDTREE_VERIFY_GRAPH", "0")  # eager verify: no graph may be replayed
    assert not graphs.verify_graph_ready()
    assert graphs.mask_policy(original, object()) == ("TritonAttnBackend", False)
