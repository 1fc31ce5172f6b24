"""Where ddtctl keeps things on this machine (XDG cache), and safe path joins."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ddtctl.errors import UsageError


def cache_root() -> Path:
    """ddtctl's one cache root: $XDG_CACHE_HOME/ddtctl (~/.cache/ddtctl). The managed SGLang env, model
    configs and overlay builds all live under it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ddtctl"


def overlay_root() -> Path:
    """Overlay builds and install state: $DDTCTL_CACHE_DIR/overlay when set (a throw-away build dir, e.g. in
    tests, without moving the managed env), else <cache_root>/overlay."""
    explicit = os.environ.get("DDTCTL_CACHE_DIR")
    return (Path(explicit).expanduser() if explicit else cache_root()) / "overlay"


def path_slug(text: str) -> str:
    """A readable directory name for a host or a remote path ("/root/models/Qwen" -> "root__models__Qwen")."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip().strip("/").replace("/", "__"))
    slug = slug.strip("._") or "_"
    return slug[:200]


def model_configs_root() -> Path:
    return cache_root() / "model-configs"


def model_config_cache_dir(host: str | None, remote_path: str) -> Path:
    """Where a copy of a remote model's config.json lives: <cache>/ddtctl/model-configs/<host>/<path-slug>/.

    `deploy`/`facts` fill it; validate and dry-run read it. host None means this machine / the hub ("local").
    """
    return model_configs_root() / path_slug(host or "local") / path_slug(remote_path)


def safe_join(root: Path, relative: str) -> Path:
    """`root/relative`, refusing absolute paths and anything that escapes `root` (.., symlinks)."""
    if os.path.isabs(relative):
        raise UsageError(f"refusing absolute path {relative!r}", fix="use a path relative to its root")
    root_resolved = root.resolve()
    candidate = (root_resolved / relative).resolve()
    if candidate != root_resolved and root_resolved not in candidate.parents:
        raise UsageError(f"refusing path {relative!r}: it escapes {root}")
    return candidate
