"""`--set KEY=VALUE` and `--gpu` on validate, dry-run and render (ddtctl/profile_overrides.py): a profile tried
as if its file said otherwise, the file untouched; a bad key is one line naming it, with the closest name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from json_envelope import results

from ddtctl.errors import UsageError
from ddtctl.profile import load_profile, read_profile_document
from ddtctl.profile_overrides import apply_overrides, parse_sets
from ddtctl.validate import validate_path

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "fidelity" / "models"
FLAGSHIP = REPO / "profiles" / "qwen36-27b-ddtree.yaml"


@pytest.fixture
def rtx(tmp_path) -> Path:
    """A DFLASH profile for 8 RTX PRO 6000s that asks for fa3 (no sm120 kernels: DDT701), its tp under an alias."""
    p = tmp_path / "rtx.yaml"
    p.write_text(f"""name: rtx
hardware: {{gpu: RTX_PRO_6000_BLACKWELL, count: 8}}
model: {{path: {MODELS / 'qwen3-8b'}}}
server:
  tensor-parallel-size: 8
  attention-backend: fa3
  speculative-algorithm: DFLASH
  speculative-draft-model-path: {MODELS / 'qwen3-8b-dflash-b16'}
""")
    return p


def _ids(result) -> set[str]:
    return {f.rule for f in result.findings}


def test_set_tries_a_profile_on_another_machine_without_editing_it(rtx):
    before = rtx.read_bytes()
    assert "DDT701" in _ids(validate_path(rtx)) and not validate_path(rtx).valid
    on_h200 = validate_path(rtx, overrides=parse_sets(["hardware.gpu=H200"]))
    assert on_h200.valid and on_h200.profile.hardware.gpu == "H200" and on_h200.profile.hardware.count == 8
    tp3 = validate_path(rtx, overrides=parse_sets(["hardware.gpu=H200", "server.tp-size=3"]))
    assert not tp3.valid and {f.rule for f in tp3.errors} == {"DDT602"}  # replaced, not given twice (DDT009)
    assert {f.line for f in tp3.errors} == {5}  # the file's tensor-parallel-size line, where the edit would go
    assert tp3.profile.server["tensor-parallel-size"] == 3 and "tp-size" not in tp3.profile.server
    assert rtx.read_bytes() == before


def test_the_flagship_on_two_h200s():
    result = validate_path(FLAGSHIP, overrides=parse_sets(["hardware.gpu=H200", "server.tp-size=2"]))
    assert result.valid and result.profile.server["tp-size"] == 2 and result.profile.hardware.gpu == "H200"


@pytest.mark.parametrize(("option", "message", "fix"), [
    ("hardwre.gpu=H200", "--set hardwre.gpu: no profile key 'hardwre'", "did you mean 'hardware'?"),
    ("hardware.gpus=H200", "--set hardware.gpus: no hardware key 'gpus'", "did you mean 'gpu'?"),
    ("model.pth=/m", "--set model.pth: no model key 'pth'", "did you mean 'path'?"),
    ("tp-size=2", "--set tp-size: no profile key 'tp-size'", "did you mean 'server.tp-size'?"),
    ("server.tp-size", "--set server.tp-size: expected KEY=VALUE", "e.g. --set server.tp-size=2"),
    ("name.first=x", "--set name.first: name takes a value, not keys", "--set name=VALUE"),
    ("server.tp-size.x=1", "--set server.tp-size.x: server.tp-size takes a value, not keys", None),
    ("env.1X=1", "--set env.1X: '1X' is not an environment variable name", None),
    ("server..x=1", "--set server..x: an empty part in the key", "e.g. --set server.tp-size=2"),
])
def test_a_bad_key_is_one_line_naming_it(option, message, fix):
    with pytest.raises(UsageError) as err:
        parse_sets([option])
    assert err.value.message == message
    if fix:
        assert err.value.fix == fix


def test_an_unknown_flag_is_named_against_the_profiles_release(rtx):
    with pytest.raises(UsageError) as err:
        validate_path(rtx, overrides=parse_sets(["server.speculative-ddtree-budgt=8"]))
    assert err.value.message == "--set server.speculative-ddtree-budgt: no SGLang 0.5.23 flag " \
                                "'speculative-ddtree-budgt'"
    assert err.value.fix == "did you mean 'speculative-ddtree-budget'?"


def test_values_are_read_as_the_profile_reader_reads_the_file(rtx):
    doc = read_profile_document(rtx)
    apply_overrides(doc, parse_sets([
        "server.revision=0123",  # a string flag keeps its text (YAML 1.1 would read octal 83)
        "server.cuda-graph-bs-decode=[1, 2, 4]",
        "model.architecture=Qwen3ForCausalLM",
        "env.NCCL_P2P_LEVEL=SYS",
        "launch.health_timeout_s=60",
        "description=tried on # a comment, as in the file",
    ]))
    from ddtctl.profile import build_profile

    profile, errors = build_profile(doc)
    assert errors == [] and profile is not None
    assert profile.server["revision"] == "0123" and profile.server["cuda-graph-bs-decode"] == [1, 2, 4]
    assert profile.model.architecture == "Qwen3ForCausalLM" and profile.env == {"NCCL_P2P_LEVEL": "SYS"}
    assert profile.launch.health_timeout_s == 60 and profile.description == "tried on"
    hex_tp = validate_path(rtx, overrides=parse_sets(["hardware.gpu=H200", "server.tp-size=0x2"]))
    assert "DDT012" in _ids(hex_tp)  # a number argparse would read otherwise, as in a file


def _ddtctl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtctl", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=dict(os.environ, NO_COLOR="1", **(env or {})))


def test_validate_refuses_set_where_it_cannot_apply(rtx):
    from ddtctl.cli.validate_report import run_validate

    common = {"gpu": None, "sglang": None, "output": "text", "quiet": False, "sets": ["server.tp-size=2"]}
    with pytest.raises(UsageError, match="a raw SGLang launch has no profile to change"):
        run_validate(["--model-path", "/m"], argv=True, fix=False, **common)
    with pytest.raises(UsageError, match="--fix edits the file, --set only this run"):
        run_validate([str(rtx)], argv=False, fix=True, **common)


def test_dry_run_renders_the_overridden_profile(rtx, tmp_path):
    """The override reaches the argv SGLang's resolver would get (here: a model directory that is not there,
    reported before any resolver starts)."""
    absent = tmp_path / "absent"
    proc = _ddtctl("dry-run", str(rtx), "--set", f"model.path={absent}", "--gpu", "H200", "--format", "json",
                   env={"DDTCTL_SGLANG_PYTHON": "/bin/false"})
    assert proc.returncode == 2, proc.stderr
    (result,) = results(proc.stdout, "dry-run")["profiles"]
    assert result["error"]["type"] == "ModelConfigMissing" and str(absent) in result["error"]["message"]
    from ddtctl.dryrun import dry_run_profiles

    with pytest.raises(UsageError, match="--set server.tp-sise: no SGLang 0.5.23 flag 'tp-sise'"):
        dry_run_profiles([str(rtx)], overrides=parse_sets(["server.tp-sise=2"]), python="/bin/false")


def test_dry_runs_overlay_choice_sees_the_override(rtx):
    from ddtctl.overlay.dryrun_support import profiles_use_ddtree

    assert not profiles_use_ddtree([str(rtx)])
    assert profiles_use_ddtree([str(rtx)], parse_sets(["server.speculative-algorithm=DDTREE"]))


def test_render_set_and_gpu(rtx):
    from ddtctl.render import render_profile
    from ddtctl.render_engines import EngineOptions, render_engine

    argv = render_profile(str(rtx), "argv", overrides=parse_sets(["server.tp-size=2"])).argv
    assert argv[argv.index("--tp-size") + 1] == "2"  # the file's alias replaced; render writes the flag's name
    sky = render_engine(str(rtx), "skypilot", EngineOptions(nodes=1, overrides=parse_sets(["hardware.gpu=H100",
                                                                                             "server.tp-size=2"])))
    assert "accelerators: H100:2" in sky.text
    assert load_profile(rtx, parse_sets(["hardware.gpu=H100"])).profile.hardware.gpu == "H100"


def test_render_cli_gpu_is_hardware_gpu():
    proc = _ddtctl("render", str(FLAGSHIP), "--as", "skypilot", "--gpu", "H200", "--set", "server.tp-size=2",
                   "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = results(proc.stdout, "render")
    assert "accelerators: H200:2" in doc["text"] and json.dumps(doc["argv"]).count('"--tp-size", "2"') == 1
