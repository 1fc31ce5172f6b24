"""`validate --fix`: apply derivable fixes to a profile's `server:` block, keeping comments and layout.

The edits go through ruamel.yaml's round-trip mode (ddtctl.yamledit): block or flow style, every line
outside the edited keys stays byte-identical, and an edit ruamel cannot make that way is refused with the
reason. Every edit is checked before it is written: the edited text must parse, and parse to exactly the
original profile with the edits applied (`verify`, `edit_mismatch`). `fix_results` runs `--fix` over
validation results, each profile in the edit transaction of ddtctl.profile_edit.

Every fix is safe or unsafe (`edit_safety`). Plain `--fix` applies the safe ones; `--unsafe-fixes` the others
too. Safe: setting a switch or a choice flag to the value the launch needs (`attention-backend: triton`,
`disable-overlap-schedule: true`). Unsafe: removing a flag the user set, and setting a number or a free-form
string (a memory ratio, a size, a path), which ddtctl would have to guess and the user must own. A rule can
say otherwise for its hit (`Hit(..., unsafe=True/False)`); a finding with several edits is unsafe when one of
them is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddtctl.errors import DdtctlError
from ddtctl.fix_safety import SAFE, UNSAFE, edit_safety  # noqa: F401  (part of this module's API)
from ddtctl.profile import canonical_flag_key, parse_profile_text
from ddtctl.profile_edit import edit_profile
from ddtctl.rules.engine import Finding
from ddtctl.validate import validate_document, validate_path
from ddtctl.yamledit import EditRefused, RoundTrip, add_key, delete_key, find_key, scalar, set_value


@dataclass
class FixResult:
    text: str
    applied: list[str] = field(default_factory=list)  # rule ids applied
    changed: bool = False
    edits: dict[str, Any] = field(default_factory=dict)  # dashed flag -> value (None = removed)
    refused: str | None = None  # why the edit cannot be made safely (nothing changed then)


def apply_fixes(text: str, findings: list[Finding], lines_map: dict[str, int] | None = None) -> FixResult:
    """The profile text with the error findings' edits applied (text uses "\\n" line breaks). `lines_map` is
    accepted for older callers; the round-trip editor finds the keys itself."""
    result = FixResult(text=text)
    edits: dict[str, Any] = {}
    for f in findings:
        if f.edits and f.severity == "error":
            for key, value in f.edits.items():
                edits.setdefault(key, value)
            result.applied.append(f.rule)
    if not edits:
        return result
    result.edits = dict(edits)
    try:
        result.text = _edited(text, edits)
    except EditRefused as refused:
        return FixResult(text=text, applied=result.applied, edits=edits, refused=refused.reason)
    result.changed = result.text != text
    return result


def _edited(text: str, edits: dict[str, Any]) -> str:
    """`text` with `edits` (dashed flag -> value, None = remove) made under `server:` by the round-trip
    editor."""
    from ruamel.yaml.comments import CommentedMap

    doc = RoundTrip(text)
    server = doc.data.get("server")
    if server is None:
        additions = {key: value for key, value in edits.items() if value is not None}
        if additions:
            doc.data["server"] = CommentedMap((key, scalar(value)) for key, value in additions.items())
        return doc.result()
    if not isinstance(server, CommentedMap):
        raise EditRefused("`server:` is not a mapping of flags")
    for key, value in edits.items():
        existing = find_key(server, canonical_flag_key(key), canonical_flag_key)
        if existing is None:
            if value is not None:
                add_key(server, key, value)
        elif value is None:
            delete_key(server, existing)
        else:
            set_value(doc, server, existing, value)
    return doc.result()


def verify(original: dict[str, Any], fixed_text: str, edits: dict[str, Any], source: str) -> str | None:
    """Why the fixed text is not the original profile with exactly `edits` applied (None when it is)."""

    try:
        doc = parse_profile_text(fixed_text, source)
    except DdtctlError as err:
        return f"the edited profile would not parse ({err.message})"
    return edit_mismatch(original, doc.data, edits)


def edit_mismatch(original: dict[str, Any], edited: dict[str, Any], edits: dict[str, Any]) -> str | None:
    """Why the `edited` profile data is not the `original` with exactly `edits` applied (None when it is)."""

    expected = dict(original)
    server = dict(expected.get("server") or {})
    for key, value in edits.items():
        canon = canonical_flag_key(key)
        if value is None:
            server.pop(canon, None)
        else:
            server[canon] = value
    if "server" in original or server:
        expected["server"] = server
    if edited != expected:
        return "the edited profile would differ from the intended edit"
    return None


# -- `validate --fix` over validation results --------------------------------------------------------------
def fix_results(
    results: list,
    gpu: str | None,
    *,
    unsafe: bool = False,
    dry_run: bool = False,
    ignore: dict[str, str] | None = None,
    on_fixed: Callable[[str, str], None] | None = None,
) -> list:
    """Apply each invalid profile's fixes in place (the safe ones; the unsafe ones too with `unsafe`) through
    the profile edit transaction (ddtctl.profile_edit): the edit is made on the text that was validated,
    checked (it must parse to the intended profile), and written by ddtctl.safeio.rewrite (mode, symlink, line
    endings kept; refused when the file is read-only or changed since it was read). `dry_run` (--diff):
    nothing is written; each result carries its diff and is the validation of the edited text (what validate
    would say after the fix; the command itself exits 1 when there is a diff, as ruff's --diff).
    `on_fixed(source, rules)`: told of each file fixed."""
    return [
        _fix_one(r, gpu, unsafe=unsafe, dry_run=dry_run, ignore=ignore, on_fixed=on_fixed) for r in results
    ]


def _fix_one(result, gpu, *, unsafe: bool, dry_run: bool, ignore, on_fixed):

    if result.error or result.valid or result.profile is None or result.raw is None or result.text is None:
        if dry_run and not result.error:
            result.diff = ""
        return result
    chosen = [f for f in result.findings if f.fixable and (unsafe or f.fixable != UNSAFE)]
    left_out = sorted({f.rule for f in result.findings if f.fixable == UNSAFE and f not in chosen})
    fixed = FixResult(text="")

    def edit(doc) -> str:
        nonlocal fixed
        fixed = apply_fixes(doc.text, chosen, doc.lines)  # a module global: tests replace it
        if fixed.refused:
            raise EditRefused(fixed.refused)
        return fixed.text

    try:
        outcome = edit_profile(
            result.source,
            edit,
            original=result.raw,
            check=lambda before, after: edit_mismatch(before.data, after.data, fixed.edits),
            write=not dry_run,
        )
    except DdtctlError as err:
        if dry_run:
            raise
        result.error = f"--fix not written: {err.one_line()}"
        err.message = f"--fix not written: {err.message}"
        result.failure = err
        return result
    rules = ", ".join(sorted(set(fixed.applied)))
    if outcome.refused:
        result.fix_refused = (
            f"cannot apply {rules} safely: {outcome.refused}; the file is unchanged (edit it by hand)"
        )
        result.unapplied = left_out
        if dry_run:
            result.diff = ""
        return result
    if dry_run:
        after = validate_document(outcome.document, gpu=gpu, ignore=ignore) if outcome.document else result
        after.text, after.raw = outcome.text, result.raw
        after.diff = outcome.diff
        after.unapplied = left_out
        return after
    if outcome.written:
        if on_fixed is not None:
            on_fixed(result.source, rules)
        result = validate_path(result.source, gpu=gpu, ignore=ignore)
        result.fixed = sorted(set(fixed.applied))
    result.unapplied = left_out
    return result
