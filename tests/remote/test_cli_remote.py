"""The remote commands through the real `ddtctl` entry point (subprocess), against the loopback sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from json_envelope import error, results

pytestmark = pytest.mark.ssh


def ddtctl(lab, *args, check=None):
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-m", "ddtctl", *args, "--inventory", str(lab.inventory)],
                         capture_output=True, text=True, env=env, timeout=180)
    if check is not None:
        assert res.returncode == check, f"rc {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def test_cli_deploy_status_logs_releases_stop(lab):
    prof = str(lab.profile())
    plan = ddtctl(lab, "deploy", "lo", "--profile", prof, "--payload", str(lab.payload), "--skip-remote-dry-run",
                  "--dry-run", check=0)
    assert "first deploy" in plan.stderr and "nothing changed" in plan.stdout
    assert not (lab.work() / "releases").exists()  # --dry-run changed nothing
    unconfirmed = ddtctl(lab, "deploy", "lo", "--profile", prof, "--payload", str(lab.payload),
                         "--skip-remote-dry-run", "--format", "json", check=2)
    assert "--format json does not prompt" in error(unconfirmed.stdout, "deploy", 2)["message"]
    assert "ddtctl: error" not in unconfirmed.stderr and not (lab.work() / "releases").exists()
    res = ddtctl(lab, "deploy", "lo", "--profile", prof, "--payload", str(lab.payload), "--skip-remote-dry-run",
                 "--yes", "--format", "json", check=0)
    out = results(res.stdout, "deploy")
    assert out["status"] == "deployed" and out["health"]["ok"] and out["error"] is None
    checks = out["checks"]  # the preflight checks, as findings (id: the check's name)
    assert checks and all(c["id"] and (c["ok"] or c["severity"] != "error") for c in checks), checks
    stages = [ev["stage"] for ev in out["events"]]  # the stage events: in the envelope, and live on stderr
    for stage in ("facts", "preflight", "lock", "plan", "ship", "install", "launch", "health", "record"):
        assert stage in stages and f" {stage}" in res.stderr, stage
    rid = out["release"]["lo"]
    st = ddtctl(lab, "status", "lo", "--format", "json", check=0)
    assert results(st.stdout, "status")["current"] == rid and results(st.stdout, "status")["healthy"]
    releases = results(ddtctl(lab, "releases", "lo", "--format", "json", check=0).stdout, "releases")
    assert releases["current"] == rid and [r["id"] for r in releases["releases"]] == [rid]
    assert "[standin] serving on" in ddtctl(lab, "logs", "lo", "-n", "20", check=0).stdout
    rel = ddtctl(lab, "releases", "lo", check=0).stdout
    assert rid in rel and "ok" in rel
    again = ddtctl(lab, "deploy", "lo", "--profile", prof, "--payload", str(lab.payload), "--skip-remote-dry-run",
                   "--yes", check=0)
    assert "unchanged" in again.stdout
    assert "stopped release " + rid in ddtctl(lab, "stop", "lo", check=0).stdout
    assert ddtctl(lab, "status", "lo").returncode == 5  # not running -> non-zero
    down = ddtctl(lab, "status", "lo", "--format", "json", check=5)
    assert json.loads(down.stdout)["ok"] is False and results(down.stdout, "status")["healthy"] is False


def test_cli_unknown_host_key_is_one_line_exit_3(lab):
    lab.known_hosts.write_text("")
    res = ddtctl(lab, "facts", "lo", check=3)
    assert res.stderr.count("\n") == 1 and "unknown host key" in res.stderr and "Traceback" not in res.stderr
    res = ddtctl(lab, "facts", "lo", "--format", "json", check=3)  # the error in the envelope, on stdout
    assert "unknown host key" in error(res.stdout, "facts", 3)["message"] and res.stderr == ""
    ok = ddtctl(lab, "facts", "lo", "--trust-new-host", check=0)
    assert "NVIDIA H200" in ok.stdout and "sm90" in ok.stdout


def test_cli_short_form_uses_the_host_default_profile(lab):
    import yaml

    prof = lab.profile("hostdefault")  # a DFLASH profile: DDTREE's flags removed, algorithm DFLASH
    pdoc = yaml.safe_load(prof.read_text())
    pdoc["server"]["speculative-algorithm"] = "DFLASH"
    del pdoc["server"]["speculative-ddtree-budget"]
    prof.write_text(yaml.safe_dump(pdoc, sort_keys=False))
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["hosts"]["lo"]["profile"] = str(prof)
    lab.inventory.write_text(yaml.safe_dump(doc))
    res = ddtctl(lab, "deploy", "lo", "--algo", "DDTREE", "--payload", str(lab.payload), "--skip-remote-dry-run",
                 "--dry-run", "--format", "json", check=0)
    out = results(res.stdout, "deploy")
    assert out["status"] == "planned"
    warnings = [w["message"] for w in out["warnings"]]
    assert warnings == ["`deploy --dry-run` is deprecated, use `deploy --plan`"]
    assert "deprecated" not in res.stderr
    argv = out["plan"]["hosts"][0]["launch_argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "DDTREE"


def test_cli_needs_yes_without_a_terminal(lab):
    res = ddtctl(lab, "deploy", "lo", "--profile", str(lab.profile()), "--payload", str(lab.payload),
                 "--skip-remote-dry-run", check=2)
    assert "--yes" in res.stderr
    assert not (lab.work() / "releases").exists()
