"""DDTREE fidelity: ddtctl's static verdicts against SGLang 0.5.23 *with the DDTREE payload*, over
tests/fidelity/ddtree_cases.yaml, using the fidelity corpus harness (tests/fidelity/corpus.py) unchanged.

Asserted, as for the main corpus: the recorded SGLang-with-payload verdict (error type, hook, message) still holds;
static == SGLang on every case except listed stricter-by-design ones; where SGLang rejects, a static error names the
same rule (expect_rules). Re-record after changing cases:

    .venv/bin/python tests/overlay/test_ddtree_fidelity.py            # show what would change
    .venv/bin/python tests/overlay/test_ddtree_fidelity.py --write    # rewrite ddtree_cases.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FIDELITY = Path(__file__).resolve().parents[1] / "fidelity"
sys.path.insert(0, str(FIDELITY))

import corpus  # noqa: E402

CASES_FILE = FIDELITY / "ddtree_cases.yaml"
CASES = corpus.load_cases(CASES_FILE)


def _view(python=None) -> str:
    from ddtctl.overlay.build import build

    return str(build(None, python=python, reuse=True).view_dir)


def test_ddtree_corpus_shape():
    ids = [c.id for c in CASES]
    assert len(ids) >= 30 and all(i.startswith("dd-") for i in ids)
    assert not set(ids) & {c.id for c in corpus.load_cases()}, "ids must not collide with cases.yaml"
    rules = {r for c in CASES for r in c.expect_rules}
    errors = {f"DDT1{n:02d}" for n in range(1, 13)} - {"DDT110"}  # DDT110 (overlap off) retired: DDTREE overlaps
    assert errors <= rules, "every DDTREE error rule has a tripping case"
    findings = {r for c in CASES for r in c.expect_findings if c.expected_sglang == "accepted"}
    assert {"DDT113", "DDT115"} <= findings, "every DDTREE non-error rule has an accepted case that shows it"
    assert sum(c.expected_sglang == "accepted" for c in CASES) >= 10
    for c in CASES:
        assert "DDTREE" in c.argv_text.upper()
        if c.expected_sglang == "rejected":
            assert c.sglang_error_type and c.sglang_hook and c.sglang_message, c.id


@pytest.fixture(scope="module")
def live(managed_python):
    return corpus.run_sglang(CASES, extra_sys_path=[_view(managed_python)])


@pytest.fixture(scope="module")
def rows(live):
    return {r.case.id: r for r in corpus.compare(CASES, live, corpus.run_static(CASES))}


@pytest.mark.sglang
def test_recorded_verdicts_hold(live):
    assert corpus.recorded_mismatches(CASES, live) == []


@pytest.mark.sglang
@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_static_agrees_with_sglang_with_payload(rows, case_id):
    row = rows[case_id]
    assert row.outcome in ("agree", "stricter-by-design"), (
        f"{case_id}: {row.problem}\n  SGLang+payload: {'accepted' if row.sglang_accepted else row.sglang_error}\n"
        f"  static: {row.static_errors or 'valid'}"
    )
    if not row.sglang_accepted and row.case.expect_rules:
        assert {r for r, _ in row.static_errors} & set(row.case.expect_rules)
        # and SGLang-with-payload rejected for the same rule: one source of truth
        if any(r.startswith("DDT1") for r in row.case.expect_rules):
            assert any(f"[{r}]" in row.sglang_error["message"] for r in row.case.expect_rules), row.sglang_error


@pytest.mark.sglang
@pytest.mark.parametrize("case_id", [c.id for c in CASES if c.expect_findings])
def test_sglang_with_payload_logs_the_same_findings(live, case_id):
    """A DDTREE finding that is not an error is logged by SGLang-with-payload with its rule id (one source of truth),
    and what it overrides is declared in SGLang's resolution (the dry-run lists it with the hook responsible)."""
    case = next(c for c in CASES if c.id == case_id)
    r = live[case_id]
    assert r.accepted, r.error
    for rule_id in case.expect_findings:
        if rule_id.startswith("DDT1"):
            assert any(f"[{rule_id}]" in w for w in r.warnings), r.warnings
    changed = {o["field"]: o for o in r.overrides}
    for name, value in case.sglang_overrides.items():
        assert changed[name]["resolved"] == value
        assert changed[name]["hook"] == "speculative_hook.handle_speculative_decoding"


@pytest.mark.sglang
def test_table(rows):
    print("\n" + corpus.table(list(rows.values())))
    assert not [r for r in rows.values() if r.outcome == "disagree"]


def _record(write: bool) -> int:
    import yaml

    sys.path.insert(0, str(FIDELITY.parents[1]))
    import record  # the main corpus recorder's formatting

    text = CASES_FILE.read_text(encoding="utf-8")
    header = text[: text.index(record.HEADER_END)]
    raw_cases = yaml.safe_load(text)["cases"]
    live = corpus.run_sglang(CASES, extra_sys_path=[_view()])
    out, changed = [], 0
    for raw, case in zip(raw_cases, CASES):
        r = live[case.id]
        if r.setup_error:
            print(f"{case.id}: NOT RESOLVED: {r.error}", file=sys.stderr)
            return 2
        new = {k: v for k, v in raw.items() if k not in ("sglang_error_type", "sglang_hook", "sglang_message")}
        new["expected_sglang"] = "accepted" if r.accepted else "rejected"
        if not r.accepted:
            new.update(sglang_error_type=r.error["type"], sglang_hook=r.error["hook"],
                       sglang_message=corpus.portable(r.error["message"]))
        if new != raw:
            changed += 1
            print(f"~ {case.id}: {new['expected_sglang']}" + (f" ({r.error['type']}: "
                  f"{corpus.portable(r.error['message'])[:140]})" if not r.accepted else ""))
        out.append(record._flow(new))
    print(f"{changed} of {len(CASES)} cases changed")
    if write:
        CASES_FILE.write_text(header + record.HEADER_END + "\n".join(out) + "\n", encoding="utf-8")
        corpus.load_cases(CASES_FILE)
        print(f"wrote {CASES_FILE}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(_record("--write" in sys.argv))
