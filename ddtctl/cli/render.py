"""`ddtctl render`: what a profile launches, as SGLang would read it (the logic is ddtctl/render.py)."""

from __future__ import annotations

import sys
from enum import Enum

import typer

from ddtctl.cli._app import OutputFormat, app, emit_json


class RenderAs(str, Enum):
    argv = "argv"
    shell = "shell"
    sglang_config = "sglang-config"


@app.command()
def render(
    profile: str = typer.Argument(..., help="Profile file (YAML)"),
    as_: RenderAs = typer.Option(
        RenderAs.shell,
        "--as",
        help="argv (a JSON list), shell (one command) or "
        "sglang-config (the YAML SGLang's own --config reads)",
    ),
    show_secrets: bool = typer.Option(
        False, "--show-secrets", help="Print secret values (api keys, *_TOKEN env)"
    ),
    fmt: OutputFormat = typer.Option(
        OutputFormat.text, "--format", help="text, or json (argv, env, config, text)"
    ),
) -> None:
    """Print what `ddtctl deploy` would launch for PROFILE: the server argv, a copy-pasteable shell command,
    or an SGLang --config file that SGLang reads back into the same argv. Secret values are masked unless
    asked."""
    from ddtctl.render import render_profile

    result = render_profile(profile, as_.value, show_secrets=show_secrets)
    if fmt == OutputFormat.json:
        emit_json("render", result.to_json())
        return
    sys.stdout.write(result.text.rstrip("\n") + "\n")
