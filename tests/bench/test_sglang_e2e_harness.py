"""The GPU e2e harness's own logic, on the CPU: its verdict (what "== plain greedy" means) and the test-only weights
that make that comparison meaningful. The GPU run itself is bench/sglang_e2e_gpu.py (notes/sglang-e2e-h200.md)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    for mod in load_bench("sglang_e2e_gpu"):
        mod.OUT = tmp_path_factory.mktemp("out")
        yield mod


def _server(mod, name, algo, outputs, graphs=False, budget=None):
    s = mod.Server(name, algo, graphs, budget, oracle=True, port=1)
    s.status, s.outputs = "done", [list(o) for o in outputs]
    return s


def test_exact_equality_passes(e2e):
    ref = [[1, 2, 3], [4, 5, 6]]
    assert e2e.verdict([r[:] for r in ref], ref, None) == (True, "exact")


def test_divergence_at_a_clear_margin_fails(e2e):
    ref = [[1, 2, 3], [4, 5, 6]]
    gaps = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    ok, label = e2e.verdict([[1, 2, 3], [4, 9, 6]], ref, gaps)
    assert ok is False and label.startswith("DIFF@r1:1")


def test_divergence_at_a_near_tie_is_reported_as_a_tie(e2e):
    ref = [[1, 2, 3]]
    ok, label = e2e.verdict([[1, 7, 8]], ref, [[1.0, 0.01, 1.0]], tie_nats=0.02)
    assert ok is True and label.startswith("tie@1")


def test_divergence_without_margin_evidence_fails(e2e):
    assert e2e.verdict([[1, 7]], [[1, 2]], None)[0] is False


def test_tie_threshold_comes_from_dflash_noise(e2e):
    ref = [[1, 2, 3, 4]]
    plain = _server(e2e, "plain-g0", "plain", ref)
    plain.logprobs = [[-1.0, -1.0, -1.0, -1.0]]
    dflash = _server(e2e, "dflash-g1", "DFLASH", ref, graphs=True)
    dflash.logprob_outputs = ref
    dflash.logprobs = [[-1.0, -1.01, -1.0, -9.0]]
    dflash.logprob_outputs = [[1, 2, 3, 5]]  # parts at position 3: its logprob there is not noise
    threshold, basis = e2e.tie_threshold([plain, dflash], ref)
    assert threshold == pytest.approx(0.02) and "DFLASH" in basis


def test_report_fails_when_nothing_ran(e2e):
    assert e2e.report([], None, {"error": "setup failed"}, []) == 1


def _servers(e2e, ref, ddtree_out, *, ddtree_acc=3.0, dflash_acc=2.0, branch=4, unsafe_out=None, sync=False):
    plain = _server(e2e, "plain-g0", "plain", ref)
    plain.top2_gaps = [[1.0] * 3, [1.0] * 3]
    plain.extras, plain.logprob_outputs, plain.logprobs = True, ref, [[-1.0] * 3, [-1.0] * 3]
    plain.sampled_outputs = [[7, 8, 9], [7, 8, 9]]
    dflash = _server(e2e, "dflash-g0", "DFLASH", ref)
    dflash.accept_lengths = [dflash_acc, dflash_acc]
    ddtree = _server(e2e, "ddtree-b7-g0", "DDTREE", ddtree_out, budget=7)
    ddtree.accept_lengths = [ddtree_acc, ddtree_acc]
    ddtree.server_info = {"internal_states": [{"ddtree": {"accepted_branch_nodes": branch,
                                                            "verify_attention": "splitkv"}}],
                          "disable_overlap_schedule": sync}
    out = [plain, dflash, ddtree]
    if unsafe_out is not None:
        control = _server(e2e, "ddtree-b15-g0-unsafe", "DDTREE", unsafe_out, budget=15)
        control.unsafe = True
        out.append(control)
    return out


REQS = [([10, 11], 3), ([12], 3)]
REF = [[1, 2, 3], [4, 5, 6]]


def test_report_fails_on_a_real_mismatch_and_passes_when_all_match(e2e):
    assert e2e.report(_servers(e2e, REF, REF), REF, {}, REQS) == 0
    assert e2e.report(_servers(e2e, REF, [[1, 2, 3], [4, 0, 6]]), REF, {}, REQS) == 1


@pytest.mark.parametrize("kw", [{"ddtree_acc": 2.0}, {"ddtree_acc": 1.5}, {"branch": 0}])
def test_a_tree_that_never_branches_or_accepts_no_more_than_dflash_fails_the_claims(e2e, kw):
    assert e2e.report(_servers(e2e, REF, REF, **kw), REF, {}, REQS) == 1
    claims = e2e.tree_claims([{"algo": "DFLASH", "graphs": False, "mean_accept_len": 2.0},
                              {"algo": "DDTREE", "graphs": False, "mean_accept_len": kw.get("ddtree_acc", 3.0),
                               "oracle": True, "unsafe": False, "budget": 7, "ok": True, "server": "t",
                               "ddtree_metrics": {"accepted_branch_nodes": kw.get("branch", 4),
                                                  "verify_attention": "splitkv"}}])
    assert [c["ok"] for c in claims] == [False]


def test_a_tree_served_by_another_scheduler_than_launched_fails_the_claims(e2e):
    """Launched without --disable-overlap-schedule, DDTREE must serve under the overlap scheduler (and vice versa)."""
    assert e2e.report(_servers(e2e, REF, REF, sync=True), REF, {}, REQS) == 1
    row = {"algo": "DDTREE", "graphs": False, "mean_accept_len": 3.0, "oracle": True, "unsafe": False, "budget": 7,
           "ok": True, "server": "t",
           "ddtree_metrics": {"accepted_branch_nodes": 4, "verify_attention": "splitkv"}}
    dflash = {"algo": "DFLASH", "graphs": False, "mean_accept_len": 2.0}
    assert [c["ok"] for c in e2e.tree_claims([dflash, {**row, "served": {"disable_overlap_schedule": False}}])] == [True]
    sync_row = {**row, "argv": ["--disable-overlap-schedule"], "served": {"disable_overlap_schedule": True}}
    assert [c["ok"] for c in e2e.tree_claims([dflash, sync_row])] == [True]
    assert [c["ok"] for c in e2e.tree_claims([dflash, {**row, "served": {}}])] == [False]


def test_the_unsafe_control_must_diverge(e2e):
    assert e2e.report(_servers(e2e, REF, REF, unsafe_out=[[1, 9, 9], [4, 5, 6]]), REF, {}, REQS) == 0
    assert e2e.report(_servers(e2e, REF, REF, unsafe_out=REF), REF, {}, REQS) == 1


@pytest.mark.sglang
def test_informative_weights_make_greedy_output_depend_on_context(managed_python):
    """SGLang's dummy init makes the e2e target decode a 2-cycle whatever the prompt; the test-only init must not."""
    code = textwrap.dedent(
        """
        import sys, torch
        sys.path.insert(0, sys.argv[1])
        from informative_weights import initialize_informative_weights
        torch.manual_seed(0)
        V, H = 512, 64
        model = torch.nn.ModuleDict({
            "embed_tokens": torch.nn.Embedding(V, H), "mix": torch.nn.Linear(H, H),
            "final_norm": torch.nn.LayerNorm(H), "lm_head": torch.nn.Linear(H, V, bias=False)})
        with torch.no_grad():
            initialize_informative_weights(model)
            assert float(model["final_norm"].weight.min()) == 1.0 and float(model["final_norm"].bias.abs().max()) == 0
            assert float(model["mix"].bias.abs().max()) == 0.0
            again = torch.nn.Linear(H, H)
            initialize_informative_weights(torch.nn.ModuleDict({"mix": again}))
            assert torch.equal(again.weight, model["mix"].weight)  # name-seeded: every server gets the same model
            assert not torch.equal(model["mix"].weight[:, :V], model["lm_head"].weight[:H, :H])

            def greedy(prompt, n=12):
                seq = list(prompt)
                for _ in range(n):
                    h = model["embed_tokens"](torch.tensor(seq)).mean(0)  # a crude context mix
                    h = model["final_norm"](torch.tanh(model["mix"](h)))
                    seq.append(int(model["lm_head"](h).argmax()))
                return seq[len(prompt):]

            outs = {tuple(greedy([p, p + 1, p + 2])) for p in range(0, 200, 20)}
            assert len(outs) == 10, outs  # different prompts, different continuations
            assert all(len(set(o)) > 2 for o in outs), outs  # not a 2-cycle
        print("ok")
        """
    )
    p = subprocess.run([managed_python, "-c", code, str(REPO / "tests" / "gpu_standins")], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-2000:]


def test_logprob_bound_is_the_floor_or_twice_dflashs_own_distance(e2e):
    ref = [[1, 2, 3]]
    plain = _server(e2e, "plain-g0", "plain", ref)
    plain.logprobs = [[-1.0, -1.0, -1.0]]
    dflash = _server(e2e, "dflash-g0", "DFLASH", ref)
    dflash.logprob_outputs, dflash.logprobs = ref, [[-1.01, -1.0, -1.0]]
    assert e2e.logprob_bound([plain, dflash], ref) == pytest.approx(0.1)  # float32-like noise: the floor
    dflash.logprobs = [[-1.3, -1.0, -1.0]]  # bf16-like noise: 2 x 0.3
    assert e2e.logprob_bound([plain, dflash], ref) == pytest.approx(0.6)
    ddtree = _server(e2e, "ddtree-b15-g0", "DDTREE", ref, budget=15)
    ddtree.extras, ddtree.logprob_outputs, ddtree.sampled_outputs = True, ref, [[7, 8, 9]]
    ddtree.logprobs = [[-1.5, -1.0, -1.0]]
    assert e2e.extras_verdict(ddtree, ref, plain, [([5], 3)], lp_bound=0.6)[0] is True
    ddtree.logprobs = [[-1.7, -1.0, -1.0]]
    assert e2e.extras_verdict(ddtree, ref, plain, [([5], 3)], lp_bound=0.6)[0] is False


def test_bf16_tie_threshold_learns_from_where_dflash_parted_from_plain(e2e, monkeypatch):
    monkeypatch.setattr(e2e, "DTYPE", ["bfloat16"])
    ref = [[1, 2, 3, 4]]
    plain = _server(e2e, "plain-g0", "plain", ref)
    plain.top2_gaps = [[1.0, 0.3, 1.0, 1.0]]
    dflash = _server(e2e, "dflash-g0", "DFLASH", [[1, 9, 9, 9]])  # parts from plain where plain's margin was 0.3
    threshold, basis = e2e.tie_threshold([plain, dflash], ref)
    assert threshold == pytest.approx(0.375) and "parted" in basis
    monkeypatch.setattr(e2e, "DTYPE", ["float32"])  # float32: DFLASH parting is never taken as rounding
    assert e2e.tie_threshold([plain, dflash], ref)[0] == e2e.TIE_FLOOR_NATS


def test_a_port_something_listens_on_is_skipped(e2e):
    """Call 2 of 2026-12-01 lost a server (and 120 s) to a planned port another process held."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        assert e2e.free_port(taken) > taken
    with socket.socket() as probe:  # released: the planned port is used as planned
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert e2e.free_port(port) == port


def test_a_server_that_could_not_bind_fails_at_once(e2e, tmp_path, monkeypatch):
    """uvicorn gives up on a taken port but the engine lives on until its warm-up times out: the health wait
    reads the log instead of waiting that out."""
    import time

    monkeypatch.setattr(e2e, "LOGS", tmp_path)
    s = e2e.Server("ddtree-x", "DDTREE", False, 16, port=1)
    s.log_path.write_text("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 1): "
                          "address already in use\n")
    s.proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    s._t_start = time.monotonic()
    assert e2e.wait_healthy(s, time.monotonic() + 60) is False
    assert s.status == "died" and "port 1 taken" in s.error  # a wait run out would say "timeout"
    assert s.proc.poll() is not None


def _claim_rows(ddtree_outputs, ddtree_accs, ddtree_cts, *, branch=4):
    dflash = {"algo": "DFLASH", "graphs": True, "server": "dflash", "mean_accept_len": 2.0,
              "outputs": [[1, 2], [3, 4], [5, 6]], "accept_lengths": [1.2, 1.2, 4.0], "verify_cts": [40, 40, 2]}
    ddtree = {"algo": "DDTREE", "graphs": True, "server": "ddtree", "oracle": True, "unsafe": False, "budget": 15,
              "ok": True, "outputs": ddtree_outputs, "accept_lengths": ddtree_accs, "verify_cts": ddtree_cts,
              "mean_accept_len": sum(ddtree_accs) / len(ddtree_accs), "served": {"disable_overlap_schedule": False},
              "ddtree_metrics": {"accepted_branch_nodes": branch, "verify_attention": "splitkv"}}
    return [dflash, ddtree]


def test_acceptance_is_tokens_per_step_so_a_two_step_request_does_not_outweigh_long_ones(e2e):
    """Per-request means would give DFLASH (1.2 + 1.2 + 4.0) / 3 = 2.13 against DDTREE's 1.7; per step DDTREE's
    1.5 beats DFLASH's 1.3."""
    same = [[1, 2], [3, 4], [5, 6]]
    [claim] = e2e.tree_claims(_claim_rows(same, [1.5, 1.5, 2.1], [40, 40, 3]))
    assert claim["ok"] and claim["mean_accept_len"] > claim["dflash_mean_accept_len"]
    assert claim["acceptance_basis"].startswith("tokens/step on the 3/3 requests")
    [claim] = e2e.tree_claims(_claim_rows(same, [1.1, 1.1, 9.0], [44, 44, 1]))
    assert not claim["ok"]


def test_acceptance_is_compared_only_where_the_outputs_agree_with_dflash(e2e):
    """Request 3 parted from DFLASH at a tie: its low acceptance is left out; on the other two DDTREE must still
    accept more."""
    parted = [[1, 2], [3, 4], [5, 9]]
    [claim] = e2e.tree_claims(_claim_rows(parted, [1.5, 1.5, 1.0], [40, 40, 6]))
    assert claim["ok"] and claim["acceptance_basis"].startswith("tokens/step on the 2/3 requests")
    [claim] = e2e.tree_claims(_claim_rows(parted, [1.1, 1.1, 9.0], [44, 44, 1]))
    assert not claim["ok"]


def test_no_common_request_leaves_the_claim_to_the_branch_nodes(e2e):
    apart = [[9, 2], [9, 4], [9, 6]]
    [claim] = e2e.tree_claims(_claim_rows(apart, [1.0, 1.0, 1.0], [48, 48, 6]))
    assert claim["ok"] and claim["acceptance_basis"] == e2e.NOT_COMPARABLE
    [claim] = e2e.tree_claims(_claim_rows(apart, [1.0, 1.0, 1.0], [48, 48, 6], branch=0))
    assert not claim["ok"]


def test_a_basis_of_a_few_steps_leaves_the_claim_to_the_branch_nodes(e2e):
    """Only DFLASH's 2-step request has DDTREE's output (the hybrid suite of 2026-12-01: 3.5 = 3.5 there): too few
    steps to compare acceptance; eight steps are a basis again."""
    short = [[9, 2], [9, 4], [5, 6]]
    [claim] = e2e.tree_claims(_claim_rows(short, [1.0, 1.0, 4.0], [48, 48, 2]))
    assert claim["ok"] and claim["acceptance_basis"].startswith(e2e.TOO_FEW_STEPS)
    assert claim["mean_accept_len"] is None and "2 DFLASH steps on the 1 requests" in claim["acceptance_basis"]
    [claim] = e2e.tree_claims(_claim_rows(short, [1.0, 1.0, 4.0], [48, 48, 2], branch=0))
    assert not claim["ok"]
    rows = _claim_rows(short, [1.0, 1.0, 4.0], [48, 48, 8])
    rows[0]["verify_cts"] = [40, 40, e2e.MIN_COMPARABLE_STEPS]
    [claim] = e2e.tree_claims(rows)  # a basis again: 4.0 tokens/step against DFLASH's 4.0 is not more
    assert not claim["ok"] and claim["acceptance_basis"].startswith("tokens/step on the 1/3 requests")


@pytest.mark.parametrize("env, budget, want", [
    ({}, 15, ("compact", "compact")),  # the payload's defaults
    ({}, 64, ("compact", "compact")),  # 65 nodes (the flagship's budget): the compact two-block kernel
    ({}, 127, ("compact", "compact")),  # 128 nodes: the widest the compact verify takes
    ({}, 128, ("sglang", "compact")),  # 129 nodes: SGLang's GDN kernel stays, the conv takes any width
    ({"DDTREE_GDN_TREE": "sglang"}, 15, ("sglang", "compact")),
    ({"DDTREE_GDN_TREE": "Compact"}, 15, ("sglang", "compact")),  # the payload compares with "compact" only
    ({"DDTREE_CONV_TREE": "sglang"}, 32, ("compact", "sglang")),
    ({"DDTREE_CONV_TREE": "Compact"}, 32, ("compact", "sglang")),
])
def test_the_kernels_a_hybrid_server_must_report(e2e, env, budget, want):
    assert e2e.wanted_kernels(env, budget) == want


def test_the_hybrid_suite_contrasts_sglangs_gdn_kernel_with_the_compact_default(e2e):
    def mk(name, algo, g, budget=None, oracle=False):
        return e2e.Server(name, algo, g, budget, oracle, 0)

    servers = {s.name: s for s in e2e.suite_servers("hybrid", [False, True], [15, 32], mk)}
    assert servers["ddtree-b15-g1"].extra_env == {}
    assert servers["ddtree-b15-g1-sglanggdn"].extra_env == {"DDTREE_GDN_TREE": "sglang"}
    assert servers["ddtree-b32-g1-sglangconv"].extra_env == {"DDTREE_CONV_TREE": "sglang"}
    assert servers["ddtree-b32-g1-derive"].extra_env == {"DDTREE_GDN_ANCESTORS": "derive"}
    assert servers["ddtree-b64-g1-rows"].extra_env == {"DDTREE_GDN_BLOCK2": "rows"}
    assert servers["ddtree-b64-g1-rows"].budget == 64  # 65 nodes: the two-block kernel
    lv16 = servers["ddtree-b127-g1-lv16"]  # 128 nodes in log2 stages, held to plain greedy as every server
    assert lv16.extra_env == {"DDTREE_GDN_SOLVE": "levels16"} and lv16.budget == 127 and lv16.oracle
    assert e2e.wanted_kernels(lv16.extra_env, 127) == ("compact", "compact")


def test_a_tree_must_report_the_verify_attention_it_was_asked_for(e2e):
    """The tree split-KV kernel is the default: a DDTREE server must have run it unless asked for SGLang's extend
    kernel (DDTREE_VERIFY_ATTN=extend), and then must have run that one."""
    rows = _claim_rows([[1, 2], [3, 4], [5, 6]], [1.5, 1.5, 2.1], [40, 40, 3])
    rows[1]["ddtree_metrics"]["verify_attention"] = "extend"
    [claim] = e2e.tree_claims(rows)
    assert not claim["ok"] and "verify attention extend (want splitkv)" in claim["what"]
    rows[1]["ddtree_metrics"]["verify_attention"] = "splitkv"
    assert [c["ok"] for c in e2e.tree_claims(rows)] == [True]
    rows[1]["extra_env"] = {"DDTREE_VERIFY_ATTN": "extend"}
    assert [c["ok"] for c in e2e.tree_claims(rows)] == [False]
    rows[1]["ddtree_metrics"] = {"accepted_branch_nodes": 4, "verify_attn": "extend"}  # from the log line
    assert [c["ok"] for c in e2e.tree_claims(rows)] == [True]


@pytest.mark.parametrize("graphs", [[True], [False], [False, True]])
def test_the_hybrid_suite_measures_dflashs_logprob_noise_whatever_the_graphs(e2e, graphs):
    """logprob_bound takes SGLang's own DFLASH noise from the DFLASH servers that ran the extras: one must, with any
    --graphs setting, or a bf16 run is judged by the float32 floor."""
    def mk(name, algo, g, budget=None, oracle=False):
        return e2e.Server(name, algo, g, budget, oracle, 0)

    servers = e2e.suite_servers("hybrid", graphs, [15, 32], mk)
    assert any(s.algo == "DFLASH" and s.extras for s in servers)
    assert any(s.algo == "DDTREE" and s.extras for s in servers)


def test_servers_start_after_the_plain_reference_and_a_few_at_a_time(e2e, monkeypatch, tmp_path):
    """run_all's start order with stand-in servers (no SGLang here): a server "starts" when start() is called and
    is healthy a moment later. Nothing starts beside plain before plain is up, and no more than max_starting
    servers are starting at once (on 2026-12-07, 12 servers importing SGLang together on 16 cores left plain
    unhealthy past the suite's deadline)."""
    import threading
    import time

    lock = threading.Lock()
    events: list[tuple[str, str]] = []
    starting: set[str] = set()
    peak = [0]

    class Proc:
        returncode = None

        def poll(self):
            return None

    def start(s, *_):
        with lock:
            events.append(("start", s.name))
            starting.add(s.name)
            peak[0] = max(peak[0], len(starting) - ("plain-g0" in starting))
        s.proc, s.status = Proc(), "starting"

    def wait_healthy(s, deadline):
        time.sleep(0.2 if s.algo == "plain" else 0.05)
        with lock:
            starting.discard(s.name)
            events.append(("healthy", s.name))
        s.status, s.startup_s = "healthy", 0.1
        return True

    def generate_all(s, reqs):
        s.outputs = [[1, 2, 3] for _ in reqs]

    monkeypatch.setattr(e2e, "start", start)
    monkeypatch.setattr(e2e, "wait_healthy", wait_healthy)
    monkeypatch.setattr(e2e, "generate_all", generate_all)
    monkeypatch.setattr(e2e, "stop", lambda s: None)
    servers = [e2e.Server("plain-g0", "plain", False, port=1)]
    servers += [e2e.Server(f"ddtree-b{i}-g1", "DDTREE", True, i, oracle=True, port=2 + i) for i in range(9)]
    ref = e2e.run_all(servers, tmp_path, tmp_path, {}, tmp_path / "oracle.json", [([1], 3), ([2], 3)], 120.0,
                      max_starting=3)

    assert ref == [[1, 2, 3], [1, 2, 3]]
    assert all(s.status == "done" for s in servers), [(s.name, s.status, s.error) for s in servers]
    assert events.index(("healthy", "plain-g0")) < min(i for i, (what, name) in enumerate(events)
                                                       if what == "start" and name != "plain-g0")
    assert peak[0] == 3  # bounded, and the bound was reached (9 servers, 3 at a time)
