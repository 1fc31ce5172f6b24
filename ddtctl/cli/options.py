"""Options several commands take, declared once (as pip's cmdoptions): the same flag has the same default and
help wherever it appears. An option only one command takes stays with that command."""

from __future__ import annotations

import typer

from ddtctl.cli._app import OutputFormat

FORMAT = typer.Option(OutputFormat.text, "--format", help="text or json")

# -- commands that reach a host over SSH (deploy, tune, facts, releases, status, logs, stop, rollback)
INVENTORY = typer.Option(
    None,
    "--inventory",
    "-i",
    help="Inventory file (default: $DDTCTL_INVENTORY, else hosts.yaml "
    "here or in the nearest parent directory)",
)
TRUST_NEW_HOST = typer.Option(
    False, "--trust-new-host", help="Accept and save an unknown host key (once; shows it)"
)
LOCK_WAIT = typer.Option(0.0, "--lock-wait", help="Seconds to wait for another deploy's lock (0: refuse)")

# -- commands that launch a profile's server on a host (deploy, tune)
PAYLOAD = typer.Option(None, "--payload", help="Built DDTREE payload directory (default: build it)")
SKIP_REMOTE_DRY_RUN = typer.Option(
    False, "--skip-remote-dry-run", help="Do not run SGLang's resolver on the host before each launch"
)
HEALTH_TIMEOUT = typer.Option(
    None, "--health-timeout", help="Seconds (default: profile launch.health_timeout_s)"
)

# -- rule selection, as ruff's (validate; declared here so that the commands reporting rule findings share one
# wording, and so that validate's signature stays short)
SELECT = typer.Option(
    None,
    "--select",
    help="Rule ids or prefixes to report (DDT9: every DDT9xx; ALL; repeatable or comma-separated); replaces "
    "the select and ignore of the repository config. Errors SGLang rejects itself are reported whatever is "
    "selected.",
)
IGNORE = typer.Option(
    None,
    "--ignore",
    help="Rule ids or prefixes not to report (DDT805, DDT8; repeatable or comma-separated), added to the "
    "repository config's ignore. Errors SGLang rejects itself cannot be ignored: their id is refused, a "
    "prefix leaves them reported.",
)
STATISTICS = typer.Option(
    False, "--statistics", help="Print how many findings each rule has (count, id, fix, title) instead."
)

# -- commands that read a profile (validate, dry-run, render): try it as if it said otherwise, file untouched
SET = typer.Option(
    None,
    "--set",
    metavar="KEY=VALUE",
    help="Override a profile key for this run (repeatable): a dotted path into the profile, the value read "
    "as YAML, e.g. --set hardware.gpu=H200 --set server.tp-size=2; the file is not changed",
)
GPU = typer.Option(
    None,
    "--gpu",
    help="GPU (H200, B200, RTX_PRO_6000_BLACKWELL, sm90, ...) instead of the profile's hardware.gpu",
)
