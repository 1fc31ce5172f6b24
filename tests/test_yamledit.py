"""The round-trip editor behind `validate --fix`, `migrate` and `tune --write`: the edited key changes, every
other line stays byte-identical (comments, flow lists, quoting, blank lines, indentation ruamel would
normalise)."""

from __future__ import annotations

import pytest

from ddtctl.fix import apply_fixes, verify
from ddtctl.profile import parse_profile_text
from ddtctl.rules.engine import Finding
from ddtctl.yamledit import EditRefused, RoundTrip, delete_key, rename_key

# Everything ruamel's dump would touch if it wrote the whole file: 4-space indentation under model: (the
# server block uses 2), spaces inside a flow list, single and double quotes, a document start, comment-only
# and blank lines.
RICH = """---
# header comment

name: 'rich'        # single quoted
sglang: "0.5.23"
model:
    path: "/models/x"     # four-space block
    architecture: Qwen3ForCausalLM
hardware: { gpu: H200, count: 8 }

server:
  # before tp
  tp-size: 8   # eight
  cuda-graph-bs: [ 1, 2,  4 ]
  served-model-name: 'x-1'

  # a blank line above, a comment here
  grammar-backend: xgramar      # typo
  attention-backend: triton
  # trailing comment of server

env:
  K: "v"   # quoted
"""


def edit(text: str, edits: dict) -> str:
    finding = Finding(rule="DDT999", severity="error", message="m", edits=edits)
    fixed = apply_fixes(text, [finding])
    assert fixed.refused is None, fixed.refused
    doc = parse_profile_text(text, "p.yaml")
    assert verify(doc.data, fixed.text, fixed.edits, "p.yaml") is None
    return fixed.text


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.split("\n"), after.split("\n")
    assert len(a) == len(b), after
    return [(x, y) for x, y in zip(a, b, strict=True) if x != y]


def test_ruamel_alone_would_reformat_this_profile():
    doc = RoundTrip(RICH)
    assert doc.baseline != RICH  # the premise: the splice is what keeps the rest byte-identical


def test_setting_a_value_changes_that_line_only():
    out = edit(RICH, {"grammar-backend": "xgrammar"})
    assert changed_lines(RICH, out) == [("  grammar-backend: xgramar      # typo",
                                         "  grammar-backend: xgrammar  # typo")]


def test_a_value_in_a_reformatted_flow_list_is_replaced_whole():
    out = edit(RICH, {"cuda-graph-bs": [8, 16]})
    assert changed_lines(RICH, out) == [("  cuda-graph-bs: [ 1, 2,  4 ]", "  cuda-graph-bs: [8, 16]")]


def test_adding_a_key_goes_after_the_last_flag_above_the_closing_comment():
    out = edit(RICH, {"disable-overlap-schedule": True})
    assert out == RICH.replace("  attention-backend: triton\n",
                               "  attention-backend: triton\n  disable-overlap-schedule: true\n")


def test_removing_a_key_keeps_the_comment_lines_below_it():
    out = edit(RICH, {"served-model-name": None})
    assert out == RICH.replace("  served-model-name: 'x-1'\n", "")
    out = edit(RICH, {"attention-backend": None})
    assert out == RICH.replace("  attention-backend: triton\n", "")


def test_quotes_are_kept_and_added_where_pyyaml_needs_them():
    out = edit(RICH, {"served-model-name": "y-2"})
    assert changed_lines(RICH, out) == [("  served-model-name: 'x-1'", "  served-model-name: 'y-2'")]
    out = edit(RICH, {"grammar-backend": "on"})  # YAML 1.1 reads a plain `on` as true
    assert "  grammar-backend: \"on\"  # typo\n" in out


def test_a_profile_without_a_trailing_newline_stays_without_one():
    text = RICH.rstrip("\n")
    out = edit(text, {"grammar-backend": "xgrammar"})
    assert not out.endswith("\n") and out.endswith('K: "v"   # quoted')


def test_a_profile_without_server_gets_one_at_the_end():
    text = "name: p   # mine\nmodel: {path: /m}\n"
    assert edit(text, {"tp-size": 2}) == text + "server:\n  tp-size: 2\n"


def test_rename_keeps_position_value_and_comment_gap():
    doc = RoundTrip(RICH)
    rename_key(doc.data["server"], "tp-size", "tensor-parallel-size")
    out = doc.result()
    assert changed_lines(RICH, out) == [("  tp-size: 8   # eight", "  tensor-parallel-size: 8   # eight")]


def test_deleting_the_first_key_keeps_the_comment_that_follows_it():
    text = "name: p\nserver:\n  tp-size: 8\n  # about the port\n  port: 1\n"
    doc = RoundTrip(text)
    delete_key(doc.data["server"], "tp-size")
    assert doc.result() == "name: p\nserver:\n  # about the port\n  port: 1\n"


def test_a_value_ruamel_reformats_is_replaced_whole_when_edited():
    text = "name: p\nmodel: {path: /m}\nserver:\n  cuda-graph-bs: [1,\n    2]\n  tp-size: 1  # one\n"
    assert RoundTrip(text).baseline != text  # ruamel joins the flow list onto one line
    assert edit(text, {"cuda-graph-bs": 8}) == text.replace("[1,\n    2]", "8")
    assert edit(text, {"tp-size": 2}) == text.replace("tp-size: 1", "tp-size: 2")  # the list stays as written


def test_an_edit_inside_a_stretch_ruamel_reformats_is_refused():
    # ruamel's one indentation for the file is the server block's (2): it would re-indent the 4-space block
    # under model:, so an edit there cannot be laid onto the original without touching its neighbours
    text = "name: p\nmodel:\n    path: /m\n    architecture: A\nserver:\n  tp-size: 1\n"
    doc = RoundTrip(text)
    doc.data["model"]["architecture"] = "B"
    with pytest.raises(EditRefused, match="reformat the lines around line"):
        doc.result()


def test_unreadable_yaml_is_refused_with_the_reason():
    with pytest.raises(EditRefused, match="cannot read p.yaml"):
        RoundTrip("a: [1,\n", "p.yaml")
