"""`ddtctl tune --write`: put the winning point's flags into the profile (the editor of `validate --fix`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddtctl.errors import UsageError

if TYPE_CHECKING:
    from ddtctl.tune import PointResult


@dataclass
class WriteResult:
    path: str
    changed: bool
    edits: dict[str, Any]
    diff: str


def write_point(profile: str, point: PointResult) -> WriteResult:
    """Put a point's flags into the profile's `server:` block, keeping comments and layout: the editor of
    `validate --fix` (ddtctl.fix.apply_fixes), checked by ddtctl.fix.verify, written by
    ddtctl.safeio.rewrite."""
    from ddtctl.fix import apply_fixes, unified_diff, verify
    from ddtctl.profile import canonical_flag_key, parse_profile_text, read_profile_document
    from ddtctl.rules.engine import ERROR, Finding
    from ddtctl.safeio import rewrite
    from ddtctl.tune import env_name

    doc = read_profile_document(profile)
    raw = doc.raw
    text = doc.text.replace("\r\n", "\n")
    doc = parse_profile_text(text, doc.source) if text != doc.text else doc
    server = doc.data.get("server") or {}
    _refuse_env_edits(point, doc.data.get("env") or {}, doc.source)
    flags = {k: v for k, v in point.flags.items() if env_name(k) is None}
    edits = {
        canonical_flag_key(k): v
        for k, v in flags.items()
        if server.get(canonical_flag_key(k)) != v or (v is None and canonical_flag_key(k) in server)
    }
    edits = {k: v for k, v in edits.items() if not (v is None and k not in server)}
    finding = Finding(rule="tune", severity=ERROR, message=f"tune winner {point.label}", edits=edits)
    fixed = apply_fixes(text, [finding], doc.lines)
    why = fixed.refused or (verify(doc.data, fixed.text, fixed.edits, doc.source) if fixed.changed else None)
    if why:
        raise UsageError(
            f"cannot write the winner into the profile: {why}",
            where=doc.source,
            fix="set " + ", ".join(f"{k}: {v}" for k, v in edits.items()) + " by hand",
        )
    if fixed.changed:
        rewrite(doc.source, fixed.text, original=raw if raw is not None else text.encode(), what="profile")
    return WriteResult(doc.source, fixed.changed, edits, unified_diff(doc.source, text, fixed.text))


def _refuse_env_edits(point: PointResult, env: dict[str, Any], source: str) -> None:
    """The editor writes `server:` flags only: a winner that needs another `env:` is written by hand."""
    from ddtctl.tune import env_value, point_env

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
