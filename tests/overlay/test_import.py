"""overlay import: hand-patched SGLang files -> a payload that builds back to exactly those files."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys

import pytest

from ddtctl.errors import OverlayError
from ddtctl.overlay.build import build
from ddtctl.overlay.importer import check_manifest, import_dir

from overlay_fixtures import A_PY, B_PY, write


def _record(site):
    """A dist-info RECORD like pip writes, for the stand-in sglang."""
    rows = []
    for p in sorted((site / "sglang").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            digest = base64.urlsafe_b64encode(hashlib.sha256(p.read_bytes()).digest()).rstrip(b"=").decode()
            rows.append(f"{p.relative_to(site)},sha256={digest},{p.stat().st_size}")
    d = site / "sglang-0.5.23.dist-info"
    d.mkdir()
    (d / "RECORD").write_text("\n".join(rows) + "\n")


@pytest.fixture
def hand_patched(tmp_path):
    """What users do today: copies of sglang files edited in place, plus a new module, in the package layout."""
    d = tmp_path / "my-ddtree"
    write(d / "srt/a.py", A_PY.replace("    return 3\n", "    return 3  # DDTREE\n"))
    write(d / "srt/sub/b.py", B_PY.replace('"DFLASH")', '"DFLASH", "DDTREE")'))
    write(d / "srt/sub/ddtree_utils.py", "def build_tree():\n    return []\n")
    write(d / "srt/data.json", '{"x": 1}\n')  # unchanged copy: skipped
    (d / "srt/__pycache__").mkdir()
    (d / "srt/__pycache__/a.cpython-311.pyc").write_bytes(b"junk")  # never imported
    return d


def test_import_then_build_reproduces_the_hand_patched_files(fake_site, hand_patched, tmp_path):
    _record(fake_site)
    out = tmp_path / "imported"
    r = import_dir(hand_patched, out=out, sglang_root=fake_site, python=sys.executable, name="mine")
    assert sorted(p["path"] for p in r.patched) == ["sglang/srt/a.py", "sglang/srt/sub/b.py"]
    assert r.added == ["sglang/srt/sub/ddtree_utils.py"]
    assert r.unchanged == ["sglang/srt/data.json"]
    m = json.loads((out / "manifest.json").read_text())
    a = next(p for p in m["patched"] if p["path"] == "sglang/srt/a.py")
    assert a["base_sha256"] == hashlib.sha256((fake_site / "sglang/srt/a.py").read_bytes()).hexdigest()
    assert a["result_sha256"] == hashlib.sha256((hand_patched / "srt/a.py").read_bytes()).hexdigest()
    patch = (out / a["patch"]).read_text()
    changed = [ln for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed == ["-    return 3", "+    return 3  # DDTREE"]  # a diff, not a copy of the file
    # from now on it builds like the bundled payload, to exactly the user's files
    b = build(out, sglang_root=fake_site, python=sys.executable, out_dir=tmp_path / "build")
    for rel, src in (("sglang/srt/a.py", "srt/a.py"), ("sglang/srt/sub/b.py", "srt/sub/b.py"),
                     ("sglang/srt/sub/ddtree_utils.py", "srt/sub/ddtree_utils.py")):
        assert (b.payload_dir / "files" / rel).read_bytes() == (hand_patched / src).read_bytes()
    assert check_manifest(out, sglang_root=fake_site, python=sys.executable).stale == []


def test_import_refuses_a_non_pristine_base(fake_site, hand_patched, tmp_path):
    _record(fake_site)
    a = fake_site / "sglang/srt/a.py"
    a.write_text(a.read_text() + "# someone already patched the env\n")
    with pytest.raises(OverlayError, match="sglang/srt/a.py .*not the pristine sglang 0.5.23 file"):
        import_dir(hand_patched, out=tmp_path / "o", sglang_root=fake_site, python=sys.executable)


def test_import_needs_the_package_layout_and_changes(fake_site, tmp_path):
    flat = tmp_path / "flat"
    write(flat / "spec_info.py", "x = 1\n")
    with pytest.raises(OverlayError, match="does not mirror the sglang package tree"):
        import_dir(flat, out=tmp_path / "o", sglang_root=fake_site, python=sys.executable)
    same = tmp_path / "same"
    shutil.copytree(fake_site / "sglang", same / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    with pytest.raises(OverlayError, match="nothing to import"):
        import_dir(same, out=tmp_path / "o2", sglang_root=fake_site, python=sys.executable)


def test_import_does_not_overwrite_without_force(fake_site, hand_patched, tmp_path):
    out = tmp_path / "o"
    write(out / "keep.txt", "x")
    with pytest.raises(OverlayError, match="exists and is not empty"):
        import_dir(hand_patched, out=out, sglang_root=fake_site, python=sys.executable)
    assert (out / "keep.txt").exists()
