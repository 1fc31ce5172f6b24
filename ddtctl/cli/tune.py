"""`ddtctl tune`: sweep speculative-decoding settings on a host with SGLang's own benchmark (the logic is
the ddtctl/tune/ package; this module parses, shows progress and prints)."""

from __future__ import annotations

from typing import Any

import typer

from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, stdout_console


def _concurrencies(text: str) -> list[int]:
    from ddtctl.errors import UsageError

    try:
        out = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise UsageError(
            f"--concurrency {text!r}: give comma-separated integers", fix="e.g. --concurrency 1,8"
        ) from None
    if not out or min(out) < 1:
        raise UsageError(f"--concurrency {text!r}: give positive integers", fix="e.g. --concurrency 1,8")
    return out


@app.command()
def tune(
    host: str = typer.Argument(
        None, help="Inventory host to tune on (one host); with --replot, the host whose sweep to show"
    ),
    profile: str = typer.Option(
        None, "--profile", "-p", help="Profile to tune (default: the host's profile)"
    ),
    space: str = typer.Option(
        None,
        "--space",
        help="YAML mapping flag -> list of values (default: DDTREE budget x "
        "topk cap, DFLASH block size, EAGLE steps x topk x draft tokens); an env.NAME key sweeps a variable "
        "of the profile's env: (null: unset), e.g. env.DDTREE_CONV_TREE: [sglang, compact]",
    ),
    concurrency: str = typer.Option(
        "1,8", "--concurrency", help="Benchmark concurrency levels, comma-separated"
    ),
    at: int = typer.Option(None, "--at", help="Concurrency the winner is chosen at (default: the lowest)"),
    num_prompts: int = typer.Option(64, "--num-prompts", help="Prompts per benchmark run"),
    repeats: int = typer.Option(
        1,
        "--repeats",
        help="Benchmark runs per point and concurrency, in one server life: the table shows their median "
        "and spread, and whether the winner is ahead beyond it (1: the spread is unknown)",
    ),
    warmup: bool = typer.Option(
        False, "--warmup", help="One more benchmark run per point and concurrency first, not recorded"
    ),
    input_len: int = typer.Option(512, "--input-len", help="Random dataset: input tokens per prompt"),
    output_len: int = typer.Option(256, "--output-len", help="Random dataset: output tokens per prompt"),
    seed: int = typer.Option(1, "--seed", help="Benchmark seed"),
    baseline: str = typer.Option(
        "auto",
        "--baseline",
        help="auto (DDTREE: dflash, else none), dflash, none (no speculative decoding) or off",
    ),
    results: str = typer.Option(
        None,
        "--results",
        help="JSON-lines results file, appended after each point; points "
        "already there are skipped (default: PROFILE.tune.jsonl)",
    ),
    keep_best: bool = typer.Option(
        False,
        "--keep-best",
        help="Deprecated: leave the winner's sweep point serving (not a release rollback returns to); use "
        "--write --deploy",
    ),
    deploy: bool = typer.Option(
        False,
        "--deploy",
        help="With --write: end on the winner, the written profile deployed as a release (default: the host "
        "goes back to the release it started from)",
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Do not ask before restarting the server the host runs"
    ),
    replot: str = typer.Option(
        None,
        "--replot",
        help="Re-render the table and the plots of the sweep in this results file; no host is reached "
        "(HOST and --profile pick a sweep when it holds several)",
    ),
    write: bool = typer.Option(
        False,
        "--write",
        help="Put the winner into the profile (comments kept); refused (exit 6) when, with --repeats 2 or "
        "more, the winner is not ahead of the baseline beyond the run-to-run spread",
    ),
    schedule: bool = typer.Option(
        False,
        "--schedule",
        help="With --write (DDTREE, two or more concurrencies): write the budget schedule, the fastest "
        "budget per concurrency (the DFLASH baseline as the chain), as speculative-ddtree-budget-schedule",
    ),
    write_anyway: bool = typer.Option(
        False,
        "--write-anyway",
        help="With --write: write the winner even when it is not ahead of the baseline beyond the spread",
    ),
    plot: str = typer.Option(
        None,
        "--plot",
        help="Write a PNG: tokens/s against the budget (or point), one line per "
        "concurrency, the baseline dashed; min..max error bars with --repeats",
    ),
    plot_terminal: bool = typer.Option(
        False,
        "--plot-terminal",
        help="Draw the same plot in the terminal (plotext; on stderr with --format json)",
    ),
    prompts: str = typer.Option(
        None,
        "--prompts",
        help="Prompt file for the load instead of random "
        "prompts: JSON lines or ShareGPT-style JSON, sent to the host's benchmark "
        "(--output-len fixed)",
    ),
    payload: str = options.PAYLOAD,
    bench_cmd: str = typer.Option(
        None,
        "--bench-cmd",
        help="Benchmark command on the host (default: '{python} -m sglang.benchmark.serving')",
    ),
    skip_dry_run: bool = options.SKIP_REMOTE_DRY_RUN,
    health_timeout: float = options.HEALTH_TIMEOUT,
    lock_wait: float = options.LOCK_WAIT,
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Find the speculative-decoding settings that serve fastest on HOST.

    A baseline point first (DFLASH, or no speculative decoding), then every point of the search space:
    validate, deploy (preflight, remote dry-run, launch, health), SGLang's benchmark on the host at each
    concurrency (--repeats times: the figures are medians), the server's /get_server_info. Invalid points are
    skipped with their rule ids; a point that fails to start is recorded and the sweep goes on. At the end the
    host is back on its starting release unless --keep-best. Exit 0 with a winner, 1 without one, 5 when the
    host could not be restored, 6 when --write was refused (the winner within the run-to-run spread of the
    baseline).
    """
    import shlex

    from ddtctl.errors import UsageError
    from ddtctl.remote.inventory import load_inventory, resolve_host
    from ddtctl.tune import BASELINES, TuneOptions, load_space
    from ddtctl.tune import tune as run_tune
    from ddtctl.tune.plot import check_extras

    warnings = _check_usage(host, replot=replot, write=write, deploy=deploy, keep_best=keep_best, fmt=fmt)
    check_extras(png=bool(plot), terminal=plot_terminal)
    if plot:  # refused now, not after the sweep: a FIFO, a device, a missing directory
        from ddtctl.safeio import check_output

        check_output(plot, what="plot")
    if replot:
        from ddtctl.tune.results import replot_result

        result = replot_result(replot, host=host, profile=profile, at=at)
        raise typer.Exit(
            _report(result, profile, write=False, plot=plot, plot_terminal=plot_terminal, fmt=fmt)
        )
    if baseline not in BASELINES:
        raise UsageError(f"--baseline {baseline!r}", fix=f"one of: {', '.join(BASELINES)}")
    inv = load_inventory(inventory)
    h = resolve_host(host, inv)
    if profile is None:
        profile = inv.default_profile(h)
        if not profile:
            raise UsageError(f"host {host} has no default profile", fix="pass --profile")
    opts = TuneOptions(
        space=load_space(space) if space else None,
        baseline=baseline,
        concurrencies=_concurrencies(concurrency),
        winner_concurrency=at,
        num_prompts=num_prompts,
        repeats=repeats,
        warmup=warmup,
        input_len=input_len,
        output_len=output_len,
        seed=seed,
        bench_cmd=shlex.split(bench_cmd) if bench_cmd else None,
        prompts_file=prompts,
        results_path=results,
        keep_best=keep_best,
        payload_dir=payload,
        remote_dry_run=not skip_dry_run,
        health_timeout_s=health_timeout,
        lock_wait_s=lock_wait,
        trust_new_host=trust_new_host,
    )
    writer = _Writer(profile, deploy=deploy, write_anyway=write_anyway, schedule=schedule) if write else None
    opts.finish_with = writer
    result = _run_with_progress(run_tune, profile, h, opts, yes=yes, fmt=fmt)
    raise typer.Exit(
        _report(
            result,
            profile,
            write=write,
            writer=writer,
            plot=plot,
            plot_terminal=plot_terminal,
            fmt=fmt,
            warnings=warnings,
        )
    )


def _check_usage(host, *, replot, write, deploy, keep_best, fmt) -> list[str]:
    """Combinations refused before anything runs; the deprecation warnings (on stderr, or for the JSON)."""
    import sys

    from ddtctl.errors import UsageError

    if replot:
        for option, given in (("--write", write), ("--deploy", deploy), ("--keep-best", keep_best)):
            if given:
                raise UsageError(f"{option} needs a sweep; --replot only shows one", fix=f"drop {option}")
        return []
    if host is None:
        raise UsageError(
            "tune needs a HOST",
            fix="ddtctl tune HOST --profile P (or --replot RESULTS.jsonl to show a sweep)",
        )
    if deploy and not write:
        raise UsageError(
            "--deploy deploys the profile --write puts the winner into",
            fix="ddtctl tune HOST --write --deploy",
        )
    if deploy and keep_best:
        raise UsageError("--deploy and --keep-best both pick what serves at the end", fix="drop --keep-best")
    warnings = []
    if keep_best:
        warnings.append(
            "`tune --keep-best` is deprecated: the winner serves as a sweep point, not a release rollback "
            "returns to; use `tune --write --deploy`"
        )
    if fmt != OutputFormat.json:
        sys.stderr.write("".join(f"ddtctl: warning: {w}\n" for w in warnings))
    return warnings


class _Writer:
    """tune's `finish_with` for --write: the winner (or the budget schedule) into the profile once the sweep
    is done, unless the measurement cannot back it; with --deploy, the profile to deploy then."""

    def __init__(self, profile: str, *, deploy: bool, write_anyway: bool, schedule: bool):
        self.profile, self.deploy, self.write_anyway, self.schedule = profile, deploy, write_anyway, schedule
        self.written: Any = None  # ddtctl.tune.write.WriteResult
        self.refused: Any = None  # ddtctl.errors.Inconclusive: the winner within the spread
        self.error: Any = None  # a DdtctlError of the write, raised once the host is restored

    def __call__(self, result) -> str | None:
        from ddtctl.errors import DdtctlError
        from ddtctl.tune import write_point
        from ddtctl.tune.schedule import schedule_point
        from ddtctl.tune.stats import verdict, write_refusal

        if result.winner is None:
            return None
        self.refused = None if self.write_anyway else write_refusal(verdict(result))
        if self.refused is not None:
            return None
        try:
            point = (schedule_point(result) if self.schedule else None) or result.winner
            self.written = write_point(self.profile, point)
        except DdtctlError as err:  # raised once the host is restored (as before the write moved here)
            self.error = err
            return None
        return self.written.path if self.deploy else None


def _run_with_progress(run_tune, profile: str, host, opts, *, yes: bool = True, fmt=OutputFormat.text):
    """run_tune under one progress bar over the points, each point's outcome printed above it (stderr); before
    it restarts a server the host runs, the question (unless `yes`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ddtctl.cli._app import stderr_console

    console = stderr_console()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # no bar in a pipe (nor the blank line it leaves there)
    ) as progress:
        task = progress.add_task("tune", total=None)

        def on_start(i, pt):
            progress.update(task, description=f"tune: {pt.label}")

        def on_point(i, total, pr):
            progress.update(task, total=total, completed=i + 1)
            what = (
                pr.status
                + (f" ({', '.join(pr.rules)})" if pr.rules else "")
                + (" (from the results file)" if pr.resumed else "")
            )
            progress.console.print(
                f"{pr.label}: {what}" + (f": {pr.error}" if pr.error and not pr.rules else ""), markup=False
            )

        def on_event(ev):
            if ev.level in ("ok", "error", "warn") and ev.stage in (
                "health",
                "rollback",
                "dry-run",
                "warmup",
            ):
                progress.update(task, description=f"tune: {ev.stage}: {ev.message[:60]}")

        def confirm(start) -> bool:
            if yes:
                return True
            _check_can_ask(start, fmt)
            progress.stop()  # no bar over the question
            go = _confirm_restart(start, deploy=bool(getattr(opts.finish_with, "deploy", False)))
            progress.start()
            return go

        opts.on_start, opts.on_point, opts.on_event = on_start, on_point, on_event
        opts.confirm = confirm
        return run_tune(profile, host, opts)


def _serves(start) -> str:
    srv = start.server or {}
    return f"{start.host} serves release {srv.get('release')} (pid {srv.get('pid')}, port {srv.get('port')})"


def _check_can_ask(start, fmt: OutputFormat) -> None:
    """tune restarts the server the host runs for every point: that is asked, never with --format json or
    without a terminal (a one-line error saying so)."""
    import sys

    from ddtctl.errors import UsageError

    if fmt == OutputFormat.json or not sys.stdin.isatty():
        why = "--format json does not prompt" if fmt == OutputFormat.json else "stdin is not a terminal"
        raise UsageError(
            f"tune restarts the server {_serves(start)} and needs confirmation: {why}",
            where=start.host,
            fix="pass --yes",
        )


def _confirm_restart(start, *, deploy: bool) -> bool:
    """Go on? (on a terminal)."""
    import sys

    end = "the winner, deployed from the profile" if deploy else f"release {start.current}"
    sys.stderr.write(f"{_serves(start)}: tune restarts it for every point and ends on {end}.\n")
    return typer.confirm("Go on?", default=False)


def _report(
    result,
    profile: str,
    *,
    write: bool,
    plot: str | None,
    plot_terminal: bool,
    fmt: OutputFormat,
    write_anyway: bool = False,
    schedule: bool = False,
    writer: _Writer | None = None,
    warnings: list[str] | None = None,
) -> int:
    """Write the winner (unless `writer` did, during the sweep) and the plots as asked, print the result; the
    exit code."""
    import sys

    from ddtctl.errors import ExitCode

    if result.aborted:
        return _aborted(fmt)
    if write and writer is None:
        writer = _Writer(profile, deploy=False, write_anyway=write_anyway, schedule=schedule)
        writer(result)
    if writer is not None and writer.error is not None:
        raise writer.error
    written, refused = (writer.written, writer.refused) if writer else (None, None)
    plotted = None
    if plot:
        from ddtctl.tune.plot import plot_png

        plotted = str(plot_png(result, plot))
    drawn = _draw_in_terminal(result) if plot_terminal else None
    code = ExitCode.OK if result.winner is not None else ExitCode.INVALID
    if refused is not None:
        code = refused.exit_code
    if result.restore_error or result.deploy_error:
        code = ExitCode.DEPLOY
    if fmt == OutputFormat.json:
        from ddtctl.cli._app import emit_json
        from ddtctl.report import ErrorInfo, FindingRecord

        if drawn:
            sys.stderr.write(drawn)  # stdout stays one JSON document
        out = result.to_json()
        out["written"] = (
            {"path": written.path, "changed": written.changed, "edits": written.edits} if written else None
        )
        out["plot"] = plotted
        # the sweep's results stand; the refusal is one of them (as validate's fix_refused), the envelope's
        # `error` stays for commands that produced nothing
        out["write_refused"] = ErrorInfo.from_exception(refused).to_json() if refused else None
        out["warnings"] = [  # as deploy's: findings of severity warning
            FindingRecord(id=None, severity="warning", message=w).to_json() for w in warnings or []
        ]
        emit_json("tune", out, code)
    else:
        _print_text(result, written)
        if drawn:
            sys.stdout.write(drawn)  # as drawn: rich would wrap its lines and escape its colours
        if plotted:
            stdout_console().print(f"plot: {plotted}", markup=False)
        if refused is not None:
            sys.stderr.write(f"ddtctl: error: {refused.one_line()}\n")
    return int(code)


def _aborted(fmt: OutputFormat) -> int:
    """The restart was not confirmed: nothing ran (as deploy's unconfirmed plan, exit 0)."""
    from ddtctl.errors import ExitCode

    if fmt == OutputFormat.json:
        from ddtctl.cli._app import emit_json

        emit_json("tune", {"aborted": True})
    else:
        stdout_console().print("aborted: nothing changed", markup=False)
    return ExitCode.OK


def _draw_in_terminal(result) -> str | None:
    """The terminal plot, sized to the terminal (None when nothing was measured: the table says why)."""
    import os
    import shutil

    from ddtctl.errors import UsageError
    from ddtctl.tune.plot import plot_terminal

    size = shutil.get_terminal_size((100, 24))
    color = stdout_console().is_terminal and not os.environ.get("NO_COLOR")
    try:
        return plot_terminal(
            result, max(60, min(size.columns, 140)), max(16, min(size.lines - 4, 30)), color=color
        )
    except UsageError as err:
        return f"no plot: {err.message}\n"


def _fmt(v, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _fmt_tps(spread) -> str:
    """The median tokens/s, and with several runs half their min..max range relative to it (`491.3 ±4%`)."""
    if spread is None:
        return "-"
    if spread.n < 2:
        return _fmt(spread.median)
    return f"{spread.median:.1f} ±{100 * spread.half_range:.{0 if spread.half_range >= 0.01 else 1}f}%"


def _print_verdict(con, result) -> None:
    """Whether the winner is ahead of the runner-up and the baseline beyond the run-to-run spread."""
    from ddtctl.tune.stats import verdict

    v = verdict(result)
    if v is None:
        return
    con.print(v.message(), style="green" if v.clear else "yellow", markup=False)


def _print_text(result, written) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ddtctl.tune.schedule import budget_schedule

    con = stdout_console()
    table = Table(
        box=None,
        pad_edge=False,
        caption="tok/s: output tokens/s (the median of the runs, ± half their min..max range); "
        "vs base: ratio to the baseline; latencies in ms (TTFT median); * the winner",
        caption_justify="left",
    )
    for col in ("point", "conc", "status", "tok/s", "vs base", "accept", "ITL p50", "ITL p99", "TTFT"):
        table.add_column(col, no_wrap=True, justify="left" if col in ("point", "status") else "right")
    rows = ([result.baseline] if result.baseline else []) + list(result.points)
    for p in rows:
        status = p.status + (f" {','.join(p.rules)}" if p.rules else "")
        if p.status != "ok" or not p.runs:
            table.add_row(escape(p.label), "-", escape(status), "-", "-", "-", "-", "-", "-")
            continue
        for i, c in enumerate(result.concurrencies):
            r = p.run_at(c)
            mark = " *" if p is result.winner and c == result.concurrency else ""
            table.add_row(
                escape(p.label + mark) if i == 0 else "",
                str(c),
                escape(status) if i == 0 else "",
                _fmt_tps(p.spread(c)),
                _fmt(result.ratio(p, c), ".2f"),
                _fmt(r.accept_length if r else None, ".2f"),
                _fmt(r.itl_p50_ms if r else None, ".2f"),
                _fmt(r.itl_p99_ms if r else None, ".2f"),
                _fmt(r.ttft_ms if r else None),
            )
    if not con.is_terminal:  # a pipe, a file: no column cut to rich's default 80 (the spreads widen tok/s)
        con.width = max(con.width, 160)
    con.print(table)
    w = result.winner
    if w is None:
        con.print("[red]no point was measured: no winner[/red]")
    else:
        ratio = result.winner_ratio
        con.print(
            f"[green]winner at concurrency {result.concurrency}: {escape(w.label)}: "
            f"{_fmt(w.tps(result.concurrency))} tokens/s"
            + (f", {ratio:.2f}x the baseline" if ratio else "")
            + "[/green]"
        )
        _print_verdict(con, result)
        schedule = budget_schedule(result)
        if schedule:
            con.print(
                f"budget schedule (the fastest budget per concurrency, 0: the chain): {schedule}"
                + (" (--write --schedule writes it)" if written is None and not result.replotted else ""),
                markup=False,
            )
    if written is not None:
        con.print(
            f"{written.path}: "
            + (
                "wrote " + ", ".join(f"{k}: {v}" for k, v in written.edits.items())
                if written.changed
                else "already has the winner's settings"
            ),
            markup=False,
        )
    _print_end(con, result)


def _print_end(con, result) -> None:
    """What the host serves now, and where the results are."""
    from rich.markup import escape

    host = escape(result.host)
    if result.replotted:
        con.print(f"replotted from {result.results_path} (no host reached)", markup=False)
        return
    if result.deploy_error:
        con.print(f"[red]{escape(result.deploy_error)}[/red]")
    if result.restore_error:
        con.print(f"[red]the host was not restored: {escape(result.restore_error)}[/red]")
    elif result.deployed:
        con.print(f"host {host} serves the winner from the profile: release {result.end_release}")
    elif result.kept_best:
        con.print(f"host {host} keeps serving the winner's sweep point (release {result.end_release})")
    else:
        con.print(f"host {host} is back on release {result.end_release or 'none (server stopped)'}")
    con.print(
        f"results: {escape(result.results_path)}" + (f" (tune run {result.run_id})" if result.run_id else ""),
        markup=False,
    )
