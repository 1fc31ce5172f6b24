"""overlay build: pristine files + patches -> staged payload + view; base-hash refusal; nothing written to the root."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ddtctl.errors import OverlayError
from ddtctl.overlay import installer
from ddtctl.overlay.build import build
from ddtctl.overlay.source import load_source_manifest, sha256_file

from overlay_fixtures import make_payload, snapshot, write


def _build(payload, site, tmp_path, name="build"):
    return build(payload, sglang_root=site, python=sys.executable, out_dir=tmp_path / name)


def test_build_stages_patched_and_added_files(fake_site, fake_payload, tmp_path):
    before = snapshot(fake_site)
    r = _build(fake_payload, fake_site, tmp_path)
    built = json.loads((r.payload_dir / installer.MANIFEST_NAME).read_text())
    kinds = {e["path"]: e["kind"] for e in built["files"]}
    assert kinds["sglang/srt/a.py"] == "patched" and kinds["fake_ddtree/plugin.py"] == "added"
    # every staged file is what the manifest says; patched files carry their pristine base hash
    for e in built["files"]:
        assert sha256_file(r.payload_dir / "files" / e["path"]) == e["sha256"]
        if e["kind"] == "patched":
            assert e["base_sha256"] == sha256_file(fake_site / e["path"])
    assert "def ddtree()" in (r.payload_dir / "files/sglang/srt/a.py").read_text()
    assert built["payload_id"] == r.payload_id and len(r.payload_id) == 64
    # the installer and smoke tools travel with the payload, hashed
    for tool in ("installer.py", "smoke.py"):
        assert sha256_file(r.payload_dir / tool) == built["tools"][tool]
    # the source tree was only read
    assert snapshot(fake_site) == before


def test_view_overlays_only_touched_paths_and_is_byte_compiled(fake_site, fake_payload, tmp_path):
    r = _build(fake_payload, fake_site, tmp_path)
    view = r.view_dir
    # untouched siblings are links to the originals; directories on the payload's paths are real
    assert (view / "sglang" / "version.py").is_symlink()
    assert (view / "sglang" / "srt" / "data.json").is_symlink()
    assert not (view / "sglang" / "srt").is_symlink() and not (view / "sglang" / "srt" / "a.py").is_symlink()
    assert (view / "sglang/srt/a.py").read_bytes() == (r.payload_dir / "files/sglang/srt/a.py").read_bytes()
    # never a link to an original __pycache__ (a patched module's bytecode must not land in the original tree)
    assert not any(p.is_symlink() for p in view.rglob("__pycache__"))
    tag = sys.implementation.cache_tag
    assert (view / "sglang/srt/__pycache__" / f"a.{tag}.pyc").is_file()
    assert (view / "fake_ddtree/__pycache__" / f"plugin.{tag}.pyc").is_file()
    # and the view imports as the patched package, with the untouched modules from the original tree
    import subprocess

    out = subprocess.run([sys.executable, "-I", "-c",
                          "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
                          "import sglang.srt.a as a, sglang.version as v, otherpkg; print(a.ddtree(), v.__version__)",
                          str(view), str(fake_site)], capture_output=True, text=True)
    assert out.stdout.split() == ["tree", "0.5.23"], out.stderr


def test_refuses_modified_base_naming_file_and_how(fake_site, fake_payload, tmp_path):
    write(fake_site / "sglang/srt/sub/b.py", (fake_site / "sglang/srt/sub/b.py").read_text() + "# local edit\n")
    with pytest.raises(OverlayError) as err:
        _build(fake_payload, fake_site, tmp_path)
    msg = err.value.one_line()
    assert "sglang/srt/sub/b.py" in msg and "not the pristine file of sglang 0.5.23" in msg


def test_refuses_an_already_patched_base(fake_site, fake_payload, tmp_path):
    r = _build(fake_payload, fake_site, tmp_path)
    (fake_site / "sglang/srt/a.py").write_bytes((r.payload_dir / "files/sglang/srt/a.py").read_bytes())
    with pytest.raises(OverlayError, match="sglang/srt/a.py.*already holds this payload's patched version"):
        _build(fake_payload, fake_site, tmp_path, "again")


def test_refuses_another_sglang_release(fake_site, fake_payload, tmp_path):
    write(fake_site / "sglang/version.py", '__version__ = "0.5.19"\n')
    with pytest.raises(OverlayError, match="has sglang 0.5.19; payload fake-ddtree is for sglang 0.5.23"):
        _build(fake_payload, fake_site, tmp_path)


def test_refuses_a_patch_whose_result_differs_from_the_manifest(fake_site, fake_payload, tmp_path):
    m = json.loads((fake_payload / "manifest.json").read_text())
    m["patched"][0]["result_sha256"] = "0" * 64
    (fake_payload / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OverlayError, match="the patched result has sha256"):
        _build(fake_payload, fake_site, tmp_path)


def test_a_changed_pinned_added_file_is_staged_and_reported(fake_site, fake_payload, tmp_path):
    write(fake_payload / "files/fake_ddtree/plugin.py", "def register():\n    return 'changed'\n")
    r = _build(fake_payload, fake_site, tmp_path)
    assert r.stale_pins == ["fake_ddtree/plugin.py"]
    staged = r.payload_dir / "files/fake_ddtree/plugin.py"
    assert "changed" in staged.read_text()
    entry = next(f for f in r.files if f["path"] == "fake_ddtree/plugin.py")
    assert entry["sha256"] == sha256_file(staged)  # the built manifest pins what is shipped


def test_syntax_error_fails_byte_compilation(fake_site, tmp_path):
    payload = make_payload(tmp_path, fake_site)
    m = json.loads((payload / "manifest.json").read_text())
    write(payload / "files/fake_ddtree/bad.py", "def broken(:\n")
    m["added"].append({"path": "fake_ddtree/bad.py", "source": "files/fake_ddtree/bad.py"})
    (payload / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OverlayError, match="byte-compiling with .* failed: .*bad.py"):
        _build(payload, fake_site, tmp_path)
    assert not (tmp_path / "build").exists()  # a failed build leaves no half-made build dir


def test_rebuild_replaces_and_reuse_skips(fake_site, fake_payload, tmp_path):
    r1 = _build(fake_payload, fake_site, tmp_path)
    r2 = build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=tmp_path / "build", reuse=True)
    assert r2.reused and r2.payload_id == r1.payload_id
    write(fake_payload / "files/fake_ddtree/__init__.py", "ALGORITHM = 'DDTREE'  # v2\n")
    m = load_source_manifest(fake_payload)
    for a in m.added:
        if a.path == "fake_ddtree/__init__.py":
            a.sha256 = None
    m.write()
    r3 = build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=tmp_path / "build", reuse=True)
    assert not r3.reused and r3.payload_id != r1.payload_id


def test_unsafe_manifest_paths_are_refused(fake_site, fake_payload, tmp_path):
    m = json.loads((fake_payload / "manifest.json").read_text())
    m["added"].append({"path": "../escape.py", "source": "files/fake_ddtree/plugin.py"})
    (fake_payload / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OverlayError, match="unsafe path"):
        _build(fake_payload, fake_site, tmp_path)


def test_rewrite_imports_for_ddtctl_sourced_trees(fake_site, fake_payload, tmp_path):
    m = json.loads((fake_payload / "manifest.json").read_text())
    m["added"].append({"path": "fake_ddtree/core.py", "source": "ddtctl:rules/ddtree/core.py"})
    m["added"].append({"path": "fake_ddtree/err.py", "source": "ddtctl:errors.py",
                       "rewrite": {"ddtctl.errors": "fake_ddtree.err"}})
    (fake_payload / "manifest.json").write_text(json.dumps(m))
    r = _build(fake_payload, fake_site, tmp_path)
    repo = Path(__file__).resolve().parents[2] / "ddtctl"
    # a plain copy stays byte-identical to its source
    assert (r.payload_dir / "files/fake_ddtree/core.py").read_bytes() == (repo / "rules/ddtree/core.py").read_bytes()
    assert os.path.getsize(r.payload_dir / "files/fake_ddtree/err.py") > 0


def test_concurrent_builds_of_one_payload_take_turns(fake_site, fake_payload, tmp_path):
    import threading

    results, errors = [], []

    def one():
        try:
            results.append(build(fake_payload, sglang_root=fake_site, python=sys.executable,
                                 out_dir=tmp_path / "shared"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len({r.payload_id for r in results}) == 1
    assert (tmp_path / "shared" / "view" / "sglang" / "srt" / "a.py").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".shared.") and not p.name.endswith(".lock")]
