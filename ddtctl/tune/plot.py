"""`ddtctl tune --plot FILE.png` and `--plot-terminal`: output tokens/s against the swept budget (or the
point), one line per concurrency, the baseline as a dashed line; where a figure is the median of several runs
(--repeats), min..max error bars (the PNG adds a band for the baseline's range). The PNG is drawn with
matplotlib (Agg backend, no display needed), the terminal plot with plotext; both come with the `plot`
extra and are imported only here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.safeio import write_bytes_new
from ddtctl.tune.results import TuneResult
from ddtctl.tune.stats import Spread

BUDGET_FLAG = "speculative-ddtree-budget"
LINE_MARKERS = "ox+*#@"  # the terminal plot: one per concurrency
BASE_MARKERS = "-=~:"  # and its baseline
RANGE_MARKER = "|"  # a point's min..max over its runs (--repeats)


def _x(result: TuneResult) -> tuple[list[float], list[str], str]:
    """Positions and tick labels of the measured points: the DDTREE budget when every point sets one, else the
    points in sweep order."""
    pts = [p for p in result.points if p.runs]
    budgets = [p.flags.get(BUDGET_FLAG) for p in pts]
    int_budgets = [b for b in budgets if isinstance(b, int)]
    if pts and len(int_budgets) == len(budgets) and len(set(int_budgets)) == len(int_budgets):
        return [float(b) for b in int_budgets], [str(b) for b in int_budgets], "DDTREE budget"
    return [float(i) for i in range(len(pts))], [p.label for p in pts], "point"


def _require(module: str, option: str) -> Any:
    """Import an optional plotting library, or say in one line which extra brings it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"{option} needs {module}, which is not installed",
            fix="pip install 'ddtctl[plot]' (the plot extra)",
        ) from None


def check_extras(*, png: bool, terminal: bool) -> None:
    """Fail before a sweep, not after it, when a plot was asked for and its library is missing."""
    if png:
        _require("matplotlib", "--plot")
    if terminal:
        _require("plotext", "--plot-terminal")


def _check_measured(result: TuneResult) -> None:
    if not any(any(r.ok for r in p.runs) for p in result.points):
        raise UsageError("nothing to plot: no point of the sweep was measured", fix="see the table for why")


def _baseline_label(result: TuneResult, concurrency: int) -> str:
    label = result.baseline.label if result.baseline else "baseline"
    return f"{label if label.startswith('baseline') else f'baseline ({label})'}, {concurrency}"


def _title(result: TuneResult) -> str:
    return f"ddtctl tune {result.host}: {Path(result.profile).name}"


def plot_terminal(result: TuneResult, width: int = 100, height: int = 24, *, color: bool = False) -> str:
    """The same plot as plot_png, as text for a terminal: one marker per concurrency, the baselines as flat
    lines, and the legend underneath (plotext's own legend would cover the lines)."""
    _check_measured(result)
    plotext = _require("plotext", "--plot-terminal")
    fig = plotext.figure
    fig.clear()
    fig.plot_size(width, height)
    xs, labels, xlabel = _x(result)
    pts = [p for p in result.points if p.runs]
    legend = []
    ranged = False
    for i, c in enumerate(result.concurrencies):
        marker, base_marker = LINE_MARKERS[i % len(LINE_MARKERS)], BASE_MARKERS[i % len(BASE_MARKERS)]
        drawn = [(x, y) for x, y in zip(xs, (p.tps(c) for p in pts), strict=True) if y is not None]
        if drawn:
            fig.draw(fig.signal([x for x, _ in drawn], [y for _, y in drawn], marker=marker).lines(True))
            legend.append(f"{marker} concurrency {c}")
        for x, s in _repeated(xs, pts, c):  # the min..max of its runs
            fig.draw(fig.segment([x, x], [s.low, s.high], marker=RANGE_MARKER))
            ranged = True
        base = result.baseline.tps(c) if result.baseline else None
        if base is not None:
            fig.draw(fig.signal([min(xs), max(xs)], [base, base], marker=base_marker).lines(True))
            legend.append(f"{base_marker} {_baseline_label(result, c)}")
    if ranged:
        legend.append(f"{RANGE_MARKER} min..max of the runs")
    fig.ruler("x").ticks(xs, labels)
    fig.title(_title(result))
    fig.label(xlabel, axis="x")
    fig.label("output tokens/s", axis="y")
    text = fig.build().string(colorless=not color)
    fig.clear()
    return text.rstrip() + "\n" + "   ".join(legend) + "\n"


def _repeated(xs: list[float], pts: list, concurrency: int) -> list[tuple[float, Spread]]:
    """(x, spread) of the points measured more than once at that concurrency (--repeats)."""
    return [(x, s) for x, p in zip(xs, pts, strict=True) if (s := p.spread(concurrency)) and s.n > 1]


def _error_bars(ax: Any, xs: list[float], pts: list, concurrency: int, color: str) -> None:
    """min..max bars around the medians of the points measured more than once (--repeats)."""
    spreads = _repeated(xs, pts, concurrency)
    if spreads:
        ax.errorbar(
            [x for x, _ in spreads],
            [s.median for _, s in spreads],
            yerr=[[s.median - s.low for _, s in spreads], [s.high - s.median for _, s in spreads]],
            fmt="none",
            ecolor=color,
            capsize=3,
        )


def plot_png(result: TuneResult, path: str | Path) -> Path:
    _check_measured(result)
    matplotlib = _require("matplotlib", "--plot")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs, labels, xlabel = _x(result)
    pts = [p for p in result.points if p.runs]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, c in enumerate(result.concurrencies):
        color = f"C{i}"
        ys = [p.tps(c) for p in pts]
        ax.plot(
            [x for x, y in zip(xs, ys, strict=True) if y is not None],
            [y for y in ys if y is not None],
            marker="o",
            color=color,
            label=f"concurrency {c}",
        )
        _error_bars(ax, xs, pts, c, color)
        base = result.baseline.spread(c) if result.baseline else None
        if base is not None:
            label = _baseline_label(result, c)
            ax.axhline(base.median, color=color, linestyle="--", linewidth=1, label=label)
            if base.n > 1:  # the baseline's min..max range, as a band
                ax.axhspan(base.low, base.high, color=color, alpha=0.12, linewidth=0)
    ax.set_xticks(xs, labels, rotation=30 if xlabel == "point" else 0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("output tokens/s")
    ax.set_title(_title(result))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    import io

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    return write_bytes_new(path, png.getvalue())  # a regular file or a new name only (issue #31)
