"""The public-acceptance stand-in drafter (tests/gpu_standins/drafter_profiles.py, oracle_drafter.py): its per-depth
rank statistics at a fixed seed, the odds it states, the same drafter for DFLASH and DDTREE, and the accept_sim
wiring. Seeds are fixed and printed."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from bench_scripts import load_bench

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
STANDINS = REPO / "tests" / "gpu_standins"
SEED = 20261204
PUBLIC_ACCEPT = (0.82, 0.62, 0.42, 0.30, 0.23)  # per-position acceptance of public serving, positions 1-5


def _import(name: str):
    sys.path.insert(0, str(STANDINS))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@pytest.fixture
def od(monkeypatch, tmp_path):
    """oracle_drafter with a fresh oracle file and no cached tables; the env of each test picks the kind."""
    mod = _import("oracle_drafter")
    monkeypatch.setattr(mod, "_ORACLE", None)
    monkeypatch.setattr(mod, "_DEVICE_ORACLES", {})
    monkeypatch.setenv("DDTREE_TEST_ORACLE_CALIBRATED", "1")
    monkeypatch.delenv("DDTREE_TEST_ORACLE_DEVICE", raising=False)

    def use(sequences: dict):
        path = tmp_path / "oracle.json"
        path.write_text(json.dumps({"sequences": sequences}))
        monkeypatch.setenv("DDTREE_TEST_ORACLE", str(path))
        monkeypatch.setattr(mod, "_ORACLE", None)
        return mod

    mod.use = use
    return mod


def test_the_public_profile_reproduces_public_acceptance_by_position():
    prof = _import("drafter_profiles")
    for kind in prof.DEPTH_KINDS:
        run = 1.0
        for d, want in enumerate(PUBLIC_ACCEPT, start=1):
            odds = prof.depth_rank_p(kind, d)
            run *= odds[0]
            assert run == pytest.approx(want, abs=0.006), (kind, d)
            assert sum(odds) <= 1.0 + 1e-12
        assert prof.depth_rank_p(kind, 6)[0] == prof.depth_rank_p(kind, 15)[0] == 0.75  # then holds
        assert 3.4 <= prof.chain_length(kind, 15) <= 4.4  # public serving's mean accepted length
    assert prof.depth_rank_p("public", 1)[1:] == pytest.approx((0.18 * 0.6, 0.18 * 0.3, 0.18 * 0.1))
    assert sum(prof.depth_rank_p("public-flat", 3)) == pytest.approx(1 - 0.32 * 0.1)  # 10 % outside the top 4
    with pytest.raises(ValueError, match="unknown"):
        prof.depth_rank_p("calibrated", 1)


@pytest.mark.parametrize("kind", ["public", "public-flat"])
def test_the_oracle_draws_each_depths_rank_with_that_depths_odds(od, monkeypatch, kind):
    """Over 6000 (prompt, position) draws per depth (seed printed), the true token's rank at depth d has
    drafter_profiles' odds for d, independently of the rank at the other depths."""
    print(f"seed {SEED}")
    monkeypatch.setenv("DDTREE_TEST_ORACLE_DRAFTER", kind)
    prof = _import("drafter_profiles")
    rng = random.Random(SEED)
    keys = [",".join(str(rng.randrange(1000)) for _ in range(6)) for _ in range(200)]
    draws = [(k, pos) for k in keys for pos in range(30)]
    both0 = 0
    for d in (1, 2, 3, 4, 5, 9):
        ranks = [od.rank_of(k, pos, d) for k, pos in draws]
        freq = [ranks.count(r) / len(ranks) for r in range(5)]
        want = list(prof.depth_rank_p(kind, d)) + [1 - sum(prof.depth_rank_p(kind, d))]
        assert freq == pytest.approx(want, abs=0.02), (d, freq, want)
        if d == 1:
            first = ranks
        if d == 2:
            both0 = sum(a == 0 and b == 0 for a, b in zip(first, ranks)) / len(ranks)
    assert both0 == pytest.approx(0.82 * 0.76, abs=0.02)  # depths are independent draws


def test_the_iid_drafter_is_unchanged_by_the_profiles(od, monkeypatch):
    """Without DDTREE_TEST_ORACLE_DRAFTER the rank is the position's alone, whatever the depth, as before."""
    monkeypatch.delenv("DDTREE_TEST_ORACLE_DRAFTER", raising=False)
    assert [od.rank_of("1,2,3", p, d) for p in range(40) for d in (1, 7)] == [
        od.rank_of("1,2,3", p) for p in range(40) for _ in (1, 7)]
    assert od.top_values(1000, 3) == od.calibrated_values(od.RANK_P, 1000)


@pytest.mark.parametrize("kind", ["public", "public-flat"])
def test_the_public_drafter_states_each_depths_odds(od, monkeypatch, kind):
    monkeypatch.setenv("DDTREE_TEST_ORACLE_DRAFTER", kind)
    prof = _import("drafter_profiles")
    vocab = 248320
    for d in (1, 3, 6):
        full = torch.zeros(vocab, dtype=torch.float64)
        full[:4] = torch.tensor(od.top_values(vocab, d), dtype=torch.float64)
        stated = torch.softmax(full, 0)[:4].tolist()
        assert stated == pytest.approx(list(prof.depth_rank_p(kind, d)), rel=2e-3, abs=2e-6)


@pytest.mark.parametrize("kind", ["public", "public-flat"])
def test_dflash_and_ddtree_get_the_same_public_drafter_on_host_and_device(od, monkeypatch, kind):
    """The device tables (DDTREE_TEST_ORACLE_DEVICE=1) propose exactly what the host oracle does at every
    (request, depth), and DFLASH's greedy token (top4's first slot) is DDTREE's top-1 (seed printed)."""
    print(f"seed {SEED}")
    monkeypatch.setenv("DDTREE_TEST_ORACLE_DRAFTER", kind)
    rng = random.Random(SEED)
    vocab, depth, k = 500, 15, 8
    prompts = [[rng.randrange(vocab) for _ in range(rng.randrange(3, 9))] for _ in range(4)]
    seqs = {",".join(map(str, p)): p + [rng.randrange(vocab) for _ in range(rng.randrange(20, 60))] for p in prompts}
    reqs = [SimpleNamespace(origin_input_ids=p) for p in prompts]
    prefix = torch.tensor([len(p) - 1 + rng.randrange(0, 15) for p in prompts])
    g = torch.Generator().manual_seed(SEED)
    ids = torch.stack([torch.randperm(vocab, generator=g)[:k] for _ in range(4 * depth)]).view(4, depth, k)
    lp = torch.sort(torch.randn(4, depth, k, generator=g), dim=-1, descending=True).values
    od.use(seqs)
    host_lp, host_ids = od.override(reqs=reqs, prefix_lens=prefix, root_tokens=None, lp=lp, ids=ids, vocab=vocab)
    monkeypatch.setenv("DDTREE_TEST_ORACLE_DEVICE", "1")
    dev_lp, dev_ids = od.override(reqs=reqs, prefix_lens=prefix, root_tokens=None, lp=lp, ids=ids, vocab=vocab)
    assert torch.equal(host_ids, dev_ids)
    assert torch.allclose(host_lp, dev_lp, rtol=0, atol=1e-5)
    top, valid = od.device_oracle(vocab, torch.device("cpu"), depth).top4(reqs, prefix, depth)
    assert torch.equal(torch.where(valid, top[..., 0], ids[..., 0]), dev_ids[..., 0])  # DFLASH's token
    # the stated odds differ by depth (a depth-profile drafter), and the true token sits where rank_of says
    assert not torch.allclose(dev_lp[0, 0, :4], dev_lp[0, 2, :4])
    key, p0 = ",".join(map(str, prompts[0])), int(prefix[0])
    for d in range(1, depth + 1):
        if valid[0, d - 1]:
            rank = od.rank_of(key, p0 + d, d)
            truth = seqs[key][p0 + d]
            assert (rank < 4) == (truth in host_ids[0, d - 1, :4].tolist())
            if rank < 4:
                assert int(host_ids[0, d - 1, rank]) == truth


@pytest.fixture(scope="module")
def sim():
    pytest.importorskip("numpy")
    yield from load_bench("accept_sim")


def test_accept_sim_predicts_the_public_drafters_lengths(sim):
    """The CPU model under the public profile: DFLASH's simulated length matches its closed form and public
    serving's 3.4-4.4; the tree's gain grows with the budget; the flatter miss split gains less (seed printed)."""
    print(f"seed {SEED}")
    rows = {kind: sim.table(kind, [0.88, 0.08, 0.02], 15, [16, 64, 127], 4000, SEED)
            for kind in ("public", "public-flat")}
    prof = _import("drafter_profiles")
    for kind, table in rows.items():
        assert table[0][1] == pytest.approx(prof.chain_length(kind, 15), rel=0.04)
        gains = [ratio for _, _, ratio in table[1:]]
        assert gains == sorted(gains) and gains[-1] > 1.4
    assert rows["public-flat"][-1][2] < rows["public"][-1][2]


def test_spec_throughput_knows_the_public_drafters():
    mod = load_bench("spec_throughput_gpu")
    st = next(mod)
    try:
        args = SimpleNamespace(port_base=100, drafter="public,public-flat", budgets="64", servers="", sync_budgets="",
                               sglang_gdn_budgets="", compact_budgets="", extend_budgets="", anc_budgets="",
                               derive_budgets="", skip_plain=True)
        names = [b.name for b in st.plan(args)]
        assert names == ["plain", "dflash-public", "ddtree-b64-public", "dflash-public-flat",
                         "ddtree-b64-public-flat"]  # plain: the oracle's source, even with --skip-plain
        assert set(st.ORACLE_DRAFTERS) == {"calibrated", "public", "public-flat"}
    finally:
        next(mod, None)
