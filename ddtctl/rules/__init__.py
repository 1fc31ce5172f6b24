"""Rules of the constraint graph. Importing the rule modules registers them in `engine.RULES`."""

from __future__ import annotations

_loaded = False


def load_rules() -> None:
    global _loaded
    if _loaded:
        return
    from ddtctl.rules import (  # noqa: F401
        ddtree,
        ddtree_kernels,
        ddtree_schedule,
        eagle,
        hooks,
        launch,
        mamba,
        parallel,
        speculative,
    )

    _loaded = True
