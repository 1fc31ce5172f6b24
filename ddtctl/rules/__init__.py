"""Rules of the constraint graph. Importing the rule modules registers them in `engine.RULES`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddtctl.rules.engine import Rule

_loaded = False


def load_rules() -> None:
    global _loaded
    if _loaded:
        return
    from ddtctl.rules import hooks, launch, runtime  # noqa: F401
    from ddtctl.rules.ddtree import checks, kernels, schedule  # noqa: F401

    _loaded = True


def all_rules() -> list[Rule]:
    """Every registered rule, by id (the rule modules loaded first)."""
    from ddtctl.rules.engine import RULES

    load_rules()
    return sorted(RULES.values(), key=lambda r: r.id)
