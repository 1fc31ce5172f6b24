"""`ddtctl dry-run`: SGLang's own resolver on profiles or a raw argv (in the managed env's python)."""

from __future__ import annotations

import typer

from ddtctl.cli import options
from ddtctl.cli._app import ReportFormat, app, emit_json, stdout_console
from ddtctl.errors import UsageError
from ddtctl.report import FindingRecord, github_annotation, warning_record

# Shown in the summary line of an accepted result (resolved field -> label).
_SUMMARY = (
    ("speculative_algorithm", "algorithm"),
    ("speculative_num_draft_tokens", "draft tokens"),
    ("speculative_num_steps", "steps"),
    ("speculative_eagle_topk", "topk"),
    ("attention_backend", "attention"),
    ("speculative_draft_attention_backend", "draft attention"),
    ("page_size", "page size"),
    ("disable_overlap_schedule", "overlap"),
    ("disable_radix_cache", "radix cache"),
    ("mamba_radix_cache_strategy", "mamba strategy"),
    ("max_running_requests", "max running"),
    # DDTREE (resolved by the overlay payload)
    ("speculative_ddtree_budget", "budget"),
    ("speculative_ddtree_topk_cap", "topk cap"),
    ("speculative_ddtree_shadow_linear", "shadow linear"),
    ("speculative_ddtree_verify_width", "verify width"),
)


def _fmt_value(key: str, value) -> str:
    if key in ("disable_overlap_schedule", "disable_radix_cache"):
        return "off" if value else "on"
    if key == "speculative_ddtree_shadow_linear":
        return "on" if value else "off"
    return "-" if value is None else str(value)


@app.command(
    "dry-run",
    context_settings={"allow_interspersed_args": True},
)
def dry_run(
    items: list[str] = typer.Argument(
        None, help="Profiles (files, dirs, globs); with --argv: SGLang arguments after --"
    ),
    gpu: str = options.GPU,
    sets: list[str] = options.SET,
    argv_mode: bool = typer.Option(
        False,
        "--argv",
        help="Resolve the raw SGLang launch given after -- (bare flags, `sglang serve ...`, "
        "`python3 -m sglang.launch_server ...`, with an `ENV=x` prefix)",
    ),
    argv_file: str = typer.Option(
        None, "--argv-file", help="Resolve the SGLang launch line pasted in FILE (shell syntax)"
    ),
    fmt: ReportFormat = typer.Option(
        ReportFormat.text,
        "--format",
        help="text, json, or github (GitHub Actions annotations: each rejection and warning)",
    ),
    timeout: float = typer.Option(
        60.0, "--timeout", help="Seconds per profile before the resolver is restarted"
    ),
    python: str = typer.Option(
        None, "--python", help="Interpreter with sglang installed (default: the managed env)"
    ),
    sys_path: list[str] = typer.Option(
        None,
        "--sys-path",
        help="Directory put first on the resolver's sys.path (e.g. an overlay staging tree); repeatable",
    ),
    all_overrides: bool = typer.Option(False, "--all-overrides", help="Also list defaults SGLang filled in"),
    overlay: str = typer.Option(
        "auto",
        "--overlay",
        help="DDTREE payload: auto (built and used when DDTREE is asked for), none, or a payload directory",
    ),
) -> None:
    """Run SGLang's own resolver (prepare_server_args + resolve_once + check_server_args) on each profile.

    Exit 0 when SGLang accepts all, 1 when it rejects any, 2 on a usage or environment error.
    """
    from ddtctl import dryrun
    from ddtctl.profile_overrides import parse_sets, refuse_sets

    items = list(items or [])
    overrides = parse_sets(sets)
    if argv_mode or argv_file is not None:
        refuse_sets(
            overrides, "a raw SGLang launch has no profile to change", "change the arguments themselves"
        )
    if argv_file is not None:
        from ddtctl.argv import read_argv_file

        if argv_mode or items:
            raise UsageError(
                "--argv-file takes the whole launch from the file",
                fix="ddtctl dry-run --gpu H200 --argv-file launch.sh  (no --argv, no other arguments)",
            )
        items, argv_mode = read_argv_file(argv_file), True
    launch_env: dict[str, str] = {}
    if argv_mode:
        from ddtctl.argv import split_launcher

        if not items:
            raise UsageError(
                "--argv needs SGLang arguments",
                fix="ddtctl dry-run --argv --gpu H200 -- --model-path DIR ...",
            )
        launch = split_launcher(items)  # as validate --argv reads it: the launcher and env prefix split off
        items, launch_env = launch.argv, launch.env
        if gpu is None and "--device" not in items:
            raise UsageError(
                "no GPU declared: SGLang's verdict depends on the GPU generation",
                fix="pass --gpu H200 (or sm90, B200, ...)",
            )
        from ddtctl.cli.progress import working
        from ddtctl.overlay.dryrun_support import overlay_sys_path

        with working(
            "dry-run: starting SGLang's resolver (a few seconds; the overlay is built first if needed)"
        ):
            sys_path = list(sys_path or ()) + overlay_sys_path(overlay, argvs=[items], python=python)
            results = dryrun.dry_run_argvs(
                [(argv_file or "argv", items, gpu)],
                python=python,
                extra_sys_path=sys_path or (),
                timeout_s=timeout,
                envs=[launch_env or None],
            )
    else:
        if not items:
            raise UsageError("no profiles given", fix="ddtctl dry-run PROFILE... (or --argv -- ARGS...)")
        from ddtctl.cli.progress import working
        from ddtctl.overlay.dryrun_support import overlay_sys_path

        with working(
            f"dry-run: {len(items)} profile path(s) through SGLang's resolver (a few seconds; the overlay is "
            "built first if needed)"
        ):
            sys_path = list(sys_path or ()) + overlay_sys_path(
                overlay, profiles=items, python=python, overrides=overrides
            )
            results = dryrun.dry_run_profiles(
                items,
                gpu=gpu,
                python=python,
                extra_sys_path=sys_path or (),
                timeout_s=timeout,
                overrides=overrides,
            )
    code = dryrun.exit_code(results)
    if fmt == ReportFormat.json:
        emit_json("dry-run", {"profiles": [r.to_json() for r in results]}, code)
    elif fmt == ReportFormat.github:
        _print_annotations(results)
    else:
        _print_text(results, all_overrides)
    raise typer.Exit(code)


def _print_annotations(results) -> None:
    """One workflow command per rejection (titled with SGLang's exception type) and per warning it logged."""
    import sys

    lines = []
    for r in results:
        file = None if r.source == "argv" else r.source
        err = r.error_json()
        if err is not None:
            lines.append(
                github_annotation(
                    FindingRecord(
                        id=err["type"],
                        severity="error",
                        file=file,
                        message=f"rejected by SGLang: {err['message']}",
                    )
                )
            )
        lines += [github_annotation(warning_record(w, file=file)) for w in r.warnings]
    sys.stdout.write("".join(line + "\n" for line in lines))


def _print_text(results, all_overrides: bool) -> None:
    from rich.markup import escape

    out = stdout_console()
    for r in results:
        gpu = f" on {r.gpu}" if r.gpu else ""
        took = f", {r.elapsed_s * 1000:.0f} ms" if r.elapsed_s is not None else ""
        if r.accepted:
            out.print(f"[green]ACCEPTED[/green] {escape(r.source)}{escape(gpu)}{took}")
            res = r.resolved
            parts = [
                f"{label} {_fmt_value(key, res.get(key))}"
                for key, label in _SUMMARY
                if key in res
                and not (key.startswith("speculative") and res.get("speculative_algorithm") is None)
            ]
            tp = "/".join(str(res.get(k, "-")) for k in ("tp_size", "dp_size", "pp_size"))
            parts.append(f"tp/dp/pp {tp}")
            out.print("  " + escape(", ".join(parts)))
        elif r.setup_error:
            err = r.error or {}
            out.print(f"[red]ERROR[/red] {escape(r.source)}{escape(gpu)}: {escape(err.get('type', ''))}")
            out.print("  " + escape(err.get("message", "")).replace("\n", "\n  "))
            continue
        else:
            err = r.error or {}
            out.print(f"[red]REJECTED[/red] by SGLang {escape(r.source)}{escape(gpu)}{took}")
            where = f" ({r.error_at})" if r.error_at else ""
            out.print(f"  {escape(err.get('type', ''))} in {escape(str(err.get('hook')))}{escape(where)}:")
            out.print("  " + escape(err.get("message", "")).replace("\n", "\n  "))
            continue
        keys = {k for k, _ in _SUMMARY} | {"tp_size", "dp_size", "pp_size"}
        shown = (
            r.overrides
            if all_overrides
            else [o for o in r.overrides if o.get("raw") is not None or o["field"] in keys]
        )
        if shown:
            out.print("  SGLang changed silently:")
            for o in shown:
                out.print(
                    f"    {escape(o['field'])}: {escape(repr(o['raw']))} -> {escape(repr(o['resolved']))}"
                    f"  [dim]({escape(str(o['hook']))})[/dim]"
                )
        filled = len(r.overrides) - len(shown)
        if filled and not all_overrides:
            out.print(f"  [dim]{filled} unset values filled in by SGLang (--all-overrides lists them)[/dim]")
        for w in r.warnings:
            out.print(f"  [yellow]warning[/yellow] {escape(w)}")
