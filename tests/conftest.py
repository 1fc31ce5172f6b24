"""Fixtures shared across the test tree."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def managed_python() -> Path:
    """The interpreter of the managed SGLang 0.5.23 env, where SGLang's resolver runs (`make test` builds it)."""
    from ddtctl.envs import managed_env

    env = managed_env("0.5.23")
    if not env.ready:
        pytest.fail(f"managed SGLang env is {env.status}: run `make sglang-env`")
    return Path(env.python)
