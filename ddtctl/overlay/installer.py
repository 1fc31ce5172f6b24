#!/usr/bin/env python3
"""Atomic install / uninstall of a built DDTREE payload into an SGLang site-packages directory.

Standard library only, runnable on its own on a remote host (deploy ships it beside the payload):

    python installer.py install   --sglang-root SITE_PACKAGES --payload STAGED_DIR --state-dir DIR
    python installer.py uninstall --sglang-root SITE_PACKAGES --state-dir DIR
    python installer.py status    --sglang-root SITE_PACKAGES --state-dir DIR [--payload STAGED_DIR]
    python installer.py view      --sglang-root SITE_PACKAGES --payload STAGED_DIR --out DIR

Run it with the interpreter of the target environment: it byte-compiles what it installs
with that interpreter. Every command prints one JSON object on stdout; exit 0 = done, 1 =
refused (nothing changed), 2 = usage error.

How "old or new, never a mix" holds:
  * every change is one transaction with a journal (state-dir/journal.json, written atomically, fsynced)
    that lists each path it will touch and whether it existed; the previous bytes of each path are copied
    aside first;
  * new files are written next to their targets as temporaries, then moved in with os.replace
    (atomic per file);
  * the commit point is the atomic rename of state-dir/record.json naming the new transaction;
  * every command first recovers an interrupted transaction: before the commit point it is rolled back (each
    path gets its previous bytes back, or is removed if it did not exist), after it the clean-up is finished.
  * the DDTREE entry point (the dist-info) is moved in last and removed first, so a half-applied tree never
    activates the plugin even before recovery runs.
Uninstall restores the pristine bytes (and mtimes, so SGLang's own .pyc
files stay valid) from state-dir/pristine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import py_compile
import shutil
import stat
import sys
import time
import uuid
from typing import Any

FORMAT = 1
MANIFEST_NAME = "ddtree-manifest.json"
PAUSE_ENV = "DDTCTL_INSTALLER_PAUSE_AT"  # test hook: "apply:N" (after N applied ops) or "commit"
PAUSE_FILE_ENV = "DDTCTL_INSTALLER_PAUSE_FILE"  # written when the pause point is reached


class Refused(Exception):
    """A precondition failed; nothing was changed."""


# --------------------------------------------------------------------------------------------------- helpers
def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json_atomic(path: str, data: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _copy_durable(src: str, dst: str) -> None:
    """copy2 (bytes, mode, mtime) then fsync the copy."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst, follow_symlinks=False)
    if not os.path.islink(dst):
        with open(dst, "rb+") as f:
            os.fsync(f.fileno())


def safe_join(root: str, rel: str) -> str:
    """root/rel, refusing absolute paths, '..' and anything that escapes root."""
    if (
        not rel
        or rel.startswith(("/", "\\"))
        or "\\" in rel
        or any(ord(c) < 32 or ord(c) == 127 for c in rel)
    ):
        raise Refused(f"unsafe path in payload: {rel!r}")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Refused(f"unsafe path in payload: {rel!r}")
    full = os.path.join(root, *parts)
    real_root = os.path.realpath(root)
    if os.path.commonpath([os.path.realpath(os.path.dirname(full)), real_root]) != real_root:
        raise Refused(f"payload path escapes the SGLang root: {rel!r}")
    return full


def pyc_paths(rel: str) -> list[str]:
    """The __pycache__ entries (relative) that belong to a .py file for this interpreter."""
    if not rel.endswith(".py"):
        return []
    head, _, name = rel.rpartition("/")
    stem = name[:-3]
    tag = sys.implementation.cache_tag
    base = f"{head}/__pycache__/{stem}.{tag}" if head else f"__pycache__/{stem}.{tag}"
    return [f"{base}.pyc", f"{base}.opt-1.pyc", f"{base}.opt-2.pyc"]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pause(point: str) -> None:
    """Test hook: stop here (the test kills the process with SIGKILL)."""
    if os.environ.get(PAUSE_ENV) != point:
        return
    marker = os.environ.get(PAUSE_FILE_ENV)
    if marker:
        with open(marker, "w") as f:
            f.write(point)
    while True:
        time.sleep(3600)


@contextlib.contextmanager
def _locked(state_dir: str, timeout_s: float = 60.0):
    import fcntl

    os.makedirs(state_dir, exist_ok=True)
    fd = os.open(os.path.join(state_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise Refused(f"another installer holds the lock in {state_dir}") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------------- payload
def load_payload(payload_dir: str) -> dict:
    manifest = _read_json(os.path.join(payload_dir, MANIFEST_NAME))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise Refused(f"{payload_dir}: not a built payload ({MANIFEST_NAME} missing or of another format)")
    for entry in manifest.get("files", []):
        src = safe_join(os.path.join(payload_dir, "files"), entry["path"])
        if not os.path.isfile(src):
            raise Refused(f"payload file missing: files/{entry['path']}")
        got = sha256_file(src)
        if got != entry["sha256"]:
            raise Refused(
                f"payload file files/{entry['path']} does not match its manifest hash "
                f"(sha256 {got[:12]}..., manifest {entry['sha256'][:12]}...): "
                "the payload was modified after it was built"
            )
    return manifest


def _ordered(files: list[dict]) -> list[dict]:
    """Install order: modules and patches first, the entry-point metadata (.dist-info) last."""
    return sorted(files, key=lambda e: (".dist-info/" in e["path"], e["path"]))


def sglang_version_at(root: str) -> str | None:
    """The sglang release installed in `root`: its dist-info name, else a literal version in
    sglang/_version.py or sglang/version.py."""
    import re

    names = os.listdir(root) if os.path.isdir(root) else []
    for name in sorted(names):
        if name.startswith("sglang-") and name.endswith(".dist-info"):
            return name[len("sglang-") : -len(".dist-info")]
    for fname in ("_version.py", "version.py"):
        try:
            with open(os.path.join(root, "sglang", fname), encoding="utf-8") as f:
                for line in f:
                    m = re.match(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([0-9][^"']*)["']""", line)
                    if m:
                        return m.group(1)
        except OSError:
            continue
    return None


# --------------------------------------------------------------------------------------------------- state
class State:
    def __init__(self, root: str, state_dir: str):
        self.root = os.path.realpath(root)
        self.dir = os.path.abspath(state_dir)
        self.record_path = os.path.join(self.dir, "record.json")
        self.journal_path = os.path.join(self.dir, "journal.json")
        self.pristine = os.path.join(self.dir, "pristine")

    def record(self) -> dict | None:
        rec = _read_json(self.record_path)
        if rec and rec.get("installed"):
            if rec.get("sglang_root") != self.root:
                raise Refused(
                    f"state dir {self.dir} records an install into {rec.get('sglang_root')}, "
                    f"not {self.root}; use the state dir of that install"
                )
            return rec
        return None

    def target(self, rel: str) -> str:
        return safe_join(self.root, rel)

    def tmp_for(self, rel: str, txid: str) -> str:
        full = self.target(rel)
        return os.path.join(os.path.dirname(full), f".{os.path.basename(full)}.ddtree-{txid[:12]}.tmp")

    # ---------------------------------------------------------------------------------------------- recovery
    def recover(self) -> str | None:
        """Finish or undo an interrupted transaction. Returns what was done, or None."""
        journal = _read_json(self.journal_path)
        if journal is None:
            return None
        txid = journal["txid"]
        rec = _read_json(self.record_path) or {}
        if rec.get("txid") == txid:
            self._cleanup(journal)
            return f"completed interrupted {journal['op']} {txid[:12]} (it had committed)"
        self._rollback(journal)
        return f"rolled back interrupted {journal['op']} {txid[:12]} (it had not committed)"

    def _rollback(self, journal: dict) -> None:
        txid = journal["txid"]
        txdir = os.path.join(self.dir, "tx", txid)
        if journal.get("phase") != "preparing":
            # Reverse order: the entry point (applied last) goes first.
            for op in reversed(journal["ops"]):
                target = self.target(op["path"])
                if op["existed"]:
                    pre = os.path.join(txdir, "pre", op["path"])
                    tmp = self.tmp_for(op["path"], txid) + ".undo"
                    _copy_durable(pre, tmp)
                    os.replace(tmp, target)
                elif os.path.lexists(target):
                    os.unlink(target)
        for op in journal["ops"]:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp_for(op["path"], txid))
        for rel in journal.get("new_pristine", []):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.pristine, rel))
        self._remove_dirs(journal.get("created_dirs", []))
        shutil.rmtree(txdir, ignore_errors=True)
        os.unlink(self.journal_path)
        _fsync_dir(self.dir)

    def _cleanup(self, journal: dict) -> None:
        txid = journal["txid"]
        for op in journal["ops"]:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp_for(op["path"], txid))
        for rel in journal.get("drop_pristine", []):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.pristine, rel))
        self._remove_dirs(journal.get("remove_dirs", []))
        shutil.rmtree(os.path.join(self.dir, "tx", txid), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.journal_path)
        _fsync_dir(self.dir)

    def _remove_dirs(self, rels: list[str]) -> None:
        """Remove directories we created, deepest first, if nothing
        but our own __pycache__ is left in them."""
        for rel in sorted(rels, key=lambda r: r.count("/"), reverse=True):
            path = self.target(rel)
            cache = os.path.join(path, "__pycache__")
            if os.path.isdir(cache) and not os.listdir(cache):
                os.rmdir(cache)
            with contextlib.suppress(OSError):
                os.rmdir(path)  # fails (kept) when not empty

    # -------------------------------------------------------------------------------------------- transaction
    def run(
        self,
        op_name: str,
        ops: list[dict],
        new_record: dict | None,
        *,
        compile_paths: list[str],
        new_pristine: list[tuple[str, str]],
        drop_pristine: list[str],
        created_dirs: list[str],
        remove_dirs: list[str],
    ) -> None:
        """ops: [{"path": rel, "src": file with the new bytes | None (remove)}], applied in order."""
        txid = uuid.uuid4().hex
        txdir = os.path.join(self.dir, "tx", txid)
        journal: dict[str, Any] = {
            "format": FORMAT,
            "op": op_name,
            "txid": txid,
            "phase": "preparing",
            "started": _now(),
            "sglang_root": self.root,
            "ops": [
                {
                    "path": o["path"],
                    "existed": os.path.lexists(self.target(o["path"])),
                    "new": o["src"] is not None,
                }
                for o in ops
            ],
            "new_pristine": [rel for rel, _ in new_pristine],
            "drop_pristine": drop_pristine,
            "created_dirs": created_dirs,
            "remove_dirs": remove_dirs,
        }
        _write_json_atomic(self.journal_path, journal)
        try:
            # Prepare: nothing visible changes. Previous bytes aside,
            # pristine copies, new bytes as temporaries.
            for op in journal["ops"]:
                if op["existed"]:
                    _copy_durable(self.target(op["path"]), os.path.join(txdir, "pre", op["path"]))
            for rel, src in new_pristine:
                _copy_durable(src, os.path.join(self.pristine, rel))
            for rel in created_dirs:
                os.makedirs(self.target(rel), exist_ok=True)
            for o in ops:
                if o["src"] is not None:
                    _copy_durable(o["src"], self.tmp_for(o["path"], txid))
            _fsync_dir(txdir)
            journal["phase"] = "prepared"
            _write_json_atomic(self.journal_path, journal)

            # Apply: one atomic rename (or unlink) per path.
            for n, o in enumerate(ops, 1):
                target = self.target(o["path"])
                if o["src"] is not None:
                    os.replace(self.tmp_for(o["path"], txid), target)
                elif os.path.lexists(target):
                    os.unlink(target)
                _pause(f"apply:{n}")
            for rel in compile_paths:
                full = self.target(rel)
                py_compile.compile(
                    full,
                    cfile=self.target(pyc_paths(rel)[0]),
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
            for d in {os.path.dirname(self.target(o["path"])) for o in ops}:
                if os.path.isdir(d):
                    _fsync_dir(d)
        except BaseException:
            self._rollback(_read_json(self.journal_path))
            raise

        # Commit point.
        record = dict(new_record or {"installed": False})
        record["txid"] = txid
        _write_json_atomic(self.record_path, record)
        _pause("commit")
        self._cleanup(journal)


# --------------------------------------------------------------------------------------------------- commands
def _check_target(state: State, want_version: str | None) -> None:
    have_version = sglang_version_at(state.root)
    if want_version and have_version and have_version != want_version:
        raise Refused(f"{state.root} has sglang {have_version}; this payload is for sglang {want_version}")
    if not os.path.isdir(os.path.join(state.root, "sglang")):
        raise Refused(f"{state.root} is not an SGLang site-packages directory (no sglang/ package in it)")


def _check_no_drift(state: State, old_files: dict[str, dict]) -> None:
    """Files of the current install must still be what it installed."""
    for rel, e in old_files.items():
        target = state.target(rel)
        if not os.path.isfile(target) or sha256_file(target) != e["sha256"]:
            raise Refused(
                f"{rel} was changed after the payload was installed (hash differs from the install "
                "record); restore it or reinstall SGLang before installing again"
            )


def _need_dirs(state: State, rel: str, created_dirs: list[str]) -> None:
    """Adds `rel`'s missing parent directories to `created_dirs`; refuses a parent that is not a directory."""
    parts = rel.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        full = state.target(d)
        if not os.path.isdir(full) and d not in created_dirs:
            if os.path.lexists(full):
                raise Refused(f"{d} exists and is not a directory")
            created_dirs.append(d)


def _retire_ops(
    state: State, old_files: dict[str, dict], new_paths: set[str], ops: list[dict], pyc_ops: list[dict]
) -> None:
    """Paths the old payload had and the new one does not: back to pristine / removed (entry point first)."""
    for rel, e in sorted(old_files.items(), key=lambda kv: ".dist-info/" not in kv[0]):
        if rel in new_paths:
            continue
        if e["kind"] == "patched":
            ops.append({"path": rel, "src": os.path.join(state.pristine, rel)})
        else:
            ops.append({"path": rel, "src": None})
        for pyc in pyc_paths(rel):
            saved = os.path.join(state.pristine, pyc)
            pyc_ops.append({"path": pyc, "src": saved if os.path.exists(saved) else None})


def _check_patch_base(
    state: State,
    e: dict,
    target: str,
    old_files: dict[str, dict],
    want_version: str | None,
    new_pristine: list[tuple[str, str]],
) -> None:
    """A patched file's base must be the payload's: the saved pristine copy when the current install patched
    it too, else the file in place (then saved, with its .pyc files, as the new pristine copy)."""
    rel = e["path"]
    if rel in old_files and old_files[rel]["kind"] == "patched":
        pristine = os.path.join(state.pristine, rel)
        if not os.path.isfile(pristine) or sha256_file(pristine) != e["base_sha256"]:
            raise Refused(
                f"{rel}: the saved pristine copy does not match this payload's base; "
                "uninstall the current payload first"
            )
        return
    if not os.path.isfile(target):
        raise Refused(f"{rel}: the file to patch does not exist in {state.root}")
    have = sha256_file(target)
    if have != e["base_sha256"]:
        how = (
            "it already holds this payload's patched version, but no install record says so"
            if have == e["sha256"]
            else "it is not the pristine file of sglang "
            f"{want_version} (a different or locally modified SGLang)"
        )
        raise Refused(
            f"{rel}: sha256 {have[:12]}... differs from the expected base {e['base_sha256'][:12]}...: {how}"
        )
    new_pristine.append((rel, target))
    for pyc in pyc_paths(rel):
        if os.path.isfile(state.target(pyc)):
            new_pristine.append((pyc, state.target(pyc)))


def plan_install(state: State, payload_dir: str, manifest: dict, old: dict | None) -> dict:
    """Check every precondition and return the transaction to run. Raises Refused; changes nothing."""
    files = _ordered(manifest["files"])
    want_version = manifest.get("sglang")
    _check_target(state, want_version)
    old_files = {e["path"]: e for e in (old or {}).get("files", [])}
    new_paths = {e["path"] for e in files}
    _check_no_drift(state, old_files)

    ops: list[dict] = []
    new_pristine: list[tuple[str, str]] = []
    compile_paths: list[str] = []
    created_dirs: list[str] = []
    pyc_ops: list[dict] = []
    _retire_ops(state, old_files, new_paths, ops, pyc_ops)

    for e in files:
        rel = e["path"]
        target = state.target(rel)
        src = safe_join(os.path.join(payload_dir, "files"), rel)
        if e["kind"] == "patched":
            _check_patch_base(state, e, target, old_files, want_version, new_pristine)
        else:
            if rel not in old_files and os.path.lexists(target):
                raise Refused(
                    f"{rel} already exists in {state.root} and is not ours; refusing to overwrite it"
                )
            _need_dirs(state, rel, created_dirs)
        ops.append({"path": rel, "src": src})
        if rel.endswith(".py"):
            compile_paths.append(rel)
            for pyc in pyc_paths(rel):
                pyc_ops.append({"path": pyc, "src": None})
                _need_dirs(state, pyc, created_dirs)
    # Stale bytecode goes before the sources change (never an old .pyc
    # beside a new .py), the entry point last.
    entry = [o for o in ops if ".dist-info/" in o["path"] and o["src"] is not None]
    rest = [o for o in ops if o not in entry]
    ordered_ops = pyc_ops + rest + entry
    old_dirs = (old or {}).get("created_dirs", [])
    record = {
        "format": FORMAT,
        "installed": True,
        "installed_at": _now(),
        "sglang_root": state.root,
        "name": manifest.get("name"),
        "version": manifest.get("version"),
        "sglang": manifest.get("sglang"),
        "payload_id": manifest.get("payload_id"),
        "files": [
            {"path": e["path"], "kind": e["kind"], "sha256": e["sha256"], "base_sha256": e.get("base_sha256")}
            for e in files
        ],
        "created_dirs": sorted(set(old_dirs) | set(created_dirs)),
        "python": sys.executable,
        "cache_tag": sys.implementation.cache_tag,
    }
    drop = [rel for rel, e in old_files.items() if rel not in new_paths and e["kind"] == "patched"]
    drop += [pyc for rel in drop for pyc in pyc_paths(rel)]
    return {
        "ops": ordered_ops,
        "record": record,
        "compile_paths": compile_paths,
        "new_pristine": new_pristine,
        "drop_pristine": drop,
        "created_dirs": created_dirs,
        "remove_dirs": [d for d in old_dirs if not any(p["path"].startswith(d + "/") for p in files)],
    }


def cmd_install(state: State, payload_dir: str) -> dict:
    manifest = load_payload(payload_dir)
    old = state.record()
    if old and old.get("payload_id") == manifest.get("payload_id"):
        drift = _drift(state, old)
        if not drift:
            return {
                "action": "none",
                "reason": "this payload is already installed",
                "payload_id": old.get("payload_id"),
            }
    plan = plan_install(state, payload_dir, manifest, old)
    state.run(
        "install",
        plan["ops"],
        plan["record"],
        compile_paths=plan["compile_paths"],
        new_pristine=plan["new_pristine"],
        drop_pristine=plan["drop_pristine"],
        created_dirs=plan["created_dirs"],
        remove_dirs=plan["remove_dirs"],
    )
    return {
        "action": "installed" if not old else "replaced",
        "payload_id": manifest.get("payload_id"),
        "files": len(manifest["files"]),
        "previous": (old or {}).get("payload_id"),
    }


def cmd_uninstall(state: State) -> dict:
    old = state.record()
    if not old:
        return {"action": "none", "reason": "no payload is installed"}
    drift = _drift(state, old)
    if drift:
        raise Refused(
            f"{drift[0]} was changed after the payload was installed; refusing to overwrite it "
            "(restore it, or reinstall SGLang)"
        )
    ops: list[dict] = []
    files = old["files"]
    # Entry point first, so the plugin disappears before anything it needs.
    for e in sorted(files, key=lambda e: ".dist-info/" not in e["path"]):
        rel = e["path"]
        if e["kind"] == "patched":
            pristine = os.path.join(state.pristine, rel)
            if not os.path.isfile(pristine) or sha256_file(pristine) != e["base_sha256"]:
                raise Refused(f"the saved pristine copy of {rel} is missing or damaged in {state.pristine}")
            ops.append({"path": rel, "src": pristine})
        else:
            ops.append({"path": rel, "src": None})
        for pyc in pyc_paths(rel):
            saved = os.path.join(state.pristine, pyc)
            ops.append(
                {"path": pyc, "src": saved if (e["kind"] == "patched" and os.path.isfile(saved)) else None}
            )
    drop = [e["path"] for e in files if e["kind"] == "patched"]
    drop += [pyc for rel in drop for pyc in pyc_paths(rel)]
    state.run(
        "uninstall",
        ops,
        None,
        compile_paths=[],
        new_pristine=[],
        drop_pristine=drop,
        created_dirs=[],
        remove_dirs=old.get("created_dirs", []),
    )
    return {"action": "uninstalled", "payload_id": old.get("payload_id"), "files": len(files)}


def _drift(state: State, rec: dict) -> list[str]:
    out = []
    for e in rec.get("files", []):
        target = state.target(e["path"])
        if not os.path.isfile(target) or sha256_file(target) != e["sha256"]:
            out.append(e["path"])
    return out


def cmd_status(state: State, payload_dir: str | None) -> dict:
    rec = state.record()
    out: dict = {"installed": bool(rec), "sglang_root": state.root, "sglang": sglang_version_at(state.root)}
    if rec:
        out.update({k: rec.get(k) for k in ("name", "version", "payload_id", "installed_at")})
        out["files"] = [e["path"] for e in rec["files"]]
        out["drift"] = _drift(state, rec)
    if payload_dir:
        manifest = load_payload(payload_dir)
        out["payload"] = {"payload_id": manifest.get("payload_id"), "version": manifest.get("version")}
        same_payload = rec is not None and rec.get("payload_id") == manifest.get("payload_id")
        out["up_to_date"] = bool(rec) and same_payload and not out["drift"]
    return out


def build_view(root: str, payload_dir: str, out: str, state_dir: str | None = None) -> dict:
    """A read-only overlay of `root` with the payload applied, for dry-runs: real directories only along the
    paths the payload touches, symlinks to the original entries everywhere else (never __pycache__, so nothing
    compiled from a patched file lands in the original tree). Put `out` first on sys.path.

    Each patched file of `root` must be the payload's pristine base, or already this payload's result (it is
    installed there), or, with `state_dir` of an install into `root`, have its saved pristine copy match the
    base (another payload version is installed)."""
    manifest = load_payload(payload_dir)
    root = os.path.realpath(root)
    files_root = os.path.join(payload_dir, "files")
    for e in manifest["files"]:
        if e["kind"] == "patched":
            base = safe_join(root, e["path"])
            have = sha256_file(base) if os.path.isfile(base) else None
            if have in (e["base_sha256"], e["sha256"]):
                continue
            saved = (
                os.path.join(os.path.abspath(state_dir), "pristine", *e["path"].split("/"))
                if state_dir
                else None
            )
            if saved and os.path.isfile(saved) and sha256_file(saved) == e["base_sha256"]:
                continue
            raise Refused(
                f"{e['path']}: {root} does not hold the pristine base this payload was built for "
                f"(sha256 {(have or 'missing')[:12]}..., expected {e['base_sha256'][:12]}...)"
            )
    if os.path.lexists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    real_dirs = {""}
    for e in manifest["files"]:
        parts = e["path"].split("/")[:-1]
        for i in range(1, len(parts) + 1):
            real_dirs.add("/".join(parts[:i]))
    payload_paths = {e["path"] for e in manifest["files"]}
    for d in sorted(real_dirs):
        os.makedirs(os.path.join(out, d) if d else out, exist_ok=True)
        if d == "":
            continue  # only the top-level entries the payload needs are mirrored
        orig = os.path.join(root, d)
        if not os.path.isdir(orig):
            continue
        for name in os.listdir(orig):
            rel = f"{d}/{name}"
            if name == "__pycache__" or rel in real_dirs or rel in payload_paths:
                continue
            os.symlink(os.path.join(orig, name), os.path.join(out, rel))
    for e in manifest["files"]:
        dst = os.path.join(out, e["path"])
        shutil.copy2(os.path.join(files_root, e["path"]), dst)
        os.chmod(dst, os.stat(dst).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return {
        "view": os.path.abspath(out),
        "payload_id": manifest.get("payload_id"),
        "files": len(payload_paths),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="installer.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "uninstall", "status", "recover", "view"])
    parser.add_argument("--sglang-root", required=True, help="the site-packages directory that holds sglang/")
    parser.add_argument("--payload", help="a built payload directory (with ddtree-manifest.json)")
    parser.add_argument("--state-dir", help="where backups, the journal and the install record live")
    parser.add_argument("--out", help="view: the directory to create")
    args = parser.parse_args(argv)

    def emit(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
        sys.stdout.flush()

    try:
        if args.command == "view":
            if not (args.payload and args.out):
                parser.error("view needs --payload and --out")
            emit({"ok": True, **build_view(args.sglang_root, args.payload, args.out, args.state_dir)})
            return 0
        if not args.state_dir:
            parser.error(f"{args.command} needs --state-dir")
        if args.command == "install" and not args.payload:
            parser.error("install needs --payload")
        if not os.path.isdir(args.sglang_root):
            raise Refused(f"--sglang-root {args.sglang_root} is not a directory")
        state = State(args.sglang_root, args.state_dir)
        with _locked(state.dir):
            recovered = state.recover()
            if args.command == "install":
                result = cmd_install(state, args.payload)
            elif args.command == "uninstall":
                result = cmd_uninstall(state)
            elif args.command == "status":
                result = cmd_status(state, args.payload)
            else:
                result = {"action": "recover"}
        emit({"ok": True, "recovered": recovered, **result})
        return 0
    except Refused as exc:
        emit({"ok": False, "error": str(exc)})
        return 1
    except py_compile.PyCompileError as exc:
        emit(
            {
                "ok": False,
                "error": f"byte-compiling the payload failed ({exc.msg.strip().splitlines()[-1]}); "
                "nothing was changed (the transaction was rolled back)",
            }
        )
        return 1
    except OSError as exc:  # e.g. no write permission: the transaction was rolled back before this point
        emit(
            {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}; nothing was changed (the transaction was "
                "rolled back)",
            }
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
