"""The pairwise covering array (tests/fidelity/cover.py): the generator covers every pair on a domain small enough to
check by brute force, every flag of the catalog with a finite domain is a parameter, and CI runs a fixed-seed prefix
of the real array through the static validator and SGLang 0.5.23's own resolver (`make fidelity-fuzz` runs it
whole)."""

from __future__ import annotations

import itertools
import random

import pytest

import cover
import fuzz
from test_fuzz import _known

SEED, ROWS, SINGLES_EVERY = 20261204, 30, 5


def _small_domain(seed: int) -> list[cover.Setting]:
    rng = random.Random(seed)
    settings = [cover.Setting("model", m, ()) for m in ("a", "b")]
    settings += [cover.Setting("gpu", g, ()) for g in ("x", "y", "z")]
    settings += [cover.Setting("algorithm", a, ()) for a in ("none", "D")]
    for f in range(25):
        settings += [cover.Setting(f"f{f}", str(v), (f"--f{f}", str(v))) for v in range(rng.choice((1, 2, 3, 4)))]
    return settings


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_array_covers_every_pair_of_settings_of_two_parameters(seed):
    print(f"seed {seed}")
    settings = _small_domain(seed)
    array = cover.build(seed=seed, per_row=6, settings=settings)
    seen = set()
    for row in array.rows:
        params = [settings[i].param for i in row]
        assert len(params) == len(set(params)), "a case sets one parameter twice"
        assert params[:3] == ["model", "gpu", "algorithm"]
        seen |= {tuple(sorted(p)) for p in itertools.combinations(row, 2)}
    wanted = {(i, j) for i, j in itertools.combinations(range(len(settings)), 2)
              if settings[i].param != settings[j].param}
    assert wanted <= seen, f"{len(wanted - seen)} pairs never appear together"
    assert array.pairs_covered == array.pairs_total == len(wanted)


def test_every_flag_with_a_finite_domain_is_a_parameter():
    from ddtctl.schema.extensions import extended_catalog

    catalog = extended_catalog(fuzz.SGLANG)
    settings, free_text = cover.flag_settings(catalog)
    params = {s.param for s in settings}
    for spec in catalog.flags:
        if spec.deprecated or spec.alias_of or spec.name in cover.DENY or spec.name.startswith("speculative-ddtree"):
            continue
        finite = spec.action in ("boolean_optional", "store_true", "store_false", "store_const") or spec.nargs == 0 \
            or (spec.choices and spec.nargs in (None, "?")) or (spec.type in ("int", "float") and spec.nargs is None)
        assert (spec.name in params) == bool(finite), spec.name
        assert (spec.name in free_text) != bool(finite), spec.name
    for spec in catalog.flags:  # each choice is a value of its own
        if spec.name in params and spec.choices and spec.nargs in (None, "?"):
            assert {s.value for s in settings if s.param == spec.name} == {str(c) for c in spec.choices}


@pytest.mark.sglang
def test_fixed_seed_prefix_of_the_array_agrees_with_sglang(capsys):
    from ddtctl.validate import validate_argv

    from ddtctl.dryrun import dry_run_argvs

    array = cover.build(seed=SEED, max_rows=ROWS)
    assert array.single_rows, "cover_alone.json is missing or stale: run `tests/fidelity/cover.py --prescreen`"
    cases = cover.cases(array) + cover.cases(array, array.single_rows[::SINGLES_EVERY], prefix="alone")

    live = {r.source: r for r in dry_run_argvs([(c.id, c.argv, c.gpu) for c in cases])}
    outcomes = [fuzz.classify(c, live[c.id], validate_argv(c.argv, gpu=c.gpu, sglang=fuzz.SGLANG, source=c.id))
                for c in cases]
    with capsys.disabled():
        print(f"\nfidelity-cover CI prefix: seed {SEED}, {ROWS} rows\n{cover.header(array, array.rows)}\n"
              f"{fuzz.table(outcomes, seed=SEED)}\n\n{cover.family_table(outcomes)}")
    known = set(_known()) | set(_cover_open())
    unexplained = sorted({o.cls for o in outcomes if o.outcome in ("disagree", "setup-error")} - known)
    assert not unexplained, "disagreement classes not in fuzz_known.yaml:\n  " + "\n  ".join(unexplained)


def _cover_open() -> dict[str, str]:
    """Classes the covering array found that are open work (fuzz_known.yaml `cover_open`), each with its owner."""
    import yaml

    from test_fuzz import KNOWN_FILE

    data = yaml.safe_load(KNOWN_FILE.read_text(encoding="utf-8")) or {}
    return {str(k): str(v) for k, v in (data.get("cover_open") or {}).items()}


def test_the_prescreen_file_matches_the_catalog():
    """cover_alone.json was made from this catalog (a changed catalog needs `cover.py --prescreen` again)."""
    assert cover.rejected_alone() is not None
