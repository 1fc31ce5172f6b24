"""`ddtctl dry-run`: model-config lookup, GPU declaration, exit codes, JSON shape, profiles (CLI end to end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from json_envelope import results

from ddtctl import dryrun
from ddtctl.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "fidelity" / "models"
QWEN = str(MODELS / "qwen3-8b")
DRAFT = str(MODELS / "qwen3-8b-dflash-b16")
DDTCTL = [sys.executable, "-m", "ddtctl"]


def _run(args, env=None, cwd=REPO):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(DDTCTL + args, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=300)


# ----------------------------------------------------------------------------------------- no SGLang needed
@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "ddtctl"


def test_local_model_dir_is_used_as_is(cache):
    argv, mapping = dryrun.localize_model_paths(["--model-path", QWEN, "--tp-size", "2"], None)
    assert argv == ["--model-path", QWEN, "--tp-size", "2"] and mapping == {}


def test_remote_model_falls_back_to_the_cached_config(cache):
    remote = "/root/models/Qwen3.6-27B"
    target = dryrun.model_config_cache_dir("ct200", remote)
    assert target == cache / "model-configs" / "ct200" / "root__models__Qwen3.6-27B"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    argv, mapping = dryrun.localize_model_paths(["--model-path=" + remote, "--speculative-draft-model-path", DRAFT],
                                                "ct200")
    assert argv == ["--model-path=" + str(target), "--speculative-draft-model-path", DRAFT]
    assert mapping == {str(target): remote}
    assert dryrun._unmap({"model_path": str(target), "x": [str(target)]}, mapping) == {"model_path": remote,
                                                                                      "x": [remote]}


def test_missing_config_names_both_places(cache):
    with pytest.raises(dryrun.ModelConfigMissing) as info:
        dryrun.localize_model_paths(["--model-path", "/nowhere/Model", "--speculative-draft-model-path", DRAFT], "gpu1")
    msg = str(info.value)
    assert "/nowhere/Model" in msg and str(cache / "model-configs" / "gpu1" / "nowhere__Model") in msg


def test_cache_slug_cannot_escape_its_root(cache):
    for host, path in (("../../etc", "../../passwd"), ("a/b", "/x/../../y"), (None, "..")):
        d = dryrun.model_config_cache_dir(host, path).resolve()
        assert (cache / "model-configs").resolve() in d.parents


def test_gpu_declaration():
    facts, name = dryrun.platform_for("H200")
    assert facts == {"sm": 90, "capability": [9, 0], "memory_gb": 141, "name": "H200"} and name == "H200"
    facts, name = dryrun.platform_for("sm100")
    assert facts["sm"] == 100 and facts["memory_gb"] == 180 and name == "sm100 (as B200)"
    facts, _ = dryrun.platform_for("RTX PRO 6000 Blackwell")
    assert facts["capability"] == [12, 0]
    assert dryrun.platform_for(None) == (None, None)
    with pytest.raises(UsageError):
        dryrun.platform_for("H9000")


def test_exit_codes():
    ok = dryrun.DryRunResult("a", True)
    bad = dryrun.DryRunResult("b", False, {"type": "ValueError", "message": "m", "hook": "h"})
    broken = dryrun.DryRunResult("c", False, {"type": "ModelConfigMissing", "message": "m", "hook": None},
                                 setup_error=True)
    assert dryrun.exit_code([ok]) == 0
    assert dryrun.exit_code([ok, bad]) == 1
    assert dryrun.exit_code([ok, bad, broken]) == 2


def test_missing_env_is_exit_2_and_says_how_to_create_it(tmp_path):
    proc = _run(["dry-run", "--argv", "--gpu", "H200", "--", "--model-path", QWEN],
                env={"XDG_CACHE_HOME": str(tmp_path), "DDTCTL_SGLANG_PYTHON": ""})
    assert proc.returncode == 2
    assert "ddtctl env create" in proc.stderr and "Traceback" not in proc.stderr


def test_argv_mode_needs_a_gpu():
    proc = _run(["dry-run", "--argv", "--", "--model-path", QWEN])
    assert proc.returncode == 2 and "--gpu" in proc.stderr


def test_missing_model_config_is_exit_2_without_starting_sglang(tmp_path):
    proc = _run(["dry-run", "--argv", "--gpu", "H200", "--", "--model-path", str(tmp_path / "absent")],
                env={"DDTCTL_SGLANG_PYTHON": "/bin/false"})
    assert proc.returncode == 2
    assert "ModelConfigMissing" in proc.stdout and str(tmp_path / "absent") in proc.stdout


# ----------------------------------------------------------------------------------------- real SGLang
def _profile(path: Path, name: str, gpu: str, server: dict, model: str = QWEN, host: str | None = None,
             env: dict | None = None) -> Path:
    lines = [f"name: {name}", 'sglang: "0.5.23"', f"hardware: {{gpu: {gpu}, count: 8}}", f"model: {{path: {model}}}"]
    if host:
        lines.append(f"host: {host}")
    if env:
        lines.append(f"env: {json.dumps(env)}")
    lines.append("server:")
    for key, value in server.items():
        lines.append(f"  {key}: {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.sglang
def test_profiles_in_one_run_json_shape_and_exit_1(tmp_path):
    """Three profiles, one warm resolver: GPU from hardware.gpu, one rejected -> exit 1, exact JSON shape."""
    dflash = {"speculative-algorithm": "DFLASH", "speculative-draft-model-path": DRAFT}
    p1 = _profile(tmp_path / "h200.yaml", "h200", "H200", dflash)
    p2 = _profile(tmp_path / "b200.yaml", "b200", "B200", dflash)
    p3 = _profile(tmp_path / "bad.yaml", "bad", "H200", dict(dflash, **{"speculative-draft-window-size": 8}))
    # The profile's env reaches SGLang's hooks for that profile only (the next one resolves without it).
    dp = dict(dflash, **{"tp-size": 2, "enable-dp-attention": True, "dp-size": 2, "enable-dp-lm-head": True})
    p4 = _profile(tmp_path / "env.yaml", "env", "H200", dp, env={"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"})
    p5 = _profile(tmp_path / "noenv.yaml", "noenv", "H200", dp)
    # Hugging Face hub ids: SGLang's resolver gets the hub cache's directory of each config.json (ddtctl.hub; here
    # HF_HUB_OFFLINE=1 with the cache laid out by hand, so no hub is asked), and the results name the hub ids.
    hf = tmp_path / "hf"
    for repo, model in (("Qwen/Qwen3-8B", "qwen3-8b"), ("z-lab/Qwen3-8B-DFlash-b16", "qwen3-8b-dflash-b16")):
        snapshot = hf / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / ("c" * 40)
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text((MODELS / model / "config.json").read_text())
        (snapshot.parent.parent / "refs").mkdir()
        (snapshot.parent.parent / "refs" / "main").write_text("c" * 40)
    p6 = _profile(tmp_path / "hub.yaml", "hub", "H200", dict(dflash, **{"speculative-draft-model-path":
                                                                           "z-lab/Qwen3-8B-DFlash-b16"}),
                  model="Qwen/Qwen3-8B")
    hub_env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(hf), "HF_ENDPOINT": "http://127.0.0.1:9"}
    proc = _run(["dry-run", str(p1), str(p2), str(p3), str(p4), str(p5), str(p6), "--format", "json"], env=hub_env)
    assert proc.returncode == 1, proc.stderr
    data = results(proc.stdout, "dry-run")["profiles"]
    assert [d["source"] for d in data] == [str(p1), str(p2), str(p3), str(p4), str(p5), str(p6)]
    hub = data[5]["resolved"]
    assert data[5]["ok"] and hub["model_path"] == "Qwen/Qwen3-8B"
    assert hub["speculative_draft_model_path"] == "z-lab/Qwen3-8B-DFlash-b16" and hub["speculative_num_draft_tokens"] == 16
    with_env, without_env = data[3], data[4]
    assert with_env["error"]["message"] == "DP spec/prefill coordination requires single-layer EAGLE, EAGLE3 or DSPARK"
    assert without_env["ok"] is True
    data = data[:3]
    for d in data:
        assert set(d) == {"source", "ok", "error", "resolved", "overrides", "gpu", "warnings"}
        assert isinstance(d["warnings"], list)  # what SGLang logged (as findings), as text output shows it
        for o in d["overrides"]:
            assert set(o) == {"field", "raw", "resolved", "hook"}
    h200, b200, bad = data
    assert h200["ok"] and b200["ok"] and not bad["ok"]
    assert h200["error"] is None
    assert (h200["resolved"]["attention_backend"], b200["resolved"]["attention_backend"]) == ("fa3", "trtllm_mha")
    assert b200["resolved"]["page_size"] == 64
    assert bad["error"]["type"] == "ValueError" and bad["error"]["hook"] == "speculative_hook.handle_speculative_decoding"
    assert bad["error"]["message"].endswith("window_size=8, block_size=16.")
    assert bad["error"]["exit_code"] == 1
    assert (h200["gpu"], b200["gpu"]) == ("H200", "B200")
    assert "speculative_hook.py:" in bad["error"]["where"]  # the sglang file:line that raised


@pytest.mark.sglang
def test_remote_profile_uses_cached_config_and_reports_its_own_path(tmp_path, managed_python):
    remote = "/srv/models/Qwen3-8B"  # not on this machine: its config.json is cached as deploy would
    cached = tmp_path / "xdg" / "ddtctl" / "model-configs" / "gpu-host" / "srv__models__Qwen3-8B"
    cached.mkdir(parents=True)
    (cached / "config.json").write_text((MODELS / "qwen3-8b" / "config.json").read_text())
    p = _profile(tmp_path / "remote.yaml", "remote", "sm120", {"speculative-algorithm": "DFLASH",
                                                               "speculative-draft-model-path": DRAFT},
                 model=remote, host="gpu-host")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "DDTCTL_SGLANG_PYTHON": str(managed_python)}
    proc = _run(["dry-run", str(p), "--format", "json"], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = results(proc.stdout, "dry-run")["profiles"]
    assert result["resolved"]["model_path"] == remote
    assert result["resolved"]["attention_backend"] == "flashinfer"  # sm120


@pytest.mark.sglang
def test_argv_text_output_shows_silent_overrides(tmp_path):
    proc = _run(["dry-run", "--argv", "--gpu", "H200", "--", "--model-path", str(MODELS / "qwen3-next-80b-a3b"),
                 "--tp-size", "4", "--linear-attn-backend", "flashinfer"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("ACCEPTED argv on H200")
    assert "SGLang changed silently:" in out
    assert "disable_overlap_schedule: False -> True  (model_hook.handle_model_specific_adjustments)" in out
    assert "mamba strategy no_buffer" in out and "overlap off" in out




@pytest.mark.sglang
def test_json_keeps_what_sglang_logged_as_warnings():
    """The text output prints SGLang's warnings; the JSON dropped them. A DDTREE launch without an attention backend
    is resolved with the payload's DDT115 override, which SGLang logs as a warning."""
    proc = _run(["dry-run", "--argv", "--gpu", "H200", "--format", "json", "--", "--model-path",
                 str(MODELS / "qwen3-8b"), "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path",
                 DRAFT, "--speculative-ddtree-budget", "64"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = results(proc.stdout, "dry-run")["profiles"]
    assert result["ok"] and result["gpu"] == "H200"
    ddt115 = [w for w in result["warnings"] if w["id"] == "DDT115"]  # the rule id read from SGLang's log line
    assert ddt115 and "[DDT115]" in ddt115[0]["message"] and ddt115[0]["file"] is None, result["warnings"]
