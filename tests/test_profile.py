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


# -- YAML 1.1 typing never reaches the launch silently (issue #31) ------------------------------------------------------
def _server_profile(tmp_path, server: str, extra: str = ""):
    return write(tmp_path, f'name: t\nsglang: "0.5.23"\nmodel: {{path: /m}}\n{extra}server:\n{server}')


@pytest.mark.parametrize("written, launched", [
    ("0123", "0123"), ("0x1F", "0x1F"), ("1.10", "1.10"), ("no", "no"), ("1:20", "1:20"), ("yes", "yes"),
    ("2024-01-01", "2024-01-01"), ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"),
    ("1_000", "1_000"), (".inf", ".inf"), ("~", None), ("'0123'", "0123"), ("!!str 0123", "0123"),
])
def test_a_string_flag_gets_the_text_as_written(tmp_path, written, launched):
    loaded = load_profile(_server_profile(tmp_path, f"  revision: {written}\n  served-model-name: [a]\n"))
    assert loaded.profile.server["revision"] == launched
    if launched is not None:
        argv = render_argv(loaded.profile)
        assert argv[argv.index("--revision") + 1] == launched


def test_string_list_items_env_and_model_fields_get_their_text(tmp_path):
    text = ("name: 0123\nsglang: \"0.5.23\"\nhost: 1:20\nmodel: {path: 0x10, architecture: no}\n"
            "env: {A: 0123, B: off, C: 1.10}\nserver:\n  allowed-media-domains: [0123, yes, 1:20]\n")
    prof = load_profile(write(tmp_path, text)).profile
    assert (prof.name, prof.host, prof.model.path, prof.model.architecture) == ("0123", "1:20", "0x10", "no")
    assert prof.env == {"A": "0123", "B": "off", "C": "1.10"}
    assert prof.server["allowed-media-domains"] == ["0123", "yes", "1:20"]


@pytest.mark.parametrize("flag, written, fragment", [
    ("max-running-requests", "0123", "'0123' is 83 to YAML 1.1 but 123 to SGLang's parser"),
    ("max-running-requests", "0x1F", "'0x1F' is 31 to YAML 1.1 but not an integer to SGLang's parser"),
    ("max-running-requests", "0b11", "'0b11' is 3 to YAML 1.1"),
    ("max-running-requests", "1:20", "'1:20' is 80 to YAML 1.1"),
    ("mem-fraction-static", "0:30.5", "'0:30.5' is 30.5 to YAML 1.1 but not a number"),
    ("cuda-graph-bs-decode", "[1, 010]", "'010' is 8 to YAML 1.1 but 10 to SGLang's parser"),
])
def test_a_number_yaml_and_argparse_read_differently_is_ddt012(tmp_path, flag, written, fragment):
    from ddtctl.validate import validate_path

    path = _server_profile(tmp_path, f"  tp-size: 1\n  {flag}: {written}\n")
    errors = [f for f in validate_path(path).findings if f.severity == "error"]
    assert [(f.rule, f.line) for f in errors] == [("DDT012", 6)] and fragment in errors[0].message
    with pytest.raises(ProfileError, match="DDT012"):
        render_argv(load_profile(path).profile)


@pytest.mark.parametrize("flag, written, value", [
    ("mem-fraction-static", "0.10", 0.1), ("mem-fraction-static", "1", 1.0), ("max-running-requests", "1_000", 1000),
    ("max-running-requests", "+5", 5), ("context-length", "4k", "4k"),
])
def test_numbers_both_read_alike_are_fine(tmp_path, flag, written, value):
    from ddtctl.validate import validate_path

    path = _server_profile(tmp_path, f"  {flag}: {written}\n")
    result = validate_path(path)
    assert not result.errors, result.errors
    assert list(result.flags.given.values()) == [value]


@pytest.mark.parametrize("value, tag", [
    ("!!binary aGVsbG8=", "!!binary"), ("!!python/object:os.system x", "!!python/object:os.system"),
    ("!custom x", "!custom"), ("!!float 1", "!!float"), ("!!set {a, b}", "!!set"), ("!!omap [a: 1]", "!!omap"),
    ('!!int "5"', "!!int"),
])
def test_yaml_tags_are_refused_with_their_line(tmp_path, value, tag):
    with pytest.raises(ProfileError) as err:
        load_profile(_server_profile(tmp_path, f"  tp-size: 1\n  revision: {value}\n"))
    assert f"YAML tag {tag} is not allowed in profiles" in err.value.one_line() and "p.yaml:6" in err.value.one_line()


def test_a_tag_on_a_key_is_refused(tmp_path):
    with pytest.raises(ProfileError, match="YAML tag !!binary"):
        load_profile(_server_profile(tmp_path, "  !!binary dHA=: 1\n"))


def test_duplicated_hosts_are_an_error_at_the_duplicate(tmp_path):
    from ddtctl.validate import validate_path

    path = _server_profile(tmp_path, "  tp-size: 2\n", extra="hosts:\n  - gpu1\n  - gpu2\n  - gpu1\n")
    errors = [(f.rule, f.line, f.message) for f in validate_path(path).findings if f.severity == "error"]
    assert errors == [("DDT007", 7, "hosts[2]: host 'gpu1' is listed twice (first as hosts[0])")]
    with pytest.raises(ProfileError, match="listed twice"):
        load_profile(path)
