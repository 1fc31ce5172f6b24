"""Issue #14, profile-side defects found with hostile input: one regression test (or a few) per defect, each failing
on the code before its fix. Defects: 2 special files, 3 unsafe in-place writes, 4 `--fix` corrupting profiles,
8 bad numbers accepted, 9 crashes instead of one-line errors, 11 quadratic did-you-mean work.
The overlay, kernel and remote defects have theirs beside their suites (tests/overlay/test_hardening_overlay.py,
tests/kernels/test_kernels_cli.py, tests/remote/test_hardening_remote.py); tests/badinput/ runs the corpus."""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# A profile `validate --fix` repairs (DDT003: a typo'd choice), and one `migrate` rewrites (a 0.5.12 flag renamed).
FIXABLE = "name: p\nmodel: {path: /m}\nserver:\n  grammar-backend: xgramar   # typo\n  tp-size: 1\n"
FIXED_LINE = "  grammar-backend: xgrammar  # typo"
MIGRATABLE = 'name: p\nsglang: "0.5.12"\nmodel: {path: /m}\nserver:\n  cuda-graph-max-bs: 8   # keep me\n'
MIGRATED_LINE = "  cuda-graph-max-bs-decode: 8   # keep me"
# A hybrid DDTREE profile that --fix completes by inserting the two mamba keys (DDT111).
HYBRID = ("name: h\nmodel: {path: /m, architecture: Qwen3_5ForCausalLM}\nhardware: {gpu: H200, count: 8}\n"
          "server:\n  tp-size: 8\n  speculative-algorithm: DDTREE\n  speculative-draft-model-path: /d\n"
          "  speculative-dflash-block-size: 16\n  attention-backend: triton\n")

EDIT = {"fix": (("validate", "--fix"), FIXABLE, FIXED_LINE, ".{}.ddtctl-fix"),
        "migrate": (("migrate", "--to", "0.5.23", "--write"), MIGRATABLE, MIGRATED_LINE, ".{}.ddtctl-migrate")}


def _child_limits(memory: bool, fsize: int | None):
    def apply() -> None:
        os.umask(0o022)
        if memory:  # a read of /dev/zero must die of MemoryError, not take the machine with it
            resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        if fsize is not None:  # writes beyond `fsize` bytes fail with EFBIG (SIGXFSZ ignored)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


def ddtctl(*args, timeout: float = 60, memory_limit: bool = False, fsize: int | None = None, cwd=None):
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, preexec_fn=_child_limits(memory_limit, fsize))


def one_line_error(run, code: int, needle: str) -> None:
    """The run failed with `code` and said so in one line (no traceback, no internal error)."""
    out = run.stdout + run.stderr
    assert run.returncode == code, out
    assert needle in out, out
    assert "Traceback" not in out and "internal error" not in out, out


def edit_cmd(kind: str, path: Path) -> list:
    args, *_ = EDIT[kind]
    return [args[0], *([path] if kind == "migrate" else []), *args[1:], *([path] if kind == "fix" else [])]


# -- 2: special files -------------------------------------------------------------------------------------------------
COMMANDS = {"validate": ("validate",), "fix": ("validate", "--fix"), "migrate": ("migrate", "--to", "0.5.23"),
            "diff-flags": ("diff-flags",)}


def _run_on(kind: str, path: Path, **kw):
    args = COMMANDS[kind]
    extra = [REPO / "profiles" / "qwen3-8b-ddtree.yaml"] if kind == "diff-flags" else []
    if kind == "migrate":
        return ddtctl(args[0], path, *args[1:], **kw)
    return ddtctl(*args, path, *extra, **kw)


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_defect2_a_fifo_is_refused_without_blocking(tmp_path, kind):
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    run = _run_on(kind, fifo, timeout=30)  # before: blocked forever in open()/read() (TimeoutExpired here)
    one_line_error(run, 2, "is a FIFO (named pipe), not a profile file")


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_defect2_dev_zero_is_refused_without_reading_it(tmp_path, kind):
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")  # st_size 0 passed the size check, then the read never ended
    run = _run_on(kind, link, timeout=60, memory_limit=True)
    one_line_error(run, 2, "is a character device, not a profile file")


# -- 3: unsafe in-place writes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(EDIT))
def test_defect3_a_planted_temp_symlink_is_not_followed(tmp_path, kind):
    _, text, line, planted = EDIT[kind]
    path = tmp_path / "v.yaml"
    path.write_text(text)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / planted.format(path.name)).symlink_to(victim)  # the old fixed temp name, pre-planted
    run = ddtctl(*edit_cmd(kind, path))
    assert run.returncode in (0, 1), run.stdout + run.stderr
    assert victim.read_text() == "precious\n"
    assert line in path.read_text().splitlines()


@pytest.mark.parametrize("kind", sorted(EDIT))
def test_defect3_the_file_mode_is_kept(tmp_path, kind):
    _, text, line, _ = EDIT[kind]
    path = tmp_path / "v.yaml"
    path.write_text(text)
    path.chmod(0o600)
    run = ddtctl(*edit_cmd(kind, path))
    assert run.returncode in (0, 1), run.stdout + run.stderr
    assert line in path.read_text().splitlines()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # before: widened to 0644 (a new file under umask 022)


@pytest.mark.parametrize("kind", sorted(EDIT))
def test_defect3_a_read_only_file_is_not_rewritten(tmp_path, kind):
    _, text, _, _ = EDIT[kind]
    path = tmp_path / "v.yaml"
    path.write_text(text)
    path.chmod(0o444)
    run = ddtctl(*edit_cmd(kind, path))
    one_line_error(run, 2, "read-only")
    assert path.read_text() == text and stat.S_IMODE(path.stat().st_mode) == 0o444


@pytest.mark.parametrize("kind", sorted(EDIT))
def test_defect3_a_symlinked_profile_stays_a_symlink(tmp_path, kind):
    _, text, line, _ = EDIT[kind]
    real = tmp_path / "store" / "real.yaml"
    real.parent.mkdir()
    real.write_text(text)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    run = ddtctl(*edit_cmd(kind, link))
    assert run.returncode in (0, 1), run.stdout + run.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert line in real.read_text().splitlines()


@pytest.mark.parametrize("kind", sorted(EDIT))
def test_defect3_crlf_line_endings_are_kept(tmp_path, kind):
    _, text, line, _ = EDIT[kind]
    path = tmp_path / "v.yaml"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    run = ddtctl(*edit_cmd(kind, path))
    assert run.returncode in (0, 1), run.stdout + run.stderr
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") == text.count("\n")
    assert line in data.decode().split("\r\n")


def test_defect3_an_edit_saved_during_fix_is_not_lost(tmp_path, monkeypatch):
    from ddtctl import fix as fix_mod
    from ddtctl.cli.validate_report import _apply_fixes
    from ddtctl.validate import validate_paths

    path = tmp_path / "v.yaml"
    path.write_text(FIXABLE)
    saved = FIXABLE.replace("tp-size: 1", "tp-size: 1\n  port: 31000   # saved by the user meanwhile")
    real = fix_mod.apply_fixes

    def editor_saves_meanwhile(*a, **kw):
        path.write_text(saved)
        return real(*a, **kw)

    monkeypatch.setattr(fix_mod, "apply_fixes", editor_saves_meanwhile)
    results = _apply_fixes(validate_paths([str(path)]), None)
    assert path.read_text() == saved  # the user's save survives; --fix wrote nothing
    assert results[0].error and "changed since it was read" in results[0].error


def test_defect3_an_edit_saved_during_migrate_is_not_lost(tmp_path, monkeypatch):
    from ddtctl import migrate as migrate_mod
    from ddtctl.errors import UsageError

    path = tmp_path / "v.yaml"
    path.write_text(MIGRATABLE)
    saved = MIGRATABLE + "  port: 31000   # saved by the user meanwhile\n"
    real = migrate_mod.migrate_text

    def editor_saves_meanwhile(*a, **kw):
        result = real(*a, **kw)
        path.write_text(saved)
        return result

    monkeypatch.setattr(migrate_mod, "migrate_text", editor_saves_meanwhile)
    with pytest.raises(UsageError, match="changed since it was read"):
        migrate_mod.migrate_profile(path, "0.5.23", write=True)
    assert path.read_text() == saved


# -- 4: --fix corrupting profiles -------------------------------------------------------------------------------------
def test_defect4_fix_edits_a_flow_style_server_mapping_in_place(tmp_path):
    path = tmp_path / "flow.yaml"
    text = "name: p\nmodel: {path: /m}\nserver: {grammar-backend: xgramar, tp-size: 1}   # flow\n"
    path.write_text(text)
    run = ddtctl("validate", "--fix", path)
    assert run.returncode == 0, run.stdout + run.stderr
    # before the line editor: a second `server:` block was appended (a duplicate key); then: refused; now the
    # round-trip editor edits the flow mapping where it is
    # (ruamel keeps the comment's column, so the longer value takes a space of the gap)
    assert path.read_text() == "name: p\nmodel: {path: /m}\nserver: {grammar-backend: xgrammar, tp-size: 1}  # flow\n"


def test_defect4_fix_inserts_after_a_block_list_not_inside_it(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text(HYBRID + "  cuda-graph-bs-decode:\n  - 1\n  - 2\n")
    run = ddtctl("validate", "--fix", "--unsafe-fixes", path)  # DDT111's ratio is an unsafe fix
    assert run.returncode == 0, run.stdout + run.stderr
    server = yaml.safe_load(path.read_text())["server"]
    assert server["cuda-graph-bs-decode"] == [1, 2]  # before: the keys landed between the key and its items
    assert server["mamba-radix-cache-strategy"] == "extra_buffer" and server["mamba-full-memory-ratio"] == 0.5


def test_defect4_every_edit_is_checked_before_it_is_written(tmp_path):
    from ddtctl.fix import apply_fixes, verify
    from ddtctl.profile import parse_profile_text
    from ddtctl.rules.engine import Finding

    text = "name: p\nmodel: {path: /m}\nserver:\n  cuda-graph-bs-decode: [1,\n    2]\n  tp-size: 1\n"
    doc = parse_profile_text(text, "p.yaml")
    finding = Finding(rule="DDT999", severity="error", message="m", edits={"cuda-graph-bs-decode": 8})
    fixed = apply_fixes(text, [finding], doc.lines)
    # a value spanning lines in flow style: whatever the line edit makes of it must be caught before writing
    assert fixed.refused or verify(doc.data, fixed.text, fixed.edits, "p.yaml") is None
    if not fixed.refused:
        assert parse_profile_text(fixed.text, "p.yaml").data["server"] == {"cuda-graph-bs-decode": 8, "tp-size": 1}


# -- 8: bad numbers ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key, value", [
    ("mem-fraction-static", ".nan"), ("mem-fraction-static", ".inf"), ("mem-fraction-static", "1e999"),
    ("mem-fraction-static", "-.inf"), ("speculative-accept-threshold-single", ".nan"),
    ("speculative-accept-threshold-acc", ".nan"), ("port", "-1"), ("port", "70000"),
    ("mem-fraction-static", "1.5"), ("bucket-time-to-first-token", "[0.1, .nan]"),
])
def test_defect8_numbers_outside_a_flags_domain_are_errors(tmp_path, key, value):
    """Non-finite numbers, and ranges SGLang's start-up fails on (a port its socket refuses, a memory fraction
    above 1): errors."""
    from ddtctl.validate import validate_path

    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nmodel: {{path: /m}}\nserver:\n  {key}: {value}\n")
    r = validate_path(path)
    assert r.error is None and not r.valid
    assert [f.rule for f in r.errors] == ["DDT002"] and f"--{key}" in r.errors[0].message


@pytest.mark.parametrize("key, value", [("tp-size", "-8"), ("nccl-port", "0"), ("stream-interval", "0")])
def test_defect8_ranges_sglang_does_not_enforce_are_warnings(tmp_path, key, value):
    """Issue #32 item 1: SGLang 0.5.23 launches these (its resolver accepts them, no start-up failure is on
    record), so they are reported as DDT013 warnings and never block."""
    from ddtctl.validate import validate_path

    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nmodel: {{path: /m}}\nserver:\n  {key}: {value}\n")
    r = validate_path(path)
    assert r.error is None and r.valid
    found = [(f.rule, f.severity) for f in r.findings]
    assert found == [("DDT013", "warning")] and f"--{key}" in r.findings[0].message


@pytest.mark.parametrize("argv", [["--mem-fraction-static", "nan"], ["--port", "-1"], ["--port", "65536"],
                                  ["--speculative-accept-threshold-single", "NaN"], ["--watchdog-timeout", "inf"]])
def test_defect8_raw_argv_numbers_are_checked_too(argv):
    from ddtctl.validate import validate_argv

    r = validate_argv(["--model-path", "/m", *argv])
    assert not r.valid and [f.rule for f in r.errors] == ["DDT002"]


def test_defect8_valid_numbers_still_pass():
    from ddtctl.validate import validate_argv

    r = validate_argv(["--model-path", "/m", "--mem-fraction-static", "0.85", "--port", "30000", "--tp-size", "2",
                       "--chunked-prefill-size", "-1", "--speculative-accept-threshold-single", "1.0"])
    assert r.valid, [f.message for f in r.errors]


# -- 9: crashes instead of one-line errors -----------------------------------------------------------------------------
def _deep(n: int) -> str:
    return "name: t\nmodel: {path: /m}\nserver:\n  cuda-graph-bs-decode: " + "[" * n + "]" * n + "\n"


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_defect9_deep_nesting_is_a_one_line_error(tmp_path, kind):
    path = tmp_path / "deep.yaml"
    path.write_text(_deep(900))  # libyaml allows 1000 levels; our recursion did not
    one_line_error(_run_on(kind, path), 2, "nested more than 32 levels deep")


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_defect9_a_5000_digit_integer_is_a_one_line_error(tmp_path, kind):
    path = tmp_path / "big.yaml"
    path.write_text("name: t\nmodel: {path: /m}\nserver:\n  tp-size: " + "9" * 5000 + "\n")
    one_line_error(_run_on(kind, path), 2, "integer with 5000 digits is out of range")


def test_defect9_nul_in_the_sglang_release_is_a_one_line_error(tmp_path):
    path = tmp_path / "nul.yaml"
    path.write_text('name: t\nsglang: "0.5.\\0"\nmodel: {path: /m}\n')
    one_line_error(ddtctl("migrate", path, "--to", "0.5.23"), 2, "no flag catalog for sglang")


def test_defect9_schema_into_a_missing_directory_is_a_one_line_error(tmp_path):
    one_line_error(ddtctl("schema", "-o", tmp_path / "missing" / "schema.json"), 2, "no such directory")
    one_line_error(ddtctl("schema", "-o", tmp_path), 2, "is a directory")


@pytest.mark.parametrize("kind", sorted(EDIT))
def test_defect9_a_write_failure_is_a_one_line_error(tmp_path, kind):
    _, text, _, _ = EDIT[kind]
    path = tmp_path / "v.yaml"
    path.write_text(text)
    run = ddtctl(*edit_cmd(kind, path), fsize=16)  # every write past 16 bytes fails with EFBIG
    one_line_error(run, 2, "cannot write: File too large")
    assert path.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["v.yaml"]  # no temporary left behind


# -- 11: did-you-mean work is bounded ---------------------------------------------------------------------------------
def test_defect11_suggestions_are_capped_per_profile(tmp_path, monkeypatch):
    from ddtctl.migrate import migrate_profile
    from ddtctl.schema.catalog import Catalog
    from ddtctl.validate import validate_path

    calls = []
    real = Catalog.suggest
    monkeypatch.setattr(Catalog, "suggest", lambda self, key, n=3: calls.append(key) or real(self, key, n))
    path = tmp_path / "many.yaml"
    path.write_text('name: t\nsglang: "0.5.19"\nmodel: {path: /m}\nserver:\n'
                    + "".join(f"  unknown-flag-{i}: {i}\n" for i in range(2000)))
    r = validate_path(path)
    assert len(r.errors) == 2000 and len(calls) <= 50  # before: one difflib search (two passes) per key
    calls.clear()
    migrate_profile(path, "0.5.23")
    assert len(calls) <= 50


def test_defect11_a_1mb_profile_of_unknown_keys_reports_every_key(tmp_path):
    """Every one of ~29k unknown keys is reported, with its own line. How long it takes is bench/validate_speed.py's
    `1 MB unknown keys` row (tests assert no wall-clock times). The did-you-mean count above and the key-column
    scan count below hold the work per key bounded."""
    from hostile_profiles import unknown_keys_profile

    path = tmp_path / "huge.yaml"
    i = unknown_keys_profile(path)
    run = ddtctl("validate", "--format", "json", path, timeout=300)
    assert run.returncode == 1 and run.stdout.count('"DDT001"') == i
    import json

    findings = json.loads(run.stdout)["results"]["profiles"][0]["findings"]
    assert [f["line"] for f in findings] == list(range(4, 4 + i)) and {f["column"] for f in findings} == {3}


def test_defect11_records_index_the_key_columns_once_per_profile(tmp_path, monkeypatch):
    """Each finding's column came from a scan of every key of the profile: 29k findings x 29k keys took 28 s."""
    import ddtctl.validate as validate  # the module that indexes them (it imports line_first_columns by name)
    from ddtctl.validate import validate_path

    path = tmp_path / "many.yaml"
    path.write_text("name: t\nmodel: {path: /m}\nserver:\n" + "".join(f"  unknown-{i}: {i}\n" for i in range(300)))
    result = validate_path(path)
    scans: list[int] = []
    real = validate.line_first_columns
    monkeypatch.setattr(validate, "line_first_columns", lambda cols: scans.append(len(cols)) or real(cols))
    records = result.as_json()["findings"]
    assert len(records) == 300 and len(scans) == 1
    assert [r["column"] for r in records] == [3] * 300


# -- beyond the 15: control characters from the input reached the terminal raw (found by the bad-input corpus) ---------
def test_control_characters_from_the_input_are_escaped_in_the_output(tmp_path):
    path = tmp_path / "cc.yaml"
    path.write_text('name: t\nsglang: "0.5.23"\nmodel: {path: /m}\nserver:\n  "tp-size\\nport": 1\n'
                    '  "\\x1b[2J\\x1b[31mred": 2\n')
    run = ddtctl("validate", path)
    assert run.returncode == 1 and "\x1b" not in run.stdout  # before: ESC[2J cleared the user's screen
    assert "--\\x1b[2j\\x1b[31mred" in run.stdout and "--tp-size\\nport" in run.stdout
    assert all(line.startswith(("\u2717", "  ")) for line in run.stdout.splitlines())  # no line broken by the key
    run = ddtctl("diff-flags", path, REPO / "profiles" / "qwen3-8b-ddtree.yaml")
    one_line_error(run, 2, "server.tp-size\\nport: unknown SGLang 0.5.23 flag")
    assert run.stderr.count("\n") == 1 and "\x1b" not in run.stderr
