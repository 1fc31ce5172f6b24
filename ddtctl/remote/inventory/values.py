"""Value parsing shared by the inventory and ssh_config readers: numbers in range, paths, words, launchers."""

from __future__ import annotations

import os
import shlex
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.remote.inventory.host import DEFAULT_LAUNCHER


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
        raise UsageError(
            "launcher is empty", where=where, fix="e.g. launcher: python -m sglang.launch_server"
        )
    # `python` alone as the first word means the host's python
    if parts[0] in ("python", "python3"):
        parts[0] = "{python}"
    return tuple(parts)


def _words(value: Any) -> list[str]:
    if not value:
        return []
    try:
        return shlex.split(str(value))
    except ValueError:
        return str(value).split()


def _number(value: Any, key: str, where: str, *, lo: float, hi: float, integer: bool = False) -> float:
    """A finite number in [lo, hi] (an integer when `integer`); UsageError naming the key otherwise (issue
    #14: `connect_timeout_s: soon` crashed with a ValueError)."""
    import math

    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    try:
        if isinstance(value, bool) or (integer and isinstance(value, float)):
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
