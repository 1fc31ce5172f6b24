"""What deploy ships: a directory of files described by a manifest (relative path -> sha256, size, mode).

Remote storage is content-addressed (store/<sha256>), so shipping = uploading the objects the host lacks, verifying
each one's sha256 on the host, and materializing the release tree from the store. Unchanged files cost nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ddtctl.errors import OverlayError, RemoteError
from ddtctl.remote.transport import Connection, ConnectionLost

SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache"}
SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int
    mode: int = 0o644


@dataclass
class Manifest:
    """Files of one tree, keyed by POSIX relative path."""

    root: Path | None
    files: dict[str, FileEntry] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """One hash for the whole tree (paths, contents and modes)."""
        h = hashlib.sha256()
        for rel in sorted(self.files):
            e = self.files[rel]
            h.update(f"{rel}\0{e.sha256}\0{e.mode:o}\n".encode())
        return h.hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files.values())

    def to_json(self) -> dict:
        return {"digest": self.digest,
                "files": {k: {"sha256": v.sha256, "size": v.size, "mode": v.mode} for k, v in sorted(self.files.items())}}

    def path_of(self, rel: str) -> Path:
        assert self.root is not None
        return self.root / rel


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_manifest(root: str | os.PathLike, *, expected: dict[str, str] | None = None) -> Manifest:
    """Hash every regular file under root. Symlinks and special files are refused (they could escape the root).
    `expected` (rel -> sha256, e.g. a payload's own manifest) must match exactly: that is the payload verification."""
    root = Path(root)
    if not root.is_dir():
        raise OverlayError("payload directory not found", where=str(root))
    files: dict[str, FileEntry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(SKIP_SUFFIXES):
                continue
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
                raise OverlayError(f"payload holds a non-regular file (symlink or special): {rel}", where=str(root),
                                   fix="payloads are plain files only")
            files[rel] = FileEntry(sha256_file(p), st.st_size, 0o755 if st.st_mode & 0o111 else 0o644)
    if expected is not None:
        got = {k: v.sha256 for k, v in files.items()}
        if got != expected:
            bad = sorted(set(got) ^ set(expected)) or sorted(k for k in got if got[k] != expected.get(k))
            raise OverlayError(f"payload does not match its manifest ({len(bad)} file(s), e.g. {bad[0]})",
                               where=str(root), fix="rebuild the payload (ddtctl overlay build)")
    return Manifest(root, files)


def manifest_from_files(files: dict[str, Path]) -> Manifest:
    """A manifest for loose files (e.g. tools: installer.py, the resolver worker) under chosen names."""
    m = Manifest(None, {})
    m._paths = {}  # type: ignore[attr-defined]
    for rel, path in files.items():
        p = Path(path)
        m.files[rel] = FileEntry(sha256_file(p), p.stat().st_size, 0o644)
        m._paths[rel] = p  # type: ignore[attr-defined]
    return m


def local_path(m: Manifest, rel: str) -> Path:
    paths = getattr(m, "_paths", None)
    if paths and rel in paths:
        return paths[rel]
    return m.path_of(rel)


@dataclass
class ShipResult:
    files_total: int
    files_sent: int
    bytes_sent: int
    objects_missing: int
    verified: int
    skipped: int

    def to_json(self) -> dict:
        return self.__dict__.copy()


def missing_objects(conn: Connection, manifests: list[Manifest]) -> tuple[set[str], str]:
    """The sha256 objects the host's store lacks (read-only query)."""
    hashes = sorted({e.sha256 for m in manifests for e in m.files.values()})
    res = conn.agent("missing", {"hashes": hashes}, retry=True)
    return set(res["missing"]), res["incoming"]


PARALLEL_MIN_BYTES = 8 << 20  # below this, one SFTP channel is faster than opening more


def ship(conn: Connection, manifests: list[Manifest], *, missing: set[str] | None = None, incoming: str | None = None,
         on_progress: Callable[[str, int, int], None] | None = None, workers: int = 4,
         then: list[tuple[str, dict]] = ()) -> ShipResult:  # type: ignore[assignment]
    """Upload objects the host lacks over SFTP (parallel channels), then verify them (sha256 computed on the host)
    and move them into the store. A dropped connection leaves only unverified files in incoming/: the store, the
    releases and the running server are untouched."""
    if missing is None or incoming is None:
        missing, incoming = missing_objects(conn, manifests)
    sources: dict[str, tuple[Path, int]] = {}
    total_files = 0
    for m in manifests:
        for rel, e in m.files.items():
            total_files += 1
            if e.sha256 in missing and e.sha256 not in sources:
                sources[e.sha256] = (local_path(m, rel), e.size)
    # re-check local content right before sending: what we hash is what we ship
    todo = sorted(sources.items(), key=lambda kv: -kv[1][1])
    nonce = uuid.uuid4().hex[:8]
    uploads = {f"{sha}.{nonce}": sha for sha, _ in todo}
    sent_bytes = 0
    done = 0
    if todo:
        transport = conn.client.get_transport() if conn.client else None
        if transport is None:
            raise ConnectionLost("not connected", where=conn.host.name)

        n = max(1, min(workers, len(todo)))
        if sum(size for _, (_, size) in todo) < PARALLEL_MIN_BYTES:
            n = 1

        def _put(item: tuple[str, tuple[Path, int]]) -> int:
            sha, (path, size) = item
            sftp = conn.sftp() if n == 1 else _thread_sftp(conn)
            remote = f"{incoming}/{sha}.{nonce}"
            with open(path, "rb") as src, sftp.open(remote, "wb") as dst:
                dst.set_pipelined(True)
                while chunk := src.read(1 << 18):
                    dst.write(chunk)
            return size

        try:
            with ThreadPoolExecutor(n) as pool:
                for size in pool.map(_put, todo):
                    sent_bytes += size
                    done += 1
                    if on_progress:
                        on_progress("upload", done, len(todo))
        except (OSError, EOFError, Exception) as err:
            if isinstance(err, RemoteError):
                raise
            if not conn.alive or isinstance(err, EOFError) or "closed" in str(err).lower() or \
                    type(err).__name__ in ("SSHException", "socket.timeout"):
                raise ConnectionLost(f"connection lost while shipping ({done}/{len(todo)} files sent): {err}",
                                     where=conn.host.name,
                                     fix="re-run the deploy; files already verified on the host are not sent again") \
                    from None
            raise RemoteError(f"upload failed: {err}", where=conn.host.name) from None
        finally:
            _close_thread_sftps(conn)
    verified = 0
    ops = ([("commit", {"files": uploads})] if uploads else []) + list(then)
    if ops:
        results = conn.agent("batch", {"ops": ops, "lock_token": getattr(conn, "lock_token", None)})
        res = results[0] if uploads else {"bad": [], "stored": []}
        if res["bad"]:
            first = res["bad"][0]
            raise RemoteError(f"{len(res['bad'])} uploaded file(s) failed sha256 verification on the host "
                              f"(e.g. {first['name'][:12]}: {first['reason']})", where=conn.host.name,
                              fix="re-run the deploy; corrupted uploads were deleted")
        verified = len(res["stored"])
    return ShipResult(files_total=total_files, files_sent=len(todo), bytes_sent=sent_bytes,
                      objects_missing=len(missing), verified=verified, skipped=total_files - len(todo))


def _thread_sftp(conn: Connection):
    import threading

    pool = conn.__dict__.setdefault("_ship_sftps", {})
    key = threading.get_ident()
    if key not in pool:
        sftp = conn.client.open_sftp()  # type: ignore[union-attr]
        sftp.get_channel().settimeout(conn.host.command_timeout_s)
        pool[key] = sftp
    return pool[key]


def _close_thread_sftps(conn: Connection) -> None:
    for sftp in conn.__dict__.pop("_ship_sftps", {}).values():
        try:
            sftp.close()
        except Exception:
            pass


def manifest_json(m: Manifest) -> str:
    return json.dumps(m.to_json(), sort_keys=True)
