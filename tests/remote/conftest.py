"""Fixtures for the SSH suite: a real OpenSSH sshd on 127.0.0.1 (one per session) and a per-test `lab` (inventory,
known_hosts, stand-ins, tiny models, a small SGLang root, a payload). The builders live in labkit.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labkit import (Lab, _kill_lab_servers, _write_models, _write_sglang_root, build_lab_payload,  # noqa: E402
                    find_sshd, free_port, start_sshd, write_inventory)


def pytest_collection_modifyitems(config, items):
    if find_sshd():
        return
    skip = pytest.mark.skip(reason="sshd not installed (make system-deps installs openssh-server)")
    for item in items:
        if "ssh" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    if not find_sshd():
        pytest.skip("sshd not installed (make system-deps)")
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def jump_sshd(tmp_path_factory):
    """A second sshd, which allows TCP forwarding: the ProxyJump host of test_proxy_jump.py."""
    if not find_sshd():
        pytest.skip("sshd not installed (make system-deps)")
    server = start_sshd(tmp_path_factory.mktemp("jump-sshd"), tcp_forwarding=True)
    yield server
    server.stop()


@pytest.fixture
def lab(sshd, tmp_path, monkeypatch) -> Lab:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    models = tmp_path / "models"
    _write_models(models)
    sglang_root = tmp_path / "site-packages"
    _write_sglang_root(sglang_root)
    known = tmp_path / "known_hosts"
    inv = write_inventory(tmp_path / "hosts.yaml", sshd, tmp_path, known, sglang_root, hosts=("lo", "lo2"))
    payload = build_lab_payload(tmp_path / "payload")
    lab = Lab(tmp_path, sshd, inv, known, models, sglang_root, payload, free_port())
    lab.trust()
    yield lab
    _kill_lab_servers(tmp_path)
