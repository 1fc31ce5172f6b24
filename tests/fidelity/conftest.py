from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def live():
    """The whole corpus through ONE warm SGLang resolver (forward order): case id -> DryRunResult."""
    import corpus

    from ddtctl.errors import EnvironmentMissing

    try:
        return corpus.run_sglang(corpus.load_cases())
    except EnvironmentMissing as err:  # make test builds it; a plain pytest run must say how
        pytest.fail(f"{err.one_line()} — run `make sglang-env`")
