"""Launch values (issue #31): a profile value never becomes an option of SGLang's parser, string flags get their
text as written, secrets stay masked in every form, and every render is parsed back into the profile's values."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from seeded_hypothesis import SEED, seeded

from ddtctl.errors import ProfileError
from ddtctl.flags import flags_from_argv
from ddtctl.launch_tokens import NEGATIVE_NUMBER, reads_as_value
from ddtctl.profile import load_profile
from ddtctl.render import RenderMismatch, render_argv, render_profile
from ddtctl.schema.catalog import Catalog
from ddtctl.schema.extensions import extended_catalog
from ddtctl.validate import validate_path

CATALOG = extended_catalog("0.5.23")
REPO = Path(__file__).resolve().parents[2]
QWEN = str(REPO / "tests" / "fidelity" / "models" / "qwen3-8b")


def _profile(tmp_path: Path, server: str, *, extra: str = "", model: str = "/m", name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f'name: p\nsglang: "0.5.23"\nmodel: {{path: {json.dumps(model)}}}\n{extra}server:\n{server}')
    return path


def _findings(path: Path) -> list[tuple[str, int | None, str]]:
    return [(f.rule, f.line, f.message) for f in validate_path(path).findings if f.severity == "error"]


# -- argparse's reading of one token, modelled against the real argparse -------------------------------------------
def _real_parser(catalog: Catalog) -> argparse.ArgumentParser:
    """A stock ArgumentParser with every option string of the catalog, as SGLang's (prefix '-', abbreviations on)."""
    parser = argparse.ArgumentParser(prog="sglang serve", exit_on_error=False)
    for spec in catalog.flags:
        options = [o for o in spec.option_strings if not (spec.action == "boolean_optional" and o.startswith("--no-"))]
        if spec.action == "boolean_optional":
            parser.add_argument(*options, dest=spec.dest, action=argparse.BooleanOptionalAction)
        else:
            parser.add_argument(*options, dest=spec.dest + "_" + str(abs(hash(spec.option_strings))))
    return parser


def _argparse_reads_as_value(parser: argparse.ArgumentParser, token: str) -> bool:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return parser._parse_optional(token) is None
    except (SystemExit, argparse.ArgumentError):  # "ambiguous option": an option all the same
        return False


PARSER = _real_parser(CATALOG)
NAMES = [o for spec in CATALOG.flags for o in spec.option_strings]
TOKENS = ["", "-", "--", "-1", "-1.5", "-.5", "-1e5", "-1.", "-0x1F", "-1 2", "--x y", "-x y", "--tp", "--tp-siz",
          "--trust-remote-cod", "--port=1", "--port=1 2", "-h", "-hx", "--he", "-", "--no-enable-tf32", "- 1",
          "--model-path=--x", "x", "--api-key", "-p", "--=x", "-=", "--pOrt"]


@pytest.mark.parametrize("token", TOKENS)
def test_reads_as_value_is_argparses_own_decision(token):
    assert reads_as_value(token, CATALOG) == _argparse_reads_as_value(PARSER, token)


@seeded(300)
@given(st.one_of(
    st.sampled_from(NAMES).flatmap(lambda n: st.sampled_from([n, n[: max(2, len(n) // 2)], n + "=v", n + " v"])),
    st.from_regex(r"-{1,2}[a-z0-9. =_-]{0,12}", fullmatch=True),
    st.from_regex(r"-[0-9]{0,3}(\.[0-9]{0,3})?([eE][0-9])?", fullmatch=True),
))
def test_reads_as_value_matches_argparse_on_generated_tokens(token):
    assert reads_as_value(token, CATALOG) == _argparse_reads_as_value(PARSER, token), token


def test_sglangs_parser_has_no_option_that_looks_like_a_negative_number():
    assert not any(NEGATIVE_NUMBER.match(o) for o in NAMES)  # so "-1" and "-0.5" are values to it


# -- argument injection (defect: `allowed-media-domains: [example.com, --trust-remote-code]`) -------------------------
def test_a_list_item_that_reads_as_an_option_is_refused_everywhere(tmp_path):
    path = _profile(tmp_path, "  tp-size: 1\n  allowed-media-domains: [example.com, --trust-remote-code]\n")
    (finding,) = _findings(path)
    assert finding[0] == "DDT011" and finding[1] == 6 and "'--trust-remote-code' starts with '-'" in finding[2]
    with pytest.raises(ProfileError, match="DDT011"):
        render_argv(load_profile(path).profile)
    for fmt in ("argv", "shell", "sglang-config"):
        with pytest.raises(ProfileError, match="allowed-media-domains"):
            render_profile(str(path), fmt)


@pytest.mark.parametrize("item", ["--trust-remote-code", "-x", "--trust-remote-cod", "--", "-1e5", "-h"])
def test_every_item_argparse_would_read_as_an_option_is_refused(tmp_path, item):
    path = _profile(tmp_path, f"  allowed-media-domains: [a, {json.dumps(item)}]\n")
    assert [f[0] for f in _findings(path)] == ["DDT011"]


def test_a_single_value_that_starts_with_a_dash_is_written_inline_and_reads_back(tmp_path):
    path = _profile(tmp_path, "  served-model-name: --trust-remote-code\n  revision: -x y\n"
                              "  chat-template: '-'\n", model="--weird")
    assert _findings(path) == []
    argv = render_argv(load_profile(path).profile)
    assert argv == ["--model-path=--weird", "--served-model-name=--trust-remote-code", "--revision=-x y",
                    "--chat-template", "-"]
    back = flags_from_argv(argv, CATALOG)
    assert back.given["served_model_name"] == "--trust-remote-code" and "trust_remote_code" not in back.given
    assert back.given["revision"] == "-x y"


def test_values_no_command_line_carries_are_refused(tmp_path):
    path = _profile(tmp_path, '  revision: "--"\n  served-model-name: "a\\0b"\n', extra='env: {A: "x\\0y"}\n')
    found = _findings(path)
    assert sorted(f[0] for f in found) == ["DDT011"] * 3
    assert any("env.A" in f[2] and f[1] == 4 for f in found)
    with pytest.raises(ProfileError):
        render_argv(load_profile(path).profile)


def test_negative_numbers_are_values_and_floats_are_written_so(tmp_path):
    path = _profile(tmp_path, "  bucket-time-to-first-token: [-1, -0.5, -0.00001, 2.5]\n  random-seed: -3\n")
    argv = render_argv(load_profile(path).profile)
    assert argv[2:] == ["--bucket-time-to-first-token", "-1", "-0.5", "-0.00001", "2.5", "--random-seed", "-3"]
    assert flags_from_argv(argv, CATALOG).given["bucket_time_to_first_token"] == [-1.0, -0.5, -1e-05, 2.5]


def test_an_env_value_that_starts_with_a_dash_stays_an_assignment(tmp_path):
    path = _profile(tmp_path, "  tp-size: 1\n", extra="env: {NCCL_DEBUG: --trust-remote-code}\n")
    words = shlex.split(render_profile(str(path), "shell").text.replace(" \\\n", " "))
    assert words[:2] == ["env", "NCCL_DEBUG=--trust-remote-code"] and "--trust-remote-code" not in words


# -- secrets ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("secret", ["--secret-key9", "-kZ9q", "plain-secret9", "--api-key=x9z"])
def test_a_secret_is_masked_in_every_form_however_it_is_written(tmp_path, secret):
    path = _profile(tmp_path, f"  api-key: {json.dumps(secret)}\n  port: 30001\n")
    for fmt in ("argv", "shell", "sglang-config"):
        try:
            rendered = render_profile(str(path), fmt)
        except ProfileError as err:  # sglang-config cannot carry a '-'-led value: refused, not shown
            assert fmt == "sglang-config" and secret.startswith("-") and secret not in str(err)
            continue
        for text in (rendered.text, json.dumps(rendered.to_json())):
            assert secret not in text, (fmt, text)
        assert "***" in rendered.text
    assert secret in render_profile(str(path), "argv", show_secrets=True).text


def test_a_secret_value_is_not_shown_in_the_refusal(tmp_path):
    path = _profile(tmp_path, '  api-key: "--\\0sekrit"\n')
    with pytest.raises(ProfileError) as err:
        render_argv(load_profile(path).profile)
    assert "sekrit" not in str(err.value)


# -- render is parsed back ----------------------------------------------------------------------------------------------
def test_a_render_that_does_not_parse_back_is_an_internal_error(tmp_path, monkeypatch):
    """A renderer bug (here: the inline form lost) must stop the launch as a ddtctl bug, exit 70."""
    import ddtctl.launch_tokens as lt

    monkeypatch.setattr(lt, "single_tokens", lambda option, text, catalog, secret=False: [option, text])
    path = _profile(tmp_path, "  served-model-name: --enable-metrics\n")
    with pytest.raises(RenderMismatch, match="does not parse back"):
        render_argv(load_profile(path).profile)
    from ddtctl.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        with pytest.raises(SystemExit) as done:
            main(["render", str(path)])
    assert done.value.code == 70 and "internal error" in err.getvalue()


def _value_for(spec, rng: random.Random):
    """A value of the flag's own type, often an awkward one (leading '-', spaces, YAML-looking text)."""
    texts = ["x", "no", "0123", "1:20", "-x y", "--x", "a b", "", "-", "0x1F", "null", "~", "é", "a=b", "-1", "@f"]
    if Catalog.is_boolean_switch(spec):
        return rng.choice([True, False])
    if spec.choices:
        return rng.choice(list(spec.choices))
    one = {"int": lambda: rng.choice([0, 1, -1, 7, 2**40, -(2**31)]),
           "float": lambda: rng.choice([0.0, 0.5, -0.5, 1e-05, -1e-05, 1e20, -1e-20, 3]),
           "json": lambda: rng.choice(['{"a": 1}', {"k": [1, "-x"]}, [1, 2]]),
           }.get(spec.type or "", lambda: rng.choice(texts))
    if spec.nargs in ("+", "*"):
        items = [one() for _ in range(rng.randint(1, 3))]
        return [i for i in items if not (isinstance(i, str) and i.startswith("-") and not NEGATIVE_NUMBER.match(i))] \
            or [one() if spec.type in ("int", "float") else "v"]
    return one()


def test_render_parses_back_over_bundled_profiles_and_generated_values(tmp_path, capsys):
    """Property: every profile renders (argv and, where SGLang's --config can carry it, sglang-config) into an argv
    that parses back into its typed values. Fixed, printed seed."""
    seed = 3100 + SEED
    print(f"launch-values round trip seed {seed}")
    rng = random.Random(seed)
    for bundled in sorted((REPO / "profiles").glob("*.yaml")):
        for fmt in ("argv", "shell", "sglang-config"):
            render_profile(str(bundled), fmt, show_secrets=True)
    specs = [s for s in CATALOG.flags if not s.deprecated and s.dest != "model_path" and s.nargs != "?"
             and s.action in ("store", "store_true", "boolean_optional")]
    checked = 0
    for n in range(60):
        chosen = rng.sample(specs, 12)
        server = {s.name: _value_for(s, rng) for s in chosen}
        path = tmp_path / f"gen{n}.yaml"
        path.write_text(json.dumps({"name": "gen", "sglang": "0.5.23", "model": {"path": rng.choice(["/m", "-m"])},
                                    "server": server}))
        prof = load_profile(path).profile
        try:
            argv = render_argv(prof)  # raises RenderMismatch on any difference
        except ProfileError as err:
            assert "DDT011" in str(err) or "DDT012" in str(err), err
            continue
        checked += 1
        back = flags_from_argv(argv, CATALOG)
        assert not [f for f in back.findings if f.rule == "DDT001"], argv
        try:
            render_profile(str(path), "sglang-config", show_secrets=True)
        except ProfileError as err:
            assert "--config" in str(err) or "cannot carry" in str(err), err
    assert checked >= 30, checked
