"""The broken profiles users write, each annotated with the rules it must trip (`# expect: ...`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddtctl.validate import validate_path

BROKEN = sorted((Path(__file__).parent / "broken").glob("*.yaml"))


def expected_rules(path: Path) -> set[str]:
    match = re.search(r"^# expect: (.+)$", path.read_text(), re.M)
    assert match, f"{path.name} has no '# expect:' line"
    return {r.strip() for r in match.group(1).split(",")}


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_profile_trips_exactly_its_rules(path):
    result = validate_path(path)
    assert not result.valid and result.error is None
    errors = {f.rule for f in result.findings if f.severity == "error"}
    assert errors == expected_rules(path)
    assert all(f.line for f in result.findings if f.severity == "error"), "every error points at a line"
