"""TEST STAND-IN: permissive placeholder modules for SGLang's HTTP-server dependencies (fastapi, uvicorn, uvloop,
...), which the managed dry-run env does not install. With them, `sglang.srt.entrypoints.engine` imports on this
CPU machine, so a test can check that the DDTREE payload's launch gate really wraps Engine._launch_subprocesses
(through SGLang's own plugin HookRegistry) and refuses a DDTREE server before anything is spawned.
Nothing here is ever called: every attribute is an inert placeholder class.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

NAMES = {"uvloop", "uvicorn", "fastapi", "orjson", "starlette", "sse_starlette", "prometheus_client",
         "setproctitle", "zmq", "interegular", "outlines", "xgrammar", "llguidance", "python_multipart",
         "multipart", "soundfile", "grpc", "grpcio"}


class _Placeholder:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Placeholder()

    def __getattr__(self, name):
        return _Placeholder()

    def __class_getitem__(cls, item):
        return cls

    def __mro_entries__(self, bases):
        return (object,)


def _any_schema(cls, source, handler):
    from pydantic_core import core_schema

    return core_schema.any_schema()


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None,
                                "__getattr__": lambda self, n: _Placeholder(),
                                "__call__": lambda self, *a, **k: _Placeholder(),
                                "__get_pydantic_core_schema__": classmethod(_any_schema)})
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _Module(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        import asyncio

        if module.__name__ == "uvloop":  # tokenizer_manager sets it as the event-loop policy at import
            module.EventLoopPolicy = asyncio.DefaultEventLoopPolicy
            module.new_event_loop = asyncio.new_event_loop
            module.install = lambda: None


def install(only_missing: bool = True) -> list[str]:
    """Stand in for each name that cannot be imported for real. Returns the names stood in for."""
    import importlib.util

    names = [n for n in sorted(NAMES) if not only_missing or importlib.util.find_spec(n) is None]
    if names:
        sys.meta_path.append(_Finder(names))
    return names
