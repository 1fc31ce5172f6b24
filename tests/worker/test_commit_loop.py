"""The worker's bookkeeping, end to end on CPU: slot-addressed KV like SGLang's pool, verify through SGLang's flat
custom-mask layout, SGLang's own tree walk, the worker's commit (tokens, commit lengths, KV compaction by
gather-then-scatter), bonus as the next root. A tiny random attention model (float64, RoPE, so siblings sharing a
position and compacted KV both matter) must decode exactly what plain greedy decoding does, at every budget, and
accept deep paths through non-top-1 branches when the drafter is a noisy copy of the target's continuation.
"""

from __future__ import annotations

import hashlib
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from ddtree_sglang import tree_prep as tp  # noqa: E402
from worker_sglang_source import load_functions, spec_tree_source  # noqa: E402

V, D, HEADS, LAYERS = 97, 32, 2, 2
SLOTS_PER_REQ = 512


class TinyLM:
    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)

        def w(*shape, scale=1.0):
            return torch.randn(*shape, generator=g, dtype=torch.float64) * scale / math.sqrt(shape[0])

        self.emb = torch.randn(V, D, generator=g, dtype=torch.float64)
        self.layers = [dict(q=w(D, D), k=w(D, D), v=w(D, D), o=w(D, D), up=w(D, 4 * D), down=w(4 * D, D))
                       for _ in range(LAYERS)]
        self.k = [torch.zeros(4 * SLOTS_PER_REQ, HEADS, D // HEADS, dtype=torch.float64) for _ in range(LAYERS)]
        self.v = [torch.zeros_like(self.k[0]) for _ in range(LAYERS)]

    @staticmethod
    def _rope(x, pos):  # x [T, H, dh]
        dh = x.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
        ang = pos.to(torch.float64)[:, None] * inv[None, :]
        c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * c - x2 * s
        out[..., 1::2] = x1 * s + x2 * c
        return out

    @staticmethod
    def _norm(x):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)

    def forward(self, tokens, positions, write_slots, allowed):
        """tokens/positions/write_slots [T]; allowed[i] = the KV slots query i may attend (its own included).
        KV of the new tokens is written first, then read back (as SGLang's extend attention sees it)."""
        x = self.emb[tokens]
        dh = D // HEADS
        for li, p in enumerate(self.layers):
            h = self._norm(x)
            q = self._rope((h @ p["q"]).view(-1, HEADS, dh), positions)
            k = self._rope((h @ p["k"]).view(-1, HEADS, dh), positions)
            v = (h @ p["v"]).view(-1, HEADS, dh)
            self.k[li][write_slots] = k
            self.v[li][write_slots] = v
            out = torch.empty_like(q)
            for i in range(len(tokens)):
                ks, vs = self.k[li][allowed[i]], self.v[li][allowed[i]]
                att = torch.softmax(torch.einsum("hd,shd->hs", q[i], ks) / math.sqrt(dh), dim=-1)
                out[i] = torch.einsum("hs,shd->hd", att, vs)
            x = x + out.reshape(-1, D) @ p["o"]
            x = x + torch.relu(self._norm(x) @ p["up"]) @ p["down"]
        return self._norm(x) @ self.emb.T


def slots_of(req: int) -> torch.Tensor:
    return torch.arange(SLOTS_PER_REQ) + req * SLOTS_PER_REQ  # req_to_token row


def greedy(model: TinyLM, prompt: list[int], req: int, new: int, rows_out: dict | None = None) -> list[int]:
    """Plain greedy decoding; rows_out[pos] = the logits row computed at position pos (predicting pos + 1)."""
    row = slots_of(req)
    t = torch.tensor(prompt)
    n = len(prompt)
    logits = model.forward(t, torch.arange(n), row[:n], [row[: i + 1] for i in range(n)])
    if rows_out is not None:
        rows_out[n - 1] = logits[-1]
    out = [int(logits[-1].argmax())]
    while len(out) < new:
        pos = n + len(out) - 1
        logits = model.forward(torch.tensor([out[-1]]), torch.tensor([pos]), row[pos: pos + 1], [row[: pos + 1]])
        if rows_out is not None:
            rows_out[pos] = logits[-1]
        out.append(int(logits[-1].argmax()))
    return out


def noisy_oracle_logits(full: list[int], root_pos: int, depth: int, key: str) -> torch.Tensor:
    """Draft logits whose top ranks hold the target's true next tokens at rank 0/1/2/absent by a fixed hash."""
    out = torch.zeros(depth, V, dtype=torch.float64)
    for d in range(1, depth + 1):
        pos = root_pos + d
        h = int.from_bytes(hashlib.blake2b(f"{key}|{pos}".encode(), digest_size=8).digest(), "little")
        u = (h % 10000) / 10000
        rank = 0 if u < 0.5 else 1 if u < 0.75 else 2 if u < 0.9 else 9
        true_tok = full[pos] if pos < len(full) else (h % V)
        others = [(true_tok + 1 + 7 * i + (h >> 8) % 5) % V for i in range(4)]
        others = [t if t != true_tok else (t + 3) % V for t in others]
        for slot in range(4):
            out[d - 1, true_tok if slot == rank else others[slot]] = 8.0 - slot
    return out


@pytest.fixture(scope="module")
def sgl_verify(tmp_path_factory):
    found = spec_tree_source()
    if found is None:
        return None
    return load_functions(found[0], ["verify_tree_greedy_kernel_triton", "verify_tree_greedy_triton"],
                          tmp_path_factory.mktemp("sgl2"), "sglang_spec_tree_kernels_loop")


def ddtree_decode(model, prompts, news, budget, depth, oracle, sgl_verify, mode="reference", ref_rows=None):
    """The worker's round, per batch: tree -> verify (flat custom mask) -> accept -> commit -> KV compaction."""
    bs, block = len(prompts), depth + 1
    rows = [slots_of(b) for b in range(bs)]
    outs, prefix, bonus = [], [], []
    for b, p in enumerate(prompts):  # prefill
        n = len(p)
        logits = model.forward(torch.tensor(p), torch.arange(n), rows[b][:n], [rows[b][: i + 1] for i in range(n)])
        outs.append([int(logits[-1].argmax())])
        prefix.append(n)
        bonus.append(outs[-1][0])
    prep = tp.TreePreparer(depth=depth, vocab=V, budget=budget, topk_cap=None, mode=mode, device="cpu")
    accepted_hist, deep_branch, branch_count = [], False, [0]
    while any(len(o) < m for o, m in zip(outs, news)):
        prefix_t = torch.tensor(prefix)
        draft = torch.stack([noisy_oracle_logits(oracle[b], prefix[b], depth, f"r{b}") for b in range(bs)])
        vi = prep.prepare(draft.float(), torch.tensor(bonus), prefix_t)
        n = vi.width
        mask = tp.tree_mask(vi.visibility, prefix_t, tp.mask_total_bound(n, prefix_t + n))  # an upper-bound size
        predict = torch.empty(bs, n, dtype=torch.int64)
        verify_logits = []
        off = 0
        for b in range(bs):  # read the mask as SGLang's kernel does: row-major [n, prefix + n] per request, and the
            p = prefix[b]     # prefix columns never read (skip_prefix_custom_mask): every prefix slot is visible
            m = mask[off: off + n * (p + n)].view(n, p + n)[:, p:].bool()
            off += n * (p + n)
            allowed = [torch.cat([rows[b][:p], rows[b][p: p + n][m[i]]]) for i in range(n)]
            logits = model.forward(vi.input_ids[b], vi.positions[b], rows[b][p: p + n], allowed)
            verify_logits.append(logits)
            predict[b] = logits.argmax(-1)
        if sgl_verify is not None:
            predicts = torch.full((bs * n,), -1, dtype=torch.int32)
            acc_idx = torch.full((bs, depth + 1), -1, dtype=torch.int32)
            acc_num = torch.zeros(bs, dtype=torch.int32)
            sgl_verify.verify_tree_greedy_triton(predicts, acc_idx, acc_num, vi.input_ids, vi.retrive_index,
                                                 vi.retrive_next_token, vi.retrive_next_sibling, predict)
            local = tp.accepted_from_sglang(acc_idx, acc_num, n)
            last = torch.gather(local, 1, acc_num.long()[:, None])[:, 0]
            acc = tp.Accepted(local, acc_num.long(), torch.gather(predict, 1, last[:, None])[:, 0])
        else:
            acc = tp.follow_greedy(vi.input_ids, vi.parents, predict, depth)
        cm = tp.commit(vi.input_ids, acc, block)
        for b in range(bs):  # KV compaction: gather every source, then scatter (the worker's move)
            p = prefix[b]
            window = rows[b][p: p + n]
            src = window[cm.chain_src[b, : min(block, n)]]
            dst = window[: min(block, n)]
            for li in range(LAYERS):
                model.k[li][dst] = model.k[li][src].clone()
                model.v[li][dst] = model.v[li][src].clone()
            a = int(acc.accept_len[b])
            accepted_hist.append(a)
            branch_count[0] += int(tp.branch_accepts(acc, vi.retrive_next_token)[b])
            if ref_rows is not None:  # the verify logits on the accepted path are plain decoding's, to 1e-9
                for node in acc.accepted[b, : a + 1].tolist():
                    pos = int(vi.positions[b, node])
                    if pos in ref_rows[b]:
                        assert torch.allclose(verify_logits[b][node], ref_rows[b][pos], atol=1e-9, rtol=0), \
                            (b, node, pos)
            if a and any(int(vi.input_ids[b, node]) != int(draft[b, int(vi.positions[b, node]) - p - 1].argmax())
                         for node in acc.accepted[b, 1: a + 1].tolist()):
                deep_branch = True  # an accepted node that is not the drafter's top-1 at its depth
            outs[b].extend(cm.out_tokens[b, : int(cm.commit_lens[b])].tolist())
            prefix[b] += int(cm.commit_lens[b])
            bonus[b] = int(acc.bonus[b])
    assert deep_branch == (branch_count[0] > 0)  # the worker's metric agrees with the drafter-rank view
    return [o[:m] for o, m in zip(outs, news)], accepted_hist, deep_branch


@pytest.mark.parametrize("budget", [1, 7, 15, 32])
def test_ddtree_round_bookkeeping_is_lossless(budget, sgl_verify):
    depth = 7 if budget <= 15 else 15
    prompts = [[3, 14, 15, 92, 65, 35], [27, 18, 28], [1, 41, 42, 13, 56, 2, 71, 9, 9]]
    news = [24, 17, 30]
    ref_model = TinyLM()
    ref_rows = [{} for _ in prompts]
    ref = [greedy(ref_model, p, b, m + depth + 2, ref_rows[b]) for b, (p, m) in enumerate(zip(prompts, news))]
    oracle = [p + r for p, r in zip(prompts, ref)]
    out, hist, deep = ddtree_decode(TinyLM(), prompts, news, budget, depth, oracle, sgl_verify, ref_rows=ref_rows)
    assert out == [r[:m] for r, m in zip(ref, news)]
    assert max(hist) >= min(2, budget)  # several drafts accepted in one round (a 1-node tree accepts 1)
    if budget >= 15:
        assert deep  # accepted a node that is not the drafter's top-1 at its depth (a branch, not the chain)
        assert sum(hist) / len(hist) > 1.0


def test_triton_prep_in_the_loop_matches(sgl_verify):
    prompts, news, depth, budget = [[5, 6, 7, 8], [9, 10]], [12, 9], 5, 7
    ref_model, ref_rows = TinyLM(), [{} for _ in prompts]
    ref = [greedy(ref_model, p, b, m + depth + 2, ref_rows[b]) for b, (p, m) in enumerate(zip(prompts, news))]
    oracle = [p + r for p, r in zip(prompts, ref)]
    out, _, _ = ddtree_decode(TinyLM(), prompts, news, budget, depth, oracle, sgl_verify, mode="triton",
                              ref_rows=ref_rows)
    assert out == [r[:m] for r, m in zip(ref, news)]
