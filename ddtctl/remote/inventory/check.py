"""`ddtctl validate --inventory hosts.yaml` (and an inventory met in `validate DIR`): the inventory file
checked by the loader every command reads it with, host by host so that every bad host is reported, and each
host's `profile:` resolved as deploy and tune resolve it and read as a profile. Nothing connects anywhere, and
no ssh_config is read (it is read when a command resolves a host, for that host)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddtctl.errors import DdtctlError, UsageError
from ddtctl.profile import load_profile
from ddtctl.remote.inventory.files import host_entries, inventory_host, read_inventory_data
from ddtctl.report import ErrorInfo


@dataclass
class InventoryCheck:
    path: str
    hosts: list[str] = field(default_factory=list)  # every host name, in file order
    profiles: dict[str, str] = field(default_factory=dict)  # host -> its profile, resolved
    errors: list[DdtctlError] = field(default_factory=list)  # one line each

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:

        return {
            "source": self.path,
            "ok": self.ok,
            "hosts": self.hosts,
            "profiles": self.profiles,
            "errors": [ErrorInfo.from_exception(e).to_json() for e in self.errors],
        }


def check_inventory(path: str | Path) -> InventoryCheck:
    """The inventory's schema (top-level keys, each host's keys and values: the loader's checks, a name or key
    given twice included), and each host's profile: found (next to the inventory, else from here, as deploy
    looks) and readable as a profile. A file that cannot be read at all raises (UsageError)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError("inventory file not found", where=str(p), fix="give the path of hosts.yaml")
    data = read_inventory_data(p)
    out = InventoryCheck(str(p))
    try:
        entries = list(host_entries(data, str(p)))
    except UsageError as err:
        out.errors.append(err)
        return out
    for name, entry in entries:
        out.hosts.append(name)
        try:
            host = inventory_host(name, entry, data, where=str(p), read_ssh_config=False)
        except UsageError as err:
            out.errors.append(err)
            continue
        if host.profile:
            _check_profile(out, p, name, host.profile)
    return out


def _check_profile(out: InventoryCheck, inventory: Path, name: str, profile: str) -> None:
    """A host's `profile:`: next to the inventory when it is there (deploy and tune look there first), else as
    given (from the current directory); it must read as a profile (its schema; `ddtctl validate` checks the
    rest)."""

    where = str(inventory)
    key = f"hosts.{name}.profile"  # in the message: a GitHub annotation shows the message, not `where`
    given = Path(profile).expanduser()
    beside = inventory.absolute().parent / given
    found = beside if not given.is_absolute() and beside.exists() else given
    if not found.exists():
        looked = {str(beside), str(given.absolute())}
        out.errors.append(
            UsageError(
                f"{key}: {profile}: no such file (looked for {' and '.join(sorted(looked))})", where=where
            )
        )
        return
    try:
        load_profile(found)
    except DdtctlError as err:
        said = f"{err.where}: {err.message}" if err.where else err.message
        out.errors.append(UsageError(f"{key}: {profile} is not a profile: {said}", where=where, fix=err.fix))
        return
    out.profiles[name] = str(found)
