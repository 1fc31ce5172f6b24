"""The host inventory (`hosts.yaml`) merged with `~/.ssh/config`.

Precedence for connection settings: the inventory entry, then its `defaults:`, then the matching
`~/.ssh/config` block, then built-in defaults (the inventory acts like `ssh -l/-p/-i`: its user and port are
also what %r and %p expand to in ProxyCommand/ProxyJump). Passwords are never read from anywhere:
authentication is by SSH agent or key files only.

    host        Host (one resolved deploy target) and Inventory (name -> Host)
    files       find_inventory, load_inventory (hosts.yaml), resolve_host (inventory, else ssh_config alias)
    resolve     make_host: an entry plus `defaults:` plus ssh_config -> Host, ProxyJump hops included
    ssh_config  reading ~/.ssh/config: the keywords honoured, ignored or refused (its docstring lists them)
    values      numbers in range, paths, words, launchers
"""

from __future__ import annotations

from ddtctl.remote.inventory.files import MAX_INVENTORY_BYTES, find_inventory, load_inventory, resolve_host
from ddtctl.remote.inventory.host import _HOST_KEYS as _HOST_KEYS  # the schema test reads it
from ddtctl.remote.inventory.host import DEFAULT_INVENTORY, DEFAULT_LAUNCHER, Host, Inventory
from ddtctl.remote.inventory.resolve import make_host

__all__ = [
    "DEFAULT_INVENTORY",
    "DEFAULT_LAUNCHER",
    "MAX_INVENTORY_BYTES",
    "Host",
    "Inventory",
    "find_inventory",
    "load_inventory",
    "make_host",
    "resolve_host",
]
