"""SGLang's own `--config FILE`, both ways: ddtctl's expansion (validate --argv) against SGLang 0.5.23's
ConfigArgumentMerger, and `ddtctl render` (argv, shell, sglang-config) read back into the same launch."""

from __future__ import annotations

import json
import shlex
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from ddtctl.errors import ProfileError
from ddtctl.render import render_argv, render_profile
from ddtctl.schema.extensions import extended_catalog
from ddtctl.sglang_config import expand_config_argv, profile_to_config
from ddtctl.validate import validate_argv

CATALOG = extended_catalog("0.5.23")
REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "fidelity" / "models"

CONFIG = {
    "model-path": "/m",
    "tp_size": 2,  # an underscored spelling: emitted as written, as SGLang does
    "enable-metrics": True,  # store_true: bare
    "disable-radix-cache": False,  # store_true false: left out
    "gc-threshold": [10, 5, 5],  # nargs +
    "cuda-graph-bs": [],  # an empty list: left out
    "preferred-sampling-params": {"temperature": 0.5},  # a mapping: its JSON
    "mem-fraction-static": 0.8,
}


def _write(tmp_path: Path, data, name: str = "server.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_config_args_come_first_and_follow_sglangs_value_rules(tmp_path):
    path = _write(tmp_path, CONFIG)
    argv = expand_config_argv(["--port", "1", "--config", str(path), "--tp-size", "4"], CATALOG)
    assert argv == ["--model-path", "/m", "--tp_size", "2", "--enable-metrics", "--gc-threshold", "10", "5", "5",
                    "--preferred-sampling-params", '{"temperature": 0.5}', "--mem-fraction-static", "0.8",
                    "--port", "1", "--tp-size", "4"]  # the command line after the config: it wins
    assert expand_config_argv(["--port", "1"], CATALOG) == ["--port", "1"]


@pytest.mark.parametrize("argv,data,name,match", [
    (["--config", "A", "--config", "B"], None, None, "more than once"),
    (["--config"], None, None, "no file after it"),
    (["--config", "{tmp}/s.json"], {"port": 1}, "s.json", "must be YAML"),
    (["--config", "{tmp}/missing.yaml"], None, None, "not found"),
    (["--config", "{tmp}/list.yaml"], [1, 2], "list.yaml", "mapping of flags"),
    (["--config", "{tmp}/opt.yaml"], {"enable-tf32-matmul": True}, "opt.yaml", "--enable-tf32-matmul"),
])
def test_what_sglang_refuses_is_a_one_line_error(tmp_path, argv, data, name, match):
    if name:
        _write(tmp_path, data, name)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(ProfileError, match=match):
        expand_config_argv(argv, CATALOG)


def test_validate_argv_reads_the_model_path_from_sglangs_config(tmp_path):
    """Before: `validate --argv -- --config x.yaml` said --model-path is required."""
    path = _write(tmp_path, {"model-path": str(MODELS / "qwen3-8b"), "tp-size": 3})
    r = validate_argv(["--config", str(path)], gpu="H200")
    rules = {f.rule for f in r.findings}
    assert "DDT008" not in rules
    assert not validate_argv(["--tp-size", "3"], gpu="H200").valid  # the control: no model path at all


PROFILE = """\
name: render-me
model: {path: /models/Qwen3-8B, architecture: Qwen3ForCausalLM}
server:
  tp-size: 2
  api-key: sekrit-value
  enable-metrics: true
  disable-radix-cache: false
  gc-threshold: [10, 5, 5]
  attention-backend: triton
env:
  HF_TOKEN: hf-secret-123
  NCCL_P2P_LEVEL: SYS
"""


@pytest.fixture
def profile(tmp_path) -> Path:
    p = tmp_path / "render-me.yaml"
    p.write_text(PROFILE)
    return p


def test_render_sglang_config_reads_back_into_the_same_argv(profile, tmp_path):
    r = render_profile(str(profile), "sglang-config", show_secrets=True)
    back = tmp_path / "back.yaml"
    back.write_text(r.text)
    from ddtctl.profile import load_profile

    want = render_argv(load_profile(str(profile)).profile, CATALOG)
    assert expand_config_argv(["--config", str(back)], CATALOG) == want
    assert r.text.startswith("# SGLang 0.5.23 server config") and "disable-radix-cache" not in r.text


def test_render_shell_is_one_command_that_splits_back_into_env_launcher_and_argv(profile):
    r = render_profile(str(profile), "shell", show_secrets=True)
    words = shlex.split(r.text.replace(" \\\n", " "))
    assert words[:3] == ["env", "HF_TOKEN=hf-secret-123", "NCCL_P2P_LEVEL=SYS"]
    assert words[3:5] == ["sglang", "serve"] and words[5:] == r.argv
    assert all(line.lstrip().startswith("--") for line in r.text.splitlines()[1:])  # one flag a line


def test_secrets_are_masked_unless_asked(profile):
    for fmt in ("argv", "shell", "sglang-config"):
        text = render_profile(str(profile), fmt).text
        assert "sekrit-value" not in text and "hf-secret-123" not in text, fmt
    shell = render_profile(str(profile), "shell").text
    assert 'HF_TOKEN="${HF_TOKEN}"' in shell  # the caller's own variable, so the command still runs
    argv = json.loads(render_profile(str(profile), "argv").text)
    assert argv[argv.index("--api-key") + 1] == "***"
    assert "sekrit-value" in render_profile(str(profile), "argv", show_secrets=True).text


def test_a_flag_sglangs_config_cannot_carry_is_refused_by_name():
    with pytest.raises(ProfileError, match="--enable-tf32-matmul"):
        profile_to_config("/m", {"enable-tf32-matmul": True}, CATALOG)
    with pytest.raises(ProfileError, match="unknown render format"):
        render_profile(str(REPO / "profiles" / "qwen3-8b-dflash.yaml"), "toml")


@pytest.mark.sglang
def test_expansion_equals_sglangs_own_config_merger(managed_python, tmp_path):
    """SGLang 0.5.23's ConfigArgumentMerger over its real parser, on the same files, gives ddtctl's argv."""
    cases = {"all": CONFIG, "empty": {}, "bad": {"enable-tf32-matmul": True}}
    paths = {k: str(_write(tmp_path, v, f"{k}.yaml")) for k, v in cases.items()}
    code = textwrap.dedent("""
        import argparse, json, sys
        import torch
        for name, schema in (("torchvision::nms", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"),
                             ("torchvision::qnms", "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")):
            try:  # as ddtctl's resolver worker does: PyPI's CUDA torchvision beside CPU torch
                torch.library.define(name, schema)
            except Exception:
                pass
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        out = {}
        for name, path in json.loads(sys.argv[1]).items():
            try:
                out[name] = ConfigArgumentMerger(parser).merge_config_with_args(["--port", "1", "--config", path])
            except ValueError as exc:
                out[name] = "ValueError: " + str(exc)
        print(json.dumps(out))
    """)
    p = subprocess.run([str(managed_python), "-c", code, json.dumps(paths)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    theirs = json.loads(p.stdout.strip().splitlines()[-1])
    for name, path in paths.items():
        try:
            ours = expand_config_argv(["--port", "1", "--config", path], CATALOG)
        except ProfileError as exc:
            assert str(theirs[name]).startswith("ValueError: Unsupported config option"), (name, theirs[name])
            assert "enable-tf32-matmul" in str(exc)
            continue
        assert ours == theirs[name], name
