"""`ddtctl validate / rules / explain / schema` as a user runs them: real processes, exit codes, output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from json_envelope import results

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
SEED = PROFILES / "qwen36-27b-ddtree.yaml"


def ddtctl(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def seed_without_mamba(tmp_path) -> Path:
    text = "".join(line for line in SEED.read_text().splitlines(keepends=True) if "mamba" not in line)
    path = tmp_path / "seed-broken.yaml"
    path.write_text(text)
    return path


def test_bundled_profiles_are_valid():
    run = ddtctl("validate", PROFILES)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4/4 valid" in run.stdout


def test_seed_without_mamba_flags_fails_with_one_message_and_the_fix(tmp_path):
    path = seed_without_mamba(tmp_path)
    run = ddtctl("validate", path)
    assert run.returncode == 1
    assert run.stdout.count("error") == 1
    assert "DDT111" in run.stdout and "--mamba-radix-cache-strategy extra_buffer" in run.stdout
    assert "--mamba-full-memory-ratio" in run.stdout and "fix:" in run.stdout
    line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if "speculative-algorithm" in l)
    assert f"seed-broken.yaml:{line}" in run.stdout  # points at the algorithm line


def test_json_document_is_stable(tmp_path):
    path = seed_without_mamba(tmp_path)
    run = ddtctl("validate", "--format", "json", path, SEED)
    assert run.returncode == 1
    assert json.loads(run.stdout)["ok"] is False
    doc = results(run.stdout, "validate")["profiles"]
    assert [d["ok"] for d in doc] == [False, True]
    finding = doc[0]["findings"][0]
    assert set(finding) == {"id", "severity", "message", "file", "line", "column", "key", "fix", "fixable",
                            "fix_safety"}
    assert finding["id"] == "DDT111" and isinstance(finding["line"], int) and finding["file"] == str(path)
    line_text = path.read_text().splitlines()[finding["line"] - 1]
    assert finding["column"] == len(line_text) - len(line_text.lstrip()) + 1  # where the key starts
    assert finding["fixable"] is True and finding["fix_safety"] == "unsafe"  # the memory ratio is a guess
    assert doc[0]["ignored"] == [] and doc[1]["ignored"] == []


def test_fix_applies_and_keeps_comments(tmp_path):
    path = seed_without_mamba(tmp_path)
    before = path.read_text()
    run = ddtctl("validate", "--fix", "--unsafe-fixes", path)  # DDT111's ratio is an unsafe fix
    assert run.returncode == 0, run.stdout + run.stderr
    after = path.read_text()
    assert "mamba-radix-cache-strategy: extra_buffer" in after and "mamba-full-memory-ratio: 0.5" in after
    for line in before.splitlines():
        assert line in after  # every original line, comments included, is still there
    assert ddtctl("validate", path).returncode == 0


def test_fix_rewrites_a_wrong_value_in_place(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nmodel: {path: /m}\nserver:\n  grammar-backend: xgramar   # typo\n  tp-size: 1\n")
    assert ddtctl("validate", "--fix", path).returncode == 0
    assert "  grammar-backend: xgrammar  # typo\n" in path.read_text()


def test_argv_mode():
    ok = ddtctl("validate", "--argv", "--", "--model-path", "/m", "--tp-size", "2")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = ddtctl("validate", "--argv", "--gpu", "H200", "--", "--model-path", "/m", "--tp-sise", "2")
    assert bad.returncode == 1 and "did you mean tp-size" in bad.stdout


@pytest.mark.parametrize("content, message", [
    (b"name: [unclosed\n", "invalid YAML"),
    (b"name: a\nmodel: {path: /m}\ndescription: caf\xe9\n", "not UTF-8"),
    (b"a: &a [1]\nb: *a\n", "anchors/aliases"),
    (b"name: a\nmodel: {path: /m}\nname: b\n", "duplicate key"),
])
def test_bad_files_are_one_line_exit_2_no_traceback(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    run = ddtctl("validate", path)
    assert run.returncode == 2
    assert message in run.stdout and "Traceback" not in run.stdout + run.stderr


def test_usage_errors_exit_2(tmp_path):
    missing = ddtctl("validate", tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = ddtctl("validate", tmp_path / "empty")
    assert empty.returncode == 2 and "holds no profiles" in empty.stderr
    assert ddtctl("validate").returncode == 2
    assert ddtctl("explain", "DDT999").returncode == 2


def test_wrong_types_are_findings_with_lines(tmp_path):
    path = tmp_path / "types.yaml"
    path.write_text("name: t\nmodel: {path: /m}\nserver:\n  tp-size: eight\n  disable-overlap-schedule: 1\n")
    run = ddtctl("validate", "--format", "json", path)
    assert run.returncode == 1
    findings = results(run.stdout, "validate")["profiles"][0]["findings"]
    assert {(f["id"], f["line"], f["column"]) for f in findings} == {("DDT002", 4, 3), ("DDT002", 5, 3)}


def test_debug_shows_traceback(tmp_path):
    run = ddtctl("--debug", "validate", tmp_path / "nope.yaml")
    assert run.returncode != 0 and "Traceback" in run.stderr


def test_rules_and_explain():
    rules = ddtctl("rules", "--format", "json")
    ids = [r["id"] for r in results(rules.stdout, "rules")["rules"]]
    assert "DDT111" in ids and ids == sorted(ids)
    explain = ddtctl("explain", "ddt112")
    assert explain.returncode == 0 and "shadow-linear" in explain.stdout and "root-to-node path" in explain.stdout
    assert "default on hybrid targets" in explain.stdout and "allow-hybrid-unsafe" in explain.stdout
    scratch = ddtctl("explain", "DDT114")
    assert scratch.returncode == 0 and "146.8 MiB per verify token per request" in " ".join(scratch.stdout.split())
    assert "enforced by SGLang 0.5.23 at launch: no" in scratch.stdout


def test_schema_types_server_flags(tmp_path):
    out = tmp_path / "schema.json"
    assert ddtctl("schema", "--out", out).returncode == 0
    schema = json.loads(out.read_text())
    server = schema["properties"]["server"]["properties"]
    assert server["tp-size"]["type"] == "integer"
    assert "extra_buffer" in json.dumps(server["mamba-radix-cache-strategy"])
    assert "speculative-ddtree-budget" in server


def test_shipped_schema_file_is_current():
    shipped = REPO / "ddtctl" / "schema" / "profile.schema.json"
    run = ddtctl("schema")
    assert json.loads(run.stdout) == json.loads(shipped.read_text()), "run `ddtctl schema -o ddtctl/schema/profile.schema.json`"
