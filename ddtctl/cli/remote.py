"""`ddtctl deploy`, `facts`, `doctor`, `releases`, `status`, `logs`, `stop`, `rollback` (SSH; paramiko is
imported only inside the commands, through ddtctl.deploy)."""

from __future__ import annotations

import typer

from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, emit_json, stderr_console, stdout_console
from ddtctl.cli.stage_events import LiveStages, event_printer
from ddtctl.errors import DdtctlError, ExitCode, UsageError
from ddtctl.report import ErrorInfo, FindingRecord


def _error_json(message: str | None, exit_code: int, where: str | None = None) -> dict | None:
    """A failure inside a command's results, in the envelope's error shape."""
    return None if not message else {"message": message, "where": where, "fix": None, "exit_code": exit_code}


def _deploy_json(result, events: list, warnings: list[str]) -> dict:
    """deploy's report with the envelope's shapes: preflight checks as findings (id: the check's name, plus
    `ok` and `host`), `error` as an error object, the stage events, and the deprecation warnings."""
    data = result.to_json()
    data["checks"] = [
        dict(
            FindingRecord(
                id=c.get("name"),
                severity=c.get("severity") or "error",
                message=str(c.get("message", "")),
                fix=c.get("fix"),
            ).to_json(),
            ok=c.get("ok"),
            host=c.get("host"),
        )
        for c in data.get("checks") or []
    ]
    data["error"] = _error_json(data.get("error"), result.exit_code)
    data["events"] = [ev.to_json() for ev in events]
    data["warnings"] = [FindingRecord(id=None, severity="warning", message=w).to_json() for w in warnings]
    return data


def _resolve(host: str, inventory: str | None):
    from ddtctl.deploy import host_by_name

    return host_by_name(host, inventory)


_ALIASES = {"dry_run": ("--dry-run", "--plan"), "check": ("--check", "--stage")}


def _deprecations(fmt: OutputFormat, **used: bool) -> list[str]:
    """Hidden deprecated options still work, with a warning: on stderr, or in the JSON (`warnings`)."""
    warnings = [
        f"`deploy {old}` is deprecated, use `deploy {new}`"
        for name, (old, new) in _ALIASES.items()
        if used.get(name)
    ]
    if fmt != OutputFormat.json:
        import sys

        sys.stderr.write("".join(f"ddtctl: warning: {w}\n" for w in warnings))
    return warnings


@app.command()
def deploy(
    host: str = typer.Argument(None, help="Inventory host (default: the profile's host/hosts)"),
    profile: str = typer.Option(
        None, "--profile", "-p", help="Profile to deploy (default: the host's profile)"
    ),
    algo: str = typer.Option(None, "--algo", help="Override server.speculative-algorithm (e.g. DDTREE)"),
    payload: str = options.PAYLOAD,
    inventory: str = options.INVENTORY,
    plan: bool = typer.Option(
        False, "--plan", help="Stop after printing the plan (read-only: nothing changes)"
    ),
    stage: bool = typer.Option(
        False,
        "--stage",
        help="Preflight in full (ship to the host's store, SGLang's resolver "
        "on the host), then stop: nothing installed or restarted",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", hidden=True, help="Deprecated alias of --plan"),
    check: bool = typer.Option(False, "--check", hidden=True, help="Deprecated alias of --stage"),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation"),
    restart: bool = typer.Option(False, "--restart", help="Restart even if the release is unchanged"),
    trust_new_host: bool = options.TRUST_NEW_HOST,
    lock_wait: float = options.LOCK_WAIT,
    skip_dry_run: bool = options.SKIP_REMOTE_DRY_RUN,
    health_timeout: float = options.HEALTH_TIMEOUT,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Take HOST from whatever runs there to the profile's server, healthy — or leave it as it was.

    Stages: facts, preflight (static + SGLang on the host), plan, ship (SFTP, only changed files,
    sha256-verified), install, launch, health, record. --plan stops after the plan, --stage after SGLang's
    resolver ran on the host with the payload staged. Exit 0 deployed/unchanged, 1 rejected by preflight, 3
    SSH, 5 failed (rolled back).
    """
    deprecations = _deprecations(fmt, dry_run=dry_run, check=check)
    plan, stage = plan or dry_run, stage or check
    from ddtctl.deploy import DeployOptions, spec_from_profile
    from ddtctl.deploy import deploy as run_deploy
    from ddtctl.remote.inventory import load_inventory, resolve_host

    inv = load_inventory(inventory)
    if profile is None:
        if host is None:
            raise UsageError("nothing to deploy", fix="ddtctl deploy HOST --profile PROFILE")
        profile = inv.default_profile(resolve_host(host, inv))
        if not profile:
            raise UsageError(
                f"host {host} has no default profile",
                where=str(inv.path or "inventory"),
                fix="pass --profile or set `profile:` for the host",
            )
    spec = spec_from_profile(profile, host=host, algo=algo, payload_dir=payload)
    hosts = [resolve_host(n, inv) for n in spec.host_names]

    live = LiveStages(fmt)
    opts = DeployOptions(
        dry_run=plan,
        check_only=stage,
        restart=restart,
        trust_new_host=trust_new_host,
        lock_wait_s=lock_wait,
        remote_dry_run=not skip_dry_run,
        health_timeout_s=health_timeout,
        confirm=lambda _plan: live.confirm(yes),
    )
    with live:
        opts.on_event = live.on_event
        opts.on_ship_progress = live.ship_progress
        result = run_deploy(spec, hosts, opts)
    if fmt == OutputFormat.json:
        emit_json("deploy", _deploy_json(result, live.events, deprecations), result.exit_code)
    else:
        con = stdout_console()
        rel = ", ".join(f"{h}: {r}" for h, r in result.release.items())
        line = {
            "deployed": f"deployed {spec.name} -> {rel} in {result.elapsed_s:.1f}s",
            "unchanged": f"unchanged: {rel} already serving {spec.name} ({result.elapsed_s:.1f}s)",
            "planned": "plan only (--plan): nothing changed",
            "checked": "staged and checked on the host (--stage): nothing installed or restarted",
            "aborted": "aborted: nothing changed",
        }.get(result.status)
        if line:
            con.print(f"[green]{line}[/green]")
        else:
            back = ", ".join(
                f"{h}: {r or 'none (stopped, payload removed)'}" for h, r in result.rolled_back_to.items()
            )
            con.print(
                f"[red]{result.status}: {result.error}[/red]" + (f"\nrolled back to {back}" if back else "")
            )
    raise typer.Exit(result.exit_code)


@app.command()
def facts(
    host: str = typer.Argument(..., help="Inventory host"),
    model: list[str] = typer.Option(
        None, "--model", help="Model dir on the host whose config.json to fetch and cache"
    ),
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """GPUs, CUDA, python, SGLang, disk, ports, our server, and model configs of HOST."""
    from ddtctl.deploy import host_facts
    from ddtctl.remote.inventory import load_inventory, resolve_host

    inv = load_inventory(inventory)
    h = resolve_host(host, inv)
    models = list(model or [])
    skipped = None  # why the host's profile named no model dirs to fetch, when it did not load
    profile = None if models else inv.default_profile(h)  # the file deploy, doctor and tune would use
    if profile:
        from ddtctl.profile import load_profile

        try:
            p = load_profile(profile).profile
        except DdtctlError as err:
            skipped = f"no model config fetched: the host's profile does not load: {err.one_line()}"
        else:
            draft = p.server.get("speculative-draft-model-path")
            models = [p.model.path] + ([str(draft)] if draft else [])
    f = host_facts(h, model_paths=models, trust_new_host=trust_new_host)
    if fmt == OutputFormat.json:
        emit_json("facts", dict(f.to_json(), warnings=[skipped] if skipped else []))
        return
    if skipped:
        stderr_console().print(f"warning: {skipped} (fix: --model DIR)", markup=False)
    from rich.markup import escape

    con = stdout_console()
    con.print(f"[bold]{escape(h.describe())}[/bold]  hostname {escape(f.hostname)}")
    if f.gpus:
        for g in f.gpus:
            con.print(
                f"  GPU {g.index}: {escape(g.name)}  sm{g.sm}  "
                f"{g.memory_free_mib}/{g.memory_total_mib} MiB free"
            )
    else:
        con.print(f"  GPUs: none ({escape(str(f.gpu_error))})")
    con.print(f"  driver {f.driver}  CUDA {f.cuda}")
    con.print(
        f"  python {f.python_version} ({escape(f.python)})  sglang {f.sglang_version or 'absent'}"
        f"{' at ' + escape(f.sglang_root) if f.sglang_root else ''}"
    )
    con.print(f"  disk free {f.disk_free_bytes / 2**30:.1f} GiB in {escape(f.work_dir)}")
    con.print(f"  ports listening: {', '.join(map(str, f.ports_in_use)) or 'none'}")
    srv = f.server or {}  # read only when the server runs, so it is set
    con.print(
        "  server: "
        + (
            f"running release {srv.get('release')} pid {srv.get('pid')} port {srv.get('port')}"
            if f.server_running
            else "not running"
        )
    )
    for path, info in f.models.items():
        arch = (info.get("config") or {}).get("architectures")
        con.print(
            f"  model {escape(path)}: "
            + (
                f"{arch} (cached in {escape(f.cached_configs.get(path, ''))})"
                if "config" in info
                else escape(info.get("error", ""))
            )
        )


@app.command()
def doctor(
    host: str = typer.Argument(None, help="Inventory host (default: the profile's host, else the only one)"),
    profile: str = typer.Option(
        None, "--profile", "-p", help="Profile to check against (default: the host's)"
    ),
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """One checklist of HOST against a profile: SSH, GPUs, topology, driver, torch, python, SGLang, the
    DDTREE payload, NCCL, disk, models, port, /dev/shm. Exit 0: no check failed, 1: one did, 3: SSH did."""
    from ddtctl.cli.doctor_report import show
    from ddtctl.doctor import doctor as run_doctor
    from ddtctl.doctor import doctor_target

    h, launch = doctor_target(host, profile, inventory)
    report = run_doctor(h, launch, trust_new_host=trust_new_host)
    show(report, fmt)
    raise typer.Exit(report.exit_code)


@app.command()
def status(
    host: str = typer.Argument(
        None, help="Inventory host (default: every host of the inventory, as a table)"
    ),
    probe: bool = typer.Option(
        False,
        "--probe",
        help="Without HOST: also connect to every host (in parallel) for its release, server and health",
    ),
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Current release, server process and health of HOST. Exit 0 when healthy, 5 when not running/unhealthy.

    Without HOST: the inventory's hosts (name, address, user, profile) without connecting; with --probe, each
    host's release, server and /health too (exit 0 when all are healthy, 3 when one could not be reached, else
    5).
    """
    from ddtctl.deploy import host_status

    if host is None:
        raise typer.Exit(_status_all(inventory, probe=probe, trust_new_host=trust_new_host, fmt=fmt))
    st = host_status(_resolve(host, inventory), trust_new_host=trust_new_host)
    healthy = _healthy(st)
    if fmt == OutputFormat.json:
        emit_json("status", dict(st.to_json(), healthy=healthy), ExitCode.OK if healthy else ExitCode.DEPLOY)
    else:
        con = stdout_console()
        srv = st.server or {}
        con.print(
            f"host {st.host}: current release {st.current or 'none'}"
            + (f" (previous {st.previous})" if st.previous else "")
        )
        if srv.get("running"):
            info = st.server_info or {}
            con.print(
                f"  server pid {srv.get('pid')} port {srv.get('port')} release {srv.get('release')}: "
                f"/health {st.health}"
                + (
                    f", algorithm {info.get('speculative_algorithm')}, tp {info.get('tp_size')}"
                    if info
                    else ""
                )
            )
        else:
            con.print("  server: not running")
        inst = st.installed_payload or {}
        con.print(
            f"  payload installed: {inst.get('hash', '')[:12] or 'none'}"
            + (f" (from {inst.get('release')})" if inst else "")
        )
        for line in _lock_lines(st):
            con.print(line, markup=False)
    raise typer.Exit(ExitCode.OK if healthy else ExitCode.DEPLOY)


def _lock_lines(st) -> list[str]:
    """The deploy lock as status shows it: held, or stale (its holder died), and a deploy left half-done."""
    from ddtctl.remote.protocol import LockHolder

    out = []
    if st.lock:
        who = LockHolder.from_json(st.lock).describe()
        out.append(
            f"  stale deploy lock of {who}: its holder died; the next deploy, rollback or stop takes it over"
            if st.lock.get("stale")
            else f"  deploy lock held by {who}"
        )
    if st.interrupted:
        i = st.interrupted
        out.append(
            f"  interrupted deploy of {i.get('release')} by {i.get('holder')}: the next deploy, rollback or "
            f"stop puts {i.get('previous') or 'no release (payload removed)'} back"
        )
    return out


def _healthy(st) -> bool:
    return bool(st.server and st.server.get("running") and st.health == 200)


def _probe_rows(hosts: list, rows: list[dict], trust_new_host: bool) -> int:
    """host_status of every host, in parallel, into its row (status, healthy, error). The exit code: REMOTE
    when one could not be reached, else DEPLOY when one is unhealthy, else OK."""
    from concurrent.futures import ThreadPoolExecutor

    from ddtctl.deploy import host_status

    def one(h):
        try:
            return host_status(h, trust_new_host=trust_new_host), None
        except DdtctlError as err:
            return None, err

    code = ExitCode.OK
    # --trust-new-host writes known_hosts: one host at a time then
    with ThreadPoolExecutor(max_workers=1 if trust_new_host else min(16, len(hosts))) as pool:
        results = list(pool.map(one, hosts))
    for row, (st, err) in zip(rows, results, strict=True):
        if err is not None:
            row.update(status=None, healthy=False, error=err)
            code = ExitCode.REMOTE
        else:
            row.update(status=st.to_json(), healthy=_healthy(st), error=None)
            if not row["healthy"] and code == ExitCode.OK:
                code = ExitCode.DEPLOY
    return code


def _inventory_rows(inv) -> tuple[list, list[dict], list[tuple[str, DdtctlError]]]:
    """The hosts that resolve with their table rows, and (name, error) of those that do not: each host
    resolves on its own, so one broken ssh_config block is its row's error, not the end of the table."""
    hosts: list = []
    rows: list[dict] = []
    unresolved: list[tuple[str, DdtctlError]] = []
    for name in inv.hosts:
        try:
            h = inv.hosts[name]
        except DdtctlError as err:
            unresolved.append((name, err))
            continue
        hosts.append(h)
        rows.append(
            {"host": h.name, "address": h.address, "user": h.user, "port": h.port, "profile": h.profile}
        )
    return hosts, rows, unresolved


def _status_cells(r: dict, probe: bool) -> list:
    """One host's cells in the inventory table (with `probe`: its release, server and health too)."""
    if r["address"] is None:  # its inventory or ssh_config entry does not resolve: the error under the table
        return [r["host"], "(unresolved)", "-", "-"] + ["-"] * (3 * probe)
    cells = [
        r["host"],
        f"{r['address']}:{r['port']}" if r["port"] != 22 else r["address"],
        r["user"],
        r["profile"] or "-",
    ]
    if not probe:
        return cells
    st = r["status"]
    if st is None:
        return cells + ["-", "unreachable", "-"]
    srv = st.get("server") or {}
    server = f"pid {srv.get('pid')} port {srv.get('port')}" if srv.get("running") else "not running"
    health = "ok" if r["healthy"] else (f"/health {st.get('health')}" if srv.get("running") else "-")
    return cells + [st.get("current") or "none", server, health]


def _status_all(inventory: str | None, *, probe: bool, trust_new_host: bool, fmt: OutputFormat) -> int:
    """`ddtctl status` without HOST: a row per inventory host; with `probe`, their host_status (parallel)."""
    from ddtctl.remote.inventory import load_inventory

    inv = load_inventory(inventory)
    hosts, rows, unresolved = _inventory_rows(inv)
    code = _probe_rows(hosts, rows, trust_new_host) if probe and hosts else ExitCode.OK
    for name, problem in unresolved:  # the table lists every host; the exit code is the first one's error's
        rows.append({"host": name, "address": None, "user": None, "port": None, "profile": None,
                     "status": None, "healthy": False, "error": problem})  # fmt: skip
    if unresolved:
        code = unresolved[0][1].exit_code
    if fmt == OutputFormat.json:
        emit_json(
            "status",
            {
                "hosts": [
                    dict(r, error=ErrorInfo.from_exception(r["error"]).to_json() if r.get("error") else None)
                    for r in rows
                ]
            },
            code,
        )
        return code

    if not rows:
        where = str(inv.path) if inv.path else inv.missing()
        stderr_console().print(
            f"no hosts in the inventory: {where} (fix: create hosts.yaml from hosts.example.yaml or pass "
            "--inventory PATH)",
            markup=False,
        )
        return code
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    cols = ["host", "address", "user", "profile"] + (["release", "server", "health"] if probe else [])
    for col in cols:
        table.add_column(col, no_wrap=col in ("host", "address", "release"))
    for r in rows:
        table.add_row(*(escape(str(c)) for c in _status_cells(r, probe)))  # plain text, never markup
    con = stdout_console()
    con.print(table)
    for r in rows:
        if r.get("error"):
            con.print(r["error"].one_line(), markup=False)  # names the host
    return code


@app.command()
def releases(
    host: str = typer.Argument(..., help="Inventory host"),
    prune: bool = typer.Option(
        False,
        "--prune",
        help="Remove old releases (record and payload) under the deploy lock: sweep points of `ddtctl tune` "
        "first, never the current release nor the one rollback returns to",
    ),
    keep: int = typer.Option(
        None, "--keep", help="With --prune: releases to keep, the protected ones included (default 5)"
    ),
    plan: bool = typer.Option(False, "--plan", help="With --prune: show what it removes; change nothing"),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --prune: do not ask for confirmation"),
    lock_wait: float = options.LOCK_WAIT,
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Releases recorded on HOST (newest last): id, kind (a release, or a sweep point of `ddtctl tune`: never
    a rollback target), status, profile, payload and profile hashes. --prune removes the old ones."""
    from ddtctl.cli.releases_view import run_releases

    raise typer.Exit(
        run_releases(
            _resolve(host, inventory),
            fmt=fmt,
            trust_new_host=trust_new_host,
            prune=prune,
            keep=keep,
            plan=plan,
            yes=yes,
            lock_wait=lock_wait,
        )
    )


@app.command()
def logs(
    host: str = typer.Argument(..., help="Inventory host"),
    lines: int = typer.Option(100, "--lines", "-n", help="Lines from the end"),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming new lines (Ctrl-C to stop)"),
    release: str = typer.Option(
        None, "--release", help="Log of this release (default: the running server's)"
    ),
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
) -> None:
    """The server log on HOST."""
    import sys

    from ddtctl.deploy import host_logs

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        host_logs(
            _resolve(host, inventory),
            lines=lines,
            release=release,
            follow=follow,
            on_text=out,
            trust_new_host=trust_new_host,
        )
    except KeyboardInterrupt:
        pass


@app.command()
def stop(
    host: str = typer.Argument(..., help="Inventory host"),
    grace: float = typer.Option(20.0, "--grace", help="Seconds between SIGTERM and SIGKILL"),
    lock_wait: float = options.LOCK_WAIT,
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Stop the server ddtctl started on HOST (SIGTERM to its process group, then SIGKILL)."""
    from ddtctl.deploy import stop_server

    r = stop_server(
        _resolve(host, inventory), grace_s=grace, lock_wait_s=lock_wait, trust_new_host=trust_new_host
    )
    if fmt == OutputFormat.json:
        emit_json("stop", r.to_json())
        return

    stdout_console().print(
        f"stopped release {r.release}" + (" (SIGKILL after the grace period)" if r.forced else "")
        if r.was_running
        else "no server of ours was running"
    )


@app.command()
def rollback(
    host: str = typer.Argument(..., help="Inventory host"),
    release: str = typer.Argument(
        None, help="Release id (default: the previous healthy one; never a sweep point of `ddtctl tune`)"
    ),
    lock_wait: float = options.LOCK_WAIT,
    health_timeout: float = typer.Option(None, "--health-timeout", help="Seconds (default: the release's)"),
    inventory: str = options.INVENTORY,
    trust_new_host: bool = options.TRUST_NEW_HOST,
    fmt: OutputFormat = options.FORMAT,
) -> None:
    """Reinstall an earlier release's payload and restart its server; wait until healthy."""
    from ddtctl.deploy import rollback as run_rollback

    printer = event_printer(fmt)
    r = run_rollback(
        _resolve(host, inventory),
        release,
        lock_wait_s=lock_wait,
        health_timeout_s=health_timeout,
        on_event=printer,
        trust_new_host=trust_new_host,
    )
    code = ExitCode.OK if r.ok else ExitCode.DEPLOY
    if fmt == OutputFormat.json:
        emit_json("rollback", dict(r.to_json(), events=[ev.to_json() for ev in printer.events]), code)
    else:
        stdout_console().print(f"rolled back {r.from_release} -> {r.to_release}: {r.health.message}")
    raise typer.Exit(code)
