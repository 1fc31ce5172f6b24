"""bench/spec_throughput_gpu.py's own logic on the CPU: which servers a call plans, the ratios to DFLASH of the same
drafter and batch, the table, and the profiler-trace summary. The GPU run itself is issue #12's."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest
from bench_scripts import load_bench



@pytest.fixture(scope="module")
def st():
    yield from load_bench("spec_throughput_gpu")


def _args(**kw):
    base = dict(port_base=100, drafter="random,calibrated", budgets="16,64", servers="", sync_budgets="",
                sglang_gdn_budgets="", compact_budgets="", extend_budgets="", anc_budgets="",
                derive_budgets="")
    base.update(kw)
    return SimpleNamespace(**base)


def test_plan_has_plain_then_dflash_and_ddtree_per_drafter_on_distinct_ports(st):
    benches = st.plan(_args())
    assert [b.name for b in benches] == ["plain", "dflash-random", "ddtree-b16-random", "ddtree-b64-random",
                                         "dflash-calibrated", "ddtree-b16-calibrated", "ddtree-b64-calibrated"]
    assert len({b.port for b in benches}) == len(benches)
    only = st.plan(_args(servers="dflash-random,ddtree-b64-random"))
    assert [b.name for b in only] == ["plain", "dflash-random", "ddtree-b64-random"]  # plain: the oracle's source
    sync = st.plan(_args(drafter="random", budgets="16", sync_budgets="16"))
    assert [b.name for b in sync][-1] == "ddtree-b16-random-sync"
    assert sync[-1].extra_args == ["--disable-overlap-schedule"] and not sync[-2].extra_args
    argv = st.server_argv(sync[-1], st.Path("/t"), st.Path("/d"), False, 8, False)
    assert argv[-1] == "--disable-overlap-schedule" and "--disable-overlap-schedule" not in st.server_argv(
        sync[-2], st.Path("/t"), st.Path("/d"), False, 8, False)


def test_sglang_gdn_servers_run_ddtree_with_sglangs_kernel_and_project_from_their_own_step(st):
    """--sglang-gdn-budgets: the same DDTREE budget with DDTREE_GDN_TREE=sglang (the compact kernel is the
    default), its own variant (its calibrated projection uses its own random-drafter step, not the default's)."""
    benches = st.plan(_args(budgets="16", sglang_gdn_budgets="16"))
    by = {b.name: b for b in benches}
    compact = by["ddtree-b16-calibrated-sglanggdn"]
    assert compact.extra_env == {"DDTREE_GDN_TREE": "sglang"} and compact.variant == "sglanggdn"
    assert by["ddtree-b16-random-sglanggdn"].extra_env and not by["ddtree-b16-random"].extra_env
    r = lambda ms, acc: {1: {"tokens_per_s": 1.0, "ms_per_step": ms, "mean_accept_len": acc}}  # noqa: E731
    by["dflash-random"].results, by["dflash-calibrated"].results = r(10.0, 1.0), r(14.0, 7.0)
    by["ddtree-b16-random"].results, by["ddtree-b16-calibrated"].results = r(11.0, 1.0), r(15.0, 9.0)
    by["ddtree-b16-random-sglanggdn"].results, compact.results = r(20.0, 1.0), r(25.0, 9.0)
    rows = {x["server"]: x for x in st.ratios(benches)}
    assert rows["ddtree-b16-calibrated-sglanggdn"]["projected_vs_dflash"] == pytest.approx((9.0 / 20.0) / 0.7)
    assert rows["ddtree-b16-calibrated"]["projected_vs_dflash"] == pytest.approx((9.0 / 11.0) / 0.7)


def test_gdn_kernel_is_read_from_the_servers_log(st, tmp_path, monkeypatch):
    monkeypatch.setattr(st, "WORK", tmp_path)
    b = st.plan(_args(drafter="random", budgets="16"))[-1]
    b.log_path.parent.mkdir(parents=True, exist_ok=True)
    b.log_path.write_text("x\n[2026] DDTREE hybrid tree verify: compact GDN tree kernel\n")
    assert st.gdn_kernel_of(b) == "compact"
    b.log_path.write_text("no such line\n")
    assert st.gdn_kernel_of(b) is None


def test_projected_ratio_uses_calibrated_lengths_over_random_step_times(st):
    """tokens/s the calibrated drafter would give without the test hook's host work: its accepted length over the
    random drafter's step time of the same server kind, against DFLASH's."""
    benches = st.plan(_args(budgets="16", sync_budgets="16"))
    by = {b.name: b for b in benches}
    r = lambda tps, ms, acc: {1: {"tokens_per_s": tps, "ms_per_step": ms, "mean_accept_len": acc}}  # noqa: E731
    by["dflash-random"].results = r(100.0, 10.0, 1.0)
    by["ddtree-b16-random"].results = r(90.0, 11.0, 1.0)
    by["ddtree-b16-random-sync"].results = r(70.0, 14.0, 1.0)
    by["dflash-calibrated"].results = r(500.0, 14.0, 7.0)
    by["ddtree-b16-calibrated"].results = r(600.0, 15.0, 9.0)
    rows = {x["server"]: x for x in st.ratios(benches)}
    assert rows["ddtree-b16-calibrated"]["projected_vs_dflash"] == pytest.approx((9.0 / 11.0) / (7.0 / 10.0))
    assert rows["dflash-calibrated"]["projected_vs_dflash"] == pytest.approx(1.0)
    assert rows["ddtree-b16-random"]["projected_vs_dflash"] is None  # random rows: measured ratios only
    assert rows["ddtree-b16-random-sync"]["step_vs_dflash"] == pytest.approx(1.4)  # vs the overlapped DFLASH


def test_ratios_compare_with_dflash_of_the_same_drafter_and_batch(st):
    benches = st.plan(_args(drafter="random", budgets="16"))
    plain, dflash, ddtree = benches
    dflash.results = {1: {"tokens_per_s": 100.0, "ms_per_step": 10.0, "mean_accept_len": 1.0}}
    ddtree.results = {1: {"tokens_per_s": 80.0, "ms_per_step": 12.5, "mean_accept_len": 1.0}}
    plain.results = {1: {"tokens_per_s": 150.0, "ms_per_step": 6.6, "mean_accept_len": None}}
    rows = {r["server"]: r for r in st.ratios(benches)}
    assert rows["ddtree-b16-random"]["speed_vs_dflash"] == pytest.approx(0.8)
    assert rows["ddtree-b16-random"]["step_vs_dflash"] == pytest.approx(1.25)
    assert rows["plain"]["speed_vs_dflash"] is None  # plain has no drafter: no DFLASH of its kind
    text = st.table(st.ratios(benches), {"date": "d", "nvidia_smi": "H200", "target": "qwen3-8b"})
    assert "ddtree-b16-random" in text and "1.250" in text and "0.800" in text


def test_trace_summary_sums_durations_by_op(st, tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "gemm", "dur": 5.0}, {"ph": "X", "cat": "kernel", "name": "gemm",
              "dur": 7.0}, {"ph": "X", "cat": "cpu_op", "name": "aten::topk", "dur": 3.0}, {"ph": "i", "name": "x"}]
    (tmp_path / "a.trace.json").write_text(json.dumps({"traceEvents": events[:2]}))
    with gzip.open(tmp_path / "b.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events[2:]}, f)
    (tmp_path / "c.trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "python_function", "name": "module.py: _call_impl", "dur": 99.0}]}))
    rows = st.summarise_traces(tmp_path)
    assert rows[0] == {"cat": "kernel", "name": "gemm", "total_us": 12.0, "count": 2}
    assert rows[1]["name"] == "aten::topk" and len(rows) == 2  # Python frames nest everything: left out


def test_calibrated_drafter_expects_a_dflash_length_in_the_papers_range(st):
    p0 = float(st.CALIBRATED_RANK_P.split(",")[0])
    expected_len = 1 + sum(p0 ** k for k in range(1, 16))  # block 16: 15 draft positions, plus the bonus
    assert 6.0 <= expected_len <= 8.0


def test_compact_servers_run_both_compact_kernels(st):
    """--compact-budgets: the compact GDN tree verify and the compact tree conv named, their own variant (both
    are the payload's defaults: the variant shows the named switches give what the plain servers run)."""
    by = {b.name: b for b in st.plan(_args(budgets="16", drafter="random", compact_budgets="32"))}
    both = by["ddtree-b32-random-compact"]
    assert both.extra_env == {"DDTREE_GDN_TREE": "compact", "DDTREE_CONV_TREE": "compact"}
    assert both.variant == "compact" and both.budget == 32 and not by["ddtree-b16-random"].extra_env


@pytest.mark.parametrize("flag, variant, mode", [("anc_budgets", "anc", "shared"),
                                                  ("derive_budgets", "derive", "derive")])
def test_ancestor_variants_name_the_mode_beside_the_default(st, flag, variant, mode):
    """--anc-budgets names the shared ancestor matrix (the payload's default: one a verify forward),
    --derive-budgets the contrast (derived in every layer's kernel call); the plain DDTREE servers set neither."""
    by = {b.name: b for b in st.plan(_args(budgets="32", drafter="random,calibrated", **{flag: "32"}))}
    for name in (f"ddtree-b32-random-{variant}", f"ddtree-b32-calibrated-{variant}"):
        assert by[name].extra_env == {"DDTREE_GDN_ANCESTORS": mode} and by[name].variant == variant
        assert by[name].algo == "DDTREE" and by[name].budget == 32
    assert not by["ddtree-b32-random"].extra_env and by["ddtree-b32-random"].variant != variant
    assert len({b.port for b in by.values()}) == len(by)


def test_env_variants_run_the_switches_they_name_and_bad_specs_exit(st):
    spec = "sglangconv-anc:64:DDTREE_CONV_TREE=sglang;DDTREE_GDN_ANCESTORS=shared"
    by = {b.name: b for b in st.plan(_args(budgets="64", drafter="random", env_variant=[spec]))}
    both = by["ddtree-b64-random-sglangconv-anc"]
    assert both.extra_env == {"DDTREE_CONV_TREE": "sglang", "DDTREE_GDN_ANCESTORS": "shared"}
    assert both.variant == "sglangconv-anc" and both.budget == 64 and not by["ddtree-b64-random"].extra_env
    for bad in ("sglangconv-anc:64", "x:64:PATH=/tmp", ":64:DDTREE_CONV_TREE=sglang"):
        with pytest.raises(SystemExit, match="--env-variant"):
            st.parse_env_variant(bad)


def test_every_ddtree_variant_of_the_first_budget_is_profiled_beside_dflash(st):
    args = _args(budgets="64,16", drafter="random", compact_budgets="64,16")
    chosen = {b.name for b in st.plan(args) if st.profiled(b, args)}
    assert chosen == {"dflash-random", "ddtree-b64-random", "ddtree-b64-random-compact"}


def test_extend_servers_run_sglangs_prefill_kernel_as_verify_attention(st):
    """The tree split-KV attention is the payload's default: --extend-budgets is the contrast."""
    by = {b.name: b for b in st.plan(_args(budgets="64", drafter="random,calibrated", extend_budgets="64,128"))}
    for name in ("ddtree-b64-random-extend", "ddtree-b128-calibrated-extend"):
        assert by[name].extra_env == {"DDTREE_VERIFY_ATTN": "extend"} and by[name].variant == "extend"
    assert not by["ddtree-b64-random"].extra_env
    assert len({b.port for b in by.values()}) == len(by)


def test_only_this_runs_server_logs_come_back(st, tmp_path, monkeypatch):
    """A machine kept warm holds the logs of an earlier call's servers; $OUT must carry this run's only."""
    monkeypatch.setattr(st, "WORK", tmp_path / "work")
    logs = tmp_path / "work" / "logs"
    logs.mkdir(parents=True)
    (logs / "ddtree-b128-random.log").write_text("an earlier call\n")
    (logs / "dflash-calibrated.log").write_text("\n".join(f"line {i}" for i in range(100)) + "\n")
    (logs / "dflash-calibrated.first.log").write_text("the first attempt\n")
    benches = [b for b in st.plan(_args(drafter="calibrated", budgets="64")) if b.name != "ddtree-b64-calibrated"]
    written = st.copy_server_logs(benches, tmp_path / "out", lines=80)
    assert sorted(p.name for p in written) == ["dflash-calibrated.first.log", "dflash-calibrated.log"]
    kept = (tmp_path / "out" / "dflash-calibrated.log").read_text().splitlines()
    assert kept[0] == "line 20" and kept[-1] == "line 99"


def test_kernel_kinds_name_the_step_costs_of_both_algorithms(st):
    names = {"nvjet_sm90_tst_384x72_64x3_4x1_v_bz_coopA_TNT": "gemm", "cublasLt::splitKreduce_kernel<32>": "gemm",
             "_tree_gdn_verify_two_block_kernel": "gdn", "fused_sigmoid_gating_delta_rule_update_kernel": "gdn",
             "_tree_gdn_commit_kernel": "gdn", "_tree_conv_verify_kernel": "conv", "_tree_conv_commit_kernel": "conv",
             "_causal_conv1d_update_kernel": "conv", "_fwd_kernel": "attention", "_prefix_partials_kernel": "attention",
             "_tree_combine_kernel": "attention", "_layer_norm_fwd_1pass_kernel": "norm",
             "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<flo": "norm",
             "_topk_pass1": "sample/topk", "_build_kernel": "ddtree prep", "_follow_kernel": "ddtree prep",
             "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda": "copy/elementwise",
             "something_new": "other"}
    assert {n: st.kernel_kind(n) for n in names} == names


def test_kernel_kinds_count_overlapping_streams_once_per_step(st, tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "nvjet_a", "ts": 0.0, "dur": 10.0},
              {"ph": "X", "cat": "kernel", "name": "_fwd_kernel", "ts": 5.0, "dur": 10.0},  # overlaps: busy 0..15
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 30.0, "dur": 2.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 100.0}]  # host side: not GPU time
    (tmp_path / "TP-0.trace.json").write_text(json.dumps({"traceEvents": events}))
    got = st.kernel_kinds(tmp_path, steps=2)
    assert got["kinds"] == {"gemm": 5.0, "attention": 5.0, "copy/elementwise": 1.0}
    assert (got["busy_us"], got["window_us"], got["ranks"]) == (8.5, 16.0, 1)
    a, b = st.Bench("dflash-x", "DFLASH", None, "random", 1), st.Bench("ddtree-b64-x", "DDTREE", 64, "random", 2)
    a.profile_kinds, b.profile_kinds = got, dict(got, kinds={"gemm": 5000.0, "gdn": 3230.0})
    text = st.kinds_table([a, b])
    gdn = next(line for line in text.splitlines() if line.startswith("gdn"))
    assert gdn.split() == ["gdn", "0.00", "3.23"] and "GPU busy" in text and "trace window" in text


def test_a_budget_schedule_adds_one_scheduled_ddtree_server_per_drafter(st):
    """--budget-schedule: ddtree-sched-<drafter>, launched with the schedule and its widest budget (none for a
    chain-only schedule: the server resolves it), its own variant; a malformed schedule stops the plan."""
    by = {b.name: b for b in st.plan(_args(drafter="random,public", budgets="127",
                                           budget_schedule="2:127,4:64,8:16,0"))}
    sched = by["ddtree-sched-public"]
    assert "ddtree-sched-random" in by and sched.variant == "sched" and sched.budget == 127
    argv = st.server_argv(sched, st.Path("/t"), st.Path("/d"), True, 32, False)
    assert argv[argv.index("--speculative-ddtree-budget") + 1] == "127"
    assert argv[argv.index("--speculative-ddtree-budget-schedule") + 1] == "2:127,4:64,8:16,0"
    chain = st.plan(_args(drafter="random", budgets="", budget_schedule="chain"))[-1]
    assert chain.budget is None and "--speculative-ddtree-budget" not in st.server_argv(
        chain, st.Path("/t"), st.Path("/d"), False, 8, False)
    with pytest.raises(SystemExit, match="batch sizes must increase"):
        st.plan(_args(budget_schedule="4:64,2:127,0"))
    assert not st.profiled(sched, SimpleNamespace(drafter="public", budgets="127"))


def test_agreement_counts_requests_equal_to_dflash(st):
    by = {b.name: b for b in st.plan(_args(drafter="random", budgets="16"))}
    by["dflash-random"].results = {1: {"outputs": [[1, 2], [3]]}}
    by["ddtree-b16-random"].results = {1: {"outputs": [[1, 2], [4]]}}
    assert st.agreement(list(by.values())) == "ddtree-b16-random@1 1/2"


def test_caps_limit_one_algorithms_running_requests_and_bad_caps_exit(st):
    assert st.parse_caps("DFLASH:16,DDTREE:32") == [("DFLASH", 16), ("DDTREE", 32)]
    assert st.parse_caps("") == []
    for bad in ("DFLASH", "EAGLE:4", "DFLASH:0", "DFLASH:x"):
        with pytest.raises(SystemExit, match="--max-running"):
            st.parse_caps(bad)
    dflash, ddtree = (b for b in st.plan(_args(drafter="random", budgets="64")) if b.algo != "plain")
    args = SimpleNamespace(batches=[1, 8, 32], max_running="DFLASH:16")
    caps = {b.name: min([max(args.batches)] + [n for a, n in st.parse_caps(args.max_running) if a == b.algo])
            for b in (dflash, ddtree)}
    assert caps == {"dflash-random": 16, "ddtree-b64-random": 32}
    argv = st.server_argv(dflash, st.Path("/t"), st.Path("/d"), True, caps["dflash-random"], False)
    assert argv[argv.index("--max-running-requests") + 1] == "16"
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "16"


def test_named_servers_start_in_the_order_named_after_plain(st):
    """--servers is also the start order (a call that runs out of time loses the last named); without it plain
    starts first, then the random drafter's servers, the oracle drafters' last."""
    named = "dflash-public,ddtree-b127-public,dflash-random,ddtree-b64-random"
    args = _args(drafter="public,random", budgets="127,64", servers=named)
    order = [b.name for b in st.run_order(st.plan(args), args)]
    assert order == ["plain", *named.split(",")]
    every = _args(drafter="public,random", budgets="64")
    assert [b.name for b in st.run_order(st.plan(every), every)] == [
        "plain", "dflash-random", "ddtree-b64-random", "dflash-public", "ddtree-b64-public"]


def test_a_server_name_the_plan_does_not_hold_stops_the_call(st):
    with pytest.raises(SystemExit, match="--servers ddtree-b127-random: not planned"):
        st.plan(_args(drafter="random", budgets="64", servers="dflash-random,ddtree-b127-random"))


def test_a_start_up_out_of_gpu_memory_is_not_tried_again(st):
    """A server that died for memory on a GPU found idle dies the same way again: no second start (a 27B start
    costs 75-125 s of a scarce call); other deaths are tried once more."""
    assert st.failed_for_memory("RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache.")
    assert st.failed_for_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.40 GiB")
    assert st.failed_for_memory("Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static")
    assert not st.failed_for_memory("RuntimeError: NCCL error: unhandled system error")


def test_stop_on_memory_skips_every_server_not_yet_started(st):
    benches = st.plan(_args(drafter="public", budgets="127"))
    queue = benches[2:]
    st.skip_rest(queue, "dflash-public ran out of GPU memory at start-up (--stop-on-memory)")
    assert queue == [] and benches[2].status == "skipped" and "out of GPU memory" in benches[2].error
    assert benches[1].status == "not run"


def test_the_kinds_table_states_each_trees_gdn_time_against_dflashs(st):
    """#30's GDN goal (<= 1.2 x DFLASH's GDN time a step) read off the profiled servers of one drafter; a dense
    target (DFLASH ran no GDN kernel) has no such line."""
    kinds = lambda gdn: {"kinds": {"gemm": 17000.0, "gdn": gdn}, "busy_us": 1.0, "window_us": 2.0}  # noqa: E731
    dflash = st.Bench("dflash-public", "DFLASH", None, "public", 1)
    tree = st.Bench("ddtree-b127-public", "DDTREE", 127, "public", 2)
    lv16 = st.Bench("ddtree-b127-public-lv16", "DDTREE", 127, "public", 3)
    other = st.Bench("ddtree-b127-random", "DDTREE", 127, "random", 4)  # no DFLASH of its drafter profiled
    dflash.profile_kinds, tree.profile_kinds, lv16.profile_kinds = kinds(1580.0), kinds(2370.0), kinds(1738.0)
    other.profile_kinds = kinds(2000.0)
    assert st.gdn_vs_dflash([dflash, tree, lv16, other]) == pytest.approx(
        {"ddtree-b127-public": 1.5, "ddtree-b127-public-lv16": 1.1})
    line = st.kinds_table([dflash, tree, lv16]).splitlines()[-1]
    assert line == ("GDN time a step vs DFLASH's (#30: <= 1.2 x): ddtree-b127-public 1.500, "
                    "ddtree-b127-public-lv16 1.100")
    dflash.profile_kinds = kinds(0.0)  # a dense target
    assert st.gdn_vs_dflash([dflash, tree]) == {} and "GDN time" not in st.kinds_table([dflash, tree])
