"""SGLang's override convention, enforced: an error-severity rule refuses a launch only where SGLang 0.5.23 refuses
it too (a raise site of its resolver that ddtctl/rules/coverage.yaml maps to the rule, or one on its start path that
ddtctl/rules/launch/coverage.yaml maps) or where the launch fails
later for a documented reason (the rule's `evidence`: the runtime failure and where it is shown). Everything else
SGLang accepts (possibly converting the value, which is reported as info) is at most a warning."""

from __future__ import annotations

import pytest

from ddtctl.errors import EnvironmentMissing
from ddtctl.rules import coverage as cov
from ddtctl.rules import all_rules
from ddtctl.rules.engine import ERROR
from ddtctl.rules.launch import sites as launch


@pytest.fixture(scope="module")
def mapped_rules() -> set[str]:
    try:
        rows = cov.classify(cov.sites(), cov.load_mapping())
    except EnvironmentMissing as err:
        pytest.fail(f"{err.one_line()} — run `make sglang-env`")
    return {m["rule"] for _, m in rows if m and m.get("rule")}


@pytest.fixture(scope="module")
def launch_mapped_rules() -> set[str]:
    """Rules mapped by the launch-time inventory: raise sites on SGLang's start path, after the resolver."""
    return {m["rule"] for _, m in launch.classified() if m and m.get("rule")}


def test_every_error_rule_has_a_raise_site_or_runtime_evidence(mapped_rules, launch_mapped_rules):
    backed = mapped_rules | launch_mapped_rules
    unbacked = [
        f"{r.id} ({r.title})"
        for r in all_rules()
        if r.severity == ERROR and r.id not in backed and len(r.evidence.strip()) < 20
    ]
    assert not unbacked, (
        "error rules with no SGLang raise site mapped to them (coverage.yaml) and no `evidence` of a runtime "
        "failure: downgrade them to warning (SGLang accepts the launch) or document the failure:\n  "
        + "\n  ".join(unbacked)
    )


def test_evidence_is_not_claimed_where_a_raise_site_exists(mapped_rules):
    """`evidence` documents the runtime failure of a check SGLang does not make at launch; a rule SGLang's
    resolver enforces (a mapped raise site) is backed by that site. Payload rules are the exception: the DDTREE
    payload raises them inside SGLang's resolver, outside the pinned wheel's sites."""
    both = [r.id for r in all_rules() if r.evidence and r.id in mapped_rules and not r.id.startswith("DDT1")]
    assert not both, f"rules with both a raise site and runtime evidence (drop one): {both}"


def test_known_false_errors_are_gone():
    """Launches SGLang 0.5.23 accepts that ddtctl once refused: UNO with --speculative-num-steps 0 (SGLang runs
    its linear mode with 1 step: an override, reported as info)."""
    from pathlib import Path

    from ddtctl.validate import validate_argv

    model = str(Path(__file__).resolve().parents[1] / "fidelity" / "models" / "qwen3-8b")
    uno = ["--model-path", model, "--speculative-algorithm", "UNO", "--uno-lora-path", "/x",
           "--speculative-num-draft-tokens", "4", "--attention-backend", "fa3", "--speculative-num-steps", "0"]
    findings = validate_argv(uno, gpu="H200").findings
    assert not [f for f in findings if f.severity == ERROR], findings
    assert any(f.rule == "DDT956" and f.severity == "info" for f in findings)
