"""Where the pinned SGLang wheel's sources are read from: both raise-site inventories (rules/coverage.py for
the resolver, rules/launch/sites.py for the start path) scan them."""

from __future__ import annotations

from pathlib import Path


def default_root(version: str = "0.5.23") -> Path:
    """The pinned wheel's sglang package: the managed env's (`ddtctl env create`), else the unpacked wheel at
    /tmp/sgl/sglang."""
    import glob

    from ddtctl.paths import cache_root

    base = cache_root() / f"sglang-{version}"
    for candidate in sorted(glob.glob(str(base / "lib" / "python*" / "site-packages" / "sglang"))):
        return Path(candidate)
    from ddtctl.errors import EnvironmentMissing

    fallback = Path("/tmp/sgl/sglang")
    if fallback.is_dir():
        return fallback
    raise EnvironmentMissing(
        f"no SGLang {version} sources found under {base}",
        fix="run `ddtctl env create` (or `make sglang-env`)",
    )
