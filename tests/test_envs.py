"""The managed SGLang environment: location, stamp/status logic, failure cleanup, and (marked sglang) the real env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from json_envelope import results

from ddtctl import envs
from ddtctl.errors import EnvironmentMissing, UsageError

REPO = Path(__file__).resolve().parents[1]
DDTCTL = [sys.executable, "-m", "ddtctl"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DDTCTL_SGLANG_PYTHON", raising=False)
    return tmp_path / "xdg" / "ddtctl"


def _fake_env(root: Path, stamp: dict | None) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("#!/bin/sh\n")
    if stamp is not None:
        (root / envs.STAMP_NAME).write_text(json.dumps(stamp))


def test_location_follows_xdg_cache_home(cache):
    assert envs.env_root("0.5.23") == cache / "sglang-0.5.23"
    assert envs.managed_env().python == cache / "sglang-0.5.23" / "bin" / "python"


def test_location_defaults_to_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert envs.env_root() == tmp_path / ".cache" / "ddtctl" / "sglang-0.5.23"


def test_status_missing_incomplete_stale_ready(cache):
    root = envs.env_root()
    assert envs.managed_env().status == "missing"
    _fake_env(root, None)
    assert envs.managed_env().status == "incomplete"
    (root / envs.STAMP_NAME).write_text(json.dumps({"requirements_hash": "0" * 16}))
    env = envs.managed_env()
    assert env.status == "stale" and not env.ready
    (root / envs.STAMP_NAME).write_text(json.dumps({"requirements_hash": envs.requirements_hash("0.5.23")}))
    env = envs.managed_env(with_size=True)
    assert env.status == "ready" and env.ready and env.size_bytes > 0


def test_requirements_hash_tracks_the_lock_file(monkeypatch, tmp_path):
    before = envs.requirements_hash("0.5.23")
    lock = tmp_path / "lock.txt"
    lock.write_text("\n".join(envs.requirement_lines("0.5.23") + ["extra-package==1.0"]) + "\n")
    monkeypatch.setattr(envs, "BRIDGE_DIR", tmp_path)
    monkeypatch.setitem(envs._RECIPES, "0.5.23", dict(envs._RECIPES["0.5.23"], lock="lock.txt"))
    assert envs.requirements_hash("0.5.23") != before


def test_lock_file_pins_every_package_and_leaves_torch_out():
    lines = envs.requirement_lines("0.5.23")
    assert lines and all("==" in ln for ln in lines)
    names = {ln.split("==")[0].lower() for ln in lines}
    assert not names & {"torch", "torchvision", "sglang"}  # installed in their own, ordered steps
    assert {"transformers", "triton", "apache-tvm-ffi", "openai"} <= names


def test_require_env_says_how_to_create_it(cache):
    with pytest.raises(EnvironmentMissing) as info:
        envs.require_env("0.5.23")
    assert "ddtctl env create --sglang 0.5.23" in info.value.one_line()


def test_unknown_release_is_a_usage_error(cache):
    with pytest.raises(UsageError, match="0.5.23"):
        envs.managed_env("9.9.9")


def test_failed_build_leaves_nothing_behind(cache, tmp_path):
    """A failing step aborts the build: no temp dir, no env, a log that names the failing command."""
    steps = []
    with pytest.raises(EnvironmentMissing) as info:
        envs.create_env(base_python="/bin/false", progress=lambda i, n, m: steps.append(m))
    assert steps and steps[0].startswith("creating venv")
    assert "command failed" in info.value.message
    assert not envs.env_root().exists()
    leftovers = [p.name for p in cache.iterdir() if p.name.startswith(".sglang-0.5.23.building")]
    assert leftovers == []
    log = cache / "sglang-0.5.23.build.log"
    assert "/bin/false -m venv" in log.read_text()


def test_create_is_a_noop_when_up_to_date(cache):
    root = envs.env_root()
    _fake_env(root, {"requirements_hash": envs.requirements_hash("0.5.23"), "versions": {"sglang": "0.5.23"}})
    result = envs.create_env(base_python="/bin/false")  # would fail if it tried to build
    assert result.built is False and result.env.status == "ready"


def test_env_show_cli_reports_missing_env_with_exit_2(cache):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache.parent))
    proc = subprocess.run(DDTCTL + ["env", "show"], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 2
    assert "missing" in proc.stdout and "ddtctl env create" in proc.stdout
    proc = subprocess.run(DDTCTL + ["env", "show", "--format", "json"], capture_output=True, text=True, env=env,
                          cwd=REPO)
    assert proc.returncode == 2 and json.loads(proc.stdout)["ok"] is False
    data = results(proc.stdout, "env show")
    assert data["status"] == "missing" and data["sglang"] == "0.5.23"


@pytest.mark.sglang
def test_real_env_is_ready_and_imports_sglang():
    """The env `make test` built: ready, and its python imports sglang 0.5.23 with CPU torch."""
    env = envs.managed_env()
    assert env.ready, f"{env.status}: run `make sglang-env`"
    versions = envs.verify_python(env.python)
    assert versions["sglang"] == "0.5.23"
    assert versions["torch"].startswith("2.13.0") and "+cpu" in versions["torch"]
    proc = subprocess.run(DDTCTL + ["env", "show", "--format", "json"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0
    data = results(proc.stdout, "env show")
    assert data["status"] == "ready" and data["versions"]["sglang"] == "0.5.23" and data["size_bytes"] > 10**9


@pytest.mark.sglang
def test_env_create_again_is_idempotent():
    proc = subprocess.run(DDTCTL + ["env", "create"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stderr
    assert proc.stdout.strip() == str(envs.managed_env().python)
