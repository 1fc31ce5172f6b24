"""`ddtctl tune --prompts`: the prompt file read into SGLang's custom dataset, the benchmark's argv, and the
API key found in the launch (no SSH needed; tests/remote/test_tune.py runs them against the loopback host)."""

from __future__ import annotations

import json

import pytest

from ddtctl.errors import UsageError
from ddtctl.tune import TuneOptions
from ddtctl.server_argv import read_launch
from ddtctl.tune.bench import api_key, bench_argv, load_prompts


def turns(prompts) -> list[tuple[str, str]]:
    rows = [json.loads(line)["conversations"] for line in prompts.jsonl.splitlines()]
    return [(r[0]["content"], r[1]["content"]) for r in rows]


def test_json_lines_in_sglang_custom_form_and_plain_prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"conversations": [{"role": "user", "content": "hi"}, '
                    '{"role": "assistant", "content": "yo"}]}\n'
                    "\n"
                    '{"prompt": "tell me a story"}\n'
                    '{"conversation": [{"from": "human", "value": "süß"}]}\n')
    prompts = load_prompts(str(path))
    assert turns(prompts) == [("hi", "yo"), ("tell me a story", ""), ("süß", "")]
    assert prompts.count == 3 and len(prompts.sha256) == 64
    assert load_prompts(str(path)).sha256 == prompts.sha256


def test_a_sharegpt_json_array(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "q1"},
                                                              {"from": "gpt", "value": "a1"}]},
                                {"id": "b", "conversations": [{"from": "human", "value": "q2"}]}]))
    assert turns(load_prompts(str(path))) == [("q1", "a1"), ("q2", "")]


@pytest.mark.parametrize("content, needle", [
    ('{"prompt": "a"}\n{"prompt": \n', "p.jsonl:2: not a JSON line"),
    ('{"text": "a"}\n', "p.jsonl:1: a record without a prompt"),
    ('{"conversations": []}\n', "p.jsonl:1: a record without a prompt"),
    ("[1, 2]", "p.jsonl: item 0: a record without a prompt"),
    ("[{", "the prompt file is not valid JSON"),
    ("\n\n", "the prompt file holds no prompts"),
])
def test_bad_prompt_files_are_one_line_usage_errors(tmp_path, content, needle):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        load_prompts(str(path))
    assert needle in err.value.one_line() and "\n" not in err.value.one_line()


def test_unreadable_and_non_utf8_files(tmp_path):
    with pytest.raises(UsageError, match="cannot read the prompt file"):
        load_prompts(str(tmp_path / "missing.jsonl"))
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(UsageError, match="not UTF-8"):
        load_prompts(str(path))


def test_bench_argv_uses_the_custom_dataset_with_a_fixed_output_length(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "hi"}\n')
    opts = TuneOptions(output_len=128, num_prompts=4, seed=7)
    argv = bench_argv(["{python}", "-m", "sglang.benchmark.serving"], "/py", host="127.0.0.1", port=1,
                      tokenizer="/m", concurrency=2, opts=opts, prompts=load_prompts(str(path)))
    assert argv[:3] == ["/py", "-m", "sglang.benchmark.serving"]
    assert argv[argv.index("--dataset-name") + 1] == "custom"
    assert argv[argv.index("--sharegpt-output-len") + 1] == "128"
    assert "--random-input-len" not in argv
    assert "--dataset-path" not in argv  # the wrapper on the host adds it
    random = bench_argv(["b"], "/py", host="h", port=1, tokenizer=None, concurrency=2, opts=opts)
    assert "--sharegpt-output-len" not in random
    # random token ids, sent as ids: no ShareGPT download (GPU hosts are often offline), no server-side tokenizer
    assert random[random.index("--dataset-name") + 1] == "random-ids" and "--tokenize-prompt" in random
    assert "--tokenize-prompt" not in argv  # (SGLang's custom dataset refuses it)


def test_api_key_of_the_launch():
    def key(argv):
        return api_key(read_launch(argv))

    assert key(["--model-path", "/m", "--api-key", "k1", "--port", "1"]) == "k1"
    assert key(["--model-path", "/m", "--api-key=k2"]) == "k2"
    assert key(["--model-path", "/m", "--admin-api-key", "adm", "--port", "1"]) is None  # normal endpoints stay open
    assert key(["--model-path", "/m", "--api-key", "k1", "--api-key", "k2"]) == "k2"  # SGLang keeps the last
    assert key(["--model-path", "/m", "--api-ke", "k3"]) == "k3"  # a prefix argparse takes
