"""`--format json`: one versioned envelope from every command, errors inside it; `--format github`.

Real processes through the real entry point. The commands that need a host (deploy, status HOST, releases,
facts, tune) run with --format json against a real sshd in tests/remote/; dry-run against SGLang in
tests/test_dryrun.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from json_envelope import check_envelope, envelope, error, results

from ddtctl.cli.completion import load_tree
from ddtctl.dryrun import DryRunResult
from ddtctl.errors import ExitCode
from ddtctl.report import (COMMAND_GROUPS, ENVELOPE_VERSION, FINDING_KEYS, FindingRecord, github_annotation,
                           json_command)

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
SEED = PROFILES / "qwen36-27b-ddtree.yaml"
OLD = REPO / "tests" / "data" / "migrate" / "qwen3next-0.5.12.yaml"

# A safe fix (DDT914: flex_attention cannot do speculative decoding -> triton); an error without one (DDT201).
FLEX = ("name: f\nmodel: {path: /m, architecture: Qwen3ForCausalLM}\nhardware: {gpu: H200, count: 1}\n"
        "server:\n  attention-backend: flex_attention   # keep me\n  speculative-algorithm: EAGLE\n"
        "  speculative-draft-model-path: /d\n  speculative-num-steps: 3\n  speculative-eagle-topk: 1\n"
        "  speculative-num-draft-tokens: 4\n")
NO_DRAFT = ("name: n\nmodel: {path: /m, architecture: Qwen3ForCausalLM}\nhardware: {gpu: H200, count: 1}\n"
            "server:\n    speculative-algorithm: DFLASH\n")


def ddtctl(*args, env: dict | None = None, fast: bool = True) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, NO_COLOR="1", **(env or {}))
    if not fast:
        full_env["DDTCTL_NO_FASTPATH"] = "1"
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          env=full_env, timeout=120, cwd=REPO)


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  gpu1: {address: 10.1.2.3, user: ubuntu, port: 2222}\n")
    return path


def _cases(tmp_path: Path) -> dict[str, list]:
    """Command line (after `ddtctl`, before `--format json`) of each command that runs here without a host."""
    logits = tmp_path / "draft.npy"
    np.save(logits, np.random.default_rng(0).standard_normal((3, 20)).astype(np.float32))
    old = tmp_path / "old.yaml"
    old.write_text(OLD.read_text())
    return {
        "validate": ["validate", PROFILES],
        "validate --argv": ["validate", "--argv", "--", "--model-path", "/m", "--tp-size", "2"],
        "rules": ["rules"],
        "explain": ["explain", "DDT111"],
        "diff-flags": ["diff-flags", "--from", "0.5.12", "--to", "0.5.23"],
        "diff-flags profiles": ["diff-flags", PROFILES / "qwen36-27b-dflash.yaml", SEED],
        "migrate": ["migrate", old, "--to", "0.5.23"],
        "render": ["render", SEED],
        "env show": ["env", "show", "--sglang", "0.5.19"],  # not built here: exit 2, ok false, results kept
        "kernels tree": ["kernels", "tree", "--logits", logits, "--budget", 4],
        "overlay manifest": ["overlay", "manifest"],
        "overlay status": ["overlay", "status", "--sglang-root", tmp_path],  # no sglang/ there: an error
        "status": ["status", "-i", inventory(tmp_path)],  # the inventory's hosts, no connection
    }


CASES = ["validate", "validate --argv", "rules", "explain", "diff-flags", "diff-flags profiles", "migrate",
         "render", "env show", "kernels tree", "overlay manifest", "overlay status", "status"]


@pytest.mark.parametrize("case", CASES)
def test_every_command_prints_one_envelope(tmp_path, case):
    args = [str(a) for a in _cases(tmp_path)[case]]
    split = args.index("--") if "--" in args else len(args)
    run = ddtctl(*args[:split], "--format", "json", *args[split:],
                 env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    doc = json.loads(run.stdout)  # exactly one JSON document: nothing else on stdout
    check_envelope(doc)
    assert doc["version"] == ENVELOPE_VERSION and doc["command"] == case.removesuffix(" --argv").removesuffix(
        " profiles")
    assert doc["ok"] is (run.returncode == 0), (run.returncode, doc)
    if doc["error"] is not None:
        assert doc["error"]["exit_code"] == run.returncode and run.stderr == ""
    if case == "migrate":  # flags the target lacks, and the migrated ones to look at: findings too
        issues = doc["results"]["removed"] + doc["results"]["warnings"]
        assert issues and all(set(i) == set(FINDING_KEYS) | {"blocking"} for i in issues), issues


def test_every_command_with_a_format_option_is_covered():
    """A new command with --format gets a case here, in tests/remote/ or in its own test file (below)."""
    covered_elsewhere = {"dry-run", "deploy", "facts", "doctor", "releases", "stop", "rollback", "tune",
                         "kernels selftest", "overlay build", "overlay verify", "overlay install",
                         "overlay uninstall", "overlay import"}

    def walk(node: dict, path: list[str]):
        if any("--format" in names for names, *_ in node["options"]):
            yield " ".join(path)
        for name, sub in node["commands"].items():
            yield from walk(sub, path + [name])

    with_format = set(walk(load_tree(), []))
    here = {c.removesuffix(" --argv").removesuffix(" profiles") for c in CASES}
    assert with_format == here | covered_elsewhere
    groups = {name for name, sub in load_tree()["commands"].items() if sub["commands"]}
    assert groups == set(COMMAND_GROUPS)  # json_command names their commands "group command"


# -- errors inside the envelope -------------------------------------------------------------------------
@pytest.mark.parametrize("fast", [True, False])
def test_an_unreadable_profile_is_an_error_in_the_envelope(tmp_path, fast):
    run = ddtctl("validate", "--format", "json", tmp_path / "missing.yaml", fast=fast)
    err = error(run.stdout, "validate", ExitCode.USAGE)
    assert run.returncode == ExitCode.USAGE and run.stderr == ""
    assert err == {"message": "no such file", "where": str(tmp_path / "missing.yaml"), "fix": None,
                   "exit_code": ExitCode.USAGE}


def test_a_profile_that_cannot_be_parsed_is_an_error_of_its_entry(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    run = ddtctl("validate", "--format", "json", bad, SEED)
    assert run.returncode == ExitCode.USAGE
    first, second = results(run.stdout, "validate")["profiles"]
    assert first["ok"] is False and first["error"]["message"].startswith("invalid YAML")
    assert first["error"]["where"].startswith(f"{bad}:") and first["error"]["exit_code"] == ExitCode.USAGE
    assert second["ok"] is True and second["error"] is None


@pytest.mark.parametrize("args, command, code, needle, fix", [
    (["explain", "DDT999"], "explain", ExitCode.USAGE, "unknown rule 'DDT999'", "did you mean"),
    (["render"], "render", ExitCode.USAGE, "Missing argument", "ddtctl render --help"),  # click's own error
    (["validate", "--bogus", "x"], "validate", ExitCode.USAGE, "No such option: --bogus",
     "ddtctl validate --help"),
    (["validate", "--diff", SEED], "validate", ExitCode.USAGE, "--diff needs --fix",
     "ddtctl validate --fix --diff"),
    (["overlay", "verify", "--payload", "/nonexistent"], "overlay verify", ExitCode.OVERLAY,
     "no manifest.json in /nonexistent", "ddtctl overlay import"),
])
def test_errors_are_in_the_envelope_with_their_exit_code(args, command, code, needle, fix):
    run = ddtctl(*args, "--format", "json")
    err = error(run.stdout, command, code)
    assert run.returncode == code and run.stderr == ""
    assert needle in err["message"] and fix in err["fix"]
    text = ddtctl(*args)  # text output: the same error, one line on stderr
    assert text.returncode == code and text.stdout == "" and needle in text.stderr


def test_an_unknown_host_is_in_the_envelope(tmp_path):
    run = ddtctl("deploy", "nohost", "-i", inventory(tmp_path), "--profile", SEED, "--format", "json")
    err = error(run.stdout, "deploy", run.returncode)
    assert run.returncode == ExitCode.USAGE and "nohost" in err["message"] and run.stderr == ""


def test_fix_reports_what_it_fixed_in_the_envelope_not_on_stderr(tmp_path):
    path = tmp_path / "flex.yaml"
    path.write_text(FLEX)
    run = ddtctl("validate", "--fix", "--format", "json", path)
    assert run.returncode == ExitCode.OK and run.stderr == ""  # text mode prints "fixed DDT914" there
    (entry,) = results(run.stdout, "validate")["profiles"]
    assert entry["ok"] and entry["fixed"] == ["DDT914"]
    assert "attention-backend: triton  # keep me" in path.read_text()


def test_findings_carry_line_column_and_fixability(tmp_path):
    path = tmp_path / "nodraft.yaml"
    path.write_text(NO_DRAFT)
    run = ddtctl("validate", "--format", "json", path)
    (entry,) = results(run.stdout, "validate")["profiles"]
    (finding,) = [f for f in entry["findings"] if f["id"] == "DDT201"]
    # the key indented by 4 spaces
    assert (finding["file"], finding["line"], finding["column"]) == (str(path), 5, 5)
    assert finding["fixable"] is False and finding["fix_safety"] is None and finding["severity"] == "error"


# -- --format github ------------------------------------------------------------------------------------
def test_github_annotation_escapes_data_and_properties():
    record = FindingRecord(id="DDT1,2", severity="warning", message="100% sure\r\nsecond line",
                           file="a,b:c.yaml", line=3, column=7, fix="do x: y")
    assert github_annotation(record) == ("::warning file=a%2Cb%3Ac.yaml,line=3,col=7,title=DDT1%2C2::"
                                         "100%25 sure%0D%0Asecond line%0Afix: do x: y")
    bare = FindingRecord(id=None, severity="info", message="m")
    assert github_annotation(bare) == "::notice::m"


@pytest.mark.parametrize("fast", [True, False])
def test_validate_github_one_annotation_per_finding(tmp_path, fast):
    path = tmp_path / "nodraft.yaml"
    path.write_text(NO_DRAFT)
    run = ddtctl("validate", "--format", "github", path, SEED, fast=fast)
    assert run.returncode == ExitCode.INVALID
    lines = run.stdout.splitlines()
    assert any(line.startswith(f"::error file={path},line=5,col=5,title=DDT201::DFLASH speculative decoding")
               and "%0Afix: " in line for line in lines), lines
    seed_warning = next(line for line in lines if str(SEED) in line)  # its model's config.json is not here
    assert seed_warning.startswith(f"::warning file={SEED},title=DDT000::cannot check")
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)


def test_validate_github_annotates_an_unreadable_profile_where_the_yaml_broke(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: n\nserver: [unclosed\n")
    run = ddtctl("validate", "--format", "github", bad)
    assert run.returncode == ExitCode.USAGE and run.stderr == ""
    assert run.stdout.startswith(f"::error file={bad},line=3,col=1::invalid YAML: ")


def test_dry_run_github_annotates_a_rejection_and_the_warnings(capsys):
    from ddtctl.cli.dryrun import _print_annotations

    rejected = DryRunResult("p.yaml", False, {"type": "ValueError", "message": "bad, really", "hook": "h"},
                            warnings=["[DDT115] attention backend set to fa3"], error_at="sglang/x.py:12")
    _print_annotations([rejected, DryRunResult("argv", True, warnings=["plain"])])
    assert capsys.readouterr().out.splitlines() == [
        "::error file=p.yaml,title=ValueError::rejected by SGLang: bad, really",
        "::warning file=p.yaml,title=DDT115::[DDT115] attention backend set to fa3",
        "::warning::plain",
    ]


# -- which runs are JSON --------------------------------------------------------------------------------
@pytest.mark.parametrize("args, command", [
    (["validate", "--format", "json", "p.yaml"], "validate"),
    (["validate", "--format=json"], "validate"),
    (["--debug", "overlay", "build", "--format", "json"], "overlay build"),
    (["env", "show", "--format", "json"], "env show"),
    (["dry-run", "p.yaml", "--format", "json", "--gpu", "H200"], "dry-run"),
    (["validate", "--format", "text"], None),
    (["validate", "--format", "github"], None),
    (["validate", "--argv", "--", "--format", "json"], None),  # after `--`: SGLang's arguments
])
def test_json_command_reads_the_command_line(args, command):
    assert json_command(args) == command


def test_the_envelope_is_documented_in_the_readme():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## JSON output", 1)[1].split("\n## ", 1)[0]
    example = json.loads(section.split("```json", 1)[1].split("```", 1)[0])
    check_envelope(example)
    assert envelope(json.dumps(example), example["command"]) == example


def test_github_whole_command_errors_are_annotations_too(tmp_path):
    """--format github: an error that stops the command (not a finding) is a workflow command on stdout, with the
    same exit code and the one-line error on stderr; it names the file when the error is about one."""
    missing = tmp_path / "missing.yaml"
    run = ddtctl("dry-run", str(missing), "--format", "github", fast=False)
    assert run.returncode == ExitCode.USAGE
    assert run.stdout.splitlines() == [f"::error file={missing},title=ddtctl dry-run::no such file"]
    assert run.stderr.strip() == f"ddtctl: error: {missing}: no such file"
    plain = ddtctl("dry-run", str(missing), fast=False)
    assert plain.stdout == "" and plain.returncode == ExitCode.USAGE  # text mode: stderr only


def test_github_error_names_a_non_file_place_in_the_message():
    from ddtctl.report import ErrorInfo, github_error

    err = ErrorInfo("not in known_hosts", 6, where="h200", fix="ssh-keyscan h200 >> ~/.ssh/known_hosts")
    assert github_error("deploy", err) == ("::error title=ddtctl deploy::h200: not in known_hosts%0Afix: "
                                           "ssh-keyscan h200 >> ~/.ssh/known_hosts")


def test_each_key_of_a_one_line_flow_map_gets_its_own_column():
    """A finding about the second key of `server: {port: 30000, tp-size: 2}` points at that key, not at the line's
    first key; a finding about a key that is absent keeps the line's first key's column."""
    from ddtctl.profile import parse_profile_text
    from ddtctl.report import finding_record
    from ddtctl.rules.engine import Finding

    doc = parse_profile_text("name: n\nserver: {port: 30000, tp-size: 2}\n", "p.yaml")
    text = "name: n\nserver: {port: 30000, tp-size: 2}\n"
    about_tp = Finding(rule="DDT999", severity="error", message="m", line=2, key="tp-size")
    about_absent = Finding(rule="DDT998", severity="error", message="m", line=2, key="dp-size")
    rec = finding_record(about_tp, file="p.yaml", key_columns=doc.key_columns)
    assert rec.column == text.splitlines()[1].index("tp-size") + 1
    absent = finding_record(about_absent, file="p.yaml", key_columns=doc.key_columns)
    assert absent.column == 1  # `server` starts the line
    elsewhere = Finding(rule="DDT997", severity="error", message="m", line=1, key="tp-size")  # not on its line
    assert finding_record(elsewhere, file="p.yaml", key_columns=doc.key_columns).column == 1
