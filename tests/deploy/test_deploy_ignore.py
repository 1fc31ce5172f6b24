"""`ddtctl deploy` honours the profile's `ignore:` entries as `ddtctl validate` does (issue #17): an ignored
rule neither blocks nor warns (its check says it was ignored, and why); an entry that cannot be ignored is
refused."""

from __future__ import annotations

from pathlib import Path

from deploy_data import facts, spec, target

from ddtctl.deploy import preflight_checks, spec_from_profile

FA3 = ["--model-path", "/m", "--attention-backend", "fa3"]
B200 = dict(gpu="NVIDIA B200", sm=(10, 0))


def _validate_checks(s) -> dict:
    checks = preflight_checks(s, target(s), facts(**B200), remote_dry_run=True)
    return {c.name: c for c in checks if c.name.startswith("validate")}


def test_the_profile_ignore_list_reaches_the_deploy_spec(tmp_path: Path):
    profile = tmp_path / "p.yaml"
    profile.write_text(
        'name: p\nsglang: "0.5.23"\nmodel: {path: /m}\nserver:\n  attention-backend: fa3\n'
        'ignore:\n  - {rule: ddt701, reason: "the B200 image ships FA3 kernels"}\n'
    )
    s = spec_from_profile(str(profile), host="gpu1")
    assert s.ignore == {"DDT701": "the B200 image ships FA3 kernels"}


def test_an_ignored_error_no_longer_rejects_the_deploy():
    refused = _validate_checks(spec(FA3, gpu=None))
    assert refused["validate:DDT701"].blocks and "validate" not in refused
    ignored = _validate_checks(spec(FA3, gpu=None, ignore={"DDT701": "the B200 image ships FA3 kernels"}))
    check = ignored["validate:DDT701"]
    assert check.ok and not check.blocks and check.severity == "info"
    assert check.message.startswith(
        "ignored by the profile (the B200 image ships FA3 kernels): attention backend"
    )
    assert ignored["validate"].ok  # the static rules pass once the ignored finding is set aside


def test_an_ignored_warning_is_not_reported_as_a_warning():
    argv = ["--model-path", "/m", "--speculative-num-steps", "3"]
    warned = _validate_checks(spec(argv, gpu=None))["validate:DDT805"]
    assert not warned.ok and warned.severity == "warning"
    quiet = _validate_checks(spec(argv, gpu=None, ignore={"DDT805": "set for the next release"}))[
        "validate:DDT805"
    ]
    assert quiet.ok and quiet.severity == "info"


def test_an_entry_that_cannot_be_ignored_rejects_the_deploy_like_validate():
    s = spec(FA3, gpu=None, ignore={"DDT001": "x", "DDT999": "y"})
    refusals = [
        c
        for c in preflight_checks(s, target(s), facts(**B200), remote_dry_run=True)
        if c.name == "validate:DDT007"
    ]
    assert all(c.blocks and c.fix == "remove this ignore entry from the profile" for c in refusals)
    assert [c.message.split(":")[0] for c in refusals] == ["ignore DDT001", "ignore DDT999"]
    assert "SGLang 0.5.23 rejects this launch itself" in refusals[0].message
    assert "unknown rule 'DDT999'" in refusals[1].message
