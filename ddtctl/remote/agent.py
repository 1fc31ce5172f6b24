"""ddtctl's remote agent: stdlib only, python >= 3.8, shipped to the host and run there by the host's python.

    python agent.py OP BASE64_JSON_PARAMS

Every operation prints exactly one final JSON line on stdout, `{"ok": true, "result": ...}` or
`{"ok": false, "error": "..."}` (the `lock` operation prints status lines first and then holds the lock until
its stdin closes). Parameters never pass through a shell: they arrive as base64 JSON and processes are started
from argv lists.

Layout under the work dir W:
    store/<sha256>              content-addressed payload files (verified after upload)
    incoming/                   uploads in flight (never read before verification)
    releases/<id>/release.json  what a release is: argv, env, port, payload manifest, hashes
    releases/<id>/payload/...   the release's payload tree (hard links into store/)
    state.json                  current release, history, installed payload
    run/server.json             pid, start time and release of the server we launched
    logs/<id>.log               server output per release
    lock, lock.json             the deploy lock (flock) and who holds it (left behind by a holder that died:
                                a stale lock, taken over by the next holder with its name)
    ops.lock                    shared by every lock-holding operation in flight; the next holder waits on it
    deploy-journal.json         a deploy (or rollback) that has touched the running server and not finished:
                                the next lock holder of another session puts `previous` back
"""

from __future__ import annotations

import base64
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

W = ""  # the work dir (absolute), set by main()


# ----------------------------------------------------------------------------------------------- helpers
class AgentError(Exception):
    pass


def _p(*parts: str) -> str:
    return os.path.join(W, *parts)


def _safe_rel(rel: str) -> str:
    """Refuse manifest paths that escape their root."""
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        raise AgentError("unsafe path in manifest: %r" % rel)
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise AgentError("unsafe path in manifest: %r" % rel)
    return rel


def _safe_id(rid: str) -> str:
    if not rid or not all(c.isalnum() or c in "-_." for c in rid) or rid.startswith("."):
        raise AgentError("bad release id %r" % rid)
    return rid


def _read_json(path: str, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def _write_json(path: str, data) -> None:
    """Atomic, and private (0600): release.json holds the server's env (HF_TOKEN...) and argv (--api-key)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _private_dir(path: str) -> str:
    """A directory only we can enter (0700): releases/, logs/ and run/ hold secrets at rest (issue #14)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _open_private_log(path: str):
    """A log file opened for appending, 0600 (the server prints its argv, secrets included)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _state() -> dict:
    return _read_json(_p("state.json"), {"current": None, "history": [], "installed_payload": None})


def _save_state(state: dict) -> None:
    _write_json(_p("state.json"), state)


def _release(rid: str) -> dict:
    rel = _read_json(_p("releases", _safe_id(rid), "release.json"))
    if rel is None:
        raise AgentError("no release %s on this host" % rid)
    return rel


def _proc_starttime(pid: int):
    """(start time in clock ticks, state letter) of a live process, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = data[data.rindex(")") + 2 :].split()
    return int(rest[19]), rest[0]


def _alive(info) -> bool:
    if not info:
        return False
    st = _proc_starttime(int(info["pid"]))
    return bool(st) and st[0] == info.get("starttime") and st[1] not in ("Z", "X")


def _server_info():
    info = _read_json(_p("run", "server.json"))
    if info and not _alive(info):
        return dict(info, running=False)
    return dict(info, running=True) if info else None


def _flock_held() -> bool:
    """Whether some process holds the flock on W/lock right now (the lock agent holds it while its caller's
    connection lives: sshd closes its stdin when the connection dies, and it lets go)."""
    try:
        fd = os.open(_p("lock"), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        return err.errno in (errno.EAGAIN, errno.EACCES)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _lock_held_by(token) -> bool:
    """The deploy lock is held, by the lock agent that recorded `token`: that very process (pid *and* start
    time, so a recycled pid does not count) is alive and the flock is taken."""
    held = _read_json(_p("lock.json"))
    if not token or not held or held.get("token") != token:
        return False
    try:
        st = _proc_starttime(int(held.get("pid", 0)))
    except (TypeError, ValueError):
        return False
    return bool(st) and st[0] == held.get("starttime") and st[1] not in ("Z", "X") and _flock_held()


_OPS_FD = None  # this process's shared hold on W/ops.lock (see _quiesce)


def _require_lock(params: dict) -> None:
    """Mutating operations run only under the deploy lock held by the caller. Each also holds W/ops.lock
    shared while it runs, so that a new lock holder can wait for the operations of a dead one to end
    (_quiesce)."""
    global _OPS_FD
    if not os.path.isdir(W):  # no work dir: nobody can hold the lock (and there is no ops.lock to share)
        raise AgentError("the deploy lock is not held by this caller; refusing to change the host")
    if _OPS_FD is None:
        _OPS_FD = os.open(_p("ops.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(_OPS_FD, fcntl.LOCK_SH)
    if not _lock_held_by(params.get("lock_token")):
        raise AgentError("the deploy lock is not held by this caller; refusing to change the host")


def _stop_group(proc) -> None:
    """Stop a child started with start_new_session=True and all it started: SIGTERM to its process
    group, SIGKILL after 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_locked(argv, params: dict, *, timeout: float, **kw) -> int:
    """Run a long step (installer, warm-up) and stop it when the caller loses the deploy lock (its connection
    died: nobody is left to act on the result, and a new deploy may take the lock). Returns the exit status
    (-9 after the timeout); AgentError when the lock was lost."""
    proc = subprocess.Popen(argv, start_new_session=True, **kw)
    deadline = time.time() + timeout
    token = params.get("lock_token")
    while True:
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        lost = not _lock_held_by(token)
        if lost or time.time() > deadline:
            _stop_group(proc)
            if lost:
                raise AgentError(
                    "the deploy lock was lost (its holder's connection dropped); stopped %s"
                    % os.path.basename(str(argv[0]))
                )
            return -9


# ----------------------------------------------------------------------------------------------- operations
def op_hello(params: dict):
    return {
        "work_dir": W,
        "python": sys.executable,
        "version": list(sys.version_info[:3]),
        "pid": os.getpid(),
    }


def op_facts(params: dict):
    import importlib.util
    import platform

    facts: dict = {
        "hostname": socket.gethostname(),
        "work_dir": W,
        "python": {"executable": sys.executable, "version": platform.python_version()},
        "kernel": platform.release(),
    }
    # sglang: version and the site-packages dir that holds it (without importing it)
    sg: dict[str, str | None] = {"version": None, "root": None}
    try:
        spec = importlib.util.find_spec("sglang")
        if spec and spec.submodule_search_locations:
            sg["root"] = os.path.dirname(list(spec.submodule_search_locations)[0])
        try:
            from importlib.metadata import version

            sg["version"] = version("sglang")
        except Exception:
            pass
    except Exception as err:  # a broken install is a fact too
        sg["error"] = str(err)
    facts["sglang"] = sg
    # GPUs through nvidia-smi
    smi = params.get("nvidia_smi") or "nvidia-smi"
    gpus, cuda, driver, smi_error = [], None, None, None
    try:
        out = subprocess.run(
            [
                smi,
                "--query-gpu=index,name,memory.total,memory.free,driver_version,compute_cap",
                "--format=csv,noheader,nounits",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=30,
            universal_newlines=True,
        )
        if out.returncode != 0:
            smi_error = (out.stderr or out.stdout).strip()[:300] or "nvidia-smi exited %d" % out.returncode
        for line in out.stdout.splitlines():
            cols = [c.strip() for c in line.split(",")]
            if len(cols) < 6:
                continue
            cap = cols[5]
            try:
                major, minor = (int(x) for x in cap.split("."))
            except ValueError:
                major, minor = None, None
            gpus.append(
                {
                    "index": int(cols[0]),
                    "name": cols[1],
                    "memory_total_mib": _num(cols[2]),
                    "memory_free_mib": _num(cols[3]),
                    "compute_capability": [major, minor],
                }
            )
            driver = cols[4]
        head = subprocess.run(
            [smi], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, universal_newlines=True
        )
        for token in head.stdout.split("CUDA Version:")[1:2]:
            cuda = token.split()[0].strip("|")
    except FileNotFoundError:
        smi_error = "%s not found" % smi
    except subprocess.TimeoutExpired:
        smi_error = "%s timed out" % smi
    facts.update(gpus=gpus, cuda=cuda, driver=driver, gpu_error=smi_error)
    # disk
    os.makedirs(W, exist_ok=True)
    du = shutil.disk_usage(W)
    facts["disk_free_bytes"] = du.free
    facts["ports_in_use"] = sorted(_listening_ports())
    srv = _server_info()
    facts["server"] = srv
    facts["current_release"] = _state().get("current")
    # model configs (cached by the caller for validation and dry-run)
    models = {}
    for path in params.get("model_paths") or []:
        cfg = os.path.join(os.path.expanduser(str(path)), "config.json")
        try:
            models[path] = {"config": _read_model_config(cfg)}
        except FileNotFoundError:
            models[path] = {"error": "no config.json at %s" % cfg}
        except (OSError, ValueError, RecursionError) as err:
            models[path] = {"error": "%s: %s" % (cfg, str(err)[:200])}
    facts["models"] = models
    return facts


MAX_MODEL_CONFIG = 4 * 1024 * 1024
MAX_MODEL_CONFIG_DEPTH = 32


def _read_model_config(path: str):
    """A model's config.json, bounded (issue #31: a FIFO hung facts, /dev/zero filled the host's memory):
    a regular file (opened without blocking, checked on the open descriptor) of at most MAX_MODEL_CONFIG
    bytes, a JSON object at most MAX_MODEL_CONFIG_DEPTH deep. ValueError / OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = b""
        while len(data) <= MAX_MODEL_CONFIG:
            chunk = os.read(fd, MAX_MODEL_CONFIG + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_MODEL_CONFIG:
        raise ValueError("larger than %d MiB" % (MAX_MODEL_CONFIG >> 20))
    depth = deepest = 0
    for c in data.decode("utf-8", errors="replace"):  # brackets in strings count too: an upper bound
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    if deepest > MAX_MODEL_CONFIG_DEPTH:
        raise ValueError("JSON nested more than %d deep" % MAX_MODEL_CONFIG_DEPTH)
    config = json.loads(data.decode("utf-8", errors="replace"))
    if not isinstance(config, dict):
        raise ValueError("not a JSON object")
    return config


def _num(text: str):
    try:
        return int(float(text))
    except ValueError:
        return None


def _listening_ports():
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) > 3 and cols[3] == "0A":  # LISTEN
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            pass
    return ports


# ------------------------------------------------------------------------------------ checkup (ddtctl doctor)
CHECKUP_DISTS = (
    "torch",
    "nvidia-nccl-cu13",
    "nvidia-nccl-cu12",
    "flashinfer-python",
    "sgl-kernel",
    "triton",
    "cuda-python",
)
CHECKUP_REQUIRES = ("torch", "nvidia-nccl", "cuda-python", "flashinfer")
MAX_TOPOLOGY = 64 * 1024
MAX_BENCH_INPUT = 64 * 1024 * 1024  # a bench request's stdin: the benchmark's env and its prompts dataset
MAX_MODEL_WALK = 20000  # directory entries a model dir walk visits before it stops (and says so)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def op_checkup(params: dict):
    """What `ddtctl doctor` checks beyond `facts`: package versions and requirements of the host's python
    (read from their metadata, nothing imported), torch's CUDA build, /dev/shm, the GPU topology (`nvidia-smi
    topo -m`, when asked), the DDTREE payload's files in the SGLang root, and each model dir (size, weight
    files, the shards its safetensors index names, free space)."""
    import importlib.util

    root = params.get("sglang_root")
    if not root:
        try:
            spec = importlib.util.find_spec("sglang")
            if spec and spec.submodule_search_locations:
                root = os.path.dirname(list(spec.submodule_search_locations)[0])
        except Exception:
            root = None
    out = {
        "packages": {name: _dist_version(name) for name in CHECKUP_DISTS},
        "requires": {name: _dist_requires(name) for name in ("sglang", "torch")},
        "torch_cuda": _torch_cuda(),
        "shm": _space("/dev/shm"),
        "topology": None,
        "topology_error": None,
        "payload": _payload_files(root),
        "models": {str(p): _model_dir(str(p)) for p in params.get("model_paths") or []},
    }
    if params.get("topology"):
        out["topology"], out["topology_error"] = _topology(params.get("nvidia_smi") or "nvidia-smi")
    return out


def _dist_version(name: str):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def _dist_requires(name: str):
    """The requirements of distribution `name` on the packages doctor checks (torch, NCCL, CUDA), or None."""
    try:
        from importlib.metadata import requires

        reqs = requires(name)
    except Exception:
        return None
    return [r for r in reqs or [] if r.lower().replace("_", "-").startswith(CHECKUP_REQUIRES)][:32]


def _torch_cuda():
    """torch's CUDA build (torch/version.py's `cuda = '13.0'`, read as text: torch is never imported)."""
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("torch")
        if not (spec and spec.submodule_search_locations):
            return {"found": False, "cuda": None}
        path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
        with open(path, "rb") as f:
            text = f.read(64 * 1024).decode("utf-8", errors="replace")
    except Exception as err:
        return {"found": False, "cuda": None, "error": str(err)[:200]}
    m = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return {"found": True, "cuda": m.group(1) if m else None}


def _space(path: str):
    try:
        st = os.statvfs(path)
    except OSError as err:
        return {"path": path, "error": str(err)[:200]}
    return {"path": path, "total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}


def _topology(smi: str):
    try:
        res = subprocess.run([smi, "topo", "-m"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    except FileNotFoundError:
        return None, "%s not found" % smi
    except subprocess.TimeoutExpired:
        return None, "%s topo -m timed out" % smi
    if res.returncode != 0:
        err = (res.stderr or res.stdout)[:300].decode("utf-8", errors="replace").strip()
        return None, err or "%s topo -m exited %d" % (smi, res.returncode)
    return res.stdout[:MAX_TOPOLOGY].decode("utf-8", errors="replace"), None


def _payload_files(root):
    """Whether the DDTREE payload's package and its entry point (dist-info) are in the SGLang root."""
    if not root or not os.path.isdir(root):
        return {"root": root, "package": False, "entry_point": False}
    entry = False
    try:
        for name in os.listdir(root):
            if name.startswith("ddtree_sglang-") and name.endswith(".dist-info"):
                entry = entry or os.path.isfile(os.path.join(root, name, "entry_points.txt"))
    except OSError:
        pass
    package = os.path.isfile(os.path.join(root, "ddtree_sglang", "__init__.py"))
    return {"root": root, "package": package, "entry_point": entry}


def _model_dir(path: str):
    """A model dir as doctor sees it: present or not, its size and weight files (a bounded walk that follows
    no directory links), the shards its safetensors index names that are missing, and the free space of the
    file system that holds it (or would: its nearest existing parent)."""
    p = os.path.expanduser(path)
    at = p
    while at and not os.path.isdir(at) and os.path.dirname(at) != at:
        at = os.path.dirname(at) or "."
    info = {"exists": os.path.isdir(p), "free_at": at}
    try:
        info["free_bytes"] = shutil.disk_usage(at).free
    except OSError:
        info["free_bytes"] = None
    if not info["exists"]:
        return info
    size = weights = weight_bytes = seen = 0
    truncated = False
    for dirpath, dirnames, filenames in os.walk(p):
        seen += len(dirnames) + len(filenames)
        if seen > MAX_MODEL_WALK:
            truncated = True
            break
        for name in filenames:
            try:
                n = os.stat(os.path.join(dirpath, name)).st_size  # follows links: HF cache snapshots
            except OSError:
                continue
            size += n
            if name.endswith(WEIGHT_SUFFIXES):
                weights += 1
                weight_bytes += n
    info.update(size_bytes=size, weight_files=weights, weight_bytes=weight_bytes, truncated=truncated)
    index = os.path.join(p, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            shards = set((_read_model_config(index).get("weight_map") or {}).values())
            missing = sorted(s for s in shards if not os.path.isfile(os.path.join(p, str(s))))
            info["index"] = {"shards": len(shards), "missing": missing[:8], "missing_count": len(missing)}
        except (OSError, ValueError, RecursionError, AttributeError) as err:
            info["index"] = {"error": str(err)[:200]}
    return info


def op_missing(params: dict):
    """Which of these sha256 objects the store lacks. Under the lock, complete uploads an interrupted deploy
    left in incoming/ are verified (sha256 recomputed) and kept, so a re-run resumes; partial ones are
    deleted."""
    os.makedirs(_p("store"), exist_ok=True)
    os.makedirs(_p("incoming"), exist_ok=True)
    salvaged = 0
    try:
        _require_lock(params)
        locked = True
    except AgentError:
        locked = False
    if locked:
        for name in os.listdir(_p("incoming")):
            want = name.split(".", 1)[0]
            src = _p("incoming", name)
            if len(want) == 64 and not os.path.exists(_p("store", want)) and _sha256(src) == want:
                os.chmod(src, 0o444)
                os.replace(src, _p("store", want))
                salvaged += 1
            else:
                os.unlink(src)
    return {
        "missing": [h for h in params["hashes"] if not os.path.isfile(_p("store", h))],
        "incoming": _p("incoming"),
        "salvaged": salvaged,
    }


def op_commit(params: dict):
    """Verify uploaded files (sha256 recomputed here) and move them into the store; bad ones are deleted."""
    good, bad = [], []
    os.makedirs(_p("store"), exist_ok=True)
    for name, want in params["files"].items():
        if "/" in name or name.startswith("."):
            raise AgentError("bad upload name %r" % name)
        src = _p("incoming", name)
        try:
            got = _sha256(src)
        except FileNotFoundError:
            bad.append({"name": name, "reason": "missing"})
            continue
        if got != want:
            os.unlink(src)
            bad.append({"name": name, "reason": "sha256 %s != %s" % (got[:12], want[:12])})
            continue
        os.chmod(src, 0o444)
        os.replace(src, _p("store", want))
        good.append(want)
    return {"stored": good, "bad": bad}


def op_commit_stream(params: dict):
    """Verify uploads while they land: stdin carries `NAME SHA256` lines as each upload completes, then `END`.
    Only after END are the `then` operations run (e.g. materialize); EOF without END (the connection dropped)
    runs nothing more. Prints the batch-style reply: [commit result, *then results]."""
    stored, bad = [], []
    ended = False
    for raw in sys.stdin:
        line = raw.strip()
        if line == "END":
            ended = True
            break
        if not line:
            continue
        name, want = line.split(" ", 1)
        res = op_commit({"files": {name: want}})
        stored += res["stored"]
        bad += res["bad"]
    if not ended:
        raise AgentError("the upload stream ended early (connection lost?); nothing was activated")
    results = [{"stored": stored, "bad": bad, "disk_free_bytes": shutil.disk_usage(W).free}]
    if not bad and params.get("then"):
        results += op_batch({"ops": params["then"], "lock_token": params.get("lock_token")})
    return results


def op_materialize(params: dict):
    """Create releases/<id>/ from the store: payload tree (hard links) + release.json, atomically."""
    _require_lock(params)
    rel = params["release"]
    rid = _safe_id(rel["id"])
    final = _p("releases", rid)
    if os.path.isdir(final):
        return {"id": rid, "existed": True}
    _private_dir(_p("releases"))
    tmp = _p("releases", ".tmp-" + rid)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp, mode=0o700)
    for section in ("payload", "tools"):
        for rel_path, entry in (rel.get(section) or {}).get("files", {}).items():
            dst = os.path.join(tmp, section, _safe_rel(rel_path))
            src = _p("store", entry["sha256"])
            if not os.path.isfile(src):
                shutil.rmtree(tmp, ignore_errors=True)
                raise AgentError("object %s for %s is not in the store" % (entry["sha256"][:12], rel_path))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
            if entry.get("mode"):
                pass  # store objects are read-only; modes apply to the installed copies
    rel = dict(rel, created=time.time(), status="new")
    _write_json(os.path.join(tmp, "release.json"), rel)
    os.replace(tmp, final)
    return {"id": rid, "existed": False}


def op_state(params: dict):
    state = _state()
    releases = []
    root = _p("releases")
    if os.path.isdir(root):
        for rid in sorted(os.listdir(root)):
            if rid.startswith("."):
                continue
            rel = _read_json(os.path.join(root, rid, "release.json"))
            if rel:
                rel.pop("payload", None)
                rel.pop("tools", None)
                releases.append(rel)
    lock = _read_json(_p("lock.json"))
    if lock is not None:  # who holds the deploy lock, or held it and died (stale); never its token
        lock = dict(lock, stale=not _flock_held())
        lock.pop("token", None)
    return {
        "state": state,
        "releases": releases,
        "server": _server_info(),
        "lock": lock,
        "journal": _read_json(_p(JOURNAL)),
    }


def op_set_status(params: dict):
    """Record a release's outcome and (optionally) make it current."""
    _require_lock(params)
    rid = _safe_id(params["id"])
    path = _p("releases", rid, "release.json")
    rel = _read_json(path)
    if rel is None:
        raise AgentError("no release %s" % rid)
    rel["status"] = params["status"]
    rel.setdefault("events", []).append(
        {"time": time.time(), "status": params["status"], "note": params.get("note")}
    )
    _write_json(path, rel)
    state = _state()
    if params.get("make_current"):
        if state.get("current") and state["current"] != rid:
            state["previous"] = state["current"]
        state["current"] = rid
        state.setdefault("history", []).append({"id": rid, "time": time.time(), "status": params["status"]})
    _save_state(state)
    if params.get("make_current") and (_read_json(_p(JOURNAL)) or {}).get("release") == rid:
        os.unlink(_p(JOURNAL))  # the deploy is done: nothing to put back
    return {"state": state}


def _run_installer(action: str, rel: dict, params: dict):
    rid = rel["id"]
    installer = _p("releases", rid, "tools", "installer.py")
    if not os.path.isfile(installer):
        raise AgentError("release %s has no installer.py" % rid)
    argv = [
        sys.executable,
        installer,
        action,
        "--sglang-root",
        params["sglang_root"],
        "--state-dir",
        _p("overlay-state"),
    ]
    if action != "uninstall":
        argv += ["--payload", _p("releases", rid, "payload")]
    import tempfile

    with tempfile.TemporaryFile() as out:
        rc = _run_locked(
            argv,
            params,
            timeout=float(params.get("timeout_s", 300)),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        out.seek(0)
        output = out.read().decode(errors="replace")
    return {"argv": argv, "rc": rc, "output": output[-4000:]}


def op_install(params: dict):
    """Install the release's payload into sglang (the overlay installer); no-op if installed."""
    _require_lock(params)
    rel = _release(params["id"])
    state = _state()
    want = rel.get("payload_hash")
    have = state.get("installed_payload")
    if want == (have or {}).get("hash") and not params.get("force"):
        return {"changed": False, "installed": have}
    steps = []
    if have and have.get("release") and (not want or params.get("uninstall_first")):
        old = _read_json(_p("releases", have["release"], "release.json"))
        if old:
            res = _run_installer("uninstall", old, params)
            steps.append(res)
            if res["rc"] != 0:
                raise AgentError("overlay uninstall failed (rc %d): %s" % (res["rc"], res["output"][-800:]))
        state["installed_payload"] = None
        _save_state(state)
    if want:
        res = _run_installer("install", rel, params)
        steps.append(res)
        if res["rc"] != 0:
            raise AgentError("overlay install failed (rc %d): %s" % (res["rc"], res["output"][-800:]))
        state["installed_payload"] = {"hash": want, "release": rel["id"], "time": time.time()}
        _save_state(state)
    return {"changed": True, "steps": steps, "installed": state["installed_payload"]}


def op_uninstall(params: dict):
    """Remove the installed payload (restores SGLang's pristine files)."""
    _require_lock(params)
    state = _state()
    have = state.get("installed_payload")
    if not have:
        return {"changed": False}
    old = _read_json(_p("releases", have["release"], "release.json"))
    if old is None:
        raise AgentError("the release %s that installed the payload is gone" % have["release"])
    res = _run_installer("uninstall", old, params)
    if res["rc"] != 0:
        raise AgentError("overlay uninstall failed (rc %d): %s" % (res["rc"], res["output"][-800:]))
    state["installed_payload"] = None
    _save_state(state)
    return {"changed": True, "steps": [res]}


def _server_env(rel: dict) -> dict:
    env = dict(os.environ)
    env.setdefault("TRITON_CACHE_DIR", _p("triton-cache"))
    env.update(rel.get("env") or {})
    env["DDTCTL_RELEASE"] = rel["id"]
    env["DDTCTL_WORK_DIR"] = W
    return env


def op_warmup(params: dict):
    """Run the release's kernel warm-up (e.g. the payload's Triton self-test on the GPU) before anything
    changes: same env and TRITON_CACHE_DIR as the server, the release's payload importable from its files/
    tree."""
    _require_lock(params)
    rel = _release(params["id"])
    env = _server_env(rel)
    files = _p("releases", rel["id"], "payload", "files")
    env["PYTHONPATH"] = files + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    os.makedirs(env["TRITON_CACHE_DIR"], exist_ok=True)
    _private_dir(_p("logs"))
    log_path = _p("logs", rel["id"] + ".warmup.log")
    start = time.time()
    try:
        with _open_private_log(log_path) as log:
            rc = _run_locked(
                params["argv"],
                params,
                timeout=float(params.get("timeout_s", 600)),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=_p("releases", rel["id"]),
                env=env,
            )
    except OSError as err:
        raise AgentError("cannot run the warm-up %s: %s" % (params["argv"][0], err.strerror or err)) from err
    with open(log_path, "rb") as f:
        tail = f.read()[-4000:].decode(errors="replace")
    return {
        "rc": rc,
        "elapsed_s": time.time() - start,
        "log": log_path,
        "tail": tail,
        "triton_cache": env["TRITON_CACHE_DIR"],
    }


def op_start(params: dict):
    """Start the release's server detached (new session, pid file, log file). Refuses if ours is running."""
    _require_lock(params)
    rel = _release(params["id"])
    cur = _server_info()
    if cur and cur.get("running"):
        if (
            cur.get("release") == rel["id"]
        ):  # a repeated start (the caller's connection dropped): already done
            return dict(cur, already=True, log_offset=cur.get("log_offset", 0))
        raise AgentError(
            "a server (pid %s, release %s) is already running; stop it first"
            % (cur["pid"], cur.get("release"))
        )
    argv = list(rel["launch_argv"])
    env = _server_env(rel)
    _private_dir(_p("logs"))
    _private_dir(_p("run"))
    os.makedirs(env["TRITON_CACHE_DIR"], exist_ok=True)
    log_path = _p("logs", rel["id"] + ".log")
    log = _open_private_log(log_path)
    log_offset = log.tell()
    log.write(
        (
            "\n==== ddtctl: starting release %s at %s ====\n"
            % (rel["id"], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        ).encode()
    )
    log.flush()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=_p("releases", rel["id"]),
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as err:
        raise AgentError("cannot start %s: %s" % (argv[0], err.strerror or err)) from err
    finally:
        log.close()
    st = _proc_starttime(proc.pid)
    info = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "starttime": st[0] if st else None,
        "release": rel["id"],
        "port": rel.get("port"),
        "log": log_path,
        "log_offset": log_offset,
        "started": time.time(),
        "argv": argv,
    }
    _write_json(_p("run", "server.json"), info)
    try:
        os.unlink(_p("logs", "server.log"))
    except FileNotFoundError:
        pass
    os.symlink(log_path, _p("logs", "server.log"))
    return info


def op_stop(params: dict):
    """Stop our server: SIGTERM to its process group, SIGKILL after the grace period."""
    _require_lock(params)
    info = _read_json(_p("run", "server.json"))
    if not info or not _alive(info):
        if info:
            os.replace(_p("run", "server.json"), _p("run", "server.last.json"))
        return {"was_running": False}
    grace = float(params.get("grace_s", 20))
    forced = False
    _killpg(info, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline and _alive(info):
        time.sleep(0.05)
    if _alive(info):
        forced = True
        _killpg(info, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline and _alive(info):
            time.sleep(0.05)
    if _alive(info):
        raise AgentError("server pid %d did not exit after SIGKILL" % info["pid"])
    os.replace(_p("run", "server.json"), _p("run", "server.last.json"))
    return {"was_running": True, "pid": info["pid"], "release": info.get("release"), "forced": forced}


def _killpg(info, sig) -> None:
    try:
        os.killpg(int(info.get("pgid") or info["pid"]), sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(int(info["pid"]), sig)


def _api_key(argv) -> str | None:
    """The server's own --api-key (last one wins, as in argparse), read from its launch record on this host:
    SGLang guards /get_server_info with it, and it never has to travel in a probe's parameters."""
    key = None
    argv = list(argv or [])
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            key = argv[i + 1]
        elif arg.startswith("--api-key="):
            key = arg.split("=", 1)[1]
    return key or None


def _http_get(url: str, timeout: float, token: str | None = None):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(1 << 20)
    except urllib.error.HTTPError as err:
        return err.code, b""
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return None, str(reason).encode()


def op_probe(params: dict):
    """One health poll: is our process alive, /health, then /get_server_info, and the new log bytes."""
    info = _read_json(_p("run", "server.json"))
    alive = _alive(info)
    out = {
        "running": alive,
        "pid": (info or {}).get("pid"),
        "release": (info or {}).get("release"),
        "health": None,
        "health_error": None,
        "server_info": None,
    }
    if alive:
        base = "http://%s:%d" % (params.get("host") or "127.0.0.1", int(params["port"]))
        code, body = _http_get(base + "/health", float(params.get("http_timeout_s", 3)))
        out["health"] = code
        if code is None:
            out["health_error"] = body.decode(errors="replace")[:200]
        if code == 200 and params.get("server_info", True):
            code2, body2 = _http_get(
                base + "/get_server_info",
                float(params.get("http_timeout_s", 3)) * 3,
                _api_key(info.get("argv")),
            )
            if code2 == 200:
                try:
                    out["server_info"] = json.loads(body2.decode())
                except ValueError:
                    out["server_info"] = {"_unparsable": body2[:200].decode(errors="replace")}
            else:
                out["health_error"] = "/get_server_info returned %s" % code2
    out.update(_log_read(params))
    return out


def _log_read(params: dict):
    rid = params.get("log_release")
    path = _p("logs", _safe_id(rid) + ".log") if rid else _p("logs", "server.log")
    offset = params.get("log_offset")
    try:
        size = os.path.getsize(path)
    except OSError:
        return {"log": "", "log_offset": 0, "log_path": path}
    with open(path, "rb") as f:
        if offset is None:  # tail: the last N lines
            n = int(params.get("lines", 40))
            f.seek(max(0, size - 65536))
            data = f.read()
            text = b"\n".join(data.splitlines()[-n:]).decode(errors="replace") if n else ""
            return {"log": text, "log_offset": size, "log_path": path}
        offset = min(int(offset), size)
        f.seek(offset)
        data = f.read(1 << 20)
        return {"log": data.decode(errors="replace"), "log_offset": offset + len(data), "log_path": path}


def op_logs(params: dict):
    return _log_read(params)


def _sweep(root: str, rid: str) -> bool:
    """A point `ddtctl tune` deployed (release.json `kind: sweep`): dropped before any other release."""
    return (_read_json(os.path.join(root, rid, "release.json")) or {}).get("kind") == "sweep"


def op_gc(params: dict):
    """Drop failed/old releases beyond `keep` (sweep points first, then the oldest) and store objects no
    release references."""
    _require_lock(params)
    keep = int(params.get("keep", 5))
    state = _state()
    protected = {
        state.get("current"),
        state.get("previous"),
        (state.get("installed_payload") or {}).get("release"),
    }
    root = _p("releases")
    rids = sorted(r for r in os.listdir(root) if not r.startswith(".")) if os.path.isdir(root) else []
    order = sorted(rids, key=lambda r: (not _sweep(root, r), r))  # the first ones go first
    removed = []
    for rid in order[: max(0, len(rids) - keep)]:
        if rid not in protected:
            shutil.rmtree(os.path.join(root, rid), ignore_errors=True)
            removed.append(rid)
    for junk in os.listdir(root) if os.path.isdir(root) else []:
        if junk.startswith(".tmp-"):
            shutil.rmtree(os.path.join(root, junk), ignore_errors=True)
    dropped = _drop_unused_objects(root)
    shutil.rmtree(_p("incoming"), ignore_errors=True)
    return {"removed_releases": removed, "dropped_objects": dropped}


def _drop_unused_objects(root: str) -> int:
    """Remove the store objects no release under `root` references; their count."""
    used: set[str] = set()
    for rid in os.listdir(root) if os.path.isdir(root) else []:
        rel = _read_json(os.path.join(root, rid, "release.json")) or {}
        for section in ("payload", "tools"):
            used.update(e["sha256"] for e in (rel.get(section) or {}).get("files", {}).values())
    dropped = 0
    if os.path.isdir(_p("store")):
        for h in os.listdir(_p("store")):
            if h not in used:
                os.unlink(_p("store", h))
                dropped += 1
    return dropped


def op_prune(params: dict):
    """Remove the releases `ids` (record and payload dirs; `ddtctl releases --prune`, under the deploy lock),
    then the store objects no release uses. Each release leaves at once (renamed out of releases/, then
    deleted); one already gone is skipped (a re-run after a dropped connection). Refuses the current release,
    the one whose payload is installed, and those of an interrupted deploy."""
    _require_lock(params)
    state = _state()
    journal = _read_json(_p(JOURNAL)) or {}
    protected = {
        state.get("current"): "the current release",
        (state.get("installed_payload") or {}).get("release"): "the release whose payload is installed",
        journal.get("release"): "an interrupted deploy's release",
        journal.get("previous"): "the release an interrupted deploy puts back",
    }
    ids = [_safe_id(str(r)) for r in params.get("ids") or []]
    for rid in ids:
        if rid in protected:
            raise AgentError("refusing to remove release %s: it is %s" % (rid, protected[rid]))
    root = _p("releases")
    removed = []
    for rid in ids:
        src, trash = os.path.join(root, rid), os.path.join(root, ".tmp-prune-" + rid)
        if not os.path.isdir(src):
            continue
        shutil.rmtree(trash, ignore_errors=True)
        os.rename(src, trash)
        removed.append(rid)
    if state.get("previous") in removed:  # `previous` names a release that is gone
        state["previous"] = None
        _save_state(state)
    for rid in removed:
        shutil.rmtree(os.path.join(root, ".tmp-prune-" + rid), ignore_errors=True)
    return {"removed_releases": removed, "dropped_objects": _drop_unused_objects(root)}


JOURNAL = "deploy-journal.json"
QUIESCE_S = 120.0  # the longest a dead holder's operation may still run (a stop's grace, an installer's kill)


def op_journal(params: dict):
    """`begin`: this holder is about to touch the running server (stop, install, start `release`); if it dies
    before `end` (or before `release` is made current), the next holder of another session puts `previous`
    back. `end`: the deploy put the host in a state it reports (recorded, or rolled back)."""
    _require_lock(params)
    if params["action"] == "end":
        try:
            os.unlink(_p(JOURNAL))
        except FileNotFoundError:
            pass
        return {"journal": None}
    held = _read_json(_p("lock.json"), {})
    journal = {
        "release": _safe_id(params["release"]),
        "previous": _safe_id(params["previous"]) if params.get("previous") else None,
        "sglang_root": params.get("sglang_root"),
        "holder": held.get("holder"),
        "session": held.get("session"),
        "since": time.time(),
    }
    _write_json(_p(JOURNAL), journal)
    return {"journal": journal}


def _quiesce() -> None:
    """Wait until no lock-holding operation of an earlier holder still runs (they hold W/ops.lock shared; a
    dead holder's installer stops as soon as it sees the lock lost)."""
    fd = os.open(_p("ops.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.time() + QUIESCE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.time() > deadline:
                raise AgentError("a previous lock holder's operation still runs after %ds" % QUIESCE_S)
            time.sleep(0.05)
    finally:
        os.close(fd)


def _recover(token: str, journal: dict) -> dict:
    """Put the release that served before an interrupted deploy back: stop what runs instead, mark the
    interrupted release, reinstall the previous payload (the overlay installer finishes or rolls back its own
    interrupted run first) and start the previous server (not waited for: the caller probes it)."""
    p = {"lock_token": token, "sglang_root": journal.get("sglang_root"), "timeout_s": 600, "grace_s": 20}
    new, prev = journal.get("release"), journal.get("previous")
    done = []
    srv = _server_info()
    if srv and srv.get("running") and srv.get("release") != prev:
        op_stop(p)
        done.append("stopped %s" % srv.get("release"))
    rel = _read_json(_p("releases", _safe_id(new), "release.json")) if new else None
    if rel is not None and rel.get("status") in (None, "new"):
        note = "deploy interrupted (%s); restored %s" % (journal.get("holder"), prev or "nothing")
        op_set_status(dict(p, id=new, status="interrupted", note=note))
    prev_rel = _read_json(_p("releases", _safe_id(prev), "release.json")) if prev else None
    if prev_rel is not None and prev_rel.get("payload_hash"):
        op_install(dict(p, id=prev, force=True))
    else:
        op_uninstall(p)
    srv = _server_info()
    if prev_rel is not None and not (srv and srv.get("running") and srv.get("release") == prev):
        op_start(dict(p, id=prev))
        done.append("started %s" % prev)
    os.unlink(_p(JOURNAL))
    out = dict(journal, actions=done, time=time.time())
    state = _state()
    state["recovered"] = out
    _save_state(state)
    return out


def _take_over(token: str, session, stale) -> dict:
    """What the new holder finds: the stale lock of a holder that died without releasing it, and an
    interrupted deploy of another session, undone (a reconnecting holder of the same session resumes its
    own)."""
    _quiesce()
    out = {"took_over": stale if stale and stale.get("session") != session else None, "recovered": None}
    journal = _read_json(_p(JOURNAL))
    if journal and journal.get("session") != session:
        out["recovered"] = _recover(token, journal)
    return out


def op_lock(params: dict):
    """Take the deploy lock and hold it until stdin closes (the deploy ends or its connection drops). A holder
    that ends cleanly writes RELEASE first; one that dies leaves lock.json behind (a stale lock)."""
    os.makedirs(W, mode=0o700, exist_ok=True)
    fd = os.open(_p("lock"), os.O_RDWR | os.O_CREAT, 0o600)
    wait_s = float(params.get("wait_s", 0))
    deadline = time.time() + wait_s
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = _read_json(_p("lock.json"), {})
            if time.time() >= deadline:
                _emit({"ok": False, "error": "locked", "held_by": holder})
                return None
            if not announced:
                _emit({"ok": True, "waiting": True, "held_by": holder})
                announced = True
            time.sleep(0.1)
    stale = _read_json(_p("lock.json"))
    st = _proc_starttime(os.getpid())
    info = {
        "token": params["token"],
        "holder": params.get("holder"),
        "session": params.get("session"),
        "pid": os.getpid(),
        "starttime": st[0] if st else None,
        "since": time.time(),
    }
    granted = released = False
    try:
        _write_json(_p("lock.json"), info)
        found = _take_over(params["token"], params.get("session"), stale)
        _emit(dict(found, ok=True, locked=True, lock=info))
        granted = True
        tail = b""
        while True:
            chunk = sys.stdin.buffer.read(4096)
            if not chunk:
                break
            tail = (tail + chunk)[-64:]
        released = b"RELEASE" in tail
    except Exception as err:  # not granted: a full disk, a recovery that failed
        if granted:
            raise
        _emit({"ok": False, "error": "%s: %s" % (type(err).__name__, err)})
    finally:
        try:
            if (_read_json(_p("lock.json")) or {}).get("token") == params["token"]:
                if granted and released:
                    os.unlink(_p("lock.json"))
                elif not granted and stale is not None:
                    _write_json(_p("lock.json"), stale)  # not taken over after all
                elif not granted:
                    os.unlink(_p("lock.json"))
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
    return None


def _tail(path: str, limit: int) -> str:
    """The last `limit` bytes of a file, as text ("" when it is missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


def _json_rows(path: str, limit: int) -> list:
    """The JSON objects of a JSON-lines file, from its last `limit` bytes (a line cut there or not JSON: left
    out)."""
    rows = []
    for line in _tail(path, limit).splitlines():
        try:
            row = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def op_bench(params: dict):
    """Run a load generator (SGLang's benchmark client) with `--output-file` in a private temporary directory
    and return the JSON rows it wrote, its exit status and the tail of its output (`tail_bytes`; the output
    goes to a file there, never into memory whole). stdin carries one JSON object that must stay off the
    command line: `env` (added to the benchmark's environment: the server's API key) and `prompts` (a
    JSON-lines dataset, written there and passed as --dataset-path). The directory is removed afterwards."""
    raw = sys.stdin.buffer.read(MAX_BENCH_INPUT + 1)  # bytes, as the bound says (text would count characters)
    if len(raw) > MAX_BENCH_INPUT:
        raise AgentError(
            "the benchmark's input (its env and prompts dataset) is over %d MiB; use a smaller prompts file"
            % (MAX_BENCH_INPUT >> 20)
        )
    extra = json.loads(raw or b"{}")
    argv = [str(a) for a in params["argv"]]
    timeout = float(params["timeout_s"])
    limit = int(params.get("tail_bytes", 3000))
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (extra.get("env") or {}).items()})
    d = tempfile.mkdtemp(prefix="ddtctl-tune-")
    out, log = os.path.join(d, "bench.jsonl"), os.path.join(d, "bench.log")
    start = time.time()
    try:
        if extra.get("prompts") is not None:
            with open(os.path.join(d, "prompts.jsonl"), "w", encoding="utf-8") as f:
                f.write(extra["prompts"])
            argv += ["--dataset-path", os.path.join(d, "prompts.jsonl")]
        try:
            with _open_private_log(log) as f:
                proc = subprocess.Popen(
                    argv + ["--output-file", out],
                    stdin=subprocess.DEVNULL,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # a timeout stops the client's own workers too
                )
            try:
                rc, tail = proc.wait(timeout=timeout), _tail(log, limit)
            except subprocess.TimeoutExpired:
                _stop_group(proc)
                rc, tail = 124, "the benchmark timed out after %gs" % timeout
        except OSError as err:
            rc, tail = 127, "cannot run the benchmark: %s" % err
        rows = _json_rows(out, 16 << 20)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return {"rc": rc, "tail": tail, "rows": rows, "elapsed_s": time.time() - start}


def op_batch(params: dict):
    """Several operations in one SSH round trip; stops at the first failure (later ones do not run)."""
    results = []
    for name, sub in params["ops"]:
        if name in ("lock", "batch", "commit_stream", "bench") or name not in OPS:
            raise AgentError("operation %r cannot be batched" % name)
        sub = dict(sub)
        if params.get("lock_token") and "lock_token" not in sub:
            sub["lock_token"] = params["lock_token"]
        try:
            results.append(OPS[name](sub))
        except AgentError as err:
            raise AgentError("%s: %s" % (name, err)) from err
    return results


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main(argv) -> int:
    global W
    if len(argv) != 3 or argv[1] not in OPS:
        sys.stderr.write("usage: agent.py {%s} BASE64_JSON\n" % ",".join(sorted(OPS)))
        return 2
    try:
        params = json.loads(base64.b64decode(argv[2]).decode())
        W = os.path.abspath(os.path.expanduser(params.pop("work_dir")))
        os.makedirs(W, mode=0o700, exist_ok=True)
        result = OPS[argv[1]](params)
        if argv[1] != "lock":
            _emit({"ok": True, "result": result, "work_dir": W})
    except AgentError as err:
        _emit({"ok": False, "error": str(err), "work_dir": W})
    except Exception as err:  # report, never a bare traceback only
        import traceback

        _emit(
            {
                "ok": False,
                "error": "%s: %s" % (type(err).__name__, err),
                "traceback": traceback.format_exc(),
                "work_dir": W,
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
