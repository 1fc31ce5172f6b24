"""`~/.ssh/config` as ddtctl reads it (paramiko evaluates it; Includes are inlined here first).

Every ssh_config keyword that applies to a host (paramiko's SSHConfig.lookup output keys) is honoured,
ignored, or refused with a one-line UsageError naming the keyword and the file:line it was set at (issue #17):

  honoured      HostName User Port IdentityFile ConnectTimeout Include IgnoreUnknown AddressFamily BindAddress
                UserKnownHostsFile (every file is read; new keys go to the first)
                GlobalKnownHostsFile (read only)
                ProxyCommand (run as OpenSSH runs it: $SHELL -c 'exec CMD'; %h %p %r expanded by paramiko)
                ProxyJump (hops `[user@]host[:port]` or ssh:// URIs, comma-separated, resolved through this
                same ssh_config; the first hop keeps its own ProxyJump/ProxyCommand, later hops' are replaced
                by the chain, as with `ssh -J`; hops are verified against the target's known_hosts like the
                target)
  default only  PubkeyAuthentication yes, IdentityAgent none / the agent at $SSH_AUTH_SOCK,
                CanonicalizeHostname no, ProxyUseFdpass no, HostbasedAuthentication no, GSSAPIAuthentication
                no, GSSAPIKeyExchange no, PKCS11Provider none, SecurityKeyProvider internal,
                RequiredRSASize <= 1024; other values refused
  "+" only      Ciphers MACs KexAlgorithms HostKeyAlgorithms PubkeyAcceptedAlgorithms (PubkeyAcceptedKeyTypes)
                CASignatureAlgorithms: adding algorithms is ignored (paramiko negotiates its own list);
                replacing or removing is refused, since ignoring it would weaken what the user asked for
  refused       HostKeyAlias CertificateFile KnownHostsCommand RevokedHostKeys BindInterface RefuseConnection,
                tokens (%) in known-hosts paths, ProxyJump together with ProxyCommand, unknown keywords (as
                OpenSSH does) unless IgnoreUnknown lists them
  ignored       _SSH_IGNORED below: forwarding (LocalForward RemoteForward DynamicForward ForwardAgent
                X11...), multiplexing (Control*: every ddtctl connection is its own), tty/session/escape/log
                options, keepalives (ddtctl sends its own), password/keyboard-interactive options (never
                used), StrictHostKeyChecking CheckHostIP VerifyHostKeyDNS UpdateHostKeys HashKnownHosts
                NoHostAuthenticationForLocalhost (ddtctl always verifies against known_hosts and adds a key
                only with --trust-new-host), IdentitiesOnly (key files are offered before agent keys),
                Compression
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.remote.inventory.names import check_host, check_user
from ddtctl.remote.inventory.values import _expand, _number
from ddtctl.safeio import read_regular

_SETTING = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # paramiko SSHConfig's line syntax
_MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH


_CANON = re.compile(r"^(\s*)canonicalizehostname\b", re.IGNORECASE)
_CANON_AS = "DdtctlCanonicalizeHostname"
# A line (or an Include) ddtctl cannot read stands in its block as `DdtctlBroken N` (the Nth error): it fails
# only the hosts that block applies to, when one of them is resolved, not every command that reads the file.
_BROKEN_AS = "DdtctlBroken"


_SSH_HONOURED = frozenset(
    {
        "hostname",
        "user",
        "port",
        "identityfile",
        "connecttimeout",
        "proxyjump",
        "proxycommand",
        "include",
        "ignoreunknown",
        "userknownhostsfile",
        "globalknownhostsfile",
        "addressfamily",
        "bindaddress",
    }
)
_SSH_IGNORED = frozenset(
    {
        "addkeystoagent",
        "batchmode",
        "canonicaldomains",
        "canonicalizefallbacklocal",
        "canonicalizemaxdots",
        "canonicalizepermittedcnames",
        "channeltimeout",
        "checkhostip",
        "clearallforwardings",
        "compression",
        "connectionattempts",
        "controlmaster",
        "controlpath",
        "controlpersist",
        "dynamicforward",
        "enableescapecommandline",
        "enablesshkeysign",
        "escapechar",
        "exitonforwardfailure",
        "fingerprinthash",
        "forkafterauthentication",
        "forwardagent",
        "forwardx11",
        "forwardx11timeout",
        "forwardx11trusted",
        "gatewayports",
        "gssapiclientidentity",
        "gssapidelegatecredentials",
        "gssapikexalgorithms",
        "gssapirenewalforcesrekey",
        "gssapiserveridentity",
        "gssapitrustdns",
        "hashknownhosts",
        "hostbasedacceptedalgorithms",
        "hostbasedkeytypes",
        "identitiesonly",
        "ipqos",
        "kbdinteractiveauthentication",
        "kbdinteractivedevices",
        "challengeresponseauthentication",
        "localcommand",
        "localforward",
        "loglevel",
        "logverbose",
        "nohostauthenticationforlocalhost",
        "numberofpasswordprompts",
        "obscurekeystroketiming",
        "passwordauthentication",
        "permitlocalcommand",
        "permitremoteopen",
        "preferredauthentications",
        "rekeylimit",
        "remotecommand",
        "remoteforward",
        "requesttty",
        "sendenv",
        "serveralivecountmax",
        "serveraliveinterval",
        "sessiontype",
        "setenv",
        "stdinnull",
        "streamlocalbindmask",
        "streamlocalbindunlink",
        "stricthostkeychecking",
        "syslogfacility",
        "tag",
        "tcpkeepalive",
        "tunnel",
        "tunneldevice",
        "updatehostkeys",
        "usekeychain",
        "verifyhostkeydns",
        "visualhostkey",
        "warnweakcrypto",
        "xauthlocation",
        # deprecated or removed in OpenSSH, which ignores them
        "afstokenpassing",
        "cipher",
        "compressionlevel",
        "dsaauthentication",
        "fallbacktorsh",
        "globalknownhostsfile2",
        "kerberosauthentication",
        "kerberostgtpassing",
        "protocol",
        "rhostsrsaauthentication",
        "rsaauthentication",
        "skeyauthentication",
        "tisauthentication",
        "useprivilegedport",
        "userknownhostsfile2",
        "useroaming",
        "usersh",
    }
)
_SSH_REFUSED = frozenset(
    {
        "hostkeyalias",
        "certificatefile",
        "knownhostscommand",
        "revokedhostkeys",
        "bindinterface",
        "refuseconnection",
    }
)
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
_SSH_ALGORITHMS = frozenset(
    {
        "ciphers",
        "macs",
        "kexalgorithms",
        "hostkeyalgorithms",
        "pubkeyacceptedalgorithms",
        "pubkeyacceptedkeytypes",
        "casignaturealgorithms",
    }
)
_SSH_KNOWN = (
    _SSH_HONOURED
    | _SSH_IGNORED
    | _SSH_REFUSED
    | set(_SSH_ONLY)
    | _SSH_ALGORITHMS
    | {"requiredrsasize", "identityagent"}
)


@dataclass
class _SshConfig:
    """One ssh_config with its Includes inlined: paramiko ignores `Include`, so the files are flattened here,
    with each line's origin kept to name file:line in errors."""

    path: str
    lines: list[str]
    origins: list[tuple[str, int]]
    broken: list[UsageError] = field(default_factory=list)  # what each `DdtctlBroken N` line stands for

    def lookup(self, alias: str, *, user: str | None = None, port: int | None = None) -> dict[str, Any]:
        import paramiko

        # the alias reaches ProxyCommand/ProxyJump/Match exec as %h: checked here too, whoever calls
        check_host(alias, where=self.path)
        if user is not None:
            check_user(user, where=self.path)
        head: list[str] = []
        if user or port:
            # the inventory's user/port win over ssh_config (first value wins) and feed %r/%p, as `ssh -l/-p`
            # would
            head = [f"Host {alias}"]
            if user:
                head.append(f"  User {user}")
            if port:
                head.append(f"  Port {port}")
            head.append("Host *")
        # paramiko would canonicalize (DNS lookups, a KeyError without CanonicalDomains) before we could
        # refuse it
        body = [_CANON.sub(rf"\g<1>{_CANON_AS}", line) for line in self.lines]
        try:
            cfg = paramiko.SSHConfig.from_text("\n".join(head + body))
        except Exception as err:  # a broken ssh config is a usage problem, name it
            raise UsageError(f"cannot parse ssh config: {err}", where=self.path) from None
        try:
            found = cfg.lookup(alias)
        except Exception as err:  # `Match exec` without invoke, a failed canonicalization
            raise UsageError(
                f"cannot evaluate ssh config for {alias!r}: {type(err).__name__}: {err}", where=self.path
            ) from None
        # paramiko always returns hostname (the alias itself when no block matched)
        out = dict(found)
        if _BROKEN_AS.lower() in out:  # a block that applies to this host has a line ddtctl cannot read
            raise self.broken[int(out[_BROKEN_AS.lower()])]
        if _CANON_AS.lower() in out:
            out["canonicalizehostname"] = out.pop(_CANON_AS.lower())
        return out

    def add(self, line: str, origin: tuple[str, int]) -> None:
        self.lines.append(line)
        self.origins.append(origin)

    def mark(self, err: UsageError, origin: tuple[str, int]) -> None:
        """`err` stands in the current block as `DdtctlBroken N`: it fails the hosts that block applies to,
        when one is resolved."""
        self.add(f"  {_BROKEN_AS} {len(self.broken)}", origin)
        self.broken.append(err)

    def where(self, keyword: str, value: Any = None) -> tuple[str, str]:
        """(file:line, the keyword as written) of the first line setting `keyword` (to `value`, when given and
        a line sets it so: the line a host's value came from, not another block's)."""
        found = []
        for line, (path, n) in zip(self.lines, self.origins, strict=True):
            m = _SETTING.match(line.strip())
            if m and m.group(1).lower() == keyword:
                found.append((f"{path}:{n}", m.group(1), m.group(2).strip()))
        wanted = [str(v) for v in value] if isinstance(value, list) else [] if value is None else [str(value)]
        for at, name, text in found:
            if text in wanted or text.strip('"') in wanted:
                return at, name
        return (found[0][0], found[0][1]) if found else (self.path, keyword)


def _load_ssh_config(ssh_config_path: str | None) -> _SshConfig | None:
    path = _expand(ssh_config_path or "~/.ssh/config")
    if not path or not os.path.isfile(path):
        return None
    cfg = _SshConfig(path, [], [])
    _read_into(cfg, path, 0, None)
    return cfg


def _read_into(cfg: _SshConfig, file: str, depth: int, block: str | None) -> None:
    """`file`'s lines appended to `cfg`, its Includes inlined; `block`: the Host/Match line it was included
    under. A line or an Include ddtctl cannot read is marked in its block (`_SshConfig.mark`)."""
    try:
        text = read_regular(file, 1 << 20, what="ssh config").decode("utf-8", "replace")  # no FIFO
    except OSError as err:
        raise UsageError(f"cannot read ssh config: {err.strerror or err}", where=file) from None
    current = block
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _SETTING.match(line)
        key = m.group(1).lower() if m else ""
        if m is None and line and not line.startswith("#"):
            if line.split()[0].lower() in ("host", "match"):  # whose block follows is unknown: everyone's
                current = "Host *"
                cfg.add(current, (file, n))
            cfg.mark(
                UsageError(f"cannot parse ssh config line {line[:60]!r}", where=f"{file}:{n}"), (file, n)
            )
        elif key == "include":
            _include(cfg, m.group(2), (file, n), depth, current)  # type: ignore[union-attr]  # m matched
        else:
            if key in ("host", "match"):
                if block is not None:
                    raise UsageError(
                        "this file, included from inside a Host/Match block, has its own Host/Match blocks; "
                        "ddtctl cannot evaluate that nesting",
                        where=f"{file}:{n}",
                        fix="move the Include out of the Host/Match block",
                    )
                current = line
            cfg.add(raw, (file, n))


def _include(cfg: _SshConfig, value: str, origin: tuple[str, int], depth: int, current: str | None) -> None:
    """One `Include` line inlined; what goes wrong in it (a bad line, a file nested too deep) is marked in
    the includer's block."""
    at = f"{origin[0]}:{origin[1]}"
    try:
        if depth >= _MAX_INCLUDE_DEPTH:
            raise UsageError(f"Include nested more than {_MAX_INCLUDE_DEPTH} deep", where=at)
        for inc in _include_paths(value, at):
            _read_into(cfg, inc, depth + 1, current)
            cfg.add(current or "Host *", origin)  # back to the includer's block for its next lines
    except UsageError as err:
        cfg.mark(err, origin)


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
        return (
            "is not supported by ddtctl "
            f"(it uses the agent at $SSH_AUTH_SOCK; run it with SSH_AUTH_SOCK={text})"
        )
    if key in ("userknownhostsfile", "globalknownhostsfile") and "%" in text:
        return "uses %-tokens, which ddtctl does not expand"
    if key == "addressfamily" and text.lower() not in ("any", "inet", "inet6"):
        return "must be any, inet or inet6"
    return None


def _check_ssh_keywords(cfg: _SshConfig, sshc: dict[str, Any], alias: str, *, proxies: bool) -> None:
    ignore = [p.strip().lower() for p in str(sshc.get("ignoreunknown") or "").split(",") if p.strip()]
    fix = (
        f"remove it from the blocks that match {alias}, "
        "or point the inventory's `ssh_config:` at a file without it"
    )
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
            raise UsageError(
                f"ssh_config keyword {name} (host {alias}) is unknown to ddtctl",
                where=where,
                fix="remove it, or list it in IgnoreUnknown (OpenSSH rejects unknown keywords too)",
            )
        why = _ssh_refusal(key, value)
        if why:
            raise UsageError(f"ssh_config keyword {name} {shown} (host {alias}) {why}", where=where, fix=fix)
    if proxies and sshc.get("proxycommand") and str(sshc.get("proxyjump") or "none").lower() != "none":
        where, _ = cfg.where("proxyjump")
        raise UsageError(
            f"both ProxyJump and ProxyCommand apply to {alias}; ddtctl cannot tell which one "
            "OpenSSH would use",
            where=where,
            fix="keep one of them for this host",
        )


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
        raise UsageError(
            f"bad ProxyJump hop {spec!r}",
            where=where,
            fix="write hops as [user@]host[:port], separated by commas",
        )
    check_host(host, what="ProxyJump host", where=where)
    if user:
        check_user(user, what="ProxyJump user", where=where)
    number = (
        None if port is None else int(_number(port, "ProxyJump port", where, lo=1, hi=65535, integer=True))
    )
    return user or None, host, number
