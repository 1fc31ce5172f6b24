"""SGLang resolver worker: JSON lines over stdin/stdout, run by the managed env's python.

This file is executed as a script by the interpreter of the managed SGLang environment (or a remote host's
python); it must not import ddtctl and uses only the standard library plus sglang and torch. It imports sglang
once, then answers one request per input line:

    request:  {"id": 7, "argv": [...], "platform": {"sm": 90, "capability": [9, 0], "memory_gb": 141} | null,
               "env": {"SGLANG_...": "..."} (optional: the server's environment, undone after the resolve)}
    response: {"id": 7, "accepted": bool, "error": {"type", "message", "hook"} | null, "error_at": str | null,
               "resolved": {...}, "overrides": [{"field", "raw", "resolved", "hook"}], "warnings": [...],
               "elapsed_s": float}

On start it prints {"ready": true, "versions": {...}, "import_s": float} (or {"ready": false, "error": ...}).
A request {"op": "ping"} answers {"pong": true}. The protocol stream is a private copy of fd 1; fd 1 itself is
pointed at stderr so stray prints from sglang cannot corrupt the protocol.

Every request starts from the same clean state: os.environ, the platform overrides, the patched probes,
logging and argparse-visible globals are restored after each resolve, and the ServerArgs record is built
afresh.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import sys
import time
import traceback
from typing import Any

# The facts each declared GPU generation implies. Keys are sglang.srt.runtime_context platform facts.
_SM_FLAGS = ("is_sm90", "is_sm100", "is_sm100_or_sm110", "is_sm110", "is_sm120", "is_blackwell")

# Resolved fields always reported (when the record has them), besides every field a hook declared.
REPORTED_FIELDS = (
    "model_path",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_draft_tokens",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_dflash_block_size",
    "speculative_draft_window_size",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "speculative_draft_attention_backend",
    "speculative_attention_mode",
    "page_size",
    "disable_overlap_schedule",
    "disable_radix_cache",
    "mamba_radix_cache_strategy",
    "mamba_track_interval",
    "max_running_requests",
    "tp_size",
    "dp_size",
    "pp_size",
    "ep_size",
    "attn_dp_size",
    "enable_dp_attention",
    "mem_fraction_static",
    "chunked_prefill_size",
    "context_length",
    "kv_cache_dtype",
    "linear_attn_backend",
    "device",
)


def _platform_facts(platform: dict | None) -> dict:
    """override_platform kwargs (platform facts) for a declared GPU: {"sm": 90, "capability": [9, 0]}."""
    if not platform:
        return {}
    sm = int(platform.get("sm") or 0)
    cap = platform.get("capability") or [sm // 10, sm % 10]
    cap = (int(cap[0]), int(cap[1]))
    facts: dict[str, Any] = {k: False for k in _SM_FLAGS}
    facts.update(
        is_cuda=True,
        is_hip=False,
        is_npu=False,
        is_xpu=False,
        is_musa=False,
        is_mps=False,
        has_amx=False,
        has_flashinfer=bool(platform.get("has_flashinfer", True)),
        is_hopper_with_cuda_12_3=cap[0] == 9,
        device_sm=sm,
        device_capability=cap,
        is_sm90=cap[0] == 9,
        is_sm100=cap[0] == 10,
        is_sm110=cap[0] == 11,
        is_sm100_or_sm110=cap[0] in (10, 11),
        is_sm120=cap[0] == 12,
        is_blackwell=cap[0] in (10, 11, 12),
    )
    return facts


def _import_torchvision(torch: Any) -> None:
    """Import torchvision the way SGLang will, so a mismatched build cannot break the resolver.

    A torchvision that matches torch (a GPU host's image) registers its own C++ ops: declaring them first from
    Python makes its library load abort the process. PyPI's torchvision is a CUDA build; beside CPU torch its
    extension does not load and its import fails with "operator torchvision::nms does not exist". Only then
    are the op schemas declared and the import retried.
    """
    try:
        import torchvision  # noqa: F401

        return
    except ImportError:
        return
    except Exception as exc:  # noqa: BLE001 - the mismatched build raises RuntimeError from its meta registrations
        if "torchvision::" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    for qualname, schema in (
        ("torchvision::nms", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"),
        ("torchvision::qnms", "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor"),
    ):
        try:
            torch.library.define(qualname, schema)
        except RuntimeError:  # already declared
            pass
    try:
        import torchvision  # noqa: F401,F811
    except ImportError:
        pass


class _Probes:
    """Stubs for the direct device queries a few hooks make (torch.cuda.get_device_capability, the lru-cached
    utils.common probes, device memory). They read the facts of the request being resolved."""

    def __init__(self) -> None:
        self.facts: dict = {}
        self.memory_gb: float | None = None
        self.installed = False

    def install(self) -> None:
        import torch

        probes = self

        def get_device_capability(device=None):
            cap = probes.facts.get("device_capability")
            if cap is None:
                raise RuntimeError("no GPU declared for this dry-run (pass --gpu)")
            return tuple(cap)

        torch.cuda.get_device_capability = get_device_capability
        try:
            from sglang.srt.utils import common
        except Exception:  # pragma: no cover - depends on the sglang build
            return
        # Functions named after a platform fact: answer from the declared facts, else the real probe.
        from sglang.srt import runtime_context as rc

        replacements = {}
        for fact, probe_name in list(rc._PLATFORM_PROBES.items()) + list(rc._PLATFORM_VALUES.items()):
            original = getattr(common, probe_name, None)
            if original is None or getattr(original, "_ddtctl_stub", False):
                continue

            def make(fact=fact, original=original):
                def stub(*args, **kwargs):
                    if fact in probes.facts:
                        return probes.facts[fact]
                    return original(*args, **kwargs)

                # attributes on a function object (which mypy does not model): the marker and lru_cache's API
                stub.__dict__.update(
                    _ddtctl_stub=True, cache_clear=getattr(original, "cache_clear", lambda: None)
                )
                return stub

            replacements[original] = make()
        mem_original = getattr(common, "get_device_memory_capacity", None)
        if mem_original is not None:

            def get_device_memory_capacity(device=None, *args, **kwargs):
                if probes.memory_gb is not None and (
                    device in (None, "cuda") or str(device).startswith("cuda")
                ):
                    return float(probes.memory_gb) * 1024.0  # MiB, like the real probe
                return mem_original(device, *args, **kwargs)

            get_device_memory_capacity.__dict__["_ddtctl_stub"] = True
            replacements[mem_original] = get_device_memory_capacity
        # Rebind every module-level reference (hooks import the probes by name).
        self._replacements = replacements
        self.rebind()
        self.installed = True

    def rebind(self) -> None:
        replacements = getattr(self, "_replacements", {})
        if not replacements:
            return
        for name, module in list(sys.modules.items()):
            if not (name == "sglang" or name.startswith("sglang.")) or module is None:
                continue
            namespace = getattr(module, "__dict__", None)
            if not namespace:
                continue
            for attr, value in list(namespace.items()):
                try:
                    new = replacements.get(value)
                except TypeError:
                    continue
                if new is not None:
                    namespace[attr] = new


def _jsonable(value, depth: int = 0):
    if depth > 6:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    name = getattr(value, "name", None)
    if (
        hasattr(value, "__class__")
        and value.__class__.__module__ == "enum"
        or (isinstance(name, str) and hasattr(value, "value"))
    ):
        return _jsonable(getattr(value, "value", name), depth + 1)
    try:
        import msgspec

        return _jsonable(msgspec.to_builtins(value), depth + 1)
    except Exception:
        pass
    if hasattr(value, "__dict__") and not callable(value):
        return {k: _jsonable(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


class _StepTracker:
    """Wraps the pipeline's run_hook / run_post_process_pass so every declaration and every exception can be
    attributed to the resolution step that made it. Behaviour of the steps is unchanged."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.failed_step: str | None = None
        self.attribution: list[str] = []  # step name per entry of server_args._resolved_overrides
        self.server_args = None

    def _attribute(self, name: str) -> None:
        sa = self.server_args
        stash = getattr(sa, "_resolved_overrides", None) if sa is not None else None
        n = len(stash or ())
        while len(self.attribution) < n:
            self.attribution.append(name)

    def wrap(self, fn_runner, step_first: bool):
        tracker = self

        def runner(a, b, *args, **kwargs):
            step, server_args = (a, b) if step_first else (b, a)
            tracker.server_args = server_args
            tracker._attribute(tracker.stack[-1] if tracker.stack else "resolve_once")
            name = _step_name(step)
            tracker.stack.append(name)
            try:
                return fn_runner(a, b, *args, **kwargs)
            except BaseException:
                # Outer steps see the exception after inner ones: the step that raised is the last one set.
                tracker.failed_step = name
                raise
            finally:
                tracker._attribute(name)
                tracker.stack.pop()

        runner.__dict__["_ddtctl_wrapped"] = True
        return runner

    def reset(self) -> None:
        self.stack.clear()
        self.failed_step = None
        self.attribution = []
        self.server_args = None


def _step_name(step) -> str:
    name = getattr(step, "__qualname__", None) or getattr(step, "__name__", None) or repr(step)
    module = (getattr(step, "__module__", "") or "").rsplit(".", 1)[-1]
    return f"{module}.{name}" if module else name


class Worker:
    def __init__(self, out) -> None:
        self.out = out
        self.versions: dict = {}

    # -- start-up --------------------------------------------------------------------------------------------
    def boot(self) -> None:
        t0 = time.perf_counter()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
        import torch

        _import_torchvision(torch)

        # As SGLang's launcher does before parsing (launch_server.py): run the general plugins (entry points
        # of group sglang.srt.plugins), e.g. the DDTREE overlay payload when its view is on sys.path. A no-op
        # otherwise.
        from importlib.metadata import entry_points

        import sglang
        import sglang.srt.server_args as server_args_mod
        from sglang.srt.arg_groups import overrides, pipeline  # noqa: F401
        from sglang.srt.plugins import load_plugins

        self.plugins = sorted({ep.name for ep in entry_points(group="sglang.srt.plugins")})
        load_plugins()

        # Import every hook module now, so the probe stubs can be bound into them once.
        import importlib
        import pkgutil

        import sglang.srt.arg_groups as ag

        for info in pkgutil.iter_modules(ag.__path__):
            try:
                importlib.import_module(f"sglang.srt.arg_groups.{info.name}")
            except Exception:
                pass
        # The hooks import more modules lazily, inside functions. Import them all now, before any platform
        # facts are declared: some modules pick CUDA-only imports (sgl_kernel) at import time when is_cuda()
        # is true, and importing them under the first request's declared GPU would make verdicts depend on
        # request order.
        for extra in ["sglang.srt.entrypoints.engine"] + _lazy_imports(ag.__path__[0]):
            try:
                importlib.import_module(extra)
            except BaseException:  # noqa: BLE001 - optional modules of other platforms
                pass

        self.server_args_mod = server_args_mod
        self.pipeline = pipeline
        self.overrides = overrides
        from sglang.srt import runtime_context

        self.runtime_context = runtime_context

        self.probes = _Probes()
        self.probes.install()
        self.tracker = _StepTracker()
        pipeline.run_hook = self.tracker.wrap(pipeline.run_hook, step_first=True)
        pipeline.run_post_process_pass = self.tracker.wrap(pipeline.run_post_process_pass, step_first=False)

        def _version(mod):
            try:
                from importlib.metadata import version

                return version(mod)
            except Exception:
                return None

        self.versions = {
            "sglang": getattr(sglang, "__version__", None) or _version("sglang"),
            "torch": torch.__version__,
            "transformers": _version("transformers"),
            "python": "%d.%d.%d" % sys.version_info[:3],
        }
        # The clean state every request starts from.
        self.base_environ = dict(os.environ)
        self.base_logging = self._logging_state()
        self.base_sys_modules = set(sys.modules)
        self.import_s = time.perf_counter() - t0

    @staticmethod
    def _logging_state():
        root = logging.getLogger()
        return (root.level, list(root.handlers), logging.root.manager.disable)

    def _restore(self) -> None:
        # os.environ: hooks export settings (handle_environment_variables etc.).
        if dict(os.environ) != self.base_environ:
            os.environ.clear()
            os.environ.update(self.base_environ)
        level, handlers, disable = self.base_logging
        root = logging.getLogger()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.disable(disable)
        # Modules imported lazily by this resolve may hold fresh references to the real probes.
        if set(sys.modules) != self.base_sys_modules:
            self.probes.rebind()
            self.base_sys_modules = set(sys.modules)
        self.tracker.reset()

    # -- one request -----------------------------------------------------------------------------------------
    def resolve(self, request: dict) -> dict:
        t0 = time.perf_counter()
        argv = [str(a) for a in request.get("argv") or []]
        # The server's environment from the profile (SGLANG_* switches change verdicts); _restore() undoes it.
        os.environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
        facts = _platform_facts(request.get("platform"))
        self.probes.facts = dict(facts)
        self.probes.memory_gb = (request.get("platform") or {}).get("memory_gb")
        # CPU torch reports no CUDA version; a few hooks gate kernels on it (attention_hook: flashinfer GDN
        # prefill on SM100+ needs CUDA 13). Declare the target's CUDA (default 13.0, what current GPU hosts
        # run).
        import torch

        saved_cuda = torch.version.cuda
        if facts:
            torch.version.cuda = str((request.get("platform") or {}).get("cuda_version") or "13.0")
        warnings: list[str] = []
        handler = _ListHandler(warnings)
        override = self.runtime_context.override_platform(**facts) if facts else None
        sa = None
        stage = "prepare_server_args"
        result: dict = {"id": request.get("id"), "accepted": False, "error": None, "error_at": None}
        try:
            if override is not None:
                override.install()
            err_buf = io.StringIO()
            try:
                with contextlib.redirect_stderr(err_buf):
                    sa = self.server_args_mod.prepare_server_args(argv)
            except SystemExit as exc:  # argparse rejects the command line
                text = err_buf.getvalue().strip()
                last = text.splitlines()[-1] if text else f"argument parsing failed (exit {exc.code})"
                msg = last.split(": error: ", 1)[-1]
                raise _ArgparseError(msg) from None
            logging.getLogger().addHandler(handler)
            stage = "resolve_once"
            self.tracker.server_args = sa
            sa.resolve_once()
            stage = "check_server_args"
            sa.check_server_args()
            result["accepted"] = True
        except BaseException as exc:  # noqa: BLE001 - every failure is a verdict
            if isinstance(exc, KeyboardInterrupt):
                raise
            result["error"] = self._error(exc, stage)
            result["error_at"] = _raised_at(exc)
        finally:
            try:
                logging.getLogger().removeHandler(handler)
            except Exception:
                pass
            if override is not None:
                try:
                    override.restore()
                except Exception:
                    pass
        try:
            result["resolved"], result["overrides"] = self._collect(sa)
        except Exception as exc:  # noqa: BLE001
            result["resolved"], result["overrides"] = {}, []
            warnings.append(f"ddtctl: could not collect resolved values: {type(exc).__name__}: {exc}")
        result["warnings"] = warnings
        torch.version.cuda = saved_cuda
        self.probes.facts = {}
        self.probes.memory_gb = None
        self._restore()
        result["elapsed_s"] = round(time.perf_counter() - t0, 4)
        return result

    def _error(self, exc: BaseException, stage: str) -> dict:
        if isinstance(exc, _ArgparseError):
            return {"type": "ArgumentError", "message": str(exc), "hook": "argparse"}
        message = str(exc)
        if not message and isinstance(exc, AssertionError):
            message = "assertion failed (SGLang gave no message): " + (_assert_source(exc) or "")
        hook = self.tracker.failed_step
        if hook is None:
            hook = "validation_hook.check_server_args" if stage == "check_server_args" else stage
        return {"type": type(exc).__name__, "message": message, "hook": hook}

    def _collect(self, sa):
        if sa is None:
            return {}, []
        resolution_result = self.overrides.resolution_result
        raw = getattr(sa, "_raw_input", None) or {}
        stash = list(getattr(sa, "_resolved_overrides", None) or ())
        attribution = list(self.tracker.attribution)
        while len(attribution) < len(stash):
            attribution.append(self.tracker.stack[-1] if self.tracker.stack else "resolve_once")
        fields = [f for f in REPORTED_FIELDS if f in raw or hasattr(sa, f)]
        last_source: dict[str, tuple[str, str]] = {}
        for (source, declared), step in zip(stash, attribution, strict=True):
            for name in declared:
                if name.startswith("_"):  # bookkeeping, not configuration
                    continue
                last_source[name] = (step, source)
                if name not in fields:
                    fields.append(name)
        resolved = {}
        for name in fields:
            try:
                resolved[name] = _jsonable(resolution_result(sa, name))
            except Exception as exc:  # noqa: BLE001
                resolved[name] = f"<unreadable: {type(exc).__name__}>"
        overrides = []
        for name, (step, _source) in last_source.items():
            before = _jsonable(raw.get(name, getattr(sa, name, None)))
            after = resolved.get(name)
            if before != after:
                overrides.append({"field": name, "raw": before, "resolved": after, "hook": step})
        return resolved, overrides


class _ArgparseError(Exception):
    pass


class _ListHandler(logging.Handler):
    def __init__(self, sink: list) -> None:
        super().__init__(level=logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.sink.append(f"{record.levelname}: {record.getMessage()}")
        except Exception:
            pass


def _lazy_imports(arg_groups_dir: str) -> list[str]:
    """sglang modules imported inside functions of the resolution code (arg_groups/, server_args.py,
    configs/model_config.py, the speculative hook's helpers)."""
    import re

    pattern = re.compile(r"^\s+(?:from\s+(sglang[\w.]*)\s+import|import\s+(sglang[\w.]*))", re.M)
    srt = os.path.dirname(arg_groups_dir)
    files = [os.path.join(arg_groups_dir, f) for f in sorted(os.listdir(arg_groups_dir)) if f.endswith(".py")]
    files += [os.path.join(srt, "server_args.py"), os.path.join(srt, "configs", "model_config.py")]
    seen: list[str] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        for a, b in pattern.findall(text):
            name = a or b
            if name not in seen:
                seen.append(name)
    return seen


def _raised_at(exc: BaseException) -> str | None:
    """Innermost frame inside sglang's arg_groups (else inside sglang) that raised the exception."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    best = None
    for fr in frames:
        path = fr.filename.replace("\\", "/")
        if "/sglang/" in path:
            if "/arg_groups/" in path or best is None or "/arg_groups/" not in best[0]:
                best = (path, fr)
    if best is None:
        return None
    path, fr = best
    short = path.split("/sglang/", 1)[-1]
    return f"sglang/{short}:{fr.lineno} in {fr.name}"


def _assert_source(exc: BaseException) -> str | None:
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    for fr in reversed(frames):
        if fr.line:
            return fr.line.strip()
    return None


def main() -> int:
    # The protocol stream is a private duplicate of stdout; fd 1 goes to stderr from now on.
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8")

    def send(obj) -> None:
        out.write(json.dumps(obj, default=repr) + "\n")
        out.flush()

    for path in reversed([p for p in os.environ.get("DDTCTL_EXTRA_SYS_PATH", "").split(os.pathsep) if p]):
        sys.path.insert(0, path)

    worker = Worker(out)
    try:
        worker.boot()
    except BaseException as exc:  # noqa: BLE001
        send(
            {
                "ready": False,
                "error": {"type": type(exc).__name__, "message": str(exc), "hook": None},
                "traceback": traceback.format_exc(),
            }
        )
        out.close()
        os._exit(3)
    send(
        {
            "ready": True,
            "versions": worker.versions,
            "import_s": round(worker.import_s, 3),
            "pid": os.getpid(),
            "plugins": getattr(worker, "plugins", []),
        }
    )

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            send({"id": None, "protocol_error": f"bad JSON: {exc}"})
            continue
        op = request.get("op", "resolve")
        if op == "ping":
            send({"id": request.get("id"), "pong": True})
        elif op == "info":
            send(
                {
                    "id": request.get("id"),
                    "sys_path": sys.path,
                    "versions": worker.versions,
                    "sglang_file": getattr(sys.modules.get("sglang"), "__file__", None),
                }
            )
        elif op == "exit":
            break
        elif op == "resolve":
            send(worker.resolve(request))
        else:
            send({"id": request.get("id"), "protocol_error": f"unknown op {op!r}"})
    out.flush()
    # Interpreter shutdown with sglang loaded takes ~1.7 s; nothing is left to flush.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
