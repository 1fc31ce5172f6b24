"""Deploy end to end against the real loopback sshd: first deploy, idempotent redeploy, changed profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtctl.deploy import BUNDLED_WORKER, DeployOptions, deploy, host_releases, host_status, spec_from_profile
from labkit import build_lab_payload

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
    assert r2.status == "unchanged", r2.plan.to_json()
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


def test_restart_flag_restarts_an_unchanged_release(lab):
    prof = lab.profile()
    r1 = _deploy(lab, prof)
    pid1 = host_status(lab.host()).server["pid"]
    r2 = _deploy(lab, prof, restart=True)
    assert r2.status == "deployed" and r2.shipped["lo"].files_sent == 0
    st = host_status(lab.host())
    assert st.server["pid"] != pid1 and st.current == r2.release["lo"] != r1.release["lo"]


def test_failed_health_rolls_back_to_previous_release(lab, tmp_path):
    from labkit import build_lab_payload

    r1 = _deploy(lab, lab.profile())
    assert r1.status == "deployed"
    spec_info = lab.sglang_root / "sglang/srt/speculative/spec_info.py"
    v1_text = spec_info.read_text()
    # a new payload AND a server that never becomes healthy
    build_lab_payload(lab.payload, version="2")
    bad = lab.profile("bad", env={"STANDIN_HEALTH": "fail"}, health_timeout_s=10)
    spec = spec_from_profile(str(bad), payload_dir=str(lab.payload))
    r2 = deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5,
                                                   health_timeout_s=2))
    assert r2.status == "rolled_back" and r2.exit_code == 5
    assert "not healthy after 2s" in r2.error
    assert r2.rolled_back_to == {"lo": r1.release["lo"]}
    assert any(e.stage == "log" and "[standin]" in e.message for e in r2.events)  # the log tail was shown
    st = host_status(lab.host())
    assert st.current == r1.release["lo"] and st.health == 200
    assert st.server["release"] == r1.release["lo"]
    assert spec_info.read_text() == v1_text  # payload v1 reinstalled
    statuses = {r["id"]: r["status"] for r in st.releases}
    assert statuses[r1.release["lo"]] == "ok"
    assert "failed" in statuses.values()


def test_failed_first_deploy_leaves_host_as_it_was(lab):
    from labkit import SPEC_INFO

    prof = lab.profile(env={"STANDIN_EXIT": "3"})  # the server crashes at start
    r = _deploy(lab, prof)
    assert r.status == "failed" and "exited" in r.error
    assert r.rolled_back_to == {"lo": None}
    st = host_status(lab.host())
    assert st.current is None and not (st.server or {}).get("running")
    assert st.installed_payload is None
    assert (lab.sglang_root / "sglang/srt/speculative/spec_info.py").read_text() == SPEC_INFO  # pristine again
    assert not (lab.sglang_root / "ddtree_sglang").exists()


def test_connection_killed_mid_ship_keeps_the_old_release(lab):
    from labkit import build_lab_payload
    from ddtctl.remote.transport import ConnectionLost

    r1 = _deploy(lab, lab.profile())
    pid1 = host_status(lab.host()).server["pid"]
    build_lab_payload(lab.payload, version="2", extra_files=40)
    killed = []

    def kill_after_5(host, done, total):
        if done == 5 and not killed:
            import os
            import signal

            for pid in lab.sshd.session_pids():
                os.kill(pid, signal.SIGKILL)
            killed.append(total)

    with pytest.raises(ConnectionLost):
        _deploy(lab, lab.profile(), on_ship_progress=kill_after_5)
    assert killed, "the kill hook never ran"
    st = host_status(lab.host())
    assert st.current == r1.release["lo"] and st.server["pid"] == pid1 and st.health == 200
    assert "# payload 1" in (lab.sglang_root / "sglang/srt/speculative/spec_info.py").read_text()
    assert [r["id"] for r in st.releases] == [r1.release["lo"]]  # no half release
    # the lock died with the connection, and the next deploy resumes: verified objects are not sent again
    r3 = _deploy(lab, lab.profile())
    assert r3.status == "deployed", r3.error
    assert 0 < r3.shipped["lo"].files_sent < killed[0]
    assert "# payload 2" in (lab.sglang_root / "sglang/srt/speculative/spec_info.py").read_text()


def test_concurrent_deploys_one_refuses_one_waits(lab):
    import threading

    from ddtctl.remote.transport import LockHeld

    a_launched, a_may_go, c_waiting = threading.Event(), threading.Event(), threading.Event()
    out = {}

    def a_events(ev):  # deploy A pauses right after launching, holding the host's lock
        if ev.stage == "launch" and ev.message.startswith("started"):
            a_launched.set()
            a_may_go.wait(60)

    def c_events(ev):
        if ev.stage == "lock" and "waiting for the deploy lock held by" in ev.message:
            c_waiting.set()

    a = threading.Thread(target=lambda: out.setdefault("a", _deploy(lab, lab.profile("slow"), on_event=a_events)))
    a.start()
    try:
        assert a_launched.wait(60)
        with pytest.raises(LockHeld, match="another deploy holds the lock") as exc:  # B: --lock-wait 0 refuses
            _deploy(lab, lab.profile("other", server={"speculative-ddtree-budget": 40}))
        assert "deploy slow" in exc.value.message
        c = threading.Thread(target=lambda: out.setdefault("c", _deploy(
            lab, lab.profile("other", server={"speculative-ddtree-budget": 40}), lock_wait_s=60, on_event=c_events)))
        c.start()
        assert c_waiting.wait(60)  # C queues behind A ...
    finally:
        a_may_go.set()
    a.join(60)
    c.join(60)
    assert out["a"].status == "deployed" and out["c"].status == "deployed", (out["a"].error, out["c"].error)
    st = host_status(lab.host())  # ... and runs after it
    assert st.current == out["c"].release["lo"] and st.server_info["speculative_ddtree_budget"] == 40
    assert st.previous == out["a"].release["lo"]


def test_stop_logs_status_rollback(lab):
    from ddtctl.deploy import host_logs, rollback, stop_server

    r1 = _deploy(lab, lab.profile())
    r2 = _deploy(lab, lab.profile(server={"speculative-ddtree-budget": 48}))
    logs = host_logs(lab.host(), lines=50)
    assert "[standin] serving on" in logs.text and r2.release["lo"] in logs.text
    stopped = stop_server(lab.host(), grace_s=5)
    assert stopped.was_running and stopped.release == r2.release["lo"] and not stopped.forced
    st = host_status(lab.host())
    assert not (st.server or {}).get("running") and st.health is None
    assert stop_server(lab.host()).was_running is False
    rb = rollback(lab.host(), health_timeout_s=20)
    assert rb.ok and rb.to_release == r1.release["lo"] and rb.from_release == r2.release["lo"]
    st = host_status(lab.host())
    assert st.current == r1.release["lo"] and st.server_info["speculative_ddtree_budget"] == 32


def test_stop_escalates_to_sigkill(lab):
    from ddtctl.deploy import stop_server

    _deploy(lab, lab.profile(env={"STANDIN_IGNORE_SIGTERM": "1"}))
    res = stop_server(lab.host(), grace_s=0.5)
    assert res.was_running and res.forced
    assert not host_status(lab.host()).server


def test_shell_metacharacters_are_inert(lab, tmp_path):
    m1, m2, m3 = (tmp_path / f"pwned{i}" for i in range(3))
    nasty = f"$(touch {m1}); touch {m2} `touch {m3}` | & > <'\""
    prof = lab.profile(server={"served-model-name": nasty}, env={"NASTY": nasty, "CUDA_VISIBLE_DEVICES": "0"})
    r = _deploy(lab, prof)
    assert r.status == "deployed", r.error
    info = host_status(lab.host()).server_info
    assert info["served_model_name"] == nasty  # reached the server byte for byte
    assert info["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert not m1.exists() and not m2.exists() and not m3.exists()


def test_multinode_deploy_two_hosts(lab):
    from ddtctl.deploy import host_status as hs

    prof = lab.profile("mn", hosts=["lo", "lo2"], server={"tp-size": 2})
    spec = spec_from_profile(str(prof), payload_dir=str(lab.payload))
    assert spec.host_names == ["lo", "lo2"]
    r = deploy(spec, [lab.host("lo"), lab.host("lo2")],
               DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5))
    assert r.status == "deployed", r.error
    info = r.health.server_info
    assert (info["nnodes"], info["node_rank"], info["dist_init_addr"]) == (2, 0, "127.0.0.1:50000")
    s2 = hs(lab.host("lo2"))
    assert s2.server["running"] and s2.current == r.release["lo2"]
    rel2 = next(x for x in s2.releases if x["id"] == s2.current)
    assert rel2["argv"][-6:] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:50000"]
    # rank 1 was started before rank 0
    t0 = json.loads((lab.work("lo") / "run" / "server.json").read_text())["started"]
    t1 = json.loads((lab.work("lo2") / "run" / "server.json").read_text())["started"]
    assert t1 < t0
    # a group that does not come up healthy is rolled back on every host
    bad = lab.profile("mn", hosts=["lo", "lo2"], server={"tp-size": 2}, env={"STANDIN_HEALTH": "fail"})
    r2 = deploy(spec_from_profile(str(bad), payload_dir=str(lab.payload)), [lab.host("lo"), lab.host("lo2")],
                DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5, health_timeout_s=2))
    assert r2.status == "rolled_back" and r2.rolled_back_to == r.release
    for name in ("lo", "lo2"):
        st = hs(lab.host(name))
        assert st.current == r.release[name] and st.server["running"] and st.server["release"] == r.release[name]


def _with_warmup(lab):
    import sys

    import yaml

    from labkit import STANDINS

    doc = yaml.safe_load(lab.inventory.read_text())
    doc["hosts"]["lo"]["warmup"] = [sys.executable, str(STANDINS / "standin_kernel_selftest.py")]
    lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_kernel_warmup_runs_before_launch_into_the_servers_triton_cache(lab):
    _with_warmup(lab)
    r = _deploy(lab, lab.profile())
    assert r.status == "deployed", r.error
    cache = lab.work() / "triton-cache"
    assert (cache / "standin-kernel.marker").read_text() == r.release["lo"]
    assert host_status(lab.host()).server_info["env"]["TRITON_CACHE_DIR"] == str(cache)
    # a failing warm-up stops the deploy before the running server is touched
    pid = host_status(lab.host()).server["pid"]
    r2 = _deploy(lab, lab.profile(env={"STANDIN_WARMUP": "fail"}))
    assert r2.status == "rejected" and "warm-up failed" in r2.error
    assert any("simulated" in e.message for e in r2.events if e.stage == "log")
    st = host_status(lab.host())
    assert st.server["pid"] == pid and st.current == r.release["lo"]


def test_logs_follow_streams_new_lines(lab):
    import threading
    import urllib.error
    import urllib.request

    from ddtctl.deploy import host_logs

    _deploy(lab, lab.profile())
    got = []

    def poke():
        try:  # any request shows up in the stand-in's log; this path answers 404
            urllib.request.urlopen(f"http://127.0.0.1:{lab.port}/poke", timeout=5).read()
        except urllib.error.HTTPError:
            pass

    def on_text(text):
        got.append(text)
        if len(got) == 1:  # the initial tail is out: make a new line appear while following
            threading.Thread(target=poke).start()

    host_logs(lab.host(), lines=1, follow=True, on_text=on_text, follow_for_s=3)
    assert "poke" not in got[0] and "poke" in "".join(got[1:])


def test_facts_cache_model_configs_for_validation(lab):
    from ddtctl.deploy import host_facts
    from ddtctl.paths import model_config_cache_dir

    f = host_facts(lab.host(), model_paths=[str(lab.models / "target"), "/no/such/model"])
    assert [g.name for g in f.gpus] == ["NVIDIA H200"] and f.gpus[0].sm == 90 and f.cuda == "13.0"
    assert "error" in f.models["/no/such/model"]
    assert f.host == "lo" and f.sglang_root == str(lab.sglang_root)  # the inventory's root
    out = f.to_json()  # what `ddtctl facts --format json` prints: its keys in this order
    assert list(out) == ["host", "hostname", "work_dir", "python", "python_version", "sglang_version",
                         "sglang_root", "gpus", "cuda", "driver", "gpu_error", "disk_free_bytes",
                         "ports_in_use", "server", "current_release", "models", "cached_configs"]
    assert out["gpus"][0]["compute_capability"] == [9, 0] and out["gpus"][0]["sm"] == 90
    assert out["models"][str(lab.models / "target")] == {"architectures": ["Qwen3ForCausalLM"]}
    cached = model_config_cache_dir("lo", str(lab.models / "target")) / "config.json"
    assert json.loads(cached.read_text())["architectures"] == ["Qwen3ForCausalLM"]


def test_a_local_file_changing_mid_ship_is_caught(lab):
    from labkit import build_lab_payload
    from ddtctl.errors import OverlayError

    build_lab_payload(lab.payload, version="1", extra_files=10)
    kernels = sorted((lab.payload / "files/ddtree_sglang/kernels").iterdir())

    def tamper(host, done, total):
        if done == 1:  # 1 of 13 files sent: at least 9 of these are still to go
            for k in kernels:
                k.write_text("# changed behind our back\n" + "y = 2\n" * 200)

    with pytest.raises(OverlayError, match="changed while it was being deployed"):
        _deploy(lab, lab.profile(), on_ship_progress=tamper)
    st = host_status(lab.host())
    assert st.current is None and not st.releases


def test_secrets_never_reach_events_or_reports(lab):
    from ddtctl.deploy import host_status as hs

    prof = lab.profile(server={"api-key": "sk-live-0123456789"}, env={"HF_TOKEN": "hf_abcdefghijkl"})
    r = _deploy(lab, prof)
    assert r.status == "deployed", r.error
    report = json.dumps(r.to_json()) + "\n".join(e.message for e in r.events)
    assert "sk-live-0123456789" not in report and "hf_abcdefghijkl" not in report
    assert any("--api-key" in e.message and "***" in e.message for e in r.events if e.stage == "log")
    st = json.dumps(hs(lab.host()).to_json())
    assert "sk-live-0123456789" not in st and "hf_abcdefghijkl" not in st
    # the server itself got the real values
    assert hs(lab.host()).server_info["api_key"] == "sk-live-0123456789"


def test_served_args_must_match_what_was_resolved(lab):
    prof = lab.profile(env={"STANDIN_SERVE": "speculative_algorithm=DFLASH"})  # healthy, but not serving DDTREE
    r = _deploy(lab, prof)
    assert r.status == "failed"
    assert "served args differ" in r.error and "speculative_algorithm: served 'DFLASH', expected 'DDTREE'" in r.error
    assert not (host_status(lab.host()).server or {}).get("running")


def test_connection_dropped_after_launch_is_resumed_under_a_retaken_lock(lab):
    import os
    import signal

    killed = []

    def on_event(ev):
        if ev.stage == "launch" and ev.message.startswith("started") and not killed:
            for pid in lab.sshd.session_pids():
                os.kill(pid, signal.SIGKILL)  # drops our connection (and with it the host's deploy lock)
            killed.append(ev)

    r = _deploy(lab, lab.profile(), on_event=on_event)
    assert killed and r.status == "deployed", r.error
    said = [e.message for e in r.events if e.stage == "ssh"]
    assert any("reconnecting once" in m for m in said) and any("lock re-taken" in m for m in said)
    st = host_status(lab.host())
    assert st.current == r.release["lo"] and st.health == 200
    assert [x["status"] for x in st.releases] == ["ok"]


BUNDLED_WORKER_SRC = Path(__file__).resolve().parents[2] / "ddtctl/payload/ddtree-sglang-0.5.23/files" / BUNDLED_WORKER


def test_a_launch_the_shipped_worker_would_refuse_stops_at_preflight(lab, tmp_path):
    """DDT120 only warns in validate, but a deploy that ships the bundled worker must not launch what it refuses."""
    payload = build_lab_payload(tmp_path / "payload-with-worker",
                                new_files={BUNDLED_WORKER: BUNDLED_WORKER_SRC.read_text()})
    refused = lab.profile("fi", server={"attention-backend": "flashinfer"})  # the lab host has one GPU
    spec = spec_from_profile(str(refused), payload_dir=str(payload))
    r = deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5))
    assert r.status == "rejected", r.error
    assert any(c.name == "validate:DDT120" and c.severity == "error" and not c.ok for c in r.checks)
    assert "triton" in r.error and not r.shipped
    assert host_releases(lab.host()) == []

    served = lab.profile("triton", server={"attention-backend": "triton"})
    spec = spec_from_profile(str(served), payload_dir=str(payload))
    r = deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False, health_interval_s=0.2, stop_grace_s=5))
    assert r.status == "deployed", r.error
    assert not any(c.name == "validate:DDT120" for c in r.checks)


def test_tensor_parallel_no_longer_stops_but_dp_attention_does(lab, tmp_path):
    """The bundled worker serves tp > 1 now: an 8-GPU DDTREE profile passes preflight's DDT120 check. DP attention is
    still refused by that worker, so a deploy that ships it stops at preflight."""
    from labkit import write_inventory

    write_inventory(lab.inventory, lab.sshd, lab.root, lab.known_hosts, lab.sglang_root, hosts=("lo", "lo2"), gpus=8)
    config = lab.models / "target" / "config.json"  # heads that tp 8 divides (DDT602)
    config.write_text(json.dumps(dict(json.loads(config.read_text()), num_attention_heads=32, num_key_value_heads=8)))
    payload = build_lab_payload(tmp_path / "payload-with-worker",
                                new_files={BUNDLED_WORKER: BUNDLED_WORKER_SRC.read_text()})
    tp8 = lab.profile("tp8", server={"attention-backend": "triton", "tp-size": 8})
    spec = spec_from_profile(str(tp8), payload_dir=str(payload))
    r = deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False, dry_run=True))
    assert r.status == "planned", (r.error, [(c.name, c.message) for c in r.checks if not c.ok])
    assert not any(c.name.startswith("validate:DDT120") for c in r.checks)
    assert any(c.name == "gpus" and c.ok and "8 GPU(s) needed" in c.message for c in r.checks)

    dp = lab.profile("dp", server={"attention-backend": "triton", "tp-size": 2, "dp-size": 2,
                                   "enable-dp-attention": True, "enable-dp-lm-head": True})
    spec = spec_from_profile(str(dp), payload_dir=str(payload))
    r = deploy(spec, [lab.host()], DeployOptions(remote_dry_run=False, dry_run=True))
    assert r.status == "rejected", r.error
    stop = [c for c in r.checks if c.name == "validate:DDT120"]
    assert stop and stop[0].severity == "error" and "DP attention" in stop[0].message
    assert not r.shipped and host_releases(lab.host()) == []


def test_a_payload_with_another_worker_keeps_ddt120_a_warning(lab):
    prof = lab.profile("fi-lab", server={"attention-backend": "flashinfer"})
    r = _deploy(lab, prof, dry_run=True)
    ddt120 = [c for c in r.checks if c.name == "validate:DDT120"]
    assert ddt120 and all(c.severity == "warning" for c in ddt120), r.checks
    assert r.status == "planned", r.error


def test_a_server_launched_with_an_api_key_is_judged_healthy_without_the_key_leaving_the_host(lab):
    """SGLang guards /get_server_info with --api-key (the stand-in too: 401 without the bearer). The agent reads
    the key from the running server's launch record on the host; it is in no probe parameter or result."""
    secret = "sk-deploy-probe-7f3a"
    r = _deploy(lab, lab.profile("keyed", server={"api-key": secret}))
    assert r.status == "deployed", r.error
    assert r.health.ok and r.health.server_info["api_key"] == secret  # the stand-in echoes its parsed argv
    st = host_status(lab.host())
    assert st.health == 200 and st.server_info is not None
    assert secret not in json.dumps(r.to_json())
