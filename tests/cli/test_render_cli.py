"""`ddtctl render` as a user runs it: each format on a bundled profile, JSON output, and a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from json_envelope import results

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "qwen36-27b-ddtree.yaml")


def _ddtctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtctl", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO)


def test_render_argv_shell_and_sglang_config():
    argv = _ddtctl("render", PROFILE, "--as", "argv")
    assert argv.returncode == 0, argv.stderr
    tokens = json.loads(argv.stdout)
    assert tokens[:4] == ["sglang", "serve", "--model-path", "/root/models/Qwen3.6-27B"]
    assert tokens[tokens.index("--speculative-ddtree-budget") + 1] == "64"
    shell = _ddtctl("render", PROFILE)  # the default: one shell command
    assert shell.returncode == 0 and shell.stdout.startswith("env NCCL_P2P_LEVEL=SYS sglang serve")
    config = _ddtctl("render", PROFILE, "--as", "sglang-config")
    assert config.returncode == 0 and "\nspeculative-ddtree-shadow-linear: true\n" in config.stdout
    doc = results(_ddtctl("render", PROFILE, "--as", "argv", "--format", "json").stdout, "render")
    assert doc["argv"] == tokens[2:] and doc["env"] == {"NCCL_P2P_LEVEL": "SYS"} and doc["format"] == "argv"


def test_render_a_missing_profile_is_one_line_and_exit_2():
    r = _ddtctl("render", "no-such-profile.yaml")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "no-such-profile.yaml" in r.stderr and "Traceback" not in r.stderr
