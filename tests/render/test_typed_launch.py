"""The typed launch (ddtctl.server_argv.TypedLaunch): the profile's values typed once, by the render's own
parse-back, and carried through deploy; its argv is for the wire, and anything set on it later (deploy's
multi-node flags, preflight's local model directories) reads as SGLang's parser would read the new argv."""

from __future__ import annotations

from ddtctl.deploy.spec import spec_from_profile
from ddtctl.profile import load_profile
from ddtctl.remote.inventory import Host
from ddtctl.server_argv import read_launch, render_argv, typed_launch

FLAGSHIP = "profiles/qwen36-27b-ddtree.yaml"


def _same_reading(launch, sglang="0.5.23"):
    """The launch's typed values and occurrences are what the one reader makes of its argv."""
    read = read_launch(launch.argv(), sglang)
    assert read.values == launch.values and read.parsed.namespace == launch.parsed.namespace
    assert read.flags() == launch.flags()
    key = [(o.option, o.spec.dest, o.raw, o.error) for o in launch.parsed.occurrences]
    assert key == [(o.option, o.spec.dest, o.raw, o.error) for o in read.parsed.occurrences]


def test_the_launch_holds_the_profiles_values_typed_and_renders_them_at_the_wire():
    prof = load_profile(FLAGSHIP).profile
    launch = typed_launch(prof)
    assert launch.values["tp_size"] == 8 and launch.values["speculative_ddtree_budget"] == 64
    assert launch.values["speculative_ddtree_shadow_linear"] is True and launch.get("--tp-size") == 8
    assert launch.get("pp_size") == 1 and not launch.sets("pp_size")  # SGLang's default, not set
    assert launch.argv() == render_argv(prof) and launch.env == dict(prof.env) and launch.sglang == prof.sglang
    _same_reading(launch)


def test_values_set_later_read_as_the_new_argv_reads():
    launch = typed_launch(load_profile(FLAGSHIP).profile)
    node = launch.with_values({"nnodes": 2, "node_rank": 1, "dist_init_addr": "10.0.0.1:5000"})
    assert node.argv()[-6:] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000"]
    assert node.values["nnodes"] == 2 and "nnodes" not in launch.values  # the spec's launch is unchanged
    _same_reading(node)
    local = node.with_values({"model_path": "/local/cfg", "speculative_draft_model_path": "-odd"})
    assert local.argv()[:2] == ["--model-path", "/local/cfg"]  # in place, not given twice
    assert "--speculative-draft-model-path=-odd" in local.argv()  # written as render writes a `-` value
    _same_reading(local)


def test_deploy_spec_and_targets_carry_the_launch():
    spec = spec_from_profile(FLAGSHIP, host="a", payload_dir=None, algo="DFLASH")
    assert spec.launch.values["speculative_algorithm"] == "DFLASH" and spec.launch.argv() == render_argv(spec.launch.profile)
    hosts = [Host("a", "10.0.0.1", "u", python="/py"), Host("b", "10.0.0.2", "u", python="/py")]
    spec.host_names = ["a", "b"]
    t0, t1 = spec.targets(hosts)
    assert t1.launch.values["node_rank"] == 1 and t1.argv == t1.launch.argv()
    assert t1.launch_argv[-len(t1.argv) :] == t1.argv and t0.port == 30000
