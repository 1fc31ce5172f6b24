"""Differential fuzzing in CI: a fixed-seed sample of launches through the static validator and SGLang 0.5.23's own
resolver (one warm process), and the rules derived from SGLang's raise sites checked against SGLang itself.

`make fidelity-fuzz N=2000 SEED=...` runs the long version (tests/fidelity/fuzz.py). Here: SEED and N below (printed
with the table), well under two minutes. The sample must not disagree beyond the classes listed in
fuzz_known.yaml (each with its evidence); a class that no longer occurs must be removed from there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import fuzz

SEED, N = 20261130, 300
KNOWN_FILE = Path(__file__).resolve().parent / "fuzz_known.yaml"


def _known() -> dict[str, str]:
    if not KNOWN_FILE.exists():
        return {}
    return {str(k): str(v) for k, v in ((yaml.safe_load(KNOWN_FILE.read_text(encoding="utf-8")) or {})
                                        .get("known") or {}).items()}


@pytest.fixture(scope="module")
def client():
    from ddtctl.bridge.client import ResolverClient
    from ddtctl.dryrun import resolve_python
    from ddtctl.errors import EnvironmentMissing

    try:
        python = resolve_python(None, fuzz.SGLANG)
    except EnvironmentMissing as err:
        pytest.fail(f"{err.one_line()} — run `make sglang-env`")
    c = ResolverClient(python)
    yield c
    c.close()


@pytest.fixture(scope="module")
def sample(client):
    """The fixed-seed cases and SGLang's verdict on each (one warm resolver)."""
    from ddtctl.dryrun import dry_run_argvs

    cases = fuzz.generate(N, SEED)
    live = {r.source: r for r in dry_run_argvs([(c.id, c.argv, c.gpu) for c in cases], client=client)}
    return cases, live


@pytest.mark.sglang
def test_fixed_seed_sample_agrees_with_sglang(sample, capsys):
    from ddtctl.validate import validate_argv

    cases, live = sample
    outcomes = [fuzz.classify(c, live[c.id], validate_argv(c.argv, gpu=c.gpu, sglang=fuzz.SGLANG, source=c.id))
                for c in cases]
    text = fuzz.table(outcomes, seed=SEED, examples=1)
    with capsys.disabled():
        print(f"\nfidelity-fuzz CI sample: seed {SEED}, N {N}\n{text}")
    known = _known()
    unexplained = sorted({o.cls for o in outcomes if o.outcome in ("disagree", "setup-error")} - set(known))
    assert not unexplained, "disagreement classes not in fuzz_known.yaml:\n  " + "\n  ".join(unexplained)


@pytest.mark.sglang
def test_hook_rule_cases_agree_with_sglang(client):
    """Each rule of ddtctl/rules/hooks/: its failing case is rejected by SGLang and its passing case accepted; the
    same for the extra pairs (HOOK_EXTRA) of rules whose verdict depends on what SGLang resolves."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
    from test_rules import HOOK_CASES, HOOK_EXTRA

    from ddtctl.dryrun import dry_run_argvs

    pairs = {rid: case for rid, case in HOOK_CASES.items()}
    pairs.update({f"{rid}#{i}": (bad, good, gpu) for i, (rid, bad, good, gpu) in enumerate(HOOK_EXTRA)})
    items = []
    for rid, (bad, good, gpu) in sorted(pairs.items()):
        items += [(f"{rid}-bad", bad, gpu or "H200"), (f"{rid}-good", good, gpu or "H200")]
    results = {r.source: r for r in dry_run_argvs(items, client=client)}
    wrong = []
    for rid in sorted(pairs):
        bad, good = results[f"{rid}-bad"], results[f"{rid}-good"]
        if bad.accepted:
            wrong.append(f"{rid}: SGLang accepts the failing case")
        if not good.accepted:
            wrong.append(f"{rid}: SGLang rejects the passing case: {good.error}")
    assert not wrong, "\n".join(wrong)


def _launch_key(argv, env, gpu) -> tuple:
    return tuple(argv), tuple(sorted((env or {}).items())), gpu


def _site_rules() -> dict[tuple[str, int], str | None]:
    """(sglang file, line) -> the rule ddtctl/rules/coverage.yaml maps that raise site to (None: an exemption)."""
    from ddtctl.rules import coverage as cov

    return {(s.file, s.line): (m or {}).get("rule") for s, m in cov.classify(cov.sites(), cov.load_mapping())}


@pytest.mark.sglang
def test_deferred_rule_pairs_agree_with_sglang(client):
    """The rules of the raise sites once "deferred to dry-run" (tests/rules/deferred_pairs.py): SGLang rejects each
    failing launch at a raise site coverage.yaml maps to a rule the static validator reports for that launch (the
    same reason, not only the same verdict), and accepts each passing one; env pairs run under their SGLANG_*
    environment."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
    from deferred_pairs import ACCEPTED, CASES, ENV, EXTRA
    from test_rules import _rules_of

    from ddtctl.dryrun import dry_run_argvs

    pairs = [(rid, bad, {}, good, {}, gpu or "H200") for rid, (bad, good, gpu) in sorted(CASES.items())]
    pairs += [(rid, bad, {}, good, {}, gpu) for rid, bad, good, gpu in EXTRA]
    pairs += list(ENV)
    # each distinct launch (argv, environment, GPU) resolved once: many pairs share their passing launch
    launches = [(argv, {}, gpu) for _, argv, gpu in ACCEPTED]
    for _, bad, bad_env, good, good_env, gpu in pairs:
        launches += [(bad, bad_env, gpu), (good, good_env, gpu)]
    keys = {_launch_key(*launch): launch for launch in launches}
    index = {key: f"launch{i}" for i, key in enumerate(keys)}
    items = [(index[key], argv, gpu) for key, (argv, _, gpu) in keys.items()]
    envs = [env or None for _, env, _ in keys.values()]
    results = {r.source: r for r in dry_run_argvs(items, client=client, envs=envs)}

    def result(argv, env, gpu):
        return results[index[_launch_key(argv, env, gpu)]]

    site_rules, wrong = _site_rules(), []
    for i, (rid, argv, gpu) in enumerate(ACCEPTED):
        if not result(argv, {}, gpu).accepted:
            wrong.append(f"{rid}#accepted{i}: SGLang rejects a launch the rule reports below error severity")
    for i, (rid, bad, bad_env, good, good_env, gpu) in enumerate(pairs):
        refused, passed = result(bad, bad_env, gpu), result(good, good_env, gpu)
        if not passed.accepted:
            wrong.append(f"{rid}#{i}: SGLang rejects the passing case: {passed.error}")
        if refused.accepted:
            wrong.append(f"{rid}#{i}: SGLang accepts the failing case")
            continue
        where = (refused.error_at or "").split(" in ")[0]
        file, _, line = where.rpartition(":")
        # the raise / assert statement's first line: the error may point into its message's lines
        lines = [n for (f, n) in site_rules if f == file and line.isdigit() and int(line) - 12 <= n <= int(line)]
        mapped = site_rules.get((file, max(lines))) if lines else None
        static = _rules_of(bad, gpu, env=bad_env or {"SGLANG_PLACEHOLDER": "1"})
        if mapped is None or mapped not in static:
            wrong.append(f"{rid}#{i}: SGLang rejects at {where} (mapped to {mapped}), static reports {sorted(static)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.sglang
def test_launch_rule_cases_pass_sglangs_resolver(client):
    """Each launch-time rule (ddtctl/rules/launch/) catches what SGLang's own resolver lets through: its failing case
    is accepted by SGLang 0.5.23's resolver, and dies only later, building the model runner, the pools or the draft
    worker (the raise / assert the rule cites). Failing cases only: one resolver call each (~35, ~2 s warm)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
    from launch_cases import LAUNCH_CASES, LAUNCH_ENV_OF, LAUNCH_GPU_PAIRS

    from ddtctl.dryrun import dry_run_argvs

    items, envs = [], []
    for rid, (bad, _, gpu) in sorted(LAUNCH_CASES.items()):
        items.append((f"{rid}-bad", bad, gpu or "H200"))
        envs.append(LAUNCH_ENV_OF.get(rid, ({}, {}))[0])
    for rid, argv, bad_gpu, _ in LAUNCH_GPU_PAIRS:
        items.append((f"{rid}-bad-on-{bad_gpu}", argv, bad_gpu))
        envs.append({})
    rejected = [f"{r.source}: {r.error}" for r in dry_run_argvs(items, client=client, envs=envs) if not r.accepted]
    assert not rejected, "SGLang's resolver rejects a launch-rule case:\n" + "\n".join(rejected)


@pytest.mark.sglang
def test_resolution_model_matches_sglang(sample):
    """ddtctl/rules/hooks/resolution.py `resolve` (the attention backends and page size SGLang's pipeline settles on, which many
    rules read) gives SGLang's own resolved values on every accepted launch of the sample."""
    from ddtctl.rules import hooks
    from ddtctl.rules.engine import Context
    from ddtctl.schema.extensions import extended_catalog
    from ddtctl.schema.gpus import resolve_gpu
    from ddtctl.validate import validate_argv

    cases, live = sample
    defaults = {s.dest: s.default for s in extended_catalog(fuzz.SGLANG).flags}
    wrong, checked = [], 0
    for c in cases:
        r = live[c.id]
        if not r.accepted:
            continue
        v = validate_argv(c.argv, gpu=c.gpu, sglang=fuzz.SGLANG, source=c.id)
        ctx = Context(given=v.flags.given, defaults=defaults, lines={}, keys={}, model=v.model, draft=v.draft,
                      gpu=resolve_gpu(c.gpu))
        res = hooks.resolve(ctx)
        if res is None:
            continue
        checked += 1
        main = r.resolved.get("attention_backend")
        theirs = (main, r.resolved.get("prefill_attention_backend") or main,
                  r.resolved.get("decode_attention_backend") or main, r.resolved.get("page_size") or 1)
        mine = (res.final_attention, *res.final_pair, res.final_page)
        if mine != theirs:
            wrong.append(f"[{c.gpu}] {c.text()}\n    ddtctl {mine}, SGLang {theirs}")
    assert checked > 150
    assert not wrong, f"{len(wrong)} of {checked}:\n" + "\n".join(wrong[:10])


@pytest.mark.sglang
def test_override_examples_are_sglang_overrides(client):
    """Each override ddtctl/rules/overrides.yaml maps to an info rule: SGLang accepts its example launch and replaces
    a value the launch gives in one of the site's fields (what the info finding says)."""
    import shlex

    from ddtctl.dryrun import dry_run_argvs
    from ddtctl.rules import coverage as cov

    rows = cov.classify_overrides(cov.override_sites(), cov.load_override_mapping())
    entries = [e for e in cov.load_override_mapping() if e.get("rule")]
    items = [(e["match"], shlex.split(e["example"]["argv"].replace("{models}", str(fuzz.MODELS))),
              e["example"]["gpu"]) for e in entries]
    results = {r.source: r for r in dry_run_argvs(items, client=client)}
    wrong = []
    for e in entries:
        r = results[e["match"]]
        fields = {f for s, m in rows if m is not None and m["match"] == e["match"] for f in s.fields}
        changed = {o["field"] for o in r.changed if o["raw"] != o["resolved"]}
        if not r.accepted:
            wrong.append(f"{e['match']}: SGLang rejects the example: {r.error}")
        elif "**" not in fields and not changed & fields:
            wrong.append(f"{e['match']}: SGLang changes {sorted(changed)}, none of {sorted(fields)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.sglang
def test_sample_overrides_are_reported(sample):
    """On the fixed-seed sample, every value a launch gives that SGLang's resolver replaces (other than `auto`) is
    reported by a static finding on that flag (DDT950 and the rules that report their own override)."""
    from ddtctl.validate import validate_argv

    cases, live = sample
    missed, total = [], 0
    for c in cases:
        r = live[c.id]
        if not r.accepted:
            continue
        flags = {a for a in c.argv if a.startswith("--")}
        overridden = [o for o in r.changed if o["raw"] != o["resolved"] and o["raw"] != "auto"
                      and "--" + o["field"].replace("_", "-") in flags]
        if not overridden:
            continue
        findings = validate_argv(c.argv, gpu=c.gpu, sglang=fuzz.SGLANG, source=c.id).findings
        keys = {(f.key or "").lstrip("-") for f in findings} | {k for f in findings for k in f.edits}
        for o in overridden:
            total += 1
            if o["field"].replace("_", "-") not in keys:
                missed.append(f"{o['field']}: {o['raw']!r} -> {o['resolved']!r} ({o['hook']}) [{c.gpu}] {c.text()}")
    assert total > 20
    assert not missed, f"{len(missed)} of {total} overrides unreported:\n" + "\n".join(missed[:10])


DDTREE_SEED, DDTREE_N = 20261201, 120


@pytest.mark.sglang
def test_fixed_seed_ddtree_sample_agrees_with_sglang(capsys):
    """DDTREE launches through SGLang's resolver with the built DDTREE payload view first on sys.path (what
    `ddtctl dry-run --overlay auto` runs), against the static validator."""
    from ddtctl.dryrun import dry_run_argvs
    from ddtctl.validate import validate_argv

    cases = fuzz.generate(DDTREE_N, DDTREE_SEED, ddtree=True)
    live = {r.source: r for r in dry_run_argvs([(c.id, c.argv, c.gpu) for c in cases],
                                               extra_sys_path=fuzz.ddtree_sys_path())}
    outcomes = [fuzz.classify(c, live[c.id], validate_argv(c.argv, gpu=c.gpu, sglang=fuzz.SGLANG, source=c.id))
                for c in cases]
    with capsys.disabled():
        print(f"\nfidelity-fuzz DDTREE CI sample: seed {DDTREE_SEED}, N {DDTREE_N}\n"
              + fuzz.table(outcomes, seed=DDTREE_SEED, examples=1, mode="ddtree"))
    unexplained = sorted({o.cls for o in outcomes if o.outcome in ("disagree", "setup-error")} - set(_known()))
    assert not unexplained, "disagreement classes not in fuzz_known.yaml:\n  " + "\n  ".join(unexplained)
