"""Finding and reading hosts.yaml (a size cap, duplicate keys refused), and looking a host up by name."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from ddtctl.errors import UsageError
from ddtctl.remote.inventory.host import DEFAULT_INVENTORY, Host, Inventory
from ddtctl.remote.inventory.names import check_host
from ddtctl.remote.inventory.resolve import make_host
from ddtctl.remote.inventory.ssh_config import _ssh_config_lookup
from ddtctl.safeio import read_regular

MAX_INVENTORY_BYTES = 1024 * 1024


@functools.lru_cache(maxsize=None)
def _unique_key_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    # the base class is picked at run time (libyaml's CSafeLoader when built), which mypy cannot follow
    class UniqueKeyLoader(base):  # type: ignore[misc, valid-type]
        """SafeLoader that refuses a key given twice in one mapping (issue #14: a second `hosts: {gpu1: ...}`
        silently replaced the first)."""

        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base constructor reports it
                    break
                if first is not None:
                    what = "host" if self._under_hosts(node) else "key"
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate {what} {key!r} (first at line {first.start_mark.line + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node
            return super().construct_mapping(node, deep=deep)

        def _under_hosts(self, node) -> bool:
            root = getattr(self, "_root", None)
            if root is None:
                return False
            for k, v in root.value:
                if v is node and getattr(k, "value", None) == "hosts":
                    return True
            return False

        def construct_document(self, node):
            self._root = node if isinstance(node, yaml.MappingNode) else None
            return super().construct_document(node)

    return UniqueKeyLoader


def find_inventory(start: Path | None = None) -> tuple[Path | None, list[Path]]:
    """hosts.yaml in the current directory or the nearest parent that has one (as git finds .git), and the
    paths looked at."""
    here = (start or Path.cwd()).resolve()
    searched = []
    for d in (here, *here.parents):
        candidate = d / DEFAULT_INVENTORY
        searched.append(candidate)
        if candidate.is_file():
            return candidate, searched
    return None, searched


def load_inventory(path: str | os.PathLike | None = None, *, ssh_config: str | None = None) -> Inventory:
    """Read hosts.yaml: --inventory, else $DDTCTL_INVENTORY, else ./hosts.yaml or the nearest parent
    directory's. None found without an explicit path -> an empty inventory (ssh-config aliases still work)."""
    explicit = path is not None or bool(os.environ.get("DDTCTL_INVENTORY"))
    if explicit:
        p = Path(path or os.environ.get("DDTCTL_INVENTORY") or DEFAULT_INVENTORY).expanduser()
        if not p.exists():
            raise UsageError(
                "inventory file not found",
                where=str(p),
                fix="create it from hosts.example.yaml or pass --inventory PATH",
            )
    else:
        found, searched = find_inventory()
        if found is None:
            return Inventory(path=None, hosts={}, searched=[str(x) for x in searched])
        p = found
    data = read_inventory_data(p)
    entries = dict(host_entries(data, str(p)))
    for name, entry in entries.items():  # the file's own errors, at load; ssh_config is read per host, later
        inventory_host(name, entry, data, where=str(p), read_ssh_config=False)
    return Inventory(path=p, hosts=_Hosts(entries, data, str(p), ssh_config))


class _Hosts(Mapping[str, Host]):
    """The inventory's hosts by name, each resolved (its ssh_config block read) the first time it is asked
    for: a broken `~/.ssh/config` block of one host fails that host, not every command (issue #33 item 5)."""

    def __init__(self, entries: dict[str, dict], data: dict, where: str, ssh_config: str | None) -> None:
        self._entries, self._data, self._where, self._ssh_config = entries, data, where, ssh_config
        self._resolved: dict[str, Host] = {}

    def __getitem__(self, name: str) -> Host:
        if name not in self._resolved:
            entry = self._entries[name]  # KeyError for a name not in the inventory, as a dict
            self._resolved[name] = inventory_host(
                name, entry, self._data, where=self._where, ssh_config=self._ssh_config
            )
        return self._resolved[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


def read_inventory_data(p: Path) -> dict:
    """hosts.yaml parsed (bounded, a key given twice refused) with its top-level keys checked: the one reader
    of load_inventory and `ddtctl validate --inventory`."""
    import yaml

    raw = read_regular(p, MAX_INVENTORY_BYTES, what="inventory")  # a FIFO or /dev/zero is refused, never read
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_unique_key_loader()) or {}
    except UnicodeDecodeError:
        raise UsageError("not UTF-8", where=str(p), fix="save the file as UTF-8") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise UsageError(f"invalid YAML: {getattr(err, 'problem', err)}", where=where) from None
    except (RecursionError, ValueError) as err:  # absurd nesting, a 5000-digit number
        raise UsageError(f"cannot read: {type(err).__name__}: {str(err)[:100]}", where=str(p)) from None
    if not isinstance(data, dict) or not isinstance(data.get("hosts", {}), dict):
        raise UsageError("inventory must be a mapping with a `hosts:` mapping", where=str(p))
    _check_top(data, str(p))
    return data


def host_entries(data: dict, where: str):
    """(name, entry) of each host of the parsed inventory, their shape checked."""
    for name, entry in (data.get("hosts") or {}).items():
        if entry is not None and not isinstance(entry, dict):
            raise UsageError(f"host {name!r} must be a mapping", where=where)
        if not isinstance(name, str):  # `1:` and `"1":` would be one host
            raise UsageError(f"host name {name!r} must be a string", where=where, fix=f'quote it: "{name}":')
        yield str(name), entry or {}


def inventory_host(
    name: str,
    entry: dict,
    data: dict,
    *,
    where: str,
    ssh_config: str | None = None,
    read_ssh_config: bool = True,
) -> Host:
    """One host of the parsed inventory: its entry, the `defaults:` and (unless `read_ssh_config=False`) the
    ssh config resolved."""
    defaults = data.get("defaults") or {}
    if data.get("known_hosts") and "known_hosts" not in defaults:
        defaults = {**defaults, "known_hosts": data["known_hosts"]}
    return make_host(
        name,
        entry,
        defaults=defaults,
        ssh_config=ssh_config or data.get("ssh_config"),
        where=where,
        read_ssh_config=read_ssh_config,
    )


# the top-level properties of ddtctl/schema/hosts.py
_TOP_KEYS = ("ssh_config", "known_hosts", "defaults", "hosts")


def _check_top(data: dict, where: str) -> None:
    """The top-level keys and their types, as hosts.schema.json has them."""
    for key in data:
        if key not in _TOP_KEYS:
            raise UsageError(
                f"unknown top-level key {key!r}", where=where, fix=f"known keys: {', '.join(_TOP_KEYS)}"
            )
    for key in ("ssh_config", "known_hosts"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise UsageError(f"{key} must be a path (a string), got {data[key]!r:.40}", where=where)
    if data.get("defaults") is not None and not isinstance(data["defaults"], dict):
        raise UsageError("defaults must be a mapping of host settings", where=where)


def resolve_host(name: str, inventory: Inventory, *, ssh_config: str | None = None) -> Host:
    """A host from the inventory, or (when absent there) an alias from ~/.ssh/config. The name is checked
    first (names.check_host), before ssh_config sees it."""
    check_host(name)
    if name in inventory.hosts:
        return inventory.hosts[name]
    sshc = _ssh_config_lookup(name, ssh_config)
    if sshc and sshc.get("hostname") and (sshc["hostname"] != name or len(sshc) > 1):
        return make_host(name, {}, ssh_config=ssh_config)
    return inventory.get(name)  # raises with suggestions
