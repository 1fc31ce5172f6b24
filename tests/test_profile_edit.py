"""The profile edit transaction (ddtctl/profile_edit.py) of `validate --fix`, `migrate --write` and
`tune --write`: line endings kept, an edit that breaks the profile refused, special files refused, a no-op
writes nothing."""

from __future__ import annotations

import os

import pytest

from ddtctl.errors import ProfileError, UsageError
from ddtctl.profile_edit import edit_profile, unified_diff
from ddtctl.yamledit import EditRefused

PROFILE = "name: p\nmodel: {path: /m}\nserver:\n  tp-size: 1   # one GPU\n  port: 30000\n"


def set_tp(doc):
    return doc.text.replace("tp-size: 1", "tp-size: 2")


def files(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_an_edit_is_parsed_diffed_and_written(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)
    out = edit_profile(path, set_tp)
    assert out.changed and out.written and out.refused is None
    assert path.read_text() == PROFILE.replace("tp-size: 1", "tp-size: 2")
    assert out.document is not None and out.document.data["server"]["tp-size"] == 2
    assert out.diff == unified_diff(str(path), PROFILE, out.text)
    assert "-  tp-size: 1   # one GPU\n+  tp-size: 2   # one GPU\n" in out.diff
    assert files(tmp_path) == ["p.yaml"]  # no temporary left behind


def test_a_crlf_profile_keeps_crlf(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(PROFILE.replace("\n", "\r\n").encode())
    seen = []
    out = edit_profile(path, lambda doc: seen.append(doc.text) or set_tp(doc))
    assert seen == [PROFILE]  # the edit sees "\n" line endings
    assert out.written and "\r" not in out.diff
    data = path.read_bytes()
    assert data == PROFILE.replace("tp-size: 1", "tp-size: 2").replace("\n", "\r\n").encode()


def test_an_edit_that_breaks_parsing_is_refused_and_the_file_is_untouched(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)
    before = os.stat(path)
    out = edit_profile(path, lambda doc: doc.text.replace("port: 30000", "port: [30000"))
    assert out.refused and out.refused.startswith("the edited profile would not parse (invalid YAML")
    assert not out.changed and not out.written and out.diff == "" and out.text == PROFILE
    assert path.read_text() == PROFILE and os.stat(path).st_ino == before.st_ino
    assert files(tmp_path) == ["p.yaml"]


def test_an_edit_to_a_non_mapping_is_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)
    out = edit_profile(path, lambda doc: "- a list\n")
    assert out.refused and "must be a YAML mapping" in out.refused
    assert path.read_text() == PROFILE


def test_the_editor_and_the_check_can_refuse(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)

    def refuse(doc):
        raise EditRefused("it would drop a comment")

    assert edit_profile(path, refuse).refused == "it would drop a comment"
    out = edit_profile(path, set_tp, check=lambda before, after: "not the intended edit")
    assert out.refused == "not the intended edit" and not out.written
    assert path.read_text() == PROFILE


def test_a_noop_edit_writes_nothing(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)
    path.chmod(0o444)  # a write would be refused: the no-op never gets that far
    before = os.stat(path)
    out = edit_profile(path, lambda doc: doc.text)
    assert not out.changed and not out.written and out.diff == "" and out.refused is None
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert files(tmp_path) == ["p.yaml"]


def test_without_write_nothing_is_written(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)
    out = edit_profile(path, set_tp, write=False)
    assert out.changed and not out.written and out.diff
    assert path.read_text() == PROFILE


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ProfileError, match=r"is a FIFO \(named pipe\), not a profile file"):
        edit_profile(fifo, set_tp)
    # the bytes a caller validated earlier, and the file is now a FIFO: the write is refused
    with pytest.raises(UsageError, match=r"is a FIFO \(named pipe\); refusing to rewrite it"):
        edit_profile(fifo, set_tp, original=PROFILE.encode())
    assert files(tmp_path) == ["p.yaml"]


def test_a_symlink_to_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "p.yaml"
    link.symlink_to(fifo)
    with pytest.raises(ProfileError, match="is a FIFO"):
        edit_profile(link, set_tp)
    with pytest.raises(UsageError, match="refusing to rewrite it"):
        edit_profile(link, set_tp, original=PROFILE.encode())
    assert link.is_symlink() and os.readlink(link) == str(fifo)
    assert files(tmp_path) == ["p.yaml", "pipe"]


def test_a_symlink_to_a_regular_file_is_written_through(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text(PROFILE)
    link = tmp_path / "p.yaml"
    link.symlink_to(real)
    out = edit_profile(link, set_tp)
    assert out.written and out.path == str(link)
    assert link.is_symlink() and os.readlink(link) == str(real)  # the link stays a link
    assert "tp-size: 2" in real.read_text()


def test_a_file_changed_since_it_was_validated_is_not_overwritten(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)
    validated = path.read_bytes()
    saved = PROFILE + "  host: 0.0.0.0\n"
    path.write_text(saved)  # the user saved after validate read it
    with pytest.raises(UsageError, match="changed since it was read"):
        edit_profile(path, set_tp, original=validated)
    assert path.read_text() == saved
