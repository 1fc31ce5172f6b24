"""Install, uninstall, status and verify: plain functions returning result objects (the CLI only prints them).

install / uninstall / status run installer.py with the *target* interpreter (it byte-compiles what it installs
with that interpreter, exactly as it does on a remote host); verify runs smoke.py with the target interpreter,
the payload view first on sys.path (or against the installed payload with installed=True).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtctl.errors import EnvironmentMissing, OverlayError
from ddtctl.overlay import installer
from ddtctl.overlay.build import BuildResult, Target, build, cache_root, resolve_target
from ddtctl.overlay.source import load_built_manifest, load_source_manifest
from ddtctl.procs import python_output

_HERE = Path(__file__).resolve().parent


def default_state_dir(sglang_root: Path) -> Path:
    key = hashlib.sha256(str(Path(sglang_root).resolve()).encode()).hexdigest()[:16]
    return cache_root() / "state" / key


RUN_OUTPUT_LIMIT = 32 * 1024 * 1024  # an installer's or smoke check's output: a JSON line and its logs


def _run_json(
    python: Path,
    args: list[str],
    *,
    timeout: float,
    what: str,
    isolated: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], str]:
    """`python ARGS` (procs.python_output) whose last stdout line is a JSON object: (exit, it, stderr)."""
    proc = python_output(
        python,
        args,
        isolated=isolated,
        timeout_s=timeout,
        limit=RUN_OUTPUT_LIMIT,
        what=what,
        env=env,
        error=OverlayError,
        start_error=EnvironmentMissing,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OverlayError(f"{what} failed (exit {proc.returncode}): {tail}")
    try:
        reply = json.loads(lines[-1])
    except (ValueError, RecursionError):
        reply = None
    if not isinstance(reply, dict):
        raise OverlayError(f"{what} printed a reply that is not a JSON object (exit {proc.returncode})")
    return proc.returncode, reply, proc.stderr


def run_installer(
    command: str,
    target: Target,
    *,
    payload_dir: Path | None = None,
    state_dir: Path | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    # Always ddtctl's own installer: a payload directory's installer.py is the payload's file, never code we
    # run (issue #14: `overlay install --payload DIR` executed DIR/installer.py).
    script = _HERE / "installer.py"
    args = [
        str(script),
        command,
        "--sglang-root",
        str(target.sglang_root),
        "--state-dir",
        str(state_dir or default_state_dir(target.sglang_root)),
    ]
    if payload_dir is not None:
        args += ["--payload", str(payload_dir)]
    rc, out, _ = _run_json(target.python, args, timeout=timeout, what=f"installer {command}")
    if not out.get("ok"):
        raise OverlayError(
            out.get("error") or f"installer {command} failed (exit {rc})", where=str(target.sglang_root)
        )
    return out


@dataclass
class InstallResult:
    action: str  # installed | replaced | uninstalled | none
    sglang_root: Path
    state_dir: Path
    python: Path
    payload_id: str | None = None
    recovered: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_installer(cls, out: dict[str, Any], target: Target, state: Path) -> "InstallResult":
        """The installer's JSON reply for `target`, with the state dir it used."""
        return cls(
            out.get("action", "?"),
            target.sglang_root,
            state,
            target.python,
            out.get("payload_id"),
            out.get("recovered"),
            out,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "sglang_root": str(self.sglang_root),
            "state_dir": str(self.state_dir),
            "python": str(self.python),
            "payload_id": self.payload_id,
            "recovered": self.recovered,
            "details": self.details,
        }


def _staged_payload(
    payload: str | Path | None, target: Target
) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """A built payload directory: the given one (with ddtree-manifest.json), or a fresh build of a payload
    source (default: the bundled payload) against the target's own pristine files."""
    if payload is not None and (Path(payload) / installer.MANIFEST_NAME).is_file():
        return Path(payload), None
    tmp = tempfile.TemporaryDirectory(prefix="ddtctl-overlay-")
    result = build(
        payload, sglang_root=target.sglang_root, python=target.python, out_dir=Path(tmp.name) / "build"
    )
    return result.payload_dir, tmp


def _payload_sglang(payload: str | Path | None) -> str:
    if payload is not None and (Path(payload) / installer.MANIFEST_NAME).is_file():
        return load_built_manifest(Path(payload) / installer.MANIFEST_NAME)["sglang"]
    return load_source_manifest(payload).sglang


def install(
    sglang_root: str | Path,
    *,
    payload: str | Path | None = None,
    python: str | Path | None = None,
    state_dir: str | Path | None = None,
) -> InstallResult:
    target = resolve_target(_payload_sglang(payload), sglang_root, python)
    state = Path(state_dir) if state_dir else default_state_dir(target.sglang_root)
    staged, tmp = _staged_payload(payload, target)
    try:
        out = run_installer("install", target, payload_dir=staged, state_dir=state)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return InstallResult.from_installer(out, target, state)


def uninstall(
    sglang_root: str | Path,
    *,
    python: str | Path | None = None,
    state_dir: str | Path | None = None,
    sglang: str = "0.5.23",
) -> InstallResult:
    target = resolve_target(sglang, sglang_root, python)
    state = Path(state_dir) if state_dir else default_state_dir(target.sglang_root)
    out = run_installer("uninstall", target, state_dir=state)
    return InstallResult.from_installer(out, target, state)


def status(
    sglang_root: str | Path,
    *,
    python: str | Path | None = None,
    state_dir: str | Path | None = None,
    sglang: str = "0.5.23",
) -> dict[str, Any]:
    target = resolve_target(sglang, sglang_root, python)
    state = Path(state_dir) if state_dir else default_state_dir(target.sglang_root)
    out = run_installer("status", target, state_dir=state)
    out["state_dir"] = str(state)
    return out


@dataclass
class VerifyResult:
    ok: bool
    python: Path
    payload_id: str | None
    view: Path | None
    checks: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "python": str(self.python),
            "payload_id": self.payload_id,
            "view": str(self.view) if self.view else None,
            "checks": self.checks,
            "versions": self.versions,
            "error": self.error,
        }


def verify(
    payload: str | Path | None = None,
    *,
    sglang_root: str | Path | None = None,
    python: str | Path | None = None,
    installed: bool = False,
    checks: list[str] | None = None,
    timeout: float = 600.0,
) -> VerifyResult:
    """Run the payload's smoke checks in the target interpreter. Builds (or reuses) the payload first unless
    `installed`, which checks what is installed in the target's site-packages instead."""
    view: Path | None = None
    build_result: BuildResult | None = None
    if installed:
        m = load_source_manifest(payload)
        target = resolve_target(m.sglang, sglang_root, python)
        wanted = checks or [c["id"] for c in m.smoke]
        smoke = _HERE / "smoke.py"
        pid = None
    else:
        build_result = build(payload, sglang_root=sglang_root, python=python, reuse=True)
        target = Target(build_result.sglang_root, build_result.python)
        built = load_built_manifest(build_result.payload_dir / installer.MANIFEST_NAME)
        wanted = checks or [c["id"] for c in built.get("smoke", [])]
        view = build_result.view_dir
        smoke = build_result.payload_dir / "smoke.py"
        pid = build_result.payload_id
    args = [str(smoke), "--checks", ",".join(wanted)]
    env = None
    if view is not None:
        args += ["--view", str(view)]
    else:  # the install checked is the one in --sglang-root, also when that is not the interpreter's own
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(target.sglang_root)] + [p for p in [env.get("PYTHONPATH")] if p]
        )
    # not -I: the smoke checks read PYTHONPATH (the install checked in --sglang-root)
    _, out, stderr = _run_json(
        target.python, args, timeout=timeout, what="smoke checks", isolated=False, env=env
    )
    return VerifyResult(
        bool(out.get("ok")),
        target.python,
        pid,
        view,
        out.get("checks", []),
        out.get("versions", {}),
        out.get("error"),
    )
