"""`ddtctl tune --plot`: the PNG's content, checked on the figure's data, and the one-line error with nothing
measured."""

from __future__ import annotations

import re
import sys

import pytest

pytest.importorskip("matplotlib")

from ddtctl.errors import UsageError  # noqa: E402
from ddtctl.tune import BenchRun, PointResult, TuneResult  # noqa: E402
from ddtctl.tune.plot import _x, plot_png  # noqa: E402

BUDGET = "speculative-ddtree-budget"


def _point(label, flags, tps, kind="point"):
    runs = [BenchRun(concurrency=c, ok=True, output_tps=v) for c, v in tps.items()]
    return PointResult(key=label, label=label, kind=kind, flags=flags, status="ok", runs=runs)


def _result(points, baseline=None):
    return TuneResult(host="lo", profile="p.yaml", algorithm="DDTREE", concurrency=1, concurrencies=[1, 8],
                      baseline=baseline, points=points, winner=points[0] if points else None, results_path="r",
                      start_release=None)


def test_png_has_one_line_per_concurrency_and_the_baseline(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen = {}
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: seen.setdefault("fig", fig) and None)
    pts = [_point("budget=16", {BUDGET: 16}, {1: 200.0, 8: 900.0}), _point("budget=64", {BUDGET: 64}, {1: 240.0})]
    base = _point("DFLASH", {}, {1: 210.0, 8: 1000.0}, kind="baseline")
    out = plot_png(_result(pts, base), tmp_path / "t.png")
    assert out.read_bytes()[:4] == b"\x89PNG"
    ax = seen["fig"].axes[0]
    lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}
    assert lines["concurrency 1"] == ([16.0, 64.0], [200.0, 240.0])
    assert lines["concurrency 8"] == ([16.0], [900.0])  # budget 64 has no run at 8: no point drawn
    assert lines["baseline (DFLASH), 1"][1] == [210.0, 210.0]
    assert ax.get_xlabel() == "DDTREE budget"
    real_close(seen["fig"])


def test_points_without_a_budget_are_placed_in_sweep_order():
    pts = [_point("steps=3", {"speculative-num-steps": 3}, {1: 1.0}), _point("steps=5", {"speculative-num-steps": 5},
                                                                             {1: 2.0})]
    assert _x(_result(pts)) == ([0.0, 1.0], ["steps=3", "steps=5"], "point")


def test_nothing_measured_is_a_clear_error(tmp_path):
    failed = PointResult(key="k", label="budget=48", kind="point", flags={BUDGET: 48}, status="failed")
    with pytest.raises(UsageError, match="nothing to plot"):
        plot_png(_result([failed]), tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()


# -- --plot-terminal -----------------------------------------------------------------------------------------
def _sweep():
    pts = [_point("budget=16", {BUDGET: 16}, {1: 200.0, 8: 900.0}),
           _point("budget=64", {BUDGET: 64}, {1: 240.0})]
    return _result(pts, _point("DFLASH", {}, {1: 210.0, 8: 1000.0}, kind="baseline"))


def test_terminal_plot_draws_each_concurrency_its_baseline_and_a_legend():
    pytest.importorskip("plotext")
    from ddtctl.tune.plot import plot_terminal

    text = plot_terminal(_sweep(), width=80, height=20)
    lines = text.splitlines()
    assert "ddtctl tune lo: p.yaml" in lines[0] and "DDTREE budget" in text and "output tokens/s" in text
    assert lines[-1] == "o concurrency 1   - baseline (DFLASH), 1   x concurrency 8   = baseline (DFLASH), 8"
    assert "\x1b[" not in text  # no colour codes unless asked
    y_ticks = [float(ln.split("┤")[0]) for ln in lines if "┤" in ln]
    assert max(y_ticks) == 1000.0 and min(y_ticks) == 200.0  # the figures' range
    x_ticks = next(ln for ln in lines if ln.strip().startswith("16"))
    assert x_ticks.split() == ["16", "64"]
    canvas = [re.split("[┤│]", ln, maxsplit=1)[1].rstrip("│") for ln in lines[2:-4]]
    assert canvas[0].strip("=") == ""  # 1000 (the baseline at 8) is the top row, all across
    assert canvas[2].startswith("x") and canvas[2].strip("x ") == ""  # 900: budget 16 at 8, alone on its row
    assert canvas[-1].strip("-") == ""  # 200 and 210 share the bottom row: the baseline at 1 drawn over it
    assert sum("=" * 20 in ln for ln in lines) == 1 and sum("-" * 20 in ln for ln in lines) == 1


def test_terminal_plot_with_nothing_measured_is_a_clear_error():
    from ddtctl.tune.plot import plot_terminal

    failed = PointResult(key="k", label="budget=48", kind="point", flags={BUDGET: 48}, status="failed")
    with pytest.raises(UsageError, match="nothing to plot"):
        plot_terminal(_result([failed]))


@pytest.mark.parametrize("module, option", [("plotext", "--plot-terminal"), ("matplotlib", "--plot")])
def test_a_missing_plot_library_names_the_extra_before_the_sweep(monkeypatch, module, option):
    from ddtctl.tune.plot import check_extras

    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: `import` raises ImportError
    with pytest.raises(UsageError) as err:
        check_extras(png=option == "--plot", terminal=option == "--plot-terminal")
    assert err.value.one_line().count("\n") == 0
    assert f"{option} needs {module}, which is not installed" in err.value.one_line()
    assert "pip install 'ddtctl[plot]'" in err.value.one_line()
    check_extras(png=False, terminal=False)  # nothing asked: nothing needed


def _repeated(label, flags, runs, kind="point"):
    """A point measured several times at concurrency 1 (--repeats): tokens/s of each run."""
    return PointResult(key=label, label=label, kind=kind, flags=flags, status="ok",
                       runs=[BenchRun(1, True, output_tps=v, repeat=i) for i, v in enumerate(runs)])


def test_png_has_min_max_error_bars_and_a_baseline_band_with_repeats(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Polygon, Rectangle

    seen = {}
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: seen.setdefault("fig", fig) and None)
    pts = [_repeated("budget=16", {BUDGET: 16}, [200.0, 190.0, 230.0]),
           _repeated("budget=64", {BUDGET: 64}, [240.0]),  # measured once: no bar
           _repeated("budget=32", {BUDGET: 32}, [250.0, 260.0, 245.0])]
    base = _repeated("DFLASH", {}, [210.0, 205.0, 220.0], kind="baseline")
    res = _result(pts, base)
    res.concurrencies = [1]
    plot_png(res, tmp_path / "t.png")
    ax = seen["fig"].axes[0]
    lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}
    assert lines["concurrency 1"] == ([16.0, 64.0, 32.0], [200.0, 240.0, 250.0])  # the medians
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 1
    segments = sorted((float(s[0][0]), float(s[0][1]), float(s[1][1])) for s in bars[0].get_segments())
    assert segments == [(16.0, 190.0, 230.0), (32.0, 245.0, 260.0)]  # min..max at each repeated point
    bands = [p for p in ax.patches if isinstance(p, (Polygon, Rectangle)) and p.get_alpha() == 0.12]
    assert len(bands) == 1
    band = bands[0]  # (a Rectangle from matplotlib 3.9, a Polygon before), in data y
    spans = [band.get_y(), band.get_y() + band.get_height()] if isinstance(band, Rectangle) else band.get_xy()[:, 1]
    ys = sorted({round(float(y), 6) for y in spans})
    assert ys == [205.0, 220.0]  # the baseline's min..max
    real_close(seen["fig"])


def test_png_without_repeats_has_no_error_bars(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen = {}
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: seen.setdefault("fig", fig) and None)
    plot_png(_sweep(), tmp_path / "t.png")
    ax = seen["fig"].axes[0]
    assert not ax.collections and not ax.patches
    real_close(seen["fig"])


def test_terminal_plot_draws_each_repeated_points_min_max_as_a_bar():
    pytest.importorskip("plotext")
    from ddtctl.tune.plot import plot_terminal

    pts = [_repeated("budget=16", {BUDGET: 16}, [200.0, 150.0, 250.0]),  # 150..250: a tall bar
           _repeated("budget=64", {BUDGET: 64}, [240.0])]  # once: no bar
    res = _result(pts)
    res.concurrencies = [1]
    text = plot_terminal(res, width=60, height=20)
    lines = text.splitlines()
    assert lines[-1] == "o concurrency 1   | min..max of the runs"
    canvas = [re.split("[┤│]", ln, maxsplit=1)[1].rstrip("│") for ln in lines[2:-4]]
    bar_rows = [row for row in canvas if row.startswith("|")]  # budget 16 is the leftmost column
    assert len(bar_rows) >= len(canvas) - 2  # from the bottom (150) to the top (250) of the plot
    assert not any("|" in row[1:] for row in canvas)  # no bar at budget 64
    plain = plot_terminal(_sweep(), width=60, height=20)
    assert "min..max" not in plain and "|" not in "".join(plain.splitlines()[2:-4]).replace("│", "")
