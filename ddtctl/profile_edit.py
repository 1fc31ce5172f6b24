"""The one profile edit transaction of `validate --fix`, `migrate --write` and `tune --write` (issue #33).

read (the bounded profile reader, or the bytes the caller already validated) -> line endings normalised to
"\\n" -> the caller's edit (ruamel.yaml round-trip, ddtctl.yamledit) -> the edited text parsed again by the
profile loader (an edit that would not parse, or that the caller's `check` rejects, is refused and nothing is
written) -> the unified diff -> ddtctl.safeio.rewrite (an O_EXCL temporary renamed over the file; a FIFO, a
device or a symlink to one refused; a symlink written through to its target; the file's line endings, mode
and owner kept; nothing written when the file is read-only or changed since it was read).

The transaction returns its own result (ProfileEdit) beside what the caller's edit produced: the validation
result of `--fix`, a MigrationResult, tune's WriteResult.

Library API: edit_profile(path, edit, *, original=None, check=None, write=True) -> ProfileEdit
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ddtctl.errors import DdtctlError
from ddtctl.profile import ProfileDocument, decode_profile, parse_profile_text, read_profile_document
from ddtctl.safeio import rewrite
from ddtctl.yamledit import EditRefused

# the caller's edit: the profile ("\n" line endings) -> the edited text; raises yamledit.EditRefused to refuse
Edit = Callable[[ProfileDocument], str]
# before, after -> why the edited profile is not the intended one (None when it is)
Check = Callable[[ProfileDocument, ProfileDocument], "str | None"]


@dataclass
class ProfileEdit:
    """What the transaction did to one profile."""

    path: str  # the profile as named (a symlink keeps the link's name; the write goes to its target)
    changed: bool  # the edit changed the text (and was not refused)
    diff: str  # `a/PATH` `b/PATH` unified diff of the edit ("" when nothing changes)
    written: bool  # the file was rewritten
    before: str  # the profile's text, "\n" line endings
    text: str  # the edited text, "\n" line endings (`before` when unchanged or refused)
    document: ProfileDocument | None = None  # the edited text as the profile loader parses it (when changed)
    refused: str | None = None  # why the edit was refused (nothing written)


def normalise_line_endings(text: str) -> str:
    """The text the editors work on: "\\n" line breaks (rewrite() writes the file's own back)."""
    return text.replace("\r\n", "\n")


def unified_diff(source: str, before: str, after: str) -> str:
    """The edit as a unified diff with `a/PATH` `b/PATH` headers ("" when nothing changes)."""
    import difflib

    if before == after:
        return ""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{source.lstrip('/')}",
        tofile=f"b/{source.lstrip('/')}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def read_for_edit(
    path: str | os.PathLike[str], original: bytes | None = None
) -> tuple[bytes, ProfileDocument]:
    """The profile's bytes and its parse with "\\n" line endings. `original`: the bytes the caller read (and
    validated) before; the file is not read again, and rewrite() refuses to write if it no longer holds
    them. Otherwise the bounded reader reads it (a FIFO, a device or an oversized file: a ProfileError)."""

    source = str(path)
    if original is None:
        doc = read_profile_document(path)
        original = doc.raw if doc.raw is not None else doc.text.encode("utf-8")
        text = normalise_line_endings(doc.text)
        return original, (doc if text == doc.text else parse_profile_text(text, source))
    return original, parse_profile_text(normalise_line_endings(decode_profile(original, source)), source)


def edit_profile(
    path: str | os.PathLike[str],
    edit: Edit,
    *,
    original: bytes | None = None,
    check: Check | None = None,
    write: bool = True,
) -> ProfileEdit:
    """Apply `edit` to the profile at `path` and, when `write` and the text changed, rewrite the file.

    Refused (ProfileEdit.refused, nothing written) when `edit` raises yamledit.EditRefused, when the edited
    text does not parse as a profile, or when `check(before, after)` gives a reason. Reading (ProfileError)
    and writing (UsageError: read-only, changed since read, not a regular file, an I/O error) fail as
    one-line DdtctlErrors; an error `edit` raises goes through."""

    source = str(path)
    raw, before = read_for_edit(path, original)
    unchanged = ProfileEdit(
        source, changed=False, diff="", written=False, before=before.text, text=before.text
    )
    try:
        text = edit(before)
    except EditRefused as refused:
        unchanged.refused = refused.reason
        return unchanged
    if text == before.text:
        return unchanged
    try:
        after = parse_profile_text(text, source)
    except DdtctlError as err:
        unchanged.refused = f"the edited profile would not parse ({err.message})"
        return unchanged
    why = check(before, after) if check is not None else None
    if why:
        unchanged.refused = why
        return unchanged
    if write:
        rewrite(source, text, original=raw, what="profile")
    return ProfileEdit(source, True, unified_diff(source, before.text, text), write, before.text, text, after)
