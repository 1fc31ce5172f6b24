"""The DDTREE payload's hybrid kernels (the compact GDN verify by default) as a profile's `env:` switches them: DDT116 (the switches'
values and whether they can take effect) and DDT114's scratch with them, checked against the payload's own
hybrid.py."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddtctl.profile import parse_profile_text
from ddtctl.report import finding_record
from ddtctl.rules.ddtree.checks import MIB, verify_scratch
from ddtctl.rules.ddtree.kernels import SGLANG_KERNELS
from ddtctl.validate import validate_document

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "fidelity" / "models"
PAYLOAD_FILES = REPO / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files"
QWEN36_27B = dict(
    linear_layers=48,
    num_key_heads=16,
    num_value_heads=48,
    key_head_dim=128,
    value_head_dim=128,
    conv_kernel=4,
)


def _profile(env: dict[str, str], *, model="qwen3.6-27b", draft="qwen3.6-27b-dflash-b16", gpu=None, **server):
    """A DDTREE profile over the config.json-only model dirs (the seed's flags; `server` overrides, None
    removes)."""
    flags = {
        "tp-size": 8,
        "speculative-algorithm": "DDTREE",
        "speculative-draft-model-path": str(MODELS / draft),
        "speculative-dflash-block-size": 16,
        "speculative-ddtree-budget": 63,
        "speculative-ddtree-topk-cap": 64,
        "attention-backend": "triton",
        "mamba-radix-cache-strategy": "extra_buffer",
        "mamba-full-memory-ratio": 0.5,
    }
    flags.update({k.replace("_", "-"): v for k, v in server.items()})
    lines = [
        "name: t",
        *([f"hardware: {{gpu: {gpu}, count: 8}}"] if gpu else []),
        "model:",
        f"  path: {MODELS / model}",
        "server:",
    ]
    lines += [
        f"  {k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in flags.items() if v is not None
    ]
    if env:
        lines += ["env:"] + [f"  {k}: {v!r}" for k, v in env.items()]
    return "\n".join(lines) + "\n"


def _validate(env, **kw):
    doc = parse_profile_text(_profile(env, **kw), "t.yaml")
    return doc, validate_document(doc)


def _of(result, rule_id):
    return [f for f in result.findings if f.rule == rule_id]


# -- DDT116 --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, value, allowed",
    [
        ("DDTREE_GDN_TREE", "fast", "sglang, compact"),
        ("DDTREE_GDN_TREE", "Compact", "sglang, compact"),  # the payload compares exactly
        ("DDTREE_CONV_TREE", "on", "sglang, compact"),
        ("DDTREE_GDN_TREE_PRECISION", "fp64", "tf32, tf32x3, ieee"),
        ("DDTREE_GDN_ANCESTORS", "Shared", "derive, shared"),  # hybrid.py compares with "shared" exactly
        ("DDTREE_GDN_BLOCK2", "16", "full, rows"),  # hybrid.py compares with "rows" exactly
        ("DDTREE_GDN_SOLVE", "level", "auto, squarings, levels, levels2, levels4, levels16"),  # SOLVE_LEVELS' keys
    ],
)
def test_an_unknown_value_is_an_error_at_the_env_key(name, value, allowed):
    env = {"DDTREE_GDN_TREE": "compact", name: value}
    doc, r = _validate(env)
    (f,) = [x for x in _of(r, "DDT116") if x.severity == "error"]
    assert not r.valid and f"{name}={value!r}" in f.message and f"(allowed: {allowed})" in f.message
    assert f.key == f"env.{name}" and f.line == doc.lines[f"env.{name}"] and f.edits == {}
    record = finding_record(f, file="t.yaml", key_columns=doc.key_columns)
    assert (record.line, record.column, record.key) == (doc.lines[f"env.{name}"], 3, f"env.{name}")


def test_known_values_that_take_effect_are_quiet():
    for env in (
        {"DDTREE_GDN_TREE": "compact", "DDTREE_CONV_TREE": "compact", "DDTREE_GDN_TREE_PRECISION": "tf32x3"},
        {"DDTREE_GDN_TREE": "sglang", "DDTREE_CONV_TREE": "sglang"},
        {"DDTREE_GDN_ANCESTORS": "shared"},  # the compact GDN verify runs by default
        {"DDTREE_GDN_ANCESTORS": "derive"},
        {"DDTREE_GDN_TREE": "compact", "DDTREE_GDN_ANCESTORS": "derive"},
        {"DDTREE_GDN_TREE": "sglang"},  # the ancestor mode unset: nothing to warn of
        {"DDTREE_GDN_BLOCK2": "rows"},
        {"DDTREE_GDN_TREE": "compact", "DDTREE_GDN_BLOCK2": "full"},
        {"DDTREE_GDN_SOLVE": "levels"},
        {"DDTREE_GDN_TREE": "compact", "DDTREE_GDN_SOLVE": "levels2"},
        {"NCCL_P2P_LEVEL": "SYS"},
        {},
    ):
        _, r = _validate(env)
        assert r.valid and not _of(r, "DDT116"), (env, [(f.rule, f.message) for f in r.findings])


def test_an_error_can_be_ignored_as_ddtctl_is_stricter_than_sglang():
    doc = parse_profile_text(_profile({"DDTREE_GDN_TREE": "fast"}), "t.yaml")
    r = validate_document(doc, ignore={"DDT116": "testing a typo"})
    assert r.valid and not _of(r, "DDT116") and [f.rule for f, _ in r.ignored] == ["DDT116"]


def test_fix_leaves_the_env_switches_to_the_user(tmp_path):
    """DDT116 offers no edit (the kernels are a choice): `validate --fix --unsafe-fixes` writes nothing for
    it."""
    import os
    import subprocess

    path = tmp_path / "p.yaml"
    path.write_text(_profile({"DDTREE_GDN_TREE": "fast"}))
    before = path.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "ddtctl", "validate", "--fix", "--unsafe-fixes", str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
        timeout=60,
    )
    assert proc.returncode != 0 and "DDT116" in proc.stdout and "DDTREE_GDN_TREE='fast'" in proc.stdout
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "env, server, reason",
    [
        (
            {"DDTREE_GDN_TREE": "compact"},
            {"speculative_ddtree_budget": 128},
            "takes at most 128 verify nodes, this tree has 129",
        ),
        (
            {"DDTREE_GDN_TREE": "compact"},
            {"mamba_ssm_dtype": "bfloat16"},
            "needs float32 SSM states, --mamba-ssm-dtype gives bfloat16",
        ),
        (
            {"DDTREE_GDN_TREE": "compact", "SGLANG_MAMBA_SSM_DTYPE": "float16"},
            {},
            "needs float32 SSM states, SGLANG_MAMBA_SSM_DTYPE gives float16",
        ),
        (
            {"DDTREE_GDN_TREE": "compact"},
            {"speculative_ddtree_allow_hybrid_unsafe": True},
            "allow-hybrid-unsafe verifies the tree with SGLang's chain kernels",
        ),
        (
            {"DDTREE_CONV_TREE": "compact"},
            {"speculative_ddtree_allow_hybrid_unsafe": True},
            "allow-hybrid-unsafe verifies the tree with SGLang's chain kernels",
        ),
        (
            {"DDTREE_GDN_TREE": "compact"},
            {
                "speculative_algorithm": "DFLASH",
                "speculative_ddtree_budget": None,
                "speculative_ddtree_topk_cap": None,
            },
            "serve DDTREE only, speculative-algorithm is DFLASH",
        ),
    ],
)
def test_a_switch_that_cannot_take_effect_is_a_warning_with_the_reason(env, server, reason):
    doc, r = _validate(env, **server)
    (f,) = _of(r, "DDT116")
    name = next(iter(env))
    kernel = "GDN tree verify" if name == "DDTREE_GDN_TREE" else "tree conv"
    assert f.severity == "warning" and reason in f.message, f.message
    assert (
        f.message.startswith(f"{name}=compact has no effect")
        and f"SGLang's {kernel} runs instead" in f.message
    )
    assert f.line == doc.lines[f"env.{name}"] and f.edits == {}


def test_a_model_without_gdn_layers_keeps_sglangs_kernels():
    _, r = _validate(
        {"DDTREE_GDN_TREE": "compact", "DDTREE_CONV_TREE": "compact"},
        model="qwen3-8b",
        draft="qwen3-8b-dflash-b16",
        mamba_radix_cache_strategy=None,
        mamba_full_memory_ratio=None,
    )
    found = _of(r, "DDT116")
    assert [f.severity for f in found] == ["warning", "warning"]
    assert all("Qwen3ForCausalLM has no recurrent (linear-attention) layers" in f.message for f in found)


def test_a_precision_without_the_compact_verify_is_unused():
    _, r = _validate({"DDTREE_GDN_TREE_PRECISION": "tf32x3"})  # the compact verify runs by default
    assert not _of(r, "DDT116")
    _, r = _validate({"DDTREE_GDN_TREE": "sglang", "DDTREE_GDN_TREE_PRECISION": "tf32x3"})
    (f,) = _of(r, "DDT116")
    assert f.severity == "warning" and "DDTREE_GDN_TREE is not compact" in f.message
    # by default but kept (129 nodes): the precision's own warning says why; at 128 nodes it applies
    _, r = _validate({"DDTREE_GDN_TREE_PRECISION": "tf32"}, speculative_ddtree_budget=128)
    (f,) = _of(r, "DDT116")
    assert f.key == "env.DDTREE_GDN_TREE_PRECISION" and "at most 128 verify nodes" in f.message
    _, r = _validate({"DDTREE_GDN_TREE_PRECISION": "tf32"}, speculative_ddtree_budget=127)
    assert not _of(r, "DDT116")
    # with the compact verify asked for but kept, DDTREE_GDN_TREE's own warning says why (one finding)
    _, r = _validate(
        {"DDTREE_GDN_TREE": "compact", "DDTREE_GDN_TREE_PRECISION": "tf32"}, speculative_ddtree_budget=128
    )
    assert [f.key for f in _of(r, "DDT116")] == ["env.DDTREE_GDN_TREE"]


@pytest.mark.parametrize(
    "env, server, reason",
    [
        ({"DDTREE_GDN_TREE": "sglang"}, {}, "DDTREE_GDN_TREE is not compact"),
        ({}, {"speculative_ddtree_budget": 128}, "takes at most 128 verify nodes, this tree has 129"),
        ({}, {"mamba_ssm_dtype": "bfloat16"}, "needs float32 SSM states, --mamba-ssm-dtype gives bfloat16"),
        (
            {},
            {
                "speculative_algorithm": "DFLASH",
                "speculative_ddtree_budget": None,
                "speculative_ddtree_topk_cap": None,
            },
            "serve DDTREE only, speculative-algorithm is DFLASH",
        ),
    ],
)
@pytest.mark.parametrize("name, mode, sets", [
    ("DDTREE_GDN_ANCESTORS", "shared", "how the compact GDN tree verify gets its ancestor matrix"),
    ("DDTREE_GDN_ANCESTORS", "derive", "how the compact GDN tree verify gets its ancestor matrix"),
    ("DDTREE_GDN_BLOCK2", "rows", "the compact GDN tree verify's second block of 65..128 nodes"),
    ("DDTREE_GDN_BLOCK2", "full", "the compact GDN tree verify's second block of 65..128 nodes"),
    ("DDTREE_GDN_SOLVE", "levels", "how the compact GDN tree verify solves its nodes (squarings or tree levels)"),
])
def test_a_gdn_verify_setting_without_the_compact_verify_is_a_warning_with_the_reason(
    env, server, reason, name, mode, sets
):
    doc, r = _validate({**env, name: mode}, **server)
    (f,) = _of(r, "DDT116")
    assert f.severity == "warning" and f.key == f"env.{name}", f.message
    assert reason in f.message
    assert f.message.startswith(f"{name} has no effect: it sets {sets}, which does not run")
    assert f.line == doc.lines[f"env.{name}"] and f.edits == {}
    # unset, the setting warns of nothing: a default that cannot apply is no one's mistake
    _, r = _validate(env, **server)
    assert not [x for x in _of(r, "DDT116") if x.key == f"env.{name}"]


def test_shared_ancestors_with_a_kept_compact_verify_asked_for_by_name_give_one_finding():
    env = {"DDTREE_GDN_TREE": "compact", "DDTREE_GDN_ANCESTORS": "shared"}
    _, r = _validate(env, speculative_ddtree_budget=128)
    assert [f.key for f in _of(r, "DDT116")] == ["env.DDTREE_GDN_TREE"]


def test_the_ancestor_switchs_values_are_the_payloads(hybrid, monkeypatch):
    """DDT116's known values are what hybrid.py reads: "shared" turns the shared matrix on, "derive" off."""
    from ddtctl.rules.ddtree.kernels import ANCESTORS, ANCESTORS_CHOICES

    for value in ANCESTORS_CHOICES:
        monkeypatch.setenv(ANCESTORS, value)
        assert hybrid.shared_ancestors_wanted() is (value == "shared")
    monkeypatch.delenv(ANCESTORS)
    assert hybrid.shared_ancestors_wanted() and hybrid.ANCESTORS_DEFAULT == "shared"  # the default since 2026-12-01


def test_the_block2_switchs_values_are_the_payloads(hybrid, monkeypatch):
    """"rows" sizes block 2 to its nodes, "full" (hybrid.py BLOCK2_DEFAULT until the H200 run) keeps 64 rows."""
    from ddtctl.rules.ddtree.kernels import BLOCK2, BLOCK2_CHOICES

    assert BLOCK2_CHOICES == ("full", "rows") and hybrid.BLOCK2_DEFAULT == "full"
    for value in BLOCK2_CHOICES:
        monkeypatch.setenv(BLOCK2, value)
        assert hybrid.CompactTreeVerify(depth_bound=4).full_block2 is (value == "full")


def test_the_solve_switchs_values_are_the_payloads(hybrid, monkeypatch):
    """"levels" / "levels2" / "levels4" / "levels16" launch the level-step verify (1 / 2 / 4 / 16 tree levels a
    step), "squarings" keeps gdn_tree.py's, "auto" (hybrid.py SOLVE_DEFAULT since the H200 kernel run) decides per
    verify width."""
    from ddtctl.rules.ddtree.kernels import SOLVE, SOLVE_CHOICES

    assert SOLVE_CHOICES == ("auto", "squarings", "levels", "levels2", "levels4", "levels16")
    assert hybrid.SOLVE_DEFAULT == "auto"
    assert set(SOLVE_CHOICES) == {hybrid.SOLVE_DEFAULT, "squarings", *hybrid.SOLVE_LEVELS}
    for value, levels in zip(SOLVE_CHOICES, (None, None, 1, 2, 4, 16), strict=True):
        monkeypatch.setenv(SOLVE, value)
        verify = hybrid.CompactTreeVerify(depth_bound=4)
        assert (verify.solve, verify.levels_per_step) == (value, levels)
    monkeypatch.delenv(SOLVE)
    assert hybrid.CompactTreeVerify(depth_bound=4).solve == "auto"


def test_unified_memory_runs_the_kernels_but_keeps_the_full_scratch():
    env = {"DDTREE_GDN_TREE": "compact", "DDTREE_CONV_TREE": "compact"}
    _, r = _validate(env, enable_unified_memory=True)
    (f,) = _of(r, "DDT116")
    assert f.severity == "info" and "no memory is saved" in f.message
    (scratch,) = _of(r, "DDT114")  # GPU unknown: the figure, full size, no compact kernels named
    assert "with DDTREE" not in scratch.message and "1,174 MiB per request" in scratch.message


# -- DDT114 with the compact kernels -------------------------------------------------------------------------

def test_the_scratch_names_the_kernels_it_assumes_and_sglangs_size():
    _, stock = _validate(SGLANG_KERNELS)
    msg = _of(stock, "DDT114")[0].message
    assert "1,174 MiB per request" in msg and "with DDTREE" not in msg  # tp 8, width 64: SGLang's kernels
    # SSM rows: 6 x 128 + 6 x 128 + 6 floats instead of 6 x 128 x 128; the conv windows in SGLang's
    # deduplicated layout, [1280, 64 + 2] per request (the compact tree conv) instead of 64 x [1280, 3]
    records = 48 * (6 * 128 * 2 + 6) * 4 * 64
    per_request = records + 48 * 1280 * (64 + 2) * 2
    both = "with DDTREE_GDN_TREE=compact and DDTREE_CONV_TREE=compact"
    defaults = ({}, {"DDTREE_GDN_TREE": "compact"}, {"DDTREE_CONV_TREE": "compact"})  # both compact: default
    for env in (*defaults, {"DDTREE_GDN_TREE": "compact", "DDTREE_CONV_TREE": "compact"}):
        msg = _of(_validate(env)[1], "DDT114")[0].message
        assert f"{both}: {per_request / MIB:,.0f} MiB per request" in msg, env
        assert f"({per_request * 49 / 2**30:,.1f} GiB instead of 56.2 GiB with SGLang's kernels)" in msg
    _, gdn = _validate({"DDTREE_CONV_TREE": "sglang"})  # SGLang's tree conv: dense windows
    msg = _of(gdn, "DDT114")[0].message
    per_request = records + 48 * 1280 * 3 * 2 * 64
    assert f"scratch with DDTREE_GDN_TREE=compact: {per_request / MIB:,.0f} MiB per request" in msg
    assert f"({per_request * 49 / 2**30:,.1f} GiB instead of 56.2 GiB with SGLang's kernels)" in msg
    for env in ({"DDTREE_GDN_TREE": "sglang"}, {"DDTREE_CONV_TREE": "compact", "DDTREE_GDN_TREE": "sglang"}):
        per_request = 48 * 6 * 128 * 128 * 4 * 64 + 48 * 1280 * (64 + 2) * 2
        msg = _of(_validate(env)[1], "DDT114")[0].message
        assert f"scratch with DDTREE_CONV_TREE=compact: {per_request / MIB:,.0f} MiB per request" in msg
    # 129 nodes: SGLang's GDN kernel; the compact tree conv takes any width
    _, kept = _validate({"DDTREE_GDN_TREE": "compact"}, speculative_ddtree_budget=128)
    assert "scratch with DDTREE_CONV_TREE=compact: " in _of(kept, "DDT114")[0].message
    _, kept = _validate({"DDTREE_CONV_TREE": "sglang"}, speculative_ddtree_budget=128)
    assert "with DDTREE" not in _of(kept, "DDT114")[0].message
    # the flagship's budget 64 (65 nodes) takes the compact verify and its records-only scratch
    _, flagship = _validate({}, speculative_ddtree_budget=64)
    per_request = 48 * (6 * 128 * 2 + 6) * 4 * 65 + 48 * 1280 * (65 + 2) * 2
    msg = _of(flagship, "DDT114")[0].message
    assert f"{both}: {per_request / MIB:,.0f} MiB per request" in msg


def test_the_conv_dtype_variable_is_read():
    # SGLang's tree conv (a [1280, 3] window per token) and the compact one (the default: [1280, 64 + 2])
    for conv_tree, columns in (({"DDTREE_CONV_TREE": "sglang"}, 64 * 3), ({}, 64 + 2)):
        _, r = _validate({"SGLANG_MAMBA_CONV_DTYPE": "float32", "DDTREE_GDN_TREE": "sglang", **conv_tree})
        per_request = 48 * 6 * 128 * 128 * 4 * 64 + 48 * 1280 * columns * 4
        assert f"{per_request / MIB:,.0f} MiB per request" in _of(r, "DDT114")[0].message


def test_the_compact_kernels_are_offered_where_they_make_it_fit():
    # tp 1, 48 requests, budget 63: 450 GiB of scratch; the compact GDN verify brings it to 15.5 GiB (fits
    # 96 GB)
    _, r = _validate({"DDTREE_GDN_TREE": "sglang"}, tp_size=1, gpu="RTX_PRO_6000_BLACKWELL")
    (f,) = _of(r, "DDT114")
    assert not r.valid and f.fix.endswith(" or set env DDTREE_GDN_TREE: compact")
    assert f.edits == {"max-running-requests": 6}  # never an edit: the kernels are a choice
    for env in ({}, {"DDTREE_GDN_TREE": "compact"}):  # the default
        _, r = _validate(env, tp_size=1, gpu="RTX_PRO_6000_BLACKWELL")
        assert r.valid and not _of(r, "DDT114")
    # bf16 SSM states: the compact verify cannot run; the compact conv (the default) alone does not fit
    for env in ({}, {"DDTREE_CONV_TREE": "sglang"}):
        _, r = _validate(env, tp_size=1, gpu="RTX_PRO_6000_BLACKWELL", mamba_ssm_dtype="bfloat16")
        assert "env DDTREE" not in _of(r, "DDT114")[0].fix


def test_the_largest_budget_that_fits_may_be_the_compact_verifys_widest():
    """The scratch steps up where the tree outgrows the compact GDN verify (128 nodes): a budget bisection
    over the whole range would miss budget 127 on the compact side of that step."""
    _, r = _validate({}, tp_size=1, gpu="RTX_PRO_6000_BLACKWELL", speculative_ddtree_budget=160)
    (f,) = _of(r, "DDT114")
    # the compact tree conv (the default) runs at either budget: only the GDN verify is new at 127
    assert "set speculative-ddtree-budget: 127 (then the DDTREE_GDN_TREE=compact kernels apply)" in f.fix
    _, r = _validate({"DDTREE_CONV_TREE": "sglang"}, tp_size=1, gpu="RTX_PRO_6000_BLACKWELL",
                     speculative_ddtree_budget=160)
    (f,) = _of(r, "DDT114")  # SGLang's own scratch at 161 nodes
    assert "set speculative-ddtree-budget: 127 (then the DDTREE_GDN_TREE=compact kernels apply)" in f.fix
    _, r = _validate({}, tp_size=1, gpu="RTX_PRO_6000_BLACKWELL", speculative_ddtree_budget=127)
    assert r.valid and not _of(r, "DDT114")
    _, r = _validate({"DDTREE_GDN_TREE": "sglang"}, tp_size=1, gpu="RTX_PRO_6000_BLACKWELL",
                     speculative_ddtree_budget=160)
    (f,) = _of(r, "DDT114")  # SGLang's kernel asked for: budget 127 fits only with the compact one on
    assert "(then" not in f.fix
    assert f.fix.endswith("set speculative-ddtree-budget: 127 and env DDTREE_GDN_TREE: compact")


# -- the same numbers from the payload's own hybrid.py -------------------------------------------------------
@pytest.fixture
def hybrid(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(PAYLOAD_FILES))
    from ddtree_sglang import hybrid as module

    monkeypatch.setattr(module, "_unified_memory", lambda: False)
    return module


def _spec(width: int):
    return SimpleNamespace(
        speculative_algorithm="DDTREE",
        speculative_num_draft_tokens=16,
        speculative_ddtree_verify_width=width,
        speculative_ddtree_allow_hybrid_unsafe=False,
    )


@pytest.mark.parametrize("tp, width", [(1, 64), (8, 128), (8, 65), (8, 33), (2, 16)])
def test_the_compact_scratch_is_what_hybrid_py_allocates(hybrid, monkeypatch, tp, width):
    """hybrid.compact_scratch (the AROUND hook on SGLang's alloc_intermediate_ssm) on a meta device: its shape
    is what DDT114 counts; hybrid.dense_conv_windows keeps SGLang's deduplicated layout for the compact
    conv."""
    import torch

    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(width))
    monkeypatch.setitem(hybrid.STATE, "compact_scratch", False)
    monkeypatch.setenv("DDTREE_GDN_TREE", "compact")
    monkeypatch.setenv("DDTREE_CONV_TREE", "compact")
    slots, hv = 49, 48 // tp
    full = (48, slots, width, hv, 128, 128)
    records = hybrid.compact_scratch(
        lambda *a: pytest.fail("SGLang's allocation"), full, torch.float32, "meta"
    )
    ours = verify_scratch(width=width, linear_tp=tp, compact_ssm=True, dense_conv=False, **QWEN36_27B)
    assert ours.ssm_bytes_per_token * width * slots == records.numel() * records.element_size()
    assert hybrid.dense_conv_windows(lambda: "sglang's choice") == "sglang's choice"  # dedup stays on CUDA
    monkeypatch.setenv("DDTREE_CONV_TREE", "sglang")
    assert hybrid.dense_conv_windows(lambda: "sglang's choice") is False  # SGLang's tree conv: dense windows
    # the budget hybrid.py reserves per request covers exactly this scratch (rounded up to whole draft tokens)
    conv_dim = (2 * 16 * 128 + 48 * 128) // tp
    params = SimpleNamespace(
        shape=SimpleNamespace(conv=[(conv_dim, 3)], temporal=(hv, 128, 128)),
        dtype=SimpleNamespace(conv=torch.bfloat16, temporal=torch.float32),
    )
    tokens = hybrid.compact_budget_width(params, width, ssm=True, conv=True)
    per_token = (conv_dim * 3 * 2 + hv * 128 * 128 * 4) * 48
    assert tokens == math.ceil(ours.per_request / per_token)


def test_the_widest_compact_tree_is_the_payloads_and_its_kernels(hybrid):
    """DDT114 / DDT116's COMPACT_MAX_WIDTH is hybrid.py's gate, which is what gdn_tree.py's tiles take."""
    from ddtctl.kernels import gdn_tree
    from ddtctl.rules.ddtree import kernels as ddtree_kernels

    assert ddtree_kernels.COMPACT_MAX_WIDTH == hybrid.COMPACT_MAX_WIDTH == gdn_tree.MAX_WIDTH == 128


def test_the_kernel_defaults_are_the_payloads(hybrid, monkeypatch):
    """DDT114 / DDT116 read an unset switch as hybrid.py does: both compact kernels by default (the GDN verify
    since its server-level exactness run, the tree conv since its H200 runs)."""
    from ddtctl.rules.ddtree import kernels as ddtree_kernels

    assert ddtree_kernels.DEFAULTS == {
        "DDTREE_GDN_TREE": hybrid.GDN_TREE_DEFAULT,
        "DDTREE_CONV_TREE": hybrid.CONV_TREE_DEFAULT,
    } == {"DDTREE_GDN_TREE": "compact", "DDTREE_CONV_TREE": "compact"}
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(33))
    switches = (("DDTREE_GDN_TREE", hybrid.compact_wanted), ("DDTREE_CONV_TREE", hybrid.conv_compact_wanted))
    for name, wanted in switches:
        monkeypatch.delenv(name, raising=False)
        assert wanted() is True
        monkeypatch.setenv(name, "sglang")
        assert wanted() is False


def test_wider_trees_and_bf16_states_keep_sglangs_scratch_in_hybrid_py_too(hybrid, monkeypatch):
    import torch

    monkeypatch.setitem(hybrid.STATE, "compact_scratch", False)
    monkeypatch.setenv("DDTREE_GDN_TREE", "compact")
    for width, dtype in ((129, torch.float32), (33, torch.bfloat16)):
        monkeypatch.setattr(hybrid, "_spec", lambda width=width: _spec(width))
        full = (48, 49, width, 6, 128, 128)
        assert (
            hybrid.compact_scratch(
                lambda size, dt, dev: torch.zeros(size, dtype=dt, device=dev), full, dtype, "meta"
            ).shape
            == full
        )
    # DDT114 sizes SGLang's SSM scratch there; the compact tree conv (the default) takes any width and dtype
    conv_only = "scratch with DDTREE_CONV_TREE=compact: "
    for conv, named in (({}, conv_only), ({"DDTREE_CONV_TREE": "sglang"}, None)):
        env = {"DDTREE_GDN_TREE": "compact", **conv}
        _, r = _validate(env, speculative_ddtree_budget=128)
        _, bf16 = _validate(env, speculative_ddtree_budget=32, mamba_ssm_dtype="bfloat16")
        for msg in (_of(r, "DDT114")[0].message, _of(bf16, "DDT114")[0].message):
            assert (named in msg and "DDTREE_GDN_TREE" not in msg) if named else "with DDTREE" not in msg


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# -- DDTREE_VERIFY_ATTN (verify_attn.py) ----------------------------------------------------------------------
def test_the_verify_attention_switch_is_checked():
    _, r = _validate({"DDTREE_VERIFY_ATTN": "split"})
    (f,) = _of(r, "DDT116")
    assert f.severity == "error" and "DDTREE_VERIFY_ATTN='split'" in f.message and "extend, splitkv" in f.fix
    for value in ("splitkv", "extend"):  # DDTREE, dense or hybrid: the switch applies
        assert not _of(_validate({"DDTREE_VERIFY_ATTN": value})[1], "DDT116")
        dense = _validate({"DDTREE_VERIFY_ATTN": value}, model="qwen3-8b", draft="qwen3-8b-dflash-b16",
                          mamba_radix_cache_strategy=None, mamba_full_memory_ratio=None)[1]
        assert not _of(dense, "DDT116")
    _, r = _validate({"DDTREE_VERIFY_ATTN": "splitkv"}, speculative_algorithm="DFLASH",
                     speculative_ddtree_budget=None, speculative_ddtree_topk_cap=None)
    (f,) = _of(r, "DDT116")
    assert f.severity == "warning" and "serves DDTREE's target verify only" in f.message
    assert f.key == "env.DDTREE_VERIFY_ATTN"
