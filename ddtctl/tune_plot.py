"""`ddtctl tune --plot FILE.png`: output tokens/s against the swept budget (or the point), one line per concurrency,
the baseline as a dashed line of the same colour. matplotlib is imported only here, with the Agg backend (no display
needed)."""

from __future__ import annotations

from pathlib import Path

from ddtctl.errors import UsageError
from ddtctl.tune import TuneResult

BUDGET_FLAG = "speculative-ddtree-budget"


def _x(result: TuneResult) -> tuple[list[float], list[str], str]:
    """Positions and tick labels of the measured points: the DDTREE budget when every point sets one, else the
    points in sweep order."""
    pts = [p for p in result.points if p.runs]
    budgets = [p.flags.get(BUDGET_FLAG) for p in pts]
    if pts and all(isinstance(b, int) for b in budgets) and len(set(budgets)) == len(budgets):
        return [float(b) for b in budgets], [str(b) for b in budgets], "DDTREE budget"  # type: ignore[arg-type]
    return [float(i) for i in range(len(pts))], [p.label for p in pts], "point"


def plot_png(result: TuneResult, path: str | Path) -> Path:
    measured = [p for p in result.points if any(r.ok for r in p.runs)]
    if not measured:
        raise UsageError("nothing to plot: no point of the sweep was measured", fix="see the table for why")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs, labels, xlabel = _x(result)
    pts = [p for p in result.points if p.runs]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, c in enumerate(result.concurrencies):
        color = f"C{i}"
        ys = [p.tps(c) for p in pts]
        ax.plot([x for x, y in zip(xs, ys, strict=True) if y is not None], [y for y in ys if y is not None],
                marker="o", color=color, label=f"concurrency {c}")
        base = result.baseline.tps(c) if result.baseline else None
        if base is not None:
            ax.axhline(base, color=color, linestyle="--", linewidth=1, label=f"baseline ({result.baseline.label}), {c}")
    ax.set_xticks(xs, labels, rotation=30 if xlabel == "point" else 0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"ddtctl tune {result.host}: {Path(result.profile).name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
