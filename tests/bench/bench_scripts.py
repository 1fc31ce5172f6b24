"""Import a script of bench/ as a module for its CPU tests (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_bench(name: str):
    """Generator for a module-scoped fixture: yields bench/<name>.py imported as module `name`, then forgets it."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # their dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    yield mod
    sys.modules.pop(name, None)
