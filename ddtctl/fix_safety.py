"""How `validate --fix` treats a finding's edits: safe (applied by --fix) or unsafe (only with
--unsafe-fixes). Its own module so that validate (which labels findings) and fix (which applies them)
both import it, not each other."""

from __future__ import annotations

from typing import Any

SAFE, UNSAFE = "safe", "unsafe"


def edit_safety(edits: dict[str, Any], catalog: Any = None, *, unsafe: bool | None = None) -> str | None:
    """SAFE, UNSAFE, or None (no edit): how `validate --fix` treats these edits (dashed flag -> value).
    `catalog` (a ddtctl.schema.catalog.Catalog) tells choice flags from free-form ones; without it a string
    value counts as a choice. `unsafe` is the rule's own verdict, when it gave one."""
    if not edits:
        return None
    if unsafe is not None:
        return UNSAFE if unsafe else SAFE
    for key, value in edits.items():
        if value is None or isinstance(value, (list, dict)):
            return UNSAFE  # drops a flag the user set / replaces a structure
        if isinstance(value, bool):
            continue  # a switch
        if isinstance(value, (int, float)):
            return UNSAFE  # a size, a ratio, a count: a guess the user must own
        spec = catalog.get(key) if catalog is not None else None
        if catalog is not None and (spec is None or not spec.choices or value not in spec.choices):
            return UNSAFE  # a free-form string (a path, a name)
    return SAFE
