"""DDT117, the DDTREE budget schedule (ddtctl/rules/ddtree/core.py): its syntax, the bad schedules (non-monotone
batch sizes, a tree wider than the budget, the compact GDN verify's 127 nodes on a hybrid target, or the drafter at
the topk cap can fill), the budget it resolves (its widest tree), and DDT114 sizing the scratch for that width."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddtctl.rules.ddtree import core
from ddtctl.validate import validate_argv

MODELS = Path(__file__).resolve().parents[1] / "fidelity" / "models"
HDDTREE = ["--model-path", str(MODELS / "qwen3.6-27b"), "--speculative-algorithm", "DDTREE",
           "--speculative-draft-model-path", str(MODELS / "qwen3.6-27b-dflash-b16"),
           "--mamba-radix-cache-strategy", "extra_buffer", "--mamba-full-memory-ratio", "0.5"]
BASE = {"speculative_algorithm": "DDTREE", "speculative_draft_model_path": "d", "attention_backend": "triton",
        "speculative_dflash_block_size": 16}


def _ddt117(model=None, **flags):
    found = [v for v in core.ddtree_violations({**BASE, **flags}, model or {}) if v.rule_id == "DDT117"]
    return found[0].message if found else None


def test_the_schedule_parses_and_picks_a_budget_per_batch_size():
    s = core.parse_budget_schedule("2:127, 4:64,8:16,chain")
    assert s == ((2, 127), (4, 64), (8, 16), (None, 0))
    assert [core.schedule_budget(s, bs) for bs in (1, 2, 3, 8, 9, 512)] == [127, 127, 64, 16, 0, 0]
    assert core.parse_budget_schedule("64") == ((None, 64),)


@pytest.mark.parametrize("text, why", [
    ("4:64,2:127,0", "batch sizes must increase"),
    ("2:127,4:64", "the last entry, and only the last, is a bare BUDGET"),
    ("2:127,64,0", "the last entry, and only the last, is a bare BUDGET"),
    ("2:lots,0", "is not MAX_BS:BUDGET or BUDGET"),
    ("0:16,0", "batch sizes start at 1"),
    ("2:127,,0", "empty entry"),
])
def test_a_malformed_schedule_is_ddt117_with_the_reason(text, why):
    message = _ddt117(speculative_ddtree_budget_schedule=text)
    assert message is not None and why in message and text in message


def test_budgets_the_server_cannot_serve_are_ddt117():
    assert "wider than --speculative-ddtree-budget 64" in _ddt117(
        speculative_ddtree_budget=64, speculative_ddtree_budget_schedule="2:127,0")
    assert "compact GDN tree verify" in _ddt117({"is_hybrid": True}, speculative_ddtree_budget_schedule="1:200,0")
    assert _ddt117({"is_hybrid": False}, speculative_ddtree_budget_schedule="1:200,0") is None  # dense: any width
    assert "cannot be filled" in _ddt117(speculative_ddtree_topk_cap=1, speculative_ddtree_budget_schedule="2:16,0")
    assert _ddt117(speculative_ddtree_topk_cap=1, speculative_ddtree_budget_schedule="2:15,0") is None
    assert _ddt117(speculative_ddtree_budget_schedule="2:127,4:64,8:16,0") is None


def test_the_resolved_budget_is_the_schedules_widest_tree():
    r = core.resolve_ddtree({**BASE, "speculative_ddtree_budget_schedule": "2:96,8:16,0"}, {})
    assert (r["budget"], r["verify_width"], r["budget_schedule"]) == (96, 97, ((2, 96), (8, 16), (None, 0)))
    given = core.resolve_ddtree({**BASE, "speculative_ddtree_budget": 127,
                                 "speculative_ddtree_budget_schedule": "2:96,0"}, {})
    assert given["budget"] == 127  # a given budget stays: the schedule's trees fit in it
    chain = core.resolve_ddtree({**BASE, "speculative_ddtree_budget_schedule": "chain"}, {})
    assert chain["budget"] == 15  # the chain only: block size - 1, as without a schedule


def test_ddt114_sizes_the_scratch_for_the_widest_width():
    """The 27B at tp 1, GPU unknown: DDT114 reports the scratch for the schedule's widest tree (128 verify
    nodes), not the default budget's 16."""
    def width_of(extra):
        found = [f for f in validate_argv(HDDTREE + extra).findings if f.rule == "DDT114"]
        assert found, extra
        return found[0].message.split("verify width ")[1].split(",")[0]

    assert width_of(["--speculative-ddtree-budget-schedule", "2:127,4:64,8:16,0"]) == "128"
    assert width_of([]) == "16"
    assert width_of(["--speculative-ddtree-budget-schedule", "2:64,0"]) == "65"
