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
    ["validate", "--set", "server.tp-size=2", "--set=hardware.gpu=H200", SEED],
    ["validate", "--set", "server.tp-sise=2", SEED],
    ["validate"],
    ["validate", "--select", "DDT9,DDT0", "--ignore=DDT00", "--statistics", SEED, str(REPO / "profiles")],
    ["validate", "--format", "sarif", "--select=DDT1", SEED],
])
def test_same_output_and_exit_code(args):
    assert run(args, fast=True) == run(args, fast=False)


def test_fast_path_declines_what_it_does_not_parse():
    assert try_validate(["validate", "--help"]) is None
    assert try_validate(["validate", "--unknown-option", SEED]) is None
    assert try_validate(["validate", "--format", "yaml", SEED]) is None
    assert try_validate(["rules"]) is None


# ruamel.yaml (the round-trip editor of --fix, migrate and tune --write) must not slow a plain validate down.
_IMPORT_PROBE = """
import sys
from ddtctl.cli import main
try:
    main({args!r})
except SystemExit:
    pass
sys.stderr.write("\\nRUAMEL " + str(any(m.startswith("ruamel") for m in sys.modules)) + "\\n")
"""


def loads_ruamel(args) -> bool:
    res = subprocess.run([sys.executable, "-c", _IMPORT_PROBE.format(args=[str(a) for a in args])],
                         capture_output=True, text=True, timeout=60, env=dict(os.environ, NO_COLOR="1"))
    return res.stderr.strip().splitlines()[-1] == "RUAMEL True"


def test_validate_does_not_import_ruamel_but_fix_does(tmp_path):
    assert not loads_ruamel(["validate", SEED])
    assert not loads_ruamel(["validate", "--format", "json", str(REPO / "profiles")])
    fixable = tmp_path / "p.yaml"
    fixable.write_text("name: p\nmodel: {path: /m}\nserver:\n  grammar-backend: xgramar   # typo\n")
    assert not loads_ruamel(["validate", fixable])  # invalid, but nothing to edit without --fix
    assert loads_ruamel(["validate", "--fix", "--diff", fixable])  # the probe can see an import
