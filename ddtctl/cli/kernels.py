"""`ddtctl kernels selftest` and `ddtctl kernels tree`: thin wrappers over ddtctl.kernels (torch/triton
imported only inside the commands)."""

from __future__ import annotations

import typer

from ddtctl.cli import options
from ddtctl.cli._app import OutputFormat, app, emit_json
from ddtctl.errors import ExitCode

kernels_app = typer.Typer(no_args_is_help=True, help="DDTree kernels: self-test and tree inspection.")
app.add_typer(kernels_app, name="kernels")


@kernels_app.command("selftest")
def selftest_cmd(
    device: str = typer.Option("cpu", "--device", help="cpu (Triton interpreter, small sizes) or cuda."),
    quick: bool = typer.Option(False, "--quick", help="One case only."),
    output: OutputFormat = options.FORMAT,
) -> None:
    """Check the Triton kernels against the exact reference. Exit 0 only if every check passed."""
    import os

    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from ddtctl.kernels.selftest import selftest

    result = selftest(device, quick=quick)
    code = ExitCode.OK if result.ok else ExitCode.INVALID
    if output == OutputFormat.json:
        emit_json("kernels selftest", result.to_dict(), code)
    else:
        for c in result.checks:
            typer.echo(f"{'ok  ' if c.ok else 'FAIL'}  {c.name}: {c.detail}")
        versions = ", ".join(f"{k} {v}" for k, v in result.versions.items())
        typer.echo(
            f"{'passed' if result.ok else 'FAILED'}: {sum(c.ok for c in result.checks)}/{len(result.checks)} "
            f"checks on {result.device} ({versions}) in {result.seconds:.1f} s"
        )
    raise typer.Exit(code)


@kernels_app.command("tree")
def tree_cmd(
    logits: str = typer.Option(..., "--logits", help="A .npy file with one request's draft logits [L, V]."),
    budget: int = typer.Option(..., "--budget", help="Node budget B (the root is not counted)."),
    output: OutputFormat = typer.Option(OutputFormat.text, "--format", help="text (draws the tree) or json."),
) -> None:
    """Print the tree DDTree builds from draft logits: node tokens, depths, parents, expected acceptance."""
    from ddtctl.kernels.tree import render_text, tree_report

    report = tree_report(logits, budget)
    if output == OutputFormat.json:
        emit_json("kernels tree", report.to_dict())
    else:
        typer.echo(render_text(report))
