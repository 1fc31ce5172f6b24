"""Issue #31, files and subprocesses: one bounded reader for every input file (safeio.load_json / load_yaml /
read_text), one safe writer for every output path (safeio.check_output and its writers), one bounded runner for
every local subprocess (procs.run_bounded / spawn), the model's config.json type- and range-checked, and
recursive globs that do not follow symlink loops. The stand-in interpreters are in tests/io_standins/.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtctl.errors import DdtctlError, EnvironmentMissing, UsageError
from ddtctl.model_facts import ModelConfigError, read_model_facts
from ddtctl.procs import run_bounded
from ddtctl.safeio import (
    append_text,
    check_output,
    glob_paths,
    load_json,
    load_yaml,
    loads_json,
    loads_yaml,
    write_bytes_new,
    write_new,
)

REPO = Path(__file__).resolve().parent.parent
STANDINS = REPO / "tests" / "io_standins"
MODELS = REPO / "tests" / "fidelity" / "models"


def ddtctl(*args, timeout: float = 120, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "ddtctl", *map(str, args)],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        cwd=cwd or REPO,
        stdin=subprocess.DEVNULL,
    )


def one_line(err: DdtctlError) -> str:
    text = err.one_line()
    assert "\n" not in text
    return text


# -- bounded structured inputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, needle",
    [
        ("[" * 10000 + "]" * 10000, "nests more than 64 levels deep"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("[NaN]", "NaN is not a JSON number"),
        ("[Infinity]", "Infinity is not a JSON number"),
        ("[1e400]", "out of range"),
        ("[" + "9" * 5000 + "]", "a number of 5000 digits"),
        ("{nope", "not valid JSON"),
    ],
)
def test_loads_json_refuses_in_one_line(text, needle):
    with pytest.raises(UsageError) as err:
        loads_json(text, where="x.json")
    assert needle in one_line(err.value)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("a: &x [1]\nb: *x\n", "anchors/aliases"),
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("a: 1\n---\nb: 2\n", "not one YAML document"),
        ("a: " + "[" * 70 + "]" * 70 + "\n", "nests more than 64 levels deep"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nesting depth"),
        ("{[1]: 2}\n", "a mapping key that is a list or mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_loads_yaml_refuses_in_one_line(text, needle):
    with pytest.raises(UsageError) as err:
        loads_yaml(text, where="x.yaml")
    assert needle in one_line(err.value)


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match="anchors/aliases"):
        load_yaml(path, 1 << 20)


@pytest.mark.parametrize("loader", [load_json, load_yaml])
def test_loaders_never_open_a_fifo_or_a_device(tmp_path, loader):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is a FIFO"):
        loader(fifo, 1 << 20)
    with pytest.raises(UsageError, match="is a character device"):
        loader("/dev/zero", 1 << 20)
    big = tmp_path / "big"
    big.write_text("[" + "1," * 600_000 + "1]")
    with pytest.raises(UsageError, match="limited to 1024 KiB"):
        loader(big, 1 << 20)


def test_good_inputs_still_load(tmp_path):
    assert loads_json('{"a": [1, 2.5, "x", null, true]}', where="x") == {"a": [1, 2.5, "x", None, True]}
    assert loads_yaml("a: [1, 2]\nb: {c: d}\n", where="x") == {"a": [1, 2], "b": {"c": "d"}}
    assert loads_yaml("", where="x") is None


# -- outputs ---------------------------------------------------------------------------------------------------
def _unix_socket(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


@pytest.mark.parametrize("writer", ["write_new", "write_bytes_new", "append_text"])
def test_an_output_never_replaces_a_fifo_a_socket_or_a_device(tmp_path, writer):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link_to_fifo = tmp_path / "link-to-fifo"
    link_to_fifo.symlink_to(fifo)
    link_to_device = tmp_path / "link-to-device"
    link_to_device.symlink_to("/dev/zero")  # refused before anything is written: /dev/zero is never touched
    sock_path = tmp_path / "sock"
    sock = _unix_socket(sock_path)
    write = {
        "write_new": lambda p: write_new(p, "x"),
        "write_bytes_new": lambda p: write_bytes_new(p, b"x"),
        "append_text": lambda p: append_text(p, "x"),
    }[writer]
    try:
        for target, kind in [
            (fifo, "a FIFO"),
            (link_to_fifo, "a FIFO"),
            (sock_path, "a socket"),
            (link_to_device, "a character device"),
            (tmp_path, "is a directory"),
        ]:
            with pytest.raises(UsageError) as err:
                write(target)
            assert kind in one_line(err.value)
        assert fifo.is_fifo() and link_to_fifo.is_symlink() and sock_path.is_socket()
    finally:
        sock.close()


def test_an_output_writes_through_a_symlink_to_a_regular_file(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_new(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    append_text(link, "+1")
    assert real.read_text() == "new+1"
    assert check_output(tmp_path / "fresh.txt") == str(tmp_path / "fresh.txt")
    with pytest.raises(UsageError, match="no such directory"):
        check_output(tmp_path / "no" / "such.txt")


def test_schema_o_refuses_a_fifo_and_leaves_it(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    run = ddtctl("schema", "-o", fifo)
    assert run.returncode == 2, run.stderr
    assert "is a FIFO (named pipe); refusing to write the output" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert fifo.is_fifo()


# -- subprocesses ----------------------------------------------------------------------------------------------
def test_a_flood_is_killed_at_the_bound():
    for name in ("flood", "flood-one-line"):
        with pytest.raises(EnvironmentMissing) as err:
            run_bounded([str(STANDINS / name)], timeout_s=60, limit=1 << 20, what=name)
        assert f"{name} printed more than 1 MiB (killed)" in one_line(err.value)


@pytest.mark.parametrize("name", ["hang", "drip"])
def test_a_hang_or_a_drip_is_killed_at_the_deadline(name):
    with pytest.raises(EnvironmentMissing) as err:
        run_bounded([str(STANDINS / name)], timeout_s=1, limit=1 << 20, what=name)
    assert f"{name} did not finish within 1 s (killed)" in one_line(err.value)


def test_the_whole_process_group_is_killed(tmp_path):
    pidfile = tmp_path / "child.pid"
    env = dict(os.environ, STANDIN_PIDFILE=str(pidfile))
    with pytest.raises(EnvironmentMissing, match="did not finish"):
        run_bounded([str(STANDINS / "hang-with-child")], timeout_s=1, env=env)
    child = int(pidfile.read_text())
    for _ in range(200):  # reaped by init once killed; bounded wait, not a timing assert
        try:
            state = Path(f"/proc/{child}/stat").read_text().split(") ")[1][0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the stand-in's child {child} is still running")


def test_exit_at_once_garbage_input_and_a_missing_program(tmp_path):
    done = run_bounded([str(STANDINS / "exit-at-once")], timeout_s=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "", "")
    garbage = run_bounded([str(STANDINS / "garbage")], timeout_s=30)
    assert garbage.returncode == 0 and "not json" in garbage.stdout and "\ufffd" in garbage.stdout
    echoed = run_bounded(["cat"], timeout_s=30, input="through stdin")
    assert echoed.stdout == "through stdin"
    with pytest.raises(EnvironmentMissing) as err:
        run_bounded([str(tmp_path / "no-such-python")], timeout_s=30)
    assert "cannot start" in one_line(err.value)


@pytest.mark.parametrize(
    "standin, needle",
    [
        ("flood", "that are not its protocol"),
        ("flood-one-line", "printed a line over 16 MiB"),
        ("garbage", "the resolver process exited (status 0)"),
        ("exit-at-once", "the resolver process exited (status 3)"),
    ],
)
def test_dry_run_with_a_broken_python_ends_in_one_line(standin, needle):
    run = ddtctl(
        "dry-run", "--gpu", "H200", "--timeout", "5", "--python", STANDINS / standin,
        "--argv", "--", "--model-path", MODELS / "qwen3-8b",
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert needle in run.stderr and len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("standin", ["flood", "flood-one-line"])
def test_diff_flags_installed_with_a_flooding_python_is_bounded(standin):
    run = ddtctl("diff-flags", "--installed", "--python", STANDINS / standin)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "printed more than 8 MiB (killed)" in run.stderr and len(run.stderr.strip().splitlines()) == 1


# -- the model's config.json -----------------------------------------------------------------------------------
def _model(tmp_path: Path, config) -> Path:
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return d


@pytest.mark.parametrize(
    "config, needle",
    [
        ({"architectures": ["Qwen3_5ForCausalLM"], "num_hidden_layers": 10**15, "full_attention_interval": 4},
         "num_hidden_layers is 1000000000000000"),
        ({"architectures": {"Qwen3ForCausalLM": 1}}, "architectures must be a list of strings"),
        ({"architectures": ["A"], "num_attention_heads": True}, "num_attention_heads is True"),
        ({"architectures": ["A"], "vocab_size": "32000"}, "vocab_size is '32000'"),
        ({"architectures": ["A"], "text_config": [1]}, "text_config is list"),
        ({"architectures": ["A"], "layer_types": "full"}, "layer_types must be a list of strings"),
        ({"architectures": ["A"], "mamba_ssm_dtype": 32}, "mamba_ssm_dtype is int"),
        ({"architectures": ["A"], "text_config": {"hidden_size": -1}}, "hidden_size is -1"),
        ("[" * 10000 + "]" * 10000, "nests more than 64 levels deep"),
        ('{"architectures": ["A"], "hidden_size": Infinity}', "Infinity is not a JSON number"),
        ("[1]", "holds a JSON list, not an object"),
    ],
)  # fmt: skip
def test_a_hostile_config_json_is_one_line(tmp_path, config, needle):
    with pytest.raises(ModelConfigError) as err:
        read_model_facts(_model(tmp_path, config))
    assert needle in one_line(err.value) and "config.json" in one_line(err.value)


def test_a_hostile_safetensors_index_is_one_line(tmp_path):
    d = _model(tmp_path, {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2})
    for total, needle in [("Infinity", "Infinity is not a JSON number"), ("1e300", "total_size is 1e+300")]:
        (d / "model.safetensors.index.json").write_text('{"metadata": {"total_size": %s}}' % total)
        with pytest.raises(ModelConfigError) as err:
            read_model_facts(d)
        assert needle in one_line(err.value)


def test_a_config_json_that_is_a_fifo_or_a_device_is_never_read(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    os.mkfifo(d / "config.json")
    with pytest.raises(ModelConfigError, match="is a FIFO"):
        read_model_facts(d)
    (d / "config.json").unlink()
    (d / "config.json").symlink_to("/dev/zero")
    with pytest.raises(ModelConfigError, match="is a character device"):
        read_model_facts(d)


def test_real_configs_still_read(tmp_path):
    assert read_model_facts(tmp_path / "absent") is None
    facts = read_model_facts(MODELS / "qwen3.6-27b")
    assert facts is not None and facts.architecture and facts.num_hidden_layers


def test_validate_with_a_huge_layer_count_ends_in_one_line(tmp_path):
    """Before: num_linear_layers counted 10**15 layers (a hang)."""
    config = json.loads((MODELS / "qwen3.6-27b" / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 10**15
    config["text_config"].pop("layer_types", None)
    model = _model(tmp_path, config)
    profile = (REPO / "profiles" / "qwen36-27b-ddtree.yaml").read_text()
    profile = profile.replace("/root/models/Qwen3.6-27B\n", f"{model}\n").replace("host: ct200", "")
    (tmp_path / "p.yaml").write_text(profile)
    run = ddtctl("validate", tmp_path / "p.yaml", timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "num_hidden_layers is 1000000000000000" in run.stdout + run.stderr


# -- recursive globs -------------------------------------------------------------------------------------------
def test_a_recursive_glob_does_not_follow_symlink_loops(tmp_path):
    """Before: glob.glob('**') followed both links to `..` 40 levels deep, 2**40 paths (a hang)."""
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "p.yaml").write_text((REPO / "profiles" / "qwen3-8b-ddtree.yaml").read_text())
    (tmp_path / "d" / "sub" / "up").symlink_to("..")
    (tmp_path / "d" / "sub" / "up2").symlink_to("../..")
    (tmp_path / "d" / ".hidden").mkdir()
    (tmp_path / "d" / ".hidden" / "h.yaml").write_text("x: 1\n")
    assert glob_paths(f"{tmp_path}/d/**/*.yaml") == [f"{tmp_path}/d/p.yaml"]
    run = ddtctl("validate", f"{tmp_path}/d/**/*.yaml", "--format", "json", timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    profiles = json.loads(run.stdout)["results"]["profiles"]
    assert [Path(p["source"]).name for p in profiles] == ["p.yaml"], profiles  # once, not once per link to it


# -- tune's files ----------------------------------------------------------------------------------------------
def test_tune_results_skip_deep_or_torn_lines_and_refuse_a_fifo(tmp_path):
    """Before: a 10k-deep line was a RecursionError and a record without `status` a TypeError (exit 70); a
    FIFO results file was appended to."""
    from ddtctl.tune.results import read_results

    good = {"key": "k1", "label": "p", "kind": "point", "flags": {}, "status": "ok", "runs": []}
    path = tmp_path / "r.jsonl"
    lines = ["[" * 10000 + "]" * 10000, "{torn", '{"key": "no-status"}', '{"key": "k2", "runs": 7}', json.dumps(good)]
    path.write_text("\n".join(lines) + "\n")
    assert list(read_results(path)) == ["k1"]
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is a FIFO"):
        read_results(fifo)


def test_a_deep_prompt_file_is_one_line(tmp_path):
    """Before: json.loads raised RecursionError (exit 70)."""
    from ddtctl.tune.bench import load_prompts

    path = tmp_path / "p.json"
    path.write_text("[" * 10000 + "]" * 10000)
    with pytest.raises(UsageError) as err:
        load_prompts(str(path))
    assert "nests more than 64 levels deep" in one_line(err.value)
