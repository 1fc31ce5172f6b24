"""A deploy target as ddtctl resolved it (`Host`), and the inventory of them (`Inventory`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ddtctl.errors import UsageError
from ddtctl.remote.inventory.names import check_host, check_user

DEFAULT_INVENTORY = "hosts.yaml"
DEFAULT_LAUNCHER = ("{python}", "-m", "sglang.launch_server")


_HOST_KEYS = {
    "address",
    "user",
    "port",
    "key",
    "python",
    "work_dir",
    "profile",
    "launcher",
    "env",
    "nvidia_smi",
    "sglang_root",
    "connect_timeout_s",
    "command_timeout_s",
    "known_hosts",
    "dist_init_port",
    "warmup",
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
    # how to reach the host (ssh_config, issue #17): jump hosts in connection order, or a ProxyCommand line
    proxy_jump: tuple["Host", ...] = ()
    proxy_command: str | None = None
    address_family: str = "any"  # any | inet | inet6
    bind_address: str | None = None
    allow_agent: bool = True
    more_known_hosts: tuple[str, ...] = ()  # read-only known_hosts files besides `known_hosts`
    ssh_equivalent: str = ""  # the `ssh ...` command that reaches this host the same way (for fix hints)

    def __post_init__(self) -> None:
        # the one validator (names.py), again here: no Host, hence no connection, has an unchecked name
        check_host(self.address, what="address", where=self.name)
        check_user(self.user, where=self.name)

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
    # name -> Host; load_inventory's resolves each host (reads its ssh_config block) when first asked for
    hosts: Mapping[str, Host]
    searched: list[str] = field(default_factory=list)  # where hosts.yaml was looked for, when none was found

    def default_profile(self, host: Host) -> str | None:
        """`host`'s own profile (hosts.yaml `profile:`): the file beside the inventory when it is there
        (deploy, doctor and tune look there first), else as written; None when the host has none."""
        profile = host.profile
        if profile and self.path and not profile.startswith("/"):
            beside = self.path.parent / profile
            if beside.exists():
                return str(beside)
        return profile or None

    def missing(self) -> str:
        """Where hosts.yaml was looked for, when none was found."""
        tried = self.searched[0] if self.searched else DEFAULT_INVENTORY
        more = f" and its {len(self.searched) - 1} parent directories" if len(self.searched) > 1 else ""
        return f"no inventory (searched {tried}{more}; $DDTCTL_INVENTORY is unset)"

    def get(self, name: str) -> Host:
        if name in self.hosts:
            return self.hosts[name]
        import difflib

        if self.path is None:
            raise UsageError(
                f"unknown host {name!r}: {self.missing()} and no such Host in ~/.ssh/config",
                fix="create hosts.yaml from hosts.example.yaml, pass --inventory PATH, or add a Host "
                "entry to ~/.ssh/config",
            )
        close = difflib.get_close_matches(name, list(self.hosts), n=3)
        known = ", ".join(sorted(self.hosts)) or "none"
        hint = f"did you mean {', '.join(close)}?" if close else f"known hosts: {known}"
        raise UsageError(
            f"unknown host {name!r}", where=str(self.path), fix=f"add it to the inventory; {hint}"
        )
