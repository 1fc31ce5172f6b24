"""`ddtctl tune --repeats`: medians and spreads, the footer that says whether the winner is ahead beyond the
run-to-run spread, `--write` refused when it is not ahead of the baseline, and results files from before
--repeats. The figures are a deterministic stand-in for the benchmark: a true tokens/s per point with seeded
uniform noise per run (tests/remote/test_tune.py runs the same against the loopback host)."""

from __future__ import annotations

import json
import random

import json_envelope
import pytest

from ddtctl.cli._app import OutputFormat
from ddtctl.cli.tune import _report
from ddtctl.errors import ExitCode
from ddtctl.tune.sweep import _enough_runs
from ddtctl.tune.bench import BenchRun
from ddtctl.tune.results import PointResult, TuneResult, read_results
from ddtctl.tune.stats import Spread, verdict, write_refusal

BUDGET = "speculative-ddtree-budget"
# the stand-in server's figures at concurrency 1 (tests/remote/standins/standin_bench_serving.py)
TRUE_TPS = {"baseline DFLASH": 222.22, "budget=16": 231.71, "budget=32": 239.60}


def noisy_point(label: str, repeats: int, noise: float, seed: int) -> PointResult:
    rng = random.Random(f"{seed}-{label}")
    runs = [
        BenchRun(c, True, output_tps=TRUE_TPS[label] * c * (1 + noise * rng.uniform(-1, 1)), itl_p50_ms=4.0 + i,
                 accept_length=3.0, repeat=i)
        for c in (1, 8) for i in range(repeats)
    ]
    kind = "baseline" if label.startswith("baseline") else "point"
    flags = {} if kind == "baseline" else {BUDGET: int(label.split("=")[1])}
    return PointResult(key=label, label=label, kind=kind, flags=flags, status="ok", runs=runs)


def sweep(repeats: int, noise: float, seed: int = 4) -> TuneResult:
    pts = [noisy_point(label, repeats, noise, seed) for label in ("budget=16", "budget=32")]
    res = TuneResult(host="lo", profile="p.yaml", algorithm="DDTREE", concurrency=1, concurrencies=[1, 8],
                     baseline=noisy_point("baseline DFLASH", repeats, noise, seed), points=pts, winner=None,
                     results_path="r.jsonl", start_release="rel-1", end_release="rel-1", restored=True)
    res.winner = res.best_at(1)
    return res


def text_report(capsys, res: TuneResult, **kw) -> tuple[int, str, str]:
    kw.setdefault("write", False)
    code = _report(res, kw.pop("profile", "p.yaml"), plot=None, plot_terminal=False, fmt=OutputFormat.text, **kw)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_figure_is_the_median_and_the_spread_the_min_max_range():
    p = PointResult("k", "budget=16", "point", {BUDGET: 16}, "ok", runs=[
        BenchRun(1, True, output_tps=v, itl_p50_ms=itl, repeat=i)
        for i, (v, itl) in enumerate([(100.0, 5.0), (110.0, 4.0), (90.0, 6.0)])
    ] + [BenchRun(1, False, error="boom", repeat=3)])
    assert p.spread(1) == Spread(3, 100.0, 90.0, 110.0) and p.tps(1) == 100.0
    assert p.spread(1).half_range == pytest.approx(0.10)
    assert p.run_at(1).itl_p50_ms == 5.0 and p.repeats([1]) == 3  # the failed run counts in neither
    assert p.spread(8) is None and p.repeats([1, 8]) == 0


# seeds of the ±10 % noise (figures 3-8 % apart) and what their ranges do at concurrency 1
@pytest.mark.parametrize("seed, close", [
    (4, "budget=16 and of the baseline"),  # the winner's range overlaps both
    (2, "budget=16"),  # only the runner-up's: the winner is still ahead of the baseline
    (10, "the baseline"),  # only the baseline's
])
def test_overlapping_ranges_are_called_out_in_the_footer(capsys, seed, close):
    res = sweep(repeats=3, noise=0.10, seed=seed)
    winner, runner_up = res.winner, next(p for p in res.points if p is not res.winner)
    assert (winner.label, runner_up.label) == ("budget=32", "budget=16")
    w, r, b = (p.spread(1) for p in (winner, runner_up, res.baseline))
    # (what the seeded figures are; the footer must say it)
    assert (w.overlaps(r), w.overlaps(b)) == ("budget=16" in close, "baseline" in close)
    code, out, _ = text_report(capsys, res)
    assert code == ExitCode.OK
    footer = (f"winner budget=32 {res.winner_ratio:.2f}x the baseline, but within the run-to-run spread of {close}: "
              "run with more --repeats or --num-prompts")
    assert footer in out.replace("\n", " ")
    assert "beyond the run-to-run spread" not in out
    row = next(line for line in out.splitlines() if line.startswith("budget=32 *"))
    assert f"{w.median:.1f} ±{100 * w.half_range:.0f}%" in row
    # no column cut short although the spreads widen tok/s (not a terminal: wider than rich's 80)
    assert out.splitlines()[0].split() == "point conc status tok/s vs base accept ITL p50 ITL p99 TTFT".split()
    assert (write_refusal(verdict(res)) is None) == ("baseline" not in close)


def test_separated_ranges_say_the_winner_is_ahead(capsys):
    res = sweep(repeats=3, noise=0.005)  # ±0.5 %: no overlap
    code, out, _ = text_report(capsys, res)
    assert code == ExitCode.OK and "within the run-to-run spread" not in out
    assert ("winner budget=32 1.08x the baseline: ahead of budget=16 and of the baseline beyond the run-to-run "
            "spread (3 runs each)") in out.replace("\n", " ")
    v = verdict(res)
    assert v.clear and v.beats_baseline and write_refusal(v) is None


def test_one_run_per_point_says_the_spread_is_unknown(capsys):
    res = sweep(repeats=1, noise=0.10)
    _, out, _ = text_report(capsys, res)
    assert "the run-to-run spread is unknown with one run per point: run with --repeats 3" in out.replace("\n", " ")
    assert "±" not in out.split("winner at")[0].split("* the winner")[-1]  # no spread shown with one run
    v = verdict(res)
    assert v.runner_up_overlaps is None and v.beats_baseline is None and not v.clear


PROFILE = """\
# kept
name: p
sglang: 0.5.23
model: {path: /m, architecture: Qwen3ForCausalLM}
server:
  speculative-algorithm: DDTREE
  speculative-ddtree-budget: 40  # before tuning
"""


def test_write_is_refused_within_the_spread_of_the_baseline_unless_asked_anyway(capsys, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    res = sweep(repeats=3, noise=0.10)
    code, out, err = text_report(capsys, res, profile=str(prof), write=True)
    assert code == ExitCode.INCONCLUSIVE == 6 and prof.read_text() == PROFILE
    assert err.count("\n") == 1 and err.startswith("ddtctl: error: --write refused: the winner budget=32 is within "
                                                   "the run-to-run spread of the baseline at concurrency 1 (3 runs")
    assert "pass --write-anyway" in err and "budget=32 *" in out  # the table is still printed
    code, out, err = text_report(capsys, res, profile=str(prof), write=True, write_anyway=True)
    assert code == ExitCode.OK and err == ""
    assert "speculative-ddtree-budget: 32  # before tuning" in prof.read_text()


@pytest.mark.parametrize("repeats, noise", [(3, 0.005), (1, 0.10)])
def test_write_goes_on_when_ahead_or_when_the_spread_is_unknown(capsys, tmp_path, repeats, noise):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    res = sweep(repeats, noise)
    code, out, err = text_report(capsys, res, profile=str(prof), write=True)
    assert code == ExitCode.OK and err == ""
    assert f"budget: {res.winner.flags[BUDGET]}  # before tuning" in prof.read_text()
    assert f"{prof}: wrote {BUDGET}: {res.winner.flags[BUDGET]}" in out


def test_write_refused_in_json_keeps_the_results(capsys, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    res = sweep(repeats=3, noise=0.10)
    code = _report(res, str(prof), write=True, plot=None, plot_terminal=False, fmt=OutputFormat.json)
    doc = json_envelope.envelope(capsys.readouterr().out, "tune")
    assert code == ExitCode.INCONCLUSIVE and not doc["ok"] and doc["error"] is None
    out = doc["results"]
    refused = out["write_refused"]
    assert refused["exit_code"] == ExitCode.INCONCLUSIVE and refused["fix"].endswith("or pass --write-anyway")
    assert refused["message"].startswith("--write refused: the winner budget=32 is within the run-to-run spread")
    assert out["written"] is None and prof.read_text() == PROFILE and out["verdict"]["baseline_overlaps"] and not out["verdict"]["clear"]
    stats = out["winner"]["stats"]["1"]
    assert stats["n"] == 3 and stats["min"] <= stats["median"] <= stats["max"]
    assert len(out["winner"]["runs"]) == 6 and [r["repeat"] for r in out["winner"]["runs"][:3]] == [0, 1, 2]
    assert out["points"][0]["stats"]["8"]["n"] == 3


def test_json_with_one_run_keeps_its_shape(capsys):
    code = _report(sweep(1, 0.1), "p.yaml", write=False, plot=None, plot_terminal=False, fmt=OutputFormat.json)
    out = json_envelope.results(capsys.readouterr().out, "tune")
    assert code == ExitCode.OK and out["verdict"]["spread_known"] is False and out["write_refused"] is None
    assert out["winner"]["runs"][0]["output_tps"] == out["winner"]["stats"]["1"]["median"]


# a line of a results file written before --repeats (no `repeat`, one run per concurrency)
OLD_LINE = {
    "key": "0123456789abcdef", "label": "budget=32", "kind": "point", "flags": {BUDGET: 32}, "status": "ok",
    "rules": [], "error": None, "release": "20260101-000000-abc", "server_metrics": {"avg_spec_accept_length": 3.6},
    "argv": ["python", "-m", "sglang.launch_server"], "elapsed_s": 12.5, "host": "lo", "profile": "p.yaml",
    "time": 1.7e9,
    "runs": [{"concurrency": 1, "ok": True, "output_tps": 239.6, "ttft_ms": 58.0, "itl_p50_ms": 4.17,
              "itl_p99_ms": 6.26, "accept_length": 3.59, "completed": 8, "error": None},
             {"concurrency": 8, "ok": True, "output_tps": 900.0, "ttft_ms": 58.0, "itl_p50_ms": 8.9,
              "itl_p99_ms": 13.3, "accept_length": 3.59, "completed": 8, "error": None}],
}


def test_a_results_file_from_before_repeats_loads_and_is_remeasured_only_when_more_runs_are_asked(tmp_path):
    path = tmp_path / "old.tune.jsonl"
    path.write_text(json.dumps(OLD_LINE) + "\n")
    p = read_results(path)["0123456789abcdef"]
    assert p.resumed and p.tps(1) == 239.6 and p.tps(8) == 900.0 and p.run_at(1).itl_p50_ms == 4.17
    assert [r.repeat for r in p.runs] == [None, None] and p.spread(1) == Spread(1, 239.6, 239.6, 239.6)
    assert _enough_runs(p, [1, 8], 1) and not _enough_runs(p, [1, 8], 3)
    failed = PointResult.from_json(dict(OLD_LINE, status="failed", runs=[]))
    assert _enough_runs(failed, [1, 8], 3)  # a point that failed is not tried again (as before --repeats)
    # and written back, a point keeps every run and its repeat index
    again = PointResult.from_json(json.loads(json.dumps(noisy_point("budget=16", 3, 0.1, 1).to_json())))
    assert [(r.concurrency, r.repeat) for r in again.runs] == [(1, 0), (1, 1), (1, 2), (8, 0), (8, 1), (8, 2)]


def test_a_winner_slower_than_the_baseline_beyond_the_spread_is_not_written(capsys, tmp_path):
    res = sweep(repeats=3, noise=0.005)
    for run in res.baseline.runs:  # a baseline 30 % up: faster than every point, well beyond the ±0.5 % noise
        run.output_tps *= 1.3
    v = verdict(res)
    assert v.beats_baseline is False and v.baseline_overlaps is False and not v.clear
    assert v.message() == (f"winner budget=32 {res.winner_ratio:.2f}x the baseline: slower than the baseline beyond "
                           "the run-to-run spread (3 runs each)")
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    code, _, err = text_report(capsys, res, profile=str(prof), write=True)
    assert code == ExitCode.INCONCLUSIVE and prof.read_text() == PROFILE
    assert "the winner budget=32 is slower than the baseline beyond the run-to-run spread" in err


def test_a_single_point_without_a_baseline_claims_nothing():
    res = sweep(repeats=3, noise=0.005)
    res.baseline, res.points = None, res.points[1:]
    v = verdict(res)
    assert v.message() == "winner budget=32: the only point measured, and no baseline to compare it with"
    assert not v.clear and write_refusal(v) is None  # nothing says it is worse: --write goes on


def test_repeats_below_one_is_a_usage_error_before_anything_runs():
    from ddtctl.errors import UsageError
    from ddtctl.tune.sweep import TuneOptions, _bench_settings

    with pytest.raises(UsageError) as err:
        _bench_settings(TuneOptions(repeats=0))
    assert err.value.one_line() == "--repeats 0: give at least 1 (fix: e.g. --repeats 3)"
    assert _bench_settings(TuneOptions(repeats=2))[:2] == ([1, 8], 1)
