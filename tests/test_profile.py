"""Reading profiles: line numbers, normalisation, and every kind of bad input as one clear error."""

from __future__ import annotations

import pytest

from ddtctl.errors import ProfileError
from ddtctl.profile import discover_profiles, load_profile, read_profile_document
from ddtctl.render import render_argv

GOOD = """\
name: demo
model:
  path: /models/m
server:
  tp_size: 2            # underscores are accepted
  --port: 31000
  enable-dp-attention: false
  speculative-algorithm: DDTREE
"""


def write(tmp_path, text, name="p.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_keys_are_canonical_and_lines_recorded(tmp_path):
    loaded = load_profile(write(tmp_path, GOOD))
    assert list(loaded.profile.server) == ["tp-size", "port", "enable-dp-attention", "speculative-algorithm"]
    assert loaded.lines["server.tp-size"] == 5
    assert loaded.lines["model.path"] == 3


def test_render_argv_uses_catalog_actions(tmp_path):
    argv = render_argv(load_profile(write(tmp_path, GOOD)).profile)
    assert argv == ["--model-path", "/models/m", "--tp-size", "2", "--port", "31000",
                    "--speculative-algorithm", "DDTREE"]  # a false switch is omitted


@pytest.mark.parametrize("text, needle, line", [
    ("name: a\nmodel: {path: /m}\nserver:\n  tp-size: 1\n  tp_size: 2\n", "duplicate key", 5),
    ("name: a\nmodel: [unclosed\n", "invalid YAML", None),
    ("- just\n- a list\n", "must be a YAML mapping", 1),
    ("", "empty", None),
    ("a: &x [1, 2]\nb: *x\n", "anchors/aliases", 1),
    ("name: a\n<<: {model: {path: /m}}\n", "merge keys", 2),
])
def test_bad_yaml_is_one_line_with_location(tmp_path, text, needle, line):
    with pytest.raises(ProfileError) as err:
        load_profile(write(tmp_path, text))
    message = err.value.one_line()
    assert needle in message and "\n" not in message
    if line:
        assert f"p.yaml:{line}" in message


def test_yaml_bomb_is_refused_before_expansion(tmp_path):
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
        for i in range(8))
    with pytest.raises(ProfileError, match="anchors/aliases"):
        read_profile_document(write(tmp_path, bomb))


def test_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: a\nmodel: {path: /m}\ndescription: caf\xe9\n")
    with pytest.raises(ProfileError, match=r"latin1.yaml:3: not UTF-8"):
        read_profile_document(path)


def test_huge_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    with pytest.raises(ProfileError, match="limited to"):
        read_profile_document(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ProfileError, match="no such file"):
        read_profile_document(tmp_path / "nope.yaml")
    with pytest.raises(ProfileError, match="is a directory"):
        read_profile_document(tmp_path)


def test_wrong_types_in_the_profile_model(tmp_path):
    with pytest.raises(ProfileError, match=r"p.yaml:3: hardware.count"):
        load_profile(write(tmp_path, "name: a\nmodel: {path: /m}\nhardware: {gpu: H200, count: many}\n"))
    with pytest.raises(ProfileError, match="unknown GPU"):
        load_profile(write(tmp_path, "name: a\nmodel: {path: /m}\nhardware: {gpu: H201, count: 1}\n"))


def test_discover_profiles(tmp_path):
    (tmp_path / "d").mkdir()
    write(tmp_path / "d", GOOD, "a.yaml")
    write(tmp_path / "d", GOOD, "b.yml")
    write(tmp_path / "d", "not a profile", "notes.txt")
    assert [p.name for p in discover_profiles([str(tmp_path / "d")])] == ["a.yaml", "b.yml"]
    assert [p.name for p in discover_profiles([str(tmp_path / "d" / "*.yaml")])] == ["a.yaml"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProfileError, match="holds no profiles"):
        discover_profiles([str(tmp_path / "empty")])
    with pytest.raises(ProfileError, match="no file matches"):
        discover_profiles([str(tmp_path / "*.nothing")])
