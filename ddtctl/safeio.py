"""Reading and rewriting the user's files safely (issue #14).

`read_regular` reads a regular file only, and never more than a limit: a FIFO, a device (/dev/zero), a
socket or a directory is refused without blocking or reading it. `rewrite` replaces a file the user owns
(a profile `validate --fix` or `migrate --write` edits) atomically and without surprises: an unpredictable
temporary created with O_EXCL next to the file, the file's mode (and owner, where allowed) kept, a symlink
written through to its target, its line endings kept, a read-only file left alone, and nothing written
when the file changed since it was read. `write_new` writes a file ddtctl produces (`schema -o`)
atomically; `check_output` refuses an output path that is not a regular file or a new name (a FIFO, a
socket, a device such as /dev/null, or a symlink to one), `write_bytes_new` and `append_text` are the other
outputs. `load_json` / `load_yaml` parse a bounded file (or `loads_json` / `loads_yaml` a text) with a nesting
limit, no YAML anchors or aliases, no duplicate keys and only finite numbers (issue #31). `glob_paths` expands
a recursive glob without following directory symlinks. Failures are one-line DdtctlErrors.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

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
    noun = what if what.endswith(" file") else f"{what} file"  # "argv file", not "argv file file"
    noun = ("an " if noun[:1].lower() in "aeiou" else "a ") + noun
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
        raise error(f"is a directory, not {noun}", where=source) from None
    except OSError as err:
        raise error(f"cannot read: {err.strerror or err}", where=source) from None
    except ValueError:  # an embedded NUL byte in the path
        raise error("invalid path (NUL byte)", where=repr(source)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"is {_kind(st.st_mode)}, not {noun}", where=source, fix=fix or "give a regular file")
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
    """Write a file ddtctl produces, atomically (temporary + rename); only over a regular file or a new name
    (check_output); UsageError on any I/O failure."""
    return write_bytes_new(path, text.encode("utf-8"), mode=mode)


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


# -- outputs ---------------------------------------------------------------------------------------
def check_output(path: str | os.PathLike[str], *, what: str = "output") -> str:
    """The file an output to `path` replaces (a symlink: its target), when that is a regular file or a new
    name in an existing directory; UsageError otherwise. A FIFO, a socket, a device (as root, `-o /dev/null`
    would have been replaced) or a directory is refused before anything is written (issue #31)."""
    source = str(path)
    try:
        target = os.path.realpath(source)
        st = os.stat(target)
    except ValueError:
        raise UsageError("invalid path (NUL byte)", where=repr(source)) from None
    except FileNotFoundError:
        directory = os.path.dirname(target)
        if not os.path.isdir(directory):
            raise UsageError(
                f"no such directory: {os.path.dirname(source) or '.'}",
                where=source,
                fix="create the directory first",
            ) from None
        return target
    except OSError as err:
        raise UsageError(f"cannot write: {err.strerror or err}", where=source) from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError("is a directory", where=source, fix="give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(
            f"is {_kind(st.st_mode)}; refusing to write the {what} over it",
            where=source,
            fix="give a regular file or a new file name",
        )
    return target


def write_bytes_new(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> Path:
    """Write `data` to an output path atomically (temporary + rename); check_output says what is refused."""
    source = str(path)
    target = check_output(source)
    try:
        directory, name = os.path.split(target)
        tmp = _write_temp(directory, name, data, mode & ~_umask(), None)
        try:
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as err:
        raise UsageError(f"cannot write: {err.strerror or err}", where=source, fix=_write_fix(err)) from None
    return Path(target)


def append_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> None:
    """Append `text` to a regular file (created when new), with one write; a FIFO or device is refused."""
    source = str(path)
    target = check_output(source)
    flags = (
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(target, flags, mode)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped in since the check
                raise UsageError(f"is {_kind(st.st_mode)}; refusing to append to it", where=source)
            os.write(fd, text.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as err:
        raise UsageError(f"cannot write: {err.strerror or err}", where=source, fix=_write_fix(err)) from None


# -- bounded structured inputs ---------------------------------------------------------------------
MAX_DEPTH = 64  # config.json, tune files and SGLang configs nest a few levels; deeper input is refused
MAX_NUMBER_DIGITS = 64  # no field takes a number this long (Python refuses 4300+ digits at all)


def read_text(
    path: str | os.PathLike[str], limit: int, *, error: type[DdtctlError] = UsageError, what: str = "input"
) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes (read_regular); `error` otherwise."""
    raw = read_regular(path, limit, error=error, what=what)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(f"the {what} is not UTF-8 text (byte {err.start})", where=str(path)) from None


def _check_depth(data: Any, limit: int) -> bool:
    """True when `data` nests at most `limit` containers deep (iterative: no recursion to exhaust)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            values = item.values() if isinstance(item, dict) else item
            stack.extend((v, depth + 1) for v in values)
    return True


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _json_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]!r} is out of range")
    return value


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number of {len(text)} digits")
    return int(text)


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_json(
    text: str,
    *,
    where: str,
    what: str = "JSON file",
    error: type[DdtctlError] = UsageError,
    depth: int = MAX_DEPTH,
) -> Any:
    """Parse JSON text: duplicate keys, NaN/Infinity, numbers out of float range or over 64 digits, and
    nesting deeper than `depth` are one-line `error`s, never a RecursionError or a hang."""
    try:
        data = json.loads(
            text,
            object_pairs_hook=_json_pairs,
            parse_float=_json_float,
            parse_int=_json_int,
            parse_constant=_json_constant,
        )
    except RecursionError:
        data, ok = None, False
    except ValueError as err:
        raise error(f"the {what} is not valid JSON: {str(err).splitlines()[0][:200]}", where=where) from None
    else:
        ok = _check_depth(data, depth)
    if not ok:
        raise error(
            f"the {what} nests more than {depth} levels deep", where=where, fix=f"is this really a {what}?"
        )
    return data


def _load_file(
    parse: Any, path: str | os.PathLike[str], limit: int, *, what: str, error: type[DdtctlError], depth: int
) -> Any:
    """`parse` (loads_json / loads_yaml) of the UTF-8 text of a regular file of at most `limit` bytes: the
    one bounded read of load_json and load_yaml."""
    text = read_text(path, limit, error=error, what=what)
    return parse(text, where=str(path), what=what, error=error, depth=depth)


def load_json(
    path: str | os.PathLike[str],
    limit: int,
    *,
    what: str = "JSON file",
    error: type[DdtctlError] = UsageError,
    depth: int = MAX_DEPTH,
) -> Any:
    """`loads_json` of a regular file of at most `limit` bytes (read_regular)."""
    return _load_file(loads_json, path, limit, what=what, error=error, depth=depth)


def _yaml_loader() -> Any:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class _UniqueKeys(base):  # type: ignore[valid-type,misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        None, None, "a mapping key that is a list or mapping", key_node.start_mark
                    ) from None
                if dup:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
            return super().construct_mapping(node, deep=deep)

    return _UniqueKeys


def _yaml_events_ok(text: str, loader: Any, depth: int) -> str | None:
    """Why the YAML event stream is refused (an anchor or alias, nesting deeper than `depth`), else None;
    the events come from the parser, which builds nothing, so a bomb is seen before it expands."""
    import yaml

    level = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            return "YAML anchors/aliases (&, *) are not allowed"
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            level += 1
            if level > depth:
                return f"nests more than {depth} levels deep"
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            level -= 1
    return None


def loads_yaml(
    text: str,
    *,
    where: str,
    what: str = "YAML file",
    error: type[DdtctlError] = UsageError,
    depth: int = MAX_DEPTH,
) -> Any:
    """Parse one YAML document: anchors/aliases (the alias bomb), nesting deeper than `depth`, duplicate keys,
    several documents and syntax errors are one-line `error`s."""
    import yaml

    loader = _yaml_loader()
    try:
        why = _yaml_events_ok(text, loader, depth)
        if why is None:
            return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.composer.ComposerError as err:
        why = f"not one YAML document: {str(err.problem or err).splitlines()[0]}"
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        why = f"not valid YAML: {str(getattr(err, 'problem', None) or err).splitlines()[0]}{at}"
    except (RecursionError, ValueError, OverflowError) as err:
        why = f"not valid YAML: {type(err).__name__}"
    raise error(f"the {what} is refused: {why}", where=where)


def load_yaml(
    path: str | os.PathLike[str],
    limit: int,
    *,
    what: str = "YAML file",
    error: type[DdtctlError] = UsageError,
    depth: int = MAX_DEPTH,
) -> Any:
    """`loads_yaml` of a regular file of at most `limit` bytes (read_regular)."""
    return _load_file(loads_yaml, path, limit, what=what, error=error, depth=depth)


# -- globs -----------------------------------------------------------------------------------------
MAX_GLOB_ENTRIES = 200_000


def _match_parts(pattern: list[str], parts: list[str]) -> bool:
    import fnmatch

    if not pattern:
        return not parts
    head = pattern[0]
    if head == "**":
        for i in range(len(parts) + 1):  # `**` spans zero or more directories, never a hidden one
            if _match_parts(pattern[1:], parts[i:]):
                return True
            if i < len(parts) and parts[i].startswith("."):
                return False
        return False
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _match_parts(pattern[1:], parts[1:])


def glob_paths(pattern: str) -> list[str]:
    """glob.glob(pattern, recursive=True) that never follows a directory symlink below a `**` (Python's glob
    does, until ELOOP: two links to `..` are 2**40 paths, a hang); at most MAX_GLOB_ENTRIES entries."""
    import glob

    if "**" not in pattern:
        return sorted(glob.glob(pattern))
    parts = pattern.split(os.sep)
    first = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    base = os.sep.join(parts[:first]) or ("" if not pattern.startswith(os.sep) else os.sep)
    out, seen = [], 0
    for root in [base or "."]:
        for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False: a loop is not entered
            dirnames.sort()
            for name in dirnames + sorted(filenames):
                seen += 1
                if seen > MAX_GLOB_ENTRIES:
                    raise UsageError(
                        f"the pattern walks more than {MAX_GLOB_ENTRIES} entries",
                        where=pattern,
                        fix="give a narrower pattern or directory",
                    )
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).split(os.sep)
                if _match_parts(parts[first:], rel):
                    out.append(full if base else os.path.relpath(full, "."))
    return sorted(out)
