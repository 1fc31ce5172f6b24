"""Fidelity: ddtctl's static verdicts against SGLang 0.5.23's own resolver, over the corpus in cases.yaml.

Every case runs through the real pinned SGLang (one warm resolver for the whole corpus) and through
ddtctl.validate.validate_argv. Asserted: the recorded SGLang verdict (and error type, hook, full message) still
holds; static verdict == SGLang verdict except the listed stricter-by-design cases; where SGLang rejects, a static
error points at the same cause (expect_rules). Known, not yet fixed disagreements are xfail(strict).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

CASES = corpus.load_cases()
KNOWN = corpus.load_known_disagreements()


def test_corpus_shape():
    """At least 80 cases, roughly half rejected, every GPU generation and model family present."""
    assert len(CASES) >= 80
    verdicts = Counter(c.expected_sglang for c in CASES)
    assert set(verdicts) == {"accepted", "rejected"}
    assert 0.3 <= verdicts["rejected"] / len(CASES) <= 0.7, verdicts
    sms = {corpus._sm(c.gpu) for c in CASES}
    assert {"sm90", "sm100", "sm120"} <= sms
    models = {p.name for p in corpus.MODELS.iterdir() if (p / "config.json").is_file()}
    used = {m for m in models if any(f"{{models}}/{m} " in c.argv_text + " " for c in CASES)}
    assert used == models, f"model dirs without a case: {sorted(models - used)}"
    for c in CASES:
        if c.expected_sglang == "rejected":
            assert c.sglang_error_type and c.sglang_hook and c.sglang_message, c.id
        if c.stricter_by_design:
            assert c.expected_sglang == "accepted" and c.expect_rules, c.id
    assert set(KNOWN) <= {c.id for c in CASES}, "known_disagreements.yaml names unknown cases"
    from ddtctl.rules import all_rules

    known_rules = {r.id for r in all_rules()}
    for c in CASES:  # rule ids exist (DDT0xx are the flag-level findings of ddtctl/flags.py)
        assert all(r in known_rules or re.fullmatch(r"DDT0\d\d", r) for r in c.expect_rules), (c.id, c.expect_rules)


@pytest.fixture(scope="module")
def rows(live):
    static = corpus.run_static(CASES)
    return {r.case.id: r for r in corpus.compare(CASES, live, static)}


@pytest.mark.sglang
def test_recorded_sglang_verdicts_hold(live):
    """cases.yaml records what SGLang really says; a changed verdict or message means the corpus is stale."""
    assert corpus.recorded_mismatches(CASES, live) == []


@pytest.mark.sglang
@pytest.mark.parametrize(
    "case_id",
    [
        pytest.param(c.id, marks=pytest.mark.xfail(reason=KNOWN[c.id], strict=True)) if c.id in KNOWN else c.id
        for c in CASES
    ],
)
def test_static_agrees_with_sglang(rows, case_id):
    row = rows[case_id]
    assert row.outcome in ("agree", "stricter-by-design"), (
        f"{case_id}: {row.problem}\n  SGLang: {'accepted' if row.sglang_accepted else row.sglang_error}\n"
        f"  static: {row.static_errors or 'valid'}"
    )
    if not row.sglang_accepted and row.case.expect_rules:
        assert {r for r, _ in row.static_errors} & set(row.case.expect_rules)


@pytest.mark.sglang
def test_agreement_table_counts(rows):
    """The table `make fidelity` prints is computed from the same rows."""
    text = corpus.table(list(rows.values()))
    n = len(rows)
    assert f"| {n} |" in text
    disagree = sum(r.outcome == "disagree" for r in rows.values())
    assert disagree == len([cid for cid in KNOWN if rows[cid].outcome == "disagree"])
