"""Issue #33 item 4, one home per SGLang check: rules/hooks/ mirrors SGLang's arg_groups/*_hook.py, rules/ddtree/
holds DDTREE's own rules, rules/launch/ what SGLang checks after its resolver, rules/runtime.py the checks no SGLang
hook performs; the modules share predicates by public names only."""

import ast
from pathlib import Path

from ddtctl.rules import all_rules

RULES = Path(__file__).resolve().parents[2] / "ddtctl" / "rules"
# The top of rules/ holds the engine and the inventories; rule modules live in hooks/, ddtree/, launch/, and the
# one module of ddtctl's own checks.
TOP_LEVEL = {"__init__.py", "engine.py", "coverage.py", "inventory.py", "runtime.py"}


def _rule_modules() -> set[str]:
    """The module of each registered rule's check function (rule() wraps it in a closure)."""
    return {r.check.__closure__[0].cell_contents.__module__ for r in all_rules()}


def test_no_topic_module_at_the_top_of_rules():
    assert {p.name for p in RULES.glob("*.py")} == TOP_LEVEL


def test_every_rule_lives_in_hooks_ddtree_launch_or_runtime():
    homes = ("ddtctl.rules.hooks.", "ddtctl.rules.ddtree.", "ddtctl.rules.launch.")
    assert {m for m in _rule_modules() if not m.startswith(homes)} == {"ddtctl.rules.runtime"}


def test_no_rules_module_imports_a_private_name_of_another():
    bad = []
    for path in sorted(RULES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ddtctl"):
                bad += [
                    f"{path.relative_to(RULES)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not bad, "make the shared predicate public: " + ", ".join(bad)
