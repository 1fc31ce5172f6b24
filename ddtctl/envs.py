"""The managed SGLang environment: a cached venv in which SGLang's own resolver runs on CPU.

`ddtctl env create` builds it once under `${XDG_CACHE_HOME:-~/.cache}/ddtctl/sglang-<version>/`:
CPU torch first (so nothing pulls a CUDA build), `sglang==<version> --no-deps`, the pinned set of packages the
resolver imports (ddtctl/bridge/requirements-sglang-<version>.txt), torchvision without its deps. The build
happens in a temporary directory next to the target and is renamed into place only after the resolver worker
imported sglang successfully, so a half-built env is never used. A stamp records the hash of the requirement
set: the same set is not rebuilt, a changed set is.

Nothing here imports sglang or torch; they only ever run in the env's own interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from ddtctl.bridge.client import ResolverClient
from ddtctl.errors import EnvironmentMissing, UsageError
from ddtctl.paths import cache_root
from ddtctl.procs import python_output, run_bounded
from ddtctl.safeio import load_json, read_text, write_new

DEFAULT_SGLANG = "0.5.23"
STAMP_NAME = ".ddtctl-env.json"
BRIDGE_DIR = Path(__file__).resolve().parent / "bridge"
WORKER_SCRIPT = BRIDGE_DIR / "resolver_worker.py"

# Per supported release: the install steps, in order. torch goes first so no later step pulls a CUDA torch.
_RECIPES: dict[str, dict] = {
    "0.5.23": {
        "python": "3.11",
        "torch": "torch==2.13.0",
        "sglang": "sglang==0.5.23",
        "torchvision": "torchvision==0.28.0",
        "lock": "requirements-sglang-0.5.23.txt",
    },
}

ProgressFn = Callable[[int, int, str], None]


def supported_versions() -> list[str]:
    return sorted(_RECIPES)


def _recipe(version: str) -> dict:
    try:
        return _RECIPES[version]
    except KeyError:
        raise UsageError(
            f"no managed-environment recipe for sglang {version!r}",
            fix=f"use --sglang {' or '.join(supported_versions())}",
        ) from None


def requirement_lines(version: str) -> list[str]:
    """The lock file's requirement lines (comments and blanks dropped)."""
    text = read_text(BRIDGE_DIR / _recipe(version)["lock"], 1 << 20, what="requirements lock")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def requirements_hash(version: str) -> str:
    """Hash of everything that decides the env's content (install steps, pins, python minor version)."""
    recipe = _recipe(version)
    payload = {
        "python": recipe["python"],
        "steps": [
            recipe["torch"],
            recipe["sglang"] + " --no-deps",
            "-r lock",
            recipe["torchvision"] + " --no-deps",
        ],
        "lock": requirement_lines(version),
        "format": 1,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class ManagedEnv:
    version: str
    root: Path
    python: Path
    exists: bool  # a complete env with a stamp is there
    status: str  # ready | missing | stale | incomplete | external
    stamp: dict | None = None
    expected_hash: str = ""
    size_bytes: int | None = None
    external: bool = False  # python given by DDTCTL_SGLANG_PYTHON, not built by ddtctl

    @property
    def ready(self) -> bool:
        return self.status in ("ready", "external")

    def to_dict(self) -> dict:
        stamp = self.stamp or {}
        return {
            "sglang": self.version,
            "root": str(self.root),
            "python": str(self.python),
            "status": self.status,
            "exists": self.exists,
            "requirements_hash": stamp.get("requirements_hash"),
            "expected_hash": self.expected_hash,
            "versions": stamp.get("versions", {}),
            "created": stamp.get("created"),
            "size_bytes": self.size_bytes,
        }


def env_root(version: str = DEFAULT_SGLANG) -> Path:
    return cache_root() / f"sglang-{version}"


def _read_stamp(root: Path) -> dict | None:
    try:
        stamp = load_json(root / STAMP_NAME, 1 << 20, what="env stamp", error=EnvironmentMissing)
    except EnvironmentMissing:
        return None
    return stamp if isinstance(stamp, dict) else None


def managed_env(version: str = DEFAULT_SGLANG, *, with_size: bool = False) -> ManagedEnv:
    """Describe the managed env for `version` (never builds anything)."""
    expected = requirements_hash(version)
    override = os.environ.get("DDTCTL_SGLANG_PYTHON")
    if override:
        py = Path(override)
        return ManagedEnv(
            version,
            py.parent.parent,
            py,
            py.exists(),
            "external" if py.exists() else "missing",
            expected_hash=expected,
            external=True,
        )
    root = env_root(version)
    python = root / "bin" / "python"
    stamp = _read_stamp(root)
    if not root.exists():
        status = "missing"
    elif stamp is None or not python.exists():
        status = "incomplete"
    elif stamp.get("requirements_hash") != expected:
        status = "stale"
    else:
        status = "ready"
    env = ManagedEnv(version, root, python, status in ("ready", "stale"), status, stamp, expected)
    if with_size and root.exists():
        env.size_bytes = dir_size(root)
    return env


def require_env(version: str = DEFAULT_SGLANG) -> ManagedEnv:
    """The managed env, or EnvironmentMissing saying how to create it."""
    env = managed_env(version)
    if env.ready:
        return env
    what = {
        "missing": "is not built",
        "incomplete": "is incomplete",
        "stale": "was built from an older requirement set",
    }.get(env.status, f"is {env.status}")
    raise EnvironmentMissing(
        f"the managed SGLang {version} environment ({env.root}) {what}",
        fix=f"run `ddtctl env create --sglang {version}`",
    )


def dir_size(root: Path) -> int:
    total = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _find_base_python(minor: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    if "%d.%d" % sys.version_info[:2] == minor:
        return sys.executable
    found = shutil.which(f"python{minor}")
    if not found:
        raise EnvironmentMissing(
            f"SGLang's resolver needs Python {minor}, which is not on PATH",
            fix=f"install python{minor} or pass --python /path/to/python{minor}",
        )
    return found


@dataclass
class CreateResult:
    env: ManagedEnv
    built: bool  # False: already up to date
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)


class _Lock:
    """An exclusive lock file, so two `env create` runs (e.g. make and a test) do not build at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: TextIO | None = None

    def __enter__(self) -> _Lock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "w")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        import fcntl

        if self.fh is None:  # never entered
            return
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


PIP_STEP_TIMEOUT_S = 3600.0  # one pip step (torch's CPU wheel is ~200 MB); a stalled index is killed
PIP_STEP_LIMIT = 64 * 1024 * 1024  # bytes of pip's output in one step (a verbose torch install is ~1 MB)


def _run(cmd: list[str], log, *, env: dict | None = None, verbose: bool = False) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()

    def show(chunk: bytes) -> None:
        text = chunk.decode("utf-8", "replace")
        log.write(text)
        if verbose:
            sys.stderr.write(text)

    rc = run_bounded(
        cmd,
        timeout_s=PIP_STEP_TIMEOUT_S,
        limit=PIP_STEP_LIMIT,
        what=os.path.basename(cmd[0]) + (f" {cmd[1]} {cmd[2]}" if len(cmd) > 2 else ""),
        merge_stderr=True,
        on_output=show,
        env=env,
    ).returncode
    log.flush()
    if rc != 0:
        raise EnvironmentMissing(
            f"command failed (exit {rc}): {' '.join(cmd)}",
            where=log.name,
            fix="see the build log for pip's message; fix the network/index and re-run `ddtctl env create`",
        )


def create_env(
    version: str = DEFAULT_SGLANG,
    *,
    force: bool = False,
    base_python: str | None = None,
    progress: ProgressFn | None = None,
    verbose: bool = False,
) -> CreateResult:
    """Build the managed env (idempotent: does nothing when the stamp matches the requirement set)."""
    recipe = _recipe(version)
    say = progress or (lambda i, n, msg: None)
    root = env_root(version)
    expected = requirements_hash(version)
    with _Lock(cache_root() / f".sglang-{version}.lock"):
        current = managed_env(version)
        if current.status == "ready" and not force:
            return CreateResult(current, built=False)
        t0 = time.monotonic()
        python = _find_base_python(recipe["python"], base_python)
        tmp = root.parent / f".{root.name}.building-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        root.parent.mkdir(parents=True, exist_ok=True)
        log_path = root.parent / f"sglang-{version}.build.log"
        total = 6
        steps: list[str] = []
        pip_env = dict(os.environ)
        pip_env.pop("PIP_REQUIRE_VIRTUALENV", None)
        pip_env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                venv_py = str(tmp / "bin" / "python")
                pip = [venv_py, "-m", "pip", "install", "--no-input", "--progress-bar", "off"]
                plan = [
                    (f"creating venv ({python})", [python, "-m", "venv", str(tmp)]),
                    (f"installing {recipe['torch']} (CPU build, first)", pip + [recipe["torch"]]),
                    (f"installing {recipe['sglang']} --no-deps", pip + ["--no-deps", recipe["sglang"]]),
                    (
                        f"installing the resolver's pinned packages ({len(requirement_lines(version))})",
                        pip + ["-r", str(BRIDGE_DIR / recipe["lock"])],
                    ),
                    (
                        f"installing {recipe['torchvision']} --no-deps",
                        pip + ["--no-deps", recipe["torchvision"]],
                    ),
                ]
                for i, (label, cmd) in enumerate(plan, start=1):
                    say(i, total, label)
                    _run(cmd, log, env=pip_env, verbose=verbose)
                    steps.append(label)
                    _check_torch_is_cpu(venv_py, i, log)
                say(total, total, "verifying: starting the resolver worker (imports sglang)")
                versions = verify_python(Path(venv_py))
                steps.append("verified")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        stamp = {
            "sglang": version,
            "requirements_hash": expected,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "base_python": python,
            "versions": versions,
            "build_seconds": round(time.monotonic() - t0, 1),
        }
        write_new(tmp / STAMP_NAME, json.dumps(stamp, indent=2) + "\n")
        # Swap into place: the old env (if any) is moved aside first, then removed.
        old = None
        if root.exists():
            old = root.parent / f".{root.name}.old-{os.getpid()}"
            os.rename(root, old)
        os.rename(tmp, root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return CreateResult(managed_env(version), built=True, seconds=time.monotonic() - t0, steps=steps)


def _check_torch_is_cpu(venv_py: str, step: int, log) -> None:
    """After each install step: if torch is present it must be the CPU build (never a CUDA one)."""
    if step < 2:
        return
    code = "import importlib.metadata as m; print(m.version('torch'))"
    out = python_output(venv_py, code, isolated=False, timeout_s=120, limit=1 << 20, what="the env's python")
    ver = out.stdout.strip()
    if out.returncode == 0 and "+cpu" not in ver:
        deps = run_bounded(
            [venv_py, "-m", "pip", "list"], timeout_s=300, limit=8 << 20, what="pip list"
        ).stdout
        if "nvidia-" in deps:
            raise EnvironmentMissing(
                f"a CUDA build of torch ({ver}) was installed into the managed env",
                where=log.name,
                fix="make `pip install torch==2.13.0` resolve to the CPU build "
                "(e.g. --index-url for CPU wheels)",
            )


def verify_python(python: Path, *, timeout_s: float = 300.0) -> dict:
    """Start the resolver worker with `python` and wait for it to import
    sglang; returns the versions it reports."""
    client = ResolverClient(python, startup_timeout_s=timeout_s)
    try:
        info = client.start()
    finally:
        client.close()
    versions = dict(info.get("versions") or {})
    versions["import_s"] = info.get("import_s")
    return versions


def remove_env(version: str = DEFAULT_SGLANG) -> bool:
    root = env_root(version)
    if not root.exists():
        return False
    with _Lock(cache_root() / f".sglang-{version}.lock"):
        trash = root.parent / f".{root.name}.old-{os.getpid()}"
        os.rename(root, trash)
        shutil.rmtree(trash, ignore_errors=True)
    return True
