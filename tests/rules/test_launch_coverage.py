"""The launch-time inventory (ddtctl/rules/launch/sites.py + launch/coverage.yaml): every raise / assert on SGLang
0.5.23's start path after the resolver (model runner, attention backends, memory pools, draft workers) is mapped to a
launch-time rule or exempted with a category and reason. A new SGLang release with a new launch-time check fails here
until the site is mapped; the rules' failing / passing cases are in launch_cases.py (run by test_rules.py)."""

from __future__ import annotations

import fnmatch
import re

import pytest
from launch_cases import DENSE, EAGLE3_ON_MLA, LAUNCH_CASES, LAUNCH_GPU_PAIRS, MLA

from ddtctl.errors import EnvironmentMissing
from ddtctl.rules import all_rules
from ddtctl.rules.engine import RULES
from ddtctl.rules.launch import sites as launch
from ddtctl.validate import validate_argv

CATEGORIES = ("model-specific", "platform", "weights", "host files", "machine", "resolved away", "internal",
              "not modelled")


@pytest.fixture(scope="module")
def rows():
    try:
        return launch.classified()
    except EnvironmentMissing as err:
        pytest.fail(f"{err.one_line()} — run `make sglang-env`")


def _launch_rules() -> list[str]:
    all_rules()
    return sorted(r for r in RULES if r.startswith("DDT7") and r != "DDT701")


def test_every_launch_site_is_mapped(rows):
    assert len(rows) > 200  # the walk found the start path at all
    areas = {"model_executor/", "layers/attention/", "mem_cache/", "speculative/", "managers/tp_worker.py"}
    assert all(any(a in s.file for s, _ in rows) for a in areas)
    unmapped = [f"{s.file}:{s.line} {s.function}: {s.message}" for s, m in rows if m is None]
    assert not unmapped, f"{len(unmapped)} unmapped launch-time sites:\n  " + "\n  ".join(unmapped[:40])


def test_mapping_names_real_rules_or_a_category_with_its_reason():
    ids = {r.id for r in all_rules()}
    for entry in launch.load_mapping():
        if entry.get("rule"):
            assert entry["rule"] in ids, entry
        else:
            category, _, reason = str(entry.get("category") or "").partition(": ")
            assert category in CATEGORIES and len(reason) >= 20, entry


def test_every_mapping_entry_matches_a_site(rows):
    """An entry that matches nothing is stale (the wheel changed, or the glob is wrong)."""
    keys = [s.key for s, _ in rows]
    stale = [e["match"] for e in launch.load_mapping() if not any(fnmatch.fnmatchcase(k, e["match"]) for k in keys)]
    assert not stale, stale


def test_every_launch_rule_mirrors_a_site_and_cites_it(rows):
    """At least 30 launch-time rules; each maps a site of the inventory and names the file:line it mirrors."""
    rules = _launch_rules()
    assert len(rules) >= 30, rules
    mapped = {m["rule"] for _, m in rows if m and m.get("rule")}
    assert set(rules) <= mapped, sorted(set(rules) - mapped)
    for rule_id in rules:
        rule = RULES[rule_id]
        assert re.search(r"sglang 0\.5\.23 srt/\S+\.py:\d+", rule.reference), (rule_id, rule.reference)
        assert rule.doc and not rule.sglang_enforces, rule_id  # SGLang's resolver lets each through
        assert rule_id in LAUNCH_CASES, rule_id


@pytest.mark.parametrize("case", LAUNCH_GPU_PAIRS, ids=[c[0] for c in LAUNCH_GPU_PAIRS])
def test_gpu_generation_turns_the_launch_verdict(case):
    rule_id, argv, bad_gpu, good_gpu = case
    assert rule_id in {f.rule for f in validate_argv(argv, gpu=bad_gpu).findings}
    assert rule_id not in {f.rule for f in validate_argv(argv, gpu=good_gpu).findings}


def test_the_draft_runner_builds_the_targets_backend():
    """An EAGLE3 draft (a Llama layer) of a DeepSeek target on trtllm_mla: the target runner is MLA, the draft runner
    is not and builds the same backend (DDT710, about the draft)."""
    findings = [f for f in validate_argv(EAGLE3_ON_MLA + ["--attention-backend", "trtllm_mla"], gpu="B200").findings
                if f.rule == "DDT710"]
    assert findings and "draft runner" in findings[0].message
    own = ["--speculative-draft-attention-backend", "flashinfer"]
    assert "DDT710" not in {f.rule for f in validate_argv(EAGLE3_ON_MLA + ["--attention-backend", "trtllm_mla"] + own,
                                                          gpu="B200").findings}
    assert "DDT710" not in {f.rule for f in validate_argv(MLA + ["--attention-backend", "trtllm_mla"], gpu="B200")
                            .findings}
    assert "DDT710" in {f.rule for f in validate_argv(DENSE + ["--attention-backend", "trtllm_mla"], gpu="B200")
                        .findings}


def test_the_inventory_table_counts_every_site(rows):
    """What `ddtctl rules --coverage` prints as its second inventory (after the resolver's and the overrides')."""
    text = launch.table(rows)
    assert "launch-time sites:" in text and "unmapped launch-time sites: 0" in text
    assert f"| {len(rows)} |" in text
    assert "DDT750 1" in text  # the rule of the STANDALONE vocab check


def _severity(argv, gpu, rule_id):
    return next((f.severity for f in validate_argv(argv, gpu=gpu).findings if f.rule == rule_id), None)


def test_severity_follows_the_evidence():
    """An error where the cited raise is certain; a warning (or nothing) where the launch may still start."""
    bad, _, gpu = LAUNCH_CASES["DDT730"]
    assert _severity(bad, gpu, "DDT730") == "error"
    # weights served in another dtype than stored may shrink on load: the same budget is only a warning
    assert _severity(bad + ["--dtype", "float16"], gpu, "DDT730") == "warning"
    assert _severity(bad + ["--quantization", "fp8"], gpu, "DDT730") is None  # sizes change on load: not judged
    # multi-layer EAGLE with topk 1: the resolver pins draft tokens = steps + 1 itself (DDT307)
    chain = MLA + ["--speculative-algorithm", "EAGLE", "--enable-multi-layer-eagle", "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6"]
    assert _severity(chain, "H200", "DDT752") is None
    assert _severity(LAUNCH_CASES["DDT751"][0], "H200", "DDT751") == "warning"  # the token map is a host file
