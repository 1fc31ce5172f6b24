"""Secrets out of every deploy report: the argv/env helpers live in ddtctl.argv; these mask JSON values."""

from __future__ import annotations

from typing import Any

from ddtctl.argv import MASK, is_secret_flag, mask_argv, mask_env, mask_text


def mask_strings(value: Any, secrets: set[str]) -> Any:
    """Every string in a JSON value with each secret replaced (keys too); numbers, structure untouched."""
    if isinstance(value, str):
        return mask_text(value, secrets)
    if isinstance(value, list):
        return [mask_strings(v, secrets) for v in value]
    if isinstance(value, dict):
        return {mask_strings(k, secrets): mask_strings(v, secrets) for k, v in value.items()}
    return value


def mask_info(info: dict | None) -> dict | None:
    """A server's /get_server_info, pid file or release record with its secret flags, argv and env masked."""
    if not isinstance(info, dict):
        return info
    out: dict[str, Any] = {}
    for k, v in info.items():
        if is_secret_flag(k) and v not in (None, "", False):
            out[k] = MASK
        elif k in ("argv", "launch_argv", "launch_command") and isinstance(v, list):
            out[k] = mask_argv([str(x) for x in v])
        elif k == "env" and isinstance(v, dict):
            out[k] = mask_env(v)
        else:
            out[k] = v
    return out
