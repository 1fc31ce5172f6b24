"""Preflight: static checks of one target against its host's facts, before anything on the host changes.

Plain data in (DeploySpec, Target, HostFacts), Checks out: nothing remote runs here (SGLang's own resolver
runs on the host later, once the release is shipped). The rendered argv is validated as `ddtctl validate`
would, with the host's GPU, the model configs cached from the host, and the profile's `ignore:` entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ddtctl.dryrun import ModelConfigMissing, localize_launch
from ddtctl.errors import HubError, UsageError
from ddtctl.remote.facts import HostFacts
from ddtctl.schema.gpus import resolve_gpu
from ddtctl.validate import ignore_refusal, validate_parsed

from .spec import DeploySpec, Target

WORKER_CAPABILITY_RULE = "DDT120"
BUNDLED_WORKER = "ddtree_sglang/worker.py"
DISK_HEADROOM_BYTES = 1 << 30


class Severity(StrEnum):
    ERROR = "error"  # rejects the deploy
    WARNING = "warning"
    INFO = "info"


@dataclass
class Check:
    name: str
    ok: bool
    message: str
    host: str | None = None
    severity: Severity = Severity.ERROR
    fix: str | None = None
    rule: str | None = None  # the rule id of a static-validation check (`validate:DDT116`: "DDT116"), as data

    @property
    def blocks(self) -> bool:
        return not self.ok and self.severity == Severity.ERROR

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "ok": self.ok,
            "message": self.message,
            "host": self.host,
            "severity": str(self.severity),
            "fix": self.fix,
        }


def _check(
    target: Target,
    name: str,
    ok: bool,
    message: str,
    severity: Severity = Severity.ERROR,
    fix: str | None = None,
    rule: str | None = None,
) -> Check:
    """A check of `target`: info when it passes, `severity` when it does not."""
    return Check(name, ok, message, target.name, Severity.INFO if ok else severity, fix, rule)


def gpus_needed(target: Target) -> tuple[int, str]:
    """GPUs this target needs on its host (tp x pp x dp, shared over the nodes) and how that was counted."""
    launch = target.launch  # typed as SGLang reads it (`--tp 8` is tp_size 8)
    tp, pp, dp = (_count(launch.get(k)) for k in ("tp_size", "pp_size", "dp_size"))
    need = tp * pp * (1 if launch.get("enable_dp_attention") else dp)
    over = f" over {target.nnodes} nodes" if target.nnodes > 1 else ""
    return max(1, need // max(1, target.nnodes)), f"tp {tp} x pp {pp} x dp {dp}{over}"


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def check_gpus(target: Target, facts: HostFacts) -> Check:
    need, how = gpus_needed(target)
    visible = len(facts.gpus)
    cvd = target.env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        visible = min(visible, len([x for x in cvd.split(",") if x.strip()]))
    if facts.gpu_error and not facts.gpus:
        return _check(
            target,
            "gpus",
            False,
            f"no GPU information: {facts.gpu_error}",
            fix="check nvidia-smi works on the host",
        )
    model = f" ({facts.gpus[0].name})" if facts.gpus else ""
    return _check(
        target,
        "gpus",
        visible >= need,
        f"{need} GPU(s) needed here ({how}), {visible} visible{model}",
        fix="lower tp-size/dp-size or deploy to a host with more GPUs",
    )


def check_gpu_generation(spec: DeploySpec, target: Target, facts: HostFacts) -> list[Check]:
    """The GPU generation (SM) the profile was written for against the host's."""
    if not (spec.gpu and facts.gpus):
        return []

    want = resolve_gpu(spec.gpu)
    have_name = facts.gpus[0].name
    have_sm = facts.gpus[0].sm
    try:
        have_sm = resolve_gpu(have_name).sm
    except UsageError:
        pass  # a GPU ddtctl does not know: nvidia-smi's compute capability decides
    return [
        _check(
            target,
            "gpu-generation",
            have_sm == want.sm,
            f"profile is for {spec.gpu} (sm{want.sm}); host has {have_name} (sm{have_sm})",
            fix=f"set hardware.gpu to the host's GPU ({have_name}) and re-validate",
        )
    ]


def check_sglang(spec: DeploySpec, target: Target, facts: HostFacts, *, remote_dry_run: bool) -> list[Check]:
    if facts.sglang_version is None:
        # without the remote dry-run nothing needs SGLang before the launch: the launch itself will tell
        return [
            _check(
                target,
                "sglang",
                False,
                f"sglang is not importable by {facts.python} on the host",
                Severity.ERROR if remote_dry_run else Severity.WARNING,
                fix="set the host's `python:` in the inventory to the interpreter that has SGLang",
            )
        ]
    checks = [
        _check(
            target,
            "sglang",
            facts.sglang_version == spec.sglang,
            f"host has sglang {facts.sglang_version}, profile targets {spec.sglang}",
            fix=f"install sglang=={spec.sglang} on the host or change the profile's `sglang:`",
        )
    ]
    if spec.payload is not None:  # the payload needs a site-packages to install into
        checks.append(
            _check(
                target,
                "sglang-root",
                bool(facts.sglang_root),
                f"payload installs into {facts.sglang_root or '(unknown: sglang not found)'}",
                fix="set sglang_root: in the inventory",
            )
        )
    return checks


def check_port(target: Target, facts: HostFacts) -> Check:
    ours = facts.server_running and (facts.server or {}).get("port") == target.port
    taken = target.port in facts.ports_in_use
    state = "used by our server" if ours else ("in use by another process" if taken else "free")
    return _check(
        target,
        "port",
        ours or not taken,
        f"port {target.port} is {state}",
        fix="stop whatever listens there or change server.port",
    )


def check_disk(spec: DeploySpec, target: Target, facts: HostFacts) -> Check:
    need_bytes = (spec.payload.total_bytes if spec.payload else 0) * 3 + DISK_HEADROOM_BYTES
    return _check(
        target,
        "disk",
        facts.disk_free_bytes >= need_bytes,
        f"{facts.disk_free_bytes / 2**30:.1f} GiB free in {facts.work_dir}",
        fix="free disk space on the host",
    )


def check_models(spec: DeploySpec, target: Target, facts: HostFacts) -> list[Check]:
    out = []
    for path in spec.model_paths:
        info = facts.models.get(path) or {}
        found = "config" in info
        out.append(
            _check(
                target,
                "model",
                found,
                f"{path}: " + ("config.json found" if found else info.get("error", "not checked")),
                fix="copy the model to the host or fix model.path",
            )
        )
    return out


def preflight_checks(
    spec: DeploySpec, target: Target, facts: HostFacts, *, remote_dry_run: bool
) -> list[Check]:
    """Static checks with host facts. Nothing remote is run here (the remote dry-run comes after shipping)."""
    return [
        check_gpus(target, facts),
        *check_gpu_generation(spec, target, facts),
        *check_sglang(spec, target, facts, remote_dry_run=remote_dry_run),
        check_port(target, facts),
        check_disk(spec, target, facts),
        *check_models(spec, target, facts),
        *static_validation(spec, target, facts),
    ]


def ships_bundled_worker(spec: DeploySpec) -> bool:
    """Whether the payload of this deploy carries ddtctl's own DDTREE worker, byte for byte (a payload built
    from the bundled sources does; a hand-made one may carry another worker, of which DDT120 says nothing)."""
    from ddtctl.overlay.source import PAYLOADS_DIR, sha256_file

    if spec.payload is None:
        return False
    entry = spec.payload.files.get(f"files/{BUNDLED_WORKER}")
    bundled = PAYLOADS_DIR / f"ddtree-sglang-{spec.sglang}" / "files" / BUNDLED_WORKER
    if entry is None or not bundled.is_file():
        return False
    return sha256_file(bundled) == entry.sha256


def _validation_gpu(spec: DeploySpec, facts: HostFacts) -> str | None:
    """The host's GPU when ddtctl knows it, else the profile's."""

    gpu = facts.gpu_name or spec.gpu
    try:
        if gpu:
            resolve_gpu(gpu)
    except UsageError:
        gpu = spec.gpu
    return gpu


def ignore_checks(
    spec: DeploySpec, target: Target, *, bundled_worker: bool
) -> tuple[dict[str, str], list[Check]]:
    """The profile's `ignore:` entries that apply ({rule: reason}), and an error for each that cannot: as
    `ddtctl validate` does (DDT007), plus DDT120 while this deploy ships the worker that refuses it."""

    applied: dict[str, str] = {}
    refused: list[Check] = []
    for rule_id, reason in spec.ignore.items():
        why = ignore_refusal(rule_id)
        if why is None and rule_id == WORKER_CAPABILITY_RULE and bundled_worker:
            why = (
                f"{rule_id} cannot be ignored here: the payload this deploy ships is the worker that "
                "refuses it"
            )
        if why:
            refused.append(
                _check(
                    target,
                    "validate:DDT007",
                    False,
                    f"ignore {rule_id}: {why}",
                    fix="remove this ignore entry from the profile",
                    rule="DDT007",
                )
            )
        else:
            applied[rule_id] = reason
    return applied, refused


def static_validation(spec: DeploySpec, target: Target, facts: HostFacts) -> list[Check]:
    """`ddtctl validate` of the target's typed launch, with the host's GPU and the model configs cached from
    it."""

    gpu = _validation_gpu(spec, facts)
    bundled_worker = ships_bundled_worker(spec)
    ignore, out = ignore_checks(spec, target, bundled_worker=bundled_worker)
    use_hub = True
    launch = target.launch
    try:
        launch, _ = localize_launch(target.launch, target.name)
    except ModelConfigMissing:
        pass  # the rules that need the config say so themselves
    except HubError as err:  # a hub id this machine cannot fetch: the host's own dry-run still reads it
        use_hub = False
        out.append(_check(target, "validate:hub", False, err.one_line(), Severity.WARNING))
    try:
        res = validate_parsed(
            launch.parsed,
            launch.catalog,
            gpu=gpu,
            source=spec.source,
            ignore=ignore,
            env=target.env,
            use_hub=use_hub,
        )
    except UsageError as err:
        return [*out, _check(target, "validate", False, err.one_line())]
    for f in res.findings:
        name = f"validate:{f.rule}"
        if f.rule == WORKER_CAPABILITY_RULE and bundled_worker:
            # a warning for validate (the configuration itself is right), but this deploy ships the worker
            # that refuses the launch at start: stop before shipping, launching and rolling back
            out.append(
                _check(
                    target,
                    name,
                    False,
                    f.message + " -- the payload this deploy ships is that worker",
                    fix=f.fix,
                    rule=f.rule,
                )
            )
        elif f.severity in (Severity.ERROR, Severity.WARNING):
            out.append(_check(target, name, False, f.message, Severity(f.severity), f.fix, f.rule))
    for f, reason in res.ignored:
        out.append(
            _check(
                target,
                f"validate:{f.rule}",
                True,
                f"ignored by the profile ({reason}): {f.message}",
                rule=f.rule,
            )
        )
    if res.valid and not any(c.blocks for c in out):
        out.append(_check(target, "validate", True, f"static rules pass for {gpu or 'any GPU'}"))
    return out
