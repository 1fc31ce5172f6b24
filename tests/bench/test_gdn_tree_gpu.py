"""bench/gdn_tree_gpu.py on the CPU: the per-case verdict holds every --variants launch that ran to the
default launch's tolerances (one that raised is reported and does not count), and the variant check itself,
run on the compact GDN kernel under Triton's interpreter, catches a wrong launch."""

from __future__ import annotations

import math

import pytest
from bench_scripts import load_bench

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def gtg():
    yield from load_bench("gdn_tree_gpu")


# The H200's bs=1 T=33 row of 2026-12-01 with the errors a correct variant has, and bv128 out of shared memory
ROW = {
    "H": 16,
    "HV": 48,
    "bs": 1,
    "width": 33,
    "out_err_vs_sglang": 2.4e-4,
    "out_err_vs_f64": 1.9e-4,
    "sglang_err_vs_f64": 1.9e-4,
    "state_err_vs_sglang": 1.1e-4,
    "variants": ["bv64", "anc_bv64", "bv128"],
    "us_compact_bv64": 23.9,
    "out_err_vs_sglang_bv64": 2.4e-4,
    "out_err_vs_f64_bv64": 2.0e-4,
    "state_err_vs_sglang_bv64": 1.2e-4,
    "us_compact_anc_bv64": 20.9,
    "out_err_vs_sglang_anc_bv64": 2.4e-4,
    "out_err_vs_f64_anc_bv64": 2.0e-4,
    "state_err_vs_sglang_anc_bv64": 1.2e-4,
    "us_compact_bv128": math.nan,
    "error_bv128": "OutOfResources: out of resource: shared memory",
}


def test_variants_within_tolerance_pass_and_one_that_raised_does_not_count(gtg):
    assert gtg.ok_of(ROW)
    line = gtg.variants_line(ROW)
    assert "bv64 23.9 us (out 2.4e-04 f64 2.0e-04 state 1.2e-04 ok)" in line
    assert "bv128 raised, not counted (OutOfResources" in line


@pytest.mark.parametrize(
    "field,value",
    [
        ("out_err_vs_sglang_bv64", 0.05),
        ("out_err_vs_f64_anc_bv64", 0.05),
        ("state_err_vs_sglang_bv64", 2e-3),
        ("out_err_vs_sglang_anc_bv64", math.nan),
    ],
)
def test_a_variant_past_the_default_launchs_tolerance_fails_the_row(gtg, field, value):
    row = dict(ROW, **{field: value})
    assert not gtg.ok_of(row)
    assert "OUT OF TOLERANCE" in gtg.variants_line(row)


def test_a_variant_that_neither_ran_nor_raised_fails_the_row(gtg):
    row = {k: v for k, v in ROW.items() if not k.endswith("_anc_bv64")}
    assert not gtg.ok_of(row)


def test_the_default_launch_still_decides(gtg):
    assert not gtg.ok_of(dict(ROW, out_err_vs_f64=0.05))
    assert not gtg.ok_of(dict(ROW, state_err_vs_sglang=2e-3))
    assert gtg.ok_of(dict(ROW, variants=[]))


def _default_launch(gtg, inp, block: int):
    """The default compact launch's outputs, the float64 outputs of request 0, the accepted paths and the states
    a commit of them gives: what check_variants holds every variant to."""
    o_ref = gtg.compact_verify(inp, block, inp.inter_compact[0])
    accepted = gtg.accepted_paths(inp, block)
    return o_ref, gtg.reference_output(inp), accepted, gtg.compact_commit(inp, inp.inter_compact, accepted)


def test_the_variant_check_catches_a_wrong_launch_in_the_interpreter(gtg):
    """Small fp32 shapes (K = V = 32, two requests of 9 nodes); the default compact launch stands in for
    SGLang's kernel and its commit for SGLang's scatter. 16-wide value tiles, the ancestor matrix given and
    the records-only scratch agree; an ancestor matrix that lets every node see every other one is caught in
    the outputs and in the committed states, a launch that writes no records (right outputs) in the committed
    states, as the records are zeroed first; a scratch too small for the records raises and is reported."""
    block = 16
    inp = gtg.make_inputs(1, 2, 2, 9, seed=77, dev="cpu", dtype=torch.float32, dim=32)
    o_ref, ref_out0, accepted, want = _default_launch(gtg, inp, block)
    everything = torch.ones(inp.bs, inp.width, inp.width, dtype=torch.bool)
    tried = [
        *gtg.variant_launches(inp, ["anc", "scratch"]),
        ("bv16", {"block_v": 16}),
        ("all_visible", {"ancestors": everything}),
        ("no_records", {"intermediate_state_indices": torch.full_like(inp.rows, -1)}),
        ("too_small", {"intermediate_states_buffer": torch.zeros(inp.bs + 1, inp.width, 1)}),
        *gtg.variant_launches(inp, ["b2_64"]),  # the two-block kernel's tile: 9 nodes take the single one
        *gtg.variant_launches(inp, ["lv2_anc_bv64", "lv16_anc_bv64"]),  # the level-step verify, 2 and 16 a step
    ]
    row = {
        "out_err_vs_sglang": 0.0,
        "out_err_vs_f64": gtg.max_err(o_ref[0, : inp.width], ref_out0),
        "state_err_vs_sglang": 0.0,
        "variants": [key for key, _ in tried],
    }
    row.update(gtg.check_variants(inp, tried, block, o_ref, ref_out0, want, accepted))
    for key in ("anc", "scratch", "bv16", "lv2_anc_bv64", "lv16_anc_bv64"):
        assert row[f"out_err_vs_sglang_{key}"] < 1e-5 and row[f"out_err_vs_f64_{key}"] < 1e-4, key
        assert row[f"state_err_vs_sglang_{key}"] < 1e-5, key
    assert row["out_err_vs_sglang_all_visible"] > gtg.TOL_OUT
    assert row["out_err_vs_f64_all_visible"] > gtg.TOL_OUT
    assert row["state_err_vs_sglang_all_visible"] > gtg.TOL_STATE
    assert row["out_err_vs_sglang_no_records"] == 0.0
    assert row["state_err_vs_sglang_no_records"] > gtg.TOL_STATE
    assert "records do not fit" in row["error_too_small"] and "out_err_vs_sglang_too_small" not in row
    assert "block2 sets the two-block kernel's tile" in row["error_b2_64"]
    assert not gtg.ok_of(row)
    row["variants"].remove("all_visible")
    assert not gtg.ok_of(row)
    row["variants"].remove("no_records")
    assert gtg.ok_of(row)  # the correct ones pass; the one that raised does not count


def test_block_2_on_the_full_64_row_tile_agrees_with_its_rows_only_tile_in_the_interpreter(gtg):
    """65 nodes (block 2 = one node): b2_64 and b2_64_bv64, the two-block kernel's earlier 64-row block 2,
    give the default launch's outputs and records (its 16-row block 2), the same committed states, and both
    equal the float64 reference; they are the launches the gdn_wide step times against the default ones."""
    block = 16
    inp = gtg.make_inputs(1, 2, 1, 65, seed=78, dev="cpu", dtype=torch.float32, dim=16)
    o_ref, ref_out0, accepted, want = _default_launch(gtg, inp, block)
    tried = gtg.variant_launches(inp, ["b2_64", "b2_64_bv64"])
    assert dict(tried) == {"b2_64": {"block2": 64}, "b2_64_bv64": {"block2": 64, "block_v": 16}}
    row = {"out_err_vs_sglang": 0.0, "out_err_vs_f64": gtg.max_err(o_ref[0, : inp.width], ref_out0),
           "state_err_vs_sglang": 0.0, "variants": [key for key, _ in tried]}
    row.update(gtg.check_variants(inp, tried, block, o_ref, ref_out0, want, accepted))
    assert row["out_err_vs_f64"] < 1e-4
    for key, _ in tried:
        assert row[f"out_err_vs_sglang_{key}"] < 1e-6 and row[f"out_err_vs_f64_{key}"] < 1e-4, key
        assert row[f"state_err_vs_sglang_{key}"] < 1e-6, key
    assert gtg.ok_of(row)
