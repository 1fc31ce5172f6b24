"""`validate --fix --diff`, safe vs unsafe fixes (`--unsafe-fixes`) and suppression (`--ignore`, profile `ignore:`).

Run in-process through the CLI entry point (the start-up fast path, as pre-commit runs it); the typer path and real
processes are covered by tests/cli/test_validate_fix_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from json_envelope import results

from ddtctl.cli import main
from ddtctl.fix import SAFE, UNSAFE, edit_safety

# A hybrid DDTREE launch: DDT111 wants mamba-full-memory-ratio (a number ddtctl guesses: an unsafe fix) and the
# extra_buffer strategy; the strategy is given with a typo, which DDT003 corrects to the one choice it must be (safe).
HYBRID = ("name: h\nmodel: {path: /m, architecture: Qwen3_5ForCausalLM}\nhardware: {gpu: H200, count: 8}\n"
          "server:\n  tp-size: 8\n  speculative-algorithm: DDTREE\n  speculative-draft-model-path: /d\n"
          "  speculative-dflash-block-size: 16\n  attention-backend: triton\n"
          "  mamba-radix-cache-strategy: extra_bufer   # typo\n")
# flex_attention cannot run speculative decoding: DDT914's fix sets the switch to triton (safe).
FLEX = ("name: f\nmodel: {path: /m, architecture: Qwen3ForCausalLM}\nhardware: {gpu: H200, count: 1}\n"
        "server:\n  attention-backend: flex_attention   # keep me\n  speculative-algorithm: EAGLE\n"
        "  speculative-draft-model-path: /d\n  speculative-num-steps: 3\n  speculative-eagle-topk: 1\n"
        "  speculative-num-draft-tokens: 4\n")
# tp 16 on an 8-GPU host: DDT601 (an error SGLang 0.5.23 does not check: ddtctl stricter); a speculative flag without
# an algorithm: DDT805 (a warning).
STRICTER = ("name: s\nmodel: {path: /m}\nhardware: {gpu: H200, count: 8}\nserver:\n  tp-size: 16\n"
            "  speculative-num-steps: 3\n")


def cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- safe / unsafe -----------------------------------------------------------------------------------------------------
def test_edit_safety_is_decided_from_the_edit():
    from ddtctl.schema.extensions import extended_catalog

    catalog = extended_catalog("0.5.23")
    assert edit_safety({}, catalog) is None
    assert edit_safety({"mamba-full-memory-ratio": 0.5}, catalog) == UNSAFE  # a guessed number
    assert edit_safety({"tp-size": 4}, catalog) == UNSAFE
    assert edit_safety({"grammar-backend": None}, catalog) == UNSAFE  # drops a flag the user set
    assert edit_safety({"attention-backend": "triton"}, catalog) == SAFE  # a choice
    assert edit_safety({"mamba-radix-cache-strategy": "extra_buffer"}, catalog) == SAFE
    assert edit_safety({"disable-overlap-schedule": True}, catalog) == SAFE  # a switch
    assert edit_safety({"speculative-draft-model-path": "/d"}, catalog) == UNSAFE  # free-form string
    assert edit_safety({"mamba-radix-cache-strategy": "extra_buffer", "mamba-full-memory-ratio": 0.5},
                       catalog) == UNSAFE  # one unsafe edit makes the fix unsafe
    assert edit_safety({"tp-size": 4}, catalog, unsafe=False) == SAFE  # the rule's own verdict wins
    assert edit_safety({"attention-backend": "triton"}, catalog, unsafe=True) == UNSAFE


def test_hit_unsafe_override_reaches_the_finding():
    from ddtctl.rules.engine import Context, Hit, Rule, run_rules

    ctx = Context(given={"tp_size": 3}, defaults={}, lines={"tp_size": 4}, keys={"tp_size": "tp-size"})
    r = Rule(id="DDT999", title="t", severity="error", reads=("tp_size",),
             check=lambda c: [Hit("m", edits={"tp_size": 2}, unsafe=False)])
    findings, _ = run_rules(ctx, [r])
    assert findings[0].unsafe is False and findings[0].edits == {"tp-size": 2}


def test_fix_applies_only_safe_fixes_by_default(tmp_path, capsys):
    path = write(tmp_path, HYBRID)
    code, out, err = cli(capsys, "validate", "--fix", path)
    assert code == 1, out + err  # DDT111's ratio is left to the user
    text = path.read_text()
    assert "  mamba-radix-cache-strategy: extra_buffer  # typo\n" in text  # DDT003's safe fix applied
    assert "mamba-full-memory-ratio" not in text
    assert "unsafe fixes not applied: DDT111 (add --unsafe-fixes)" in out
    assert "DDT111" in out and "[unsafe fix]" in out


def test_unsafe_fixes_applies_the_rest(tmp_path, capsys):
    path = write(tmp_path, HYBRID)
    code, out, err = cli(capsys, "validate", "--fix", "--unsafe-fixes", path)
    assert code == 0, out + err
    text = path.read_text()
    assert "mamba-radix-cache-strategy: extra_buffer" in text and "mamba-full-memory-ratio: 0.5" in text
    assert "# typo" in text  # comments kept


def test_a_safe_rule_fix_is_applied_by_plain_fix(tmp_path, capsys):
    path = write(tmp_path, FLEX)
    code, out, _ = cli(capsys, "validate", path)
    assert code == 1 and "DDT914" in out and "[fix]" in out and "[unsafe fix]" not in out
    code, out, err = cli(capsys, "validate", "--fix", path)
    assert code == 0, out + err
    assert "  attention-backend: triton  # keep me\n" in path.read_text()


def test_unsafe_fixes_without_fix_is_a_usage_error(tmp_path, capsys):
    path = write(tmp_path, HYBRID)
    code, out, err = cli(capsys, "validate", "--unsafe-fixes", path)
    assert code == 2 and "--unsafe-fixes needs --fix" in err and err.count("\n") == 1
    assert path.read_text() == HYBRID


# -- --diff ------------------------------------------------------------------------------------------------------------
def test_diff_shows_the_edit_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path, HYBRID)
    before = path.read_bytes()
    code, out, err = cli(capsys, "validate", "--fix", "--unsafe-fixes", "--diff", path)
    assert path.read_bytes() == before  # byte-identical
    assert code == 1, out + err  # as ruff's --diff: 1 when there is a diff (the fixed file would be valid)
    rel = str(path).lstrip("/")  # git style: a/tmp/x.yaml, not a//tmp/x.yaml
    assert out.startswith(f"--- a/{rel}\n+++ b/{rel}\n@@ ")
    assert "-  mamba-radix-cache-strategy: extra_bufer   # typo\n" in out
    assert "+  mamba-radix-cache-strategy: extra_buffer  # typo\n" in out
    assert "+  mamba-full-memory-ratio: 0.5\n" in out


def test_diff_exit_code_says_whether_there_is_a_diff(tmp_path, capsys):
    path = write(tmp_path, HYBRID)
    code, out, err = cli(capsys, "validate", "--fix", "--diff", path)
    assert code == 1  # the safe fix is a diff; DDT111 would remain (its fix is unsafe), said on stderr
    assert "+  mamba-radix-cache-strategy: extra_buffer  # typo\n" in out and "mamba-full-memory-ratio" not in out
    assert "DDT111" in err and "--unsafe-fixes" in err
    assert path.read_text() == HYBRID


def test_diff_of_a_valid_profile_is_empty(tmp_path, capsys):
    path = write(tmp_path, FLEX.replace("flex_attention", "triton"))
    code, out, _ = cli(capsys, "validate", "--fix", "--diff", path)
    assert code == 0 and out == ""


def test_diff_in_json(tmp_path, capsys):
    path = write(tmp_path, FLEX)
    code, out, _ = cli(capsys, "validate", "--fix", "--diff", "--format", "json", path)
    doc = results(out, "validate")["profiles"]
    assert code == 1 and doc[0]["ok"] is True  # a diff (exit 1), after which the profile is valid
    assert "+  attention-backend: triton  # keep me\n" in doc[0]["diff"]
    assert path.read_text() == FLEX


def test_diff_without_fix_is_a_usage_error(tmp_path, capsys):
    path = write(tmp_path, HYBRID)
    code, out, err = cli(capsys, "validate", "--diff", path)
    assert code == 2 and out == ""
    assert "--diff needs --fix" in err and err.count("\n") == 1


# -- suppression -------------------------------------------------------------------------------------------------------
def test_ignore_on_the_command_line(tmp_path, capsys):
    path = write(tmp_path, STRICTER)
    code, out, _ = cli(capsys, "validate", path)
    assert code == 1 and "DDT601" in out and "DDT805" in out
    code, out, _ = cli(capsys, "validate", "--ignore", "DDT601", "--ignore=ddt805", path)
    assert code == 0, out  # a ddtctl-stricter error can be ignored
    assert "DDT601" not in out.split("ignored")[0] and "DDT805 " not in out
    assert "2 findings ignored (DDT601, DDT805)" in out
    code, out, _ = cli(capsys, "validate", "--ignore", "DDT601,DDT805", path)
    assert code == 0 and "2 findings ignored" in out


def test_ignore_in_the_profile_with_its_reason(tmp_path, capsys):
    path = write(tmp_path, STRICTER + 'ignore:\n  - {rule: DDT601, reason: "the second node comes with hosts:"}\n'
                 "  - rule: DDT805\n    reason: kept for the next run\n")
    code, out, _ = cli(capsys, "validate", path)
    assert code == 0 and "2 findings ignored" in out
    code, out, _ = cli(capsys, "validate", "--format", "json", path)
    doc = results(out, "validate")["profiles"][0]
    assert doc["ok"] is True and [f["id"] for f in doc["findings"]] == ["DDT000"]
    reasons = {f["id"]: f["reason"] for f in doc["ignored"]}
    assert reasons == {"DDT601": "the second node comes with hosts:", "DDT805": "kept for the next run"}
    ignored = next(f for f in doc["ignored"] if f["id"] == "DDT601")
    assert ignored["severity"] == "error" and ignored["line"] == 5 and "fixable" in ignored


def test_ignore_reason_is_required(tmp_path, capsys):
    path = write(tmp_path, STRICTER + "ignore:\n  - {rule: DDT601}\n")
    code, out, _ = cli(capsys, "validate", path)
    assert code == 1 and "DDT007" in out and "ignore.0.reason: required key is missing" in out
    path = write(tmp_path, STRICTER + 'ignore:\n  - {rule: DDT601, reason: "  "}\n')
    code, out, _ = cli(capsys, "validate", path)
    assert code == 1 and "reason must say why" in out
    path = write(tmp_path, STRICTER + "ignore:\n  - DDT601\n")
    code, out, _ = cli(capsys, "validate", path)
    assert code == 1 and "DDT007" in out and "a bare rule id ('DDT601') is not an ignore entry" in out
    assert "{rule: DDT601, reason:" in out


def test_ignoring_an_error_sglang_rejects_is_refused(tmp_path, capsys):
    path = write(tmp_path, HYBRID)
    code, out, err = cli(capsys, "validate", "--ignore", "DDT111", path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "DDT111 cannot be ignored" in err and "SGLang 0.5.23 rejects" in err
    path = write(tmp_path, HYBRID + "ignore:\n  - {rule: DDT111, reason: I know}\n", "q.yaml")
    code, out, _ = cli(capsys, "validate", path)
    assert code == 1 and "ignore[0].rule: DDT111 cannot be ignored" in out
    assert f"q.yaml:{HYBRID.count(chr(10)) + 2}" in out  # points at the entry's rule line


def test_unknown_rule_ids_are_named(tmp_path, capsys):
    path = write(tmp_path, STRICTER)
    code, out, err = cli(capsys, "validate", "--ignore", "DDT601,DDT999", path)
    assert code == 2 and "unknown rule 'DDT999'" in err
    path = write(tmp_path, STRICTER + "ignore:\n  - {rule: DDT998, reason: typo}\n")
    code, out, _ = cli(capsys, "validate", path)
    assert code == 1 and "unknown rule 'DDT998'" in out


def test_json_has_fixable_and_ignored(tmp_path, capsys):
    hybrid, flex = write(tmp_path, HYBRID, "h.yaml"), write(tmp_path, FLEX, "f.yaml")
    code, out, _ = cli(capsys, "validate", "--format", "json", "--ignore", "DDT000", hybrid, flex)
    doc = {Path(r["source"]).name: r for r in results(out, "validate")["profiles"]}
    assert code == 1
    safety = {f["id"]: (f["fixable"], f["fix_safety"]) for r in doc.values() for f in r["findings"]}
    assert safety == {"DDT003": (True, "safe"), "DDT111": (True, "unsafe"), "DDT914": (True, "safe")}
    assert [f["id"] for f in doc["h.yaml"]["ignored"]] == ["DDT000"]
    assert doc["h.yaml"]["ignored"][0]["reason"] == "--ignore on the command line"
    assert doc["f.yaml"]["ignored"] == []


def test_ignored_findings_are_not_fixed(tmp_path, capsys):
    text = STRICTER.replace("tp-size: 16", "tp-size: 8") + "  grammar-backend: xgramar\n"
    path = write(tmp_path, text)
    code, out, _ = cli(capsys, "validate", "--ignore", "DDT805", "--fix", path)
    assert code == 0, out
    assert "grammar-backend: xgrammar" in path.read_text() and "speculative-num-steps: 3" in path.read_text()
