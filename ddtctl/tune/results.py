"""What `ddtctl tune` measured: a point's benchmark runs (several per concurrency with --repeats), the sweep's
result, and the JSON-lines results file (one line per point, appended as soon as the point is done).

A results file written before --repeats holds one run per concurrency and no `repeat` field; it loads as a
point measured once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.safeio import append_text, check_output, loads_json, read_regular
from ddtctl.tune.bench import BenchRun
from ddtctl.tune.schedule import budget_schedule
from ddtctl.tune.stats import Spread, median_of, verdict


@dataclass
class PointResult:
    key: str
    label: str
    kind: str  # baseline | point
    flags: dict[str, Any]  # the flags this point sets (None = unset)
    status: str  # ok | invalid | failed
    rules: list[str] = field(default_factory=list)  # invalid: the rule ids that rejected it
    error: str | None = None
    release: str | None = None
    runs: list[BenchRun] = field(default_factory=list)  # every run, --repeats of them per concurrency
    server_metrics: dict | None = (
        None  # /get_server_info internal state (avg_spec_accept_length, ddtree: [...])
    )
    argv: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    resumed: bool = False  # read back from the results file, not run now

    def runs_at(self, concurrency: int) -> list[BenchRun]:
        """The successful runs at that concurrency."""
        return [r for r in self.runs if r.concurrency == concurrency and r.ok]

    def run_at(self, concurrency: int) -> BenchRun | None:
        """The figures at that concurrency: the run itself when there is one, else each figure's median."""
        runs = self.runs_at(concurrency)
        if len(runs) <= 1:
            return runs[0] if runs else None

        def med(name: str) -> float | None:
            return median_of(getattr(r, name) for r in runs)

        return BenchRun(
            concurrency,
            True,
            output_tps=med("output_tps"),
            ttft_ms=med("ttft_ms"),
            itl_p50_ms=med("itl_p50_ms"),
            itl_p99_ms=med("itl_p99_ms"),
            accept_length=med("accept_length"),
            completed=runs[0].completed,
        )

    def spread(self, concurrency: int) -> Spread | None:
        """The output tokens/s at that concurrency over the runs (median, min, max)."""
        return Spread.of(r.output_tps for r in self.runs_at(concurrency) if r.output_tps is not None)

    def tps(self, concurrency: int) -> float | None:
        s = self.spread(concurrency)
        return s.median if s else None

    def repeats(self, concurrencies: list[int]) -> int:
        """The fewest successful runs at any of those concurrencies."""
        return min((len(self.runs_at(c)) for c in concurrencies), default=0)

    def to_json(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("runs", "resumed")}
        d["runs"] = [r.to_json() for r in self.runs]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "PointResult":
        kw: dict[str, Any] = {
            k: d.get(k) for k in cls.__dataclass_fields__ if k not in ("runs", "resumed") and k in d
        }
        return cls(**kw, runs=[BenchRun.from_json(r) for r in d.get("runs") or []], resumed=True)


@dataclass
class TuneResult:
    host: str
    profile: str
    algorithm: str | None
    concurrency: int  # the concurrency the winner is chosen at
    concurrencies: list[int]
    baseline: PointResult | None
    points: list[PointResult]
    winner: PointResult | None
    results_path: str
    start_release: str | None
    end_release: str | None = None
    restored: bool = False  # the host is back on start_release (or stopped, when it had none)
    kept_best: bool = False
    restore_error: str | None = None
    elapsed_s: float = 0.0
    run_id: str | None = None  # the tune run: its sweep points' releases and results-file lines name it
    aborted: bool = False  # the restart of the serving host was not confirmed: nothing ran, nothing changed
    deployed: bool = False  # the profile the winner was written into serves as a release (--write --deploy)
    deploy_error: str | None = None  # that deploy failed: the host went back to its starting release
    replotted: bool = False  # read back from a results file (--replot), not measured: no host involved

    def ratio(self, point: PointResult, concurrency: int | None = None) -> float | None:
        c = self.concurrency if concurrency is None else concurrency
        base = self.baseline.tps(c) if self.baseline else None
        tps = point.tps(c)
        return tps / base if tps is not None and base else None

    def best_at(self, concurrency: int) -> PointResult | None:
        """The measured point (baseline excluded) with the highest median output tokens/s there."""
        ranked = [p for p in self.points if p.tps(concurrency) is not None]
        return max(ranked, key=lambda p: p.tps(concurrency) or 0.0) if ranked else None

    @property
    def winner_ratio(self) -> float | None:
        return self.ratio(self.winner) if self.winner else None

    @property
    def ok(self) -> bool:
        return self.winner is not None and self.restore_error is None

    def _point_json(self, point: PointResult) -> dict:
        stats = {str(c): s.to_json() for c in self.concurrencies if (s := point.spread(c)) is not None}
        return dict(point.to_json(), stats=stats)

    def to_json(self) -> dict:

        v = verdict(self)
        return {
            "host": self.host,
            "profile": self.profile,
            "algorithm": self.algorithm,
            "concurrency": self.concurrency,
            "concurrencies": self.concurrencies,
            "baseline": self._point_json(self.baseline) if self.baseline else None,
            "points": [
                dict(
                    self._point_json(p),
                    resumed=p.resumed,
                    ratio={str(c): self.ratio(p, c) for c in self.concurrencies},
                )
                for p in self.points
            ],
            "winner": self._point_json(self.winner) if self.winner else None,
            "winner_ratio": self.winner_ratio,
            "budget_schedule": budget_schedule(self),
            "verdict": v.to_json() if v else None,
            "results_path": self.results_path,
            "start_release": self.start_release,
            "end_release": self.end_release,
            "restored": self.restored,
            "kept_best": self.kept_best,
            "restore_error": self.restore_error,
            "elapsed_s": round(self.elapsed_s, 3),
            "run_id": self.run_id,
            "aborted": self.aborted,
            "deployed": self.deployed,
            "deploy_error": self.deploy_error,
            "replotted": self.replotted,
        }


RESULTS_MAX_BYTES = 256 << 20  # a sweep writes ~2 KiB a point


def _records(path: str | Path) -> list[dict]:
    """The results file's records in file order (torn, deep or garbled lines left out); none for a missing
    file."""
    check_output(path, what="tune results")  # appended to after each point: a FIFO or device is refused now
    try:
        raw = read_regular(path, RESULTS_MAX_BYTES, what="tune results")
    except UsageError as err:
        if err.message == "no such file":
            return []
        raise
    out = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            d = loads_json(line, where=str(path))
        except UsageError:  # a torn, deep or garbled line
            continue
        if isinstance(d, dict) and isinstance(d.get("key"), str) and d["key"]:
            out.append(d)
    return out


def _point(d: dict) -> PointResult | None:
    try:
        return PointResult.from_json(d)
    except (TypeError, ValueError, AttributeError, KeyError):  # not a record this file holds: redo it
        return None


def read_results(path: str | Path) -> dict[str, PointResult]:
    """The points already in a results file, by key (the last line of a key wins; torn lines are ignored)."""
    out: dict[str, PointResult] = {}
    for d in _records(path):
        point = _point(d)
        if point is not None:
            out[d["key"]] = point
    return out


def replot_result(
    path: str | Path, *, host: str | None = None, profile: str | None = None, at: int | None = None
) -> TuneResult:
    """`tune --replot FILE`: the sweep a results file holds, as a TuneResult to print and plot (no host is
    reached). The records of one host and profile (`host` / `profile` pick them when the file holds several);
    per point label its latest record, in the order the points first appear; the winner at `at` (default: the
    lowest concurrency measured)."""
    if not Path(path).exists():
        raise UsageError(
            "no such file", where=str(path), fix="give the results file a sweep wrote (--results)"
        )
    recs = [
        d
        for d in _records(path)
        if (host is None or d.get("host") == host) and (profile is None or _same_profile(d, profile))
    ]
    pairs = list(dict.fromkeys((str(d.get("host")), str(d.get("profile"))) for d in recs))
    if not pairs:
        picked = " of " + " and ".join(x for x in (host, profile) if x) if host or profile else ""
        raise UsageError(f"the results file holds no sweep{picked}", where=str(path))
    if len(pairs) > 1:
        raise UsageError(
            f"the results file holds {len(pairs)} sweeps ({', '.join(f'{h}: {p}' for h, p in pairs)})",
            where=str(path),
            fix="name one: ddtctl tune HOST --profile PROFILE --replot FILE",
        )
    latest: dict[str, PointResult] = {}
    for d in recs:
        point = _point(d)
        if point is not None:
            latest[point.label] = point
    concs = sorted({r.concurrency for p in latest.values() for r in p.runs if r.ok})
    chosen = at if at is not None else (concs[0] if concs else 1)
    if concs and chosen not in concs:
        raise UsageError(f"--at {chosen}: the file has concurrencies {concs}", where=str(path))
    base = [p for p in latest.values() if p.kind == "baseline"]
    points = [p for p in latest.values() if p.kind != "baseline"]
    result = TuneResult(
        pairs[0][0],
        pairs[0][1],
        _algorithm(points),
        chosen,
        concs,
        base[-1] if base else None,
        points,
        None,
        str(path),
        None,
        replotted=True,
    )
    result.winner = result.best_at(chosen)
    return result


def _same_profile(record: dict, profile: str) -> bool:
    """The record's profile is `profile`: the same path, or the same file name (the sweep ran elsewhere)."""
    recorded = str(record.get("profile"))
    return recorded == profile or Path(recorded).name == Path(profile).name


def _algorithm(points: list[PointResult]) -> str | None:
    """The speculative algorithm of the sweep's points (their launch argv), for the budget schedule."""
    for p in points:
        argv = p.argv
        for i, a in enumerate(argv):
            if a == "--speculative-algorithm" and i + 1 < len(argv):
                return argv[i + 1].upper()
            if a.startswith("--speculative-algorithm="):
                return a.split("=", 1)[1].upper()
    return None


def append_result(
    path: str | Path, host: str, profile: str, point: PointResult, *, run: str | None = None
) -> None:
    record = dict(point.to_json(), host=host, profile=profile, time=time.time())
    if run:
        record["run"] = run  # the tune run (its sweep points' releases name it too)
    line = json.dumps(record, default=str)
    append_text(path, line + "\n")
