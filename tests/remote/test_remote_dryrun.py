"""Preflight's real dry-run ON THE HOST: SGLang 0.5.23's own resolver run over SSH by the host's python (the managed
SGLang env here), with the DDTREE payload staged as a read-only view (never installed into that env)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ddtctl.deploy import DeployOptions, deploy, host_status, spec_from_profile

pytestmark = [pytest.mark.ssh, pytest.mark.sglang]

_XDG = os.environ.get("XDG_CACHE_HOME")  # the managed env and the overlay build live under the real cache


@pytest.fixture(scope="module")
def sglang_python():
    from ddtctl import envs

    env = envs.managed_env("0.5.23")
    if not env.exists or getattr(env, "status", "ready") != "ready":
        pytest.skip("managed SGLang 0.5.23 env not built (make sglang-env)")
    return str(env.python)


@pytest.fixture
def sglab(lab, sglang_python, monkeypatch):
    """The lab, with the host's python = the managed SGLang env (sglang_root found by facts, not overridden)."""
    if _XDG is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", _XDG)
    lab.site = next(Path(sglang_python).parents[1].glob("lib/python3*/site-packages"))
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["defaults"]["python"] = sglang_python
    del doc["defaults"]["sglang_root"]
    lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return lab


def _opts(**kw):
    return DeployOptions(health_interval_s=0.2, stop_grace_s=5, **kw)


def test_ddtree_resolved_on_the_host_with_the_payload_staged(sglab):
    before = _site_listing(sglab)
    # the real DDTREE payload (overlay build); its worker verifies on the triton backend only (DDT120 would stop it)
    spec = spec_from_profile(str(sglab.profile(server={"attention-backend": "triton"})))
    assert spec.payload is not None and "ddtree-manifest.json" in spec.payload.files
    r = deploy(spec, [sglab.host()], _opts(check_only=True))
    assert r.status == "checked", r.error
    assert r.dry_run.accepted
    assert r.dry_run.resolved["speculative_algorithm"] == "DDTREE"
    assert r.dry_run.resolved["speculative_ddtree_budget"] == 32
    assert r.dry_run.resolved["speculative_ddtree_verify_width"] == 33
    assert next(c for c in r.checks if c.name == "sglang").ok  # the host's sglang version was checked
    st = host_status(sglab.host())
    assert st.current is None and not st.server and st.installed_payload is None
    assert _site_listing(sglab) == before  # nothing installed into the host's SGLang


def test_rejected_by_sglang_on_the_host_changes_nothing_then_a_good_deploy(sglab):
    bad = sglab.profile("bad", algorithm=None, server={"page-size": 0})
    r = deploy(spec_from_profile(str(bad)), [sglab.host()], _opts())
    assert r.status == "rejected" and r.exit_code == 1
    assert "ZeroDivisionError" in r.error and "validation_hook" in (r.dry_run.error_at or "")
    st = host_status(sglab.host())
    assert st.current is None and not st.server
    assert [x["status"] for x in st.releases] == ["rejected"]
    good = sglab.profile("good", algorithm=None, server={"tp-size": 1})
    r2 = deploy(spec_from_profile(str(good)), [sglab.host()], _opts())
    assert r2.status == "deployed", r2.error
    assert r2.dry_run.accepted and r2.health.ok
    assert r2.health.server_info["tp_size"] == r2.dry_run.resolved["tp_size"] == 1


def _site_listing(lab):
    spec_py = lab.site / "sglang" / "srt" / "arg_groups" / "speculative_hook.py"
    return sorted(p.name for p in lab.site.iterdir()), spec_py.stat().st_mtime_ns
