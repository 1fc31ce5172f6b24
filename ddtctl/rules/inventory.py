"""What the inventories of SGLang sites share: where the pinned wheel's sources are read from, and the table
each prints (rules/coverage.py: the resolver's raise sites and its overrides; rules/launch/sites.py: the start
path's raise sites)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddtctl.errors import EnvironmentMissing
from ddtctl.paths import cache_root


def default_root(version: str = "0.5.23") -> Path:
    """The pinned wheel's sglang package: the managed env's (`ddtctl env create`), else the unpacked wheel at
    /tmp/sgl/sglang."""
    import glob

    base = cache_root() / f"sglang-{version}"
    for candidate in sorted(glob.glob(str(base / "lib" / "python*" / "site-packages" / "sglang"))):
        return Path(candidate)

    fallback = Path("/tmp/sgl/sglang")
    if fallback.is_dir():
        return fallback
    raise EnvironmentMissing(
        f"no SGLang {version} sources found under {base}",
        fix="run `ddtctl env create` (or `make sglang-env`)",
    )


def inventory_table(
    title: str,
    rows: list[tuple[Any, dict | None]],
    *,
    describe: Callable[[Any], str],
    total_line: str,
    mapped: str = "mapped to a rule",
    missing: str = "uncovered",
    category: Callable[[dict], str] = lambda m: m["category"],
    show_missing: bool = True,
    limit: int = 60,
) -> list[str]:
    """The lines of one inventory's table: counts, exemptions by category, sites per rule, the sites no entry
    maps (`describe` writes one), and `total_line` with their count."""
    by_rule = Counter(m["rule"] for _, m in rows if m and m.get("rule"))
    exempt = Counter(category(m) for _, m in rows if m and not m.get("rule"))
    left = [s for s, m in rows if m is None]
    lines = [
        title,
        "",
        f"| sites | {mapped} | exempted | {missing} |",
        "|---:|---:|---:|---:|",
        f"| {len(rows)} | {sum(by_rule.values())} | {sum(exempt.values())} | {len(left)} |",
        "",
        "exemptions by category:",
    ]
    lines += [f"  {n:4d}  {cat}" for cat, n in exempt.most_common()]
    lines += ["", "sites per rule: " + ", ".join(f"{r} {n}" for r, n in sorted(by_rule.items()))]
    if show_missing and left:
        lines += ["", f"{missing} ({len(left)}):"]
        lines += [f"  {describe(s)}" for s in left[:limit]]
        if len(left) > limit:
            lines.append(f"  ... {len(left) - limit} more")
    return lines + ["", f"{total_line}: {len(left)}"]
