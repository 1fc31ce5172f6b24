"""Test-only drafter override: draft logits become a noisy copy of the target's known greedy continuation.

With dummy weights the DFlash drafter is useless (acceptance ~0). The e2e script first decodes every prompt with a
plain (non-speculative) server and writes `{"sequences": {"<prompt ids, comma-joined>": prompt + greedy output}}` to
$DDTREE_TEST_ORACLE. At draft depth d for a request whose root token sits at position p, the oracle token is
full[p + d]; it is placed at rank 0 (p=0.55), 1 (0.25), 2 (0.12) or outside the top 4 (0.08) of the draft logits,
deterministically from (prompt, position), the other top ranks holding distractor tokens. With
DDTREE_TEST_ORACLE_DRAFTER=public (or public-flat) the rank odds follow the draft depth instead (drafter_profiles.py:
rank 0 with 0.82, 0.76, 0.68, 0.71, 0.77, then 0.75, the misses split over ranks 1-3), drawn per (prompt, position,
depth), and the drafter states each depth's odds as its log-probs. So:
  * DFLASH (a chain of top-1 tokens) accepts until the first depth whose oracle token is not rank 0;
  * DDTREE can accept deeper through rank-1/2 branches when the budget covers them;
  * both see exactly the same drafter (same function of prompt and position), and the output must stay the
    target's greedy output whatever the drafter proposes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import torch

try:
    import drafter_profiles
except ImportError:  # imported as tests.gpu_standins.oracle_drafter
    from tests.gpu_standins import drafter_profiles  # type: ignore[no-redef]

_ORACLE: dict | None = None
# P(rank 0), P(rank 1), P(rank 2); the rest: not in the top 4. DDTREE_TEST_ORACLE_RANK_P="0.9,0.06,0.02" calibrates
# a stronger drafter (bench/spec_throughput_gpu.py: DFLASH's mean accepted length in the paper's 6-8 range).
RANK_P = tuple(float(x) for x in os.environ.get("DDTREE_TEST_ORACLE_RANK_P", "0.55,0.25,0.12").split(","))
TOP_VALUES = (12.0, 11.0, 10.0, 9.0)


def drafter_kind() -> str | None:
    """DDTREE_TEST_ORACLE_DRAFTER: a depth-profile kind of drafter_profiles (public, public-flat), or None (the
    i.i.d. RANK_P model)."""
    kind = os.environ.get("DDTREE_TEST_ORACLE_DRAFTER", "") or None
    if kind in (None, "calibrated"):
        return None
    if kind not in drafter_profiles.DEPTH_KINDS:
        raise ValueError(f"DDTREE_TEST_ORACLE_DRAFTER={kind!r}: want one of {drafter_profiles.KINDS}")
    return kind


def calibrated_values(rank_p: tuple[float, ...], vocab: int) -> tuple[float, ...]:
    """Top-4 logits whose softmax (against V - 4 logits of 0) states the oracle's own accuracy: P(rank r) = rank_p[r]
    for r < 3, and the mass left over split between the 4th slot and the rest of the vocabulary. A drafter that says
    how sure it is, as a trained one does; with the fixed TOP_VALUES the drafter claims ~40% for a top-1 that is
    right rank_p[0] of the time, which starves deep chains in a best-first tree."""
    left = max(1.0 - sum(rank_p[:3]), 1e-6)
    rest = left / 2
    probs = list(rank_p[:3]) + [left / 2]
    return tuple(math.log(p / rest * max(vocab - 4, 1)) for p in probs)


def depth_values(kind: str, depth: int, vocab: int) -> tuple[float, ...]:
    """Top-4 logits (against V - 4 logits of 0) whose softmax states the depth's true rank odds
    (drafter_profiles.depth_rank_p), the rest of the vocabulary holding drafter_profiles.rest_mass."""
    stated = drafter_profiles.stated_probs(drafter_profiles.depth_rank_p(kind, depth))
    rest = drafter_profiles.rest_mass(stated)
    return tuple(math.log(p / rest * max(vocab - 4, 1)) for p in stated)


def top_values(vocab: int, depth: int = 1) -> tuple[float, ...]:
    """A depth-profile drafter: depth_values at this draft depth (1-based); DDTREE_TEST_ORACLE_CALIBRATED=1:
    calibrated_values(RANK_P); otherwise the fixed TOP_VALUES."""
    kind = drafter_kind()
    if kind is not None:
        return depth_values(kind, depth, vocab)
    if os.environ.get("DDTREE_TEST_ORACLE_CALIBRATED") == "1":
        return calibrated_values(RANK_P, vocab)
    return TOP_VALUES


def _oracle() -> dict:
    global _ORACLE
    if _ORACLE is None:
        path = os.environ.get("DDTREE_TEST_ORACLE")
        if not path or not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as f:
            _ORACLE = json.load(f).get("sequences", {})
    return _ORACLE


def _u(key: str, pos: int, salt: str) -> float:
    h = hashlib.blake2b(f"{key}|{pos}|{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


def rank_of(key: str, pos: int, depth: int = 1) -> int:
    """Rank of the oracle token at absolute position `pos`, drafted at draft depth `depth` (0..3; 4 = not in the
    top ranks). The i.i.d. model ignores the depth; a depth-profile drafter draws it per (position, depth)."""
    kind = drafter_kind()
    if kind is None:
        u, odds = _u(key, pos, "rank"), RANK_P
    else:
        u, odds = _u(key, pos, f"rank@{depth}"), drafter_profiles.depth_rank_p(kind, depth)
    acc = 0.0
    for r, p in enumerate(odds):
        acc += p
        if u < acc:
            return r
    return 4


def distractors(key: str, true_tok: int, pos: int, vocab: int) -> list[int]:
    """The 4 tokens the top slots hold at `pos` where the true token is not (a function of prompt and position)."""
    distract = [(true_tok + 1 + int(_u(key, pos, f"d{i}") * (vocab - 2))) % vocab for i in range(4)]
    return [t if t != true_tok else (t + 1) % vocab for t in distract]


def draft_rows(key: str, full: list[int], root_pos: int, depth: int, vocab: int) -> list[list[tuple[int, float]]]:
    """For depths 1..depth: the (token, logit) pairs that form the top of the draft distribution."""
    rows = []
    for d in range(1, depth + 1):
        pos = root_pos + d
        if pos >= len(full):
            rows.append([])
            continue
        true_tok = int(full[pos])
        r = rank_of(key, pos, d)
        distract = distractors(key, true_tok, pos, vocab)
        row = []
        values = top_values(vocab, d)
        for slot in range(4):
            tok = true_tok if slot == r else distract[slot]
            row.append((tok, values[slot]))
        rows.append(row)
    return rows


def _rows_for(reqs, prefix_lens, depth: int, vocab: int):
    """Per request: the oracle's top rows for depths 1..depth, or None for requests outside the oracle."""
    oracle = _oracle()
    prefix = prefix_lens.tolist()
    out = []
    for i, req in enumerate(reqs):
        key = ",".join(str(t) for t in req.origin_input_ids)
        full = oracle.get(key)
        out.append(None if full is None else draft_rows(key, full, int(prefix[i]), depth, vocab))
    return out


def oracle_topk_row(row: list[tuple[int, float]], drafter_ids: list[int], k: int, vocab: int):
    """One depth's top-K under the oracle: its 4 (token, logit) pairs on top, then the drafter's own candidates squashed
    to logit ~0 (in the drafter's order; a tiny decrement keeps the order strict). Log-probs are taken against a
    vocabulary whose other V - 4 logits are ~0, so every TP rank computes the same row from the gathered top-K alone
    (no full-vocab logits)."""
    taken = {tok for tok, _ in row}
    pairs = list(row)
    for r, tok in enumerate(drafter_ids):
        if len(pairs) >= k:
            break
        if tok not in taken:
            pairs.append((tok, -1e-4 * (r + 1)))
            taken.add(tok)
    pairs = pairs[:k]
    lse = torch.logsumexp(torch.tensor([v for _, v in row] + [math.log(max(vocab - len(row), 1))]), 0).item()
    return [t for t, _ in pairs], [v - lse for _, v in pairs]


class DeviceOracle:
    """The same oracle as draft_rows / oracle_topk_row, as tables on the device: one row per request, built once
    when the request is first seen (its true tokens, their ranks at every draft depth and distractors for every
    position). A step then costs a few gathers, with no host sync and no per-depth Python: the host oracle's ~3-6 ms
    a step (a D2H copy, hashing and loops per request and depth) is what the calibrated rows of
    notes/step-cost-h200.md still paid. DDTREE_TEST_ORACLE_DEVICE=1 selects it;
    tests/worker/test_hybrid.py holds it equal to the host oracle."""

    def __init__(self, vocab: int, device: torch.device, depth: int):
        self.vocab, self.device = vocab, device
        self.kind = drafter_kind()
        # the i.i.d. model's rank and stated odds do not depend on the draft depth: one column serves every depth
        self.depths = depth if self.kind is not None else 1
        self.row_of: dict[str, int] = {}
        self.full = torch.zeros((0, 1), dtype=torch.long, device=device)  # true token at every position
        self.distract = torch.zeros((0, 1, 4), dtype=torch.long, device=device)  # the top slots' other tokens
        self.rank = torch.zeros((0, 1, self.depths), dtype=torch.long, device=device)  # true token's slot (4: none)
        self.length = torch.zeros((0,), dtype=torch.long, device=device)
        values = torch.tensor([top_values(vocab, d) for d in range(1, self.depths + 1)], dtype=torch.float32)
        fill = torch.full((self.depths, 1), math.log(max(vocab - 4, 1)))
        lse = torch.logsumexp(torch.cat([values, fill], dim=1), dim=1)  # [depths]
        self.top_lp = (values - lse[:, None]).to(device)  # the 4 oracle slots' log-probs per depth
        self.fill_lse = lse.to(device)
        self._batch: tuple[tuple, torch.Tensor] | None = None

    def _add(self, key: str, full: list[int]) -> int:
        n = len(full)
        distract = [distractors(key, int(full[pos]), pos, self.vocab) for pos in range(n)]
        ranks = [[rank_of(key, pos, d) for d in range(1, self.depths + 1)] for pos in range(n)]
        width = max(self.full.shape[1], n)
        rows = self.full.shape[0] + 1
        grow_full = torch.full((rows, width), -1, dtype=torch.long, device=self.device)
        grow_dist = torch.zeros((rows, width, 4), dtype=torch.long, device=self.device)
        grow_rank = torch.full((rows, width, self.depths), 4, dtype=torch.long, device=self.device)
        grow_full[:-1, : self.full.shape[1]] = self.full
        grow_dist[:-1, : self.distract.shape[1]] = self.distract
        grow_rank[:-1, : self.rank.shape[1]] = self.rank
        grow_full[-1, :n] = torch.tensor(full, dtype=torch.long)
        grow_dist[-1, :n] = torch.tensor(distract, dtype=torch.long)
        grow_rank[-1, :n] = torch.tensor(ranks, dtype=torch.long)
        self.full, self.distract, self.rank = grow_full, grow_dist, grow_rank
        self.length = torch.cat([self.length, torch.tensor([n], dtype=torch.long, device=self.device)])
        self.row_of[key] = self.full.shape[0] - 1
        return self.row_of[key]

    def rows(self, reqs) -> torch.Tensor:
        """Table rows of the batch's requests (-1: not in the oracle); cached while the batch is the same."""
        keys = tuple(",".join(str(t) for t in req.origin_input_ids) for req in reqs)
        if self._batch is not None and self._batch[0] == keys:
            return self._batch[1]
        oracle = _oracle()
        idx = []
        for key in keys:
            if key not in self.row_of and key in oracle:
                self._add(key, [int(t) for t in oracle[key]])
            idx.append(self.row_of.get(key, -1))
        rows = torch.tensor(idx, dtype=torch.long, device=self.device)
        self._batch = (keys, rows)
        return rows

    def top4(self, reqs, prefix_lens: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [bs, depth, 4], valid [bs, depth]): the oracle's top rows at positions prefix + 1 .. + depth."""
        rows = self.rows(reqs)
        if self.length.numel() == 0:  # no request seen so far is in the oracle (a warm-up or health request)
            none = torch.zeros((rows.shape[0], depth), dtype=torch.bool, device=self.device)
            return torch.zeros((rows.shape[0], depth, 4), dtype=torch.long, device=self.device), none
        pos = prefix_lens.to(self.device, torch.long).view(-1, 1) + torch.arange(1, depth + 1, device=self.device)
        safe_rows = rows.clamp(min=0).view(-1, 1)
        valid = (rows.view(-1, 1) >= 0) & (pos < self.length[safe_rows.view(-1)].view(-1, 1))
        safe_pos = pos.clamp(max=max(self.full.shape[1] - 1, 0))
        cols = torch.arange(depth, device=self.device).clamp(max=self.depths - 1).view(1, -1)
        rank = self.rank[safe_rows, safe_pos, cols]  # [bs, depth]
        slot = torch.arange(4, device=self.device).view(1, 1, 4)
        true = self.full[safe_rows, safe_pos].unsqueeze(-1)
        return torch.where(slot == rank.unsqueeze(-1), true, self.distract[safe_rows, safe_pos]), valid

    def override(self, reqs, prefix_lens: torch.Tensor, lp: torch.Tensor, ids: torch.Tensor):
        """oracle_topk_row for every (request, depth) at once: the 4 oracle tokens on top, then the drafter's own
        candidates not among them, in the drafter's order, at log-prob -1e-4 * (their rank + 1) - lse."""
        bs, depth, k = ids.shape
        top, valid = self.top4(reqs, prefix_lens, depth)
        n_top = min(4, k)
        cols = torch.arange(depth, device=ids.device).clamp(max=self.depths - 1)
        taken = (ids.unsqueeze(-1) == top.unsqueeze(-2)).any(-1)  # [bs, depth, K]
        order = torch.argsort(taken.long() * k + torch.arange(k, device=ids.device), dim=-1)[..., : k - n_top]
        fill_ids = torch.gather(ids, -1, order)
        fill_lp = -1e-4 * (order.float() + 1) - self.fill_lse[cols].view(1, depth, 1)
        new_ids = torch.cat([top[..., :n_top], fill_ids], dim=-1)
        new_lp = torch.cat([self.top_lp[cols, :n_top].unsqueeze(0).expand(bs, depth, n_top), fill_lp], dim=-1)
        keep = valid.unsqueeze(-1)
        return torch.where(keep, new_lp, lp.float()), torch.where(keep, new_ids, ids)


_DEVICE_ORACLES: dict[tuple[int, str, int], DeviceOracle] = {}


def device_oracle(vocab: int, device: torch.device, depth: int = 15) -> DeviceOracle:
    key = (vocab, str(device), depth)
    if key not in _DEVICE_ORACLES:
        _DEVICE_ORACLES[key] = DeviceOracle(vocab, device, depth)
    return _DEVICE_ORACLES[key]


def _use_device() -> bool:
    return os.environ.get("DDTREE_TEST_ORACLE_DEVICE") == "1"


def override(*, reqs, prefix_lens, root_tokens, lp: torch.Tensor, ids: torch.Tensor, vocab: int):
    """Replace the draft top-K (lp, ids [bs, L, K]) for requests whose prompt is in the oracle (others keep the
    drafter's). Depths past the known continuation keep the drafter's row."""
    if not _oracle():
        return lp, ids
    if _use_device():
        return device_oracle(vocab, ids.device, ids.shape[1]).override(reqs, prefix_lens, lp, ids)
    bs, depth, k = lp.shape
    lp_h, ids_h = lp.float().cpu().clone(), ids.cpu().clone()
    for i, rows in enumerate(_rows_for(reqs, prefix_lens, depth, vocab)):
        if rows is None:
            continue
        for d, row in enumerate(rows):
            if not row:
                continue
            toks, vals = oracle_topk_row(row, ids_h[i, d].tolist(), k, vocab)
            ids_h[i, d, : len(toks)] = torch.tensor(toks, dtype=ids_h.dtype)
            lp_h[i, d, : len(vals)] = torch.tensor(vals, dtype=lp_h.dtype)
    return lp_h.to(lp.device), ids_h.to(ids.device)


def install_dflash_patch() -> None:
    """Apply the same override to DFLASH's greedy draft head (imported lazily when SGLang loads the worker)."""
    from post_import import after_import

    target = "sglang.srt.speculative.dflash_worker_v2"

    def patch(mod):
        cls = mod.DFlashWorkerV2
        if getattr(cls, "_oracle_patched", False):
            return
        orig_fbg = cls.forward_batch_generation
        orig_head = cls._greedy_sample_from_vocab_parallel_head

        def forward_batch_generation(self, batch, *args, **kwargs):
            self._oracle_batch = batch
            return orig_fbg(self, batch, *args, **kwargs)

        def greedy_head(self, *, hidden_states, lm_head, chunk_size=256):
            # the oracle's rank-0 token where it knows the continuation, else the drafter's own (TP-safe) argmax:
            # exactly the top-1 of the DDTREE override's rows, so both algorithms see one drafter
            tokens = orig_head(self, hidden_states=hidden_states, lm_head=lm_head, chunk_size=chunk_size)
            batch = getattr(self, "_oracle_batch", None)
            if batch is None or batch.forward_mode.is_extend() or type(self).__name__ != "DFlashWorkerV2":
                return tokens
            bs = len(batch.seq_lens)
            depth = tokens.numel() // bs
            vocab = int(self.model_runner.model_config.vocab_size)
            view = tokens.view(bs, depth)
            if _use_device():
                top, valid = device_oracle(vocab, tokens.device, depth).top4(batch.reqs, batch.seq_lens, depth)
                view.copy_(torch.where(valid, top[..., 0].to(view.dtype), view))
                return tokens
            for i, rows in enumerate(_rows_for(batch.reqs, batch.seq_lens, depth, vocab)):
                for d, row in enumerate(rows or []):
                    if row:
                        view[i, d] = int(row[0][0])
            return tokens

        cls.forward_batch_generation = forward_batch_generation
        cls._greedy_sample_from_vocab_parallel_head = greedy_head
        cls._maybe_build_draft_sampler = lambda self: None  # keep the head outside the draft graph (hook sees it)
        cls._oracle_patched = True

    after_import(target, patch)
