"""What deploy ships: a directory of files described by a manifest (relative path -> sha256, size, mode).

Remote storage is content-addressed (store/<sha256>), so shipping = uploading the objects the host lacks,
verifying each one's sha256 on the host, and materializing the release tree from the store. Unchanged files
cost nothing.
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
from typing import Callable, Sequence

import paramiko

from ddtctl.errors import DdtctlError, OverlayError, RemoteError
from ddtctl.overlay.installer import sha256_file  # the same hashing the host-side installer does
from ddtctl.remote.protocol import CommitStream, Request, ShipReply
from ddtctl.remote.transport import CommandResult, Connection, ConnectionLost, parse_agent_reply

SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache"}
SKIP_SUFFIXES = (".pyc", ".pyo")
DISK_FULL_BYTES = 1 << 20  # below this much free space after a failed verification, the disk is full


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
    # loose files gathered from several places (manifest_from_files): relative path -> local file
    sources: dict[str, Path] = field(default_factory=dict)

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
        return {
            "digest": self.digest,
            "files": {
                k: {"sha256": v.sha256, "size": v.size, "mode": v.mode} for k, v in sorted(self.files.items())
            },
        }

    def path_of(self, rel: str) -> Path:
        """The local file behind `rel`."""
        if rel in self.sources:
            return self.sources[rel]
        assert self.root is not None, f"{rel} has no local file in this manifest"
        return self.root / rel


def build_manifest(root: str | os.PathLike, *, expected: dict[str, str] | None = None) -> Manifest:
    """Hash every regular file under root. Symlinks and special files are refused (they could escape the
    root). `expected` (rel -> sha256, e.g. a payload's own manifest) must match exactly: that is the payload
    verification."""
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
                raise OverlayError(
                    f"payload holds a non-regular file (symlink or special): {rel}",
                    where=str(root),
                    fix="payloads are plain files only",
                )
            files[rel] = FileEntry(sha256_file(str(p)), st.st_size, 0o755 if st.st_mode & 0o111 else 0o644)
    if expected is not None:
        got = {k: v.sha256 for k, v in files.items()}
        if got != expected:
            bad = sorted(set(got) ^ set(expected)) or sorted(k for k in got if got[k] != expected.get(k))
            raise OverlayError(
                f"payload does not match its manifest ({len(bad)} file(s), e.g. {bad[0]})",
                where=str(root),
                fix="rebuild the payload (ddtctl overlay build)",
            )
    return Manifest(root, files)


def manifest_from_files(files: dict[str, Path]) -> Manifest:
    """A manifest for loose files (e.g. tools: installer.py, the resolver worker) under chosen names."""
    m = Manifest(None)
    for rel, path in files.items():
        p = Path(path)
        m.files[rel] = FileEntry(sha256_file(str(p)), p.stat().st_size, 0o644)
        m.sources[rel] = p
    return m


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
            raise RemoteError(
                f"cannot use the work dir {wd}: {err}",
                where=conn.host.name,
                fix="set work_dir to a writable directory in the inventory",
            ) from None
        raise ConnectionLost(
            f"connection lost while listing the store: {err}", where=conn.host.name
        ) from None
    return StoreListing(wd, stored, leftovers)


def missing_objects(listing: StoreListing, manifests: list[Manifest]) -> set[str]:
    return {e.sha256 for m in manifests for e in m.files.values()} - listing.stored


PARALLEL_MIN_BYTES = 8 << 20  # below this, one SFTP channel is faster than opening more
PARALLEL_MIN_FILES = 64  # ... unless there are this many files' worth of round trips to overlap
RANGE_MIN_BYTES = (
    16 << 20
)  # files this big go up as ranges over several channels (paramiko is per-channel bound)
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


class _Verifier:
    """The host's verifier (the agent's commit_stream), started before the uploads: told each completed upload
    (`NAME SHA256`), then END; its reply holds the commit and the results of the `then` operations."""

    def __init__(self, conn: Connection, request: CommitStream):
        self.conn = conn
        self.request = request
        self.chan, handshake = conn.open_agent_stream(request.OP.value, request.params())
        self.chan.settimeout(conn.host.command_timeout_s)
        pool = ThreadPoolExecutor(1)
        self.handshake = pool.submit(handshake)  # uploads start without waiting for the verifier to be up
        pool.shutdown(wait=False)
        self.pending: list[bytes] = []

    def tell(self, line: str, *, wait: bool = False) -> None:
        """Queue a line for the verifier; send what is queued once it is up (or wait for it)."""
        self.pending.append(line.encode())
        if wait or self.handshake.done():
            self.handshake.result()
            self.chan.sendall(b"".join(self.pending))
            self.pending.clear()

    def finish(self) -> bytes:
        """END, then everything the verifier printed."""
        self.tell("END\n", wait=True)
        self.chan.shutdown_write()
        out = bytearray()
        while data := self.chan.recv(65536):
            out += data
        return bytes(out)

    def reply(self, out: bytes) -> ShipReply:
        chan = self.chan
        err_text = chan.recv_stderr(65536).decode(errors="replace") if chan.recv_stderr_ready() else ""
        rc = chan.recv_exit_status() if chan.status_event.wait(10) else -1
        chan.close()
        result = CommandResult([self.request.OP.value], rc, out.decode(errors="replace"), err_text)
        return self.request.parse(parse_agent_reply(result, "ship", self.conn.host.name))

    def close(self) -> None:
        self.chan.close()


@dataclass
class _Uploads:
    """What one ship sends: the objects to upload, the complete leftovers reused, and every upload's name."""

    total_files: int
    missing: set[str]
    todo: list[tuple[str, tuple[Path, int]]]  # (sha256, (local file, size)), biggest first
    names: dict[str, str]  # file name in incoming/ -> sha256 (reused leftovers keep their name)
    reused: int
    nonce: str  # this ship's suffix of fresh upload names

    def fresh(self, name: str) -> bool:
        return name.endswith(f".{self.nonce}")


def _uploads(manifests: list[Manifest], listing: StoreListing) -> _Uploads:
    missing = missing_objects(listing, manifests)
    sources: dict[str, tuple[Path, int]] = {}
    total_files = 0
    for m in manifests:
        for rel, e in m.files.items():
            total_files += 1
            if e.sha256 in missing and e.sha256 not in sources:
                sources[e.sha256] = (m.path_of(rel), e.size)
    up = _Uploads(total_files, missing, [], {}, 0, uuid.uuid4().hex[:8])
    for sha, (path, size) in sorted(sources.items(), key=lambda kv: -kv[1][1]):
        left = listing.leftovers.get(sha)
        if left and left[1] == size:
            up.names[left[0]] = sha  # verified on the host like any upload
            up.reused += 1
        else:
            up.todo.append((sha, (path, size)))
            up.names[f"{sha}.{up.nonce}"] = sha
    return up


Job = tuple[str, Path, int, int, int]  # sha256, local file, its size, offset, length


class _Uploader:
    """Upload jobs over SFTP channels: the connection's own, and more opened only while all are busy."""

    def __init__(self, conn: Connection, incoming: str, nonce: str, jobs: list[Job]):
        self.conn = conn
        self.incoming = incoming
        self.nonce = nonce
        # how many jobs (ranges) of each object are still to send
        self.remaining = {sha: sum(1 for j in jobs if j[0] == sha) for sha, *_ in jobs}
        self.count_lock = threading.Lock()
        self.clients: queue.SimpleQueue = queue.SimpleQueue()
        self.clients.put(conn.sftp())
        self.opened: list[paramiko.SFTPClient] = []
        for sha, _path, size, offset, length in jobs:
            if length != size and offset == 0:  # ranged upload: create the full-size file once, up front
                with conn.sftp().open(self.remote(sha), "wb") as f:
                    f.truncate(size)

    def remote(self, sha: str) -> str:
        return f"{self.incoming}/{sha}.{self.nonce}"

    def put(self, job: Job) -> tuple[str, int, bool]:
        """(sha256, bytes sent, whether the object is now complete)."""
        try:
            sftp = self.clients.get_nowait()
        except queue.Empty:
            # the client is set: ship() runs on an open connection
            sftp = self.conn.client.open_sftp()  # type: ignore[union-attr]
            channel = sftp.get_channel()
            assert channel is not None  # open_sftp() opens its channel
            channel.settimeout(self.conn.host.command_timeout_s)
            self.opened.append(sftp)
        try:
            self._send(sftp, job)
        finally:
            self.clients.put(sftp)
        sha, _path, _size, _offset, length = job
        with self.count_lock:
            self.remaining[sha] -= 1
            return sha, length, self.remaining[sha] == 0

    def _send(self, sftp: paramiko.SFTPClient, job: Job) -> None:
        sha, path, size, offset, length = job
        before = os.stat(path)
        h = hashlib.sha256() if length == size else None
        with open(path, "rb") as src, sftp.open(self.remote(sha), "wb" if h else "r+b") as dst:
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
        if h:
            changed = h.hexdigest() != sha
        else:  # a range: the file must not have changed while it was read
            stamp = (before.st_mtime_ns, before.st_size)
            changed = stamp != (after.st_mtime_ns, after.st_size) or after.st_size != size
        if changed:  # what was planned is not what was sent: the local file changed meanwhile
            raise OverlayError(
                f"{path} changed while it was being deployed (planned sha256 {sha[:12]})",
                fix="re-run the deploy once the file is stable",
            )

    def close(self) -> None:
        for extra in self.opened:
            try:
                extra.close()
            except Exception:
                pass


@dataclass
class _Sent:
    bytes: int = 0
    objects: int = 0


def _upload_all(
    conn: Connection,
    listing: StoreListing,
    up: _Uploads,
    workers: int,
    verifier: _Verifier,
    on_progress: Callable[[str, int, int], None] | None,
    sent: _Sent,
) -> None:
    """Upload every object of `up.todo` (in parallel when it pays), telling the verifier as each completes."""
    jobs, n = _plan_uploads(up.todo, workers)
    uploader = _Uploader(conn, listing.incoming, up.nonce, jobs)
    try:
        with ThreadPoolExecutor(n) as pool:
            for sha, length, complete in pool.map(uploader.put, jobs):
                sent.bytes += length
                if complete:
                    verifier.tell(f"{sha}.{up.nonce} {sha}\n")
                    sent.objects += 1
                    if on_progress:
                        on_progress("upload", sent.objects, len(up.todo))
    finally:
        uploader.close()


def ship(
    conn: Connection,
    manifests: list[Manifest],
    *,
    listing: StoreListing | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    workers: int = 4,
    then: Sequence[Request] = (),
) -> ShipResult:
    """Upload the objects the host lacks over SFTP, then verify them (sha256 recomputed on the host, in the
    same round trip as `then`) and move them into the store. A dropped connection leaves only unverified files
    in incoming/: the store, the releases and the running server are untouched; a re-run reuses complete
    leftovers."""
    # the host's verifier process starts while the SFTP channel opens and the store is listed
    verifier = _Verifier(conn, CommitStream(tuple(then), conn.lock_token))
    try:
        if listing is None:
            listing = list_store(conn)
    except BaseException:
        verifier.close()
        raise
    up = _uploads(manifests, listing)
    if not up.names and not then:  # nothing to send or activate: the verifier stops at EOF without END
        verifier.close()
        return ShipResult(
            files_total=up.total_files,
            files_sent=0,
            bytes_sent=0,
            objects_missing=0,
            verified=0,
            skipped=up.total_files,
        )
    sent = _Sent()
    try:
        for name, sha in up.names.items():
            if not up.fresh(name):
                verifier.tell(f"{name} {sha}\n")  # reused leftovers: verified like fresh uploads
        if up.todo:
            _upload_all(conn, listing, up, workers, verifier, on_progress, sent)
        out = verifier.finish()
    except DdtctlError:
        verifier.close()
        raise
    except Exception as err:
        verifier.close()
        if conn.alive:  # the SFTP server refused (a full disk, permissions): not a lost connection
            raise RemoteError(
                f"an upload to the host failed ({sent.objects}/{len(up.todo)} files sent): "
                f"{err or type(err).__name__}",
                where=conn.host.name,
                fix=f"check the disk space and permissions of {listing.incoming} on the host, then re-run",
            ) from None
        raise ConnectionLost(
            f"connection lost while shipping ({sent.objects}/{len(up.todo)} files sent): "
            f"{err or type(err).__name__}",
            where=conn.host.name,
            fix="re-run the deploy; complete uploads are reused after verification",
        ) from None
    reply = verifier.reply(out)
    if reply.commit.bad:
        _refuse_bad_uploads(conn, reply, up, listing)
    return ShipResult(
        files_total=up.total_files,
        files_sent=len(up.todo),
        bytes_sent=sent.bytes,
        objects_missing=len(up.missing),
        verified=len(reply.commit.stored),
        skipped=up.total_files - len(up.todo),
        reused=up.reused,
    )


def _refuse_bad_uploads(conn: Connection, reply: ShipReply, up: _Uploads, listing: StoreListing) -> None:
    """Uploads that failed verification (deleted on the host): a full disk (the SFTP server's writes fell
    short) says so; anything else is corruption on the way."""
    bad = reply.commit.bad
    free = reply.commit.disk_free_bytes
    sizes = dict(up.todo)
    short_of = sum(sizes.get(up.names.get(b.name, ""), (None, 0))[1] for b in bad)
    if free is not None and free < max(short_of, DISK_FULL_BYTES):
        raise RemoteError(
            f"the host's disk is full: {len(bad)} upload(s) arrived truncated and were deleted "
            f"({free} bytes free where {short_of} were needed, in {listing.incoming.rsplit('/', 1)[0]})",
            where=conn.host.name,
            fix="free disk space in the host's work dir, then re-run the deploy (verified uploads are kept)",
        )
    if bad:
        first = bad[0]
        raise RemoteError(
            f"{len(reply.commit.bad)} uploaded file(s) failed sha256 verification on the host "
            f"(e.g. {first.name[:12]}: {first.reason})",
            where=conn.host.name,
            fix="re-run the deploy; corrupted uploads were deleted",
        )
