"""Fixtures shared across the test tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from seeded_hypothesis import FUZZ, describe


def _interpret_triton_without_a_gpu() -> None:
    """Triton fixes interpreter or compiled mode for its own language library (tl.zeros, ...) when it is first
    imported. Any test module that imports triton at collection (pytest.importorskip("triton")) would otherwise
    fix compiled mode for the whole run, and every interpreted kernel after it fails with "Cannot call
    @triton.jit'd outside of the scope of a kernel". So the flag is set here, before any test module loads."""
    if "TRITON_INTERPRET" in os.environ:
        return
    try:
        import torch
    except ImportError:
        return
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


_interpret_triton_without_a_gpu()


@pytest.fixture(scope="session")
def managed_python() -> Path:
    """The interpreter of the managed SGLang 0.5.23 env, where SGLang's resolver runs (`make test` builds it)."""
    from ddtctl.envs import managed_env

    env = managed_env("0.5.23")
    if not env.ready:
        pytest.fail(f"managed SGLang env is {env.status}: run `make sglang-env`")
    return Path(env.python)


# The seed of the property tests (seeded_hypothesis.py), printed whenever a run collected any, so it can be replayed:
# at the start of a fuzz run (which may be cut short), in the summary, and beside each failing property test.
def _property_tests(config) -> bool:
    return bool(getattr(config, "_ddtctl_property_tests", False))


def _unseeded(item) -> bool:
    """A property test without seeded_hypothesis.seeded(): no fixed seed, or hypothesis' example database on."""
    test = getattr(item, "obj", None)
    use_settings = getattr(test, "_hypothesis_internal_use_settings", None)
    return getattr(test, "_hypothesis_internal_use_seed", None) is None or use_settings is None or \
        use_settings.database is not None


def pytest_collection_finish(session):
    props = [item for item in session.items if item.get_closest_marker("hypothesis") is not None]
    session.config._ddtctl_property_tests = bool(props)
    unseeded = sorted({item.nodeid.split("[")[0] for item in props if _unseeded(item)})
    if unseeded:  # every random property test is deterministic in CI (issue #14)
        raise pytest.UsageError("property tests without a fixed seed (decorate them with "
                                "seeded_hypothesis.seeded(N)): " + ", ".join(unseeded))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if FUZZ and reporter is not None and _property_tests(session.config):
        reporter.write_line(describe())


def pytest_terminal_summary(terminalreporter, config):
    if _property_tests(config):
        terminalreporter.write_line(describe())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and item.get_closest_marker("hypothesis") is not None:
        report.sections.append(("hypothesis seed", describe()))
    return report
