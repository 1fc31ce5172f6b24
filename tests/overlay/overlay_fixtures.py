"""Helpers for the overlay tests (a uniquely named module: `from conftest import ...` is ambiguous when several test
directories have a conftest.py). The fixtures themselves are in conftest.py.

`fake_site` is a small stand-in for an SGLang site-packages (a `sglang` package of version 0.5.23 with a few text
files and pip-style compiled .pyc files): the builder and installer are generic, so most tests run without the
managed SGLang env. `fake_payload` is a payload source against it (two patched files, an added package and an
entry-point dist-info, like the real one). Tests marked `sglang` use the real pinned SGLang instead.
"""

from __future__ import annotations

import compileall
import json
import os
import stat
import sys
from pathlib import Path

from ddtctl.overlay.source import FORMAT, AddedFile, SourceManifest, sha256_bytes
from ddtctl.overlay.udiff import make_patch

OVERLAY_DIR = Path(__file__).resolve().parent
FIXTURES = OVERLAY_DIR / "fixtures"

A_PY = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(40))
B_PY = 'KNOWN = ("EAGLE", "DFLASH")\n\n\ndef known(name):\n    return name in KNOWN\n'


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def make_site(root: Path) -> Path:
    site = root / "site-packages"
    write(site / "sglang" / "__init__.py", "")
    write(site / "sglang" / "version.py", '__version__ = "0.5.23"\n')
    write(site / "sglang" / "srt" / "__init__.py", "")
    write(site / "sglang" / "srt" / "a.py", A_PY)
    write(site / "sglang" / "srt" / "sub" / "__init__.py", "")
    write(site / "sglang" / "srt" / "sub" / "b.py", B_PY)
    write(site / "sglang" / "srt" / "data.json", '{"x": 1}\n')
    write(site / "otherpkg" / "__init__.py", "VALUE = 1\n")
    # pip byte-compiles what it installs; mtimes in the past like a real install
    for p in site.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    compileall.compile_dir(str(site), quiet=1)
    return site


def make_payload(root: Path, site: Path, *, name: str = "fake-ddtree", version: str = "0.1.0",
                 b_tag: str = "DDTREE", with_b: bool = True, extra_module: str | None = None) -> Path:
    payload = root / f"payload-{name}-{version}"
    (payload / "patches").mkdir(parents=True)
    m = SourceManifest(root=payload, name=name, version=version, sglang="0.5.23")
    edits = {"sglang/srt/a.py": A_PY.replace("    return 7\n", "    return 7  # patched\n")
             + "\n\ndef ddtree():\n    return 'tree'\n"}
    if with_b:
        edits["sglang/srt/sub/b.py"] = B_PY.replace('("EAGLE", "DFLASH")', f'("EAGLE", "DFLASH", "{b_tag}")')
    from ddtctl.overlay.source import PatchedFile, patch_name

    for rel, new in edits.items():
        base = (site / rel).read_text(encoding="utf-8")
        patch = make_patch(base, new, rel)
        (payload / patch_name(rel)).write_text(patch, encoding="utf-8")
        m.patched.append(PatchedFile(rel, patch_name(rel), sha256_bytes(base.encode()), sha256_bytes(new.encode())))
    files = {
        "fake_ddtree/__init__.py": "ALGORITHM = 'DDTREE'\n",
        "fake_ddtree/plugin.py": "def register():\n    return 'registered'\n",
        f"fake_ddtree-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: fake-ddtree\nVersion: {version}\n",
        f"fake_ddtree-{version}.dist-info/entry_points.txt": "[sglang.srt.plugins]\nddtree = fake_ddtree.plugin:register\n",
    }
    if extra_module:
        files[f"fake_ddtree/{extra_module}.py"] = f"NAME = {extra_module!r}\n"
    for rel, text in files.items():
        write(payload / "files" / rel, text)
        m.added.append(AddedFile(rel, f"files/{rel}", sha256_bytes(text.encode())))
    m.smoke = [{"id": "plugin", "what": "stand-in"}]
    m.write()
    assert json.loads((payload / "manifest.json").read_text())["format"] == FORMAT
    return payload


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything that makes a tree 'the same': per file bytes hash, mode and mtime (ns); per dir its presence;
    symlinks by target."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath) / d
            out[str(p.relative_to(root)) + "/"] = ("link", os.readlink(p)) if p.is_symlink() else ("dir",)
        for f in filenames:
            p = Path(dirpath) / f
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
                continue
            st = p.lstat()
            out[rel] = ("file", sha256_bytes(p.read_bytes()), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out
