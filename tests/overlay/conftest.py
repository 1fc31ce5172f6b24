"""Fixtures for the overlay tests; the helpers they use live in overlay_fixtures.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from overlay_fixtures import make_payload, make_site


@pytest.fixture
def fake_site(tmp_path) -> Path:
    return make_site(tmp_path)


@pytest.fixture
def fake_payload(tmp_path, fake_site) -> Path:
    return make_payload(tmp_path, fake_site)


@pytest.fixture
def py() -> str:
    return sys.executable


