"""One cache root: every ddtctl cache follows XDG_CACHE_HOME; DDTCTL_CACHE_DIR moves only the overlay builds."""

from __future__ import annotations

from ddtctl import paths


def test_every_cache_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DDTCTL_CACHE_DIR", raising=False)
    from ddtctl.envs import managed_env
    from ddtctl.overlay.build import cache_root as overlay_cache

    root = tmp_path / "xdg" / "ddtctl"
    assert paths.cache_root() == root
    assert overlay_cache() == root / "overlay"
    assert managed_env("0.5.23").root == root / "sglang-0.5.23"
    assert paths.model_config_cache_dir("ct200", "/m/x").is_relative_to(root)


def test_ddtctl_cache_dir_moves_the_overlay_builds_only(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DDTCTL_CACHE_DIR", str(tmp_path / "scratch"))
    assert paths.overlay_root() == tmp_path / "scratch" / "overlay"
    assert paths.cache_root() == tmp_path / "xdg" / "ddtctl"  # the managed env stays where it was built


def test_without_xdg_the_cache_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("DDTCTL_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.cache_root() == tmp_path / ".cache" / "ddtctl"
    assert paths.overlay_root() == tmp_path / ".cache" / "ddtctl" / "overlay"
