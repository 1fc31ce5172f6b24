"""`ddtctl validate DIR` meets the inventory and tune search spaces beside the profiles: each is checked as what it
is and noted, not failed as a broken profile; `ddtctl validate --inventory hosts.yaml` checks an inventory itself.
Through ddtctl.cli.main in this process (the entry point, fast path and typer alike)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
from json_envelope import error, results

from ddtctl.validate_kinds import INVENTORY, PROFILE, SPACE, document_kind

REPO = Path(__file__).resolve().parents[2]
PROFILE_FILE = REPO / "profiles" / "qwen3-8b-ddtree.yaml"
INVENTORY_TEXT = """\
defaults: {user: ubuntu, python: /opt/venv/bin/python}
hosts:
  gpu1: {address: 10.0.0.1, profile: p.yaml}
  gpu2: {address: 10.0.0.2}
"""


def ddtctl(*args) -> tuple[int, str, str]:
    from ddtctl.cli import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def repo_dir(tmp_path, monkeypatch) -> Path:
    """A deployment repository: a profile, its inventory, and a tune search space."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.chdir(tmp_path)
    shutil.copy(PROFILE_FILE, tmp_path / "p.yaml")
    (tmp_path / "hosts.yaml").write_text(INVENTORY_TEXT)
    (tmp_path / "space.yaml").write_text("speculative-ddtree-budget: [16, 32]\nenv.DDTREE_CONV_TREE: [sglang, compact]\n")
    return tmp_path


def test_a_directorys_inventory_and_search_space_are_noted_not_failed(repo_dir):
    code, out, _ = ddtctl("validate", repo_dir)
    assert code == 0, out
    assert f"- {repo_dir / 'hosts.yaml'}: not a profile: an inventory of 2 host(s), checked as one" in out
    assert f"- {repo_dir / 'space.yaml'}: not a profile: a tune search space of 4 point(s), checked as one" in out
    assert f"✓ {repo_dir / 'p.yaml'}" in out and out.splitlines()[-1] == "1/1 valid; 2 not a profile"
    code, out, _ = ddtctl("validate", repo_dir, "--format", "json")
    kinds = {Path(p["source"]).name: (p["kind"], p["ok"]) for p in results(out, "validate")["profiles"]}
    assert kinds == {"hosts.yaml": (INVENTORY, True), "p.yaml": (PROFILE, True), "space.yaml": (SPACE, True)}


def test_a_broken_inventory_or_space_fails_by_its_own_schema_in_one_line(repo_dir):
    (repo_dir / "hosts.yaml").write_text(INVENTORY_TEXT.replace("address: 10.0.0.2", "address: 10.0.0.2, workdir: /w"))
    (repo_dir / "space.yaml").write_text("speculative-ddtree-budgt: [16, 32]\n")
    code, out, _ = ddtctl("validate", repo_dir)
    assert code == 2
    assert f"✗ {repo_dir / 'hosts.yaml'}: hosts.gpu2: unknown key 'workdir' (fix: did you mean 'work_dir'?)" in out
    assert (f"✗ {repo_dir / 'space.yaml'}: speculative-ddtree-budgt: unknown SGLang 0.5.23 flag in a search space "
            "(fix: did you mean speculative-ddtree-budget?)") in out
    assert "DDT007" not in out and out.splitlines()[-1] == "1/1 valid; 2 not a profile (2 with errors)"


@pytest.mark.parametrize("data, kind", [
    ({"hosts": {"a": {}}}, INVENTORY),
    ({"defaults": {"user": "x"}, "hosts": {}}, INVENTORY),
    ({"hosts": ["a", "b"], "name": "p"}, PROFILE),  # a multi-node profile's hosts: a list
    ({"speculative-ddtree-budget": [16, 32]}, SPACE),
    ({"env.DDTREE_CONV_TREE": "compact"}, SPACE),
    ({"disable-overlap-schedule": [True, False]}, SPACE),
    ({"tp-size": 2, "cuda-graph-bs-decode": [1, 2, 4]}, PROFILE),  # a flag that takes a list
    ({"model-path": "/m", "tp-size": [1, 2]}, PROFILE),  # SGLang's --config (its error is the profile path's)
    ({"name": "p", "server": {}}, PROFILE),
    ({"ignore": [{"rule": "DDT114"}]}, PROFILE),
])
def test_document_kind(data, kind):
    assert document_kind(data) == kind


def test_validate_inventory_checks_the_file_its_hosts_and_their_profiles(repo_dir):
    code, out, _ = ddtctl("validate", "--inventory", "hosts.yaml")
    assert code == 0 and out == f"✓ hosts.yaml: an inventory of 2 host(s): gpu1 ({repo_dir / 'p.yaml'}), gpu2\n"
    (repo_dir / "broken.yaml").write_text("name: broken\nserver: []\n")
    (repo_dir / "hosts.yaml").write_text(INVENTORY_TEXT + "  gpu3: {address: 10.0.0.3, profile: gone.yaml}\n"
                                         "  gpu4: {address: 10.0.0.4, profile: broken.yaml}\n"
                                         "  gpu5: {address: 10.0.0.5, prot: 22}\n")
    code, out, err = ddtctl("validate", "--inventory", "hosts.yaml")
    assert code == 2 and err == ""
    lines = out.splitlines()
    assert lines[0] == "✗ hosts.yaml: 3 error(s)" and len(lines) == 4
    assert lines[1] == f"  hosts.yaml: hosts.gpu3.profile: gone.yaml: no such file (looked for {repo_dir / 'gone.yaml'})"
    assert lines[2].startswith("  hosts.yaml: hosts.gpu4.profile: broken.yaml is not a profile: ")
    assert lines[3] == "  hosts.yaml: hosts.gpu5: unknown key 'prot' (fix: did you mean 'port'?)"
    code, out, _ = ddtctl("validate", "--inventory", "hosts.yaml", "--format", "json")
    inv = results(out, "validate")["inventory"]
    assert code == 2 and not inv["ok"] and inv["hosts"] == ["gpu1", "gpu2", "gpu3", "gpu4", "gpu5"]
    assert [e["where"] for e in inv["errors"]] == ["hosts.yaml", "hosts.yaml", "hosts.yaml: hosts.gpu5"]
    assert inv["errors"][0]["message"].startswith("hosts.gpu3.profile: gone.yaml: no such file")


def test_validate_inventory_refuses_a_name_given_twice_and_a_missing_file(repo_dir):
    (repo_dir / "hosts.yaml").write_text("hosts:\n  gpu1: {address: a}\n  gpu1: {address: b}\n")
    code, out, err = ddtctl("validate", "--inventory", "hosts.yaml")
    assert code == 2 and out == ""
    assert err == "ddtctl: error: hosts.yaml:3: invalid YAML: duplicate host 'gpu1' (first at line 2)\n"
    code, out, _ = ddtctl("validate", "--inventory", "nowhere.yaml", "--format", "json")
    assert code == 2 and error(out, "validate", 2)["message"] == "inventory file not found"
    code, _, err = ddtctl("validate", "--inventory", "hosts.yaml", "p.yaml")
    assert code == 2 and "--inventory checks the inventory file alone" in err
    assert json.loads(ddtctl("validate", "-i", "hosts.yaml", "--format", "json")[1])["ok"] is False
