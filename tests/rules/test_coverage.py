"""Raise-site coverage (ddtctl/rules/coverage.py + coverage.yaml): every raise / assert / exit that SGLang 0.5.23's
prepare_server_args + resolve_once + check_server_args can reach is mapped to a rule or an exemption with its reason.
A new SGLang release with a new check fails here until the site is mapped."""

from __future__ import annotations

import fnmatch

import pytest

from ddtctl.errors import EnvironmentMissing
from ddtctl.rules import coverage as cov
from ddtctl.rules.engine import all_rules


@pytest.fixture(scope="module")
def rows():
    try:
        return cov.classify(cov.sites(), cov.load_mapping())
    except EnvironmentMissing as err:
        pytest.fail(f"{err.one_line()} — run `make sglang-env`")


def test_every_reachable_site_is_mapped(rows):
    assert len(rows) > 500  # the walk found the resolver's checks at all
    unmapped = [f"{s.file}:{s.line} {s.function}: {s.message}" for s, m in rows if m is None]
    assert not unmapped, f"{len(unmapped)} unmapped raise sites:\n  " + "\n  ".join(unmapped[:40])


def test_mapping_names_real_rules_and_reasons():
    ids = {r.id for r in all_rules()}
    for entry in cov.load_mapping():
        assert entry.get("rule") in ids or (entry.get("category") and len(entry["category"]) > 20), entry


def test_rule_entries_match_a_site(rows):
    """A rule glob that matches nothing is stale (the wheel changed, or the glob is wrong)."""
    keys = [s.key for s, _ in rows]
    stale = [m["match"] for m in cov.load_mapping() if m.get("rule") and not any(fnmatch.fnmatchcase(k, m["match"])
                                                                             for k in keys)]
    assert len(stale) <= 12, stale  # f-string messages keyed by their first fragment: tighten as globs are fixed


def test_known_sites_map_to_their_rules(rows):
    by_rule = {}
    for s, m in rows:
        if m and m.get("rule"):
            by_rule.setdefault(m["rule"], []).append(s)
    for rule_id in ("DDT201", "DDT203", "DDT606", "DDT901", "DDT911", "DDT912"):
        assert rule_id in by_rule, rule_id
