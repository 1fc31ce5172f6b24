"""`ddtctl migrate`: rewrite a profile written for an older SGLang release to a newer one.

Renamed flags under `server:` get their new name; flags the target release no longer has are reported (with
the replacement SGLang named, when it named one). Edits go through ruamel.yaml's round-trip mode
(ddtctl.yamledit): the key renamed in place and the `sglang:` value set, so comments, order, quoting and
layout survive, and every line outside the edited keys stays byte-identical.

Library API: migrate_profile(path, to_version, *, from_version=None, write=False) -> MigrationResult
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ddtctl.diffflags import diff_versions, version_key
from ddtctl.errors import ProfileError, UsageError
from ddtctl.profile import parse_profile_text
from ddtctl.profile_edit import edit_profile
from ddtctl.report import FindingRecord
from ddtctl.schema.catalog import SUGGEST_PER_INPUT, Catalog, available_versions, load_catalog
from ddtctl.schema.extensions import DDTREE_FLAG_SPECS
from ddtctl.yamledit import EditRefused, RoundTrip, find_key, rename_key, set_value

if TYPE_CHECKING:
    from ddtctl.profile import ProfileDocument

_KEY_TOKEN = r"[A-Za-z0-9_.-]+"


@dataclass
class KeyEdit:
    line: int
    old_key: str
    new_key: str
    reason: str  # e.g. "renamed in sglang 0.5.20 (sglang 0.5.19 declares ... a deprecated alias of ...)"
    old_value: Any = None
    new_value: Any = None  # set when the value had to change too (switch -> valued flag)


@dataclass
class KeyIssue:
    line: int | None
    key: str
    message: str
    fix: str | None = None
    blocking: bool = False  # the migrated profile will not parse in the target release until this is fixed


@dataclass
class MigrationResult:
    source: str
    from_version: str
    to_version: str
    edits: list[KeyEdit] = field(default_factory=list)
    removed: list[KeyIssue] = field(default_factory=list)  # flags the target lacks: need a manual decision
    warnings: list[KeyIssue] = field(default_factory=list)  # migrated, but look at it (value, deprecation)
    original: str = ""
    text: str = ""
    written: bool = False

    @property
    def changed(self) -> bool:
        return self.text != self.original

    @property
    def complete(self) -> bool:
        """Nothing left for a person to decide."""
        return not self.removed and not any(w.blocking for w in self.warnings)

    def unified_diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.original.splitlines(True),
                self.text.splitlines(True),
                self.source,
                f"{self.source} (sglang {self.to_version})",
            )
        )

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "from": self.from_version,
            "to": self.to_version,
            "changed": self.changed,
            "written": self.written,
            "complete": self.complete,
            "edits": [asdict(e) for e in self.edits],
            "removed": [self._finding(r, "error") for r in self.removed],
            "warnings": [self._finding(w, "error" if w.blocking else "warning") for w in self.warnings],
        }

    def _finding(self, issue: KeyIssue, severity: str) -> dict:
        """A KeyIssue in the shape of every command's findings (ddtctl.report), plus `blocking`."""

        record = FindingRecord(
            id=None,
            severity=severity,
            message=issue.message,
            file=self.source,
            line=issue.line,
            key=issue.key,
            fix=issue.fix,
        )
        return dict(record.to_json(), blocking=issue.blocking)


# -- editing -------------------------------------------------------------------------------------------------
def _canon(key: str) -> str:
    return key.strip().lstrip("-").replace("_", "-").lower()


def _restyle(new_name: str, old_key: str) -> str:
    """Keep the user's spelling: underscores if they wrote underscores, a leading `--` if they wrote one."""
    out = new_name.replace("-", "_") if ("_" in old_key and "-" not in old_key.lstrip("-")) else new_name
    return ("--" + out) if old_key.startswith("--") else out


def _set_sglang(doc: RoundTrip, version: str) -> bool:
    """Point `sglang:` at `version`, keeping its quotes (double quotes when it had none) and its comment's
    gap."""
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    if "sglang" not in doc.data:
        return False
    set_value(doc, doc.data, "sglang", DoubleQuotedScalarString(version), gap=None)
    return True


def _replacement_value(replacement: str | None, target) -> tuple[str, Any] | None:
    """`--flag=value` naming a live flag of the target -> (flag name, value)."""
    if not replacement:
        return None
    m = re.fullmatch(r"--(" + _KEY_TOKEN + r")=(\S+)", replacement.strip())
    if m is None:
        return None
    spec = target.get_option(m.group(1))
    if spec is None or spec.deprecated:
        return None
    value = m.group(2)
    if spec.choices is not None and value not in [str(c) for c in spec.choices]:
        return None
    return spec.name, value


# -- the migration -------------------------------------------------------------------------------------------
def migrate_text(
    text: str,
    source: str,
    to_version: str,
    *,
    from_version: str | None = None,
    document: ProfileDocument | None = None,
) -> MigrationResult:
    """`text` ("\n" line endings) migrated; `document`: its parse, when the caller has it."""

    doc = document if document is not None else parse_profile_text(text, source)
    data = doc.data
    declared = data.get("sglang")
    src_version = from_version or (str(declared) if declared is not None else None)
    if not src_version:
        raise UsageError(
            "the profile has no `sglang:` release to migrate from",
            where=source,
            fix='add `sglang: "0.5.12"` (the release it was written for) or pass --from',
        )
    source_cat, target = load_catalog(src_version), load_catalog(to_version)
    result = MigrationResult(source, source_cat.version, target.version, original=text, text=text)
    server = data.get("server") or {}
    if not isinstance(server, dict):
        raise ProfileError(
            "`server:` must be a mapping of SGLang flags", where=f"{source}:{doc.lines.get('server')}"
        )
    diff = diff_versions(source_cat.version, target.version) if source_cat.version != target.version else None
    ours = _payload_flags()

    editor = _LazyEditor(text, source)  # ruamel reads the profile only once an edit is due (1 MB: ~30 s)
    present = set(server)
    unknown = 0
    for key, value in server.items():
        line_no = doc.lines.get(f"server.{key}")
        if key in ours:
            continue  # ddtctl's payload flags are in no release catalog; the overlay carries them
        spec = source_cat.get(key)
        if spec is None:
            unknown += 1  # did-you-mean for the first few only: bounded work on hostile input (issue #14)
            result.warnings.append(
                _unknown_flag(source_cat, key, line_no, suggest=unknown <= SUGGEST_PER_INPUT)
            )
            continue
        now = target.get_option(key)
        if now is not None and not (now.deprecated and now.alias_of):
            if now.deprecated:
                result.warnings.append(
                    KeyIssue(
                        line_no,
                        key,
                        f"deprecated in sglang {target.version}",
                        f"use {now.replacement}" if now.replacement else None,
                    )
                )
            continue
        target_flag = _target_flag(result, key, spec, value, line_no, now, diff, source_cat, target)
        if target_flag is not None:
            _rename(result, editor.get(), present, target, key, value, line_no, target_flag)
    _finish(result, editor, source_cat, target)
    return result


def _payload_flags() -> set[str]:
    try:
        return {s.name for s in DDTREE_FLAG_SPECS}
    except ImportError:  # pragma: no cover
        return set()


def _unknown_flag(source_cat: Catalog, key: str, line_no: int | None, *, suggest: bool) -> KeyIssue:
    close = source_cat.suggest(key) if suggest else []
    return KeyIssue(
        line_no,
        key,
        f"not a flag of sglang {source_cat.version}; left as is",
        f"did you mean {close[0]!r}?" if close else None,
    )


def _rename(
    result: MigrationResult,
    editor: RoundTrip,
    present: set[str],
    target: Catalog,
    key: str,
    value: Any,
    line_no: int | None,
    target_flag: tuple[str, str, Any],
) -> None:
    """Rename `key` to its name in the target release (with its new value, when it has one) in the editor."""
    new_name, reason, new_value = target_flag
    new_canon = _canon(new_name)
    if new_canon in present and new_canon != key:
        result.removed.append(
            KeyIssue(
                line_no,
                key,
                f"--{new_name} (its new name) is also set",
                f"keep one of `{key}` and `{new_name}`",
            )
        )
        return
    written = find_key(editor.data["server"], key, _canon)
    if line_no is None or written is None:
        return
    old_key = str(written)
    rename_key(editor.data["server"], written, _restyle(new_name, old_key))
    if new_value is not None:
        set_value(editor, editor.data["server"], _restyle(new_name, old_key), new_value, gap=None)
    present.add(new_canon)
    result.edits.append(KeyEdit(line_no, old_key, _restyle(new_name, old_key), reason, value, new_value))
    _check_value(result, target, new_name, new_value if new_value is not None else value, line_no, key)


def _finish(result: MigrationResult, lazy: _LazyEditor, source_cat: Catalog, target: Catalog) -> None:
    """Set the `sglang:` release and take the edited text (or report why the editor refused); a profile with
    nothing to change keeps its text as it is."""
    if not result.edits and source_cat.version == target.version:
        return
    editor = lazy.get()
    if not _set_sglang(editor, target.version):
        result.warnings.append(
            KeyIssue(
                None,
                "sglang",
                f"no `sglang:` line to update to {target.version}",
                f'add `sglang: "{target.version}"`',
            )
        )
    try:
        result.text = editor.result()
    except EditRefused as refused:
        _report_refusal(result, refused.reason)


def _target_flag(
    result: MigrationResult,
    key: str,
    spec: Any,
    value: Any,
    line_no: int | None,
    now: Any,
    diff: Any,
    source_cat: Catalog,
    target: Catalog,
) -> tuple[str, str, Any] | None:
    """The flag `key` becomes in the target release: (new name, why, new value or None). None when it has no
    successor (recorded in result.removed)."""

    new_name, reason, new_value = None, "", None
    if now is not None:  # still parses, as a deprecated alias: move to the live flag before it disappears
        new_name = now.alias_of
        reason = f"sglang {target.version} keeps --{key} only as a deprecated alias of --{new_name}"
    else:
        rename = diff.rename_of(spec.name) if diff else None
        if rename is not None:
            new_name = rename.new
            how = {"declared": "", "dest": " (same dest)", "similar": " (inferred)"}[rename.how]
            reason = f"renamed{how}: {'; '.join(rename.evidence)}"
            if rename.how == "similar":
                result.warnings.append(
                    KeyIssue(
                        line_no,
                        key,
                        f"rename to {new_name} inferred from similarity, not declared by SGLang",
                        "check it",
                    )
                )
        else:
            gone = diff.removed_entry(spec.name) if diff else None
            hint = gone.hint if gone else None
            repl = None
            for version in _span_versions(source_cat.version, target.version):
                s = load_catalog(version).get_option(key)
                if s is not None and s.replacement:
                    repl = _replacement_value(s.replacement, target) or repl
            if repl is not None and Catalog.is_boolean_switch(spec) and value is True:
                new_name, new_value = repl
                reason = f"removed in sglang {target.version}; sglang said: use --{repl[0]}={repl[1]}"
            else:
                fix = hint or "delete the line, or find its replacement in `ddtctl diff-flags`"
                if Catalog.is_boolean_switch(spec) and value is False:
                    fix = "it is set to false (the default): delete the line"
                result.removed.append(
                    KeyIssue(line_no, key, f"sglang {target.version} has no --{spec.name}", fix)
                )
                return None
    return new_name, reason, new_value


def _report_refusal(result: MigrationResult, reason: str) -> None:
    """The edits could not be written without touching other lines: each becomes a manual step."""
    if not result.edits:
        result.warnings.append(
            KeyIssue(
                None,
                "sglang",
                f"could not update `sglang:` automatically: {reason}",
                f'set it to "{result.to_version}"',
                blocking=True,
            )
        )
    result.removed.extend(
        KeyIssue(
            e.line,
            e.old_key,
            f"could not rename it to {e.new_key} automatically: {reason}",
            "edit it by hand",
        )
        for e in result.edits
    )
    result.edits = []


class _LazyEditor:
    """The round-trip editor of the profile, made on first use."""

    def __init__(self, text: str, source: str):
        self.text, self.source = text, source
        self._editor: RoundTrip | None = None

    def get(self) -> RoundTrip:
        if self._editor is None:
            self._editor = _editor(self.text, self.source)
        return self._editor


def _editor(text: str, source: str) -> RoundTrip:
    try:
        return RoundTrip(text, source)
    except EditRefused as refused:
        raise ProfileError(
            f"cannot edit the profile: {refused.reason}",
            where=source,
            fix="fix the YAML (`ddtctl validate` names the line), then migrate again",
        ) from None


def _span_versions(a: str, b: str) -> list[str]:

    lo, hi = sorted((version_key(a), version_key(b)))
    return [v for v in available_versions() if lo <= version_key(v) <= hi]


def _check_value(result: MigrationResult, target, new_name: str, value: Any, line: int, key: str) -> None:
    spec = target.get(new_name)
    if spec is None or spec.choices is None or value is None:
        return
    values = value if isinstance(value, list) else [value]
    allowed = [str(c) for c in spec.choices]
    bad = [v for v in values if str(v) not in allowed]
    if bad:
        result.warnings.append(
            KeyIssue(
                line,
                key,
                f"value {bad[0]!r} is not a choice of --{new_name} in sglang {target.version}",
                f"one of: {', '.join(allowed)}",
                blocking=True,
            )
        )


def migrate_profile(
    path: str | os.PathLike[str], to_version: str, *, from_version: str | None = None, write: bool = False
) -> MigrationResult:
    """Migrate the profile at `path`; with `write`, rewrite it through the profile edit transaction
    (ddtctl.profile_edit: bounded read, "\n" line endings edited and the file's own written back, the result
    parsed again, a fresh O_EXCL temporary renamed over the file, a symlink written through, refused if
    read-only or changed since it was read: issue #14)."""

    migrated: list[MigrationResult] = []

    def edit(doc: ProfileDocument) -> str:
        migrated.append(
            migrate_text(doc.text, doc.source, to_version, from_version=from_version, document=doc)
        )
        return migrated[0].text

    outcome = edit_profile(path, edit, write=write)
    if outcome.refused:
        raise ProfileError(
            f"cannot migrate the profile: {outcome.refused}",
            where=outcome.path,
            fix="edit it by hand (`ddtctl diff-flags` lists the renamed flags)",
        )
    result = migrated[0]
    result.written = outcome.written
    return result
