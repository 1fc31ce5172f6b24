"""Issue #17 item 6, basics: `--version`, `-h`, `completion bash|zsh|fish`, deploy's `--plan`/`--stage` (and the
deprecated `--dry-run`/`--check`), and `status` without a host. No SSH server needed."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from json_envelope import results

import ddtctl
from ddtctl.cli.completion import load_tree

REPO = Path(__file__).resolve().parents[2]


def ddtctl_run(*args, env=None, cwd=None):
    full_env = dict(os.environ, NO_COLOR="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=60)


def write_inventory(tmp_path: Path, text: str | None = None) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(text if text is not None else """
defaults: {python: /opt/venv/bin/python, connect_timeout_s: 5}
hosts:
  ct200: {address: 10.1.2.3, user: ubuntu, port: 2222, profile: p.yaml}
  b200: {address: 10.9.9.9, user: root}
""")
    return path


# ------------------------------------------------------------------------------------------------------- --version
def test_version_prints_the_package_and_pinned_sglang_versions():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert ddtctl.__version__ == pyproject  # the two places the version lives agree
    res = ddtctl_run("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"ddtctl {pyproject} (targets SGLang 0.5.23)\n" and res.stderr == ""
    assert ddtctl.PINNED_SGLANG == "0.5.23"
    # the typer path (--debug, DDTCTL_NO_FASTPATH=1) says exactly the same
    assert ddtctl_run("--version", env={"DDTCTL_NO_FASTPATH": "1"}).stdout == res.stdout
    assert ddtctl_run("--debug", "--version").stdout == res.stdout


_PROBE = """
import sys
from ddtctl.cli import main
try:
    main({args!r})
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("typer", "rich", "click", "pydantic", "paramiko") if m in sys.modules)
sys.stderr.write(f"\\nRESULT {{code}} {{','.join(heavy) or '-'}}\\n")
"""


@pytest.mark.parametrize("args, heavy_ok", [
    (["--version"], False),
    (["completion", "bash"], False),
    (["completion", "fish"], False),
    (["validate", str(REPO / "profiles" / "qwen36-27b-ddtree.yaml")], True),  # pydantic, but never typer/rich
])
def test_fast_path_answers_without_typer(args, heavy_ok):
    res = subprocess.run([sys.executable, "-c", _PROBE.format(args=args)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, NO_COLOR="1"))
    code, heavy = res.stderr.strip().splitlines()[-1].split()[1:]
    assert code == "0", res.stdout + res.stderr
    loaded = set() if heavy == "-" else set(heavy.split(","))
    assert not loaded & {"typer", "rich", "click", "paramiko"}, loaded
    if not heavy_ok:
        assert not loaded, loaded


# -------------------------------------------------------------------------------------------------------------- -h
@pytest.mark.parametrize("cmd", [[], ["validate"], ["deploy"], ["status"], ["env", "create"], ["completion"]])
def test_h_is_help(cmd):
    short, long_ = ddtctl_run(*cmd, "-h"), ddtctl_run(*cmd, "--help")
    assert short.returncode == 0, short.stdout + short.stderr
    assert short.stdout.startswith("Usage: ddtctl " + " ".join(cmd)) and short.stdout == long_.stdout
    assert re.search(r"-h, --help\s", short.stdout)


def test_deploy_help_shows_the_new_names_only():
    out = ddtctl_run("deploy", "-h").stdout
    assert "--plan" in out and "--stage" in out
    assert not re.search(r"(?<![\w-])--(dry-run|check)\b", out)  # the deprecated aliases are hidden


# ----------------------------------------------------------------------------------------------------- completion
COMMANDS = ("validate", "dry-run", "deploy", "status", "rules", "completion", "env", "overlay", "kernels")


def _generator():
    """tools/completion_tree.py (outside the package: it builds the whole app), loaded from its file."""
    spec = importlib.util.spec_from_file_location("completion_tree", REPO / "tools" / "completion_tree.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_completion_tree_matches_the_app():
    assert load_tree() == _generator().app_tree(), ("ddtctl/cli/_completion_tree.py is stale: "
                                                    "run `.venv/bin/python tools/completion_tree.py --write`")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_names_the_commands(shell):
    res = ddtctl_run("completion", shell)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert len(res.stdout) > 1000
    for word in COMMANDS + ("create", "selftest", "--plan", "--stage", "--probe", "--format", "--version"):
        if shell == "fish" and word.startswith("--"):
            word = "-l " + word[2:]  # complete -c ddtctl ... -l plan
        assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", res.stdout), word
    assert ddtctl_run("completion", shell, env={"DDTCTL_NO_FASTPATH": "1"}).stdout == res.stdout
    if shell != "bash" and shutil.which(shell):  # zsh -n / fish -n where installed; bash is checked below
        check = subprocess.run([shell, "-n"], input=res.stdout, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr


def test_completion_refuses_an_unknown_shell():
    res = ddtctl_run("completion", "powershell")
    assert res.returncode == 2 and "powershell" in res.stderr


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "ddtctl.bash"
    path.write_text(ddtctl_run("completion", "bash").stdout)
    return path


def test_bash_script_is_valid_bash(bash_script):
    res = subprocess.run(["bash", "-n", str(bash_script)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr


def bash_complete(script: Path, line: list[str]) -> list[str]:
    """COMPREPLY of the script's _ddtctl for the words of `line` (the last one is being completed)."""
    driver = (f"source {script}\nCOMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); COMPREPLY=()\n_ddtctl\n"
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    res = subprocess.run(["bash", "-c", driver, "bash", *line], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return [w for w in res.stdout.splitlines() if w]


@pytest.mark.parametrize("line, want, unwanted", [
    (["ddtctl", ""], set(COMMANDS), set()),
    (["ddtctl", "de"], {"deploy"}, {"validate"}),
    (["ddtctl", "env", ""], {"create", "show", "remove"}, {"validate"}),
    (["ddtctl", "validate", "--format", ""], {"text", "json", "github"}, set()),
    (["ddtctl", "validate", "--format", "=", "j"], {"json"}, {"text"}),
    (["ddtctl", "deploy", "-i", "hosts.yaml", "--"], {"--plan", "--stage", "--yes"}, {"--dry-run", "--check"}),
    (["ddtctl", "status", "--"], {"--probe", "--inventory"}, set()),
    (["ddtctl", "completion", ""], {"bash", "zsh", "fish"}, set()),
    (["ddtctl", "validate", "--argv", "--", "--model"], set(), {"--argv"}),  # after `--`: SGLang's arguments
])
def test_bash_completion_completes(bash_script, line, want, unwanted):
    got = set(bash_complete(bash_script, line))
    assert want <= got and not unwanted & got, got


# ------------------------------------------------------------------------------------------- deploy --plan/--stage
def test_deploy_plan_and_the_deprecated_dry_run_through_the_entry_point(tmp_path):
    """The options parse through the real entry point and stop at an unknown host, long before any SSH."""
    inv = write_inventory(tmp_path)
    env = {"HOME": str(tmp_path)}  # no ~/.ssh/config aliases
    for new, old in (("--plan", "--dry-run"), ("--stage", "--check")):
        res = ddtctl_run("deploy", "nosuchhost", new, "-i", inv, env=env)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and "unknown host 'nosuchhost'" in res.stderr
        res = ddtctl_run("deploy", "nosuchhost", old, "-i", inv, env=env)
        warning, error = res.stderr.splitlines()
        assert res.returncode == 2 and "unknown host 'nosuchhost'" in error
        assert warning == f"ddtctl: warning: `deploy {old}` is deprecated, use `deploy {new}`"
    res = ddtctl_run("deploy", "nosuchhost", "--no-such-option", "-i", inv, env=env)
    assert res.returncode == 2 and "--no-such-option" in res.stderr and "unknown host" not in res.stderr


@pytest.mark.parametrize("flags, plan, stage, warning", [
    ([], False, False, None),
    (["--plan"], True, False, None),
    (["--stage"], False, True, None),
    (["--dry-run"], True, False, "`deploy --dry-run` is deprecated, use `deploy --plan`"),
    (["--check"], False, True, "`deploy --check` is deprecated, use `deploy --stage`"),
])
def test_deploy_options_reach_the_library(tmp_path, monkeypatch, flags, plan, stage, warning):
    from typer.testing import CliRunner

    import ddtctl.deploy
    from ddtctl.cli import load_app

    seen = {}

    def fake_deploy(spec, hosts, opts):
        seen.update(hosts=[h.name for h in hosts], dry_run=opts.dry_run, check_only=opts.check_only)
        status = "planned" if opts.dry_run else "checked" if opts.check_only else "deployed"
        return SimpleNamespace(status=status, exit_code=0, release={"ct200": "r1"}, elapsed_s=0.1, error=None,
                               rolled_back_to={}, to_json=lambda: {"status": status})

    monkeypatch.setattr(ddtctl.deploy, "deploy", fake_deploy)
    monkeypatch.setattr(ddtctl.deploy, "spec_from_profile",
                        lambda profile, **kw: SimpleNamespace(name="p", host_names=[kw["host"]]))
    inv = write_inventory(tmp_path)
    res = CliRunner().invoke(load_app(), ["deploy", "ct200", *flags, "--yes", "-i", str(inv)])
    assert res.exit_code == 0, res.output
    assert seen == {"hosts": ["ct200"], "dry_run": plan, "check_only": stage}
    warnings = [line for line in res.stderr.splitlines() if "deprecated" in line]
    assert warnings == ([f"ddtctl: warning: {warning}"] if warning else [])
    if plan:
        assert "plan only (--plan): nothing changed" in res.stdout


# --------------------------------------------------------------------------------------------- status without HOST
def test_status_without_host_lists_the_inventory(tmp_path):
    inv = write_inventory(tmp_path)
    res = ddtctl_run("status", "-i", inv)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["host", "address", "user", "profile"]
    assert lines[1].split() == ["ct200", "10.1.2.3:2222", "ubuntu", "p.yaml"]
    assert lines[2].split() == ["b200", "10.9.9.9", "root", "-"]
    # the default inventory (./hosts.yaml), as JSON
    doc = results(ddtctl_run("status", "--format", "json", cwd=tmp_path).stdout, "status")["hosts"]
    assert [(h["host"], h["address"], h["user"], h["port"]) for h in doc] == [
        ("ct200", "10.1.2.3", "ubuntu", 2222), ("b200", "10.9.9.9", "root", 22)]


def test_status_without_host_on_an_empty_inventory(tmp_path):
    res = ddtctl_run("status", "-i", write_inventory(tmp_path, "hosts: {}\n"))
    assert res.returncode == 0 and res.stdout == "" and "no hosts in the inventory" in res.stderr


def test_status_probe_reports_an_unreachable_host(tmp_path):
    with socket.socket() as s:  # a port nobody listens on: the connection is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = write_inventory(tmp_path, f"hosts:\n  down: {{address: 127.0.0.1, port: {port}, connect_timeout_s: 5}}\n")
    res = ddtctl_run("status", "--probe", "-i", inv, "--format", "json", env={"HOME": str(tmp_path)})
    assert res.returncode == 3, res.stdout + res.stderr
    (row,) = results(res.stdout, "status")["hosts"]
    assert row["host"] == "down" and row["healthy"] is False and row["status"] is None
    assert row["error"]["where"] == "down" and row["error"]["exit_code"] == 3 and row["error"]["message"]
    text = ddtctl_run("status", "--probe", "-i", inv, env={"HOME": str(tmp_path)})
    assert text.returncode == 3 and "unreachable" in text.stdout and "release" in text.stdout.splitlines()[0]


def test_status_without_any_inventory_names_where_it_looked(tmp_path):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "DDTCTL_INVENTORY"}
    res = subprocess.run([sys.executable, "-m", "ddtctl", "status"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == ""
    assert f"searched {work / 'hosts.yaml'} and its" in res.stderr and "fix: create hosts.yaml" in res.stderr
