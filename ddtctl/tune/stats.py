"""`ddtctl tune --repeats N`: the run-to-run spread of a point's figures, and whether the winner is ahead.

One short benchmark run per point is noisy: on an H200 two runs of the same sweep put a budget at 1.09x, then
0.87x the baseline. With N runs per (point, concurrency) a point's figure is the median of its runs and its
spread their min..max range. The winner (best median) is distinguishable from a rival (the runner-up, the
baseline) only when their ranges do not overlap; with one run per point the spread is unknown.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from ddtctl.errors import Inconclusive

if TYPE_CHECKING:
    from ddtctl.tune.results import TuneResult

MORE_RUNS = "run with more --repeats or --num-prompts"


@dataclass(frozen=True)
class Spread:
    """The output tokens/s of one (point, concurrency) over its runs."""

    n: int
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float]) -> "Spread | None":
        vals = [float(v) for v in values]
        if not vals:
            return None
        return cls(len(vals), float(statistics.median(vals)), min(vals), max(vals))

    @property
    def half_range(self) -> float:
        """Half the min..max range relative to the median (0.04: the table's `±4%`)."""
        return (self.high - self.low) / 2 / self.median if self.median else 0.0

    def overlaps(self, other: "Spread") -> bool:
        return self.low <= other.high and other.low <= self.high

    def to_json(self) -> dict:
        return {
            "n": self.n,
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "half_range": round(self.half_range, 6),
        }


def median_of(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


@dataclass
class Verdict:
    """Whether the winner at the chosen concurrency is ahead of the runner-up and the baseline beyond the
    run-to-run spread.

    The overlap fields are None when that is unknown: one run behind a figure, or no such rival."""

    concurrency: int
    winner: str
    runs: int  # the fewest runs behind the figures compared
    ratio: float | None  # the winner's median over the baseline's
    runner_up: str | None = None
    runner_up_overlaps: bool | None = None
    baseline_overlaps: bool | None = None
    beats_baseline: bool | None = None  # the winner's range wholly above the baseline's

    @property
    def spread_known(self) -> bool:
        return self.runs >= 2

    @property
    def clear(self) -> bool:
        """Ahead of the runner-up and of the baseline (those there are, one at least) beyond the spread."""
        return (
            self.spread_known
            and (self.runner_up is not None or self.beats_baseline is True)
            and not self.runner_up_overlaps
            and not self.baseline_overlaps
            and self.beats_baseline is not False
        )

    def message(self) -> str:
        head = f"winner {self.winner}" + (f" {self.ratio:.2f}x the baseline" if self.ratio else "")
        if not self.spread_known:
            return (
                f"{head}; the run-to-run spread is unknown with one run per point: run with --repeats 3 "
                "to know whether the winner is real"
            )
        close = [self.runner_up] if self.runner_up_overlaps and self.runner_up else []
        close += ["the baseline"] if self.baseline_overlaps else []
        if close:
            return f"{head}, but within the run-to-run spread of {' and of '.join(close)}: {MORE_RUNS}"
        if self.beats_baseline is False:
            return f"{head}: slower than the baseline beyond the run-to-run spread ({self.runs} runs each)"
        rivals = [r for r in (self.runner_up, "the baseline" if self.beats_baseline else None) if r]
        if not rivals:
            return f"{head}: the only point measured, and no baseline to compare it with"
        rivals_text = " and of ".join(rivals)
        return f"{head}: ahead of {rivals_text} beyond the run-to-run spread ({self.runs} runs each)"

    def to_json(self) -> dict:
        return dict(self.__dict__, spread_known=self.spread_known, clear=self.clear, message=self.message())


def verdict(result: "TuneResult") -> Verdict | None:
    """The verdict on result.winner at result.concurrency (None without a winner)."""
    c, winner = result.concurrency, result.winner
    w = winner.spread(c) if winner else None
    if winner is None or w is None:
        return None
    rivals = [p for p in result.points if p is not winner and p.spread(c) is not None]
    runner_up = max(rivals, key=lambda p: p.spread(c).median) if rivals else None  # type: ignore[union-attr]
    r = runner_up.spread(c) if runner_up else None
    b = result.baseline.spread(c) if result.baseline else None
    runs = min(s.n for s in (w, r, b) if s is not None)
    out = Verdict(c, winner.label, runs, result.winner_ratio, runner_up.label if runner_up else None)
    if runs >= 2:
        out.runner_up_overlaps = w.overlaps(r) if r else None
        out.baseline_overlaps = w.overlaps(b) if b else None
        out.beats_baseline = w.low > b.high if b else None
    return out


def write_refusal(v: Verdict | None) -> Inconclusive | None:
    """Why `--write` must not put the winner into the profile: it is not ahead of the baseline beyond the
    run-to-run spread (with one run per point that is unknown: the write goes on, the footer says so)."""
    if v is None or v.beats_baseline is not False:
        return None
    why = (
        "within the run-to-run spread of the baseline"
        if v.baseline_overlaps
        else "slower than the baseline beyond the run-to-run spread"
    )
    return Inconclusive(
        f"--write refused: the winner {v.winner} is {why} at concurrency {v.concurrency} "
        f"({v.runs} runs each)",
        fix=f"{MORE_RUNS}, or pass --write-anyway",
    )
