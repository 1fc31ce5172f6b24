"""SGLang's own resolver on the host (its python, its model configs), with the release's payload staged as a
read-only view first on sys.path: the launch is judged by what will run it, before anything is installed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ddtctl.bridge.client import stderr_cause
from ddtctl.dryrun import DryRunResult, platform_for
from ddtctl.errors import UsageError
from ddtctl.remote.facts import HostFacts
from ddtctl.remote.transport import Connection

from .spec import DeploySpec, Target

if TYPE_CHECKING:
    from ddtctl.dryrun import DryRunResult

VIEW_TIMEOUT_S = 120


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {}


def _stage_view(conn: Connection, rel_dir: str, spec: DeploySpec, facts: HostFacts) -> tuple[str, str | None]:
    """(the payload view's directory, or an error): installer.py `view` builds it from the staged payload."""
    view = f"{rel_dir}/view"
    res = conn.run(
        [
            conn.host.python,
            f"{rel_dir}/tools/installer.py",
            "view",
            "--sglang-root",
            facts.sglang_root or "",
            "--payload",
            f"{rel_dir}/payload",
            "--out",
            view,
        ],
        timeout=VIEW_TIMEOUT_S,
    )
    reply = _last_json(res.stdout)
    if res.rc != 0 or not reply.get("ok"):
        return view, reply.get("error") or res.stderr.strip()[-400:]
    return view, None


def _resolver_argv(
    target: Target, spec: DeploySpec, facts: HostFacts
) -> tuple[list[str], dict | None, str | None]:
    """(argv, platform, gpu) for the resolver: the host's GPU when ddtctl knows it, else the profile's."""

    gpu = facts.gpu_name or spec.gpu
    try:
        platform, _ = platform_for(gpu)
    except UsageError:
        platform, _ = platform_for(spec.gpu) if spec.gpu else (None, None)
    argv = target.argv  # the resolver's request: the wire
    if platform is not None and not target.launch.sets("device"):
        argv += ["--device", "cuda"]
    return argv, platform, gpu


def remote_dry_run(
    conn: Connection,
    target: Target,
    release_id: str,
    spec: DeploySpec,
    facts: HostFacts,
    *,
    timeout_s: float = 600,
) -> DryRunResult:
    """SGLang's resolver on the host with the release's payload staged (installer.py view)."""

    rel_dir = f"{conn.work_dir}/releases/{release_id}"
    extra = ""
    if spec.payload is not None:
        extra, error = _stage_view(conn, rel_dir, spec, facts)
        if error is not None:
            return DryRunResult(
                spec.source, False, {"type": "PayloadView", "message": error, "hook": None}, setup_error=True
            )
    argv, platform, gpu = _resolver_argv(target, spec, facts)
    req = json.dumps({"id": 1, "argv": argv, "platform": platform}) + "\n" + json.dumps({"op": "exit"}) + "\n"
    cmd = [
        "env",
        f"DDTCTL_EXTRA_SYS_PATH={extra}",
        "HF_HUB_OFFLINE=1",
        "TRANSFORMERS_OFFLINE=1",
        "PYTHONWARNINGS=ignore",
        conn.host.python,
        "-I",
        "-u",
        f"{rel_dir}/tools/resolver_worker.py",
    ]
    res = conn.run(cmd, stdin=req.encode(), timeout=timeout_s)
    msgs = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    ready = next((m for m in msgs if "ready" in m), None)
    answer = next((m for m in msgs if m.get("id") == 1), None)
    if not ready or not ready.get("ready") or answer is None:
        why = (ready or {}).get("error") or {}
        msg = f"{why.get('type')}: {why.get('message')}" if why else stderr_cause(res.stderr)
        return DryRunResult(
            spec.source,
            False,
            {"type": "ResolverStart", "message": msg, "hook": None},
            argv=argv,
            setup_error=True,
        )
    return DryRunResult(
        spec.source,
        bool(answer.get("accepted")),
        answer.get("error"),
        answer.get("resolved") or {},
        answer.get("overrides") or [],
        argv=argv,
        gpu=gpu,
        warnings=answer.get("warnings") or [],
        error_at=answer.get("error_at"),
        elapsed_s=answer.get("elapsed_s"),
    )
