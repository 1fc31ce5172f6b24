"""Fixtures shared across the test tree."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest
from seeded_hypothesis import FUZZ, SEED, describe

# pytest-xdist (`make test` runs the suite in parallel): every worker imports seeded_hypothesis on its own, and under
# `make fuzz` each would draw its own random seed. The controller's seed goes to the workers through the environment
# they inherit, so one run has one seed, the one printed.
if FUZZ and not os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["DDTCTL_HYPOTHESIS_SEED"] = str(SEED)


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


# --- pytest-xdist (`make test`: -n N --dist loadgroup) -------------------------------------------------------------
# Each worker is its own pytest session, so a session or module fixture is built once per worker that runs a test
# needing it. Tests that share an expensive fixture are kept on one worker (one work unit), so it is built once: the
# unit is the session fixture's name (`live`: the whole fidelity corpus through SGLang's resolver) or the test module
# (its module fixtures). Fixtures cheap to build per worker stay out of this: sshd (one per worker, its own port and
# keys), the managed env's path.
#
# xdist's own xdist_group mark does not work with pytest 9.2 (it appends the group to item._nodeid, which pytest no
# longer reads), so the units are ours: each worker writes node id -> unit to the file named by DDTCTL_XDIST_UNITS
# (set by the controller before it starts them) as it collects, and the controller's scheduler reads it once every
# worker has collected (pytest_xdist_make_scheduler below).
PER_WORKER_FIXTURES = frozenset({"sshd", "jump_sshd", "managed_python"})

# Tests that each take a core for a minute or more run one after another on one worker, beside the rest of the suite,
# instead of side by side: on two cores they would only slow each other down towards their own time limits. Node id
# prefix -> unit.
SERIAL_GROUPS = {
    "tests/bench/test_deploy_rehearsal.py::test_cpu_rehearsal": "deploy-rehearsal",
}

# Slow tests start first (work is handed out in collection order), so none of them is the run's tail. Prefixes of
# node ids; the rest keep their order. `pytest --durations=60` says which tests belong here.
SLOW_FIRST = (
    "tests/bench/test_deploy_rehearsal.py::test_cpu_rehearsal",  # one unit, ~5 minutes of one worker
    "tests/fidelity/",  # the `live` unit: SGLang's resolver over the corpus, forwards, backwards, fresh processes
    "tests/kernels/test_kernels_sm90_compile.py",  # the real Triton compiler: 30-120 s each
    "tests/cli/test_precommit_hook.py::test_try_repo",  # pre-commit builds its own venv
    "tests/kernels/test_gdn_tree_levels.py::test_qwen36_27b_head_dims",
    "tests/kernels/test_kernels_e2e.py",
    "tests/remote/test_tune.py",
)

_UNITS_ENV = "DDTCTL_XDIST_UNITS"
if not os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get(_UNITS_ENV):
    os.environ[_UNITS_ENV] = os.path.join(tempfile.gettempdir(), f"ddtctl-xdist-units-{os.getpid()}-"
                                          f"{uuid.uuid4().hex[:12]}.json")


def _work_unit(item) -> str | None:
    serial = next((unit for prefix, unit in SERIAL_GROUPS.items() if item.nodeid.startswith(prefix)), None)
    if serial is not None:
        return serial
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module_scoped = False
    for name in sorted(info.names_closure):
        defs = info.name2fixturedefs.get(name) or ()
        if not defs or name in PER_WORKER_FIXTURES:
            continue
        fixturedef = defs[-1]
        if not fixturedef.baseid:  # a plugin's (tmp_path_factory, worker_id, ...), not the suite's
            continue
        if fixturedef.scope == "session":
            return f"session-{name}"
        module_scoped = module_scoped or fixturedef.scope in ("module", "package")
    return item.nodeid.split("::")[0] if module_scoped else None


def _slow_rank(item) -> int:
    return next((i for i, prefix in enumerate(SLOW_FIRST) if item.nodeid.startswith(prefix)), len(SLOW_FIRST))


def _xdist_worker_of_loadgroup(config) -> bool:
    return hasattr(config, "workerinput") and bool(getattr(config.option, "loadgroup", False))


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the units name the tests that run
def pytest_collection_modifyitems(config, items):
    if not _xdist_worker_of_loadgroup(config):
        return
    items.sort(key=_slow_rank)  # stable: the order within each rank is the collection's; every worker sorts alike
    units = {item.nodeid: unit for item in items if (unit := _work_unit(item)) is not None}
    path = os.environ.get(_UNITS_ENV)
    if path:  # every worker writes the same map; each one whole (rename), so the controller never reads half of one
        tmp = f"{path}.{config.workerinput['workerid']}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(units, f)
        os.replace(tmp, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """loadgroup with the work units the workers wrote (see above); a test in none is a unit of its own."""

        _units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if "@" in nodeid:  # an xdist_group mark, on a pytest where xdist can still add it to the node id
                return nodeid.rsplit("@", 1)[-1]
            if self._units is None:
                try:
                    with open(os.environ[_UNITS_ENV], encoding="utf-8") as f:
                        self._units = json.load(f)
                except (KeyError, OSError, ValueError):
                    self._units = {}
            return self._units.get(nodeid, nodeid)

    return UnitScheduling(config, log)


def pytest_unconfigure(config):
    path = os.environ.get(_UNITS_ENV)
    if path and not hasattr(config, "workerinput"):
        try:
            os.unlink(path)
        except OSError:
            pass


def pytest_collection_finish(session):
    props = [item for item in session.items if item.get_closest_marker("hypothesis") is not None]
    session.config._ddtctl_property_tests = bool(props)
    if props and hasattr(session.config, "workeroutput"):  # an xdist worker: tell the controller (it prints the seed)
        session.config.workeroutput["ddtctl_property_tests"] = True
    unseeded = sorted({item.nodeid.split("[")[0] for item in props if _unseeded(item)})
    if unseeded:  # every random property test is deterministic in CI (issue #14)
        raise pytest.UsageError("property tests without a fixed seed (decorate them with "
                                "seeded_hypothesis.seeded(N)): " + ", ".join(unseeded))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if FUZZ and reporter is not None and _property_tests(session.config):
        reporter.write_line(describe())


def pytest_sessionstart(session):
    # the xdist controller collects nothing itself: under `make fuzz` it prints the seed at the start of the run
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if FUZZ and _xdist_controller(config) and reporter is not None:
        reporter.write_line(describe())


def _xdist_controller(config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist: a worker that collected property tests says so in its output; the controller's summary prints the seed."""
    if getattr(node, "workeroutput", {}).get("ddtctl_property_tests"):
        node.config._ddtctl_property_tests = True


def pytest_terminal_summary(terminalreporter, config):
    if _property_tests(config):
        terminalreporter.write_line(describe())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and item.get_closest_marker("hypothesis") is not None:
        report.sections.append(("hypothesis seed", describe()))
    return report
