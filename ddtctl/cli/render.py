"""`ddtctl render`: what a profile launches, as SGLang would read it (the logic is ddtctl/render.py, and
ddtctl/render_engines.py for the launchers beyond one SSH host)."""

from __future__ import annotations

import sys

import typer

from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, emit_json
from ddtctl.errors import UsageError

RENDER_AS = ("argv", "shell", "sglang-config", "k8s-lws", "skypilot")


def _render_as(value: str) -> str:
    """--as: one of RENDER_AS, else ddtctl's one-line usage error (exit 2)."""
    if value not in RENDER_AS:
        raise UsageError(f"--as {value!r}: unknown render format", fix=f"use one of {', '.join(RENDER_AS)}")
    return value


_render_as.choices = RENDER_AS  # type: ignore[attr-defined]  # static shell completion (ddtctl/cli/completion.py)


@app.command()
def render(
    profile: str = typer.Argument(..., help="Profile file (YAML)"),
    as_: str = typer.Option(
        "shell",
        "--as",
        parser=_render_as,
        metavar="FORMAT",
        help="argv (a JSON list), shell (one command), sglang-config (the YAML SGLang's own --config reads), "
        "k8s-lws (a LeaderWorkerSet and its Service) or skypilot (a SkyPilot task)",
    ),
    nodes: int = typer.Option(
        None, "--nodes", min=1, help="k8s-lws, skypilot: nodes (default: tp x pp over hardware.count)"
    ),
    image: str = typer.Option(
        None, "--image", help="k8s-lws: the SGLang image (default lmsysorg/sglang:vRELEASE)"
    ),
    model_volume: str = typer.Option(
        "hostpath",
        "--model-volume",
        help="k8s-lws: the models' volume, mounted at their directory: hostpath (that same host directory), "
        "hostpath:/DIR or pvc:CLAIM",
    ),
    payload_volume: str = typer.Option(
        "pvc:ddtree-payload",
        "--payload-volume",
        help="k8s-lws, DDTREE: the volume holding installer.py and payload/ (hostpath:/DIR or pvc:CLAIM)",
    ),
    payload_dir: str = typer.Option(
        None,
        "--payload-dir",
        help="skypilot, DDTREE: the built payload (default: where overlay build writes it)",
    ),
    show_secrets: bool = typer.Option(
        False, "--show-secrets", help="Print secret values (api keys, *_TOKEN env)"
    ),
    fmt: OutputFormat = typer.Option(
        OutputFormat.text, "--format", help="text, or json (argv, env, config, text)"
    ),
    sets: list[str] = options.SET,
    gpu: str = options.GPU,
    host: str = typer.Option(
        None,
        "--host",
        metavar="NODE",
        help="argv, shell: the launch deploy makes on inventory node NODE (its launcher and env; with "
        "several hosts, --nnodes, --node-rank and --dist-init-addr)",
    ),
    inventory: str = options.INVENTORY,
) -> None:
    """Print what `ddtctl deploy` would launch for PROFILE: the server argv, a copy-pasteable shell command,
    an SGLang --config file that SGLang reads back into the same argv, or that argv on several nodes as a
    Kubernetes LeaderWorkerSet or a SkyPilot task. Secret values are masked unless asked. --set and --gpu
    render the profile as if it said so (the file is not changed)."""
    from ddtctl.profile_overrides import parse_sets
    from ddtctl.render_engines import ENGINE_FORMATS, EngineOptions, render_engine

    overrides = parse_sets(list(sets or []) + ([f"hardware.gpu={gpu}"] if gpu else []))
    if host is None and inventory is not None:
        raise UsageError(
            "--inventory is for --host", fix="ddtctl render PROFILE --host NODE --inventory FILE"
        )
    if as_ in ENGINE_FORMATS:
        if host is not None:
            raise UsageError(f"--host renders a command line, not --as {as_}", fix="--as argv or --as shell")
        opts = EngineOptions(nodes, image, model_volume, payload_volume, payload_dir, show_secrets, overrides)
        result = render_engine(profile, as_, opts)
    else:
        from ddtctl.render import render_profile

        given = [n for n, v in (("--nodes", nodes), ("--image", image), ("--payload-dir", payload_dir)) if v]
        given += [
            n
            for n, v, d in (
                ("--model-volume", model_volume, "hostpath"),
                ("--payload-volume", payload_volume, "pvc:ddtree-payload"),
            )
            if v != d
        ]
        if given:
            raise UsageError(f"{given[0]} is for --as k8s-lws or --as skypilot", fix="leave it out")
        if host is None:
            result = render_profile(profile, as_, show_secrets=show_secrets, overrides=overrides)
        else:  # deploy's own launch on that node (loads the deploy package: only with --host)
            from ddtctl.render_host import render_on_host

            result = render_on_host(
                profile, as_, host=host, inventory=inventory, show_secrets=show_secrets, overrides=overrides
            )
    if fmt == OutputFormat.json:
        emit_json("render", result.to_json())
        return
    for warning in result.warnings:
        sys.stderr.write(f"ddtctl: warning: {warning}\n")
    sys.stdout.write(result.text.rstrip("\n") + "\n")
