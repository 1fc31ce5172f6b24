"""`ddtctl tune`'s sweep (the package's main loop; its public face is ddtctl/tune/__init__.py).

For each point of a search space (DDTREE: budget x topk cap; DFLASH: block size; EAGLE: steps x topk x draft
tokens; or any flags, and `env.NAME` variables of the profile's `env:`, from a `--space` YAML), after a
baseline point (the same profile with DFLASH, or without speculative decoding, and the profile's own env):
build the point's profile in memory (ddtctl.tune.space.Variant: no file), render it, validate it
statically (invalid points are skipped with their rule ids), deploy it with ddtctl.deploy (preflight, remote
dry-run, warm-up, launch, health; a point that fails is recorded and the sweep goes on), run SGLang's own
benchmark (`python -m sglang.benchmark.serving`, through the agent's `bench` operation: ddtctl.tune.bench) on
the host against the server at each concurrency (`repeats` times in the same server life; the figures are
their medians, their spread says whether the winner is real: ddtctl.tune.stats), and read the server's
/get_server_info (DDTREE's own metrics). Each point is appended to a local JSON-lines results file as soon as
it is done; a re-run skips the points already there (unless measured with fewer runs than `repeats` asks).
Every point deploys as a release of kind `sweep` (with the run's id): never a rollback target, pruned first.
At the end the host is put back on the release it started from (ddtctl.deploy.rollback), or serves the
winner: the profile `finish_with` wrote it into, deployed as a release (`tune --write --deploy`), or its sweep
point (`keep_best`, deprecated).

Nothing here prints: `tune()` returns a TuneResult and reports progress through callbacks.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ddtctl.errors import DdtctlError, ProfileError, UsageError
from ddtctl.profile import LoadedProfile, load_profile, read_profile_document
from ddtctl.render import render_argv
from ddtctl.tune.bench import (
    DEFAULT_BENCH,
    MIN_OUTPUT_LEN,
    BenchRun,
    Prompts,
    api_key,
    bench_argv,
    load_prompts,
    run_bench,
    server_metrics,
)
from ddtctl.tune.results import PointResult, TuneResult, append_result, read_results
from ddtctl.tune.space import (
    PointSpec,
    Variant,
    baseline_point,
    default_space,
    point_env,
    points_of,
    variant_data,
    variant_profile,
)
from ddtctl.validate import validate_document

DEFAULT_CONCURRENCY = (1, 8)


# ----------------------------------------------------------------------------------------------- options
@dataclass
class TuneOptions:
    space: dict[str, list[Any]] | None = None  # None: the algorithm's default space
    baseline: str = (
        "auto"  # auto (DDTREE -> dflash, else none) | dflash | none (no speculative decoding) | off
    )
    concurrencies: list[int] = field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    winner_concurrency: int | None = None  # default: the lowest
    num_prompts: int = 64
    repeats: int = 1  # benchmark runs per (point, concurrency) in one server life; the figure is their median
    warmup: bool = False  # one more run per concurrency before the repeats, not recorded
    input_len: int = 512
    output_len: int = 256
    seed: int = 1
    bench_cmd: list[str] | None = (
        None  # default [{python}, -m, sglang.benchmark.serving]; {python}: the host's
    )
    prompts_file: str | None = None  # the user's prompts (JSON lines or ShareGPT JSON) instead of random ones
    bench_timeout_s: float = 1800.0
    results_path: str | None = None  # default: <profile>.tune.jsonl next to the profile
    keep_best: bool = False
    payload_dir: str | None = (
        None  # the DDTREE payload (default: built, as deploy does), shipped for every point
    )
    remote_dry_run: bool = True
    health_timeout_s: float | None = None
    health_interval_s: float = 0.5
    stop_grace_s: float = 20.0
    lock_wait_s: float = 0.0
    trust_new_host: bool = False
    on_event: Callable[[Any], None] | None = None  # deploy events (ddtctl.deploy.Event)
    on_point: Callable[[int, int, "PointResult"], None] | None = (
        None  # (index, total, result) after each point
    )
    on_start: Callable[[int, "PointSpec"], None] | None = None  # (index, point) before each point
    # before the first deploy, when a server of ours runs on the host (its HostStatus): go on? (None: yes)
    confirm: Callable[[Any], bool] | None = None
    # once the sweep is done, before the host is restored: the profile the winner was written into, to deploy
    # as a release instead of restoring the starting one (None: restore); `tune --write --deploy`
    finish_with: Callable[["TuneResult"], str | None] | None = None


def _point_key(
    host: str,
    argv: list[str],
    opts: TuneOptions,
    prompts: Prompts | None,
    env: dict[str, str | None] | None = None,
) -> str:
    """The resume key of a point: its launch argv, host, benchmark settings and the environment its space sets
    (`env`, only when there is one, so that a flag-only point keeps the key it had before env keys)."""
    bench = {
        "concurrencies": sorted(opts.concurrencies),
        "num_prompts": opts.num_prompts,
        "seed": opts.seed,
        "input_len": opts.input_len,
        "output_len": opts.output_len,
    }
    if prompts is not None:  # other prompts, other figures: not a point to resume
        bench.update(prompts=prompts.sha256, input_len=None)
    fields: dict[str, Any] = {"host": host, "argv": argv, "bench": bench}
    if env:
        fields["env"] = env
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------- the sweep
@dataclass
class _Sweep:
    """What every point of one sweep shares."""

    host: Any  # ddtctl.remote.inventory.Host
    opts: TuneOptions
    payload_dir: str | None
    bench_cmd: list[str]
    concs: list[int]
    prompts: Prompts | None
    dopts: dict  # the DeployOptions of every deploy
    run_id: str  # names the sweep's releases (kind sweep) and its lines of the results file

    def spec(self, loaded: LoadedProfile, label: str, *, sweep: bool = True):
        """The DeploySpec of a profile: a point's variant (in memory), tagged as a sweep point (never a
        rollback target), or (sweep=False) the profile the winner was written into, a release that says which
        run found it."""
        from ddtctl.deploy.spec import spec_from_loaded
        from ddtctl.remote.protocol import SWEEP

        spec = spec_from_loaded(loaded, host=self.host.name, payload_dir=self.payload_dir)
        spec.kind = SWEEP if sweep else spec.kind
        spec.tune = {"run": self.run_id, "point": label}
        return spec


def new_run_id() -> str:
    """A tune run's id: when it started (UTC) and a random suffix."""
    import secrets

    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def tune(profile: str, host, opts: TuneOptions | None = None) -> TuneResult:
    """Sweep the search space on `host` (a ddtctl.remote.inventory.Host) from `profile` (a path)."""
    from ddtctl.deploy import default_payload_dir, host_status, mask_argv, secret_values

    opts = opts or TuneOptions()
    t0 = time.monotonic()
    doc = read_profile_document(profile)
    server = {k: v for k, v in (doc.data.get("server") or {}).items()}
    algorithm = str(server.get("speculative-algorithm") or "").upper() or None
    space = opts.space or default_space(algorithm, server)
    base_pt = baseline_point(opts.baseline, algorithm, server)
    todo = ([base_pt] if base_pt else []) + points_of(space)
    concs, chosen, prompts = _bench_settings(opts)
    results_path = opts.results_path or str(Path(profile).with_suffix("")) + ".tune.jsonl"
    done = read_results(results_path)
    payload_dir = opts.payload_dir
    if payload_dir is None and any(
        str(variant_data(doc.data, p.flags, p.label)["server"].get("speculative-algorithm", "")).upper()
        == "DDTREE"
        for p in todo
    ):
        payload_dir = default_payload_dir(str(doc.data.get("sglang") or ""))  # one payload for every point
    start = host_status(host, trust_new_host=opts.trust_new_host, probe=False)
    result = TuneResult(
        host.name, profile, algorithm, chosen, concs, None, [], None, results_path, start.current
    )
    result.run_id = new_run_id()
    if opts.confirm is not None and (start.server or {}).get("running") and not opts.confirm(start):
        result.aborted = True  # nothing was changed
        return result
    dopts = _deploy_options(opts, len(todo))
    sw = _Sweep(
        host, opts, payload_dir, list(opts.bench_cmd or DEFAULT_BENCH), concs, prompts, dopts, result.run_id
    )
    variants: dict[str, LoadedProfile] = {}  # the points' profiles that load, in memory (keep_best's winner)
    winner_profile: str | None = None
    try:
        for i, pt in enumerate(todo):
            if opts.on_start:
                opts.on_start(i, pt)
            variant = variant_profile(doc.data, pt.flags, pt.label, profile)
            if variant.loaded is not None:
                variants[pt.label] = variant.loaded
            argv = _point_argv(variant)
            secrets = secret_values(argv, {**getattr(host, "env", {}), **(variant.data.get("env") or {})})
            argv = mask_argv(argv)  # the results file and the report never hold an --api-key
            key = _point_key(host.name, argv, opts, prompts, point_env(pt.flags))
            if key in done and _enough_runs(done[key], concs, opts.repeats):
                pr = done[key]  # the same launch argv, host and benchmark settings: not run again
                pr.label, pr.kind, pr.flags = pt.label, pt.kind, dict(pt.flags)
            else:
                pr = _run_point(sw, pt, key, argv, variant)
                _mask_point(pr, secrets)
                append_result(results_path, host.name, profile, pr, run=result.run_id)
            if pt.kind == "baseline":
                result.baseline = pr
            else:
                result.points.append(pr)
            if opts.on_point:
                opts.on_point(i, len(todo), pr)
        result.winner = result.best_at(chosen)
        winner_profile = opts.finish_with(result) if opts.finish_with else None
    finally:
        _finish(result, start, sw, variants, winner_profile)
    result.elapsed_s = time.monotonic() - t0
    return result


def _point_argv(variant: Variant) -> list[str]:
    """The point's launch argv, its resume key's part; for a variant that does not render, its flags and why
    (the validator judges it)."""
    try:
        if variant.loaded is None:
            raise variant.error or ProfileError("the profile does not load")
        return render_argv(variant.loaded.profile)
    except Exception as err:  # an unrenderable variant is judged by the validator
        return [f"{k}={v}" for k, v in sorted(variant.data["server"].items())] + [type(err).__name__]


def _deploy_options(opts: TuneOptions, points: int) -> dict:
    """The DeployOptions (as keywords) of every deploy of the sweep."""
    return dict(
        remote_dry_run=opts.remote_dry_run,
        health_interval_s=opts.health_interval_s,
        stop_grace_s=opts.stop_grace_s,
        lock_wait_s=opts.lock_wait_s,
        trust_new_host=opts.trust_new_host,
        health_timeout_s=opts.health_timeout_s,
        on_event=opts.on_event,
        keep_releases=max(5, points + 3),
    )  # the starting release must survive the sweep's gc


def _bench_settings(opts: TuneOptions) -> tuple[list[int], int, Prompts | None]:
    """The concurrency levels, the winner's level and the prompts; UsageError when they do not fit."""
    concs = sorted(set(int(c) for c in opts.concurrencies))
    if not concs or min(concs) < 1:
        raise UsageError("concurrency levels must be positive integers", fix="e.g. --concurrency 1,8")
    if opts.repeats < 1:
        raise UsageError(f"--repeats {opts.repeats}: give at least 1", fix="e.g. --repeats 3")
    chosen = opts.winner_concurrency if opts.winner_concurrency is not None else concs[0]
    if chosen not in concs:
        raise UsageError(f"the winner's concurrency {chosen} is not one of the levels run ({concs})")
    prompts = load_prompts(opts.prompts_file) if opts.prompts_file else None
    if prompts is not None and opts.output_len < MIN_OUTPUT_LEN:
        raise UsageError(
            f"--output-len {opts.output_len} is too short for a prompt file",
            fix=f"at least {MIN_OUTPUT_LEN} (SGLang's custom dataset refuses less)",
        )
    return concs, chosen, prompts


def _enough_runs(done: PointResult, concs: list[int], repeats: int) -> bool:
    """A point from the results file is used as is, unless it was measured fine but with fewer runs than
    --repeats asks now (a file from before --repeats has one): then it is measured again."""
    return done.status != "ok" or done.repeats(concs) >= repeats


def _mask_point(pr: PointResult, secrets: set[str]) -> None:
    """Secrets (the launch's --api-key, tokens in env) out of what a point's errors quote."""

    def mask(text: str | None) -> str | None:
        for secret in secrets:
            text = text.replace(secret, "***") if text else text
        return text

    pr.error = mask(pr.error)
    for run in pr.runs:
        run.error = mask(run.error)


def _run_point(sw: _Sweep, pt: PointSpec, key: str, argv: list[str], variant: Variant) -> PointResult:
    """Validate, deploy, benchmark one point (its profile in memory). Never raises for a point that is merely
    bad (LockHeld does)."""
    from ddtctl.deploy import DeployOptions, connect, deploy
    from ddtctl.remote.protocol import Probe
    from ddtctl.remote.transport import LockHeld

    t0 = time.monotonic()
    pr = PointResult(key, pt.label, pt.kind, dict(pt.flags), "invalid", argv=argv)
    try:
        if _invalid(pr, variant):
            return pr
        assert variant.loaded is not None  # a variant that does not load is invalid
        host, opts = sw.host, sw.opts
        spec = sw.spec(variant.loaded, pt.label)
        if len(spec.host_names) != 1:
            raise UsageError("tune runs on one host; this profile deploys to several", where=spec.source)
        r = deploy(spec, [host], DeployOptions(**sw.dopts))
        pr.release = r.release.get(host.name)
        if r.status == "rejected":  # the rules of the static checks that refused it, from each check's `rule`
            pr.rules = sorted({c.rule for c in r.checks if c.blocks and c.rule}) or (
                ["dry-run"] if r.dry_run is not None and not r.dry_run.accepted else ["preflight"]
            )
            pr.error = r.error
            return pr
        if r.status not in ("deployed", "unchanged"):
            pr.status, pr.error = "failed", r.error or r.status
            return pr
        target = spec.targets([host])[0]
        server_key = api_key(target.launch)  # the server checks it on the benchmark's requests
        with connect(host, trust_new_host=opts.trust_new_host) as conn:
            for c in sw.concs:
                b = bench_argv(
                    sw.bench_cmd,
                    host.python,
                    host=target.probe_host,
                    port=target.port,
                    tokenizer=spec.model_paths[0],
                    concurrency=c,
                    opts=opts,
                    prompts=sw.prompts,
                )
                pr.runs += _bench_repeats(conn, b, c, opts, sw.prompts, server_key)
            probe = conn.call(Probe(target.port, target.probe_host, lines=0), retry=True)
            pr.server_metrics = server_metrics(probe.server_info)
        bad = [r for r in pr.runs if not r.ok]
        pr.status = "ok" if not bad else "failed"
        if bad:
            pr.error = f"benchmark at concurrency {bad[0].concurrency}: {bad[0].error}"
        fallback = (pr.server_metrics or {}).get("avg_spec_accept_length")
        for run in pr.runs:
            if run.ok and run.accept_length is None and isinstance(fallback, (int, float)):
                run.accept_length = float(fallback)
        return pr
    except LockHeld:
        raise  # another deploy works on the host: stop the sweep (the host is restored)
    except DdtctlError as err:  # this point could not be deployed or measured: recorded, the sweep goes on
        pr.status, pr.error = "failed", err.one_line()
        return pr
    finally:
        pr.elapsed_s = round(time.monotonic() - t0, 3)


def _invalid(pr: PointResult, variant: Variant) -> bool:
    """Validate the point's profile document (as `ddtctl validate` checks a file); an invalid one gets its
    rule ids and messages."""
    try:
        v = validate_document(variant.document)
    except (UsageError, ProfileError) as err:  # e.g. a profile targeting an sglang release without a catalog
        pr.rules, pr.error = ["DDT000"], err.one_line()
        return True
    if v.error or not v.valid:
        pr.rules = sorted({f.rule for f in v.errors}) or ["DDT000"]
        pr.error = v.error or "; ".join(f"{f.rule}: {f.message}" for f in v.errors)[:500]
        return True
    return False


def _bench_repeats(
    conn, argv: list[str], concurrency: int, opts: TuneOptions, prompts: Prompts | None, key: str | None
) -> list[BenchRun]:
    """--repeats runs at one concurrency (after an unrecorded one with --warmup); a failed run ends them (the
    next would most likely fail the same way, each after up to the benchmark's timeout)."""
    if opts.warmup:
        run_bench(conn, argv, concurrency, opts.bench_timeout_s, prompts=prompts, key=key)
    runs: list[BenchRun] = []
    for repeat in range(opts.repeats):
        run = run_bench(conn, argv, concurrency, opts.bench_timeout_s, prompts=prompts, key=key)
        run.repeat = repeat
        runs.append(run)
        if not run.ok:
            break
    return runs


def _serving(status, release: str | None) -> bool:
    srv = status.server or {}
    return bool(release and srv.get("running") and srv.get("release") == release)


def _finish(
    result: TuneResult, start, sw: _Sweep, variants: dict[str, LoadedProfile], winner_profile: str | None
) -> None:
    """End the sweep: deploy `winner_profile` (the profile the winner was written into) as a release, or keep
    the winner's sweep point serving (keep_best), or put the host back on its starting release. A winner
    that fails to deploy leaves the host on its starting release too (deploy_error)."""
    from ddtctl.deploy import DeployOptions, deploy, host_status

    host, opts = sw.host, sw.opts
    try:
        if winner_profile is not None and result.winner is not None:
            loaded = load_profile(winner_profile)
            r = deploy(sw.spec(loaded, result.winner.label, sweep=False), [host], DeployOptions(**sw.dopts))
            if r.status in ("deployed", "unchanged"):
                result.deployed = True
            else:
                result.deploy_error = f"could not deploy the winner: {r.error or r.status}"
        if (
            not result.deployed
            and opts.keep_best
            and result.winner is not None
            and result.winner.label in variants
        ):
            r = deploy(
                sw.spec(variants[result.winner.label], result.winner.label), [host], DeployOptions(**sw.dopts)
            )
            if r.status not in ("deployed", "unchanged"):
                raise DdtctlError(f"could not keep the winner serving: {r.error or r.status}")
            result.kept_best = True
        elif not result.deployed:
            _restore(start, sw)
            result.restored = True
        result.end_release = host_status(host, trust_new_host=opts.trust_new_host, probe=False).current
    except DdtctlError as err:
        result.restore_error = err.one_line()


def _restore(start, sw: _Sweep) -> None:
    """The host back on the release it started from (serving again if it served), or stopped if it served
    nothing of ours."""
    from ddtctl.deploy import host_status, rollback, stop_server

    host, opts = sw.host, sw.opts
    now = host_status(host, trust_new_host=opts.trust_new_host, probe=False)
    was_serving = _serving(start, start.current)
    if start.current is not None and (
        now.current != start.current or (was_serving and not _serving(now, start.current))
    ):
        rb = rollback(
            host,
            start.current,
            lock_wait_s=opts.lock_wait_s,
            stop_grace_s=opts.stop_grace_s,
            health_timeout_s=opts.health_timeout_s,
            on_event=opts.on_event,
            trust_new_host=opts.trust_new_host,
            allow_sweep=True,  # a sweep point left serving by an earlier --keep-best is where it started
        )
        if not rb.ok:
            raise DdtctlError(f"rollback to {start.current}: {rb.health.message}")
        now = host_status(host, trust_new_host=opts.trust_new_host, probe=False)
    if not was_serving and (now.server or {}).get("running"):  # it served nothing of ours: stop again
        stop_server(
            host, grace_s=opts.stop_grace_s, lock_wait_s=opts.lock_wait_s, trust_new_host=opts.trust_new_host
        )
