"""Entry point of the DDTREE payload: group `sglang.srt.plugins`, name `ddtree` (see the payload's dist-info).

SGLang's launcher, engine, scheduler, detokenizer and DP controller call `sglang.srt.plugins.load_plugins()`, which
calls `register()` once per process. (Set SGLANG_PLUGINS to a list that includes `ddtree` if you restrict plugins.)
"""

from __future__ import annotations

from ddtree_sglang import ALGORITHM

_launch_gate_registered = False


def _launch_gate(*args, **kwargs):
    """BEFORE hook on Engine._launch_subprocesses: refuse to start a DDTREE server when the worker is switched off."""
    from ddtree_sglang.algo import LAUNCH_REFUSAL, DdtreeLaunchRefused, worker_enabled

    if worker_enabled():
        return None

    for value in list(args) + list(kwargs.values()):
        algo = getattr(value, "speculative_algorithm", None)
        if isinstance(algo, str) and algo.upper() == ALGORITHM:
            # Resolve first (the launcher's own next step; idempotent) so a rule violation is reported as such.
            resolve_once = getattr(value, "resolve_once", None)
            if callable(resolve_once):
                resolve_once()
            raise DdtreeLaunchRefused(LAUNCH_REFUSAL)
    return None


def _server_info(result, controller, state, *args, **kwargs):
    """AFTER hook on the scheduler's speculative internal state: DDTREE's metrics in /get_server_info."""
    algo = getattr(getattr(controller, "scheduler", None), "spec_algorithm", None)
    if str(getattr(algo, "name", "")).upper() != ALGORITHM or not isinstance(state, dict):
        return None
    from ddtree_sglang.metrics import live_metrics

    state["ddtree"] = live_metrics()
    return None


def _engine_importable() -> bool:
    """The launch gate wraps the engine's entry. Where the engine cannot even be imported (the CPU dry-run env has no
    HTTP-server packages) no server can start, and registering the hook would only log an import traceback."""
    import importlib

    try:
        importlib.import_module("sglang.srt.entrypoints.engine")
    except Exception:
        return False
    return True


def register() -> None:
    """Register DDTREE, its resolution hook and the launch gate. Idempotent."""
    global _launch_gate_registered
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    from ddtree_sglang.algo import DdtreeSpecAlgo, worker_factory
    from ddtree_sglang.resolution import install_hooks

    if get_spec(ALGORITHM) is None:
        SpeculativeAlgorithm.register(ALGORITHM, supports_overlap=True, spec_class=DdtreeSpecAlgo)(worker_factory)
    install_hooks()
    if not _launch_gate_registered:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        if _engine_importable():
            HookRegistry.register(
                "sglang.srt.entrypoints.engine.Engine._launch_subprocesses", _launch_gate, HookType.BEFORE
            )
        HookRegistry.register(
            "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController"
            "._add_speculative", _server_info, HookType.AFTER
        )
        from ddtree_sglang import graphs, hybrid, verify_attn

        graphs.register_hooks(HookRegistry, HookType)
        hybrid.register_hooks(HookRegistry, HookType)
        verify_attn.register_hooks(HookRegistry, HookType)
        _launch_gate_registered = True
