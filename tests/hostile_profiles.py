"""Hostile profiles that tests and bench/validate_speed.py both feed to ddtctl (issue #14 defect 11)."""

from __future__ import annotations

from pathlib import Path


def unknown_keys_profile(path: Path, header: tuple[str, ...] = ("name: t", "model: {path: /m}"),
                         size: int = 1_000_000) -> int:
    """Writes `header`, `server:` and then one unknown server key per line, up to `size` bytes in all; returns how
    many keys (each reported as DDT001 on its own line, the first on line len(header) + 2)."""
    lines = [*header, "server:"]
    total, keys = sum(len(line) + 1 for line in lines), 0
    while total < size - 64:
        lines.append(f"  unknown-flag-number-{keys}: {keys}")
        total += len(lines[-1]) + 1
        keys += 1
    path.write_text("\n".join(lines) + "\n")
    return keys
