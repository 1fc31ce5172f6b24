"""`ddtctl tune`'s search space with environment variables (`env.NAME` keys) next to flags: parsed, applied to
the profile's `env:`, labelled, and keyed for resuming."""

from __future__ import annotations

import pytest

from ddtctl.errors import UsageError
from ddtctl.tune import (
    TuneOptions,
    baseline_point,
    load_space,
    normalize_space,
    point_env,
    points_of,
    variant_data,
    variant_profile,
)
from ddtctl.tune.results import PointResult
from ddtctl.tune.sweep import _point_key
from ddtctl.tune.write import write_point

CONV = "env.DDTREE_CONV_TREE"
ARGV = ["python", "-m", "sglang.launch_server", "--model-path", "/m/target",
        "--speculative-ddtree-budget", "64"]


def test_env_keys_are_kept_their_values_strings_and_flags_canonical():
    space = normalize_space({"speculative_ddtree_budget": 64, CONV: ["sglang", "compact", None],
                             "env.SOME_INT": [1, 2.5, True]})
    assert space == {"speculative-ddtree-budget": [64], CONV: ["sglang", "compact", None],
                     "env.SOME_INT": ["1", "2.5", "true"]}


@pytest.mark.parametrize("key, needle", [
    ("env.1BAD", "'1BAD' is not an environment variable name"),
    ("env.DDTREE-CONV", "'DDTREE-CONV' is not an environment variable name"),
    ("env.", "'' is not an environment variable name"),
    ("env.HF_TOKEN", "a secret is not something to tune"),
])
def test_a_bad_env_key_is_a_one_line_usage_error_saying_where_and_how(tmp_path, key, needle):
    path = tmp_path / "space.yaml"
    path.write_text(f"{key}: [a]\n")
    with pytest.raises(UsageError) as err:
        load_space(str(path))
    line = err.value.one_line()
    assert needle in line and str(path) in line and "\n" not in line
    assert err.value.fix


def test_variant_sets_and_removes_env_and_flags_where_they_belong():
    doc = {"name": "p", "server": {"speculative-ddtree-budget": 32},
           "env": {"DDTREE_CONV_TREE": "sglang", "HF_TOKEN": "hf_secret123", "DDTREE_GDN_TREE": "compact"}}
    out = variant_data(doc, {"speculative_ddtree_budget": 64, CONV: "compact", "env.DDTREE_GDN_TREE": None,
                             "env.NEW_ONE": 7}, "budget=64 DDTREE_CONV_TREE=compact")
    assert out["server"] == {"speculative-ddtree-budget": 64}
    assert out["env"] == {"DDTREE_CONV_TREE": "compact", "HF_TOKEN": "hf_secret123", "NEW_ONE": "7"}
    assert "env.DDTREE_CONV_TREE" not in out["server"]
    assert out["name"] == "p.tune-budget-64-DDTREE_CONV_TREE-compact"
    assert doc["env"]["DDTREE_CONV_TREE"] == "sglang"  # the document itself is left alone
    # a profile without env: a removal adds nothing
    assert "env" not in variant_data({"name": "p", "server": {}}, {CONV: None}, "x")


def test_a_points_profile_is_built_in_memory_named_after_the_point(tmp_path):
    """No file is written: the variant is a profile object (document + loaded profile) whose source names the
    point in the profile's directory; one the schema refuses carries the refusal load_profile would raise."""
    doc = {"name": "p", "sglang": "0.5.23", "model": {"path": "/m/target"},
           "server": {"speculative-ddtree-budget": 32}}
    profile = str(tmp_path / "p.yaml")
    v = variant_profile(doc, {"speculative-ddtree-budget": 64}, "budget=64", profile)
    assert v.loaded is not None and v.error is None and v.document.source == f"{profile}#budget=64"
    assert v.loaded.profile.server["speculative-ddtree-budget"] == 64 and v.loaded.profile.name == "p.tune-budget-64"
    assert v.loaded.text == v.document.text and "speculative-ddtree-budget: 64" in v.document.text
    bad = variant_profile({**doc, "launch": {"nonsense": 1}}, {}, "x", profile)
    assert bad.loaded is None and bad.error is not None and "launch.nonsense: unknown key" in bad.error.message
    assert list(tmp_path.iterdir()) == []


def test_points_combine_env_with_flags_and_have_short_labels():
    pts = points_of(normalize_space({"speculative-ddtree-budget": [32, 64], CONV: ["sglang", "compact"]}))
    assert [p.label for p in pts] == [
        "budget=32 DDTREE_CONV_TREE=sglang", "budget=32 DDTREE_CONV_TREE=compact",
        "budget=64 DDTREE_CONV_TREE=sglang", "budget=64 DDTREE_CONV_TREE=compact",
    ]
    assert pts[3].flags == {"speculative-ddtree-budget": 64, CONV: "compact"}
    assert point_env(pts[3].flags) == {"DDTREE_CONV_TREE": "compact"}
    assert points_of({CONV: [None]})[0].label == "DDTREE_CONV_TREE=-"


def test_the_baseline_does_not_take_the_spaces_env():
    base = baseline_point("dflash", "DDTREE", {"speculative-ddtree-budget": 32})
    assert base is not None and point_env(base.flags) == {}
    doc = {"name": "p", "server": {"speculative-ddtree-budget": 32}, "env": {"DDTREE_CONV_TREE": "sglang"}}
    assert variant_data(doc, base.flags, base.label)["env"] == {"DDTREE_CONV_TREE": "sglang"}


def test_flag_only_points_keep_the_keys_of_existing_results_files():
    # computed by the code before env keys existed (results files on disk hold these)
    assert _point_key("gpu1", ARGV, TuneOptions(), None) == "d8621dbf6a460d56"
    assert _point_key("gpu1", ARGV, TuneOptions(), None, {}) == "d8621dbf6a460d56"
    opts = TuneOptions(concurrencies=[8, 1], num_prompts=16, seed=3)
    flag_only = point_env({"speculative-ddtree-budget": 64})
    assert _point_key("gpu1", ARGV, opts, None, flag_only) == "453a3faf45b7401b"


def test_points_differing_only_in_env_have_different_keys():
    keys = {_point_key("gpu1", ARGV, TuneOptions(), None, env) for env in (
        {}, {"DDTREE_CONV_TREE": "sglang"}, {"DDTREE_CONV_TREE": "compact"}, {"DDTREE_CONV_TREE": None})}
    assert len(keys) == 4
    assert _point_key("gpu1", ARGV, TuneOptions(), None, {"DDTREE_CONV_TREE": "compact"}) == _point_key(
        "gpu1", ARGV, TuneOptions(), None, {"DDTREE_CONV_TREE": "compact"})


PROFILE = """\
name: p
model: {path: /m/target, architecture: Qwen3ForCausalLM}
server:
  speculative-ddtree-budget: 32  # before
env:
  DDTREE_CONV_TREE: sglang
"""


def _winner(flags):
    return PointResult("k", "w", "point", flags, "ok")


def test_write_refuses_a_winner_that_changes_env_and_writes_one_that_keeps_it(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    with pytest.raises(UsageError) as err:
        write_point(str(prof), _winner({"speculative-ddtree-budget": 64, CONV: "compact"}))
    assert "changes `env:`" in err.value.one_line() and "DDTREE_CONV_TREE: compact" in err.value.one_line()
    assert prof.read_text() == PROFILE  # nothing written
    res = write_point(str(prof), _winner({"speculative-ddtree-budget": 64, CONV: "sglang"}))
    assert res.changed and res.edits == {"speculative-ddtree-budget": 64}
    assert prof.read_text() == PROFILE.replace("32  # before", "64  # before")
