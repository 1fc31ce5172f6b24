"""`ddtctl overlay import DIR` and `ddtctl overlay manifest`: payload sources from hand-patched SGLang files.

The common workflow today: someone edits `spec_info.py`, `server_args.py`, `dflash_worker.py` and adds a
`ddtree_utils.py`, in a directory that mirrors the sglang package tree. `import` finds each file's pristine
counterpart in the pinned release (checked against the release's own RECORD hashes), stores a unified diff
with the base and result hashes, copies new files as added files, and writes a manifest that `overlay build`
builds, verifies and ships exactly like the bundled payload.
"""

from __future__ import annotations

import base64
import csv
import io
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtctl.errors import OverlayError
from ddtctl.overlay.build import resolve_target
from ddtctl.overlay.source import (
    FORMAT,
    MANIFEST,
    AddedFile,
    PatchedFile,
    SourceManifest,
    check_rel,
    load_source_manifest,
    patch_name,
    read_file,
    read_file_text,
    sha256_bytes,
)
from ddtctl.overlay.udiff import PatchError, apply_patch, make_patch
from ddtctl.safeio import owned_dir_state, write_new

DEFAULT_SMOKE = [
    {"id": "registered", "what": "SpeculativeAlgorithm.from_string('DDTREE') resolves"},
    {"id": "flags", "what": "the DDTREE flags parse with their types and defaults"},
    {
        "id": "resolve_basic",
        "what": "a DDTREE argv resolves through ServerArgs.resolve_once() and stays DDTREE",
    },
]
_SKIP_DIRS = {"__pycache__", ".git"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".orig", ".rej", ".swp")


@dataclass
class ImportResult:
    payload_dir: Path
    patched: list[dict[str, Any]] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "payload_dir": str(self.payload_dir),
            "patched": self.patched,
            "added": self.added,
            "unchanged": self.unchanged,
        }


def record_hashes(sglang_root: Path, version: str) -> dict[str, str]:
    """path -> sha256 hex from the release's dist-info RECORD ({} when there is none)."""
    record = sglang_root / f"sglang-{version}.dist-info" / "RECORD"
    try:
        text = read_file_text(record)
    except OverlayError:
        return {}
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[1].startswith("sha256="):
            digest = row[1][len("sha256=") :]
            digest += "=" * (-len(digest) % 4)
            out[row[0]] = base64.urlsafe_b64decode(digest).hex()
    return out


def _mirror_prefix(src: Path) -> str:
    if (src / "sglang").is_dir():
        return ""
    if (src / "srt").is_dir() or (src / "__init__.py").is_file() and (src / "version.py").is_file():
        return "sglang/"
    raise OverlayError(
        f"{src} does not mirror the sglang package tree",
        fix="lay the files out as in site-packages (sglang/srt/...) or as in the sglang package (srt/...)",
    )


def patched_entry(rel: str, base: bytes, new: bytes) -> tuple[PatchedFile, str]:
    try:
        old_text, new_text = base.decode("utf-8"), new.decode("utf-8")
    except UnicodeDecodeError:
        raise OverlayError(f"{rel} is not UTF-8 text; binary patches are not supported") from None
    patch = make_patch(old_text, new_text, rel)
    try:
        if apply_patch(old_text, patch, label=rel).encode("utf-8") != new:
            raise PatchError("round trip differs")
    except PatchError as exc:  # pragma: no cover - make_patch/apply_patch disagree
        raise OverlayError(f"{rel}: cannot express the change as an exact patch ({exc})") from None
    return PatchedFile(rel, patch_name(rel), sha256_bytes(base), sha256_bytes(new)), patch


IMPORT_MARKER = (
    ".ddtctl-import"  # written into every payload `overlay import` makes: the only kind --force replaces
)


def _check_out(src: Path, out: Path, force: bool) -> str:
    """Refuse an --out that overlaps the source or holds anything ddtctl did not write (issue #14: `--out SRC
    --force` deleted SRC, an --out above SRC deleted it with its parent). Returns the out dir's state."""

    src_r, out_r = src.resolve(), out.resolve()
    if out_r == src_r or out_r in src_r.parents or src_r in out_r.parents:
        raise OverlayError(
            f"--out {out} overlaps the source directory {src}",
            fix="write the payload to a directory outside the source tree",
        )
    state = owned_dir_state(out, IMPORT_MARKER)
    if state == "foreign":
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise OverlayError(f"--out {out} is not a directory", fix="choose another --out")
        if not force:
            raise OverlayError(f"{out} exists and is not empty", fix="choose another --out or pass --force")
        raise OverlayError(
            f"{out} is not empty and was not written by `ddtctl overlay import`; --force replaces only "
            "a payload it imported",
            fix="choose a new or empty --out",
        )
    if state == "owned" and not force:
        raise OverlayError(f"{out} exists and is not empty", fix="choose another --out or pass --force")
    return state


def _source_files(src: Path) -> list[tuple[Path, str]]:
    """Each file to import, with its path in site-packages; refuses symlinks, special files, unsafe names."""
    prefix = _mirror_prefix(src)
    sources = []
    for f in sorted(src.rglob("*")):
        rel_parts = f.relative_to(src).parts
        if any(p in _SKIP_DIRS for p in rel_parts) or f.name.endswith(_SKIP_SUFFIXES):
            continue
        if f.is_symlink():
            raise OverlayError(f"{f} is a symlink; import real files only")
        if f.is_dir():
            continue
        if not f.is_file():
            raise OverlayError(
                f"{f} is not a regular file (a FIFO, socket or device); import real files only"
            )
        # the names build and the installer accept, checked before anything is written (issue #14)
        sources.append((f, check_rel(prefix + "/".join(rel_parts), f"{src}: file {f.relative_to(src)!s}")))
    return sources


def _stage_file(
    f: Path, rel: str, sglang_root: Path, record: dict[str, str], m: SourceManifest, result: ImportResult
) -> None:
    """One hand-patched file into the staged payload: a patch against its pristine counterpart, or an added
    file when SGLang has none; a file equal to its pristine counterpart is only counted."""
    new = read_file(f)
    pristine_path = sglang_root / rel
    if not pristine_path.is_file():
        dst = m.root / "files" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dst)
        m.added.append(AddedFile(rel, f"files/{rel}", sha256_bytes(new)))
        result.added.append(rel)
        return
    base = read_file(pristine_path)
    if record and rel in record and record[rel] != sha256_bytes(base):
        raise OverlayError(
            f"{rel} in {sglang_root} is not the pristine sglang {m.sglang} file "
            "(its sha256 differs from the release's RECORD)",
            fix="import against a pristine SGLang install (the managed env)",
        )
    if base == new:
        result.unchanged.append(rel)
        return
    entry, patch = patched_entry(rel, base, new)
    write_new(m.root / entry.patch, patch)
    m.patched.append(entry)
    changed = sum(1 for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    result.patched.append(
        {
            "path": rel,
            "base_sha256": entry.base_sha256,
            "result_sha256": entry.result_sha256,
            "lines_changed": changed,
        }
    )


def import_dir(
    src: str | Path,
    *,
    out: str | Path,
    sglang: str = "0.5.23",
    sglang_root: str | Path | None = None,
    python: str | Path | None = None,
    name: str = "ddtree-sglang-imported",
    version: str = "0.0.1",
    force: bool = False,
) -> ImportResult:
    """Write the payload into a fresh directory beside --out, then swap it in: a failed import leaves --out as
    it was, and only an empty --out or one an earlier import wrote (IMPORT_MARKER) is ever replaced."""
    import json
    import os
    import tempfile

    src = Path(src).expanduser()
    if not src.is_dir():
        raise OverlayError(f"{src} is not a directory")
    out = Path(out).expanduser()
    state = _check_out(src, out, force)
    target = resolve_target(sglang, sglang_root, python)
    if target.sglang_version and target.sglang_version != sglang:
        raise OverlayError(f"{target.sglang_root} has sglang {target.sglang_version}, not {sglang}")
    record = record_hashes(target.sglang_root, sglang)
    sources = _source_files(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.import-", dir=out.parent))
    try:
        (stage / "patches").mkdir()
        result = ImportResult(payload_dir=out)
        m = SourceManifest(
            root=stage,
            name=name,
            version=version,
            sglang=sglang,
            summary=f"imported from {src} by `ddtctl overlay import`",
            smoke=list(DEFAULT_SMOKE),
        )
        for f, rel in sources:
            _stage_file(f, rel, target.sglang_root, record, m, result)
        if not m.patched and not m.added:
            raise OverlayError(f"nothing to import: every file in {src} equals its pristine counterpart")
        m.write()
        write_new(
            stage / IMPORT_MARKER, json.dumps({"made_by": "ddtctl overlay import", "source": str(src)}) + "\n"
        )
        old = None
        if state != "absent":  # empty, or an earlier import (checked above, again just before the swap)
            if _check_out(src, out, force) != state:
                raise OverlayError(f"{out} changed during the import; nothing replaced")
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
        os.replace(stage, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return result


@dataclass
class ManifestReport:
    path: Path
    stale: list[str] = field(default_factory=list)  # entries whose recorded hash differs from the sources
    updated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"manifest": str(self.path), "stale": self.stale, "updated": self.updated}


def check_manifest(
    payload_dir: str | Path | None = None,
    *,
    sglang_root: str | Path | None = None,
    python: str | Path | None = None,
    update: bool = False,
) -> ManifestReport:
    """Compare the manifest's pinned hashes with the sources (and, for patches, with base + patch); optionally
    rewrite them. Added files pulled from ddtctl (`ddtctl:...`) are hashed at build time and never pinned."""
    m = load_source_manifest(payload_dir)
    report = ManifestReport(path=m.path)
    for a in m.added:
        if a.tree or a.source.startswith("ddtctl:"):
            continue
        src = m.source_path(a)
        have = sha256_bytes(read_file(src)) if src.is_file() else None
        if have != a.sha256:
            report.stale.append(a.path)
            a.sha256 = have
    if m.patched:
        target = None
        for p in m.patched:
            if target is None:
                target = resolve_target(m.sglang, sglang_root, python)
            base = read_file(target.sglang_root / p.path)
            record = record_hashes(target.sglang_root, m.sglang)
            if record.get(p.path) not in (None, sha256_bytes(base)):
                raise OverlayError(
                    f"{p.path} in {target.sglang_root} is not the pristine sglang {m.sglang} file "
                    "(its sha256 differs from the release's RECORD)"
                )
            try:
                result = apply_patch(
                    base.decode("utf-8"), read_file_text(m.patch_path(p)), label=p.path
                ).encode("utf-8")
            except PatchError as exc:
                raise OverlayError(str(exc), where=str(m.patch_path(p))) from None
            base_sha, result_sha = sha256_bytes(base), sha256_bytes(result)
            if (base_sha, result_sha) != (p.base_sha256, p.result_sha256):
                report.stale.append(p.path)
                p.base_sha256, p.result_sha256 = base_sha, result_sha
    if update and report.stale:
        m.write()
        report.updated = True
    return report


__all__ = [
    "import_dir",
    "check_manifest",
    "record_hashes",
    "ImportResult",
    "ManifestReport",
    "FORMAT",
    "MANIFEST",
]
