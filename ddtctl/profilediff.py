"""`ddtctl diff-flags A.yaml B.yaml`: how two profiles launch differently (their rendered argv and, with
`resolved`, SGLang's resolution of each). Importable from ddtctl.diffflags too."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ddtctl.argv import MASK, is_secret_env, is_secret_flag, mask_argv, parse_server_argv
from ddtctl.errors import EnvironmentMissing, UsageError
from ddtctl.profile import load_profile
from ddtctl.schema.catalog import Catalog
from ddtctl.schema.extensions import extended_catalog
from ddtctl.server_argv import TypedLaunch, typed_launch

# Resolved fields SGLang draws at random when the user leaves them unset:
# a difference there is not a difference.
RANDOM_WHEN_UNSET = frozenset({"random_seed"})


# -- two profiles --------------------------------------------------------------------------------------------
@dataclass
class ValueChange:
    key: str
    a: Any
    b: Any


@dataclass
class ProfileDiff:
    a: str
    b: str
    sglang: tuple[str, str]
    argv: tuple[list[str], list[str]]
    only_a: dict[str, Any] = field(default_factory=dict)
    only_b: dict[str, Any] = field(default_factory=dict)
    changed: list[ValueChange] = field(default_factory=list)
    context: list[ValueChange] = field(
        default_factory=list
    )  # sglang release, gpu, env, host: not argv but matters
    resolved: dict | None = (
        None  # with --resolved: {"a": {...}, "b": {...}, "changed": [...], "verdicts": ...}
    )

    @property
    def identical(self) -> bool:
        same_resolved = self.resolved is None or not (
            self.resolved.get("changed") or self.resolved.get("verdict_changed")
        )
        return not (self.only_a or self.only_b or self.changed or self.context) and same_resolved

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "identical": self.identical,
            "sglang": {"a": self.sglang[0], "b": self.sglang[1]},
            "argv": {"a": self.argv[0], "b": self.argv[1]},
            "only_a": self.only_a,
            "only_b": self.only_b,
            "changed": [asdict(c) for c in self.changed],
            "context": [asdict(c) for c in self.context],
            "resolved": self.resolved,
        }


def argv_to_mapping(argv: Sequence[str], catalog: Catalog) -> dict[str, Any]:
    """An argv as {"--option": value}, keyed by each flag's primary option (aliases and prefixes folded, the
    last occurrence deciding as in argparse), read by the one catalog-built argv reader
    (argv.parse_server_argv): values as written, several values space-joined, switches true (their `--no-`
    form false)."""
    parsed = parse_server_argv(argv, catalog, config=False)
    out: dict[str, Any] = {f"--{name}": value for name, value in parsed.flags().items()}
    if parsed.positional:
        out["(positional)"] = list(parsed.positional)
    return out


def launch_mapping(launch: TypedLaunch) -> dict[str, Any]:
    """A profile's launch as argv_to_mapping shows an argv, from the launch's own reading (no parse)."""
    return {f"--{name}": value for name, value in launch.flags().items()}


def _masked(diff: ProfileDiff) -> ProfileDiff:
    """The diff as shown: secret flags' and secret environment values masked (a changed secret still shows as
    changed, `*** -> ***`), compared before masking."""

    def secret(key: str) -> bool:
        return is_secret_env(key[4:]) if key.startswith("env.") else is_secret_flag(key)

    def shown(key: str, value: Any) -> Any:
        return MASK if value not in (None, True, False) and secret(key) else value

    diff.argv = (mask_argv(diff.argv[0]), mask_argv(diff.argv[1]))
    diff.only_a = {k: shown(k, v) for k, v in diff.only_a.items()}
    diff.only_b = {k: shown(k, v) for k, v in diff.only_b.items()}
    diff.changed = [ValueChange(c.key, shown(c.key, c.a), shown(c.key, c.b)) for c in diff.changed]
    diff.context = [ValueChange(c.key, shown(c.key, c.a), shown(c.key, c.b)) for c in diff.context]
    return diff


def _mapping_diff(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict, dict, list[ValueChange]]:
    only_a = {k: v for k, v in a.items() if k not in b}
    only_b = {k: v for k, v in b.items() if k not in a}
    changed = [ValueChange(k, a[k], b[k]) for k in a if k in b and a[k] != b[k]]
    return only_a, only_b, changed


def diff_profiles(
    path_a: str,
    path_b: str,
    *,
    resolved: bool = False,
    gpu: str | None = None,
    python: str | os.PathLike[str] | None = None,
    timeout_s: float = 120.0,
    extra_sys_path: Sequence[str | os.PathLike[str]] = (),
) -> ProfileDiff:
    """What launches differently: the rendered argv of two profiles and, with `resolved`, SGLang's resolution.

    extra_sys_path goes first on the resolver's sys.path (the DDTREE overlay view, for DDTREE profiles)."""

    la, lb = load_profile(path_a), load_profile(path_b)
    pa, pb = la.profile, lb.profile
    cat_a, cat_b = extended_catalog(pa.sglang), extended_catalog(pb.sglang)
    launch_a, launch_b = typed_launch(pa, cat_a), typed_launch(pb, cat_b)
    argv_a, argv_b = launch_a.argv(), launch_b.argv()
    map_a, map_b = launch_mapping(launch_a), launch_mapping(launch_b)
    only_a, only_b, changed = _mapping_diff(map_a, map_b)
    context: list[ValueChange] = []

    def ctx(key: str, va: Any, vb: Any) -> None:
        if va != vb:
            context.append(ValueChange(key, va, vb))

    ctx("sglang", pa.sglang, pb.sglang)
    ctx("hardware.gpu", pa.hardware.gpu if pa.hardware else None, pb.hardware.gpu if pb.hardware else None)
    ctx(
        "hardware.count",
        pa.hardware.count if pa.hardware else None,
        pb.hardware.count if pb.hardware else None,
    )
    ctx("host", pa.host or pa.hosts, pb.host or pb.hosts)
    env_a, env_b, env_c = _mapping_diff(dict(pa.env), dict(pb.env))
    for k, v in env_a.items():
        context.append(ValueChange(f"env.{k}", v, None))
    for k, v in env_b.items():
        context.append(ValueChange(f"env.{k}", None, v))
    for c in env_c:
        context.append(ValueChange(f"env.{c.key}", c.a, c.b))
    result = _masked(
        ProfileDiff(
            la.source, lb.source, (pa.sglang, pb.sglang), (argv_a, argv_b), only_a, only_b, changed, context
        )
    )
    if resolved:
        result.resolved = _resolved_diff(
            la,
            lb,
            launch_a,
            launch_b,
            gpu=gpu,
            python=python,
            timeout_s=timeout_s,
            extra_sys_path=extra_sys_path,
        )
    return result


def _resolved_diff(la, lb, launch_a, launch_b, *, gpu, python, timeout_s, extra_sys_path=()) -> dict:
    try:
        from ddtctl.dryrun import dry_run_argvs
    except ImportError:  # pragma: no cover - the dry-run module ships with ddtctl
        raise EnvironmentMissing(
            "SGLang resolution is not available in this ddtctl build", fix="drop --resolved"
        ) from None
    pa, pb = la.profile, lb.profile
    if pa.sglang != pb.sglang and python is None:
        raise UsageError(
            f"--resolved compares through one SGLang resolver; the profiles target {pa.sglang} and "
            f"{pb.sglang}",
            fix="migrate one profile first (`ddtctl migrate`) or drop --resolved",
        )
    gpus = []
    for loaded in (la, lb):
        chosen = gpu or (loaded.profile.hardware.gpu if loaded.profile.hardware else None)
        if chosen is None:
            raise UsageError(
                "no GPU declared: SGLang's resolution depends on the GPU generation",
                where=loaded.source,
                fix="add `hardware: {gpu: H200}` to the profile or pass --gpu",
            )
        gpus.append(chosen)
    hosts = [pa.host or (pa.hosts[0] if pa.hosts else None), pb.host or (pb.hosts[0] if pb.hosts else None)]
    ra, rb = dry_run_argvs(
        [(la.source, launch_a, gpus[0]), (lb.source, launch_b, gpus[1])],
        python=python,
        timeout_s=timeout_s,
        hosts=hosts,
        sglang=pa.sglang,
        extra_sys_path=extra_sys_path,
    )
    for r in (ra, rb):
        if r.setup_error:  # nothing was resolved: comparing would claim "the same" falsely
            err = r.error or {}
            raise EnvironmentMissing(
                f"SGLang could not resolve this profile: {err.get('type')}: "
                f"{str(err.get('message', '')).splitlines()[0] if err.get('message') else ''}",
                where=r.source,
                fix="see `ddtctl dry-run` on it; or drop --resolved",
            )
    keys = sorted(set(ra.resolved) | set(rb.resolved))
    given = set(launch_a.values) | set(launch_b.values)  # dests either profile sets
    changed = [
        asdict(ValueChange(k, ra.resolved.get(k), rb.resolved.get(k)))
        for k in keys
        if ra.resolved.get(k) != rb.resolved.get(k) and (k not in RANDOM_WHEN_UNSET or k in given)
    ]
    return {
        "a": {"ok": ra.accepted, "error": ra.error_json(), "overrides": ra.overrides},
        "b": {"ok": rb.accepted, "error": rb.error_json(), "overrides": rb.overrides},
        "verdict_changed": ra.accepted != rb.accepted,
        "changed": changed,
    }
