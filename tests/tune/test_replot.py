"""`ddtctl tune --replot RESULTS.jsonl`: the table and the plots of a sweep from its results file, no host reached;
and the combinations of tune's options refused before anything runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "remote"))

from json_envelope import results  # noqa: E402
from labkit import ddtctl_main  # noqa: E402

from ddtctl.tune import BenchRun, PointResult, append_result  # noqa: E402

BUDGET = "speculative-ddtree-budget"
ARGV = ["python", "-m", "sglang.launch_server", "--speculative-algorithm", "DDTREE"]


def _point(label, tps, kind="point", budget=None):
    runs = [BenchRun(concurrency=c, ok=True, output_tps=v, repeat=0) for c, v in tps.items()]
    flags = {BUDGET: budget} if budget else {"speculative-algorithm": "DFLASH"}
    return PointResult(key=f"k-{label}-{tps[1]}", label=label, kind=kind, flags=flags, status="ok", runs=runs,
                       argv=ARGV)


def _results_file(tmp_path: Path) -> Path:
    """Two sweeps of lab.yaml on lo (budget 32 measured again: its last line wins), one of other.yaml on lo2."""
    path = tmp_path / "lab.tune.jsonl"
    for host, profile, point in [
        ("lo", "/elsewhere/lab.yaml", _point("baseline DFLASH", {1: 222.2, 8: 900.0}, kind="baseline")),
        ("lo", "/elsewhere/lab.yaml", _point("budget=16", {1: 231.7, 8: 1000.0}, budget=16)),
        ("lo", "/elsewhere/lab.yaml", _point("budget=32", {1: 200.0, 8: 950.0}, budget=32)),
        ("lo", "/elsewhere/lab.yaml", _point("budget=32", {1: 239.6, 8: 960.0}, budget=32)),
        ("lo2", "other.yaml", _point("budget=64", {1: 100.0, 8: 500.0}, budget=64)),
    ]:
        append_result(path, host, profile, point, run="RUN1")
    return path


def test_replot_renders_one_sweep_of_the_file_without_a_host(tmp_path):
    path = _results_file(tmp_path)
    text = ddtctl_main("tune", "lo", "--replot", path, "--inventory", tmp_path / "missing.yaml")
    assert text.exit_code == 0, text.output
    rows = text.stdout.splitlines()
    assert any(r.startswith("budget=32 *") and "239.6" in r and "1.08" in r for r in rows), text.stdout
    assert sum(r.startswith("budget=32") for r in rows) == 1  # the point once: its latest record
    assert "winner at concurrency 1: budget=32: 239.6 tokens/s, 1.08x the baseline" in text.stdout
    assert "budget schedule (the fastest budget per concurrency, 0: the chain): 1:32,16\n" in text.stdout
    assert rows[-1] == f"replotted from {path} (no host reached)"
    # the profile picks the sweep too (by its name: the sweep ran elsewhere), the winner at another concurrency
    out = results(ddtctl_main("tune", "--replot", path, "--profile", "lab.yaml", "--at", "8", "--format", "json")
                  .stdout, "tune")
    assert out["replotted"] and out["host"] == "lo" and out["winner"]["label"] == "budget=16"
    assert [p["label"] for p in out["points"]] == ["budget=16", "budget=32"] and out["concurrencies"] == [1, 8]


def test_replot_draws_the_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "out.png"
    run = ddtctl_main("tune", "lo2", "--replot", _results_file(tmp_path), "--plot", png)
    assert run.exit_code == 0, run.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot: {png}" in run.stdout


@pytest.mark.parametrize("args, message", [
    (["--replot", "{file}"], "the results file holds 2 sweeps (lo: /elsewhere/lab.yaml, lo2: other.yaml) (fix: name "
                             "one: ddtctl tune HOST --profile PROFILE --replot FILE)"),
    (["nowhere", "--replot", "{file}"], "the results file holds no sweep of nowhere"),
    (["--replot", "{dir}/absent.jsonl"], "no such file"),
    (["lo", "--replot", "{file}", "--write"], "--write needs a sweep; --replot only shows one (fix: drop --write)"),
    (["lo", "--replot", "{file}", "--at", "4"], "--at 4: the file has concurrencies [1, 8]"),
    (["--profile", "p.yaml"], "tune needs a HOST (fix: ddtctl tune HOST --profile P (or --replot RESULTS.jsonl "
                              "to show a sweep))"),
    (["lo", "--deploy"], "--deploy deploys the profile --write puts the winner into (fix: ddtctl tune HOST --write "
                         "--deploy)"),
    (["lo", "--write", "--deploy", "--keep-best"], "--deploy and --keep-best both pick what serves at the end"),
])
def test_tune_usage_is_refused_in_one_line_before_anything_runs(tmp_path, args, message):
    path = _results_file(tmp_path)
    argv = [a.format(file=path, dir=tmp_path) for a in args]
    run = ddtctl_main("tune", *argv, "--inventory", tmp_path / "missing.yaml")
    assert run.exit_code == 2 and len(run.stderr.splitlines()) == 1, run.output
    assert message in run.stderr
    doc = json.loads(ddtctl_main("tune", *argv, "--format", "json").stdout)
    assert doc["error"]["exit_code"] == 2 and doc["results"] is None


def test_the_restart_question_on_a_terminal_and_no_for_an_answer(monkeypatch, capsys):
    """On a terminal tune asks before restarting the server the host runs; "no" ends it with nothing changed."""
    import io

    from ddtctl.cli._app import OutputFormat
    from ddtctl.cli.tune import _check_can_ask, _confirm_restart, _report
    from ddtctl.deploy import HostStatus
    from ddtctl.tune import TuneResult

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    start = HostStatus("lo", "r1", None, {"running": True, "release": "r1", "pid": 7, "port": 30000}, None, None,
                       None, [])
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    _check_can_ask(start, OutputFormat.text)  # a terminal, text: it may ask
    assert _confirm_restart(start, deploy=True) is False
    err = capsys.readouterr().err
    assert err == ("lo serves release r1 (pid 7, port 30000): tune restarts it for every point and ends on the "
                   "winner, deployed from the profile.\n")
    with pytest.raises(Exception, match="--format json does not prompt"):
        _check_can_ask(start, OutputFormat.json)
    aborted = TuneResult("lo", "p.yaml", None, 1, [1], None, [], None, "r.jsonl", "r1", aborted=True)
    assert _report(aborted, "p.yaml", write=True, plot=None, plot_terminal=False, fmt=OutputFormat.text) == 0
    assert capsys.readouterr().out == "aborted: nothing changed\n"
