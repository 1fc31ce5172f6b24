"""Payload sources: the manifest in the repo (or written by `ddtctl overlay import`) and what it points at.

A payload source directory holds `manifest.json`:

    {"format": 1, "name": "ddtree-sglang", "version": "0.1.0", "sglang": "0.5.23", "summary": "...",
     "patched": [{"path": "sglang/srt/arg_groups/fields/spec.py",          # relative to site-packages
                  "patch": "patches/sglang__srt__arg_groups__fields__spec.py.patch",
                  "base_sha256": "<pristine file>", "result_sha256": "<patched file>"}],
     "added":   [{"path": "ddtree_sglang/plugin.py", "source": "files/ddtree_sglang/plugin.py",
                  "sha256": "..."},
                 {"path": "ddtree_sglang/rules_core.py", "source": "ddtctl:rules/ddtree/core.py"},
                 {"path": "ddtree_sglang/kernels", "source": "ddtctl:kernels", "tree": true,
                  "optional": true}],
     "smoke":   [{"id": "registered", "what": "..."}, ...]}

`source` is relative to the payload directory, or `ddtctl:<path>` for a file (or, with "tree": true, a
package directory) of the ddtctl package itself, copied at build time: that is how the payload ships the
one copy of the DDTREE rules and the kernels. `sha256` of an added file is optional; when present, build
refuses a source that differs. `rewrite` ({"ddtctl.kernels": "ddtree_sglang.kernels"}) renames absolute
imports in the copied .py files, for ddtctl modules that live under another package name inside SGLang's
environment (ddtctl itself is not installed there).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ddtctl.errors import OverlayError
from ddtctl.safeio import load_json, read_regular, read_text, write_new

FORMAT = 1
MANIFEST = "manifest.json"
PAYLOADS_DIR = Path(__file__).resolve().parent.parent / "payload"
DEFAULT_PAYLOAD = "ddtree-sglang-0.5.23"
DDTCTL_ROOT = Path(__file__).resolve().parent.parent
_TREE_SKIP = {"__pycache__"}


def rewrite_imports(text: str, rewrite: dict[str, str]) -> str:
    """Rename dotted module prefixes (whole dotted names only):
    ddtctl.kernels.x -> ddtree_sglang.kernels.x."""
    for old, new in rewrite.items():
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w])", new, text)
    return text


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MAX_FILE_BYTES = 64 << 20  # one source file, patch or manifest of a payload (SGLang's largest is ~0.5 MB)


def read_file(path: str | Path) -> bytes:
    """A payload or SGLang file: regular, at most MAX_FILE_BYTES (safeio.read_regular), else OverlayError."""
    return read_regular(path, MAX_FILE_BYTES, error=OverlayError, what="payload source")


def read_file_text(path: str | Path) -> str:
    return read_text(path, MAX_FILE_BYTES, error=OverlayError, what="payload source")


def load_built_manifest(path: str | Path) -> dict[str, Any]:
    """A built payload's manifest (JSON object with "sglang"), bounded; OverlayError otherwise."""
    data = load_json(path, MAX_FILE_BYTES, what="built payload manifest", error=OverlayError)
    if not isinstance(data, dict) or not isinstance(data.get("sglang"), str):
        raise OverlayError("not a built payload manifest (a JSON object naming its sglang)", where=str(path))
    return data


def sha256_file(path: Path) -> str:
    return sha256_bytes(read_file(path))


def default_payload_dir() -> Path:
    return PAYLOADS_DIR / DEFAULT_PAYLOAD


_UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")  # control characters (newline, NUL, ...) and backslash


def check_rel(path: str, where: str) -> str:
    """A relative POSIX path with no empty, `.` or `..` part, no backslash and no control character (import,
    build and the installer all accept exactly these)."""
    if not isinstance(path, str):
        raise OverlayError(
            f"unsafe path {path!r}", where=where, fix="use a relative path inside site-packages"
        )
    p = PurePosixPath(path)
    if (
        not path
        or p.is_absolute()
        or any(part in ("", ".", "..") for part in path.split("/"))
        or _UNSAFE_CHARS.search(path)
    ):
        raise OverlayError(
            f"unsafe path {path!r}", where=where, fix="use a relative path inside site-packages"
        )
    return path


def confined(root: Path, rel: str, where: str) -> Path:
    """root/rel for a manifest's own file (a patch, an added source): a safe relative path that does not leave
    the payload directory, through symlinks either."""
    check_rel(rel, where)
    base = root.resolve()
    full = (base / rel).resolve()
    if full != base and base not in full.parents:
        raise OverlayError(
            f"unsafe path {rel!r}: it leaves the payload directory {root}",
            where=where,
            fix="keep patches and sources inside the payload directory",
        )
    return root / rel


@dataclass
class PatchedFile:
    path: str
    patch: str
    base_sha256: str
    result_sha256: str


@dataclass
class AddedFile:
    path: str
    source: str
    sha256: str | None = None
    tree: bool = False
    optional: bool = False
    rewrite: dict[str, str] = field(
        default_factory=dict
    )  # module prefix -> its name inside the payload (.py only)


@dataclass
class SourceManifest:
    root: Path
    name: str
    version: str
    sglang: str
    summary: str = ""
    patched: list[PatchedFile] = field(default_factory=list)
    added: list[AddedFile] = field(default_factory=list)
    smoke: list[dict[str, Any]] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.root / MANIFEST

    def to_json(self) -> dict[str, Any]:
        def added(a: AddedFile) -> dict[str, Any]:
            d: dict[str, Any] = {"path": a.path, "source": a.source}
            if a.sha256:
                d["sha256"] = a.sha256
            if a.tree:
                d["tree"] = True
            if a.optional:
                d["optional"] = True
            if a.rewrite:
                d["rewrite"] = dict(a.rewrite)
            return d

        return {
            "format": FORMAT,
            "name": self.name,
            "version": self.version,
            "sglang": self.sglang,
            "summary": self.summary,
            "patched": [vars(p) for p in self.patched],
            "added": [added(a) for a in self.added],
            "smoke": self.smoke,
        }

    def write(self) -> None:
        write_new(self.path, json.dumps(self.to_json(), indent=2) + "\n")

    def source_path(self, a: AddedFile) -> Path:
        if a.source.startswith("ddtctl:"):
            rel = check_rel(a.source[len("ddtctl:") :].rstrip("/"), f"{self.path}: added {a.path}")
            return DDTCTL_ROOT / rel
        return confined(self.root, a.source, f"{self.path}: added {a.path}")

    def patch_path(self, p: PatchedFile) -> Path:
        return confined(self.root, p.patch, f"{self.path}: patch of {p.path}")

    def expand_added(self) -> list[tuple[str, Path, AddedFile]]:
        """(installed path, source file, entry) for every added file, directories expanded. Missing optional
        sources are skipped; missing required ones are an error."""
        out: list[tuple[str, Path, AddedFile]] = []
        for a in self.added:
            src = self.source_path(a)
            if a.tree:
                if not src.is_dir():
                    if a.optional:
                        continue
                    raise OverlayError(f"added tree {a.source} does not exist", where=str(self.path))
                for f in sorted(src.rglob("*")):
                    rel_parts = f.relative_to(src).parts
                    if f.is_dir() or any(p in _TREE_SKIP for p in rel_parts) or f.suffix in (".pyc", ".pyo"):
                        continue
                    out.append((f"{a.path}/{'/'.join(rel_parts)}", f, a))
            else:
                if not src.is_file():
                    if a.optional:
                        continue
                    raise OverlayError(f"added file source {a.source} does not exist", where=str(self.path))
                out.append((a.path, src, a))
        return out

    def fingerprint(self) -> str:
        """Hash of everything a build reads from the payload side (manifest, patches, added sources)."""
        h = hashlib.sha256()
        h.update(read_file(self.path))
        for p in self.patched:
            h.update(p.path.encode() + b"\0" + read_file(self.patch_path(p)))
        for rel, src, _ in self.expand_added():
            h.update(rel.encode() + b"\0" + read_file(src))
        return h.hexdigest()


def load_source_manifest(payload_dir: str | Path | None = None) -> SourceManifest:
    root = Path(payload_dir) if payload_dir else default_payload_dir()
    path = root / MANIFEST
    try:
        if not path.exists() and not path.is_symlink():
            raise FileNotFoundError(path)
        data = load_json(path, MAX_FILE_BYTES, what="payload manifest", error=OverlayError)
    except FileNotFoundError:
        raise OverlayError(
            f"no {MANIFEST} in {root}", fix="pass a payload directory (see `ddtctl overlay import`)"
        ) from None
    except (OSError, ValueError) as exc:
        raise OverlayError(f"cannot read the payload manifest: {exc}", where=str(path)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise OverlayError(
            f"unsupported manifest format {data.get('format') if isinstance(data, dict) else None!r}",
            where=str(path),
            fix=f"expected format {FORMAT}",
        )
    try:
        m = SourceManifest(
            root=root,
            name=str(data["name"]),
            version=str(data["version"]),
            sglang=str(data["sglang"]),
            summary=str(data.get("summary", "")),
            patched=[
                PatchedFile(check_rel(p["path"], str(path)), p["patch"], p["base_sha256"], p["result_sha256"])
                for p in data.get("patched", [])
            ],  # each `patch` is confined to the payload dir just below
            added=[
                AddedFile(
                    check_rel(a["path"], str(path)),
                    a["source"],
                    a.get("sha256"),
                    bool(a.get("tree")),
                    bool(a.get("optional")),
                    dict(a.get("rewrite") or {}),
                )
                for a in data.get("added", [])
            ],
            smoke=list(data.get("smoke", [])),
        )
    except (KeyError, TypeError) as exc:
        raise OverlayError(f"malformed manifest entry: missing {exc}", where=str(path)) from None
    for p in m.patched:
        m.patch_path(p)  # a patch is the payload's own file: never outside its directory (issue #14)
    seen: set[str] = set()
    for rel in [x.path for x in m.patched] + [x.path for x in m.added]:
        if rel in seen:
            raise OverlayError(f"{rel} is listed twice", where=str(path))
        seen.add(rel)
    return m


def patch_name(rel: str) -> str:
    return "patches/" + rel.replace("/", "__") + ".patch"


def payload_id(name: str, version: str, sglang: str, files: list[dict[str, Any]]) -> str:
    listing = sorted((f["path"], f["kind"], f["sha256"], f.get("base_sha256") or "") for f in files)
    blob = json.dumps({"name": name, "version": version, "sglang": sglang, "files": listing}, sort_keys=True)
    return sha256_bytes(blob.encode())
