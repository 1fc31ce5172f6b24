"""`ddtctl tune` end to end against the real loopback sshd: the stand-in server (tests/remote/standins/
standin_sglang_server.py) deploys per point, and a stand-in for `python -m sglang.benchmark.serving`
(standin_bench_serving.py) runs on the "host" against it, with figures that depend on the served DDTREE budget:
at concurrency 1 budget 32 is fastest (239.60 tokens/s; 16: 231.71, 64: 197.25, DFLASH baseline 222.22), at
concurrency 8 budget 16 is."""

from __future__ import annotations

import json
import sys

import json_envelope
import pytest

from ddtctl.deploy import DeployOptions, deploy, host_status, spec_from_profile
from ddtctl.errors import ExitCode
from ddtctl.tune import TuneOptions, read_results, tune
from labkit import STANDINS, ddtctl_main

pytestmark = pytest.mark.ssh

STANDIN_BENCH = STANDINS / "standin_bench_serving.py"
BUDGET = "speculative-ddtree-budget"


def _deploy(lab, profile):
    spec = spec_from_profile(str(profile), payload_dir=str(lab.payload))
    r = deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5))
    assert r.status == "deployed", r.error
    return r.release["lo"]


def _opts(lab, budgets, **kw):
    kw.setdefault("results_path", str(lab.root / "tune.jsonl"))
    kw.setdefault("bench_cmd", [sys.executable, str(STANDIN_BENCH)])
    return TuneOptions(space={BUDGET: budgets, "speculative-ddtree-topk-cap": [None]}, concurrencies=[1, 8],
                       num_prompts=8, seed=1,
                       payload_dir=str(lab.payload), remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5,
                       health_timeout_s=10, **kw)


def _by_budget(result):
    return {p.flags[BUDGET]: p for p in result.points}


def _release(lab, rid):
    return json.loads((lab.work() / "releases" / rid / "release.json").read_text())


def test_sweep_finds_the_fastest_budget_skips_invalid_records_failed_and_restores(lab):
    from ddtctl.deploy import rollback
    from ddtctl.errors import UsageError

    start = _deploy(lab, lab.profile(server={BUDGET: 40}))  # the host serves budget 40 before the sweep
    prof = lab.profile("sweep", server={BUDGET: 40}, env={"STANDIN_EXIT_IF": "speculative_ddtree_budget=48"})
    # the CLI asks before restarting the server the host runs; without a terminal and --yes: refused, untouched
    asked = ddtctl_main("tune", "lo", "--profile", prof, "--payload", lab.payload, "-i", lab.inventory)
    assert asked.exit_code == ExitCode.USAGE and asked.stderr == (
        f"ddtctl: error: lo: tune restarts the server lo serves release {start} (pid "
        f"{host_status(lab.host()).server['pid']}, port {lab.port}) and needs confirmation: stdin is not a terminal "
        "(fix: pass --yes)\n")
    assert [r["id"] for r in host_status(lab.host()).releases] == [start]
    seen = []
    res = tune(str(prof), lab.host(), _opts(lab, [16, 32, 48, 64, 5000],
                                            on_point=lambda i, n, p: seen.append((i, n, p.label, p.status))))
    pts = _by_budget(res)
    # the baseline ran first: the same profile with DFLASH (the DDTREE flags removed)
    assert seen[0][2] == "baseline DFLASH" and [s[1] for s in seen] == [6] * 6
    assert res.baseline.status == "ok" and res.baseline.tps(1) == pytest.approx(222.22, abs=0.01)
    # the winner at the lowest concurrency, with its ratio to the baseline
    assert res.concurrency == 1 and res.winner is pts[32]
    assert res.winner.tps(1) == pytest.approx(239.60, abs=0.01)
    assert res.winner_ratio == pytest.approx(239.60 / 222.22, abs=1e-3)
    assert res.best_at(8) is pts[16]
    # figures parsed from the benchmark JSON and from /get_server_info
    r32 = pts[32].run_at(1)
    assert r32.accept_length == pytest.approx(3.594, abs=1e-3) and r32.itl_p99_ms == pytest.approx(1.5 * r32.itl_p50_ms)
    assert pts[32].server_metrics["ddtree"][0]["budget"] == 32
    # invalid: skipped with the validator's rule id, never deployed
    assert pts[5000].status == "invalid" and "DDT106" in pts[5000].rules and pts[5000].release is None
    # a server that fails to start: recorded, and the sweep went on to the next point
    assert pts[48].status == "failed" and "exited" in pts[48].error
    assert pts[64].status == "ok" and pts[64].tps(1) == pytest.approx(197.25, abs=0.01)
    # every point is in the results file
    lines = [json.loads(x) for x in (lab.root / "tune.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["status"] for x in lines} == {"ok", "invalid", "failed"}
    # the host is back on its starting release, serving budget 40
    assert res.restored and res.restore_error is None and res.start_release == start == res.end_release
    st = host_status(lab.host())
    assert st.current == start and st.server["release"] == start and st.health == 200
    assert st.server_info["speculative_ddtree_budget"] == 40
    # every point it deployed is a sweep point of this run (the results file names the run too); the start is not
    assert _release(lab, start)["kind"] == "release"
    for p in (res.baseline, pts[16], pts[32], pts[64]):
        assert _release(lab, p.release)["kind"] == "sweep"
        assert _release(lab, p.release)["tune"] == {"run": res.run_id, "point": p.label}
    assert {x["run"] for x in lines} == {res.run_id}
    # so none is a rollback target: the previous release (the last point) included
    assert st.previous == pts[64].release
    with pytest.raises(UsageError, match="no earlier healthy release to roll back to .tune's sweep points"):
        rollback(lab.host())


def test_rerun_skips_done_points_and_keep_best_leaves_the_winner_serving(lab):
    start = _deploy(lab, lab.profile(server={BUDGET: 40}))
    prof = lab.profile(server={BUDGET: 40})
    first = tune(str(prof), lab.host(), _opts(lab, [16, 32]))
    assert first.winner.flags[BUDGET] == 32 and host_status(lab.host()).current == start
    path = lab.root / "tune.jsonl"
    assert len(path.read_text().splitlines()) == 3
    deployed = []

    def on_event(ev):
        if ev.stage == "launch" and ev.message.startswith("started"):
            deployed.append(ev.message)

    second = tune(str(prof), lab.host(), _opts(lab, [16, 32, 64], keep_best=True, on_event=on_event))
    assert [p.flags[BUDGET] for p in second.points if not p.resumed] == [64]
    assert second.baseline.resumed and len(path.read_text().splitlines()) == 4  # only the new point appended
    assert len(read_results(path)) == 4
    assert second.winner.flags[BUDGET] == 32 and second.winner_ratio > 1
    assert len(deployed) == 2  # budget 64, then the winner (32, from the file) again; no baseline, no 16
    st = host_status(lab.host())
    assert second.kept_best and st.current != start and st.current == second.end_release
    assert st.server_info["speculative_ddtree_budget"] == 32 and st.health == 200


def test_a_host_without_a_release_is_left_without_a_server(lab):
    prof = lab.profile(server={BUDGET: 40})
    res = tune(str(prof), lab.host(), _opts(lab, [32], baseline="off"))
    assert res.baseline is None and res.winner.flags[BUDGET] == 32 and res.winner_ratio is None
    assert res.start_release is None and res.restored
    assert not (host_status(lab.host()).server or {}).get("running")


PROFILE_WITH_COMMENTS = """\
# tuned on the lab host
name: commented
sglang: 0.5.23
host: lo
hardware: {{gpu: H200, count: 1}}
model: {{path: {models}/target, architecture: Qwen3ForCausalLM}}
server:
  port: {port}   # the lab's port
  host: 127.0.0.1
  tp-size: 1
  speculative-algorithm: DDTREE
  speculative-draft-model-path: {models}/draft
  speculative-dflash-block-size: 16
  speculative-ddtree-budget: 40  # before tuning
  disable-overlap-schedule: true
launch: {{health_timeout_s: 20}}
"""


def test_cli_tune_writes_the_winner_keeping_comments_and_prints_the_table(lab):
    from typer.testing import CliRunner

    import ddtctl.cli.tune  # noqa: F401  (registers `tune` on the app)
    from ddtctl.cli._app import app

    prof = lab.root / "commented.yaml"
    prof.write_text(PROFILE_WITH_COMMENTS.format(models=lab.models, port=lab.port))
    space = lab.root / "space.yaml"
    space.write_text(f"{BUDGET}: [16, 32]\n")
    results = lab.root / "cli.jsonl"
    args = ["tune", "lo", "--profile", str(prof), "--space", str(space), "--concurrency", "1,8", "--num-prompts", "8",
            "--results", str(results), "--payload", str(lab.payload), "--skip-remote-dry-run",
            "--bench-cmd", f"{sys.executable} {STANDIN_BENCH}", "--health-timeout", "10", "-i", str(lab.inventory)]
    run = CliRunner().invoke(app, args + ["--write", "--deploy", "--format", "json"])
    assert run.exit_code == 0, run.output
    out = json_envelope.results(run.stdout, "tune")
    assert out["winner"]["flags"] == {BUDGET: 32} and out["written"]["changed"]
    # --deploy: the host ends on the written profile, a release of its own (the last point, budget 32, served
    # the same launch: a sweep point, never taken for the release)
    assert out["deployed"] and not out["restored"] and out["end_release"] != out["winner"]["release"]
    served = host_status(lab.host())
    assert served.current == out["end_release"] and served.server_info["speculative_ddtree_budget"] == 32
    release = _release(lab, out["end_release"])
    assert release["kind"] == "release" and release["profile"]["name"] == "commented"
    assert release["tune"] == {"run": out["run_id"], "point": "budget=32"}
    # now the host serves: in JSON, nothing prompts, so without --yes tune is refused before anything runs
    refused = ddtctl_main(*args, "--format", "json")
    assert refused.exit_code == ExitCode.USAGE
    assert "--format json does not prompt" in json_envelope.error(refused.stdout, "tune", 2)["message"]
    text = prof.read_text()
    assert "  speculative-ddtree-budget: 32  # before tuning\n" in text
    assert text.startswith("# tuned on the lab host\n") and "# the lab's port" in text
    assert text.replace("budget: 32", "budget: 40") == PROFILE_WITH_COMMENTS.format(models=lab.models, port=lab.port)
    # again, as text: every point comes from the results file (the profile changed only in the tuned flag)
    png = lab.root / "tune.png"
    run = CliRunner().invoke(app, args + ["--concurrency", "1,8", "--plot", str(png), "--plot-terminal", "--yes"])
    assert run.exit_code == 0, run.output
    assert f"host lo is back on release {out['end_release']}" in run.stdout  # it started there
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot: {png}" in run.stdout
    # the same plot in the terminal (plotext), after the table
    drawn = run.stdout[run.stdout.index("ddtctl tune lo: commented.yaml"):]
    assert "DDTREE budget" in drawn and "output tokens/s" in drawn
    assert "o concurrency 1   - baseline DFLASH, 1   x concurrency 8   = baseline DFLASH, 8" in drawn
    assert "(from the results file)" in run.stderr
    assert len(results.read_text().splitlines()) == 3
    rows = run.stdout.splitlines()
    assert any(r.startswith("budget=32 *") and "239.6" in r and "1.08" in r for r in rows), run.stdout
    assert "winner at concurrency 1: budget=32 topk-cap=-" not in run.stdout  # the --space had no topk-cap
    assert "winner at concurrency 1: budget=32: 239.6 tokens/s, 1.08x the baseline" in run.stdout


# -- --repeats: run-to-run noise (the stand-in benchmark's seeded --standin-noise) ----------------------------
def _launches(into: list):
    def on_event(ev):
        if ev.stage == "launch" and ev.message.startswith("started"):
            into.append(ev.message)
    return on_event


def test_repeats_run_in_one_server_life_are_recorded_and_resumed(lab):
    counted = lab.root / "bench-runs.txt"  # the stand-in benchmark adds a line (its concurrency) per run
    noisy = [sys.executable, str(STANDIN_BENCH), "--standin-noise", "0.1", "--standin-runs", str(counted)]
    prof = lab.profile(server={BUDGET: 40})
    launched: list = []
    res = tune(str(prof), lab.host(), _opts(lab, [16, 32], repeats=3, warmup=True, bench_cmd=noisy,
                                            on_event=_launches(launched)))
    assert len(launched) == 3  # baseline, 16, 32: the repeats ran against one server each
    # per point and concurrency: one warm-up run (not recorded), then the 3 repeats
    assert counted.read_text().split() == (["1"] * 4 + ["8"] * 4) * 3
    for p in [res.baseline, *res.points]:
        assert [(r.concurrency, r.repeat, r.ok) for r in p.runs] == [(c, i, True) for c in (1, 8) for i in range(3)]
        figures = sorted(r.output_tps for r in p.runs_at(1))
        assert len(set(figures)) == 3 and p.tps(1) == figures[1]  # noisy runs; the point's figure: their median
        assert p.spread(1).low == figures[0] and p.spread(1).high == figures[2]
    assert res.winner is res.best_at(1)
    path = lab.root / "tune.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 3 and all([r["repeat"] for r in x["runs"]] == [0, 1, 2, 0, 1, 2] for x in lines)

    # the same sweep again: every point (3 runs each) comes from the results file, nothing is run
    again = tune(str(prof), lab.host(), _opts(lab, [16, 32], repeats=3, bench_cmd=noisy,
                                              on_event=_launches(launched)))
    assert again.baseline.resumed and all(p.resumed for p in again.points) and len(launched) == 3
    assert [p.tps(1) for p in again.points] == [p.tps(1) for p in res.points]
    assert len(counted.read_text().split()) == 24 and len(path.read_text().splitlines()) == 3
    # more repeats than the file holds: that point is measured again (4 runs), and appended
    more = tune(str(prof), lab.host(), _opts(lab, [32], baseline="off", repeats=4, bench_cmd=noisy))
    assert not more.winner.resumed and [r.repeat for r in more.winner.runs_at(8)] == [0, 1, 2, 3]
    assert len(path.read_text().splitlines()) == 4 and len(counted.read_text().split()) == 32
    assert read_results(path)[more.winner.key].repeats([1, 8]) == 4  # the last line of a key wins


def test_cli_write_is_refused_within_the_spread_of_the_baseline_and_written_anyway(lab):
    from typer.testing import CliRunner

    import ddtctl.cli.tune  # noqa: F401  (registers `tune` on the app)
    from ddtctl.cli._app import app

    prof = lab.root / "commented.yaml"
    original = PROFILE_WITH_COMMENTS.format(models=lab.models, port=lab.port)
    prof.write_text(original)
    space = lab.root / "space.yaml"
    space.write_text(f"{BUDGET}: [16, 32]\n")
    results = lab.root / "noisy.jsonl"  # ±15 % seeded noise: budget 32 wins on the median, its range overlaps
    bench = f"{sys.executable} {STANDIN_BENCH} --standin-noise 0.15 --standin-runs {lab.root / 'runs.txt'}"
    args = ["tune", "lo", "--profile", str(prof), "--space", str(space), "--concurrency", "1", "--num-prompts", "8",
            "--results", str(results), "--payload", str(lab.payload), "--skip-remote-dry-run", "--bench-cmd", bench,
            "--health-timeout", "10", "-i", str(lab.inventory), "--repeats", "3", "--write"]
    run = CliRunner().invoke(app, args)
    assert run.exit_code == ExitCode.INCONCLUSIVE, run.output
    assert prof.read_text() == original  # not written
    refused = [ln for ln in run.stderr.splitlines() if ln.startswith("ddtctl: error:")]
    assert len(refused) == 1 and "--write refused: the winner budget=" in refused[0]
    assert "within the run-to-run spread of the baseline at concurrency 1 (3 runs each)" in refused[0]
    assert "within the run-to-run spread of" in run.stdout and "run with more --repeats" in run.stdout
    assert any(r.startswith("baseline DFLASH") and "±" in r for r in run.stdout.splitlines()), run.stdout
    # asked anyway: the winner (from the results file, nothing run again) is written
    run = CliRunner().invoke(app, args + ["--write-anyway", "--format", "json"])
    assert run.exit_code == 0, run.output
    out = json_envelope.results(run.stdout, "tune")
    assert out["verdict"]["baseline_overlaps"] and all(p["resumed"] for p in out["points"])
    assert out["written"]["changed"] and out["winner"]["stats"]["1"]["n"] == 3
    assert f"speculative-ddtree-budget: {out['winner']['flags'][BUDGET]}  # before tuning" in prof.read_text()
    assert len(results.read_text().splitlines()) == 3


# -- the user's prompt file (issue #15) ----------------------------------------------------------------------
def test_a_prompt_file_is_shipped_to_the_hosts_benchmark(lab):
    jsonl = lab.root / "prompts.jsonl"
    turns = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "answer"}]
             for i in range(3)]
    jsonl.write_text("".join(json.dumps({"conversations": t}) + "\n" for t in turns))
    prof = lab.profile(server={BUDGET: 40})
    res = tune(str(prof), lab.host(), _opts(lab, [32], baseline="off", prompts_file=str(jsonl)))
    runs = res.winner.runs
    # SGLang's custom dataset on the host read the file: 3 prompts although --num-prompts asked for 8
    assert [(r.concurrency, r.ok, r.completed) for r in runs] == [(1, True, 3), (8, True, 3)]
    assert res.winner.tps(1) == pytest.approx(239.60, abs=0.01)

    sharegpt = lab.root / "sharegpt.json"
    sharegpt.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hello"},
                                                       {"from": "gpt", "value": "hi"}]}] * 2))
    again = tune(str(prof), lab.host(), _opts(lab, [32], baseline="off", prompts_file=str(sharegpt)))
    assert not again.winner.resumed  # other prompts: measured again, not taken from the results file
    assert [r.completed for r in again.winner.runs] == [2, 2]
    random = tune(str(prof), lab.host(), _opts(lab, [32], baseline="off"))
    assert not random.winner.resumed and [r.completed for r in random.winner.runs] == [8, 8]


# -- the server's --api-key (issue #15) ----------------------------------------------------------------------
SECRET = "tune-s3cr3t-key-0451"


def test_the_servers_api_key_reaches_the_benchmark_and_is_never_shown(lab):
    from typer.testing import CliRunner

    import ddtctl.cli.tune  # noqa: F401  (registers `tune` on the app)
    from ddtctl.cli._app import app
    from ddtctl.deploy import connect
    from ddtctl.tune.bench import bench_argv, run_bench

    prof = lab.profile("keyed", server={BUDGET: 40, "api-key": SECRET})
    results = lab.root / "keyed.jsonl"
    args = ["tune", "lo", "--profile", str(prof), "--concurrency", "1", "--num-prompts", "4",
            "--baseline", "off", "--results", str(results), "--payload", str(lab.payload),
            "--skip-remote-dry-run", "--bench-cmd", f"{sys.executable} {STANDIN_BENCH}",
            "--health-timeout", "10", "-i", str(lab.inventory), "--keep-best"]
    space = lab.root / "space.yaml"
    space.write_text(f"{BUDGET}: [32]\n")
    run = CliRunner().invoke(app, args + ["--space", str(space), "--format", "json"])
    assert run.exit_code == 0, run.output
    out = json_envelope.results(run.stdout, "tune")
    assert out["winner"]["status"] == "ok" and out["winner"]["runs"][0]["ok"]
    assert out["kept_best"] and "`tune --keep-best` is deprecated" in out["warnings"][0]["message"]
    assert "--api-key" in out["winner"]["argv"] and "***" in out["winner"]["argv"]
    for shown in (run.stdout, run.stderr, results.read_text()):
        assert SECRET not in shown

    # the server (kept serving: --keep-best) really refuses the benchmark's requests without the key
    host = lab.host()
    with connect(host) as conn:
        argv = bench_argv([sys.executable, str(STANDIN_BENCH)], host.python, host="127.0.0.1", port=lab.port,
                          tokenizer=None, concurrency=1, opts=_opts(lab, [32]))
        refused = run_bench(conn, argv, 1, 60)
        allowed = run_bench(conn, argv, 1, 60, key=SECRET)
    assert not refused.ok and "401" in refused.error
    assert allowed.ok


# -- environment variables in the search space (the DDTREE kernel switches) ---------------------------------
CONV = "env.DDTREE_CONV_TREE"


def test_points_differing_only_in_env_run_with_their_env_and_are_resumed(lab):
    prof = lab.profile(server={BUDGET: 40}, env={"STANDIN_PRINT_ENV": "DDTREE_CONV_TREE"})
    space = {BUDGET: [32], CONV: ["sglang", "compact", "compcat"]}
    launched: list = []
    opts = _opts(lab, [32], on_event=_launches(launched))
    opts.space = space
    res = tune(str(prof), lab.host(), opts)
    pts = {p.flags[CONV]: p for p in res.points}
    assert [p.label for p in res.points] == [f"budget=32 DDTREE_CONV_TREE={v}" for v in space[CONV]]
    assert pts["sglang"].status == pts["compact"].status == "ok" and len(launched) == 3
    assert len({p.key for p in res.points}) == 3
    # each server process ran with its point's value; the baseline (the reference) with the profile's env
    logs = lab.work() / "logs"
    for value in ("sglang", "compact"):
        log = (logs / f"{pts[value].release}.log").read_text()
        assert f"[standin] DDTREE_CONV_TREE={value}\n" in log
        release = json.loads((lab.work() / "releases" / pts[value].release / "release.json").read_text())
        assert release["env"]["DDTREE_CONV_TREE"] == value
    assert "[standin] DDTREE_CONV_TREE=None\n" in (logs / f"{res.baseline.release}.log").read_text()
    # a value the payload does not know: validated first, never deployed
    assert pts["compcat"].status == "invalid" and pts["compcat"].rules == ["DDT116"]
    assert pts["compcat"].release is None and "compcat" in pts["compcat"].error

    # again: every point (both env values, the invalid one, the baseline) comes from the results file
    opts = _opts(lab, [32], on_event=_launches(launched))
    opts.space = space
    again = tune(str(prof), lab.host(), opts)
    assert again.baseline.resumed and all(p.resumed for p in again.points) and len(launched) == 3
    assert {p.flags[CONV]: p.key for p in again.points} == {v: p.key for v, p in pts.items()}
    assert len((lab.root / "tune.jsonl").read_text().splitlines()) == 4
