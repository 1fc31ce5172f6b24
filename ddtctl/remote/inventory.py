"""The host inventory (`hosts.yaml`) merged with `~/.ssh/config`.

Precedence for connection settings: the inventory entry, then its `defaults:`, then the matching `~/.ssh/config`
block, then built-in defaults (the inventory acts like `ssh -l/-p/-i`: its user and port are also what %r and %p
expand to in ProxyCommand/ProxyJump). Passwords are never read from anywhere: authentication is by SSH agent or key
files only.

Every ssh_config keyword that applies to a host (paramiko's SSHConfig.lookup output keys) is honoured, ignored, or
refused with a one-line UsageError naming the keyword and the file:line it was set at (issue #17):

  honoured      HostName User Port IdentityFile ConnectTimeout Include IgnoreUnknown AddressFamily BindAddress
                UserKnownHostsFile (every file is read; new keys go to the first) GlobalKnownHostsFile (read only)
                ProxyCommand (run as OpenSSH runs it: $SHELL -c 'exec CMD'; %h %p %r expanded by paramiko)
                ProxyJump (hops `[user@]host[:port]` or ssh:// URIs, comma-separated, resolved through this same
                ssh_config; the first hop keeps its own ProxyJump/ProxyCommand, later hops' are replaced by the
                chain, as with `ssh -J`; hops are verified against the target's known_hosts like the target)
  default only  PubkeyAuthentication yes, IdentityAgent none / the agent at $SSH_AUTH_SOCK, CanonicalizeHostname
                no, ProxyUseFdpass no, HostbasedAuthentication no, GSSAPIAuthentication no, GSSAPIKeyExchange no,
                PKCS11Provider none, SecurityKeyProvider internal, RequiredRSASize <= 1024; other values refused
  "+" only      Ciphers MACs KexAlgorithms HostKeyAlgorithms PubkeyAcceptedAlgorithms (PubkeyAcceptedKeyTypes)
                CASignatureAlgorithms: adding algorithms is ignored (paramiko negotiates its own list); replacing
                or removing is refused, since ignoring it would weaken what the user asked for
  refused       HostKeyAlias CertificateFile KnownHostsCommand RevokedHostKeys BindInterface RefuseConnection,
                tokens (%) in known-hosts paths, ProxyJump together with ProxyCommand, unknown keywords (as OpenSSH
                does) unless IgnoreUnknown lists them
  ignored       _SSH_IGNORED below: forwarding (LocalForward RemoteForward DynamicForward ForwardAgent X11...),
                multiplexing (Control*: every ddtctl connection is its own), tty/session/escape/log options,
                keepalives (ddtctl sends its own), password/keyboard-interactive options (never used),
                StrictHostKeyChecking CheckHostIP VerifyHostKeyDNS UpdateHostKeys HashKnownHosts
                NoHostAuthenticationForLocalhost (ddtctl always verifies against known_hosts and adds a key only
                with --trust-new-host), IdentitiesOnly (key files are offered before agent keys), Compression
"""

from __future__ import annotations

import functools
import glob
import os
import re
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
    # how to reach the host (ssh_config, issue #17): jump hosts in connection order, or a ProxyCommand line
    proxy_jump: tuple["Host", ...] = ()
    proxy_command: str | None = None
    address_family: str = "any"  # any | inet | inet6
    bind_address: str | None = None
    allow_agent: bool = True
    more_known_hosts: tuple[str, ...] = ()  # read-only known_hosts files besides `known_hosts`
    ssh_equivalent: str = ""  # the `ssh ...` command that reaches this host the same way (for fix hints)

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
    searched: list[str] = field(default_factory=list)  # where hosts.yaml was looked for, when none was found

    def get(self, name: str) -> Host:
        if name in self.hosts:
            return self.hosts[name]
        import difflib

        if self.path is None:
            tried = self.searched[0] if self.searched else DEFAULT_INVENTORY
            more = f" and its {len(self.searched) - 1} parent directories" if len(self.searched) > 1 else ""
            raise UsageError(f"unknown host {name!r}: no inventory (searched {tried}{more}; $DDTCTL_INVENTORY is "
                             "unset) and no such Host in ~/.ssh/config",
                             fix="create hosts.yaml from hosts.example.yaml, pass --inventory PATH, or add a Host "
                                 "entry to ~/.ssh/config")
        close = difflib.get_close_matches(name, list(self.hosts), n=3)
        known = ", ".join(sorted(self.hosts)) or "none"
        hint = f"did you mean {', '.join(close)}?" if close else f"known hosts: {known}"
        raise UsageError(f"unknown host {name!r}", where=str(self.path), fix=f"add it to the inventory; {hint}")


def _expand(path: str | None) -> str | None:
    return os.path.expanduser(path) if path else path


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


_SETTING = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # paramiko SSHConfig's line syntax
_MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH
_MAX_HOPS = 8
_SAFE_WORD = re.compile(r"[\w.:@+-]+")
_CANON = re.compile(r"^(\s*)canonicalizehostname\b", re.IGNORECASE)
_CANON_AS = "DdtctlCanonicalizeHostname"

_SSH_HONOURED = frozenset({
    "hostname", "user", "port", "identityfile", "connecttimeout", "proxyjump", "proxycommand", "include",
    "ignoreunknown", "userknownhostsfile", "globalknownhostsfile", "addressfamily", "bindaddress",
})
_SSH_IGNORED = frozenset({
    "addkeystoagent", "batchmode", "canonicaldomains", "canonicalizefallbacklocal", "canonicalizemaxdots",
    "canonicalizepermittedcnames", "channeltimeout", "checkhostip", "clearallforwardings", "compression",
    "connectionattempts", "controlmaster", "controlpath", "controlpersist", "dynamicforward",
    "enableescapecommandline", "enablesshkeysign", "escapechar", "exitonforwardfailure", "fingerprinthash",
    "forkafterauthentication", "forwardagent", "forwardx11", "forwardx11timeout", "forwardx11trusted",
    "gatewayports", "gssapiclientidentity", "gssapidelegatecredentials", "gssapikexalgorithms",
    "gssapirenewalforcesrekey", "gssapiserveridentity", "gssapitrustdns", "hashknownhosts",
    "hostbasedacceptedalgorithms", "hostbasedkeytypes", "identitiesonly", "ipqos", "kbdinteractiveauthentication",
    "kbdinteractivedevices", "challengeresponseauthentication", "localcommand", "localforward", "loglevel",
    "logverbose", "nohostauthenticationforlocalhost", "numberofpasswordprompts", "obscurekeystroketiming",
    "passwordauthentication", "permitlocalcommand", "permitremoteopen", "preferredauthentications", "rekeylimit",
    "remotecommand", "remoteforward", "requesttty", "sendenv", "serveralivecountmax", "serveraliveinterval",
    "sessiontype", "setenv", "stdinnull", "streamlocalbindmask", "streamlocalbindunlink", "stricthostkeychecking",
    "syslogfacility", "tag", "tcpkeepalive", "tunnel", "tunneldevice", "updatehostkeys", "usekeychain",
    "verifyhostkeydns", "visualhostkey", "warnweakcrypto", "xauthlocation",
    # deprecated or removed in OpenSSH, which ignores them
    "afstokenpassing", "cipher", "compressionlevel", "dsaauthentication", "fallbacktorsh", "globalknownhostsfile2",
    "kerberosauthentication", "kerberostgtpassing", "protocol", "rhostsrsaauthentication", "rsaauthentication",
    "skeyauthentication", "tisauthentication", "useprivilegedport", "userknownhostsfile2", "useroaming", "usersh",
})
_SSH_REFUSED = frozenset({
    "hostkeyalias", "certificatefile", "knownhostscommand", "revokedhostkeys", "bindinterface", "refuseconnection",
})
_SSH_ONLY = {  # keyword -> the values that describe what ddtctl does anyway
    "pubkeyauthentication": ("yes", "unbound", "host-bound"),
    "canonicalizehostname": ("no",),
    "proxyusefdpass": ("no",),
    "hostbasedauthentication": ("no",),
    "gssapiauthentication": ("no",),
    "gssapikeyexchange": ("no",),
    "pkcs11provider": ("none",),
    "smartcarddevice": ("none",),
    "securitykeyprovider": ("internal",),
}
_SSH_ALGORITHMS = frozenset({
    "ciphers", "macs", "kexalgorithms", "hostkeyalgorithms", "pubkeyacceptedalgorithms", "pubkeyacceptedkeytypes",
    "casignaturealgorithms",
})
_SSH_KNOWN = _SSH_HONOURED | _SSH_IGNORED | _SSH_REFUSED | set(_SSH_ONLY) | _SSH_ALGORITHMS | {
    "requiredrsasize", "identityagent"}


@dataclass
class _SshConfig:
    """One ssh_config with its Includes inlined: paramiko ignores `Include`, so the files are flattened here, with
    each line's origin kept to name file:line in errors."""

    path: str
    lines: list[str]
    origins: list[tuple[str, int]]

    def lookup(self, alias: str, *, user: str | None = None, port: int | None = None) -> dict[str, Any]:
        import paramiko

        head: list[str] = []
        if (user or port) and _SAFE_WORD.fullmatch(alias):
            # the inventory's user/port win over ssh_config (first value wins) and feed %r/%p, as `ssh -l/-p` would
            head = [f"Host {alias}"]
            if user and _SAFE_WORD.fullmatch(user):
                head.append(f"  User {user}")
            if port:
                head.append(f"  Port {port}")
            head.append("Host *")
        # paramiko would canonicalize (DNS lookups, a KeyError without CanonicalDomains) before we could refuse it
        body = [_CANON.sub(rf"\g<1>{_CANON_AS}", line) for line in self.lines]
        try:
            cfg = paramiko.SSHConfig.from_text("\n".join(head + body))
        except Exception as err:  # a broken ssh config is a usage problem, name it
            raise UsageError(f"cannot parse ssh config: {err}", where=self.path) from None
        try:
            found = cfg.lookup(alias)
        except Exception as err:  # `Match exec` without invoke, a failed canonicalization
            raise UsageError(f"cannot evaluate ssh config for {alias!r}: {type(err).__name__}: {err}",
                             where=self.path) from None
        # paramiko always returns hostname (the alias itself when no block matched)
        out = dict(found)
        if _CANON_AS.lower() in out:
            out["canonicalizehostname"] = out.pop(_CANON_AS.lower())
        return out

    def where(self, keyword: str) -> tuple[str, str]:
        """(file:line, the keyword as written) of the first line setting `keyword`."""
        for line, (path, n) in zip(self.lines, self.origins, strict=True):
            m = _SETTING.match(line.strip())
            if m and m.group(1).lower() == keyword:
                return f"{path}:{n}", m.group(1)
        return self.path, keyword


def _load_ssh_config(ssh_config_path: str | None) -> _SshConfig | None:
    path = _expand(ssh_config_path or "~/.ssh/config")
    if not path or not os.path.isfile(path):
        return None
    lines: list[str] = []
    origins: list[tuple[str, int]] = []

    def walk(file: str, depth: int, block: str | None) -> None:
        try:
            text = Path(file).read_text(errors="replace")
        except OSError as err:
            raise UsageError(f"cannot read ssh config: {err.strerror or err}", where=file) from None
        current = block
        for n, raw in enumerate(text.splitlines(), 1):
            m = _SETTING.match(raw.strip())
            key = m.group(1).lower() if m else ""
            if key == "include":
                if depth >= _MAX_INCLUDE_DEPTH:
                    raise UsageError(f"Include nested more than {_MAX_INCLUDE_DEPTH} deep", where=f"{file}:{n}")
                for inc in _include_paths(m.group(2), f"{file}:{n}"):  # type: ignore[union-attr]
                    walk(inc, depth + 1, current)
                    lines.append(current or "Host *")  # back to the includer's block for its next lines
                    origins.append((file, n))
                continue
            if key in ("host", "match"):
                if block is not None:
                    raise UsageError(
                        "this file, included from inside a Host/Match block, has its own Host/Match blocks; ddtctl "
                        "cannot evaluate that nesting", where=f"{file}:{n}",
                        fix="move the Include out of the Host/Match block")
                current = raw.strip()
            lines.append(raw)
            origins.append((file, n))

    walk(path, 0, None)
    return _SshConfig(path, lines, origins)


def _include_paths(value: str, where: str) -> list[str]:
    """OpenSSH's Include: globs, `~`, relative paths under ~/.ssh, sorted matches, no match is no error."""
    try:
        patterns = shlex.split(value)
    except ValueError as err:
        raise UsageError(f"bad Include line: {err}", where=where) from None
    out: list[str] = []
    for pattern in patterns:
        pattern = os.path.expanduser(pattern)
        if not os.path.isabs(pattern):
            pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
        out.extend(p for p in sorted(glob.glob(pattern)) if os.path.isfile(p))
    return out


def _ssh_config_lookup(alias: str, ssh_config_path: str | None) -> dict[str, Any]:
    cfg = _load_ssh_config(ssh_config_path)
    return cfg.lookup(alias) if cfg else {}


def _ssh_refusal(key: str, value: Any) -> str | None:
    """Why ddtctl cannot honour `key value`, or None when it honours or may ignore it."""
    text = " ".join(value) if isinstance(value, list) else str(value)
    if key in _SSH_REFUSED:
        return "is not supported by ddtctl"
    if key in _SSH_ONLY and text.strip().lower() not in _SSH_ONLY[key]:
        return f"is not supported by ddtctl (it only does {_SSH_ONLY[key][0]})"
    if key in _SSH_ALGORITHMS and not text.startswith("+"):
        return "restricts or reorders the algorithms, which ddtctl (paramiko) cannot honour (only +additions)"
    if key == "requiredrsasize":
        try:
            if int(text) <= 1024:
                return None
        except ValueError:
            pass
        return "is not supported by ddtctl (it accepts RSA keys from 1024 bits)"
    if key == "identityagent":
        if text in ("none", "SSH_AUTH_SOCK", "$SSH_AUTH_SOCK"):
            return None
        sock = os.environ.get("SSH_AUTH_SOCK")
        if sock and os.path.expanduser(text.replace("${SSH_AUTH_SOCK}", sock)) == sock:
            return None
        return f"is not supported by ddtctl (it uses the agent at $SSH_AUTH_SOCK; run it with SSH_AUTH_SOCK={text})"
    if key in ("userknownhostsfile", "globalknownhostsfile") and "%" in text:
        return "uses %-tokens, which ddtctl does not expand"
    if key == "addressfamily" and text.lower() not in ("any", "inet", "inet6"):
        return "must be any, inet or inet6"
    return None


def _check_ssh_keywords(cfg: _SshConfig, sshc: dict[str, Any], alias: str, *, proxies: bool) -> None:
    ignore = [p.strip().lower() for p in str(sshc.get("ignoreunknown") or "").split(",") if p.strip()]
    fix = f"remove it from the blocks that match {alias}, or point the inventory's `ssh_config:` at a file without it"
    import fnmatch

    for key, value in sshc.items():
        if key in _SSH_IGNORED or (key in ("proxyjump", "proxycommand") and not proxies):
            continue
        where, name = cfg.where(key)
        shown = " ".join(value) if isinstance(value, list) else str(value)
        shown = shown if len(shown) <= 60 else shown[:60] + "..."
        if key not in _SSH_KNOWN:
            if any(fnmatch.fnmatchcase(key, p) for p in ignore):
                continue
            raise UsageError(f"ssh_config keyword {name} (host {alias}) is unknown to ddtctl", where=where,
                             fix="remove it, or list it in IgnoreUnknown (OpenSSH rejects unknown keywords too)")
        why = _ssh_refusal(key, value)
        if why:
            raise UsageError(f"ssh_config keyword {name} {shown} (host {alias}) {why}", where=where, fix=fix)
    if proxies and sshc.get("proxycommand") and str(sshc.get("proxyjump") or "none").lower() != "none":
        where, _ = cfg.where("proxyjump")
        raise UsageError(f"both ProxyJump and ProxyCommand apply to {alias}; ddtctl cannot tell which one "
                         "OpenSSH would use", where=where, fix="keep one of them for this host")


def _parse_jump(spec: str, where: str) -> tuple[str | None, str, int | None]:
    """One ProxyJump hop: `[user@]host[:port]` (host may be `[v6addr]`) or `ssh://[user@]host[:port]`."""
    s = spec.strip()
    if s.lower().startswith("ssh://"):
        s = s[6:].rstrip("/")
    user, at, rest = s.rpartition("@")
    port: str | None = None
    if rest.startswith("["):
        host, close, tail = rest[1:].partition("]")
        if not close or (tail and not tail.startswith(":")):
            host = ""
        port = tail[1:] if tail else None
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    else:
        host = rest
    if not host or (at and not user) or any(c.isspace() for c in s) or port == "":
        raise UsageError(f"bad ProxyJump hop {spec!r}", where=where,
                         fix="write hops as [user@]host[:port], separated by commas")
    number = None if port is None else int(_number(port, "ProxyJump port", where, lo=1, hi=65535, integer=True))
    return user or None, host, number


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
    return _resolve(name, merged, ssh_config, here)


def _resolve(name: str, merged: dict[str, Any], ssh_config: str | None, here: str, *,
             hop_of: Host | None = None, proxies: bool = True, depth: int = 0, hint: str | None = None) -> Host:
    """A Host from inventory settings plus ssh_config. `hop_of`: this is a ProxyJump hop of that host (it inherits
    its known_hosts and connect timeout); `proxies`: honour this host's own ProxyJump/ProxyCommand."""
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
    keys = [_expand(k) for k in keys]  # type: ignore[misc]
    env = merged.get("env") or {}
    if not isinstance(env, dict):
        raise UsageError("env must be a mapping of NAME: value", where=here)
    user_files = [("/dev/null" if f == "none" else f) for f in _words(sshc.get("userknownhostsfile"))]
    global_files = [f for f in _words(sshc.get("globalknownhostsfile")) if f != "none"]
    if hop_of is not None:  # one known_hosts for a whole route: the target's (the hop's own files are read too)
        known_hosts = hop_of.known_hosts
        more = (*hop_of.more_known_hosts, *user_files, *global_files)
    elif merged.get("known_hosts"):
        known_hosts, more = merged["known_hosts"], tuple(global_files)
    else:
        known_hosts = user_files[0] if user_files else "~/.ssh/known_hosts"
        more = (*user_files[1:], *global_files)
    fallback_timeout = hop_of.connect_timeout_s if hop_of is not None else 10
    connect_timeout = _number(merged.get("connect_timeout_s") or sshc.get("connecttimeout") or fallback_timeout,
                              "connect_timeout_s", here, lo=0.1, hi=3600)
    command_timeout = _number(merged.get("command_timeout_s") or 120, "command_timeout_s", here, lo=0.1, hi=7 * 86400)
    dist_init_port = int(_number(merged.get("dist_init_port") or 50000, "dist_init_port", here, lo=1, hi=65535,
                                 integer=True))
    if hint is None:
        words = ["ssh"]
        if cfg and ssh_config:
            words += ["-F", cfg.path]
        if merged.get("key"):
            words += ["-i", keys[0]]
        if port_set:
            words += ["-p", str(port_set)]
        words.append(f"{user_set}@{alias}" if user_set else alias)
        hint = " ".join(shlex.quote(w) for w in words)
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
        warmup=None if merged.get("warmup") is None else
        (() if merged["warmup"] in ([], "", "none") else _launcher(merged["warmup"], here)),
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
        raise UsageError(f"ProxyJump chain to {alias} is more than {_MAX_HOPS} hops deep (a loop in the ssh config?)",
                         where=cfg.where("proxyjump")[0] if cfg else here)
    from dataclasses import replace

    where = cfg.where("proxyjump")[0] if cfg else here
    specs = [s.strip() for s in jump.split(",")]
    hops = []
    for i, spec in enumerate(specs):
        hop_user, hop_alias, hop_port = _parse_jump(spec, where)
        entry = {"address": hop_alias, **({"user": hop_user} if hop_user else {}),
                 **({"port": hop_port} if hop_port else {})}
        fwd = ["-F", cfg.path] if cfg and ssh_config else []
        via = ["-J", ",".join(specs[:i])] if i else []
        dest = [*(["-p", str(hop_port)] if hop_port else []), f"{hop_user}@{hop_alias}" if hop_user else hop_alias]
        hop_hint = " ".join(shlex.quote(w) for w in ["ssh", *fwd, *via, *dest])
        hops.append(_resolve(f"jump host {hop_alias} (for {name})", entry, ssh_config, where, hop_of=host,
                             proxies=i == 0, depth=depth + 1, hint=hop_hint))
    return replace(host, proxy_jump=tuple(hops))


def _words(value: Any) -> list[str]:
    if not value:
        return []
    try:
        return shlex.split(str(value))
    except ValueError:
        return str(value).split()


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


def find_inventory(start: Path | None = None) -> tuple[Path | None, list[Path]]:
    """hosts.yaml in the current directory or the nearest parent that has one (as git finds .git), and the paths
    looked at."""
    here = (start or Path.cwd()).resolve()
    searched = []
    for d in (here, *here.parents):
        candidate = d / DEFAULT_INVENTORY
        searched.append(candidate)
        if candidate.is_file():
            return candidate, searched
    return None, searched


def load_inventory(path: str | os.PathLike | None = None, *, ssh_config: str | None = None) -> Inventory:
    """Read hosts.yaml: --inventory, else $DDTCTL_INVENTORY, else ./hosts.yaml or the nearest parent directory's.
    None found without an explicit path -> an empty inventory (ssh-config aliases still work)."""
    import yaml

    explicit = path is not None or bool(os.environ.get("DDTCTL_INVENTORY"))
    if explicit:
        p = Path(path or os.environ.get("DDTCTL_INVENTORY") or DEFAULT_INVENTORY).expanduser()
        if not p.exists():
            raise UsageError("inventory file not found", where=str(p),
                             fix="create it from hosts.example.yaml or pass --inventory PATH")
    else:
        found, searched = find_inventory()
        if found is None:
            return Inventory(path=None, hosts={}, searched=[str(x) for x in searched])
        p = found
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
