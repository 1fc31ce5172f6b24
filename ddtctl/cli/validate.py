"""`ddtctl validate`, `ddtctl rules`, `ddtctl explain`, `ddtctl schema`."""

from __future__ import annotations

import typer

from ddtctl.cli._app import app


@app.command()
def validate(paths: list[str] = typer.Argument(None)) -> None:
    """Validate launch profiles (placeholder, being built)."""
    raise typer.Exit(0)
