"""One inventory entry (plus `defaults:` and ssh_config) resolved to a `Host`, ProxyJump hops included."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.remote.inventory.host import _FORBIDDEN, _HOST_KEYS, Host
from ddtctl.remote.inventory.names import check_host, check_user
from ddtctl.remote.inventory.ssh_config import _check_ssh_keywords, _load_ssh_config, _parse_jump, _SshConfig
from ddtctl.remote.inventory.values import _expand, _launcher, _number, _whoami, _words

_MAX_HOPS = 8


def make_host(
    name: str,
    entry: dict[str, Any],
    *,
    defaults: dict[str, Any] | None = None,
    ssh_config: str | None = None,
    where: str = "inventory",
    read_ssh_config: bool = True,
) -> Host:
    """Resolve one inventory entry (plus defaults and ssh config) to a Host. `read_ssh_config=False`: the
    entry's own keys and values checked, no ssh_config read (what loading the inventory and `validate` do)."""
    merged: dict[str, Any] = dict(defaults or {})
    merged.update(entry or {})
    here = f"{where}: hosts.{name}"
    check_host(name, what="host name", where=f"{where}: hosts")
    odd = [k for k in merged if not isinstance(k, str)]
    if odd:
        raise UsageError(f"keys must be strings, got {odd[0]!r}", where=here, fix="e.g. port: 22")
    bad = _FORBIDDEN & {k.lower() for k in merged}
    if bad:
        raise UsageError(
            f"passwords are not accepted in the inventory ({', '.join(sorted(bad))})",
            where=here,
            fix="use an SSH agent or a key file (key: ~/.ssh/id_ed25519)",
        )
    unknown = set(merged) - _HOST_KEYS
    if unknown:
        import difflib

        k = sorted(unknown)[0]
        close = difflib.get_close_matches(k, sorted(_HOST_KEYS), n=1)
        raise UsageError(
            f"unknown key {k!r}",
            where=here,
            fix=f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(_HOST_KEYS))}",
        )
    _check_types(merged, here)
    return _resolve(name, merged, ssh_config, here, read_ssh_config=read_ssh_config)


_STRINGS = ("address", "user", "python", "work_dir", "profile", "nvidia_smi", "sglang_root", "known_hosts")


def _check_types(merged: dict[str, Any], here: str) -> None:
    """The inventory's string and path values are strings (issue #31: `key: [1, 2]` crashed with exit 70)."""
    for key in _STRINGS:
        value = merged.get(key)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"{key} must be a string, got {_shown(value)}", where=here)
    keys = merged.get("key")
    if keys is not None and not (
        isinstance(keys, str) or (isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys))
    ):
        raise UsageError(
            f"key must be a path or a list of paths, got {_shown(keys)}",
            where=here,
            fix="e.g. key: ~/.ssh/id_ed25519",
        )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _set(merged: dict[str, Any], key: str) -> Any:
    """The value the inventory sets for `key`, None when unset (0 and false are set: _number refuses them)."""
    value = merged.get(key)
    return None if value is None or value == "" else value


def _resolve(
    name: str,
    merged: dict[str, Any],
    ssh_config: str | None,
    here: str,
    *,
    hop_of: Host | None = None,
    proxies: bool = True,
    depth: int = 0,
    hint: str | None = None,
    read_ssh_config: bool = True,
) -> Host:
    """A Host from inventory settings plus ssh_config. `hop_of`: this is a ProxyJump hop of that host (it
    inherits its known_hosts and connect timeout); `proxies`: honour this host's own
    ProxyJump/ProxyCommand."""
    cfg = _load_ssh_config(ssh_config) if read_ssh_config else None
    alias, address, user, port_set, user_set, sshc = _names(name, merged, cfg, here, proxies)
    port_at = cfg.where("port", sshc["port"])[0] if cfg and sshc.get("port") else here
    port = port_set or int(_number(sshc.get("port") or 22, "port", port_at, lo=1, hi=65535, integer=True))
    keys: list[str] = []
    if merged.get("key"):
        keys = [merged["key"]] if isinstance(merged["key"], str) else list(merged["key"])
    elif sshc.get("identityfile"):
        keys = list(sshc["identityfile"])
    keys = [_expand(k) for k in keys]  # type: ignore[misc]  # _expand maps a str to a str
    env = merged.get("env") or {}
    if not isinstance(env, dict):
        raise UsageError("env must be a mapping of NAME: value", where=here)
    known_hosts, more = _known_hosts_files(merged, sshc, hop_of)
    fallback_timeout = hop_of.connect_timeout_s if hop_of is not None else 10
    timeout_at = here
    if cfg and _set(merged, "connect_timeout_s") is None and sshc.get("connecttimeout"):
        timeout_at = cfg.where("connecttimeout", sshc["connecttimeout"])[0]
    connect_timeout = _number(
        _or(_set(merged, "connect_timeout_s"), sshc.get("connecttimeout") or fallback_timeout),
        "connect_timeout_s",
        timeout_at,
        lo=0.1,
        hi=3600,
    )
    command_timeout = _number(
        _or(_set(merged, "command_timeout_s"), 120), "command_timeout_s", here, lo=0.1, hi=7 * 86400
    )
    dist_init_port = int(
        _number(
            _or(_set(merged, "dist_init_port"), 50000), "dist_init_port", here, lo=1, hi=65535, integer=True
        )
    )
    if hint is None:
        hint = _ssh_command(
            cfg.path if cfg and ssh_config else None,
            keys[0] if merged.get("key") else None,
            port_set,
            user_set,
            alias,
        )
    host = Host(
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
        warmup=None
        if merged.get("warmup") is None
        else (() if merged["warmup"] in ([], "", "none") else _launcher(merged["warmup"], here)),
        proxy_command=(sshc.get("proxycommand") or None) if proxies else None,
        address_family=str(sshc.get("addressfamily") or "any").lower(),
        bind_address=sshc.get("bindaddress") or None,
        allow_agent=str(sshc.get("identityagent") or "").lower() != "none",
        more_known_hosts=tuple(more),
        ssh_equivalent=hint,
    )
    jump = str(sshc.get("proxyjump") or "none") if proxies else "none"
    if jump.lower() == "none":
        return host
    if depth >= _MAX_HOPS:
        raise UsageError(
            f"ProxyJump chain to {alias} is more than {_MAX_HOPS} hops deep (a loop in the ssh config?)",
            where=cfg.where("proxyjump")[0] if cfg else here,
        )
    return replace(host, proxy_jump=_jump_hops(host, jump, ssh_config, cfg, here, depth))


def _names(
    name: str, merged: dict[str, Any], cfg: _SshConfig | None, here: str, proxies: bool
) -> tuple[str, str, str, int | None, str | None, dict[str, Any]]:
    """(alias, address, user, the inventory's port, the inventory's user, the ssh_config settings). Every name
    is checked (names.py) before ssh_config sees it: its %h/%r reach ProxyCommand and Match exec shells."""
    alias = check_host(merged.get("address") or name, what="address", where=here)
    port_set = _set(merged, "port")
    if port_set is not None:
        port_set = int(_number(port_set, "port", here, lo=1, hi=65535, integer=True))
    user_set = None if _set(merged, "user") is None else check_user(merged["user"], where=here)
    sshc = cfg.lookup(alias, user=user_set, port=port_set) if cfg else {}
    if cfg:
        _check_ssh_keywords(cfg, sshc, alias, proxies=proxies)
    address = str(sshc.get("hostname") or alias)  # an ssh-config alias resolves through its HostName
    user = user_set or sshc.get("user") or os.environ.get("USER") or _whoami()
    if cfg:  # what ssh_config resolved to: checked before any ProxyCommand could run with it
        check_host(address, what="ssh_config HostName", where=cfg.where("hostname", address)[0])
        check_user(user, what="ssh_config User", where=cfg.where("user", user)[0])
        if sshc.get("proxycommand") and not sshc.get("user"):
            at = cfg.where("proxycommand", sshc["proxycommand"])[0]
            check_user(_whoami(), what="local user (ProxyCommand %r)", where=at)
    return alias, address, user, port_set, user_set, sshc


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _known_hosts_files(
    merged: dict[str, Any], sshc: dict[str, Any], hop_of: Host | None
) -> tuple[str, tuple[str, ...]]:
    """(the known_hosts file new keys go to, the other files read): the inventory's, else ssh_config's
    UserKnownHostsFile (every file) and GlobalKnownHostsFile (read only); a hop uses its target's."""
    user_files = [("/dev/null" if f == "none" else f) for f in _words(sshc.get("userknownhostsfile"))]
    global_files = [f for f in _words(sshc.get("globalknownhostsfile")) if f != "none"]
    if (
        hop_of is not None
    ):  # one known_hosts for a whole route: the target's (the hop's own files are read too)
        return hop_of.known_hosts, (*hop_of.more_known_hosts, *user_files, *global_files)
    if merged.get("known_hosts"):
        return merged["known_hosts"], tuple(global_files)
    return (user_files[0] if user_files else "~/.ssh/known_hosts"), (*user_files[1:], *global_files)


def _ssh_command(
    config_file: str | None, key_file: str | None, port: int | None, user: str | None, alias: str
) -> str:
    """The `ssh ...` command that reaches the host the way the inventory says (for fix hints)."""
    words = ["ssh"]
    if config_file:
        words += ["-F", config_file]
    if key_file:
        words += ["-i", key_file]
    if port:
        words += ["-p", str(port)]
    words.append(f"{user}@{alias}" if user else alias)
    return " ".join(shlex.quote(w) for w in words)


def _jump_hops(
    host: Host, jump: str, ssh_config: str | None, cfg: _SshConfig | None, here: str, depth: int
) -> tuple[Host, ...]:
    """The ProxyJump hops of `host` (`jump`: ssh_config's comma-separated list), each resolved through the
    same ssh_config: the first keeps its own ProxyJump/ProxyCommand, later ones are reached through the chain
    (as `ssh -J`)."""
    where = cfg.where("proxyjump")[0] if cfg else here
    specs = [s.strip() for s in jump.split(",")]
    hops = []
    for i, spec in enumerate(specs):
        hop_user, hop_alias, hop_port = _parse_jump(spec, where)
        entry = {
            "address": hop_alias,
            **({"user": hop_user} if hop_user else {}),
            **({"port": hop_port} if hop_port else {}),
        }
        fwd = ["-F", cfg.path] if cfg and ssh_config else []
        via = ["-J", ",".join(specs[:i])] if i else []
        dest = [
            *(["-p", str(hop_port)] if hop_port else []),
            f"{hop_user}@{hop_alias}" if hop_user else hop_alias,
        ]
        hop_hint = " ".join(shlex.quote(w) for w in ["ssh", *fwd, *via, *dest])
        hops.append(
            _resolve(
                f"jump host {hop_alias} (for {host.name})",
                entry,
                ssh_config,
                where,
                hop_of=host,
                proxies=i == 0,
                depth=depth + 1,
                hint=hop_hint,
            )
        )
    return tuple(hops)
