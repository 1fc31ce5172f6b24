"""`validate --fix --diff / --unsafe-fixes / --ignore` as a user runs them: real processes, through the start-up fast
path and through typer (DDTCTL_NO_FASTPATH=1), which must agree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from json_envelope import results

from ddtctl.cli.fastpath import try_validate

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "profiles" / "qwen36-27b-ddtree.yaml"


def run(*args, fast: bool = True):
    env = dict(os.environ, NO_COLOR="1")
    if not fast:
        env["DDTCTL_NO_FASTPATH"] = "1"
    proc = subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def broken(tmp_path) -> Path:
    """The seed profile without its mamba flags: DDT111, whose fix (a memory ratio) is unsafe."""
    path = tmp_path / "seed-broken.yaml"
    path.write_text("".join(line for line in SEED.read_text().splitlines(keepends=True) if "mamba" not in line))
    return path


@pytest.mark.parametrize("fast", [True, False], ids=["fastpath", "typer"])
def test_diff_leaves_the_file_byte_identical(broken, fast):
    before = broken.read_bytes()
    code, out, err = run("validate", "--fix", "--unsafe-fixes", "--diff", broken, fast=fast)
    assert broken.read_bytes() == before
    assert code == 1, out + err  # as ruff's --diff: 1 when there is a diff
    rel = str(broken).lstrip("/")
    assert f"--- a/{rel}\n+++ b/{rel}\n" in out
    assert "+  mamba-radix-cache-strategy: extra_buffer\n" in out and "+  mamba-full-memory-ratio: 0.5\n" in out
    # and --fix itself does write it
    code, _, _ = run("validate", "--fix", "--unsafe-fixes", broken, fast=fast)
    assert code == 0 and broken.read_bytes() != before


@pytest.mark.parametrize("args", [
    ["--fix", "--diff"],
    ["--fix", "--unsafe-fixes", "--diff"],
    ["--diff"],
    ["--unsafe-fixes"],
    ["--ignore", "DDT111"],
    ["--ignore", "DDT999"],
    ["--ignore=DDT000,DDT114", "--format", "json"],
    ["--fix", "--diff", "--format=json"],
])
def test_fast_path_and_typer_agree(broken, args):
    fast = run("validate", *args, broken, fast=True)
    slow = run("validate", *args, broken, fast=False)
    assert fast == slow


def test_fast_path_accepts_the_new_options(broken):
    # parsed by the fast path, not declined to typer (None); exit codes as documented
    assert try_validate(["validate", "--fix", "--diff", str(broken)]) == 0  # no safe fix: no diff
    assert try_validate(["validate", "--ignore", "DDT000", str(broken)]) == 1
    assert try_validate(["validate", "--ignore"]) is None  # a missing value: typer reports it


def test_plain_fix_leaves_the_unsafe_fix_and_says_so(broken):
    before = broken.read_bytes()
    code, out, _ = run("validate", "--fix", broken)
    assert code == 1 and broken.read_bytes() == before
    assert "[unsafe fix]" in out and "add --unsafe-fixes" in out


def test_json_fields(broken):
    code, out, _ = run("validate", "--format", "json", "--ignore", "DDT000", broken)
    doc = results(out, "validate")["profiles"][0]
    first = doc["findings"][0]
    assert code == 1 and first["fixable"] is True and first["fix_safety"] == "unsafe"
    assert [(f["id"], f["reason"]) for f in doc["ignored"]] == [("DDT000", "--ignore on the command line")]


def test_help_lists_the_options():
    code, out, _ = run("validate", "--help")
    assert code == 0
    for option in ("--diff", "--unsafe-fixes", "--ignore"):
        assert option in out
