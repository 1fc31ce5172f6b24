"""`ddtctl render PROFILE --host NODE`: what deploy would launch on one inventory node, through deploy's own
code (its spec and targets, never re-derived). It sits with deploy in the layering (README, "Layout"), above
ddtctl/render.py, which takes the node's launch as a function (`render_profile(node_of=...)`) and so never
imports deploy."""

from __future__ import annotations

from typing import Any, Sequence

from ddtctl.deploy.spec import spec_from_loaded
from ddtctl.remote.inventory import load_inventory, resolve_host
from ddtctl.render import NodeLaunch, Rendered, render_profile
from ddtctl.server_argv import RenderMismatch


def render_on_host(
    path: str,
    fmt: str = "argv",
    *,
    host: str,
    inventory: str | None = None,
    show_secrets: bool = False,
    overrides: Sequence[Any] = (),
) -> Rendered:
    """ddtctl.render.render_profile on inventory node `host` (of `inventory`, else the default inventory)."""
    return render_profile(
        path,
        fmt,
        show_secrets=show_secrets,
        overrides=overrides,
        node_of=lambda loaded, argv: node_launch(loaded, argv, host, inventory),
    )


def node_launch(loaded: Any, argv: list[str], host: str, inventory: str | None) -> NodeLaunch:
    """The launch on inventory node `host`, through deploy's own code: the spec (without the payload, nothing
    is shipped), the inventory's hosts, and the target of `host` among them (with its rank and the rank 0
    node's address)."""
    spec = spec_from_loaded(loaded, host=host, payload=False)  # refuses a host not among the profile's hosts:
    inv = load_inventory(inventory)
    target = next(t for t in spec.targets([resolve_host(n, inv) for n in spec.host_names]) if t.name == host)
    if target.argv[: len(argv)] != argv:  # deploy launches the argv render checked, then its own flags
        raise RenderMismatch(f"deploy's argv for {host} does not start with the rendered argv (a ddtctl bug)")
    launcher = target.launch_argv[: len(target.launch_argv) - len(target.argv)]
    return NodeLaunch(host, target.rank, target.nnodes, launcher, dict(target.env), target.argv[len(argv) :])
