"""Issue #14, overlay defects found with hostile input, one regression test (or a few) per defect, each failing on
the code before its fix: 1 data loss (`import --out SRC --force`, `build --out DIR`), 5 a payload's own installer.py
executed by `overlay install`, 13 path looseness (names import accepts and build refuses, a manifest `patch:`
outside the payload directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddtctl.errors import OverlayError
from ddtctl.overlay import installer
from ddtctl.overlay.build import build
from ddtctl.overlay.importer import import_dir
from ddtctl.overlay.source import load_source_manifest

from overlay_fixtures import A_PY, B_PY, snapshot, write


def ddtctl(*args):
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def src(tmp_path):
    """Hand-patched SGLang files in the package layout, inside a parent directory holding other work."""
    parent = tmp_path / "work"
    d = parent / "my-ddtree"
    write(d / "srt/a.py", A_PY.replace("    return 3\n", "    return 3  # DDTREE\n"))
    write(d / "srt/sub/b.py", B_PY.replace('"DFLASH")', '"DFLASH", "DDTREE")'))
    write(d / "srt/sub/ddtree_utils.py", "def build_tree():\n    return []\n")
    write(parent / "notes.txt", "the rest of my work\n")
    return d


def _import(src, out, site, **kw):
    return import_dir(src, out=out, sglang_root=site, python=sys.executable, **kw)


# -- 1: never delete what ddtctl did not create ------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["src", "parent", "inside"])
def test_defect1_import_out_overlapping_the_source_is_refused_even_with_force(fake_site, src, where):
    out = {"src": src, "parent": src.parent, "inside": src / "payload"}[where]
    before = snapshot(src.parent)
    with pytest.raises(OverlayError, match="overlaps the source directory"):
        _import(src, out, fake_site, force=True)
    assert snapshot(src.parent) == before  # before: SRC (or its parent, with notes.txt) was deleted


def test_defect1_import_force_replaces_only_a_payload_it_imported(fake_site, src, tmp_path):
    out = tmp_path / "out"
    write(out / "keep.txt", "mine\n")
    with pytest.raises(OverlayError, match="was not written by `ddtctl overlay import`"):
        _import(src, out, fake_site, force=True)
    assert (out / "keep.txt").read_text() == "mine\n" and sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    mine = tmp_path / "mine"
    _import(src, mine, fake_site)
    _import(src, mine, fake_site, force=True)  # its own earlier import: replaced
    assert (mine / "manifest.json").is_file() and (mine / ".ddtctl-import").is_file()


def test_defect1_a_failed_import_leaves_the_old_payload_in_place(fake_site, src, tmp_path):
    out = tmp_path / "out"
    _import(src, out, fake_site)
    before = snapshot(out)
    a = fake_site / "sglang/srt/a.py"
    write(src / "srt/a.py", "not a patch of anything\n")
    a.write_bytes(b"\xff\xfe not utf-8")  # the patch cannot be made: the import fails half way
    with pytest.raises(OverlayError, match="not UTF-8"):
        _import(src, out, fake_site, force=True)
    assert snapshot(out) == before  # before: --force had already deleted it
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".out.")] == []


def test_defect1_cli_import_out_src_force_keeps_src(fake_site, src):
    before = snapshot(src)
    run = ddtctl("overlay", "import", src, "--out", src, "--force", "--sglang-root", fake_site,
                 "--python", sys.executable)
    assert run.returncode == 4 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "overlaps the source directory" in run.stderr
    assert snapshot(src) == before


def test_defect1_build_out_refuses_a_directory_it_did_not_make(fake_site, fake_payload, tmp_path):
    out = tmp_path / "docs"
    write(out / "thesis.tex", "months of work\n")
    with pytest.raises(OverlayError, match="is not a ddtctl build directory; refusing to replace it"):
        build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=out)
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]  # before: wiped by the swap-in
    run = ddtctl("overlay", "build", "--payload", fake_payload, "--sglang-root", fake_site, "--python",
                 sys.executable, "--out", fake_payload)  # the payload source itself
    assert run.returncode == 4 and "refusing to replace it" in run.stderr
    assert (fake_payload / "manifest.json").is_file()


def test_defect1_build_replaces_its_own_builds_old_and_new(fake_site, fake_payload, tmp_path):
    out = tmp_path / "build"
    r1 = build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=out)
    assert (out / ".ddtctl-build").is_file()
    (out / ".ddtctl-build").unlink()  # a build dir made before the marker existed
    r2 = build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=out)
    assert r2.payload_id == r1.payload_id and (out / ".ddtctl-build").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=empty)


# -- 5: only ddtctl's installer runs ----------------------------------------------------------------------------------
def test_defect5_a_payloads_own_installer_py_is_never_executed(fake_site, fake_payload, tmp_path):
    from ddtctl.overlay.manage import install

    staged = build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=tmp_path / "b").payload_dir
    marker = tmp_path / "pwned"
    (staged / "installer.py").write_text(
        "import json, pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "print(json.dumps({'ok': True, 'action': 'installed', 'payload_id': 'evil'}))\n")
    r = install(fake_site, payload=staged, python=sys.executable, state_dir=tmp_path / "state")
    assert not marker.exists()  # before: the payload's script ran (and "installed" nothing)
    assert r.action == "installed" and r.payload_id != "evil"
    assert "def ddtree()" in (fake_site / "sglang/srt/a.py").read_text()


# -- 13: overlay path looseness ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["back\\slash.py", "new\nline.py", "tab\there.py", "bell\x07.py"])
def test_defect13_import_refuses_names_build_and_the_installer_refuse(fake_site, src, tmp_path, name):
    write(src / "srt" / name, "X = 1\n")
    out = tmp_path / "out"
    with pytest.raises(OverlayError, match="unsafe path"):
        _import(src, out, fake_site)
    assert not out.exists()  # refused before anything was written
    with pytest.raises(installer.Refused, match="unsafe path"):
        installer.safe_join(str(fake_site), f"sglang/srt/{name}")


def test_defect13_a_manifest_patch_outside_the_payload_dir_is_refused(fake_payload, tmp_path):
    outside = tmp_path / "outside.patch"
    m = json.loads((fake_payload / "manifest.json").read_text())
    outside.write_text((fake_payload / m["patched"][0]["patch"]).read_text())
    for bad in ("../outside.patch", str(outside)):
        m["patched"][0]["patch"] = bad
        (fake_payload / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(OverlayError, match="unsafe path"):
            load_source_manifest(fake_payload)  # before: accepted, and build read the file outside
    link = fake_payload / "patches" / "linked.patch"
    os.symlink(outside, link)
    m["patched"][0]["patch"] = "patches/linked.patch"
    (fake_payload / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OverlayError, match="leaves the payload directory"):
        load_source_manifest(fake_payload)
