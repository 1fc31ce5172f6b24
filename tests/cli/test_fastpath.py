"""The start-up fast path of `ddtctl validate` and the typer command must behave identically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddtctl.cli.fastpath import try_validate

REPO = Path(__file__).resolve().parents[2]
SEED = str(REPO / "profiles" / "qwen36-27b-ddtree.yaml")


def run(args, fast: bool):
    env = dict(os.environ, NO_COLOR="1")
    if not fast:
        env["DDTCTL_NO_FASTPATH"] = "1"
    proc = subprocess.run([sys.executable, "-m", "ddtctl", *args], capture_output=True, text=True, env=env,
                          timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("args", [
    ["validate", SEED],
    ["validate", "--format", "json", SEED, str(REPO / "profiles")],
    ["validate", "--format=json", "-q", str(REPO / "profiles")],
    ["validate", "--gpu", "H200", SEED],
    ["validate", "--argv", "--gpu=B200", "--", "--model-path", "/m", "--attention-backend", "fa3"],
    ["validate", "/nonexistent.yaml"],
    ["validate"],
])
def test_same_output_and_exit_code(args):
    assert run(args, fast=True) == run(args, fast=False)


def test_fast_path_declines_what_it_does_not_parse():
    assert try_validate(["validate", "--help"]) is None
    assert try_validate(["validate", "--unknown-option", SEED]) is None
    assert try_validate(["validate", "--format", "yaml", SEED]) is None
    assert try_validate(["rules"]) is None
