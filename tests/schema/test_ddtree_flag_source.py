"""One source for the DDTREE flags' type, default and help: ddtctl/schema/extensions.py DDTREE_FLAG_SPECS. The
payload's patch of SGLang's arg_groups/fields/spec.py (SGLang's own --help and parser), the payload's smoke table
and the shipped rules' DDTREE_FLAGS each spell them again, for a runtime that cannot import ddtctl: held equal here.
The budget's default (block size - 1) is written once, ddtree_core.default_budget, which the payload ships."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ddtctl.overlay import smoke
from ddtctl.rules.ddtree import core as ddtree_core
from ddtctl.schema.extensions import DDTREE_FLAG_SPECS, PAYLOAD

PAYLOAD_DIR = Path(__file__).resolve().parents[2] / "ddtctl" / "payload" / "ddtree-sglang-0.5.23"
PATCH = PAYLOAD_DIR / "patches" / "sglang__srt__arg_groups__fields__spec.py.patch"
WORKER = PAYLOAD_DIR / "files" / "ddtree_sglang" / "worker.py"
# `    speculative_ddtree_x: A[\n        TYPE,\n        "HELP",\n    ] = DEFAULT` (a CLI field; a resolved-only
# field's second item is an Arg(...), not a string)
FIELD = re.compile(
    r"^    (speculative_ddtree_\w+): A\[\n        ([^\n]+),\n        (\"[^\n]*\"),\n    \] = (\w+)$", re.M
)
TYPES = {"Optional[int]": ("int", "store"), "Optional[str]": ("str", "store"), "bool": (None, "store_true")}


def patched_fields() -> dict[str, tuple[str | None, str, object, str]]:
    """dest -> (type, action, default, help) as the patched spec.py declares them (the patch's new side)."""
    new = "\n".join(line[1:] for line in PATCH.read_text().splitlines() if line[:1] in ("+", " "))
    return {
        dest: (*TYPES[kind], ast.literal_eval(default), ast.literal_eval(help_))
        for dest, kind, help_, default in FIELD.findall(new)
    }


def test_the_payload_patch_declares_the_flags_as_ddtctl_does():
    want = {
        s.dest: (s.type, s.action, s.default, s.help.removesuffix(f" [added by {PAYLOAD}]"))
        for s in DDTREE_FLAG_SPECS
    }
    got = patched_fields()
    assert set(got) == set(want), "the patch and DDTREE_FLAG_SPECS name different flags"
    for dest, spec in want.items():
        assert got[dest] == spec, f"{dest}: the patch says {got[dest]}, DDTREE_FLAG_SPECS {spec}"


def test_the_smoke_table_and_the_shipped_rules_agree_with_the_specs():
    pytypes = {"int": int, "str": str, None: bool}
    assert smoke.DDTREE_FLAGS == {s.dest: (s.option, pytypes[s.type], s.default) for s in DDTREE_FLAG_SPECS}
    assert ddtree_core.DDTREE_FLAGS == {s.dest: s.default for s in DDTREE_FLAG_SPECS}


def test_the_budget_default_is_written_once():
    assert [ddtree_core.default_budget(b) for b in (16, 8, 2, 1)] == [15, 7, 1, 1]
    resolved = ddtree_core.resolve_ddtree({"speculative_dflash_block_size": 16}, {})
    assert resolved["budget"] == 15 and resolved["verify_width"] == 16
    worker = WORKER.read_text()  # the payload's worker takes its default from its copy of the rules
    assert worker.count("rules_core.default_budget(block)") == 2
    assert not re.search(r'"speculative_ddtree_budget", (depth|self\.depth)\)', worker)
