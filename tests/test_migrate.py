"""`ddtctl migrate`: renamed flags renamed in place (comments and layout kept), removed ones reported."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from json_envelope import results

from ddtctl.errors import UsageError
from ddtctl.migrate import migrate_profile, migrate_text

REPO = Path(__file__).resolve().parents[1]
OLD_PROFILE = REPO / "tests" / "data" / "migrate" / "qwen3next-0.5.12.yaml"


def ddtctl(*args):
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def test_migrates_the_0_5_12_profile_keeping_everything_else():
    text = OLD_PROFILE.read_text()
    r = migrate_text(text, "old.yaml", "0.5.23")
    assert (r.from_version, r.to_version) == ("0.5.12", "0.5.23")
    assert [(e.line, e.old_key, e.new_key) for e in r.edits] == [
        (11, "mamba-scheduler-strategy", "mamba-radix-cache-strategy"),
        (13, "cuda-graph-max-bs", "cuda-graph-max-bs-decode"),
        (14, "enable-breakable-cuda-graph", "cuda-graph-backend-prefill"),
    ]
    assert "0.5.19 declares --mamba-scheduler-strategy a deprecated alias" in r.edits[0].reason
    assert r.edits[2].new_value == "breakable"  # sglang's own replacement: --cuda-graph-backend-prefill=breakable
    assert [(i.line, i.key) for i in r.removed] == [(15, "enable-nan-detection")]
    assert "delete the line" in r.removed[0].fix
    assert not r.complete

    old, new = text.split("\n"), r.text.split("\n")
    assert len(old) == len(new)
    differing = {i + 1 for i, (a, b) in enumerate(zip(old, new)) if a != b}
    assert differing == {3, 11, 13, 14}  # the sglang: line and the three flags; nothing else moves
    assert new[2] == 'sglang: "0.5.23"   # the release this was tuned on'
    assert new[10] == "  mamba-radix-cache-strategy: extra_buffer   # the primary flag in 0.5.12"
    assert new[12] == "  cuda-graph-max-bs-decode: 64     # renamed to --cuda-graph-max-bs-decode later"
    assert new[13] == "  cuda-graph-backend-prefill: breakable"
    assert "  # hybrid model: keep the extra mamba buffer" in r.text


def test_underscored_and_flow_style_keys():
    text = ('sglang: \'0.5.12\'\nname: x\nmodel: {path: /m}\nserver:\n  mamba_scheduler_strategy: no_buffer  # mine\n'
            '  tp_size: 2\n')
    r = migrate_text(text, "u.yaml", "0.5.23")
    assert "  mamba_radix_cache_strategy: no_buffer  # mine" in r.text.splitlines()
    assert "sglang: '0.5.23'" in r.text.splitlines()  # quote style kept

    flow = 'sglang: "0.5.12"\nname: x\nmodel: {path: /m}\nserver: {tp-size: 2, mamba-scheduler-strategy: auto}\n'
    r = migrate_text(flow, "f.yaml", "0.5.23")
    assert "server: {tp-size: 2, mamba-radix-cache-strategy: auto}" in r.text
    assert r.complete


def test_deprecated_alias_in_0_5_19_moves_to_the_live_flag():
    text = 'sglang: "0.5.19"\nname: x\nmodel: {path: /m}\nserver:\n  mamba-scheduler-strategy: extra_buffer_lazy\n'
    r = migrate_text(text, "p.yaml", "0.5.23")
    assert [(e.old_key, e.new_key) for e in r.edits] == [("mamba-scheduler-strategy", "mamba-radix-cache-strategy")]
    assert r.complete and not r.warnings


def test_still_accepted_alias_is_moved_even_when_the_release_keeps_it():
    text = 'sglang: "0.5.12"\nname: x\nmodel: {path: /m}\nserver:\n  mamba-scheduler-strategy: auto\n'
    r = migrate_text(text, "p.yaml", "0.5.19")
    assert [(e.new_key, e.reason) for e in r.edits] == [
        ("mamba-radix-cache-strategy",
         "sglang 0.5.19 keeps --mamba-scheduler-strategy only as a deprecated alias of --mamba-radix-cache-strategy")]


def test_conflicting_old_and_new_name_is_left_to_a_person():
    text = ('sglang: "0.5.19"\nname: x\nmodel: {path: /m}\nserver:\n  mamba-scheduler-strategy: auto\n'
            '  mamba-radix-cache-strategy: extra_buffer\n')
    r = migrate_text(text, "c.yaml", "0.5.23")
    assert r.edits == []
    assert "also set" in r.removed[0].message and r.removed[0].line == 5


def test_value_outside_the_new_choices_is_flagged():
    text = 'sglang: "0.5.19"\nname: x\nmodel: {path: /m}\nserver:\n  prefill-cp-mode: in-seq-split\n'
    r = migrate_text(text, "v.yaml", "0.5.23")
    assert [(e.old_key, e.new_key) for e in r.edits] == [("prefill-cp-mode", "cp-strategy")]
    assert "'in-seq-split' is not a choice of --cp-strategy" in r.warnings[0].message
    assert "zigzag" in r.warnings[0].fix
    assert r.warnings[0].blocking and not r.complete  # sglang 0.5.23 would reject the value


def test_downgrade_renames_back_and_flags_values_the_old_release_lacks():
    text = 'sglang: "0.5.23"\nname: x\nmodel: {path: /m}\nserver:\n  mamba-radix-cache-strategy: extra_buffer_lazy\n'
    r = migrate_text(text, "d.yaml", "0.5.12")
    assert [(e.old_key, e.new_key) for e in r.edits] == [("mamba-radix-cache-strategy", "mamba-scheduler-strategy")]
    assert "'extra_buffer_lazy' is not a choice of --mamba-scheduler-strategy in sglang 0.5.12" in r.warnings[0].message
    assert not r.complete


def test_current_profile_has_nothing_to_do():
    r = migrate_profile(REPO / "profiles" / "qwen36-27b-ddtree.yaml", "0.5.23")
    assert not r.changed and r.complete and r.edits == [] and r.removed == []


def test_missing_sglang_release_is_a_usage_error():
    with pytest.raises(UsageError, match="no `sglang:`"):
        migrate_text("name: x\nmodel: {path: /m}\nserver:\n  tp-size: 1\n", "n.yaml", "0.5.23")


def test_migrated_profile_passes_validate_where_retargeting_alone_fails(tmp_path):
    from ddtctl.validate import validate_paths

    retargeted = tmp_path / "retargeted.yaml"
    retargeted.write_text(OLD_PROFILE.read_text().replace('sglang: "0.5.12"', 'sglang: "0.5.23"'))
    before = validate_paths([str(retargeted)])[0]
    assert not before.valid
    assert any("mamba-scheduler-strategy" in f.message for f in before.findings)

    migrated = tmp_path / "migrated.yaml"
    shutil.copy(OLD_PROFILE, migrated)
    migrate_profile(migrated, "0.5.23", write=True)
    migrated.write_text("".join(line for line in migrated.read_text().splitlines(keepends=True)
                                if "enable-nan-detection" not in line))  # the one manual decision
    after = validate_paths([str(migrated)])[0]
    assert after.valid, [f.message for f in after.findings]


def test_cli_preview_write_and_exit_codes(tmp_path):
    path = tmp_path / "old.yaml"
    shutil.copy(OLD_PROFILE, path)
    original = path.read_text()

    run = ddtctl("migrate", path, "--to", "0.5.23")
    assert run.returncode == 1, run.stderr  # enable-nan-detection needs a decision
    assert path.read_text() == original  # preview only
    assert "-  mamba-scheduler-strategy: extra_buffer" in run.stdout
    assert "+  mamba-radix-cache-strategy: extra_buffer" in run.stdout
    assert "not written" in run.stdout

    run = ddtctl("migrate", path, "--to", "0.5.23", "--write")
    assert run.returncode == 1 and "written" in run.stdout
    assert "mamba-radix-cache-strategy: extra_buffer   # the primary flag in 0.5.12" in path.read_text()
    assert not list(tmp_path.glob(".*ddtctl-migrate"))  # no temp file left behind

    path.write_text("".join(ln for ln in path.read_text().splitlines(keepends=True) if "nan-detection" not in ln))
    run = ddtctl("migrate", path, "--to", "0.5.23", "--format", "json")
    assert run.returncode == 0, run.stdout + run.stderr
    doc = results(run.stdout, "migrate")
    assert doc["changed"] is False and doc["complete"] is True


@pytest.mark.parametrize("args, needle", [
    (("--to", "0.9.9"), "no flag catalog for sglang '0.9.9'"),
    (("--to", "0.5.23", "--from", "0.1"), "no flag catalog for sglang '0.1'"),
])
def test_cli_usage_errors(args, needle):
    run = ddtctl("migrate", OLD_PROFILE, *args)
    assert run.returncode == 2
    assert needle in run.stderr and "Traceback" not in run.stderr


def test_cli_missing_file():
    run = ddtctl("migrate", "does-not-exist.yaml")
    assert run.returncode == 2 and "no such file" in run.stderr
