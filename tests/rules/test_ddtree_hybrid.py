"""DDTREE on hybrid targets under the overlap scheduler, DDT112/DDT113 (the two hybrid modes), DDT114 (the recurrent verify scratch), DDT120 (what the bundled worker refuses) and DDT605's overlap clause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtctl.model_facts import read_model_facts
from ddtctl.rules.ddtree.checks import MIB, verify_scratch
from ddtctl.rules.ddtree.kernels import SGLANG_KERNELS
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


def _findings(argv, gpu=RTX, env=None):
    r = validate_argv(argv, gpu=gpu, env=env)
    return r, {f.rule: f for f in r.findings}


def test_seed_is_valid_with_or_without_the_overlap_scheduler():
    """DDTREE runs under the overlap scheduler (SGLang's default, as DFLASH): nothing to say either way."""
    for argv in (SEED, SEED + ["--disable-overlap-schedule"]):
        r, f = _findings(argv)
        assert r.valid, [(x.rule, x.message) for x in r.errors]
        assert not r.errors and not r.findings, [(x.rule, x.message) for x in r.findings]


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


# -- DDT114 -----------------------------------------------------------------------------------------------------------
# the compact GDN verify (the default) takes at most 128 nodes: budget 127 brings it in
COMPACT_AT_127 = "set speculative-ddtree-budget: 127 (then the DDTREE_GDN_TREE=compact kernels apply)"
SGLANG_GDN = {"DDTREE_GDN_TREE": "sglang"}  # the server keeps SGLang's GDN tree kernel and its full states
# ... or SGLang's tree conv with its dense windows (the default compact tree conv: deduplicated windows)
SGLANG_CONV = {"DDTREE_CONV_TREE": "sglang"}
QWEN36_27B = dict(linear_layers=48, num_key_heads=16, num_value_heads=48, key_head_dim=128, value_head_dim=128,
                  conv_kernel=4)


def _qwen36_tp1(width, *, dense_conv, ssm_bytes=4, records=False):
    """A Qwen3.6-27B's scratch per request at tp 1, by hand: per verify token 48 layers of [48, 128, 128] SSM
    state (or the compact verify's records, 48 x 128 + 48 x 128 + 48 floats); bf16 conv windows [10240, 3] per
    token (SGLang's tree conv) or one [10240, width + 2] buffer (the compact tree conv, SGLang's dedup
    layout)."""
    row = (48 * 128 * 2 + 48) * 4 if records else 48 * 128 * 128 * ssm_bytes
    return 48 * row * width + 48 * 10240 * (width * 3 if dense_conv else width + 2) * 2


def test_scratch_per_verify_token_of_a_qwen36_27b_is_147_mib_at_tp1():
    s = verify_scratch(width=1, linear_tp=1, **QWEN36_27B)
    assert s.ssm_bytes_per_token == 48 * 48 * 128 * 128 * 4  # 144 MiB of float32 SSM state
    assert s.conv_bytes_per_request == 48 * (2 * 16 * 128 + 48 * 128) * 3 * 2  # 2.8 MiB of bf16 conv windows
    assert s.per_request / MIB == pytest.approx(146.8125)
    assert round(s.per_request / MIB) == 147
    # the config's shape gives the same numbers (full_attention_interval 4 over 64 layers: 48 linear)
    facts = read_model_facts(Q36)
    assert (facts.num_linear_layers, facts.linear_num_key_heads, facts.linear_num_value_heads) == (48, 16, 48)
    assert (facts.linear_key_head_dim, facts.linear_value_head_dim, facts.linear_conv_kernel_dim) == (128, 128, 4)


def test_scratch_of_the_flagship_at_tp8_and_tp1():
    tp8 = verify_scratch(width=65, linear_tp=8, **QWEN36_27B)
    tp1 = verify_scratch(width=65, linear_tp=1, **QWEN36_27B)
    assert tp8.per_request == pytest.approx(tp1.per_request / 8)
    assert round(tp8.per_request / MIB) == 1193 and round(tp8.total(48) / MIB) == 58450
    assert round(tp1.per_request / MIB) == 9543 and round(tp1.total(48) / MIB) == 467598
    # bf16 SSM state halves the dominant part; the chain kernels (unsafe mode) share one conv window per request
    assert verify_scratch(width=65, ssm_dtype_bytes=2, **QWEN36_27B).ssm_bytes_per_token * 2 == tp1.ssm_bytes_per_token
    chain = verify_scratch(width=65, dense_conv=False, **QWEN36_27B)
    assert chain.conv_bytes_per_request == 48 * 10240 * (65 + 2) * 2


def test_flagship_fits_at_tp8_and_at_tp1_only_with_the_compact_verify():
    r, f = _findings(SEED)
    assert "DDT114" not in f
    # budget 64 = 65 nodes: the compact GDN verify (the default) and its records-only scratch fit one GPU
    r, f = _findings(_with(SEED, tp_size=1))
    assert r.valid and "DDT114" not in f
    r, f = _findings(_with(SEED, tp_size=1), env=SGLANG_KERNELS)
    assert not r.valid and f["DDT114"].severity == "error"
    msg = f["DDT114"].message
    assert "scratch: 9,543 MiB per request" in msg and "467,598 MiB for 48 running requests + 1 slot" in msg
    assert "96 GB x mem-fraction-static 0.78" in msg
    # the payload's compact GDN verify would fit too: offered, never an edit
    assert f["DDT114"].fix == (
        "set max-running-requests: 6 or set tp-size: 8 or set env DDTREE_GDN_TREE: compact")
    assert f["DDT114"].edits == {"max-running-requests": 6}
    # SGLang's GDN kernel beside the compact tree conv (the default): its deduplicated windows save 120 MiB
    # a request, not enough; the same fixes
    r, f = _findings(_with(SEED, tp_size=1), env=SGLANG_GDN)
    per_request = _qwen36_tp1(65, dense_conv=False)
    assert round(per_request / MIB) == 9423 and not r.valid
    assert f"with DDTREE_CONV_TREE=compact: {per_request / MIB:,.0f} MiB per request" in f["DDT114"].message
    assert f["DDT114"].fix == (
        "set max-running-requests: 6 or set tp-size: 8 or set env DDTREE_GDN_TREE: compact")
    for env in (SGLANG_KERNELS, SGLANG_GDN):
        assert "DDT114" not in _findings(_with(SEED, tp_size=1, max_running_requests=6), env=env)[1]
        assert "DDT114" in _findings(_with(SEED, tp_size=1, max_running_requests=7), env=env)[1]


def test_a_tree_wider_than_the_compact_verify_is_offered_its_widest_budget():
    """Budget 128 = 129 nodes: wider than the compact GDN verify takes, so SGLang's kernel and its full states
    stay (18.3 GiB per request at tp 1 beside the compact tree conv, which takes any width; 18.5 with SGLang's
    tree conv too); budget 127 brings the compact verify back, and fits."""
    r, f = _findings(_with(SEED, tp_size=1, speculative_ddtree_budget=128))
    msg = f["DDT114"].message
    per_request = _qwen36_tp1(129, dense_conv=False)
    assert not r.valid and f"scratch with DDTREE_CONV_TREE=compact: {per_request / MIB:,.0f} MiB per" in msg
    assert round(per_request / MIB) == 18699 and "verify width 129" in msg
    assert f["DDT114"].fix == "set max-running-requests: 2 or " + COMPACT_AT_127
    r, f = _findings(_with(SEED, tp_size=1, speculative_ddtree_budget=128), env=SGLANG_CONV)
    assert not r.valid and "scratch: 18,939 MiB per request" in f["DDT114"].message
    assert round(_qwen36_tp1(129, dense_conv=True) / MIB) == 18939
    assert f["DDT114"].fix == "set max-running-requests: 2 or " + COMPACT_AT_127
    r, f = _findings(_with(SEED, tp_size=1, speculative_ddtree_budget=127))
    assert r.valid and "DDT114" not in f


def test_a_smaller_budget_is_proposed_when_it_fits():
    # tp 8, 64 requests, SGLang's GDN kernel: 77 GB > 71 GB at budget 64; a smaller tree fits
    r, f = _findings(_with(SEED, max_running_requests=64), env=SGLANG_GDN)
    assert "set speculative-ddtree-budget: " in f["DDT114"].fix
    budget = int(f["DDT114"].fix.split("speculative-ddtree-budget: ")[1].split()[0])
    assert 15 <= budget < 64
    smaller = _with(SEED, max_running_requests=64, speculative_ddtree_budget=budget)
    assert "DDT114" not in _findings(smaller, env=SGLANG_GDN)[1]
    wider = _with(SEED, max_running_requests=64, speculative_ddtree_budget=budget + 1)
    assert "DDT114" in _findings(wider, env=SGLANG_GDN)[1]


def test_mem_fraction_and_ssm_dtype_are_read():
    tp1 = _with(SEED, tp_size=1, max_running_requests=6)
    for env in (SGLANG_KERNELS, SGLANG_GDN):
        assert "DDT114" not in _findings(tp1, env=env)[1]
        assert "DDT114" in _findings(_with(tp1, mem_fraction_static=0.6), env=env)[1]
    # bf16 states: the compact verify cannot run (the default kernel too), SGLang's per-token scratch halves;
    # 96 GB x 0.78 holds 13 requests + 1 slot with SGLang's dense conv windows (4,863 MiB a request), 14 with
    # the compact tree conv's deduplicated ones (the default, 4,743 MiB)
    bf16 = _with(tp1, mamba_ssm_dtype="bfloat16")
    for env, dense, most in ((SGLANG_KERNELS, True, 13), (None, False, 14)):
        assert int(96e9 * 0.78 // _qwen36_tp1(65, dense_conv=dense, ssm_bytes=2)) - 1 == most
        assert "DDT114" not in _findings(_with(bf16, max_running_requests=most), env=env)[1]
        assert "DDT114" in _findings(_with(bf16, max_running_requests=most + 1), env=env)[1]


def test_local_weights_are_subtracted(tmp_path):
    model = tmp_path / "q36"
    model.mkdir()
    (model / "config.json").write_text((Q36 / "config.json").read_text())
    argv = _with(SEED, model_path=model, tp_size=1, max_running_requests=6)
    assert "DDT114" not in _findings(argv, env=SGLANG_KERNELS)[1]
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 55_000_000_000},
                                                                     "weight_map": {}}))
    f = _findings(argv, env=SGLANG_KERNELS)[1]["DDT114"]
    assert "18,959 MiB = 96 GB x mem-fraction-static 0.78 - 52,452 MiB of weights" in f.message
    # not even one request (+ the pool's slot) fits with SGLang's kernels: a smaller tree, more GPUs or the
    # compact verify; with the compact tree conv's deduplicated windows (the default) one does
    room = 96e9 * 0.78 - 55e9
    assert 2 * _qwen36_tp1(65, dense_conv=False) <= room < 2 * _qwen36_tp1(65, dense_conv=True)
    assert f.fix == "set speculative-ddtree-budget: 17 or set tp-size: 2 or set env DDTREE_GDN_TREE: compact"
    f = _findings(argv, env=SGLANG_GDN)[1]["DDT114"]
    assert f.fix == ("set max-running-requests: 1 or set speculative-ddtree-budget: 17 or set tp-size: 2 "
                     "or set env DDTREE_GDN_TREE: compact") and f.edits == {"max-running-requests": 1}
    assert "DDT114" not in _findings(argv)[1]  # the compact verify (the default) fits beside the weights
    f = _findings(_with(argv, speculative_ddtree_budget=128))[1]["DDT114"]  # 129 nodes: SGLang's kernel
    assert f.fix == COMPACT_AT_127 + " or set tp-size: 4"


def test_without_a_gpu_the_scratch_is_an_info_line():
    r, f = _findings(_with(SEED, tp_size=1), gpu=None)
    assert r.valid and f["DDT114"].severity == "info"
    msg = f["DDT114"].message
    both = _qwen36_tp1(65, records=True, dense_conv=False)  # the defaults: both compact kernels
    assert round(both / MIB) == 210 and "GPU unknown" in msg
    assert f"with DDTREE_GDN_TREE=compact and DDTREE_CONV_TREE=compact: {both / MIB:,.0f} MiB per" in msg
    assert f"({both * 49 / 2**30:,.1f} GiB instead of 456.6 GiB with SGLang's kernels)" in msg
    r, f = _findings(_with(SEED, tp_size=1), gpu=None, env=SGLANG_CONV)
    msg = f["DDT114"].message
    assert round(_qwen36_tp1(65, records=True, dense_conv=True) / MIB) == 330
    assert "with DDTREE_GDN_TREE=compact: 330 MiB per request" in msg
    assert "(15.8 GiB instead of 456.6 GiB with SGLang's kernels)" in msg
    r, f = _findings(_with(SEED, tp_size=1), gpu=None, env=SGLANG_KERNELS)
    assert r.valid and f["DDT114"].severity == "info"
    assert "scratch: 9,543 MiB per request" in f["DDT114"].message
    r, f = _findings(_with(SEED, tp_size=1), gpu=None, env=SGLANG_GDN)
    assert r.valid and "with DDTREE_CONV_TREE=compact: 9,423 MiB per request" in f["DDT114"].message
    dense = ["--model-path", str(MODELS / "qwen3-8b"), "--speculative-algorithm", "DDTREE",
             "--speculative-draft-model-path", str(MODELS / "qwen3-8b-dflash-b16")]
    assert "DDT114" not in {x.rule for x in validate_argv(dense, gpu=RTX).findings}


# -- DDT120 / DDT605 --------------------------------------------------------------------------------------------------
def test_worker_capability_no_longer_mentions_tp():
    assert "DDT120" not in _findings(SEED)[1]
    dp = _findings(SEED + ["--enable-dp-attention", "--dp-size", "2", "--enable-dp-lm-head"])[1]
    assert dp["DDT120"].severity == "warning" and "DP attention" in dp["DDT120"].message
    fa3 = _findings(_with(SEED, attention_backend="fa3"), gpu="H200")[1]
    assert "triton" in fa3["DDT120"].message


def test_the_seeds_own_argv_without_an_attention_backend_resolves_triton_as_an_override():
    """The seed's command names no attention backend: SGLang with the payload declares triton (DDT115, info), so it
    validates clean -- no DDT120; an explicit other backend (any of the three flags) still warns."""
    seed = [a for a in SEED if a not in ("--attention-backend", "triton")]
    r, f = _findings(seed, gpu=RTX)
    assert r.valid and "DDT120" not in f and f["DDT115"].severity == "info"
    assert "attention_backend=triton" in f["DDT115"].message
    assert "DDT115" not in _findings(SEED, gpu=RTX)[1]
    for flag in ("--attention-backend", "--decode-attention-backend", "--prefill-attention-backend"):
        f = _findings(seed + [flag, "flashinfer"], gpu=RTX)[1]
        assert "DDT115" not in f and "flashinfer" in f["DDT120"].message, flag


def test_pipeline_parallel_overlap_is_an_override_not_an_error():
    argv = ["--model-path", str(MODELS / "qwen3-8b"), "--pp-size", "2"]
    r, f = _findings(argv, gpu="H200")
    assert r.valid and f["DDT605"].severity == "info" and "disable_overlap_schedule=True" in f["DDT605"].message
    eagle = argv + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                    str(MODELS / "qwen3-8b-eagle3")]
    assert "DDT605" in {x.rule for x in validate_argv(eagle).errors}  # the speculative clause stays an error


# -- the flagship profile ---------------------------------------------------------------------------------------------
PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "qwen36-27b-ddtree.yaml"


def test_flagship_profile_is_clean_with_the_hosts_configs_cached(tmp_path, monkeypatch):
    """profiles/qwen36-27b-ddtree.yaml with the host's config.json cached (what `ddtctl facts ct200` does): no error,
    no DDT120, and DDT114 has run (the scratch fits 8 RTX PRO 6000s) -- also without disable-overlap-schedule."""
    from ddtctl.paths import model_config_cache_dir
    from ddtctl.validate import validate_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for remote, local in (("/root/models/Qwen3.6-27B", MODELS / "qwen3.5-27b-text"),  # Qwen3_5ForCausalLM, as named
                          ("/root/models/Qwen3.6-27B-DFlash", DRAFT)):
        d = model_config_cache_dir("ct200", remote)
        d.mkdir(parents=True)
        (d / "config.json").write_text((local / "config.json").read_text())
    for text in (PROFILE.read_text(), PROFILE.read_text().replace("  disable-overlap-schedule: true", "")):
        path = tmp_path / "flagship.yaml"
        path.write_text(text)
        r = validate_path(path)
        assert r.valid and r.errors == [], [(f.rule, f.message) for f in r.findings]
        rules = {f.rule for f in r.findings}
        assert not rules & {"DDT000", "DDT120", "DDT114"}, [(f.rule, f.message) for f in r.findings]
    assert rules == set()  # with or without disable-overlap-schedule: nothing to say
    tp1 = tmp_path / "tp1.yaml"
    tp1.write_text(PROFILE.read_text().replace("  tp-size: 8", "  tp-size: 1"))
    assert "DDT114" not in {x.rule for x in validate_path(tp1).findings}  # the compact verify's scratch fits
    assert PROFILE.read_text().endswith("env:\n  NCCL_P2P_LEVEL: SYS\n")
    tp1.write_text(tp1.read_text() + "  DDTREE_GDN_TREE: sglang\n")
    f = next(x for x in validate_path(tp1).findings if x.rule == "DDT114")
    assert f.severity == "error"
    assert f.fix == "set max-running-requests: 6 or set tp-size: 8 or set env DDTREE_GDN_TREE: compact"
