"""Reading and rewriting the user's files safely (issue #14).

`read_regular` reads a regular file only, and never more than a limit: a FIFO, a device (/dev/zero), a
socket or a directory is refused without blocking or reading it. `rewrite` replaces a file the user owns
(a profile `validate --fix` or `migrate --write` edits) atomically and without surprises: an unpredictable
temporary created with O_EXCL next to the file, the file's mode (and owner, where allowed) kept, a symlink
written through to its target, its line endings kept, a read-only file left alone, and nothing written
when the file changed since it was read. `write_new` writes a file ddtctl produces (`schema -o`)
atomically. Failures are one-line DdtctlErrors.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from ddtctl.errors import DdtctlError, UsageError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_regular(
    path: str | os.PathLike[str],
    limit: int,
    *,
    error: type[DdtctlError] = UsageError,
    what: str = "input",
    fix: str | None = None,
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; `error` (one line, where=path) otherwise.

    Opened with O_NONBLOCK so a FIFO cannot block the open, and checked with fstat on the open descriptor (no
    race with a rename); the read is bounded whatever st_size says (/proc files report 0)."""
    source = str(path)
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(source, flags)
    except FileNotFoundError:
        raise error("no such file", where=source) from None
    except PermissionError:
        raise error("permission denied", where=source) from None
    except IsADirectoryError:
        raise error(f"is a directory, not a {what} file", where=source) from None
    except OSError as err:
        raise error(f"cannot read: {err.strerror or err}", where=source) from None
    except ValueError:  # an embedded NUL byte in the path
        raise error("invalid path (NUL byte)", where=repr(source)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(
                f"is {_kind(st.st_mode)}, not a {what} file", where=source, fix=fix or "give a regular file"
            )
        if st.st_size > limit:
            raise error(
                f"file is {st.st_size // 1024} KiB; {what}s are limited to {limit // 1024} KiB",
                where=source,
                fix=fix or f"is this really a {what}?",
            )
        chunks, total = [], 0
        while total <= limit:
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            except BlockingIOError:  # pragma: no cover - regular files never block
                continue
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise error(
                f"file is over {limit // 1024} KiB; {what}s are limited to {limit // 1024} KiB",
                where=source,
                fix=fix or f"is this really a {what}?",
            )
        return b"".join(chunks)
    except OSError as err:
        raise error(f"cannot read: {err.strerror or err}", where=source) from None
    finally:
        os.close(fd)


def line_ending(original: bytes) -> str:
    """ "\\r\\n" when most of the file's line breaks are CRLF, else "\\n"."""
    crlf = original.count(b"\r\n")
    return "\r\n" if crlf and crlf * 2 >= original.count(b"\n") else "\n"


def with_line_ending(text: str, original: bytes) -> str:
    """`text` (edited with "\\n" line breaks) written with the line breaks of the file it came from."""
    text = text.replace("\r\n", "\n")
    return text.replace("\n", "\r\n") if line_ending(original) == "\r\n" else text


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_temp(directory: str, name: str, data: bytes, mode: int, owner: tuple[int, int] | None) -> str:
    """A new temporary beside `name` (mkstemp: O_CREAT|O_EXCL, random
    name, never follows a planted symlink)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".ddtctl-tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if owner is not None:
                try:
                    os.fchown(f.fileno(), *owner)
                except OSError:
                    pass  # not ours to give away: the group/owner of the copy stays ours
            os.fsync(f.fileno())
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return tmp


def rewrite(path: str | os.PathLike[str], text: str, *, original: bytes, what: str = "file") -> Path:
    """Replace the file at `path` (a symlink: its target) with `text`, if it still holds `original`.

    `text` is written with `original`'s line endings and the file keeps its mode and owner. Refused
    (UsageError, nothing written) when the file is read-only, is not a regular file, or changed since it was
    read. Returns the path written (the symlink's target for a symlink)."""
    source = str(path)
    target = os.path.realpath(source)
    data = with_line_ending(text, original).encode("utf-8")
    try:
        st = os.stat(target)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"is {_kind(st.st_mode)}; refusing to rewrite it", where=source)
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK):
            raise UsageError(
                f"the {what} is read-only; refusing to rewrite it",
                where=source,
                fix="make it writable (chmod u+w) if it should be changed",
            )
        if _current(target) != original:
            raise UsageError(
                f"the {what} changed since it was read; nothing written",
                where=source,
                fix="re-run the command on the saved file",
            )
        directory, name = os.path.split(target)
        tmp = _write_temp(directory, name, data, stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid))
        try:
            if (
                _current(target) != original
            ):  # last look before the rename (an editor may have saved meanwhile)
                raise UsageError(
                    f"the {what} changed while it was being rewritten; nothing written",
                    where=source,
                    fix="re-run the command on the saved file",
                )
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_dir(directory)
    except DdtctlError:
        raise
    except OSError as err:
        raise UsageError(f"cannot write: {err.strerror or err}", where=source, fix=_write_fix(err)) from None
    return Path(target)


def _current(target: str) -> bytes | None:
    try:
        with open(target, "rb") as f:
            return f.read()
    except OSError:
        return None


def _write_fix(err: OSError) -> str | None:
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the directory must be writable (the file is replaced by a rename)"
    if err.errno == errno.ENOSPC:
        return "free some disk space"
    return None


def write_new(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> Path:
    """Write a file ddtctl produces, atomically (temporary + rename); UsageError on any I/O failure."""
    source = str(path)
    try:
        target = os.path.realpath(source)
        directory, name = os.path.split(target)
        if not os.path.isdir(directory):
            raise UsageError(
                f"no such directory: {os.path.dirname(source) or '.'}",
                where=source,
                fix="create the directory first",
            )
        if os.path.isdir(target):
            raise UsageError("is a directory", where=source, fix="give a file name")
        tmp = _write_temp(directory, name, text.encode("utf-8"), mode & ~_umask(), None)
        try:
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except DdtctlError:
        raise
    except ValueError:
        raise UsageError("invalid path (NUL byte)", where=repr(source)) from None
    except OSError as err:
        raise UsageError(f"cannot write: {err.strerror or err}", where=source, fix=_write_fix(err)) from None
    return Path(target)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def owned_dir_state(path: str | os.PathLike[str], marker: str, *, legacy=None) -> str:
    """ "absent", "empty", "owned" (holds ddtctl's `marker` file, or passes `legacy(path)`) or "foreign":
    whether ddtctl may replace the directory at `path`. A symlink or a non-directory is "foreign". ddtctl
    deletes only what it made (issue #14: `overlay import --out SRC --force` deleted SRC,
    `overlay build --out DIR` wiped DIR)."""
    p = Path(path)
    if p.is_symlink():
        return "foreign"
    if not p.exists():
        return "absent"
    if not p.is_dir():
        return "foreign"
    try:
        if not any(p.iterdir()):
            return "empty"
    except OSError:
        return "foreign"
    if (p / marker).is_file() and not (p / marker).is_symlink():
        return "owned"
    if legacy is not None and legacy(p):
        return "owned"
    return "foreign"
