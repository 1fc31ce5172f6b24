"""The plan from plain data: the host's agent state and the store's missing objects in, a HostPlan out."""

from __future__ import annotations

from deploy_data import spec, state, target

from ddtctl.deploy import argv_diff, describe_plan, make_plan_for_host, release_fingerprint
from ddtctl.server_argv import read_launch
from ddtctl.remote.ship import FileEntry, Manifest

PAYLOAD = Manifest(None, {"files/a.py": FileEntry("b" * 64, 100), "files/b.py": FileEntry("c" * 64, 50)})


def _record(s, t, release_id: str, **kw) -> dict:
    return {"id": release_id, "fingerprint": release_fingerprint(s, t), "argv": t.argv, "status": "ok", **kw}


def test_first_deploy_ships_what_the_store_lacks_and_starts():
    s = spec(payload=PAYLOAD)
    t = target(s)
    hp = make_plan_for_host(s, t, state(), {"b" * 64}, restart=False)
    assert hp.reason == "first deploy" and hp.current_release is None and hp.new_release
    assert hp.files_to_ship == ["files/a.py"] and hp.bytes_to_ship == 100 and hp.files_total == 3
    assert hp.install and not hp.uninstall and hp.start and not hp.stop
    assert hp.release_id.endswith("-" + hp.fingerprint[:8])


def test_the_same_release_running_is_unchanged_even_with_newer_tools():
    s = spec()
    t = target(s)
    st = state(
        current="r1", releases=[_record(s, t, "r1")], server={"running": True, "release": "r1", "pid": 7}
    )
    hp = make_plan_for_host(s, t, st, {"a" * 64}, restart=False)  # the tools changed: not a reason to restart
    assert hp.unchanged and hp.release_id == "r1" and hp.files_to_ship == []
    assert describe_plan(hp).startswith("no change: the same release is running; release r1")
    restarted = make_plan_for_host(s, t, st, set(), restart=True)
    assert restarted.reason == "restart requested" and restarted.stop and restarted.start
    assert restarted.release_id != "r1"


def test_the_same_release_stopped_is_started_again_without_a_new_release():
    s = spec()
    t = target(s)
    hp = make_plan_for_host(s, t, state(current="r1", releases=[_record(s, t, "r1")]), set(), restart=False)
    assert hp.release_id == "r1" and hp.start and not hp.stop and not hp.new_release
    assert hp.reason == "same release, server not running: start it"


def test_a_changed_argv_is_a_new_release_that_stops_the_old_and_shows_the_diff():
    old = spec(
        ["--model-path", "/m", "--port", "30000", "--mem-fraction-static", "0.8", "--api-key", "sekrit"]
    )
    t_old = target(old)
    new = spec(
        ["--model-path", "/m", "--port", "30000", "--mem-fraction-static", "0.7", "--api-key", "other"]
    )
    st = state(
        current="r1",
        releases=[_record(old, t_old, "r1")],
        server={"running": True, "release": "r1"},
        installed="deadbeef",
    )
    hp = make_plan_for_host(new, target(new), st, set(), restart=False)
    assert hp.reason == "release changed" and hp.stop and hp.start and hp.new_release
    assert hp.uninstall and not hp.install  # the old release had a payload, this one has none
    assert hp.argv_diff == [("mem-fraction-static", "0.8", "0.7"), ("api-key", "sekrit", "other")]
    line = describe_plan(hp)
    assert "--mem-fraction-static '0.8' -> '0.7'" in line and "--api-key changed" in line
    assert "sekrit" not in line and "other" not in line
    assert ("api-key", "***", "***") in hp.to_json()["argv_diff"]


def test_argv_diff_lists_new_removed_and_changed_flags():
    assert argv_diff(["--tp-size", "1", "--gone-x"], read_launch(["--tp-size", "2", "--new-x", "x"])) == [
        ("tp-size", "1", "2"),
        ("new-x", None, "x"),
        ("gone-x", True, None),
    ]
    assert argv_diff(None, read_launch(["--tp-size", "1"])) == [("tp-size", None, "1")]
    assert argv_diff(["--tp-size", "1"], read_launch(["--tp-size=1"])) == []


def test_argv_diff_reads_both_argvs_as_sglang_does():
    # a prefix, an alias and the canonical spelling are one flag; argparse's last occurrence is the value
    assert argv_diff(["--tp", "2"], read_launch(["--tensor-parallel-size=2"])) == []
    assert argv_diff(["--tp-size", "2", "--tp-size", "4"], read_launch(["--tp-size", "4"])) == []
    assert argv_diff(["--model", "/a"], read_launch(["--model-path", "/b"])) == [("model-path", "/a", "/b")]
