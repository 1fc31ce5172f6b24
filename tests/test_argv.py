"""ddtctl.argv: which occurrence of a flag counts (argparse's last), every occurrence where each matters, and
secret masking."""

from __future__ import annotations

from ddtctl.argv import (
    argv_to_flags,
    flag_occurrences,
    flag_value,
    flag_values,
    has_flag,
    is_secret_flag,
    mask_argv,
    mask_env,
    mask_text,
    secret_values,
)


def test_flag_value_is_the_last_occurrence_as_argparse_keeps_it():
    argv = ["--port", "1", "--host=0.0.0.0", "--port=2", "--tp-size", "4"]
    assert flag_value(argv, "--port") == "2"
    assert flag_value(argv, "--host") == "0.0.0.0" and flag_value(argv, "--pp-size") is None
    assert flag_value(["--model", "/a", "--model-path", "/b"], "--model-path", "--model") == "/b"  # aliases
    assert (
        flag_value(["--model-path", "/a", "--model-path"], "--model-path") is None
    )  # argparse would refuse it
    assert flag_value(["--port-x", "1"], "--port") is None  # a longer flag is not this one


def test_every_occurrence_for_callers_that_rewrite_or_must_notice_each():
    argv = ["--model-path", "/a", "--speculative-draft-model-path=/d", "--model-path", "/b", "--model-path"]
    occ = flag_occurrences(argv, ("--model-path", "--speculative-draft-model-path"))
    assert [(o.value_index, o.flag, o.inline, o.value(argv)) for o in occ] == [
        (1, "--model-path", False, "/a"),
        (2, "--speculative-draft-model-path", True, "/d"),
        (4, "--model-path", False, "/b"),
    ]  # the trailing bare flag has no value
    assert flag_values(
        ["--speculative-algorithm", "DDTREE", "--speculative-algorithm=EAGLE"], "--speculative-algorithm"
    ) == ["DDTREE", "EAGLE"]


def test_has_flag_and_argv_to_flags():
    assert has_flag(["--device=cuda"], "--device") and has_flag(["--device"], "--device")
    assert not has_flag(["--device-id", "0"], "--device")
    assert argv_to_flags(["pos", "--a", "1", "--b", "--c=x", "--a", "2", "--d", "-1"]) == {
        "a": "2",
        "b": True,
        "c": "x",
        "d": "-1",
    }
    assert list(argv_to_flags(["--a", "1", "--b", "--a", "2"])) == ["a", "b"]  # first-seen order


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
