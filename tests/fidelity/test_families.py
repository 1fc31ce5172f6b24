"""The fidelity fuzz's per-feature-family table (tests/fidelity/families.py): a flag's family is where SGLang
declares it (fields/ namespace and section banner), every catalog flag has one, and a disagreeing case counts
against the family of each flag it sets. No SGLang run: the snapshot is checked against SGLang's source only
where the managed env is built."""

from __future__ import annotations

import families
import fuzz
import pytest

FIELDS = '''
class Spec(msgspec.Struct):
    """Namespace ``spec``."""

    _NS_PATH = "spec"
    early: A[bool, "before any banner"] = False
    # -------------------------------------------------------------------------
    # Speculative decoding
    # -------------------------------------------------------------------------
    speculative_algorithm: A[Optional[str], "x"] = None
    # a plain comment, not a banner
    speculative_num_steps: A[Optional[int], "x"] = None

    # -------------------------------------------------------------------------
    # Speculative decoding (ngram)
    # -------------------------------------------------------------------------
    speculative_ngram_min_bfs_breadth: A[int, "x"] = 1


class NotANamespace(msgspec.Struct):
    helper: int = 0
'''


def test_fields_take_their_class_namespace_and_the_banner_above_them():
    assert families.parse_fields(FIELDS) == {
        "early": ("spec", None),
        "speculative_algorithm": ("spec", "Speculative decoding"),
        "speculative_num_steps": ("spec", "Speculative decoding"),
        "speculative_ngram_min_bfs_breadth": ("spec", "Speculative decoding (ngram)"),
    }


def test_fields_a_payload_patch_adds_join_the_patched_files_namespace(tmp_path):
    fields = tmp_path / families.FIELDS_DIR
    fields.mkdir(parents=True)
    (fields / "spec.py").write_text(FIELDS, encoding="utf-8")
    patch = tmp_path / "sglang__srt__arg_groups__fields__spec.py.patch"
    patch.write_text(
        "@@ -1 +1 @@\n+    speculative_ddtree_budget: A[\n-    removed_field: A[\n", encoding="utf-8"
    )
    derived = families.derive(tmp_path, [patch])
    assert derived["speculative_ddtree_budget"] == ("spec", None)
    assert "removed_field" not in derived
    assert families.family_of(*derived["speculative_ddtree_budget"]) == "speculative"


def test_a_section_names_its_own_family_over_its_namespaces():
    assert families.family_of("memory", "Hierarchical cache") == "hierarchical cache"
    assert families.family_of("memory", None) == "scheduling"
    assert families.family_of("model", "Quantization and data type") == "quantization"
    assert families.family_of("model", "Model and tokenizer") == "model loading"
    assert families.family_of("observability", "KV canary") == "observability"  # no entry: its own family


@pytest.mark.parametrize(
    ("option", "family"),
    [
        ("--speculative-algorithm", "speculative"),
        ("--speculative-ddtree-budget", "speculative"),  # the DDTREE payload's flag
        ("--mamba-radix-cache-strategy", "mamba"),
        ("--attention-backend", "attention"),
        ("--tp-size", "parallelism"),
        ("--tensor-parallel-size", "parallelism"),  # an alias option string
        ("--disaggregation-mode", "disaggregation"),
        ("--lora-paths", "lora"),
        ("--hicache-ratio", "hierarchical cache"),
        ("--quantization", "quantization"),
        ("--chunked-prefill-size", "scheduling"),
        ("--moe-a2a-backend", "moe"),
        ("--model-path", None),  # fixed in every case: no family
        ("--not-a-flag", None),
    ],
)
def test_an_option_has_the_family_of_the_field_it_sets(option, family):
    assert families.flag_family(option) == family


def test_every_catalog_flag_has_a_family():
    from ddtctl.schema.extensions import extended_catalog

    unplaced = [
        spec.name
        for spec in extended_catalog(families.SGLANG).flags
        if families.flag_family(spec.option) == families.UNPLACED
    ]
    assert unplaced == ["config"]  # argparse's config-file flag, outside SGLang's namespace classes


def _outcome(argv: list[str], gpu: str, outcome: str, accepted: bool, static=(), sglang=None) -> fuzz.Outcome:
    case = fuzz.FuzzCase(id="c", gpu=gpu, argv=["--model-path", "/m/qwen3-8b", *argv])
    return fuzz.Outcome(case, outcome, accepted, sglang, list(static))


def _rows(table: str) -> dict[str, list[str]]:
    return {
        cells[0]: cells[1:]
        for line in table.splitlines()[2:]
        if (cells := [c.strip() for c in line.strip("|").split("|")])
    }


def test_a_disagreeing_case_counts_against_every_family_of_its_flags():
    false_reject = ("DDT701", "attention backend fa3 has no kernels for sm100 (sm100)")
    range_error = ("DDT002", "argv: --tp-size: 0 is out of range: must be >= 1")
    outcomes = [
        _outcome(
            ["--tp-size", "2", "--hicache-ratio", "2.0", "--attention-backend", "fa3"],
            "sm100",
            "disagree",
            True,
            static=[false_reject],
        ),
        _outcome(["--tp-size", "4"], "sm90", "agree", True),
        _outcome(["--no-enable-lora", "--tp-size", "0"], "sm90", "disagree", True, static=[range_error]),
        _outcome(
            ["--hicache-ratio", "0.5", "--enable-lora"],
            "sm90",
            "disagree",
            False,
            sglang={"message": "--hicache-ratio must be larger than 1"},
        ),  # a miss: SGLang's message names
        _outcome(["--quantization", "mxfp4"], "sm90", "oracle-artefact", False),
    ]
    rows = _rows(families.family_table(outcomes, model_names={"qwen3-8b": "dense"}))
    # cases, SGLang rejects, agree, stricter, disagree, named, artefact, agreement
    assert rows["parallelism"] == ["3", "0", "1", "0", "2", "1", "0", "33.3%"]
    assert rows["hierarchical cache"] == ["2", "1", "0", "0", "2", "1", "0", "0.0%"]
    assert rows["attention"] == rows["attention x sm100"] == ["1", "0", "0", "0", "1", "0", "0", "0.0%"]
    assert rows["lora"] == ["2", "1", "0", "0", "2", "0", "0", "0.0%"]  # set, never named
    assert rows["quantization"] == ["1", "1", "0", "0", "0", "0", "1", "100.0%"]  # artefacts are not judged
    assert rows["model: dense"] == ["5", "2", "1", "0", "3", "0", "1", "25.0%"]
    assert "attention x sm90" not in rows and "speculative" not in rows


def test_a_finding_stricter_by_design_is_not_what_a_false_reject_is_named_for():
    launch_time = ("DDT735", "--max-total-tokens 1 leaves max-running-requests at 0")
    range_error = ("DDT002", "argv: --port: 0 is out of range: must be in [1, 65535]")
    outcome = _outcome(
        ["--max-total-tokens", "1", "--port", "0"],
        "sm90",
        "disagree",
        True,
        static=[launch_time, range_error],
    )
    assert families.named_families(outcome) == {"scheduling", "serving"}
    assert families.named_families(outcome, lambda rule, _: rule == "DDT735") == {"serving"}


def test_a_stricter_by_design_case_counts_as_agreement():
    outcomes = [
        _outcome(["--tp-size", "0"], "sm90", "stricter-by-design", True),
        _outcome(["--tp-size", "2"], "sm90", "agree", True),
    ]
    assert _rows(families.family_table(outcomes))["parallelism"] == [
        "2",
        "0",
        "1",
        "1",
        "0",
        "0",
        "0",
        "100.0%",
    ]


def test_the_snapshot_matches_sglangs_source_where_the_env_is_built():
    site = families.managed_site_packages()
    if site is None or not (site / families.FIELDS_DIR).is_dir():
        pytest.skip("managed SGLang env not built")
    assert families.derive(site, families.payload_patches()) == families.sections(), (
        "flag_sections.json is stale: run `tests/fidelity/families.py --write`"
    )
