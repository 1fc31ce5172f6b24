"""`ddtctl diff-flags` on the shipped catalogs, on the real installed SGLang, and on profiles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from json_envelope import results

from ddtctl.diffflags import argv_to_mapping, diff_catalogs, diff_profiles, diff_versions, live_catalog
from ddtctl.errors import EnvironmentMissing, UsageError
from ddtctl.schema.catalog import Catalog, FlagSpec, load_catalog

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "fidelity" / "models"


def ddtctl(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


# -- releases --------------------------------------------------------------------------------------------------------
def test_rename_across_releases_is_declared_by_the_release_in_between():
    diff = diff_versions("0.5.12", "0.5.23")
    assert diff.evidence_versions == ["0.5.19"]
    r = diff.rename_of("mamba-scheduler-strategy")
    assert r is not None and r.new == "mamba-radix-cache-strategy"
    assert r.how == "declared" and not r.still_accepted
    assert any("0.5.19" in e and "deprecated alias" in e for e in r.evidence)
    choices = next(c for c in r.changes if c.field == "choices")
    assert choices.old == ["auto", "no_buffer", "extra_buffer"]
    assert "extra_buffer_lazy" in choices.new
    assert "mamba-radix-cache-strategy" not in diff.added
    assert diff.removed_entry("mamba-scheduler-strategy") is None
    # every rename on this span is one sglang declared itself: no guesses needed
    assert {r.how for r in diff.renamed} == {"declared"}
    assert {("cuda-graph-max-bs", "cuda-graph-max-bs-decode"), ("nsa-decode-backend", "dsa-decode-backend")} <= \
        {(r.old, r.new) for r in diff.renamed}


def test_rename_is_inferred_without_the_release_in_between():
    diff = diff_catalogs(load_catalog("0.5.12"), load_catalog("0.5.23"))
    r = diff.rename_of("mamba-scheduler-strategy")
    assert r is not None and r.new == "mamba-radix-cache-strategy" and r.how == "similar"
    assert r.score >= 0.8
    assert any(e.startswith("help") for e in r.evidence) and any(e.startswith("choices overlap") for e in r.evidence)
    # without 0.5.19's declaration, cuda-graph-max-bs -> cuda-graph-max-bs-decode cannot be proven: it is removed
    assert diff.removed_entry("cuda-graph-max-bs") is not None


def test_deprecated_alias_in_0_5_19_is_a_rename_still_accepted():
    diff = diff_versions("0.5.12", "0.5.19")
    r = diff.rename_of("mamba-scheduler-strategy")
    assert r.new == "mamba-radix-cache-strategy" and r.still_accepted
    assert diff.evidence_versions == []


def test_downgrade_maps_the_new_name_back():
    diff = diff_versions("0.5.23", "0.5.12")
    r = diff.rename_of("mamba-radix-cache-strategy")
    assert r is not None and r.new == "mamba-scheduler-strategy" and r.how == "declared"


def test_removed_changed_and_deprecated_flags():
    diff = diff_versions("0.5.12", "0.5.23")
    nan = diff.removed_entry("enable-nan-detection")
    assert nan is not None and nan.hint is None
    breakable = diff.removed_entry("enable-breakable-cuda-graph")
    assert breakable.hint == "sglang 0.5.19 said: use --cuda-graph-backend-prefill=breakable"
    compiler = diff.removed_entry("piecewise-cuda-graph-compiler")
    assert "which sglang 0.5.23 lacks too" in compiler.hint  # its 0.5.19 replacement is gone as well
    changed = {c.flag: {f.field: (f.old, f.new) for f in c.changes} for c in diff.changed}
    assert changed["mamba-full-memory-ratio"] == {"default": (0.9, None)}
    assert "speculative-algorithm" not in changed  # a free-form string in both releases
    assert "disable-cuda-graph" in {d.flag for d in diff.deprecated}
    assert "attn-dp-size" in diff.added


def test_same_release_is_identical():
    diff = diff_versions("0.5.23", "0.5.23")
    assert diff.identical and diff.counts() == {"added": 0, "removed": 0, "renamed": 0, "deprecated": 0, "changed": 0}


def _spec(name, **kw):
    base = dict(name=name, option_strings=(f"--{name}",), dest=name.replace("-", "_"), action="store", type="str",
                nargs=None, default=None, choices=None, required=False, help="", deprecated=False, alias_of=None)
    base.update(kw)
    return FlagSpec(**base)


def test_unrelated_flags_are_not_paired_as_renames():
    a = Catalog("1.0.0", (_spec("foo-size", type="int", default=4, help="Size of the foo pool in pages."),
                          _spec("keep", help="x")))
    b = Catalog("1.1.0", (_spec("bar-mode", choices=("fast", "slow"), default="fast", help="Scheduling mode of bar."),
                          _spec("keep", help="x")))
    diff = diff_catalogs(a, b)
    assert diff.renamed == []
    assert [r.flag for r in diff.removed] == ["foo-size"] and diff.added == ["bar-mode"]


def test_same_dest_under_a_new_name_is_a_rename():
    a = Catalog("1.0.0", (_spec("max-tokens", type="int", help="a"),))
    b = Catalog("1.1.0", (_spec("token-budget", dest="max_tokens", type="int", help="totally different words"),))
    diff = diff_catalogs(a, b)
    assert [(r.old, r.new, r.how) for r in diff.renamed] == [("max-tokens", "token-budget", "dest")]


def test_argv_mapping_folds_aliases_and_switches():
    cat = load_catalog("0.5.23")
    m = argv_to_mapping(["--model-path", "/m", "--tensor-parallel-size", "8", "--enable-dp-lm-head",
                         "--page-size=16"], cat)
    assert m == {"--model-path": "/m", "--tp-size": "8", "--enable-dp-lm-head": True, "--page-size": "16"}
    optional = next(s for s in cat.flags if s.action == "boolean_optional")  # --x / --no-x
    assert argv_to_mapping([f"--no-{optional.name}"], cat) == {f"--{optional.name}": False}
    assert argv_to_mapping([f"--{optional.name}"], cat) == {f"--{optional.name}": True}
    # argparse's reading: a prefix is its flag, the last occurrence decides, several values stay together
    assert argv_to_mapping(["--tp", "2", "--tp-size", "4", "--json-model-override-args", "{}"], cat) == {
        "--tp-size": "4", "--json-model-override-args": "{}"}
    assert argv_to_mapping(["--lora-paths", "a", "b"], cat) == {"--lora-paths": "a b"}


# -- CLI -------------------------------------------------------------------------------------------------------------
def test_cli_text_groups_the_changes():
    run = ddtctl("diff-flags", "--from", "0.5.12", "--to", "0.5.23")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert out.splitlines()[0].startswith("sglang 0.5.12 -> sglang 0.5.23:")
    for heading in ("Renamed", "Removed", "Newly deprecated", "Changed", "Added"):
        assert f"\n{heading}\n" in out
    assert "--mamba-scheduler-strategy -> --mamba-radix-cache-strategy" in out
    assert out.index("Renamed") < out.index("--mamba-scheduler-strategy ->") < out.index("Removed")


def test_cli_json():
    run = ddtctl("diff-flags", "--from", "0.5.12", "--to", "0.5.23", "--format", "json")
    assert run.returncode == 0, run.stderr
    doc = results(run.stdout, "diff-flags")
    assert doc["from_version"] == "0.5.12" and doc["to_version"] == "0.5.23"
    assert {"old": "mamba-scheduler-strategy", "new": "mamba-radix-cache-strategy"}.items() <= \
        next(r for r in doc["renamed"] if r["old"] == "mamba-scheduler-strategy").items()
    assert doc["counts"]["renamed"] == len(doc["renamed"])


@pytest.mark.parametrize("args, needle", [
    ((), "choose one of"),
    (("--from", "0.5.12", "--installed"), "cannot be combined"),
    (("--from", "0.4.0"), "known: 0.5.12, 0.5.19, 0.5.23"),
    (("--to", "0.5.23"), "--to needs --from"),
    (("profiles/qwen36-27b-ddtree.yaml",), "expected two profiles"),
    (("--from", "0.5.12", "--resolved"), "--resolved compares two profiles"),
    (("nope-a.yaml", "nope-b.yaml"), "no such file"),
    (("--installed", "--python", "/nonexistent/python"), "does not exist"),
])
def test_cli_usage_errors_exit_2_in_one_line(args, needle):
    run = ddtctl("diff-flags", *args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert needle in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


# -- profiles --------------------------------------------------------------------------------------------------------
def _profile(tmp_path, name, gpu="H200", server=None, sglang="0.5.23"):
    lines = [f"name: {name}", f'sglang: "{sglang}"', f"hardware: {{gpu: {gpu}, count: 1}}",
             f"model: {{path: {MODELS / 'qwen3-8b'}}}", "server:"]
    for k, v in (server or {}).items():
        lines.append(f"  {k}: {v}")
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


DFLASH = {"speculative-algorithm": "DFLASH", "speculative-draft-model-path": str(MODELS / "qwen3-8b-dflash-b16")}


def test_profiles_rendered_argv_differences(tmp_path):
    a = _profile(tmp_path, "a", server={**DFLASH, "tensor-parallel-size": 1})
    b = _profile(tmp_path, "b", gpu="B200", server={**DFLASH, "tp-size": 2, "page-size": 16,
                                                     "enable-dp-lm-head": "true"})
    pd = diff_profiles(str(a), str(b))
    assert pd.only_b == {"--page-size": "16", "--enable-dp-lm-head": True}
    assert [(c.key, c.a, c.b) for c in pd.changed] == [("--tp-size", "1", "2")]  # alias spelling folded
    assert [(c.key, c.a, c.b) for c in pd.context] == [("hardware.gpu", "H200", "B200")]
    assert not pd.identical
    same = diff_profiles(str(a), str(a))
    assert same.identical


def test_profiles_cli_json(tmp_path):
    a = _profile(tmp_path, "a", server=DFLASH)
    b = _profile(tmp_path, "b", server={**DFLASH, "speculative-dflash-block-size": 8})
    run = ddtctl("diff-flags", a, b, "--format", "json")
    assert run.returncode == 0, run.stderr
    doc = results(run.stdout, "diff-flags")
    assert doc["only_b"] == {"--speculative-dflash-block-size": "8"} and doc["resolved"] is None


def test_resolved_needs_one_release(tmp_path):
    a = _profile(tmp_path, "a", server=DFLASH)
    b = _profile(tmp_path, "b", server={"tp-size": 1}, sglang="0.5.19")
    with pytest.raises(UsageError, match="one SGLang resolver"):
        diff_profiles(str(a), str(b), resolved=True)


# -- the real installed SGLang (managed env) --------------------------------------------------------------------------
def _managed_python():
    from ddtctl.envs import managed_env

    env = managed_env("0.5.23")
    if not env.ready:
        pytest.skip("managed sglang 0.5.23 env not built (`ddtctl env create`; make test builds it)")
    return env.python


@pytest.fixture(scope="module")
def live():
    return live_catalog(_managed_python())


@pytest.mark.sglang
def test_installed_0_5_23_matches_its_catalog(live):
    assert live.version == "0.5.23"
    diff = diff_catalogs(load_catalog("0.5.23"), live)
    assert diff.identical, diff.to_json()["counts"]


@pytest.mark.sglang
def test_installed_0_5_23_drifts_from_a_0_5_19_profile(live):
    diff = diff_catalogs(load_catalog("0.5.19"), live)
    r = diff.rename_of("mamba-scheduler-strategy")
    assert r is not None and r.new == "mamba-radix-cache-strategy" and r.how == "declared"
    assert not diff.identical


@pytest.mark.sglang
def test_cli_installed_exit_codes():
    python = _managed_python()
    run = ddtctl("diff-flags", "--installed", "--python", python, "--format", "json", timeout=300)
    assert run.returncode == 0, run.stderr
    doc = results(run.stdout, "diff-flags")
    assert doc["drift"] is False and doc["installed_version"] == "0.5.23"
    run = ddtctl("diff-flags", "--installed", "--python", python, "--sglang", "0.5.12", timeout=300)
    assert run.returncode == 1, run.stderr
    assert "drift" in run.stdout and "--mamba-scheduler-strategy -> --mamba-radix-cache-strategy" in run.stdout


def test_python_without_sglang_is_an_environment_error():
    import importlib.util

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("this interpreter has sglang")
    with pytest.raises(EnvironmentMissing, match="cannot build the sglang parser"):
        live_catalog(sys.executable)  # the project venv has no sglang


@pytest.mark.sglang
def test_profiles_resolved_by_sglang(tmp_path):
    _managed_python()
    a = _profile(tmp_path, "a", server=DFLASH)
    b = _profile(tmp_path, "b", server={**DFLASH, "page-size": 16})
    pd = diff_profiles(str(a), str(b), resolved=True)
    res = pd.resolved
    assert res["a"]["ok"] and res["b"]["ok"]
    changed = {c["key"]: (c["a"], c["b"]) for c in res["changed"]}
    assert changed["page_size"] == (1, 16)
    assert "random_seed" not in changed  # drawn at random when unset: not a difference
    assert not res["verdict_changed"]


@pytest.mark.sglang
def test_cli_resolved_seed_dflash_vs_ddtree_through_the_overlay(tmp_path):
    """The seed pair: DFLASH baseline vs DDTREE, resolved by SGLang 0.5.23 with the DDTREE payload (--overlay auto)."""
    _managed_python()
    fixtures = REPO / "tests" / "overlay" / "fixtures" / "models"
    paths = []
    for name in ("qwen36-27b-dflash", "qwen36-27b-ddtree"):
        text = (REPO / "profiles" / f"{name}.yaml").read_text()
        text = text.replace("/root/models/Qwen3.6-27B-DFlash", str(fixtures / "qwen36-27b-dflash"))
        text = text.replace("/root/models/Qwen3.6-27B", str(fixtures / "qwen36-27b"))
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(text)
    run = ddtctl("diff-flags", *paths, "--resolved", "--format", "json", timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    res = results(run.stdout, "diff-flags")["resolved"]
    assert res["a"]["ok"] and res["b"]["ok"], res
    changed = {c["key"]: (c["a"], c["b"]) for c in res["changed"]}
    assert changed["speculative_algorithm"] == ("DFLASH", "DDTREE")
    assert changed["speculative_ddtree_verify_width"] == (None, 65)  # budget 64 + the root
    assert "disable_overlap_schedule" not in changed  # both run under the overlap scheduler


def test_profile_diff_never_shows_secret_values(tmp_path):
    """diff-flags A B: a changed --api-key (even one that starts with `--`) and a changed secret env value show as
    changed, masked, in text and JSON (issue #31: secrets never reach a terminal or a report)."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text('name: a\nsglang: "0.5.23"\nmodel: {path: /models/x}\nserver:\n  api-key: "--looks-like-a-flag"\n'
                 "env:\n  HF_TOKEN: hf_abcdefgh\n")
    b.write_text('name: b\nsglang: "0.5.23"\nmodel: {path: /models/x}\nserver:\n  api-key: other-secret\n'
                 "env:\n  HF_TOKEN: hf_zzzzzzzz\n")
    for fmt in ("text", "json"):
        run = ddtctl("diff-flags", a, b, "--format", fmt)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out
        for secret in ("looks-like-a-flag", "other-secret", "hf_abcdefgh", "hf_zzzzzzzz"):
            assert secret not in out, f"{fmt}: {secret} shown"
        assert "api-key" in out and "HF_TOKEN" in out  # the change itself is still reported
