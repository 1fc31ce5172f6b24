"""Raise-site coverage (ddtctl/rules/coverage.py + coverage.yaml): every raise / assert / exit that SGLang 0.5.23's
prepare_server_args + resolve_once + check_server_args can reach is mapped to a rule or an exemption with its reason.
A new SGLang release with a new check fails here until the site is mapped."""

from __future__ import annotations

import fnmatch

import pytest

from ddtctl.errors import EnvironmentMissing
from ddtctl.rules import coverage as cov
from ddtctl.rules import all_rules


def _classified(sites, mapping):
    """The pinned wheel's sites with their mapping entries; a missing SGLang env fails (it is part of `make test`)."""
    try:
        return cov.classify(sites(), mapping())
    except EnvironmentMissing as err:
        pytest.fail(f"{err.one_line()} — run `make sglang-env`")


@pytest.fixture(scope="module")
def rows():
    return _classified(cov.sites, cov.load_mapping)


def test_every_reachable_site_is_mapped(rows):
    assert len(rows) > 500  # the walk found the resolver's checks at all
    unmapped = [f"{s.file}:{s.line} {s.function}: {s.message}" for s, m in rows if m is None]
    assert not unmapped, f"{len(unmapped)} unmapped raise sites:\n  " + "\n  ".join(unmapped[:40])


def test_mapping_names_real_rules_and_reasons():
    from ddtctl.validate import BUILTIN_CHECKS

    # a rule of the graph, or a built-in check (DDT002: the flag schema's types and ranges)
    ids = {r.id for r in all_rules()} | set(BUILTIN_CHECKS)
    for entry in cov.load_mapping():
        assert entry.get("rule") in ids or (entry.get("category") and len(entry["category"]) > 20), entry


def test_deferred_sites_say_what_they_need(rows):
    """A site stays "deferred to dry-run" only where the machine, the weights or the network decides it; every other
    reachable site has a rule or another exemption (issue #32: at most 40 deferred)."""
    deferred = [(s, m) for s, m in rows if m and str(m.get("category", "")).startswith("deferred")]
    assert len(deferred) <= 40, len(deferred)
    vague = [f"{s.file}:{s.line}" for s, m in deferred
             if not str(m.get("reason", "")).startswith(("the machine", "the weights", "the network"))]
    assert not vague, f"deferred sites without a machine / weights / network reason: {vague}"


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


# ---------------------------------------------------------------- override inventory (ddtctl/rules/overrides.yaml)

@pytest.fixture(scope="module")
def override_rows():
    return _classified(cov.override_sites, cov.load_override_mapping)


def test_every_override_site_is_mapped(override_rows):
    assert len(override_rows) > 400  # the walk found the resolver's overrides at all
    unmapped = [f"{s.file}:{s.line} {s.function} {s.kind}: {', '.join(s.fields)}" for s, m in override_rows
                if m is None]
    assert not unmapped, f"{len(unmapped)} unmapped override sites:\n  " + "\n  ".join(unmapped[:40])


def test_override_mapping_names_info_rules_with_examples_or_reasons(override_rows):
    from ddtctl.rules.engine import RULES

    all_rules()
    keys = [s.key for s, _ in override_rows]
    for entry in cov.load_override_mapping():
        if entry.get("rule"):
            assert entry["rule"] in RULES, entry
            assert entry.get("example", {}).get("argv"), entry
            assert any(fnmatch.fnmatchcase(k, entry["match"]) for k in keys), f"stale: {entry['match']}"
        else:
            assert len(entry.get("category") or "") > 40, entry


def _example_argv(example) -> list[str]:
    import shlex
    from pathlib import Path

    models = Path(__file__).resolve().parents[1] / "fidelity" / "models"
    return shlex.split(example["argv"].replace("{models}", str(models)))


def _fields_of(entry, rows) -> set[str]:
    return {f for s, m in rows if m is not None and m["match"] == entry["match"] for f in s.fields}


def test_override_examples_are_reported_as_info(override_rows):
    """Each override mapped to a rule is modelled as an info finding: the rule reports its example launch at severity
    info, on one of the fields the override replaces."""
    from ddtctl.validate import validate_argv

    wrong = []
    for entry in cov.load_override_mapping():
        if not entry.get("rule"):
            continue
        fields = {f.replace("_", "-") for f in _fields_of(entry, override_rows)}
        result = validate_argv(_example_argv(entry["example"]), gpu=entry["example"]["gpu"])
        infos = [f for f in result.findings if f.rule == entry["rule"] and f.severity == "info"]
        if not infos:
            wrong.append(f"{entry['match']}: {entry['rule']} reports no info finding for its example")
        elif "**" not in fields and not any((f.key or "").lstrip("-") in fields for f in infos):
            wrong.append(f"{entry['match']}: {entry['rule']} reports {[f.key for f in infos]}, not {sorted(fields)}")
    assert not wrong, "\n".join(wrong)
