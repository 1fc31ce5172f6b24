"""One inventory entry (plus `defaults:` and ssh_config) resolved to a `Host`, ProxyJump hops included."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.remote.inventory.host import _FORBIDDEN, _HOST_KEYS, Host
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
) -> Host:
    """Resolve one inventory entry (plus defaults and ssh config) to a Host."""
    merged: dict[str, Any] = dict(defaults or {})
    merged.update(entry or {})
    here = f"{where}: hosts.{name}"
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
    return _resolve(name, merged, ssh_config, here)


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
) -> Host:
    """A Host from inventory settings plus ssh_config. `hop_of`: this is a ProxyJump hop of that host (it
    inherits its known_hosts and connect timeout); `proxies`: honour this host's own
    ProxyJump/ProxyCommand."""
    cfg = _load_ssh_config(ssh_config)
    alias = str(merged.get("address") or name)
    port_set = merged.get("port")
    port_set = int(_number(port_set, "port", here, lo=1, hi=65535, integer=True)) if port_set else None
    user_set = str(merged["user"]) if merged.get("user") else None
    sshc = cfg.lookup(alias, user=user_set, port=port_set) if cfg else {}
    if cfg:
        _check_ssh_keywords(cfg, sshc, alias, proxies=proxies)
    address = str(sshc.get("hostname") or alias)  # an ssh-config alias resolves through its HostName
    user = user_set or sshc.get("user") or os.environ.get("USER") or _whoami()
    port = port_set or int(_number(sshc.get("port") or 22, "port", here, lo=1, hi=65535, integer=True))
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
    connect_timeout = _number(
        merged.get("connect_timeout_s") or sshc.get("connecttimeout") or fallback_timeout,
        "connect_timeout_s",
        here,
        lo=0.1,
        hi=3600,
    )
    command_timeout = _number(
        merged.get("command_timeout_s") or 120, "command_timeout_s", here, lo=0.1, hi=7 * 86400
    )
    dist_init_port = int(
        _number(merged.get("dist_init_port") or 50000, "dist_init_port", here, lo=1, hi=65535, integer=True)
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
