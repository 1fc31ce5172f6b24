"""DDTREE on hybrid targets and the overlap override: DDT110 (info, SGLang overrides), DDT112/DDT113 (the two hybrid
modes), DDT120 (what the bundled worker refuses) and DDT605's overlap clause."""

from __future__ import annotations

from pathlib import Path

from ddtctl.validate import validate_argv

MODELS = Path(__file__).resolve().parents[1] / "fidelity" / "models"
Q36, DRAFT = MODELS / "qwen3.6-27b", MODELS / "qwen3.6-27b-dflash-b16"
RTX = "RTX_PRO_6000_BLACKWELL"
# The seed's launch (profiles/qwen36-27b-ddtree.yaml) as argv, without --disable-overlap-schedule.
SEED = ["--model-path", str(Q36), "--tp-size", "8", "--speculative-algorithm", "DDTREE",
        "--speculative-draft-model-path", str(DRAFT), "--speculative-dflash-block-size", "16",
        "--speculative-ddtree-budget", "64", "--speculative-ddtree-topk-cap", "64",
        "--speculative-ddtree-shadow-linear", "--attention-backend", "triton", "--mamba-radix-cache-strategy", "extra_buffer",
        "--mamba-full-memory-ratio", "0.5"]


def _with(argv, **flags):
    """argv with --flag value replaced or appended (None removes a switch / option)."""
    out = list(argv)
    for dest, value in flags.items():
        opt = "--" + dest.replace("_", "-")
        if opt in out:
            i = out.index(opt)
            takes_value = i + 1 < len(out) and not out[i + 1].startswith("--")
            del out[i:i + (2 if takes_value else 1)]
        if value is True:
            out.append(opt)
        elif value is not None:
            out += [opt, str(value)]
    return out


def _findings(argv, gpu=RTX):
    r = validate_argv(argv, gpu=gpu)
    return r, {f.rule: f for f in r.findings}


def test_seed_without_disable_overlap_is_valid_with_the_override_as_info():
    r, f = _findings(SEED)
    assert r.valid, [(x.rule, x.message) for x in r.errors]
    assert not r.errors and "DDT120" not in f and "DDT112" not in f
    assert f["DDT110"].severity == "info"
    assert "accepted depth is known only after verification; the overlap scheduler is disabled" in f["DDT110"].message
    assert not f["DDT110"].edits  # nothing for --fix to do
    r, f = _findings(SEED + ["--disable-overlap-schedule"])
    assert r.valid and "DDT110" not in f


def test_hybrid_without_either_flag_is_exact_trees_and_valid():
    r, f = _findings(_with(SEED, speculative_ddtree_shadow_linear=None))
    assert r.valid and not ({"DDT112", "DDT113"} & set(f))


def test_both_hybrid_flags_contradict():
    r, f = _findings(SEED + ["--speculative-ddtree-allow-hybrid-unsafe"])
    assert not r.valid and [x.rule for x in r.errors] == ["DDT112"]
    assert "DDT113" not in f
    assert f["DDT112"].edits == {"speculative-ddtree-allow-hybrid-unsafe": None}
    # contradictory on a dense model too (the flags do nothing there, together they still make no sense)
    dense = ["--model-path", str(MODELS / "qwen3-8b"), "--speculative-algorithm", "DDTREE",
             "--speculative-draft-model-path", str(MODELS / "qwen3-8b-dflash-b16"),
             "--speculative-ddtree-shadow-linear", "--speculative-ddtree-allow-hybrid-unsafe"]
    assert "DDT112" in {x.rule for x in validate_argv(dense).errors}


def test_allow_hybrid_unsafe_alone_is_a_warning():
    r, f = _findings(_with(SEED, speculative_ddtree_shadow_linear=None, speculative_ddtree_allow_hybrid_unsafe=True))
    assert r.valid and f["DDT113"].severity == "warning"
    assert "sibling branches share recurrent" in f["DDT113"].message
    dense = ["--model-path", str(MODELS / "qwen3-8b"), "--speculative-algorithm", "DDTREE",
             "--speculative-draft-model-path", str(MODELS / "qwen3-8b-dflash-b16"),
             "--speculative-ddtree-allow-hybrid-unsafe"]
    assert "DDT113" not in {x.rule for x in validate_argv(dense).findings}  # no recurrent layers, nothing shared


# -- DDT120 / DDT605 --------------------------------------------------------------------------------------------------
def test_worker_capability_no_longer_mentions_tp():
    assert "DDT120" not in _findings(SEED)[1]
    dp = _findings(SEED + ["--enable-dp-attention", "--dp-size", "2", "--enable-dp-lm-head"])[1]
    assert dp["DDT120"].severity == "warning" and "DP attention" in dp["DDT120"].message
    fa3 = _findings(_with(SEED, attention_backend="fa3"), gpu="H200")[1]
    assert "triton" in fa3["DDT120"].message


def test_pipeline_parallel_overlap_is_an_override_not_an_error():
    argv = ["--model-path", str(MODELS / "qwen3-8b"), "--pp-size", "2"]
    r, f = _findings(argv, gpu="H200")
    assert r.valid and f["DDT605"].severity == "info" and "disable_overlap_schedule=True" in f["DDT605"].message
    eagle = argv + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                    str(MODELS / "qwen3-8b-eagle3")]
    assert "DDT605" in {x.rule for x in validate_argv(eagle).errors}  # the speculative clause stays an error

