"""`ddtctl tune --write`: put the winning point's flags into the profile (the editor of `validate --fix`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddtctl.errors import UsageError
from ddtctl.fix import apply_fixes, edit_mismatch
from ddtctl.profile import canonical_flag_key
from ddtctl.profile_edit import edit_profile
from ddtctl.rules.engine import ERROR, Finding
from ddtctl.tune.space import env_name, env_value, point_env
from ddtctl.yamledit import EditRefused

if TYPE_CHECKING:
    from ddtctl.profile import ProfileDocument
    from ddtctl.tune.results import PointResult


@dataclass
class WriteResult:
    path: str
    changed: bool
    edits: dict[str, Any]
    diff: str


def write_point(profile: str, point: PointResult) -> WriteResult:
    """Put a point's flags into the profile's `server:` block, keeping comments and layout: the editor of
    `validate --fix` (ddtctl.fix.apply_fixes), checked by ddtctl.fix.edit_mismatch, in the profile edit
    transaction (ddtctl.profile_edit: written by ddtctl.safeio.rewrite)."""

    edits: dict[str, Any] = {}

    def edit(doc: ProfileDocument) -> str:
        _refuse_env_edits(point, doc.data.get("env") or {}, doc.source)
        edits.update(_server_edits(point, doc.data.get("server") or {}))
        finding = Finding(rule="tune", severity=ERROR, message=f"tune winner {point.label}", edits=edits)
        fixed = apply_fixes(doc.text, [finding], doc.lines)
        if fixed.refused:
            raise EditRefused(fixed.refused)
        return fixed.text

    outcome = edit_profile(
        profile, edit, check=lambda before, after: edit_mismatch(before.data, after.data, edits)
    )
    if outcome.refused:
        raise UsageError(
            f"cannot write the winner into the profile: {outcome.refused}",
            where=outcome.path,
            fix="set " + ", ".join(f"{k}: {v}" for k, v in edits.items()) + " by hand",
        )
    return WriteResult(outcome.path, outcome.changed, edits, outcome.diff)


def _server_edits(point: PointResult, server: dict[str, Any]) -> dict[str, Any]:
    """The point's `server:` flags that differ from the profile's (None: remove a flag the profile sets)."""

    flags = {k: v for k, v in point.flags.items() if env_name(k) is None}
    edits = {
        canonical_flag_key(k): v
        for k, v in flags.items()
        if server.get(canonical_flag_key(k)) != v or (v is None and canonical_flag_key(k) in server)
    }
    return {k: v for k, v in edits.items() if not (v is None and k not in server)}


def _refuse_env_edits(point: PointResult, env: dict[str, Any], source: str) -> None:
    """The editor writes `server:` flags only: a winner that needs another `env:` is written by hand."""

    wanted = point_env(point.flags)
    differ = {
        name: value
        for name, value in wanted.items()
        if (None if env.get(name) is None else env_value(env[name])) != value
    }
    if differ:
        how = ", ".join(f"{n}: {v}" if v is not None else f"remove {n}" for n, v in differ.items())
        raise UsageError(
            f"cannot write the winner {point.label} into the profile: --write edits `server:` flags only, "
            "and the winner also changes `env:`",
            where=source,
            fix=f"in env: {how}; then the winner's flags by hand or --write again",
        )
