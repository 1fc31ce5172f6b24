"""`ddtctl tune` on DDTREE writes the budget schedule it found (ddtctl/tune/schedule.py): the fastest budget per
concurrency, the DFLASH baseline standing for the chain; points that differ in more than the budget stay out. The
figures are stand-ins (no host): tokens/s per (point, concurrency), one run each."""

from __future__ import annotations

import pytest

from ddtctl.rules.ddtree import core as ddtree_core
from ddtctl.tune.bench import BenchRun
from ddtctl.tune.results import PointResult, TuneResult
from ddtctl.tune.schedule import BUDGET, SCHEDULE, best_budgets, budget_schedule, schedule_point, schedule_text

# tokens/s: the widest tree wins at 1, a small one at 8, DFLASH (the chain) at 32 -- the 27B's shape of the result
TPS = {"baseline DFLASH": {1: 300.0, 8: 1500.0, 32: 4000.0}, "budget=16": {1: 310.0, 8: 1600.0, 32: 3700.0},
       "budget=64": {1: 350.0, 8: 1400.0, 32: 2500.0}, "budget=127": {1: 380.0, 8: 1200.0, 32: 1900.0}}


def point(label: str, **extra) -> PointResult:
    kind = "baseline" if label.startswith("baseline") else "point"
    flags = {"speculative-algorithm": "DFLASH"} if kind == "baseline" else {BUDGET: int(label.split("=")[1])}
    flags.update(extra)
    runs = [BenchRun(c, True, output_tps=v) for c, v in TPS[label].items()]
    return PointResult(key=label, label=label, kind=kind, flags=flags, status="ok", runs=runs)


def result(points: list[PointResult], concs=(1, 8, 32), algorithm="DDTREE") -> TuneResult:
    r = TuneResult("h", "p.yaml", algorithm, 1, list(concs), point("baseline DFLASH"), points, None, "r.jsonl", None)
    r.winner = r.best_at(1)
    return r


def test_the_schedule_takes_the_fastest_budget_at_each_concurrency():
    r = result([point("budget=16"), point("budget=64"), point("budget=127")])
    assert best_budgets(r) == [(1, 127), (8, 16), (32, 0)]
    assert budget_schedule(r) == "1:127,8:16,0"
    assert ddtree_core.parse_budget_schedule(budget_schedule(r)) == ((1, 127), (8, 16), (None, 0))
    written = schedule_point(r)
    assert written.flags[SCHEDULE] == "1:127,8:16,0" and written.flags[BUDGET] == 127
    assert r.to_json()["budget_schedule"] == "1:127,8:16,0"


def test_one_budget_everywhere_is_no_schedule_and_others_flags_keep_points_out():
    assert schedule_text([(1, 64), (8, 64)]) is None
    assert schedule_text([(1, 127), (4, 127), (8, 16), (32, 16)]) == "4:127,16"
    # budget=16 with another topk cap than the winner's is a different configuration: not in the schedule
    r = result([point("budget=16", **{"speculative-ddtree-topk-cap": 4}), point("budget=127")], concs=(1, 8))
    assert best_budgets(r) == [(1, 127), (8, 0)]
    assert budget_schedule(r) == "1:127,0"
    assert budget_schedule(result([point("budget=16")], algorithm="EAGLE3")) is None


@pytest.mark.parametrize("missing", ["baseline"])
def test_without_the_dflash_baseline_the_schedule_has_no_chain(missing):
    r = result([point("budget=16"), point("budget=127")])
    r.baseline = None
    assert budget_schedule(r) == "1:127,16"


PROFILE = """name: p
sglang: 0.5.23
model: {path: /m, architecture: Qwen3ForCausalLM}
server:
  speculative-algorithm: DDTREE
  speculative-ddtree-budget: 64
"""


@pytest.mark.parametrize("schedule", [False, True])
def test_write_schedule_puts_the_schedule_and_its_widest_budget_into_the_profile(tmp_path, capsys, schedule):
    from ddtctl.cli._app import OutputFormat
    from ddtctl.cli.tune import _report

    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    r = result([point("budget=16"), point("budget=64"), point("budget=127")])
    _report(r, str(prof), write=True, schedule=schedule, plot=None, plot_terminal=False, fmt=OutputFormat.text)
    out, text = capsys.readouterr().out, prof.read_text()
    assert "budget schedule (the fastest budget per concurrency, 0: the chain): 1:127,8:16,0" in out
    if schedule:
        assert "speculative-ddtree-budget: 127" in text and "speculative-ddtree-budget-schedule: 1:127,8:16,0" in text
    else:  # --write alone writes the winner at its concurrency, as before
        assert "speculative-ddtree-budget: 127" in text and SCHEDULE not in text
