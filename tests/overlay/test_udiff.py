"""Strict unified diffs: what make_patch writes, apply_patch reproduces byte for byte; anything else is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from seeded_hypothesis import seeded

from ddtctl.overlay.udiff import PatchError, apply_patch, make_patch, parse_patch

LINES = st.lists(st.sampled_from(["a", "b", "c", "d", "", "  x = 1", "\tdef f():", "é"]), max_size=30)


def _text(lines: list[str], final_newline: bool, crlf: bool) -> str:
    nl = "\r\n" if crlf else "\n"
    body = nl.join(lines)
    return body + (nl if final_newline and lines else "")


@seeded(300)  # fixed, printed seed and no example database in CI; `make fuzz` draws a fresh one (issue #14)
@given(LINES, LINES, st.booleans(), st.booleans(), st.booleans())
def test_round_trip(old_lines, new_lines, old_nl, new_nl, crlf):
    old = _text(old_lines, old_nl, crlf)
    new = _text(new_lines, new_nl, crlf)
    patch = make_patch(old, new, "pkg/mod.py")
    assert apply_patch(old, patch) == new


def test_equal_files_give_empty_patch():
    assert make_patch("x\n", "x\n", "p") == ""
    assert apply_patch("x\n", "") == "x\n"


def test_labels_and_target_path():
    patch = make_patch("a\nb\n", "a\nc\n", "sglang/srt/x.py")
    assert patch.startswith("--- a/sglang/srt/x.py\n+++ b/sglang/srt/x.py\n")
    path, hunks = parse_patch(patch)
    assert path == "sglang/srt/x.py" and len(hunks) == 1


def test_context_mismatch_names_hunk_and_line():
    old = "".join(f"line {i}\n" for i in range(20))
    patch = make_patch(old, old.replace("line 10\n", "LINE TEN\n"), "f.py")
    drifted = old.replace("line 9\n", "line nine\n")
    with pytest.raises(PatchError, match=r"hunk 1 does not apply at line 10: expected 'line 9', found 'line nine'"):
        apply_patch(drifted, patch, label="f.py")


def test_no_fuzz_shifted_file_is_refused():
    old = "".join(f"line {i}\n" for i in range(20))
    patch = make_patch(old, old.replace("line 10\n", "X\n"), "f.py")
    with pytest.raises(PatchError):
        apply_patch("header\n" + old, patch)  # the same content one line lower: a different file


def test_missing_final_newline_is_kept():
    patch = make_patch("a\nb", "a\nc", "f")
    assert "\\ No newline at end of file" in patch
    assert apply_patch("a\nb", patch) == "a\nc"


def test_truncated_patch_is_refused():
    patch = make_patch("a\nb\nc\n", "a\nB\nc\n", "f")
    with pytest.raises(PatchError, match="truncated"):
        apply_patch("a\nb\nc\n", patch.rsplit("\n", 2)[0] + "\n")
