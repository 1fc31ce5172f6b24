"""Where ddtctl keeps things on this machine (XDG cache), and safe path joins."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from ddtctl.errors import UsageError


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ddtctl"


def path_slug(path: str) -> str:
    """A readable, collision-free directory name for a remote path."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", path.strip("/"))[-80:] or "root"
    return f"{readable}-{hashlib.sha256(path.encode()).hexdigest()[:10]}"


def model_config_cache_dir(host: str, remote_path: str) -> Path:
    """Where `config.json` of a model on `host` is cached for validation and dry-run."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", host):
        raise UsageError(f"invalid host name {host!r}")
    return cache_root() / "model-configs" / host / path_slug(remote_path)


def safe_join(root: Path, relative: str) -> Path:
    """`root/relative`, refusing absolute paths and anything that escapes `root` (.., symlinks)."""
    if os.path.isabs(relative):
        raise UsageError(f"refusing absolute path {relative!r}", fix="use a path relative to its root")
    root_resolved = root.resolve()
    candidate = (root_resolved / relative).resolve()
    if candidate != root_resolved and root_resolved not in candidate.parents:
        raise UsageError(f"refusing path {relative!r}: it escapes {root}")
    return candidate
