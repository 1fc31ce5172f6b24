"""No state leaks between resolves in one warm worker: the whole fidelity corpus gives identical results forwards and
backwards through one worker each, and a sample matches fresh processes (one interpreter per case)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

from ddtctl.bridge.client import ResolverClient  # noqa: E402

pytestmark = pytest.mark.sglang

CASES = corpus.load_cases()
# Diverse sample for the fresh-process comparison: accepted/rejected, every GPU generation, hybrid, MLA.
FRESH_SAMPLE = ["next-linear-flashinfer-overlap-off", "q3-dflash-b200", "q36-vl-dflash-track-8", "dsv3-nextn-h200",
                "moe-dflash-sm120-tp2", "dd-q36-sm120-ok"]


def _normal(result) -> dict:
    """Everything a resolve reports, minus the one field SGLang draws at random (random_seed) and timings."""
    resolved = {k: v for k, v in result.resolved.items() if k != "random_seed"}
    overrides = [o for o in result.overrides if o["field"] != "random_seed"]
    return {"accepted": result.accepted, "error": result.error, "error_at": result.error_at, "resolved": resolved,
            "overrides": overrides, "warnings": result.warnings}


@pytest.fixture(scope="module")
def forward(live):
    return live


def test_sample_ids_exist():
    assert set(FRESH_SAMPLE) <= {c.id for c in CASES}


def test_reverse_order_gives_identical_results(managed_python, forward):
    overlay = next((c.overlay for c in CASES if c.overlay), None)
    with ResolverClient(managed_python) as client, ResolverClient(managed_python,
                                                          extra_sys_path=corpus.overlay_path(overlay)) as other:
        backward = corpus.run_sglang(list(reversed(CASES)), client=client, overlay_client=other)
    diffs = [c.id for c in CASES if _normal(forward[c.id]) != _normal(backward[c.id])]
    assert diffs == []


def test_warm_worker_matches_fresh_processes(managed_python, forward):
    by_id = {c.id: c for c in CASES}
    for case_id in FRESH_SAMPLE:
        case = by_id[case_id]
        client = corpus.new_client(case, managed_python)
        try:
            fresh = corpus.run_sglang([case], client=None if case.overlay else client,
                                      overlay_client=client if case.overlay else None)[case_id]
        finally:
            client.close()
        assert _normal(fresh) == _normal(forward[case_id]), case_id
