"""The host inventory (`hosts.yaml`) merged with `~/.ssh/config`.

Precedence for connection settings: the inventory entry, then its `defaults:`, then the matching `~/.ssh/config`
block (HostName, User, Port, IdentityFile, UserKnownHostsFile, ConnectTimeout), then built-in defaults.
Passwords are never read from anywhere: authentication is by SSH agent or key files only.
"""

from __future__ import annotations

import functools
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtctl.errors import UsageError

DEFAULT_INVENTORY = "hosts.yaml"
DEFAULT_LAUNCHER = ("{python}", "-m", "sglang.launch_server")

_HOST_KEYS = {
    "address", "user", "port", "key", "python", "work_dir", "profile", "launcher", "env", "nvidia_smi",
    "sglang_root", "connect_timeout_s", "command_timeout_s", "known_hosts", "dist_init_port", "warmup",
}
_FORBIDDEN = {"password", "passphrase", "pass", "secret"}


@dataclass(frozen=True)
class Host:
    """One deploy target, fully resolved (no further lookups needed to connect)."""

    name: str
    address: str
    user: str
    port: int = 22
    key_files: tuple[str, ...] = ()
    python: str = "python3"
    work_dir: str = "~/ddtctl"
    profile: str | None = None
    launcher: tuple[str, ...] = DEFAULT_LAUNCHER
    env: dict[str, str] = field(default_factory=dict)
    nvidia_smi: str = "nvidia-smi"
    sglang_root: str | None = None  # site-packages dir holding `sglang`; None = ask the remote python
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 120.0
    known_hosts: str = "~/.ssh/known_hosts"
    dist_init_port: int = 50000
    # run before the server starts (Triton kernels compiled into the shared cache); None = auto, () = never
    warmup: tuple[str, ...] | None = None

    @property
    def known_hosts_key(self) -> str:
        """The name this host has in known_hosts (`[addr]:port` for non-22 ports, as OpenSSH writes it)."""
        return self.address if self.port == 22 else f"[{self.address}]:{self.port}"

    def launcher_argv(self) -> list[str]:
        return [part.replace("{python}", self.python) for part in self.launcher]

    def warmup_argv(self) -> list[str] | None:
        if self.warmup is None:
            return None
        return [part.replace("{python}", self.python) for part in self.warmup]

    def describe(self) -> str:
        return f"{self.name} ({self.user}@{self.address}:{self.port})"


@dataclass
class Inventory:
    path: Path | None
    hosts: dict[str, Host]

    def get(self, name: str) -> Host:
        if name in self.hosts:
            return self.hosts[name]
        import difflib

        where = str(self.path) if self.path else "inventory"
        close = difflib.get_close_matches(name, list(self.hosts), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"known hosts: {', '.join(sorted(self.hosts)) or 'none'}"
        raise UsageError(f"unknown host {name!r}", where=where, fix=f"add it to the inventory; {hint}")


def _expand(path: str | None) -> str | None:
    return os.path.expanduser(path) if path else path


def _ssh_config_lookup(alias: str, ssh_config_path: str | None) -> dict[str, Any]:
    path = _expand(ssh_config_path or "~/.ssh/config")
    if not path or not os.path.isfile(path):
        return {}
    import paramiko

    try:
        cfg = paramiko.SSHConfig.from_path(path)
    except Exception as err:  # a broken ssh config is a usage problem, name it
        raise UsageError(f"cannot parse ssh config: {err}", where=path) from None
    found = cfg.lookup(alias)
    # paramiko always returns hostname (the alias itself when no block matched)
    return dict(found)


def _launcher(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_LAUNCHER
    if isinstance(value, str):
        parts = shlex.split(value)
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise UsageError("launcher must be a string or a list of strings", where=where)
    if not parts:
        raise UsageError("launcher is empty", where=where, fix="e.g. launcher: python -m sglang.launch_server")
    # `python` alone as the first word means the host's python
    if parts[0] in ("python", "python3"):
        parts[0] = "{python}"
    return tuple(parts)


def make_host(name: str, entry: dict[str, Any], *, defaults: dict[str, Any] | None = None,
              ssh_config: str | None = None, where: str = "inventory") -> Host:
    """Resolve one inventory entry (plus defaults and ssh config) to a Host."""
    merged: dict[str, Any] = dict(defaults or {})
    merged.update(entry or {})
    here = f"{where}: hosts.{name}"
    bad = _FORBIDDEN & {k.lower() for k in merged}
    if bad:
        raise UsageError(f"passwords are not accepted in the inventory ({', '.join(sorted(bad))})", where=here,
                         fix="use an SSH agent or a key file (key: ~/.ssh/id_ed25519)")
    unknown = set(merged) - _HOST_KEYS
    if unknown:
        import difflib

        k = sorted(unknown)[0]
        close = difflib.get_close_matches(k, sorted(_HOST_KEYS), n=1)
        raise UsageError(f"unknown key {k!r}", where=here,
                         fix=f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(_HOST_KEYS))}")
    alias = str(merged.get("address") or name)
    sshc = _ssh_config_lookup(alias, ssh_config)
    address = str(sshc.get("hostname") or alias)  # an ssh-config alias resolves through its HostName
    user = merged.get("user") or sshc.get("user") or os.environ.get("USER") or _whoami()
    port = int(_number(merged.get("port") or sshc.get("port") or 22, "port", here, lo=1, hi=65535, integer=True))
    keys: list[str] = []
    if merged.get("key"):
        keys = [merged["key"]] if isinstance(merged["key"], str) else list(merged["key"])
    elif sshc.get("identityfile"):
        keys = list(sshc["identityfile"])
    keys = [_expand(k) for k in keys]  # type: ignore[misc]
    env = merged.get("env") or {}
    if not isinstance(env, dict):
        raise UsageError("env must be a mapping of NAME: value", where=here)
    known_hosts = merged.get("known_hosts") or sshc.get("userknownhostsfile", "").split(" ")[0] or "~/.ssh/known_hosts"
    connect_timeout = _number(merged.get("connect_timeout_s") or sshc.get("connecttimeout") or 10,
                              "connect_timeout_s", here, lo=0.1, hi=3600)
    command_timeout = _number(merged.get("command_timeout_s") or 120, "command_timeout_s", here, lo=0.1, hi=7 * 86400)
    dist_init_port = int(_number(merged.get("dist_init_port") or 50000, "dist_init_port", here, lo=1, hi=65535,
                                 integer=True))
    return Host(
        name=name,
        address=address,
        user=str(user),
        port=port,
        key_files=tuple(keys),
        python=str(merged.get("python") or "python3"),
        work_dir=str(merged.get("work_dir") or "~/ddtctl"),
        profile=merged.get("profile"),
        launcher=_launcher(merged.get("launcher"), here),
        env={str(k): str(v) for k, v in env.items()},
        nvidia_smi=str(merged.get("nvidia_smi") or "nvidia-smi"),
        sglang_root=merged.get("sglang_root"),
        connect_timeout_s=connect_timeout,
        command_timeout_s=command_timeout,
        known_hosts=str(known_hosts),
        dist_init_port=dist_init_port,
        warmup=None if merged.get("warmup") is None else
        (() if merged["warmup"] in ([], "", "none") else _launcher(merged["warmup"], here)),
    )


def _number(value: Any, key: str, where: str, *, lo: float, hi: float, integer: bool = False) -> float:
    """A finite number in [lo, hi] (an integer when `integer`); UsageError naming the key otherwise (issue #14:
    `connect_timeout_s: soon` crashed with a ValueError)."""
    import math

    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value) if not integer or isinstance(value, float) else int(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        kind = "an integer" if integer else "a number"
        raise UsageError(f"{key} must be {kind}, got {shown}", where=where) from None
    if integer and isinstance(number, float) and not number.is_integer():
        raise UsageError(f"{key} must be an integer, got {shown}", where=where)
    if not math.isfinite(number) or not lo <= number <= hi:
        raise UsageError(f"{key} must be between {lo:g} and {hi:g}, got {shown}", where=where)
    return number


def _whoami() -> str:
    import getpass

    return getpass.getuser()


MAX_INVENTORY_BYTES = 1024 * 1024


@functools.lru_cache(maxsize=None)
def _unique_key_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

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
                        None, None, f"duplicate {what} {key!r} (first at line {first.start_mark.line + 1})",
                        key_node.start_mark)
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


def load_inventory(path: str | os.PathLike | None = None, *, ssh_config: str | None = None) -> Inventory:
    """Read hosts.yaml. Missing file with no explicit path -> an empty inventory (ssh-config aliases still work)."""
    import yaml

    explicit = path is not None or bool(os.environ.get("DDTCTL_INVENTORY"))
    p = Path(path or os.environ.get("DDTCTL_INVENTORY") or DEFAULT_INVENTORY).expanduser()
    if not p.exists():
        if explicit:
            raise UsageError("inventory file not found", where=str(p),
                             fix="create it from hosts.example.yaml or pass --inventory PATH")
        return Inventory(path=None, hosts={})
    from ddtctl.safeio import read_regular

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
    defaults = data.get("defaults") or {}
    ssh_cfg = ssh_config or data.get("ssh_config")
    if data.get("known_hosts") and "known_hosts" not in defaults:
        defaults = {**defaults, "known_hosts": data["known_hosts"]}
    hosts = {}
    for name, entry in (data.get("hosts") or {}).items():
        if entry is not None and not isinstance(entry, dict):
            raise UsageError(f"host {name!r} must be a mapping", where=str(p))
        hosts[str(name)] = make_host(str(name), entry or {}, defaults=defaults, ssh_config=ssh_cfg, where=str(p))
    return Inventory(path=p, hosts=hosts)


def resolve_host(name: str, inventory: Inventory, *, ssh_config: str | None = None) -> Host:
    """A host from the inventory, or (when absent there) an alias from ~/.ssh/config."""
    if name in inventory.hosts:
        return inventory.hosts[name]
    sshc = _ssh_config_lookup(name, ssh_config)
    if sshc and sshc.get("hostname") and (sshc["hostname"] != name or len(sshc) > 1):
        return make_host(name, {}, ssh_config=ssh_config)
    return inventory.get(name)  # raises with suggestions
