"""tools/structure.py's layer table (issue #33): the README's layer list says the same, and it places every
ddtctl module."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("structure", REPO / "tools" / "structure.py")
assert _spec is not None and _spec.loader is not None
structure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(structure)


def readme_layers() -> list[tuple[str, tuple[str, ...]]]:
    """The numbered list under "Layers, ground floor first" in the README's Layout section."""
    text = (REPO / "README.md").read_text()
    block = text.split("\nLayers, ground floor first", 1)[1].split("\n\n", 2)[1]
    items = re.split(r"\n(?=\d+\. )", block)
    out = []
    for item in items:
        m = re.match(r"\d+\. ([^:]+): (.*)", " ".join(item.split()))
        assert m, item
        out.append((m.group(1), tuple(re.findall(r"`([^`]+)`", m.group(2)))))
    return out


def test_readme_layer_list_is_the_table():
    assert readme_layers() == [(name, tuple(pats)) for name, pats in structure.LAYERS]


def test_every_module_has_a_layer():
    assert [m for m in structure.modules() if structure.layer_of(m) is None] == []


def test_the_most_specific_pattern_wins():
    names = [name for name, _ in structure.LAYERS]

    def layer(module: str) -> str:
        return names[structure.layer_of(module)]

    assert layer("ddtctl") == "ground floor"
    assert layer("ddtctl.remote.inventory.files") == "inputs"  # `remote.inventory.*` over `remote.*`
    assert layer("ddtctl.remote.transport") == "hosts"
    assert layer("ddtctl.schema.profile_schema") == "inputs"  # the exact name over `schema.*`
    assert layer("ddtctl.profilediff") == "local work"  # `profile_*` does not match it
    assert layer("ddtctl.cli.validate") == "cli"


def test_an_import_up_the_layers_is_counted(tmp_path, monkeypatch):
    pkg = tmp_path / "ddtctl"
    (pkg / "rules").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "rules" / "__init__.py").write_text("from ddtctl.errors import X\n")  # down: fine
    (pkg / "rules" / "a.py").write_text("def f():\n    from ddtctl.cli import main\n")  # up, in a function
    (pkg / "cli.py").write_text("from ddtctl.rules import a\n")
    monkeypatch.setattr(structure, "ROOT", tmp_path)
    monkeypatch.setattr(structure, "PKG", pkg)
    monkeypatch.setattr(structure, "over_ten", lambda: [])
    found = structure.figures()
    assert found["layer_violations"] == [("ddtctl/rules/a.py", 2, "ddtctl.rules.a", "ddtctl.cli")]
    assert found["against_layers"] == 1 and found["import_circles"] == 1  # rules.a -> cli -> rules.a
