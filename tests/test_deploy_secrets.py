"""Which launch arguments deploy treats as secrets, and how a report masks them (no SSH needed)."""

from __future__ import annotations

import json

import pytest

from ddtctl.deploy import DeployResult, is_secret_flag, mask_argv, secret_values


@pytest.mark.parametrize("flag", ["--api-key", "--admin-api-key", "--hf-token", "--x-token=abc",
                                  "--ssl-keyfile-password", "--watermark-key", "--watermark-key-b", "api_key"])
def test_secret_flags(flag):
    assert is_secret_flag(flag)


@pytest.mark.parametrize("flag", ["--max-total-tokens", "--skip-tokenizer-init", "--speculative-token-map",
                                  "--speculative-num-draft-tokens", "--tokenizer-path", "--max-prefill-tokens",
                                  "max_total_tokens"])
def test_flags_that_only_contain_a_secret_word_are_not_secret(flag):
    assert not is_secret_flag(flag)


def test_a_switch_before_another_flag_makes_no_secret_of_that_flag():
    argv = ["--skip-tokenizer-init", "--attention-backend", "triton", "--max-total-tokens", "16384",
            "--api-key", "s3cr3t-value", "--hf-token=hf_abcdef"]
    assert secret_values(argv, {"HF_TOKEN": "hf_envtoken"}) == {"s3cr3t-value", "hf_abcdef", "hf_envtoken"}
    masked = mask_argv(argv)
    assert masked[:5] == argv[:5] and masked[6] == "***" and masked[7] == "--hf-token=***"


def test_report_json_masks_secrets_in_strings_and_stays_valid_json():
    r = DeployResult(status="deployed", spec_name="p", release="r1", secrets={"16384", "s3cr3t-value"})
    r.error = "server said: key s3cr3t-value rejected"
    r.elapsed_s = 16384.5
    out = r.to_json()
    json.dumps(out)  # still JSON (a numeric secret used to turn numbers into a bare ***)
    assert out["error"] == "server said: key *** rejected" and out["elapsed_s"] == 16384.5
