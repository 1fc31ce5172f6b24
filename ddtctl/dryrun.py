"""`ddtctl dry-run`: run SGLang's own resolver (prepare_server_args + resolve_once + check_server_args) on
rendered argvs, in ONE warm subprocess of the managed env's python, declaring the target GPU generation to
SGLang.

Library API (the CLI only parses and prints):
    dry_run_argvs([(source, argv or TypedLaunch, gpu)], *, python=None, extra_sys_path=(), timeout_s=60)
        -> list[DryRunResult]
    dry_run_profiles(paths, *, gpu=None, ...) -> list[DryRunResult]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ddtctl.argv import flag_occurrences, parse_launch_argv
from ddtctl.bridge.client import ResolverClient, WorkerError, WorkerStartError
from ddtctl.envs import DEFAULT_SGLANG, require_env
from ddtctl.errors import DdtctlError, EnvironmentMissing, ExitCode, UsageError
from ddtctl.hub import config_dir, is_hub_id
from ddtctl.paths import model_config_cache_dir
from ddtctl.profile import discover_profiles, load_profile
from ddtctl.report import warning_record
from ddtctl.schema.extensions import extended_catalog
from ddtctl.schema.gpus import REPRESENTATIVE_BY_SM, resolve_gpu
from ddtctl.server_argv import TypedLaunch, typed_launch

DEFAULT_TIMEOUT_S = 60.0

# Flags whose value is a model directory whose config.json the resolver reads.
MODEL_PATH_FLAGS = ("--model-path", "--model")
DRAFT_PATH_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")

# A generation given as "sm90" has no product; declare a representative one (its memory sizes some defaults).


@dataclass
class DryRunResult:
    source: str
    accepted: bool
    error: dict | None = None  # {type, message (full), hook}
    resolved: dict = field(default_factory=dict)
    overrides: list[dict] = field(default_factory=list)  # [{field, raw, resolved, hook}]
    gpu: str | None = None
    warnings: list[str] = field(default_factory=list)  # what SGLang logged as warnings while resolving
    error_at: str | None = None  # sglang file:line of the raise
    # Not part of the JSON contract; shown in text output.
    argv: list[str] = field(default_factory=list)
    elapsed_s: float | None = None
    setup_error: bool = False  # the item could not be resolved at all (missing config, crash, timeout)

    def to_json(self) -> dict:
        """`ok`: SGLang accepted it. `error`: SGLang's rejection (or why nothing was resolved) in the
        envelope's error shape plus SGLang's exception `type` and the `hook` that raised; `where` is SGLang's
        file:line. `warnings`: what SGLang logged, in the findings' shape (ddtctl.report)."""

        return {
            "source": self.source,
            "ok": self.accepted,
            "gpu": self.gpu,
            "error": self.error_json(),
            "resolved": self.resolved,
            "overrides": self.overrides,
            "warnings": [
                warning_record(w, file=None if self.source == "argv" else self.source).to_json()
                for w in self.warnings
            ],
        }

    def error_json(self) -> dict | None:
        if self.accepted or not self.error:
            return None

        err = self.error
        return {
            "message": str(err.get("message", "")),
            "where": self.error_at,
            "fix": err.get("fix"),
            "exit_code": ExitCode.USAGE if self.setup_error else ExitCode.INVALID,
            "type": err.get("type"),
            "hook": err.get("hook"),
        }

    @property
    def changed(self) -> list[dict]:
        """Overrides of a value that was set (by the user or a non-empty default), not defaults filled in."""
        return [o for o in self.overrides if o.get("raw") is not None]


def exit_code(results: Sequence[DryRunResult]) -> int:

    if any(r.setup_error for r in results):
        return ExitCode.USAGE
    return ExitCode.OK if all(r.accepted for r in results) else ExitCode.INVALID


# -- GPU -----------------------------------------------------------------------------------------------------
def platform_for(gpu: Any) -> tuple[dict | None, str | None]:
    """A GPU name / GpuSpec -> (platform facts for the worker, display name)."""
    if gpu is None:
        return None, None

    spec = gpu if hasattr(gpu, "sm") else resolve_gpu(str(gpu))
    memory = getattr(spec, "memory_gb", 0) or 0
    name = spec.name
    if not memory and spec.sm in REPRESENTATIVE_BY_SM:
        rep = resolve_gpu(REPRESENTATIVE_BY_SM[spec.sm])
        memory = rep.memory_gb
        name = f"{spec.name} (as {rep.name})"
    cap = tuple(getattr(spec, "capability", (spec.sm // 10, spec.sm % 10)))
    return {"sm": spec.sm, "capability": list(cap), "memory_gb": memory or None, "name": spec.name}, name


# -- model configs -------------------------------------------------------------------------------------------
def locate_model_config(path: str, host: str | None) -> Path | None:
    """A local directory holding `path`'s config.json: the path itself, or the cached copy for `host`."""
    p = Path(os.path.expanduser(path))
    if host is None and p.is_dir() and (p / "config.json").is_file():
        return p
    cached = model_config_cache_dir(host, path)
    if (cached / "config.json").is_file():
        return cached
    if host is not None and p.is_dir() and (p / "config.json").is_file():
        return p  # same path exists locally (e.g. a test tree or a shared filesystem)
    return None


class ModelConfigMissing(Exception):
    pass


def _sets_device(argv: Sequence[str], sglang: str | None) -> bool:
    """Whether the launch sets --device itself (any spelling argparse takes, or its --config file)."""
    try:
        return any(occ.spec.dest == "device" for occ in parse_launch_argv(argv, sglang).occurrences)
    except DdtctlError:  # an unreadable --config: SGLang reports it
        return False


def _localized(
    given: Sequence[str] | TypedLaunch, host: str | None, sglang: str | None
) -> tuple[list[str], dict[str, str], bool]:
    """(argv with local model config dirs, {local: original}, whether the launch sets --device): a typed
    launch from its values; an argv from outside (`dry-run --argv`) through the one reader."""
    if isinstance(given, TypedLaunch):
        launch, mapping = localize_launch(given, host)
        return launch.argv(), mapping, launch.sets("device")
    argv, mapping = localize_model_paths(given, host)
    return argv, mapping, _sets_device(argv, sglang)


def localize_model_paths(argv: Sequence[str], host: str | None) -> tuple[list[str], dict[str, str]]:
    """Point --model-path / --speculative-draft-model-path at a local dir with config.json.
    Returns (argv, {local_dir: original_path}); raises ModelConfigMissing naming what is missing."""
    argv = list(argv)
    mapping: dict[str, str] = {}
    for occ in flag_occurrences(argv, MODEL_PATH_FLAGS + DRAFT_PATH_FLAGS):  # every one: each is rewritten
        idx, flag, inline, value = occ.value_index, occ.flag, occ.inline, occ.value(argv)
        local = _local_config_dir(flag, value, host, lambda rev: _argv_revision(argv, rev))
        if local is not None:
            mapping[local] = value
            argv[idx] = f"{flag}={local}" if inline else local
    return argv, mapping


def localize_launch(launch: TypedLaunch, host: str | None) -> tuple[TypedLaunch, dict[str, str]]:
    """localize_model_paths for a typed launch: its model and draft model paths, read from its values."""
    changes: dict[str, str | int] = {}
    mapping: dict[str, str] = {}
    for dest, flag in (
        ("model_path", MODEL_PATH_FLAGS[0]),
        ("speculative_draft_model_path", DRAFT_PATH_FLAGS[0]),
    ):
        value = launch.values.get(dest)
        if not isinstance(value, str):
            continue
        local = _local_config_dir(flag, value, host, lambda rev: launch.get(rev))
        if local is not None:
            changes[dest] = local
            mapping[local] = value
    return (launch.with_values(changes) if changes else launch), mapping


def _local_config_dir(flag: str, value: str, host: str | None, revision: Any) -> str | None:
    """The local directory with `value`'s config.json when it is not `value` itself (None: use it as it is);
    `revision(dest)` is the launch's --revision / --speculative-draft-model-revision."""
    if value.lower() in ("none", "dummy", ""):
        return None
    local = locate_model_config(value, host)
    if local is None and is_hub_id(value):
        local = _hub_config_dir(flag, value, revision)
    if local is None:
        where = f"for host {host}" if host else "locally"
        fetch = (
            f"fetch it with `ddtctl facts {host} --model {value}`"
            if host
            else "give a local directory that contains it"
        )
        raise ModelConfigMissing(
            f"{flag} {value}: no config.json {where} (looked in {value} and "
            f"{model_config_cache_dir(host, value)}); "
            f"SGLang's resolver reads the model's config.json: {fetch}"
        )
    return None if str(local) == value else str(local)


def _argv_revision(argv: Sequence[str], dest: str) -> Any:
    """A revision of an argv from outside (`dry-run --argv`), read by the one reader."""
    try:
        return parse_launch_argv(argv).get(dest)
    except DdtctlError:  # an unreadable --config: SGLang reports it
        return None


def _hub_config_dir(flag: str, repo_id: str, revision_of: Any) -> Path:
    """The hub cache's directory holding a hub id's config.json (ddtctl.hub, at the launch's --revision or
    --speculative-draft-model-revision); the hub's failure is a HubError (exit 8) for the whole run."""
    draft = flag in DRAFT_PATH_FLAGS
    revision = revision_of("speculative_draft_model_revision" if draft else "revision")
    found = config_dir(
        repo_id, revision if isinstance(revision, str) else None, what="draft model" if draft else "model"
    )
    if found is None:
        raise ModelConfigMissing(
            f"{flag} {repo_id}: a Hugging Face hub id whose config.json is not in the hub cache "
            "(HF_HUB_OFFLINE=1); SGLang's resolver reads the model's config.json: unset HF_HUB_OFFLINE to "
            "fetch that one file, or give a local directory that contains it"
        )
    return found


def _unmap(value: Any, mapping: dict[str, str]) -> Any:
    if not mapping:
        return value
    if isinstance(value, str):
        for local, original in mapping.items():
            if local in value:
                value = value.replace(local, original)
        return value
    if isinstance(value, list):
        return [_unmap(v, mapping) for v in value]
    if isinstance(value, dict):
        return {k: _unmap(v, mapping) for k, v in value.items()}
    return value


# -- running -------------------------------------------------------------------------------------------------
def resolve_python(python: str | os.PathLike | None, sglang: str | None = None) -> Path:
    if python:
        p = Path(python)
        if not p.exists():
            raise EnvironmentMissing(
                f"python {p} does not exist", fix="pass an existing interpreter to --python"
            )
        return p

    return require_env(sglang or DEFAULT_SGLANG).python


def dry_run_argvs(
    items: Sequence[tuple[str, Sequence[str] | TypedLaunch, Any]],
    *,
    python: str | os.PathLike | None = None,
    extra_sys_path: Sequence[str | os.PathLike] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    hosts: Sequence[str | None] | None = None,
    client: Any = None,
    sglang: str | None = None,
    envs: Sequence[dict[str, str] | None] | None = None,
) -> list[DryRunResult]:
    """Resolve each (source, argv, gpu) through one warm resolver process.

    gpu: a GPU name ("H200", "sm90"), a GpuSpec, or None (then no platform is declared and argv is passed as
    is). A crash or hang on one item is reported for that item (setup_error) and the worker is restarted for
    the rest. `hosts[i]` picks where item i's model configs are looked up; `envs[i]` is its server environment
    (SGLANG_*). `client` lets callers keep one ResolverClient warm across calls (it is not closed here).
    """
    prepared: list[tuple[int, list[str], dict | None, str | None, dict[str, str]]] = []
    results: list[DryRunResult | None] = [None] * len(items)
    for i, (source, given, gpu) in enumerate(items):
        host = hosts[i] if hosts else None
        argv = given.argv() if isinstance(given, TypedLaunch) else list(given)
        try:
            platform, gpu_name = platform_for(gpu)
        except UsageError as err:
            results[i] = DryRunResult(
                source,
                False,
                {"type": "UsageError", "message": err.one_line(), "hook": None},
                argv=argv,
                setup_error=True,
            )
            continue
        try:
            run_argv, mapping, sets_device = _localized(given, host, sglang)
        except ModelConfigMissing as err:
            results[i] = DryRunResult(
                source,
                False,
                {"type": "ModelConfigMissing", "message": str(err), "hook": None},
                argv=argv,
                gpu=gpu_name,
                setup_error=True,
            )
            continue
        if platform is not None and not sets_device:
            run_argv = run_argv + ["--device", "cuda"]
        prepared.append((i, run_argv, platform, gpu_name, mapping))

    if prepared:
        own = client is None
        if own:
            client = ResolverClient(resolve_python(python, sglang), extra_sys_path=extra_sys_path)
        try:
            for i, run_argv, platform, gpu_name, mapping in prepared:
                source = items[i][0]
                try:
                    msg = client.resolve(
                        run_argv, platform=platform, timeout_s=timeout_s, env=(envs[i] if envs else None)
                    )
                except WorkerStartError as err:
                    raise EnvironmentMissing(
                        f"the SGLang resolver did not start: {err.message}",
                        fix="re-create the env with `ddtctl env create --force`",
                    ) from None
                except WorkerError as err:
                    tail = err.stderr_tail.strip()
                    message = err.message + (
                        f"\n--- resolver stderr (last lines) ---\n{tail}" if tail else ""
                    )
                    results[i] = DryRunResult(
                        source,
                        False,
                        {"type": err.kind, "message": message, "hook": None},
                        argv=run_argv,
                        gpu=gpu_name,
                        setup_error=True,
                    )
                    continue
                results[i] = DryRunResult(
                    source=source,
                    accepted=bool(msg.get("accepted")),
                    error=_unmap(msg.get("error"), mapping),
                    resolved=_unmap(msg.get("resolved") or {}, mapping),
                    overrides=_unmap(msg.get("overrides") or [], mapping),
                    argv=run_argv,
                    gpu=gpu_name,
                    warnings=list(msg.get("warnings") or []),
                    error_at=msg.get("error_at"),
                    elapsed_s=msg.get("elapsed_s"),
                )
        finally:
            if own:
                client.close()
    return [r for r in results if r is not None]


def dry_run_profiles(
    paths: Sequence[str],
    *,
    gpu: str | None = None,
    python: str | os.PathLike | None = None,
    extra_sys_path: Sequence[str | os.PathLike] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    overrides: Sequence[Any] = (),
) -> list[DryRunResult]:
    """Render each profile to argv (ddtctl.render) and resolve it with the profile's GPU (or `gpu`);
    `overrides`: `--set KEY=VALUE` (ddtctl.profile_overrides), applied to each profile before the schema."""

    items: list[tuple[str, Sequence[str] | TypedLaunch, Any]] = []
    hosts: list[str | None] = []
    server_envs: list[dict[str, str]] = []
    versions: set[str] = set()
    for path in discover_profiles(list(paths)):
        loaded = load_profile(path, overrides)
        prof = loaded.profile
        versions.add(prof.sglang)
        launch = typed_launch(
            prof, extended_catalog(prof.sglang)
        )  # the release's + the DDTREE payload's flags
        chosen = gpu or (prof.hardware.gpu if prof.hardware else None)
        if chosen is None:
            raise UsageError(
                "no GPU declared: SGLang's verdict depends on the GPU generation",
                where=loaded.source,
                fix="add `hardware: {gpu: H200}` to the profile or pass --gpu",
            )
        items.append((loaded.source, launch, chosen))
        host = prof.host or (prof.hosts[0] if prof.hosts else None)
        hosts.append(host)
        server_envs.append(dict(prof.env or {}))
    if len(versions) > 1 and python is None:
        raise UsageError(
            f"profiles target different SGLang releases ({', '.join(sorted(versions))})",
            fix="dry-run the profiles of one release at a time",
        )
    sglang = next(iter(versions)) if versions else None
    return dry_run_argvs(
        items,
        python=python,
        extra_sys_path=extra_sys_path,
        timeout_s=timeout_s,
        hosts=hosts,
        sglang=sglang,
        envs=server_envs,
    )
