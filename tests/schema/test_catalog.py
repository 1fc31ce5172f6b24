"""The shipped flag catalogs hold real facts of each SGLang release, and the loader finds flags by any spelling."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddtctl.errors import ExitCode, UsageError
from ddtctl.schema import catalog as catalog_mod
from ddtctl.schema.catalog import Catalog, FlagSpec, available_versions, load_catalog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ddtctl" / "schema"))
import argparse_dump  # noqa: E402  (the stdlib-only dumper that runs inside the sglang interpreter)

CONTRACT_KEYS = {"name", "option_strings", "dest", "action", "type", "nargs", "default", "choices", "required", "help",
                 "deprecated", "alias_of"}


def test_ships_the_three_releases_oldest_first():
    versions = available_versions()
    assert [v for v in versions if v in ("0.5.12", "0.5.19", "0.5.23")] == ["0.5.12", "0.5.19", "0.5.23"]


@pytest.mark.parametrize("version", ["0.5.12", "0.5.19", "0.5.23"])
def test_catalog_files_follow_the_contract(version):
    path = catalog_mod.CATALOG_DIR / f"sglang-{version}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["sglang"] == version
    assert doc["generator"] == "tools/gen_catalog.py"
    names = [f["name"] for f in doc["flags"]]
    assert len(names) == len(set(names)), "primary names must be unique"
    options = [o for f in doc["flags"] for o in f["option_strings"]]
    assert len(options) == len(set(options)), "an option string belongs to one flag"
    for flag in doc["flags"]:
        assert CONTRACT_KEYS <= set(flag), flag["name"]
        assert flag["type"] in (None, "int", "float", "str", "bool", "json"), flag
        assert f"--{flag['name']}" in flag["option_strings"]
        if flag["alias_of"] is not None:
            assert flag["deprecated"] and flag["alias_of"] in names
    assert "--help" not in options
    assert path.stat().st_size < 400_000, "keep the shipped catalogs small"


def test_flag_counts_are_the_real_parsers():
    # 531 argparse actions in 0.5.23 (minus -h); the surface grew release by release.
    assert len(load_catalog("0.5.23")) == 531
    assert len(load_catalog("0.5.12")) < len(load_catalog("0.5.19")) < len(load_catalog("0.5.23"))


def test_mamba_scheduler_strategy_is_primary_in_0_5_12():
    spec = load_catalog("0.5.12").get("mamba-scheduler-strategy")
    assert spec is not None
    assert spec.action == "store" and not spec.deprecated and spec.alias_of is None
    assert spec.dest == "mamba_scheduler_strategy"
    assert spec.default == "auto"
    assert spec.choices == ("auto", "no_buffer", "extra_buffer")
    assert load_catalog("0.5.12").get("mamba-radix-cache-strategy") is None


def test_mamba_scheduler_strategy_is_a_deprecated_alias_in_0_5_19():
    cat = load_catalog("0.5.19")
    spec = cat.get("--mamba-scheduler-strategy")
    assert spec.action == "deprecated_alias"
    assert spec.deprecated
    assert spec.dest == "mamba_radix_cache_strategy"
    assert spec.alias_of == "mamba-radix-cache-strategy"
    assert spec.replacement == "--mamba-radix-cache-strategy"
    live = cat.canonical("mamba_scheduler_strategy")
    assert live.name == "mamba-radix-cache-strategy" and not live.deprecated
    assert "extra_buffer_lazy" in live.choices
    assert {s.name for s in cat.by_dest("mamba_radix_cache_strategy")} == {
        "mamba-radix-cache-strategy", "mamba-scheduler-strategy"}


def test_mamba_scheduler_strategy_is_gone_in_0_5_23():
    cat = load_catalog("0.5.23")
    assert cat.get("mamba-scheduler-strategy") is None
    assert cat.get("mamba_scheduler_strategy") is None
    assert "mamba-scheduler-strategy" not in cat
    assert cat.suggest("mamba-scheduler-strategy")[0] == "mamba-radix-cache-strategy"
    strategy = cat.get("mamba-radix-cache-strategy")
    assert strategy.choices == ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
    assert strategy.default == "auto"


def test_speculative_algorithm_has_no_choices():
    for version in ("0.5.12", "0.5.19", "0.5.23"):
        spec = load_catalog(version).get("speculative-algorithm")
        assert spec.choices is None, version
        assert spec.type == "str" and spec.default is None


def test_tp_size_is_int_default_1_by_every_spelling():
    cat = load_catalog("0.5.23")
    spec = cat.get("tp-size")
    assert (spec.type, spec.default, spec.dest) == ("int", 1, "tp_size")
    assert spec.option_strings == ("--tp-size", "--tensor-parallel-size")
    for key in ("tp_size", "--tp-size", "--tensor-parallel-size", "tensor_parallel_size", "--tp_size"):
        assert cat.get(key) is spec, key
    assert spec.option == "--tp-size"
    assert not Catalog.is_boolean_switch(spec)


def test_known_types_defaults_and_switches():
    cat = load_catalog("0.5.23")
    ratio = cat.get("mamba-full-memory-ratio")
    # 0.5.23 leaves it unset at parse time (resolution uses 0.9); 0.5.19 still had 0.9 as the argparse default
    assert (ratio.type, ratio.default) == ("float", None)
    assert load_catalog("0.5.19").get("mamba-full-memory-ratio").default == 0.9
    lm_head = cat.get("enable-dp-lm-head")
    assert lm_head.action == "store_true" and lm_head.type == "bool" and lm_head.default is False
    assert Catalog.is_boolean_switch(lm_head)
    model = cat.get("--model")
    assert model.name == "model-path" and model.required
    # type= json.loads -> "json"; json-model-override-args is a plain str that sglang parses later
    assert cat.get("default-chat-template-kwargs").type == "json"
    assert cat.get("json-model-override-args").type == "str"
    ctx = cat.get("context-length")  # human_readable_int: an int that also accepts "128K"
    assert (ctx.type, ctx.converter) == ("int", "common.human_readable_int")
    assert cat.get("chunked-prefill-size").converter is None
    # deprecated switches that still parse, with the replacement sglang names
    dp_attn = cat.get("enable-dp-attention")
    assert dp_attn.deprecated and dp_attn.replacement == "--attn-dp-size <dp-size>"
    assert dp_attn.alias_of is None  # not a rename: the value moves to another flag's argument


def test_suggest_and_unknown_keys():
    cat = load_catalog("0.5.23")
    assert cat.get("tp-sise") is None
    assert "tp-size" in cat.suggest("tp-sise")
    assert cat.suggest("speculative-algoritm")[0] == "speculative-algorithm"
    assert cat.suggest("zzzzzzzzzz") == []
    assert cat.get("") is None


def test_load_is_cached_and_unknown_release_is_a_usage_error():
    assert load_catalog("0.5.23") is load_catalog("0.5.23")
    assert load_catalog("v0.5.23") .version == "0.5.23"
    with pytest.raises(UsageError) as err:
        load_catalog("0.4.0")
    assert err.value.exit_code == ExitCode.USAGE
    assert "0.5.12, 0.5.19, 0.5.23" in err.value.one_line()


def test_loader_stays_light():
    # On the validate path: no sglang/torch, and not even pydantic/yaml/rich/typer are needed to read a catalog.
    code = ("import sys; from ddtctl.schema.catalog import load_catalog; c = load_catalog('0.5.23'); "
            "print(sorted(m for m in ('torch', 'sglang', 'pydantic', 'yaml', 'rich', 'typer', 'paramiko') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the dumper, on real argparse parsers ---------------------------------------------------------------------------

class DeprecatedAliasStoreAction(argparse.Action):
    """Same shape as sglang's (arg_groups/argparse_actions.py): a renamed valued flag keeping the new dest."""

    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


def test_dump_parser_maps_argparse_actions():
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1, help="TP (default %(default)s).")
    p.add_argument("--backend", choices={"b", "a"}, default="a")
    p.add_argument("--override", type=json.loads, default="{}")
    p.add_argument("--enable-x", action="store_true")
    p.add_argument("--no-y", dest="y", action="store_false")
    p.add_argument("--hidden", type=float, help=argparse.SUPPRESS)
    p.add_argument("--new-strategy", choices=["auto", "extra"], default="auto")
    p.add_argument("--old-strategy", dest="new_strategy", type=str, action=DeprecatedAliasStoreAction,
                   new_flag="--new-strategy", help="Deprecated alias for --new-strategy.")
    p.add_argument("--paths", nargs="+")
    flags = {f["name"]: f for f in argparse_dump.dump_parser(p)}
    assert "help" not in flags
    assert flags["tp-size"]["option_strings"] == ["--tp-size", "--tensor-parallel-size"]
    assert (flags["tp-size"]["type"], flags["tp-size"]["default"]) == ("int", 1)
    assert flags["tp-size"]["help"] == "TP (default 1)."
    assert flags["backend"]["choices"] == ["a", "b"] and flags["backend"]["type"] == "str"
    assert flags["override"]["type"] == "json" and flags["override"]["converter"] == "json.loads"
    assert (flags["enable-x"]["action"], flags["enable-x"]["type"], flags["enable-x"]["nargs"]) == ("store_true", "bool", 0)
    assert (flags["no-y"]["action"], flags["no-y"]["dest"], flags["no-y"]["default"]) == ("store_false", "y", True)
    assert flags["hidden"]["help"] == ""
    assert flags["paths"]["nargs"] == "+"
    old = flags["old-strategy"]
    assert (old["action"], old["deprecated"], old["alias_of"]) == ("deprecated_alias", True, "new-strategy")
    assert not flags["new-strategy"]["deprecated"]


def test_to_json_round_trips_one_flag_per_line():
    p = argparse.ArgumentParser()
    p.add_argument("--a", type=int, default=3)
    p.add_argument("--b", action="store_true")
    doc = {"sglang": "x", "generator": argparse_dump.GENERATOR, "flags": argparse_dump.dump_parser(p)}
    text = argparse_dump.to_json(doc)
    assert json.loads(text) == doc
    assert sum(1 for line in text.splitlines() if line.startswith('{"name"')) == 2


# --- the committed catalog equals what the generator makes from the real sglang 0.5.23 ------------------------------

def _managed_python(version: str) -> Path | None:
    try:
        from ddtctl import envs  # the dry-run helper's managed env, once it lands
    except ImportError:
        envs = None
    if envs is not None:
        try:
            env = envs.managed_env(version)
            if env.ready and Path(env.python).exists():
                return Path(env.python)
        except Exception:  # noqa: BLE001 - fall back to the documented location
            pass
    guess = Path(os.path.expanduser(f"~/.cache/ddtctl/sglang-{version}/bin/python"))
    return guess if guess.exists() else None


@pytest.mark.sglang
def test_committed_0_5_23_catalog_equals_generator_output():
    python = _managed_python("0.5.23")
    if python is None:
        pytest.skip("managed sglang 0.5.23 env not built (make test builds it)")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_catalog.py"), "--python", str(python),
                           "--check", str(catalog_mod.CATALOG_DIR / "sglang-0.5.23.json")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
