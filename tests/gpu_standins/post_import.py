"""Test-only: run a function on a module right after it is first imported (or now, if it already is)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


def after_import(target: str, patch: Callable) -> None:
    if target in sys.modules:
        patch(sys.modules[target])
        return

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target_=None):
            if fullname != target:
                return None
            sys.meta_path.remove(self)  # find the real spec without finding ourselves again
            spec = importlib.util.find_spec(fullname)
            if spec is None:
                return None
            orig_exec = spec.loader.exec_module

            def exec_module(module):
                orig_exec(module)
                patch(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Hook())
