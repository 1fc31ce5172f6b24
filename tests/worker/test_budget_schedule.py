"""The worker's verify width per batch size (--speculative-ddtree-budget-schedule, ddtree_sglang/schedule.py) on
CPU: the width each batch size gets, the graph batch sizes each width captures, the chain width's verify inputs are
DFLASH's (the drafter's top-1 at every depth, a causal chain), and a decode loop whose batch shrinks across the
schedule's widths stays exactly plain greedy decoding, the chain rounds accepting exactly what DFLASH accepts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from ddtree_sglang import tree_prep as tp  # noqa: E402
from ddtree_sglang.schedule import WidthSchedule  # noqa: E402
from test_commit_loop import SLOTS_PER_REQ, TinyLM, V, greedy, noisy_oracle_logits, slots_of  # noqa: E402

SEED = 4321


def _model(requests: int) -> TinyLM:
    """test_commit_loop's tiny model with KV slots for `requests` requests."""
    model = TinyLM()
    model.k = [torch.zeros(requests * SLOTS_PER_REQ, *k.shape[1:], dtype=k.dtype) for k in model.k]
    model.v = [torch.zeros_like(k) for k in model.k]
    return model


def _schedule(text, depth=15, vocab=1000, budget=127, cap=None, mode="reference"):
    return WidthSchedule(text, depth=depth, vocab=vocab, budget=budget, topk_cap=cap, mode=mode, device="cpu")


def test_each_batch_size_gets_its_width():
    s = _schedule("2:127,4:64,8:16,0")
    got = {bs: (s.pick(bs).width, s.pick(bs).chain) for bs in (1, 2, 3, 4, 5, 8, 9, 32, 256)}
    assert got == {1: (128, False), 2: (128, False), 3: (65, False), 4: (65, False), 5: (17, False),
                   8: (17, False), 9: (16, True), 32: (16, True), 256: (16, True)}
    assert s.scheduled and [w.width for w in s.widths()] == [128, 65, 17, 16]
    assert s.pick(9).k == 1 and s.pick(1).k == 127  # the chain is built from the top-1 column alone
    fixed = _schedule(None, budget=64)
    assert not fixed.scheduled and {fixed.pick(bs).width for bs in (1, 8, 64)} == {65}
    assert _schedule("chain").pick(1).chain


def test_each_width_captures_the_padded_batch_sizes_it_serves():
    s = _schedule("2:127,4:64,8:16,0")
    assert s.capture_buckets([1, 2, 4, 8, 12, 16, 24, 32]) == {128: [1, 2], 65: [4], 17: [8], 16: [12, 16, 24, 32]}
    # a threshold between captured sizes: batch 3 verifies at 65 nodes and replays the size-4 graph of that width
    odd = _schedule("1:127,3:64,0")
    assert odd.capture_buckets([1, 2, 4, 8]) == {128: [1], 65: [2, 4], 16: [4, 8]}


def test_the_startup_runner_captures_only_the_widest_widths_sizes(monkeypatch):
    """graphs.widest_sizes_only, around the scheduler's capture of the target's graphs: the target runner at the
    widest width keeps the sizes that width serves, and hands back the full list for the narrower widths; the
    draft's runner (another model runner) and other widths are untouched; SGLang's function is restored after."""
    import sys
    import types

    from ddtree_sglang import graphs

    full = [1, 2, 4, 8, 12, 16, 24, 32]
    calls = []

    def sglang_sizes(mr, captured_req_width=1, *, gathered_buffer_required=None):
        calls.append((mr, captured_req_width))
        return list(full), [b for b in full if b <= 8]

    dcgr = types.ModuleType("decode_cuda_graph_runner")
    dcgr.get_batch_sizes_to_capture = sglang_sizes
    for name in ("sglang", "sglang.srt", "sglang.srt.model_executor", "sglang.srt.model_executor.runner"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.model_executor.runner.decode_cuda_graph_runner", dcgr)
    monkeypatch.setattr(sys.modules["sglang.srt.model_executor.runner"], "decode_cuda_graph_runner", dcgr,
                        raising=False)
    target, draft = object(), object()
    s = _schedule("2:127,4:64,8:16,0")
    with graphs.widest_sizes_only(target, s) as asked:
        assert dcgr.get_batch_sizes_to_capture(target, 128) == ([1, 2], [1, 2])
        assert dcgr.get_batch_sizes_to_capture(draft, 128) == (full, [1, 2, 4, 8])  # not the target's runner
        assert dcgr.get_batch_sizes_to_capture(target, 65, gathered_buffer_required=False) == (full, [1, 2, 4, 8])
    assert asked == {"bs": full}
    assert dcgr.get_batch_sizes_to_capture is sglang_sizes
    assert s.capture_buckets(asked["bs"]) == {128: [1, 2], 65: [4], 17: [8], 16: [12, 16, 24, 32]}


def test_a_schedule_wider_than_the_server_or_malformed_is_refused():
    with pytest.raises(ValueError, match="wider than the server's budget 64"):
        _schedule("2:127,0", budget=64)
    with pytest.raises(ValueError, match="batch sizes must increase"):
        _schedule("4:64,2:127,0")


@pytest.mark.parametrize("mode", ["reference", "triton"])
def test_the_chain_width_verifies_dflashs_block(mode):
    """At a batch above the last threshold the verify inputs are DFLASH's: the root, then the drafter's top-1
    token at every depth, at consecutive positions, each node seeing itself and all before it (causal)."""
    print(f"seed {SEED}")
    g = torch.Generator().manual_seed(SEED)
    bs, depth, vocab = 5, 15, 1000
    s = _schedule("2:8,0", depth=depth, vocab=vocab, budget=8, mode=mode)
    logits = torch.randn(bs, depth, vocab, generator=g) * 3
    lp, ids = tp.topk_logprobs(logits, max(w.k for w in s.widths()))  # the worker's draft top-K (widest tree)
    roots = torch.randint(0, vocab, (bs,), generator=g)
    prefix = torch.randint(5, 50, (bs,), generator=g)
    width = s.pick(bs)
    vi = s.prepare(width, lp, ids, roots, prefix)
    assert vi.width == depth + 1 == 16
    assert torch.equal(vi.input_ids[:, 0], roots)
    assert torch.equal(vi.input_ids[:, 1:], logits.argmax(-1))  # DFLASH's greedy draft head
    assert torch.equal(vi.positions, prefix[:, None] + torch.arange(depth + 1))
    assert torch.equal(vi.visibility, torch.tril(torch.ones(depth + 1, depth + 1, dtype=torch.bool)).expand(bs, -1, -1))
    assert torch.equal(vi.parents, torch.arange(-1, depth).expand(bs, -1))
    wide = s.prepare(s.pick(1), lp[:1], ids[:1], roots[:1], prefix[:1])
    assert wide.width == 9  # the same top-K serves the widest tree


def _verify(model, rows, prefix, vi, b):
    """One request's verify forward through the flat custom mask, as the worker's target pass sees it."""
    n, p = vi.width, prefix
    mask = tp.tree_mask(vi.visibility[b: b + 1], torch.tensor([p]), n * (p + n)).view(n, p + n)[:, p:].bool()
    allowed = [torch.cat([rows[:p], rows[p: p + n][mask[i]]]) for i in range(n)]
    return model.forward(vi.input_ids[b], vi.positions[b], rows[p: p + n], allowed).argmax(-1)


def _decode(prompts, news, depth, oracle, step):
    """Decode every request, the batch holding only the unfinished ones (so it shrinks round by round); `step`
    makes one request's verify inputs from (batch size, its draft logits, bonus, prefix). Returns the outputs, the
    commits (request, batch size, position, length) round by round, and the verify widths used."""
    model = _model(len(prompts))
    rows = [slots_of(b) for b in range(len(prompts))]
    outs, prefix, bonus = [], [], []
    for b, p in enumerate(prompts):
        n = len(p)
        logits = model.forward(torch.tensor(p), torch.arange(n), rows[b][:n], [rows[b][: i + 1] for i in range(n)])
        outs.append([int(logits[-1].argmax())])
        prefix.append(n)
        bonus.append(outs[-1][0])
    commits, widths = [], set()
    while True:
        live = [b for b in range(len(prompts)) if len(outs[b]) < news[b]]
        if not live:
            break
        draft = torch.stack([noisy_oracle_logits(oracle[b], prefix[b], depth, f"r{b}") for b in live]).float()
        vi = step(len(live), draft, torch.tensor([bonus[b] for b in live]), torch.tensor([prefix[b] for b in live]))
        widths.add(vi.width)
        for i, b in enumerate(live):
            predict = _verify(model, rows[b], prefix[b], vi, i)[None, :]
            one = tp.VerifyInputs(*(getattr(vi, f)[i: i + 1] for f in (
                "input_ids", "positions", "visibility", "retrive_index", "retrive_next_token",
                "retrive_next_sibling", "parents")))
            acc = tp.follow_greedy(one.input_ids, one.parents, predict, depth)
            cm = tp.commit(one.input_ids, acc, depth + 1)
            window = rows[b][prefix[b]: prefix[b] + vi.width]
            src, dst = window[cm.chain_src[0, : min(depth + 1, vi.width)]], window[: min(depth + 1, vi.width)]
            for li in range(len(model.k)):
                model.k[li][dst] = model.k[li][src].clone()
                model.v[li][dst] = model.v[li][src].clone()
            commits.append((b, len(live), prefix[b], int(cm.commit_lens[0])))
            outs[b].extend(cm.out_tokens[0, : int(cm.commit_lens[0])].tolist())
            prefix[b] += int(cm.commit_lens[0])
            bonus[b] = int(acc.bonus[0])
    return [o[:m] for o, m in zip(outs, news)], commits, widths


def _dflash_step(depth):
    """DFLASH's round: the drafter's argmax at every depth, one causal chain of block_size tokens."""
    def step(bs, draft, bonus, prefix):
        trees = tp.Trees(draft.argmax(-1), torch.arange(1, depth + 1).expand(bs, -1).clone(),
                         torch.arange(-1, depth).expand(bs, -1).clone())
        return tp.compile_verify(trees, bonus, prefix, depth)
    return step


def test_a_shrinking_batch_crosses_the_widths_and_stays_greedy():
    """Six requests of different lengths: the batch shrinks from 6 to 1, each round verifying at the width its
    batch size gets (the chain at 4 and above, then 9, 21 or 41 verify tokens). The outputs are plain greedy
    decoding's; while the batch is chain-sized every round commits what DFLASH's round commits. (The triton tree
    builder is held equal to the reference one in test_hybrid.py; here the reference one keeps this quick.)"""
    depth, mode = 7, "reference"
    prompts = [[3 + b, 14, 15 + 2 * b, 92 % (b + 5), 65] for b in range(6)]
    news = [3, 6, 10, 13, 17, 22]
    ref = [greedy(_model(len(prompts)), p, b, m + depth + 2) for b, (p, m) in enumerate(zip(prompts, news))]
    oracle = [p + r for p, r in zip(prompts, ref)]
    s = _schedule("1:40,2:20,3:8,0", depth=depth, vocab=V, budget=40, mode=mode)
    head_k = max(w.k for w in s.widths())

    def tree_step(bs, draft, bonus, prefix):
        lp, ids = tp.topk_logprobs(draft, head_k)
        return s.prepare(s.pick(bs), lp, ids, bonus, prefix)

    out, commits, widths = _decode(prompts, news, depth, oracle, tree_step)
    assert out == [r[:m] for r, m in zip(ref, news)]
    assert {41, 8} <= widths and len(widths) >= 3  # the widest tree, the chain and one between
    d_out, d_commits, d_widths = _decode(prompts, news, depth, oracle, _dflash_step(depth))
    assert d_out == out and d_widths == {8}
    # while a request's batch holds 4 or more, its rounds are chain rounds: the same commits as DFLASH's rounds
    chain = {}
    for b, bs, pos, length in commits:
        if bs >= 4 and len(chain.get(b, [])) == sum(1 for c in commits if c[0] == b and c[1] >= 4 and c[2] < pos):
            chain.setdefault(b, []).append((pos, length))
    dflash = {}
    for b, _, pos, length in d_commits:
        dflash.setdefault(b, []).append((pos, length))
    assert sum(len(v) for v in chain.values()) >= 6
    for b, rounds in chain.items():
        assert rounds == dflash[b][: len(rounds)], b
