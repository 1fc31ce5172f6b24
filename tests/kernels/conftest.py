import os

import pytest
from kernels_hypothesis import FUZZ, describe

# Without a GPU (CI) the Triton kernels run in Triton's interpreter; the flag must be set before they are defined.
try:
    import torch

    _gpu = torch.cuda.is_available()
except ImportError:  # the kernels extra is absent: the tests that need torch skip themselves
    _gpu = False
if not _gpu:
    os.environ.setdefault("TRITON_INTERPRET", "1")


# The property tests' seed (kernels_hypothesis.py), printed so any run can be replayed: at the start of a fuzz run
# (which may be cut short), in the summary of every run, and beside each failing property test.
def pytest_collection_finish(session):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if FUZZ and reporter is not None:
        reporter.write_line(describe())


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(describe())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and item.get_closest_marker("hypothesis") is not None:
        report.sections.append(("hypothesis seed", describe()))
    return report
