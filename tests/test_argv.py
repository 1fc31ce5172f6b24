"""ddtctl.argv: the one argv reader (SGLang's argparse parser rebuilt from the catalog: prefixes, aliases,
`--no-` forms, repeats, `--config` then the command line, launcher and env prefixes, pasted launch files), and
secret masking. tests/fidelity/test_argv_parse.py compares the reader with SGLang's own parser."""

from __future__ import annotations

import pytest

from ddtctl.argv import (
    flag_occurrences,
    is_secret_flag,
    mask_argv,
    mask_env,
    mask_text,
    parse_launch_argv,
    parse_server_argv,
    read_argv_file,
    secret_values,
    split_launcher,
)
from ddtctl.errors import ProfileError, UsageError
from ddtctl.schema.extensions import extended_catalog

CAT = extended_catalog("0.5.23")


def parse(*argv: str, **kw):
    return parse_server_argv(list(argv), CAT, **kw)


def test_last_occurrence_wins_across_spellings_as_argparse_keeps_it():
    p = parse("--model-path", "/a", "--port", "1", "--host=0.0.0.0", "--port=2", "--model", "/b")
    assert p.ok and p.given == {"model_path": "/b", "port": 2, "host": "0.0.0.0"}
    assert [o.option for o in p.occurrences] == ["--model-path", "--port", "--host", "--port", "--model"]
    assert p.get("pp_size") == 1 and p.get("--port") == 2  # defaults are the catalog's, typed
    assert p.last("port").raw == ("2",)


def test_prefixes_aliases_and_no_forms_resolve_as_in_sglang():
    p = parse("--model-path", "/m", "--tp", "8", "--trust-remote-cod", "--no-enable-tf32-matmul", "--ep", "2")
    assert p.ok, p.first_error()
    assert p.given == {
        "model_path": "/m",
        "tp_size": 8,
        "trust_remote_code": True,
        "enable_tf32_matmul": False,
        "ep_size": 2,
    }
    assert p.last("tp_size").option == "--tp-size"  # argparse hands the action the full spelling
    assert parse("--model-path", "/m", "--tp-siz", "2").given["tp_size"] == 2


def test_ambiguous_prefix_is_refused_and_the_rest_is_still_read():
    p = parse("--model-path", "/m", "--h", "2", "--tp", "4")
    assert not p.ok and p.errors[0].startswith("ambiguous option: --h could match --help, --host")
    assert p.given == {"model_path": "/m", "tp_size": 4}
    assert not p.missing  # argparse never reached its required-flag check


def test_refused_values_are_all_reported_in_order_and_left_out():
    p = parse("--model-path", "/m", "--port", "x", "--grammar-backend", "zz", "--tp-size", "2")
    assert p.errors == [
        "argument --port: invalid int value: 'x'",
        "argument --grammar-backend: invalid choice: 'zz' (choose from 'xgrammar', 'outlines', 'llguidance', "
        "'none')",
    ]
    assert p.first_error() == p.errors[0] and p.given == {"model_path": "/m", "tp_size": 2}


def test_unknown_positional_missing_and_structural_errors():
    p = parse("--bogus", "3", "stray")
    assert p.unknown == ["--bogus"] and p.positional == []  # the value after an unknown option goes with it
    assert p.missing_model_path and p.first_error().startswith("the following arguments are required")
    assert parse("--model-path", "/m", "stray").positional == ["stray"]
    assert parse("--model-path", "/m", "--port").errors == ["argument --port: expected one argument"]
    assert parse("--model-path", "/m", "--trust-remote-code=1").errors == [
        "argument --trust-remote-code: ignored explicit argument '1'"
    ]


def test_converters_nargs_and_optional_values_are_sglangs():
    p = parse(
        "--model-path", "/m", "--max-total-tokens", "4Ki", "--model-checksum",
        "--json-model-override-args", '{"a": 1}', "--lora-paths", "a=/x", '{"lora_name":"b","lora_path":"/y"}',
    )  # fmt: skip
    assert p.ok, p.first_error()
    assert p.given["max_total_tokens"] == 4096 and p.given["model_checksum"] == ""  # nargs "?" const
    assert p.given["lora_paths"] == ["a=/x", {"lora_name": "b", "lora_path": "/y"}]


def test_config_file_first_then_the_command_line_overrides(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("model-path: /m\ntp-size: 2\ntrust-remote-code: true\nskip-server-warmup: false\n")
    p = parse("--config", str(cfg), "--tp-size", "4")
    assert p.ok and p.config == str(cfg) and p.n_config == 5  # a false switch is left out, as SGLang does
    assert p.given == {"model_path": "/m", "tp_size": 4, "trust_remote_code": True}
    assert [o.from_config for o in p.occurrences] == [True, True, True, False]
    cfg.write_text("model-path: /m\nenable-tf32-matmul: false\n")  # SGLang refuses --no- pairs in a config
    with pytest.raises(ProfileError, match="cannot set --enable-tf32-matmul"):
        parse("--config", str(cfg))


def test_launcher_and_env_prefixes_are_split_off():
    for line in (
        ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "2"],
        ["/usr/bin/python3.11", "-u", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "2"],
        ["sglang", "serve", "--model-path", "/m", "--tp", "2"],
        [
            "sglang",
            "serve",
            "/m",
            "--model-type",
            "llm",
            "--tp",
            "2",
        ],  # serve's positional model, backend pick
        ["FOO=1", "BAR=a=b", "sglang", "serve", "/m", "--tp", "2"],
        ["env", "FOO=1", "python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp=2"],
    ):
        p = parse(*line)
        assert p.ok and p.given == {"model_path": "/m", "tp_size": 2}, line
        assert p.launcher is not None, line
    assert split_launcher(["FOO=1", "BAR=a=b", "sglang", "serve", "/m"]).env == {"FOO": "1", "BAR": "a=b"}
    assert split_launcher(["--tp", "2"]).launcher is None
    for bad in (["python", "-m", "vllm.entrypoints"], ["sglang", "generate"], ["FOO=1", "vllm", "serve"]):
        with pytest.raises(UsageError, match="not an SGLang"):
            split_launcher(bad)


def test_argv_file_is_a_pasted_shell_line(tmp_path):
    f = tmp_path / "launch.sh"
    f.write_text(
        "# the server\nHF_HUB_OFFLINE=1 python3 -m sglang.launch_server \\\n  --model-path '/m x' \\\n"
        '  --served-model-name "a b"  # name\n'
    )
    assert read_argv_file(str(f)) == [
        "HF_HUB_OFFLINE=1", "python3", "-m", "sglang.launch_server", "--model-path", "/m x", "--served-model-name",
        "a b",
    ]  # fmt: skip
    f.write_text("sglang serve /m && echo done\n")
    with pytest.raises(UsageError, match="more than one command"):
        read_argv_file(str(f))
    f.write_text("sglang serve '/m\n")
    with pytest.raises(UsageError, match="not a shell command line"):
        read_argv_file(str(f))


def test_launch_reader_uses_the_releases_catalog_with_the_payload_flags():
    p = parse_launch_argv(["--model-path", "/m", "--speculative-ddtree-budget", "63"], config=False)
    assert p.ok and p.given["speculative_ddtree_budget"] == 63
    flags = parse_launch_argv(["--tp", "2", "--no-dllm-fdfo", "--x", "1", "--y"], config=False).flags()
    assert flags == {"tp-size": "2", "dllm-fdfo": False, "x": "1", "y": True}


def test_every_occurrence_for_the_caller_that_rewrites_each():
    argv = ["--model-path", "/a", "--speculative-draft-model-path=/d", "--model-path", "/b", "--model-path"]
    occ = flag_occurrences(argv, ("--model-path", "--speculative-draft-model-path"))
    assert [(o.value_index, o.flag, o.inline, o.value(argv)) for o in occ] == [
        (1, "--model-path", False, "/a"),
        (2, "--speculative-draft-model-path", True, "/d"),
        (4, "--model-path", False, "/b"),
    ]  # the trailing bare flag has no value


def test_secret_flags_by_word_not_substring():
    for flag in (
        "--api-key",
        "--admin-api-key",
        "--hf-token",
        "--ssl-keyfile-password",
        "--watermark-key-b",
        "api_key",
        "--x-token=abc",
    ):
        assert is_secret_flag(flag), flag
    for flag in ("--max-total-tokens", "--skip-tokenizer-init", "--speculative-token-map", "--keyfile"):
        assert not is_secret_flag(flag), flag


def test_masking_and_secret_values():
    argv = [
        "--api-key",
        "sekrit1",
        "--hf-token=tok12345",
        "--enable-api-key",
        "--port",
        "1",
        "--x-key",
        "abc",
    ]
    assert mask_argv(argv) == [
        "--api-key",
        "***",
        "--hf-token=***",
        "--enable-api-key",
        "--port",
        "1",
        "--x-key",
        "***",
    ]
    assert argv == [
        "--api-key",
        "sekrit1",
        "--hf-token=tok12345",
        "--enable-api-key",
        "--port",
        "1",
        "--x-key",
        "abc",
    ]  # not modified in place
    # "abc" is too short to mask inside free text; a secret switch followed by a flag has no value
    assert secret_values(argv, {"HF_TOKEN": "envtoken", "PATH": "/usr/bin"}) == {
        "sekrit1",
        "tok12345",
        "envtoken",
    }
    assert mask_env({"HF_TOKEN": "x", "OPENAI_API_KEY": "y", "PATH": "/bin"}) == {
        "HF_TOKEN": "***",
        "OPENAI_API_KEY": "***",
        "PATH": "/bin",
    }
    assert mask_text("key sekrit1 and sekrit1", {"sekrit1"}) == "key *** and ***"


def test_a_prefix_of_a_secret_flag_is_masked_as_sglang_reads_it_as_the_flag():
    argv = ["--api-ke", "sekrit1", "--ssl-keyfile-pass=tok12345", "--port", "1", "--max-total", "5"]
    given = parse_launch_argv(argv, config=False).given
    assert given["api_key"] == "sekrit1" and given["ssl_keyfile_password"] == "tok12345"  # SGLang takes both
    assert mask_argv(argv) == ["--api-ke", "***", "--ssl-keyfile-pass=***", "--port", "1", "--max-total", "5"]
    assert secret_values(argv) == {"sekrit1", "tok12345"}


QWEN = str(__import__("pathlib").Path(__file__).resolve().parent / "fidelity" / "models" / "qwen3-8b")


def _profile(tmp_path, server: str):
    path = tmp_path / "p.yaml"
    path.write_text(f'name: p\nsglang: "0.5.23"\nhardware: {{gpu: H200, count: 8}}\nmodel: {{path: {QWEN}}}\n'
                    f"server:\n{server}")  # fmt: skip
    return path


def test_a_profiles_server_config_is_read_and_merged_under_server(tmp_path):
    from ddtctl.validate import validate_path

    (tmp_path / "inc.yaml").write_text("tp-size: 3\ngrammar-backend: xgramar\nno-such-flag: 1\n")
    r = validate_path(_profile(tmp_path, "  config: inc.yaml\n  tp-size: 2\n"))
    msgs = [f.message for f in r.findings]
    assert any("unknown SGLang 0.5.23 flag --no-such-flag" in m and "inc.yaml" in m for m in msgs), msgs
    assert any("'xgramar' is not a choice of --grammar-backend" in m for m in msgs), msgs
    assert not any(f.rule == "DDT009" for f in r.findings)  # server: over the file is how SGLang merges it
    missing = validate_path(_profile(tmp_path, "  config: nope.yaml\n"))
    assert not missing.valid and any("server.config" in f.message and "not found" in f.message
                                     for f in missing.findings)  # fmt: skip


def test_an_sglang_config_given_as_a_path_is_checked_as_one(tmp_path):
    from ddtctl.render import render_profile
    from ddtctl.validate import validate_path

    prof = _profile(tmp_path, "  tp-size: 2\n  attention-backend: fa3\n")
    written = tmp_path / "server.yaml"
    written.write_text(render_profile(str(prof), "sglang-config", show_secrets=True).text)
    r = validate_path(written)
    assert r.valid and not r.error, [f.message for f in r.findings]
    written.write_text(f"model-path: {QWEN}\ntp-sise: 2\n")
    assert [f.rule for f in validate_path(written).findings if f.severity == "error"] == ["DDT001"]
