"""The bundled DDTREE payload against the real pinned SGLang 0.5.23 (the managed env): build, verify, the seed
scenario end to end through `ddtctl dry-run`, the launch refusal, and install/uninstall into a copy of SGLang."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddtctl.overlay import installer
from ddtctl.overlay.build import build
from ddtctl.overlay.importer import check_manifest
from ddtctl.overlay.source import default_payload_dir, sha256_file
from ddtctl.schema.extensions import DDTREE_FLAG_SPECS

from overlay_fixtures import FIXTURES, OVERLAY_DIR, snapshot

pytestmark = pytest.mark.sglang

REPO = Path(__file__).resolve().parents[2]
MODELS = FIXTURES / "models"
TARGET, DRAFT = MODELS / "qwen36-27b", MODELS / "qwen36-27b-dflash"
SEED = ["--model-path", str(TARGET), "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", str(DRAFT),
        "--speculative-dflash-block-size", "16", "--speculative-ddtree-budget", "64", "--speculative-ddtree-topk-cap",
        "64", "--speculative-ddtree-shadow-linear", "--disable-overlap-schedule", "--tp-size", "8"]
MAMBA = ["--mamba-radix-cache-strategy", "extra_buffer", "--mamba-full-memory-ratio", "0.5"]


@pytest.fixture(scope="module", autouse=True)
def _own_overlay_cache(tmp_path_factory):
    """Builds that default to the overlay cache go to a throwaway one, not the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DDTCTL_CACHE_DIR", str(tmp_path_factory.mktemp("overlay-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def built(managed_python, tmp_path_factory):
    return build(None, python=managed_python, out_dir=tmp_path_factory.mktemp("overlay") / "build")


def test_bundled_manifest_is_current(managed_python):
    report = check_manifest(python=managed_python)
    assert report.stale == [], f"run `ddtctl overlay manifest --update`: {report.stale}"


def test_patches_are_few_and_minimal(built):
    """Extension points first: only the flag declarations, two 'DFLASH' string comparisons and one allocation
    hook point are patched."""
    built_manifest = json.loads((built.payload_dir / installer.MANIFEST_NAME).read_text())
    patched = {e["path"]: e for e in built_manifest["files"] if e["kind"] == "patched"}
    assert set(patched) == {"sglang/srt/arg_groups/fields/spec.py", "sglang/srt/arg_groups/speculative_hook.py",
                            "sglang/srt/speculative/spec_utils.py", "sglang/srt/mem_cache/memory_pool.py"}
    for rel, e in patched.items():
        text = (default_payload_dir() / e["patch"]).read_text()
        removed = [ln[1:] for ln in text.splitlines() if ln.startswith("-") and not ln.startswith("---")]
        added = [ln[1:] for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        if rel.endswith("fields/spec.py"):  # new argparse flags: declarations only, nothing removed
            declared = {ln.split(":")[0].strip() for ln in added if ln.strip().startswith("speculative_ddtree_")}
            assert removed == [] and len(added) <= 6 * len(DDTREE_FLAG_SPECS)
            resolved_only = {"speculative_ddtree_verify_width"}  # set by the resolver, no CLI flag
            assert declared == {spec.dest for spec in DDTREE_FLAG_SPECS} | resolved_only, "payload != ddtctl's catalog"
        elif rel.endswith("memory_pool.py"):  # the scratch allocation moves into a hookable function, same call
            assert len(removed) == 4 and len(added) <= 15
            assert "    return torch.zeros(size=size, dtype=dtype, device=device)" in added
        else:  # one 'DFLASH' string comparison learns DDTREE
            assert len(removed) == 1 and len(added) == 1
            assert added[0].replace(', "DDTREE"', "") == removed[0] and "DFLASH" in removed[0]


def test_shipped_rules_are_byte_identical_to_ddtctl_rules(built):
    shipped = built.payload_dir / "files" / "ddtree_sglang" / "rules_core.py"
    source = REPO / "ddtctl" / "rules" / "ddtree" / "core.py"
    assert shipped.read_bytes() == source.read_bytes()
    entry = next(f for f in built.files if f["path"] == "ddtree_sglang/rules_core.py")
    assert entry["sha256"] == sha256_file(source)
    assert (built.view_dir / "ddtree_sglang" / "rules_core.py").read_bytes() == source.read_bytes()


def test_verify_runs_every_smoke_check(built, managed_python):
    from ddtctl.overlay.manage import verify

    r = verify(None, python=managed_python)
    by_id = {c["id"]: c for c in r.checks}
    assert set(by_id) == {"plugin", "registered", "family", "flags", "resolve", "rules", "launch_refused", "kernels"}
    assert r.ok, [c for c in r.checks if not c["ok"]]
    assert by_id["kernels"]["detail"].startswith("selftest('cpu') ok")
    assert r.versions["sglang"] == "0.5.23"


def test_launch_gate_wraps_the_real_engine_entry(built, managed_python):
    """With stand-ins for the HTTP-server packages the dry-run env lacks, SGLang's own engine module imports, and
    SGLang's plugin HookRegistry wraps Engine._launch_subprocesses: a DDTREE server is refused before any spawn."""
    code = (
        "import runpy, sys; sys.path.insert(0, sys.argv[1]); import standin_server_deps as s; s.install();"
        "sys.argv = ['smoke.py', '--view', sys.argv[2], '--checks', 'plugin,registered,launch_refused'];"
        "runpy.run_path(sys.argv[0] if False else %r, run_name='__main__')" % str(built.payload_dir / "smoke.py")
    )
    out = subprocess.run([str(managed_python), "-c", code, str(OVERLAY_DIR / "standins"), str(built.view_dir)],
                         capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    launch = {c["id"]: c for c in result["checks"]}["launch_refused"]
    assert launch["ok"], launch
    assert launch["detail"].startswith("Engine._launch_subprocesses: DdtreeLaunchRefused"), launch["detail"]


def _dry_run(built, argvs):
    from ddtctl.dryrun import dry_run_argvs

    return dry_run_argvs([(name, argv, "RTX_PRO_6000_BLACKWELL") for name, argv in argvs],
                         extra_sys_path=[str(built.view_dir)])


def test_seed_scenario_through_sglang_with_the_payload(built):
    no_mamba, with_mamba = _dry_run(built, [("no-mamba", SEED), ("with-mamba", SEED + MAMBA)])
    assert not no_mamba.accepted and not no_mamba.setup_error
    msg = no_mamba.error["message"]
    assert "[DDT111]" in msg and "--mamba-radix-cache-strategy extra_buffer" in msg
    assert "--mamba-full-memory-ratio" in msg and "Qwen3_5ForCausalLM" in msg
    assert no_mamba.error["hook"] == "speculative_hook.handle_speculative_decoding"

    assert with_mamba.accepted, with_mamba.error
    r = with_mamba.resolved
    assert r["speculative_algorithm"] == "DDTREE"
    assert r["speculative_dflash_block_size"] == 16 and r["speculative_num_draft_tokens"] == 16
    assert (r["speculative_ddtree_budget"], r["speculative_ddtree_topk_cap"]) == (64, 64)
    assert r["speculative_ddtree_shadow_linear"] is True and r["speculative_ddtree_verify_width"] == 65
    assert r["speculative_num_steps"] == 1 and r["speculative_eagle_topk"] == 1  # DFLASH-family resolution
    assert r["mamba_radix_cache_strategy"] == "extra_buffer"


def test_static_validation_agrees_on_the_seed(built):
    from ddtctl.validate import validate_argv

    bad = validate_argv(SEED, gpu="RTX_PRO_6000_BLACKWELL", sglang="0.5.23")
    good = validate_argv(SEED + MAMBA, gpu="RTX_PRO_6000_BLACKWELL", sglang="0.5.23")
    assert not bad.valid and "DDT111" in {f.rule for f in bad.findings if f.severity == "error"}
    assert good.valid, [(f.rule, f.message) for f in good.findings if f.severity == "error"]


def _profile(path: Path, name: str, mamba: bool, overlap_off: bool = True) -> Path:
    lines = [f"name: {name}", 'sglang: "0.5.23"', "hardware: {gpu: RTX_PRO_6000_BLACKWELL, count: 8}",
             f"model: {{path: {TARGET}}}", "server:", "  tp-size: 8", "  speculative-algorithm: DDTREE",
             f"  speculative-draft-model-path: {DRAFT}", "  speculative-dflash-block-size: 16",
             "  speculative-ddtree-budget: 64", "  speculative-ddtree-topk-cap: 64",
             "  speculative-ddtree-shadow-linear: true"] + (["  disable-overlap-schedule: true"] if overlap_off else [])
    if mamba:
        lines += ["  mamba-radix-cache-strategy: extra_buffer", "  mamba-full-memory-ratio: 0.5"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_seed_scenario_as_a_user_runs_it(built, tmp_path):
    """`ddtctl dry-run` picks the built payload automatically (--overlay auto) for DDTREE profiles."""
    no_mamba = _profile(tmp_path / "qwen36-27b-ddtree-no-mamba.yaml", "no-mamba", False)
    seed = _profile(tmp_path / "qwen36-27b-ddtree.yaml", "seed", True)
    env = dict(os.environ, DDTCTL_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="250")
    ddtctl = [sys.executable, "-m", "ddtctl"]
    out = subprocess.run(ddtctl + ["dry-run", str(no_mamba), str(seed)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 1, out.stderr  # one of the two is rejected
    text = " ".join(out.stdout.split())
    assert "REJECTED by SGLang" in text and "[DDT111]" in text
    assert "--mamba-radix-cache-strategy extra_buffer" in text and "--mamba-full-memory-ratio" in text
    assert ("ACCEPTED" in text and "algorithm DDTREE, draft tokens 16" in text and "budget 64, topk cap 64, "
            "shadow linear on, verify width 65" in text), out.stdout
    # without the payload, plain SGLang 0.5.23 does not know the flags at all
    plain = subprocess.run(ddtctl + ["dry-run", "--overlay", "none", str(seed)], capture_output=True, text=True,
                           env=env, timeout=600)
    assert plain.returncode == 1 and "unrecognized arguments: --speculative-ddtree-budget" in " ".join(plain.stdout.split())


def test_seed_without_disable_overlap_schedule_keeps_the_overlap_scheduler(built, tmp_path):
    """The seed without --disable-overlap-schedule: static validate has nothing to say about it (exit 0), and
    `ddtctl dry-run` accepts it with the overlap scheduler on -- DDTREE runs under it, as DFLASH does -- and no
    resolution step changes disable_overlap_schedule."""
    seed = _profile(tmp_path / "qwen36-27b-ddtree.yaml", "seed", True, overlap_off=False)
    env = dict(os.environ, DDTCTL_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="250")
    ddtctl = [sys.executable, "-m", "ddtctl"]
    static = subprocess.run(ddtctl + ["validate", str(seed)], capture_output=True, text=True, env=env, timeout=120)
    assert static.returncode == 0, static.stdout
    assert "DDT110" not in static.stdout and "overlap" not in static.stdout and "error" not in static.stdout
    out = subprocess.run(ddtctl + ["dry-run", str(seed)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "ACCEPTED" in text and "overlap on" in text, text
    assert "disable_overlap_schedule:" not in text


def test_install_into_a_copy_of_sglang_then_uninstall_exactly(built, managed_python, tmp_path):
    """The real payload into a real SGLang tree (a copy of the managed env's, so the env itself is untouched)."""
    from ddtctl.overlay.manage import install, status, uninstall

    site = tmp_path / "site-packages"
    shutil.copytree(built.sglang_root / "sglang", site / "sglang", symlinks=True)
    shutil.copytree(built.sglang_root / "sglang-0.5.23.dist-info", site / "sglang-0.5.23.dist-info")
    pristine = snapshot(site)
    state = tmp_path / "state"
    r = install(site, payload=built.payload_dir, python=managed_python, state_dir=state)
    assert r.action == "installed" and r.payload_id == built.payload_id
    assert status(site, python=managed_python, state_dir=state)["drift"] == []
    # the installed tree works in the real interpreter without any view: SGLang finds the plugin by entry point
    from ddtctl.overlay.manage import verify

    v = verify(None, sglang_root=site, python=managed_python, installed=True,
               checks=["plugin", "registered", "family", "flags", "resolve", "rules"])
    assert v.ok, v.checks
    assert v.versions["sglang_file"].startswith(str(site))
    r = uninstall(site, python=managed_python, state_dir=state)
    assert r.action == "uninstalled"
    assert snapshot(site) == pristine


def test_the_managed_env_is_never_modified(built, managed_python):
    """Build, verify and the dry-runs above used the view: the env's own files (and their bytecode) are pristine."""
    import importlib.util

    root = built.sglang_root
    assert not (root / "ddtree_sglang").exists() and not list(root.glob("ddtree_sglang-*.dist-info"))
    m = json.loads((built.payload_dir / installer.MANIFEST_NAME).read_text())
    for e in m["files"]:
        if e["kind"] != "patched":
            continue
        src = root / e["path"]
        assert sha256_file(src) == e["base_sha256"], e["path"]
        pyc = Path(importlib.util.cache_from_source(str(src)))
        if pyc.exists():  # any bytecode there was compiled from the pristine source (header: its mtime and size)
            header, st = pyc.read_bytes()[8:16], src.stat()
            assert int.from_bytes(header[:4], "little") == int(st.st_mtime) & 0xFFFFFFFF, pyc
            assert int.from_bytes(header[4:], "little") == st.st_size & 0xFFFFFFFF, pyc


def test_import_of_hand_patched_files_round_trips(built, managed_python, tmp_path):
    """A user's hand-patched tree (here: exactly the files the bundled payload installs, laid out as in
    site-packages) imports into a payload that builds to the same bytes and passes the same smoke checks."""
    from ddtctl.overlay.importer import import_dir
    from ddtctl.overlay.manage import verify

    r = import_dir(built.payload_dir / "files", out=tmp_path / "imported", python=managed_python, name="hand")
    assert {p["path"] for p in r.patched} == {f["path"] for f in built.files if f["kind"] == "patched"}
    b2 = build(tmp_path / "imported", python=managed_python, out_dir=tmp_path / "b2")
    assert {(f["path"], f["sha256"]) for f in b2.files} == {(f["path"], f["sha256"]) for f in built.files}
    v = verify(tmp_path / "imported", python=managed_python, checks=["registered", "flags", "resolve_basic", "rules"])
    assert v.ok, v.checks
