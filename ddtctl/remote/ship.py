"""What deploy ships: a directory of files described by a manifest (relative path -> sha256, size, mode).

Remote storage is content-addressed (store/<sha256>), so shipping = uploading the objects the host lacks, verifying
each one's sha256 on the host, and materializing the release tree from the store. Unchanged files cost nothing.
"""

from __future__ import annotations

import hashlib
import os
import queue
import stat
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ddtctl.errors import DdtctlError, OverlayError, RemoteError
from ddtctl.overlay.installer import sha256_file  # the same hashing the host-side installer does
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
                "files": {k: {"sha256": v.sha256, "size": v.size, "mode": v.mode}
                          for k, v in sorted(self.files.items())}}

    def path_of(self, rel: str) -> Path:
        assert self.root is not None
        return self.root / rel


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
    reused: int = 0  # complete uploads of an interrupted deploy, reused after verification

    def to_json(self) -> dict:
        return self.__dict__.copy()


@dataclass
class StoreListing:
    """What the host's store holds, read over SFTP (no remote process): verified objects, and complete-looking
    uploads an interrupted deploy left in incoming/ (reused, then verified like fresh ones)."""

    work_dir: str
    stored: set[str]
    leftovers: dict[str, tuple[str, int]]  # sha256 -> (file name in incoming/, size)

    @property
    def incoming(self) -> str:
        return f"{self.work_dir}/incoming"


def list_store(conn: Connection, work_dir: str | None = None) -> StoreListing:
    import paramiko

    wd = work_dir or conn.work_dir or conn._remote_work_dir()
    sftp = conn.sftp()
    try:
        try:
            stored = set(sftp.listdir(f"{wd}/store"))
        except FileNotFoundError:
            stored = set()
        leftovers: dict[str, tuple[str, int]] = {}
        try:
            for a in sftp.listdir_attr(f"{wd}/incoming"):
                sha = a.filename.split(".", 1)[0]
                if len(sha) == 64 and sha not in stored:
                    leftovers[sha] = (a.filename, int(a.st_size or 0))
        except FileNotFoundError:
            from ddtctl.remote.transport import _sftp_makedirs

            _sftp_makedirs(sftp, f"{wd}/incoming")
    except (OSError, EOFError, paramiko.SSHException) as err:
        if isinstance(err, PermissionError):
            raise RemoteError(f"cannot use the work dir {wd}: {err}", where=conn.host.name,
                              fix="set work_dir to a writable directory in the inventory") from None
        raise ConnectionLost(f"connection lost while listing the store: {err}", where=conn.host.name) from None
    return StoreListing(wd, stored, leftovers)


def missing_objects(listing: StoreListing, manifests: list[Manifest]) -> set[str]:
    return {e.sha256 for m in manifests for e in m.files.values()} - listing.stored


PARALLEL_MIN_BYTES = 8 << 20  # below this, one SFTP channel is faster than opening more
PARALLEL_MIN_FILES = 64  # ... unless there are this many files' worth of round trips to overlap
RANGE_MIN_BYTES = 16 << 20  # files this big go up as ranges over several channels (paramiko is per-channel bound)
RANGE_BYTES = 8 << 20


def _plan_uploads(todo: list[tuple[str, tuple[Path, int]]], workers: int) -> tuple[list, int]:
    """Upload jobs (sha, path, size, offset, length), biggest first, and how many SFTP channels to use."""
    total = sum(size for _, (_, size) in todo)
    largest = max(size for _, (_, size) in todo)
    parallel = total >= PARALLEL_MIN_BYTES and (len(todo) >= PARALLEL_MIN_FILES or largest >= RANGE_MIN_BYTES)
    n = max(1, min(workers, os.cpu_count() or 1)) if parallel else 1
    jobs = []
    for sha, (path, size) in todo:
        k = min(n, size // RANGE_BYTES) if (parallel and size >= RANGE_MIN_BYTES) else 1
        if k <= 1:
            jobs.append((sha, path, size, 0, size))
            continue
        step = -(-size // k)
        for i in range(k):
            jobs.append((sha, path, size, i * step, min(step, size - i * step)))
    jobs.sort(key=lambda j: (j[4] != j[2], j[4]), reverse=True)  # ranges of big files first, then by size
    return jobs, n


def ship(conn: Connection, manifests: list[Manifest], *, listing: StoreListing | None = None,
         on_progress: Callable[[str, int, int], None] | None = None, workers: int = 4,
         then: list[tuple[str, dict]] = ()) -> ShipResult:  # type: ignore[assignment]
    """Upload the objects the host lacks over SFTP, then verify them (sha256 recomputed on the host, in the same
    round trip as `then`) and move them into the store. A dropped connection leaves only unverified files in
    incoming/: the store, the releases and the running server are untouched; a re-run reuses complete leftovers."""
    # the host's verifier process starts while the SFTP channel opens and the store is listed
    argv_params = {"then": list(then), "lock_token": getattr(conn, "lock_token", None)}
    chan, handshake = conn.open_agent_stream("commit_stream", argv_params)
    chan.settimeout(conn.host.command_timeout_s)
    hs_pool = ThreadPoolExecutor(1)
    hs = hs_pool.submit(handshake)  # uploads start without waiting for the verifier to be up
    hs_pool.shutdown(wait=False)
    pending: list[bytes] = []

    def tell(line: str, *, wait: bool = False) -> None:
        """Queue a line for the verifier; send what is queued once it is up (or wait for it)."""
        pending.append(line.encode())
        if wait or hs.done():
            hs.result()
            chan.sendall(b"".join(pending))
            pending.clear()

    try:
        if listing is None:
            listing = list_store(conn)
    except BaseException:
        chan.close()
        raise
    missing = missing_objects(listing, manifests)
    sources: dict[str, tuple[Path, int]] = {}
    total_files = 0
    for m in manifests:
        for rel, e in m.files.items():
            total_files += 1
            if e.sha256 in missing and e.sha256 not in sources:
                sources[e.sha256] = (local_path(m, rel), e.size)
    nonce = uuid.uuid4().hex[:8]
    uploads: dict[str, str] = {}
    reused = 0
    todo = []
    for sha, (path, size) in sorted(sources.items(), key=lambda kv: -kv[1][1]):
        left = listing.leftovers.get(sha)
        if left and left[1] == size:
            uploads[left[0]] = sha  # verified on the host below like any upload
            reused += 1
        else:
            todo.append((sha, (path, size)))
            uploads[f"{sha}.{nonce}"] = sha
    incoming = listing.incoming
    sent_bytes = 0
    done = 0
    argv = ["commit_stream"]
    if not uploads and not then:  # nothing to send or activate: the verifier stops at EOF without END
        chan.close()
        return ShipResult(files_total=total_files, files_sent=0, bytes_sent=0, objects_missing=0, verified=0,
                          skipped=total_files)
    try:
        for name, sha in uploads.items():
            if not name.endswith(f".{nonce}"):
                tell(f"{name} {sha}\n")  # reused leftovers: verified like fresh uploads
        if todo:
            jobs, n = _plan_uploads(todo, workers)
            remaining = {sha: sum(1 for j in jobs if j[0] == sha) for sha, _ in todo}
            count_lock = threading.Lock()
            for sha, _path, size, offset, length in jobs:
                if length != size and offset == 0:  # ranged upload: create the full-size file once, up front
                    with conn.sftp().open(f"{incoming}/{sha}.{nonce}", "wb") as f:
                        f.truncate(size)

            clients: queue.SimpleQueue = queue.SimpleQueue()
            clients.put(conn.sftp())  # the open channel serves too; more are opened only when all are busy
            opened: list = []

            def _put(job: tuple[str, Path, int, int, int]) -> tuple[str, int, int, bool]:
                try:
                    sftp = clients.get_nowait()
                except queue.Empty:
                    sftp = conn.client.open_sftp()  # type: ignore[union-attr]
                    sftp.get_channel().settimeout(conn.host.command_timeout_s)
                    opened.append(sftp)
                try:
                    return _put_with(sftp, job)
                finally:
                    clients.put(sftp)

            def _put_with(sftp, job: tuple[str, Path, int, int, int]) -> tuple[str, int, int, bool]:
                sha, path, size, offset, length = job
                remote = f"{incoming}/{sha}.{nonce}"
                before = os.stat(path)
                h = hashlib.sha256() if length == size else None
                with open(path, "rb") as src, sftp.open(remote, "wb" if h else "r+b") as dst:
                    dst.set_pipelined(True)
                    src.seek(offset)
                    dst.seek(offset)
                    left = length
                    while left and (chunk := src.read(min(1 << 18, left))):
                        if h:
                            h.update(chunk)
                        dst.write(chunk)
                        left -= len(chunk)
                after = os.stat(path)
                changed = (h.hexdigest() != sha) if h else \
                    (before.st_mtime_ns, before.st_size) != (after.st_mtime_ns, after.st_size) or after.st_size != size
                if changed:  # what was planned is not what was sent: the local file changed meanwhile
                    raise OverlayError(f"{path} changed while it was being deployed (planned sha256 {sha[:12]})",
                                       fix="re-run the deploy once the file is stable")
                with count_lock:
                    remaining[sha] -= 1
                    last = remaining[sha] == 0
                return sha, size, length, last

            try:
                with ThreadPoolExecutor(n) as pool:
                    for sha, _size, length, last in pool.map(_put, jobs):
                        sent_bytes += length
                        if last:
                            tell(f"{sha}.{nonce} {sha}\n")
                            done += 1
                            if on_progress:
                                on_progress("upload", done, len(todo))
            finally:
                for extra in opened:
                    try:
                        extra.close()
                    except Exception:
                        pass
        tell("END\n", wait=True)
        chan.shutdown_write()
        out = bytearray()
        while True:
            data = chan.recv(65536)
            if not data:
                break
            out += data
    except DdtctlError:
        chan.close()
        raise
    except Exception as err:
        chan.close()
        raise ConnectionLost(f"connection lost while shipping ({done}/{len(todo)} files sent): "
                             f"{err or type(err).__name__}", where=conn.host.name,
                             fix="re-run the deploy; complete uploads are reused after verification") from None
    from ddtctl.remote.transport import CommandResult, parse_agent_reply

    err_text = chan.recv_stderr(65536).decode(errors="replace") if chan.recv_stderr_ready() else ""
    rc = chan.recv_exit_status() if chan.status_event.wait(10) else -1
    chan.close()
    results = parse_agent_reply(CommandResult(argv, rc, out.decode(errors="replace"), err_text), "ship",
                                conn.host.name)
    res = results[0]
    if res["bad"]:
        first = res["bad"][0]
        raise RemoteError(f"{len(res['bad'])} uploaded file(s) failed sha256 verification on the host "
                          f"(e.g. {first['name'][:12]}: {first['reason']})", where=conn.host.name,
                          fix="re-run the deploy; corrupted uploads were deleted")
    verified = len(res["stored"])
    return ShipResult(files_total=total_files, files_sent=len(todo), bytes_sent=sent_bytes,
                      objects_missing=len(missing), verified=verified, skipped=total_files - len(todo),
                      reused=reused)
