"""ddtctl's argv reader against SGLang's own parser (the managed env's sglang 0.5.23).

A generated list of argvs (fixed, printed seed): every flag of the catalog under its full spelling, an alias, a
unique prefix, `--flag=value`, the `--no-` forms, repeated flags, nargs lists, SGLang `--config` files with and
without command-line overrides, and bad input (ambiguous prefixes, unknown flags, bad values and choices,
missing values, a switch given a value, no --model-path). For each, SGLang's `prepare_server_args` parsing
(tests/fidelity/sglang_argparse.py: the --config merge + parse_args) and ddtctl.argv.parse_server_argv must
agree: both accept with the same dest -> value namespace, or both refuse with the same first error line.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ddtctl.argv import parse_server_argv
from ddtctl.errors import DdtctlError
from ddtctl.schema.argparse_dump import _jsonable
from ddtctl.schema.catalog import Catalog, FlagSpec, load_catalog

SEED = 3417
HERE = Path(__file__).resolve().parent
CAT = load_catalog("0.5.23")  # the pristine release: the DDTREE payload's flags are not in SGLang's parser
MODEL = ["--model-path", "/m"]


def _options() -> list[str]:
    return ["-h", "--help"] + [o for s in CAT.flags for o in _spellings(s)]


def _spellings(spec: FlagSpec) -> list[str]:
    opts = list(spec.option_strings)
    if spec.action == "boolean_optional":
        opts += [f"--no-{o[2:]}" for o in opts if not o.startswith("--no-") and f"--no-{o[2:]}" not in opts]
    return opts


def _unique_prefix(option: str, options: list[str], rng: random.Random) -> str | None:
    """A prefix of `option` that no other option starts with (argparse then takes it), or None."""
    others = [o for o in options if o != option]
    for n in range(3, len(option)):
        prefix = option[:n]
        if not any(o.startswith(prefix) for o in others):
            return option[: rng.randint(n, len(option) - 1)] if n < len(option) - 1 else prefix
    return None


def _value(spec: FlagSpec, rng: random.Random) -> list[str]:
    if Catalog.is_boolean_switch(spec):
        return []
    if spec.choices:
        picks = [str(rng.choice(spec.choices))]
    elif spec.converter == "common.human_readable_int":
        picks = [rng.choice(["4k", "2Ki", "1.5M", "77"])]
    elif spec.converter == "cuda_graph_config.parse_cuda_graph_config_arg":
        picks = ["{}"]
    elif spec.type == "json":
        picks = [rng.choice(['{"a": 1}', "[1, 2]", '"x"'])]
    elif spec.type == "int":
        picks = [str(rng.randint(0, 64))]
    elif spec.type == "float":
        picks = [rng.choice(["0.5", "1e-3", "2"])]
    else:
        picks = [rng.choice(["x", "a/b", "None", "1"])]
    if spec.nargs in ("+", "*"):
        picks += [picks[0]] if spec.choices else [rng.choice(["y", "2"])] if spec.type != "int" else ["3"]
    return picks


def _one(spec: FlagSpec, rng: random.Random, options: list[str]) -> list[str]:
    spellings = _spellings(spec)
    option = rng.choice(spellings)
    form = rng.choice(["full", "full", "prefix", "equals"])
    if form == "prefix":
        option = _unique_prefix(option, options, rng) or option
    value = _value(spec, rng)
    if form == "equals" and len(value) == 1 and spec.nargs in (None, "?"):
        return [f"{option}={value[0]}"]
    return [option, *value]


def _cases(tmp: Path, rng: random.Random) -> list[list[str]]:
    options = _options()
    specs = [s for s in CAT.flags if s.dest != "model_path" and s.name != "config"]
    rng.shuffle(specs)
    cases = []
    for i in range(0, len(specs), 6):  # every flag, six to an argv
        argv = list(MODEL)
        for spec in specs[i : i + 6]:
            argv += _one(spec, rng, options)
        cases.append(argv)
    for spec in rng.sample(specs, 40):  # repeated flags: argparse keeps the last
        cases.append(MODEL + _one(spec, rng, options) + _one(spec, rng, options))
    cases += [
        ["--model", "/a", "--tp", "8", "--trust-remote-cod", "--model-path", "/b"],
        MODEL + ["--tp-size", "2", "--tensor-parallel-size", "4", "--tp", "3"],
        MODEL + ["--enable-tf32-matmul", "--no-enable-tf32-matmul"],
        MODEL + ["--model-checksum"],
        MODEL + ["--lora-paths", "a=/x", '{"lora_name":"b","lora_path":"/y"}', "--max-total-tokens", "3Mi"],
        MODEL + ["--port", "-1"],
        # refused
        MODEL + ["--h", "1"],
        MODEL + ["--tp-siz", "x"],
        MODEL + ["--grammar-backend", "xgramar"],
        MODEL + ["--port"],
        MODEL + ["--trust-remote-code=1"],
        MODEL + ["--bogus-flag", "3"],
        MODEL + ["stray"],
        ["--tp-size", "2"],
        MODEL + ["--max-total-tokens", "1.5Ki"],
        MODEL + ["--speculative-algorithm", "DDTREE"],
        MODEL + ["--tp-size", "x", "--port", "y"],
    ]
    cfg = tmp / "s.yaml"
    cfg.write_text(
        "model-path: /m\ntp-size: 2\ntrust-remote-code: true\nskip-server-warmup: false\n"
        "json-model-override-args: {a: 1}\nserved-model-name: [a, b]\nport: 31000\n"
    )
    lora = tmp / "lora.yaml"
    lora.write_text("model-path: /m\nlora-paths: [a=/x]\n")  # SGLang's merger refuses a custom action
    empty = tmp / "empty.yaml"
    empty.write_text("")
    bad = tmp / "bad.yaml"
    bad.write_text("model-path: /m\nno-such-flag: 1\n")
    cases += [
        ["--config", str(cfg)],
        ["--config", str(cfg), "--tp-size", "4", "--port=1"],
        ["--tp", "8", "--config", str(cfg)],
        ["--config", str(empty), "--model", "/x"],
        ["--config", str(bad)],
        ["--config", str(lora)],
        ["--config", str(cfg), "--config", str(cfg)],
    ]
    return cases


def _ours(argv: list[str]) -> dict:
    try:
        parsed = parse_server_argv(argv, CAT)
    except DdtctlError as err:
        return {"ok": False, "error": err.one_line()}
    if not parsed.ok:
        return {"ok": False, "error": parsed.first_error()}
    return {"ok": True, "ns": {k: _jsonable(v) for k, v in parsed.namespace.items()}}


@pytest.mark.sglang
def test_the_reader_parses_as_sglangs_own_parser(managed_python, tmp_path):
    print(f"argv fidelity seed: {SEED}")
    cases = _cases(tmp_path, random.Random(SEED))
    proc = subprocess.run(
        [str(managed_python), str(HERE / "sglang_argparse.py")],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout)
    assert len(theirs) == len(cases)
    disagreements = []
    for argv, sglang in zip(cases, theirs):
        ours = _ours(argv)
        if sglang["ok"] != ours["ok"]:
            disagreements.append((argv, "verdict", sglang, ours))
        elif sglang["ok"]:
            diff = {k: (v, ours["ns"].get(k, "<absent>")) for k, v in sglang["ns"].items()}
            diff = {k: pair for k, pair in diff.items() if pair[0] != pair[1]}
            diff.update({k: ("<absent>", v) for k, v in ours["ns"].items() if k not in sglang["ns"]})
            if diff:
                disagreements.append((argv, "values", diff, None))
        elif "Error: " not in sglang["error"]:  # the config merger's ValueError: ddtctl words it its own way
            if sglang["error"] != ours["error"]:
                disagreements.append((argv, "error", sglang["error"], ours["error"]))
    accepted = sum(1 for t in theirs if t["ok"])
    print(f"{len(cases)} argvs, {accepted} accepted by SGLang, {len(disagreements)} disagreements")
    assert not disagreements, "\n".join(map(repr, disagreements[:10]))
    assert accepted > len(cases) // 2  # the generator mostly writes launches SGLang takes


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q", "-s"]))


QWEN = str(HERE / "models" / "qwen3-8b")


def _five_cases(tmp: Path) -> dict[str, list[str]]:
    """Issue #34 item 1: the launches where validate and dry-run disagreed."""
    cfg = tmp / "s.yaml"
    cfg.write_text(f"model-path: {QWEN}\ntp-size: 2\n")
    return {
        "tp-alias": ["--model-path", QWEN, "--tp", "8"],
        "config-then-cmdline": ["--config", str(cfg), "--tp-size", "4"],
        "python-m": ["python", "-m", "sglang.launch_server", "--model-path", QWEN, "--tp", "2"],
        "python3-m-env": [
            "FOO=1",
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            QWEN,
            "--tp-size",
            "2",
        ],
        "sglang-serve": ["sglang", "serve", QWEN, "--tp-size", "2"],
        # and one each way that both must refuse
        "ambiguous-prefix": ["--model-path", QWEN, "--h", "2"],
        "bad-choice": ["sglang", "serve", QWEN, "--grammar-backend", "xgramar"],
    }


@pytest.mark.sglang
def test_validate_and_dry_run_give_the_five_cases_one_verdict(tmp_path):
    from ddtctl.argv import split_launcher
    from ddtctl.dryrun import dry_run_argvs
    from ddtctl.validate import validate_argv

    cases = _five_cases(tmp_path)
    items = []
    for name, line in cases.items():
        launch = split_launcher(line)  # as `dry-run --argv` does
        items.append((name, launch.argv, "H200", launch.env))
    dry = dry_run_argvs([(n, a, g) for n, a, g, _ in items], envs=[e or None for *_, e in items])
    verdicts = {}
    for (name, line), result in zip(cases.items(), dry):
        valid = validate_argv(line, gpu="H200", source=name)
        verdicts[name] = (valid.valid, result.accepted)
    assert verdicts == {
        "tp-alias": (True, True),
        "config-then-cmdline": (True, True),
        "python-m": (True, True),
        "python3-m-env": (True, True),
        "sglang-serve": (True, True),
        "ambiguous-prefix": (False, False),
        "bad-choice": (False, False),
    }
    assert dry[0].resolved["tp_size"] == 8 and dry[1].resolved["tp_size"] == 4  # the command line wins


@pytest.mark.sglang
def test_a_pasted_launch_file_gets_one_verdict_from_both_commands(tmp_path):
    launch = tmp_path / "launch.sh"
    launch.write_text(
        f"HF_HUB_OFFLINE=1 python3 -m sglang.launch_server \\\n  --model-path {QWEN} \\\n  --tp 2\n"
    )
    env = {"PYTHONPATH": str(HERE.parents[1])}
    run = [sys.executable, "-m", "ddtctl"]
    v = subprocess.run([*run, "validate", "--gpu", "H200", "--argv-file", str(launch)], capture_output=True,
                       text=True, timeout=120, env={**__import__("os").environ, **env})  # fmt: skip
    d = subprocess.run([*run, "dry-run", "--gpu", "H200", "--argv-file", str(launch), "--format", "json"],
                       capture_output=True, text=True, timeout=300, env={**__import__("os").environ, **env})  # fmt: skip
    assert v.returncode == 0 and d.returncode == 0, (v.stdout + v.stderr, d.stderr[-2000:])
    assert '"tp_size": 2' in d.stdout.replace("'", '"')
