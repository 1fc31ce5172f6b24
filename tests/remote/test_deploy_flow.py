"""Deploy end to end against the real loopback sshd: first deploy, idempotent redeploy, changed profile."""

from __future__ import annotations

import json

import pytest

from ddtctl.deploy import DeployOptions, deploy, host_status, spec_from_profile

pytestmark = pytest.mark.ssh


def _deploy(lab, profile, **kw):
    spec = spec_from_profile(str(profile), payload_dir=str(lab.payload))
    opts = DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5, **kw)
    hosts = [lab.host(n) for n in spec.host_names]
    return deploy(spec, hosts, opts)


def test_first_deploy_then_idempotent_then_changed(lab):
    prof = lab.profile()
    r1 = _deploy(lab, prof)
    assert r1.status == "deployed", r1.error
    rid1 = r1.release["lo"]
    assert r1.shipped["lo"].files_sent == r1.shipped["lo"].files_total > 0
    assert r1.health.ok and r1.health.server_info["speculative_algorithm"] == "DDTREE"
    # the payload really is installed into the SGLang root (the patched file)
    assert "DDTREE" in (lab.sglang_root / "sglang/srt/speculative/spec_info.py").read_text()
    st = host_status(lab.host())
    assert st.current == rid1 and st.server["running"] and st.health == 200
    pid1 = st.server["pid"]

    r2 = _deploy(lab, prof)
    assert r2.status == "unchanged"
    assert r2.plan.hosts[0].files_to_ship == [] and not r2.shipped
    st2 = host_status(lab.host())
    assert st2.server["pid"] == pid1 and st2.current == rid1

    prof2 = lab.profile(server={"speculative-ddtree-budget": 48})
    r3 = _deploy(lab, prof2)
    assert r3.status == "deployed", r3.error
    assert r3.shipped["lo"].files_sent == 0
    assert ("speculative-ddtree-budget", "32", "48") in r3.plan.hosts[0].argv_diff
    st3 = host_status(lab.host())
    assert st3.current == r3.release["lo"] != rid1
    assert st3.server["pid"] != pid1
    assert st3.server_info["speculative_ddtree_budget"] == 48
    assert st3.previous == rid1
