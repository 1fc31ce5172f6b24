"""`ddtctl completion bash|zsh|fish` (the typer side; the fast path in fastpath.py prints the same script
without building the app). `--version` and `-h` live on the application itself (ddtctl/cli/_app.py)."""

from __future__ import annotations

from enum import Enum

import typer

from ddtctl.cli._app import app


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@app.command()
def completion(shell: Shell = typer.Argument(..., help="bash, zsh or fish")) -> None:
    """Print a static completion script for SHELL (commands and options; paths complete as files).

    bash: eval "$(ddtctl completion bash)" in ~/.bashrc. zsh: eval "$(ddtctl completion zsh)" in ~/.zshrc
    after compinit. fish: ddtctl completion fish > ~/.config/fish/completions/ddtctl.fish.
    """
    import sys

    from ddtctl.cli.completion import script

    sys.stdout.write(script(shell.value))
