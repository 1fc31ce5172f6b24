"""The one validator of host names, addresses and user names (issue #31: `ddtctl facts 'x$(touch PWNED)y'`
ran the `$(...)` on this machine through a `ProxyCommand ... %h` in ~/.ssh/config).

Every name ddtctl may connect to, look up in ssh_config or expand into a ProxyCommand/ProxyJump goes through
`check_host` / `check_user` first: a CLI HOST argument, an inventory host name, `address:` and `user:`, the
HostName and User ssh_config resolves to, and every ProxyJump hop. `Host` (host.py) checks its address and
user again when it is constructed, so no connection can be made to an unchecked name.

The rule is OpenSSH 9.6's (misc.c valid_hostname / valid_ruser refuse shell metacharacters, whitespace,
control characters and a leading `-`), written as an allowlist, which is stricter:
  host  letters, digits, `.`, `_`, `-` (not first), at most 253 characters; or an IP address: IPv4, IPv6, an
        IPv6 with a `%zone`, optionally in [brackets]
  user  letters, digits, `.`, `_`, `-` (not first), `@` (user@domain logins), at most 64 characters
"""

from __future__ import annotations

import ipaddress
import re

from ddtctl.errors import UsageError, printable

HOST_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$"
USER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._@-]{0,63}$"
_HOST = re.compile(HOST_PATTERN)
_USER = re.compile(USER_PATTERN)
_ZONE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# the JSON Schema pattern of `address:` (ddtctl/schema/hosts.py): a name, or an IP address
ADDRESS_SCHEMA_PATTERN = r"^([A-Za-z0-9_][A-Za-z0-9._-]{0,252}|\[?[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?\]?)$"

_HOST_FIX = (
    "a host name is letters, digits, '.', '_' and '-' (not first), or an IP address; "
    "OpenSSH 9.6+ refuses shell metacharacters in host names too"
)
_USER_FIX = "a user name is letters, digits, '.', '_', '@' and '-' (not first)"


def _shown(value: object) -> str:
    text = repr(value)
    return printable(text if len(text) <= 60 else text[:60] + "...")


def is_ip_literal(value: str) -> bool:
    """An IPv4/IPv6 address, an IPv6 with a %zone, optionally in [brackets] (as ProxyJump writes it)."""
    text = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    addr, pct, zone = text.partition("%")
    if pct and (":" not in addr or not _ZONE.fullmatch(zone)):
        return False
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        return False
    return True


def valid_host(value: object) -> bool:
    return isinstance(value, str) and (bool(_HOST.fullmatch(value)) or is_ip_literal(value))


def valid_user(value: object) -> bool:
    return isinstance(value, str) and bool(_USER.fullmatch(value))


def check_host(value: object, *, what: str = "host name", where: str | None = None) -> str:
    """`value` when it is a valid host name or IP address; a UsageError (exit 2) naming it otherwise."""
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, got {_shown(value)}", where=where, fix=_HOST_FIX)
    if not valid_host(value):
        raise UsageError(f"invalid {what} {_shown(value)}", where=where, fix=_HOST_FIX)
    return value


def check_user(value: object, *, what: str = "user", where: str | None = None) -> str:
    """`value` when it is a valid SSH user name; a UsageError (exit 2) naming it otherwise."""
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, got {_shown(value)}", where=where, fix=_USER_FIX)
    if not valid_user(value):
        raise UsageError(f"invalid {what} {_shown(value)}", where=where, fix=_USER_FIX)
    return value
