"""Hybrid (GDN) trees and the vocab-parallel draft top-K: the worker's CPU-testable pieces.

* hybrid.py's hooks switch SGLang's GDN backend into its tree mode, keep dense conv windows for SGLang's tree
  conv (DDTREE_CONV_TREE=sglang; the compact one, the default, keeps SGLang's deduplicated ones), budget the
  verify width, and put the compact tree verify, tree conv and commit in place -- for DDTREE in tree mode
  only; their targets exist in the pinned SGLang (managed env). (The compact kernels' exactness:
  tests/kernels/test_gdn_tree.py and tests/bench/test_hybrid_tree_kernels.py.)
* the commit index mapping: SGLang's flat accept index of an accepted tree path, and SGLang 0.5.23's own
  `_verify_commit_step_indices` (run on it, CPU path) gives the last accepted NODE and the track step at the node of
  the accepted path where the interval is crossed -- not a chain position.
* `prepare_from_topk` (what the worker builds from a gathered top-K) equals `prepare` from full logits.
* the test-only oracle drafter's top-K rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from ddtree_sglang import hybrid  # noqa: E402
from ddtree_sglang import tree_prep as tp  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PAYLOAD_FILES = REPO / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files"


def _spec(**kw):
    base = {"speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": 16,
            "speculative_ddtree_verify_width": 65, "speculative_ddtree_allow_hybrid_unsafe": False}
    base.update(kw)
    return SimpleNamespace(**base)


class GDNAttnBackend:  # the hook keys on the class name, like SGLang's
    topk = 1


class KDAAttnBackend:
    topk = 1


@pytest.mark.parametrize("spec, runner_is_draft, backend_cls, expect_topk", [
    (_spec(), False, GDNAttnBackend, hybrid.TREE_TOPK),  # DDTREE target: tree mode
    (_spec(), True, GDNAttnBackend, 1),  # a drafter is never switched
    (_spec(speculative_ddtree_allow_hybrid_unsafe=True), False, GDNAttnBackend, 1),  # unsafe: chain kernels
    (_spec(speculative_algorithm="DFLASH"), False, GDNAttnBackend, 1),  # not DDTREE
    (_spec(), False, KDAAttnBackend, 1),  # other linear backends stay (the worker refuses tree mode there)
])
def test_tree_backend_hook(monkeypatch, spec, runner_is_draft, backend_cls, expect_topk):
    monkeypatch.setattr(hybrid, "_spec", lambda: spec)
    backend = backend_cls()
    hybrid.tree_backend(None, backend, SimpleNamespace(is_draft_worker=runner_is_draft))
    assert backend.topk == expect_topk


def test_conv_windows_stay_dense_for_trees_only(monkeypatch):
    """With SGLang's tree conv, which writes a whole window per node."""
    original = lambda *a, **k: True  # noqa: E731  (sglang: dedup on CUDA when topk <= 1)
    monkeypatch.setenv("DDTREE_CONV_TREE", "sglang")
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec())
    assert hybrid.dense_conv_windows(original, False, False, 1, False) is False
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_ddtree_allow_hybrid_unsafe=True))
    assert hybrid.dense_conv_windows(original, False, False, 1, False) is True
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_algorithm="DFLASH"))
    assert hybrid.dense_conv_windows(original, False, False, 1, False) is True


def test_the_compact_tree_conv_keeps_sglangs_deduplicated_windows(monkeypatch):
    """One input column per node fits the layout SGLang picks for chains (tests/kernels/test_conv_tree.py)."""
    original = lambda *a, **k: True  # noqa: E731
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec())
    monkeypatch.setenv("DDTREE_CONV_TREE", "compact")
    assert hybrid.dense_conv_windows(original, False, False, 1, False) is True
    monkeypatch.setenv("DDTREE_CONV_TREE", "sglang")
    assert hybrid.dense_conv_windows(original, False, False, 1, False) is False
    monkeypatch.delenv("DDTREE_CONV_TREE")  # the default: the compact tree conv
    assert hybrid.dense_conv_windows(original, False, False, 1, False) is True


def _conv_call(bs=2, width=5, dim=8, kw=4):
    from ddtree_sglang.tree_prep import retrive_arrays

    g = torch.Generator().manual_seed(3)
    parents = torch.tensor([[-1, 0, 0, 1, 2], [-1, 0, 1, 2, 3]])[:bs, :width]
    _, nt, ns = retrive_arrays(parents)
    args = (torch.randn(bs, width, dim, generator=g).transpose(1, 2),
            torch.randn(bs + 1, dim, kw - 1, generator=g), torch.randn(dim, kw, generator=g), None, "silu")
    kwargs = dict(conv_state_indices=torch.tensor([2, 0], dtype=torch.int32)[:bs],
                  intermediate_conv_window=torch.zeros(bs + 1, width, dim, kw - 1),
                  intermediate_state_indices=torch.arange(bs, dtype=torch.int32), retrieve_next_token=nt,
                  retrieve_next_sibling=ns, retrieve_parent_token=torch.empty_like(nt))
    return parents, args, kwargs


def test_the_conv_hook_runs_the_compact_tree_conv_for_ddtree_tree_calls_only(monkeypatch):
    from ddtctl.kernels import conv_tree

    monkeypatch.setattr(hybrid, "_spec", lambda: _spec())
    monkeypatch.setitem(hybrid.STATE, "conv_tree_calls", 0)
    calls = []
    original = lambda *a, **k: calls.append((a, k)) or "sglang"  # noqa: E731
    parents, args, kwargs = _conv_call()
    monkeypatch.setenv("DDTREE_CONV_TREE", "sglang")
    assert hybrid.compact_tree_conv(original, *args, **kwargs) == "sglang"  # SGLang's tree conv asked for
    monkeypatch.delenv("DDTREE_CONV_TREE")  # the default: the compact tree conv
    chain = dict(kwargs, retrieve_next_token=None, retrieve_next_sibling=None, retrieve_parent_token=None)
    assert hybrid.compact_tree_conv(original, *args, **chain) == "sglang"  # chain verify / decode: SGLang's
    assert len(calls) == 2 and hybrid.STATE["conv_tree_calls"] == 0
    out = hybrid.compact_tree_conv(original, *args, **kwargs)
    assert len(calls) == 2 and hybrid.STATE["conv_tree_calls"] == 1
    for r in range(2):
        state = args[1][int(kwargs["conv_state_indices"][r])]
        ref, _ = conv_tree.tree_conv_reference(args[0][r].T, args[2], None, state, parents[r].tolist())
        assert (out[r].T.double() - ref).abs().max() < 1e-5
        assert kwargs["retrieve_parent_token"][r].tolist() == [0] + parents[r, 1:].tolist()
    with pytest.raises(RuntimeError, match="unexpected tree conv call .*; set DDTREE_CONV_TREE=sglang"):
        hybrid.compact_tree_conv(original, *args, **kwargs, num_accept_tokens=torch.ones(2, dtype=torch.int32))
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_ddtree_allow_hybrid_unsafe=True))
    assert hybrid.compact_tree_conv(original, *args, **kwargs) == "sglang"  # not tree mode


def test_the_commit_hook_commits_compact_conv_windows_and_leaves_the_rest_to_sglang(monkeypatch):
    """DDTREE_CONV_TREE=compact alone: the conv state becomes the accepted node's window (from the records and
    the pre-step state), SGLang's scatter gets the SSM part with the conv states emptied; with the compact GDN
    kernel too, SGLang's scatter is not called; a compact commit with no compact tree conv before it is
    refused."""
    from ddtctl.kernels import conv_tree

    monkeypatch.setattr(hybrid, "_spec", lambda: _spec())
    monkeypatch.setenv("DDTREE_CONV_TREE", "compact")
    monkeypatch.setitem(hybrid.STATE, "compact_backends", 0)
    monkeypatch.setitem(hybrid.STATE, "conv_tree_calls", 0)
    parents, args, kwargs = _conv_call()
    x, conv_state = args[0], args[1]
    hybrid.compact_tree_conv(lambda *a, **k: None, *args, **kwargs)
    pre = conv_state.clone()
    caches = SimpleNamespace(temporal=torch.zeros(1, 3, 2), intermediate_ssm=torch.zeros(1, 3, 5, 2),
                             conv=[conv_state[None]],
                             intermediate_conv_window=[kwargs["intermediate_conv_window"][None]])
    seen = []
    original = lambda c, *a: seen.append((c.temporal.numel(), [t.numel() for t in c.conv], a))  # noqa: E731
    idx = kwargs["conv_state_indices"]
    accept = torch.tensor([[0, 2, 4], [5, 6, -1]])  # request 0: 0 -> 2 -> 4; request 1: 0 -> 1
    hybrid.pending_path(accept, torch.tensor([3, 2], dtype=torch.int32), 5)
    hybrid.commit_tree_states(original, caches, idx, torch.tensor([4, 1]), None, None)
    for r, node in ((0, 4), (1, 1)):
        _, win = conv_tree.tree_conv_reference(x[r].T, args[2], None, pre[int(idx[r])], parents[r].tolist())
        assert torch.equal(conv_state[int(idx[r])].double(), win[node])
    (ssm_numel, conv_numels, rest), = seen  # SGLang's scatter: the SSM state kept, the conv states emptied
    assert ssm_numel == 6 and conv_numels == [0] and rest[0] is idx and rest[2:] == (None, None, None)
    monkeypatch.setitem(hybrid.STATE, "compact_backends", 1)
    monkeypatch.setitem(hybrid.STATE, "key_heads", 1)
    gdn = SimpleNamespace(tree_gdn_commit=lambda **kw: seen.append("gdn"))
    monkeypatch.setattr(hybrid, "_gdn_tree", lambda: gdn)
    hybrid.pending_path(accept, torch.tensor([3, 2], dtype=torch.int32), 5)
    hybrid.commit_tree_states(original, caches, idx, torch.tensor([4, 1]), None, None)
    assert len(seen) == 2 and seen[1] == "gdn"  # both parts compact: no SGLang scatter
    monkeypatch.setitem(hybrid.STATE, "conv_tree_calls", 0)
    hybrid.pending_path(accept, torch.tensor([3, 2], dtype=torch.int32), 5)
    with pytest.raises(RuntimeError, match="without a compact tree conv .*; set DDTREE_CONV_TREE=sglang"):
        hybrid.commit_tree_states(original, caches, idx, torch.tensor([4, 1]), None, None)


def test_the_budget_reserves_the_deduplicated_conv_inputs_with_the_compact_tree_conv(monkeypatch):
    """Per slot: the conv inputs in SGLang's deduplicated layout (width + 2 columns) instead of a 3-column
    window per token. Qwen3.6-27B at tp 1, compact GDN records too: 33 tokens budget like
    ceil((10240 x 35 x 2 + 33 x 49344) / (61440 + 3145728)) = 1 (2 without), 65 like 2 (3 without)."""
    params = _qwen36_params()
    assert hybrid.compact_budget_width(params, 33, ssm=True, conv=True) == 1
    assert hybrid.compact_budget_width(params, 65, ssm=True, conv=True) == 2
    assert hybrid.compact_budget_width(params, 65, ssm=True, conv=False) == 3
    assert hybrid.compact_budget_width(params, 65, ssm=False, conv=False) == 65
    assert hybrid.compact_budget_width(params, 65, ssm=False, conv=True) == 65  # ceil(64.18): states dominate
    fake_kvc = _fake_kv_cache_configurator(monkeypatch, lambda: _spec(speculative_ddtree_verify_width=33))
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_ddtree_verify_width=33))
    monkeypatch.setattr(hybrid, "_unified_memory", lambda: False)
    seen = []

    def budget(self):
        seen.append(fake_kvc.get_spec().speculative_num_draft_tokens)

    monkeypatch.setenv("DDTREE_GDN_TREE", "compact")
    monkeypatch.setenv("DDTREE_CONV_TREE", "compact")
    configurator = SimpleNamespace(mambaish_config=SimpleNamespace(mamba2_cache_params=params))
    hybrid.honest_mamba_budget(budget, configurator)
    params.shape.disable_conv_window_dedup = True  # the pool keeps dense windows then
    hybrid.honest_mamba_budget(budget, configurator)
    assert seen == [1, 2]


def _fake_kv_cache_configurator(monkeypatch, get_spec):
    """sglang.srt.mem_cache.kv_cache_configurator with only `get_spec`, the module honest_mamba_budget reads."""
    import types

    fake_kvc = types.ModuleType("sglang.srt.mem_cache.kv_cache_configurator")
    fake_kvc.get_spec = get_spec
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.mem_cache.kv_cache_configurator", fake_kvc)
    sys.modules["sglang.srt.mem_cache"].kv_cache_configurator = fake_kvc
    return fake_kvc


def test_mamba_budget_sees_the_verify_width(monkeypatch):
    fake_kvc = _fake_kv_cache_configurator(monkeypatch, lambda: _spec())
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec())
    seen = []
    hybrid.honest_mamba_budget(lambda self: seen.append(fake_kvc.get_spec().speculative_num_draft_tokens), object())
    assert seen == [65] and fake_kvc.get_spec().speculative_num_draft_tokens == 16  # restored
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_algorithm="DFLASH"))
    hybrid.honest_mamba_budget(lambda self: seen.append(fake_kvc.get_spec().speculative_num_draft_tokens), object())
    assert seen == [65, 16]


def _qwen36_params(temporal=torch.float32):
    """Qwen3.6-27B's GDN cache shapes at tp 1 (conv [10240, 3] bf16, state [48, 128, 128])."""
    return SimpleNamespace(shape=SimpleNamespace(conv=[(10240, 3)], temporal=(48, 128, 128)),
                           dtype=SimpleNamespace(conv=torch.bfloat16, temporal=temporal))


def test_the_budget_reserves_the_compact_scratch_when_the_compact_kernel_runs(monkeypatch):
    """With DDTREE_GDN_TREE=compact the budget's draft-token count covers conv windows + records per verify
    token, not conv windows + a 3 MB state: 33 tokens budget like
    ceil(33 x (61440 + 49344) / (61440 + 3145728)) = 2 with SGLang's tree conv (dense windows,
    DDTREE_CONV_TREE=sglang); with the compact one too (the default) like
    ceil((10240 x 35 x 2 + 33 x 49344) / (61440 + 3145728)) = 1."""
    fake_kvc = _fake_kv_cache_configurator(monkeypatch, lambda: _spec(speculative_ddtree_verify_width=33))
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_ddtree_verify_width=33))
    monkeypatch.setattr(hybrid, "_unified_memory", lambda: False)
    configurator = SimpleNamespace(mambaish_config=SimpleNamespace(mamba2_cache_params=_qwen36_params()))
    seen = []

    def budget(self):
        seen.append(fake_kvc.get_spec().speculative_num_draft_tokens)

    monkeypatch.setenv("DDTREE_CONV_TREE", "sglang")
    monkeypatch.setenv("DDTREE_GDN_TREE", "compact")
    hybrid.honest_mamba_budget(budget, configurator)
    monkeypatch.setattr(hybrid, "_unified_memory", lambda: True)  # the unified pool allocates full states
    hybrid.honest_mamba_budget(budget, configurator)
    monkeypatch.setattr(hybrid, "_unified_memory", lambda: False)
    bf16 = SimpleNamespace(mambaish_config=SimpleNamespace(mamba2_cache_params=_qwen36_params(torch.bfloat16)))
    hybrid.honest_mamba_budget(budget, bf16)  # bf16 states: SGLang's kernel, full scratch
    monkeypatch.setenv("DDTREE_GDN_TREE", "sglang")
    hybrid.honest_mamba_budget(budget, configurator)
    monkeypatch.delenv("DDTREE_GDN_TREE")  # the default: the compact kernel
    hybrid.honest_mamba_budget(budget, configurator)
    monkeypatch.delenv("DDTREE_CONV_TREE")  # the defaults: both compact kernels
    hybrid.honest_mamba_budget(budget, configurator)
    monkeypatch.setattr(hybrid, "_unified_memory", lambda: True)  # still the full scratch there
    hybrid.honest_mamba_budget(budget, configurator)
    assert seen == [2, 33, 33, 33, 2, 1, 33]
    assert hybrid.compact_budget_width(_qwen36_params(), 65) == 3


def test_the_pool_allocates_records_only_for_the_compact_kernel(monkeypatch):
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_ddtree_verify_width=33))
    monkeypatch.setitem(hybrid.STATE, "compact_scratch", False)
    full = (2, 5, 33, 4, 16, 16)
    calls = []

    def original(size, dtype, device):
        calls.append(size)
        return torch.zeros(size, dtype=dtype)

    monkeypatch.setenv("DDTREE_GDN_TREE", "compact")
    compact = hybrid.compact_scratch(original, full, torch.float32, "cpu")
    assert compact.shape == (2, 5, 33, 1, 1, 4 * 16 + 4 * 16 + 4) and calls == [] and hybrid.STATE["compact_scratch"]
    hybrid.STATE["compact_scratch"] = False
    assert hybrid.compact_scratch(original, full, torch.bfloat16, "cpu").shape == full  # bf16: SGLang's scratch
    monkeypatch.setenv("DDTREE_GDN_TREE", "sglang")
    assert hybrid.compact_scratch(original, full, torch.float32, "cpu").shape == full
    assert calls == [full, full] and not hybrid.STATE["compact_scratch"]
    monkeypatch.delenv("DDTREE_GDN_TREE")  # the default: records
    assert hybrid.compact_scratch(original, full, torch.float32, "cpu").shape != full and calls == [full, full]


def test_a_compact_pool_without_the_compact_kernel_is_refused(monkeypatch):
    """Records where SGLang's kernel would write full states would overrun the scratch: refuse at start-up."""
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec(speculative_ddtree_verify_width=33))
    monkeypatch.setenv("DDTREE_GDN_TREE", "compact")
    monkeypatch.setitem(hybrid.STATE, "compact_scratch", True)
    monkeypatch.setitem(hybrid.STATE, "compact_backends", 0)
    backend = SimpleNamespace(kernel_dispatcher=SimpleNamespace(tree_verify_kernel=object()))
    with pytest.raises(RuntimeError, match="compact verify records"):
        hybrid.compact_tree_kernel(None, backend, _runner(torch.bfloat16))


def _runner(dtype=torch.float32, draft=False, scratch=True):
    cache = SimpleNamespace(temporal=torch.zeros(1, 1, dtype=dtype),
                            intermediate_ssm=torch.zeros(1, dtype=dtype) if scratch else None)
    pool = SimpleNamespace(mamba_pool=SimpleNamespace(mamba_cache=cache))
    return SimpleNamespace(is_draft_worker=draft, req_to_token_pool=pool)


@pytest.mark.parametrize("spec, env, runner, installed", [
    (_spec(speculative_ddtree_verify_width=33), "compact", _runner(), True),  # DDTREE tree mode, fp32 states
    (_spec(speculative_ddtree_verify_width=33), None, _runner(), True),  # the default
    (_spec(speculative_ddtree_verify_width=65), None, _runner(), True),  # the two-block kernel (65..128 nodes)
    (_spec(speculative_ddtree_verify_width=128), None, _runner(), True),  # the widest it takes
    (_spec(speculative_ddtree_verify_width=129), None, _runner(), False),  # the default, wider than its tiles
    (_spec(speculative_ddtree_verify_width=33), "Compact", _runner(), False),  # only "compact" switches it on
    (_spec(speculative_ddtree_verify_width=33), "sglang", _runner(), False),  # asked for SGLang's kernel
    (_spec(speculative_ddtree_verify_width=129), "compact", _runner(), False),  # wider than the compact tiles
    (_spec(speculative_ddtree_verify_width=33), "compact", _runner(torch.bfloat16), False),  # bf16 states
    (_spec(speculative_ddtree_verify_width=33), "compact", _runner(draft=True), False),  # the drafter
    (_spec(speculative_ddtree_verify_width=33, speculative_algorithm="DFLASH"), "compact", _runner(), False),
    (_spec(speculative_ddtree_verify_width=33, speculative_ddtree_allow_hybrid_unsafe=True), "compact", _runner(),
     False),
])
def test_compact_tree_kernel_replaces_sglangs_only_where_it_is_exact(monkeypatch, spec, env, runner, installed):
    monkeypatch.setattr(hybrid, "_spec", lambda: spec)
    monkeypatch.setitem(hybrid.STATE, "compact_backends", 0)
    if env is None:
        monkeypatch.delenv("DDTREE_GDN_TREE", raising=False)
    else:
        monkeypatch.setenv("DDTREE_GDN_TREE", env)
    stock = object()
    backend = SimpleNamespace(kernel_dispatcher=SimpleNamespace(tree_verify_kernel=stock))
    hybrid.compact_tree_kernel(None, backend, runner)
    kernel = backend.kernel_dispatcher.tree_verify_kernel
    assert isinstance(kernel, hybrid.CompactTreeVerify) is installed
    assert (kernel is stock) is not installed
    assert hybrid.STATE["compact_backends"] == int(installed)
    if installed:
        assert kernel.depth_bound == 15 and kernel.supports_strided_target_verify_qkv is False


def test_commit_hook_passes_through_without_the_compact_kernel_and_refuses_without_a_path(monkeypatch):
    monkeypatch.setattr(hybrid, "_spec", lambda: _spec())
    calls = []
    original = lambda *a, **k: calls.append(a)  # noqa: E731
    monkeypatch.setitem(hybrid.STATE, "compact_backends", 0)
    monkeypatch.setenv("DDTREE_CONV_TREE", "sglang")  # neither compact kernel
    hybrid.commit_tree_states(original, "caches", "idx", "steps", None, None)
    assert calls == [("caches", "idx", "steps", None, None, None)]  # SGLang's scatter, unchanged
    hybrid.PENDING.clear()
    for backends, conv in ((1, "sglang"), (0, None)):  # the compact GDN verify, or the compact conv (default)
        monkeypatch.setitem(hybrid.STATE, "compact_backends", backends)
        if conv is None:
            monkeypatch.delenv("DDTREE_CONV_TREE")
        with pytest.raises(RuntimeError, match="accepted path"):
            hybrid.commit_tree_states(original, "caches", "idx", "steps", None, None)
    assert len(calls) == 1


def test_hook_targets_exist_in_the_pinned_sglang(managed_python):
    """A renamed SGLang symbol would make HookRegistry fail at start: find every hooked target in the pinned wheel's
    source as the payload installs it (its patches applied; statically: some of those modules import server-only
    packages the CPU env lacks)."""
    script = f"""
import ast, importlib.util, json, os, sys
from types import SimpleNamespace as NS
sys.path.insert(0, {str(REPO)!r})
sys.path.insert(0, {str(PAYLOAD_FILES)!r})
from ddtctl.overlay.udiff import apply_patch
manifest = json.load(open({str(PAYLOAD_FILES.parent / "manifest.json")!r}))
patches = {{p["path"]: open(os.path.join({str(PAYLOAD_FILES.parent)!r}, p["patch"])).read()
           for p in manifest["patched"]}}
from ddtree_sglang import graphs, hybrid
targets = []
R = NS(register=lambda target, hook, kind: targets.append(target))
K = NS(AROUND="around", AFTER="after", BEFORE="before")
graphs.register_hooks(R, K); hybrid.register_hooks(R, K)
missing = []
for t in targets:
    parts = t.split(".")
    root = os.path.dirname(os.path.dirname(importlib.util.find_spec("sglang").origin))  # no package code runs
    for i in range(len(parts) - 1, 0, -1):
        origin = os.path.join(root, *parts[:i]) + ".py"
        if os.path.isfile(origin):
            break
    text = open(origin).read()
    rel = os.path.relpath(origin, root)
    if rel in patches:
        text = apply_patch(text, patches[rel])
    scope = ast.parse(text).body
    for name in parts[i:]:
        found = [n for n in scope if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name]
        if not found:
            missing.append(t)
            break
        scope = found[0].body
print(json.dumps({{"targets": targets, "missing": missing}}))
"""
    p = subprocess.run([str(managed_python), "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(out["targets"]) == 11 and out["missing"] == []


def test_commit_step_indices_follow_the_accepted_tree_path(tmp_path):
    """SGLang's own step-index math on DDTREE's flat accept index: node indices, not chain positions."""
    # tree (n = 6): 0 -> {1, 2}; 1 -> {3}; 2 -> {4}; 4 -> {5}. Request 0 accepts 0 -> 2 -> 4 -> 5 (3 drafts);
    # request 1 accepts 0 -> 1 (1 draft).
    accepted = torch.tensor([[0, 2, 4, 5], [0, 1, -1, -1]])
    flat = tp.flat_accept_index(accepted, 6)
    assert flat.tolist() == [[0, 2, 4, 5], [6, 7, -1, -1]]
    from worker_sglang_source import load_functions, sglang_source

    found = sglang_source("sglang/srt/speculative/spec_utils.py")
    assert found is not None, "sglang 0.5.23's spec_utils.py is not reachable (make test builds the managed env)"
    mod = load_functions(found[0], ["_verify_commit_step_indices"], tmp_path, "ddtree_test_spec_utils",
                         preamble="from __future__ import annotations\n")
    mod.mamba_track_grid = lambda page_size: 4
    batch = SimpleNamespace(seq_lens=torch.tensor([10, 10]), mamba_track_indices=torch.tensor([0, 1]),
                            tree_cache=SimpleNamespace(page_size=1))
    last, track = mod._verify_commit_step_indices(batch=batch, accept_index=flat, accept_lens=torch.tensor([4, 2]),
                                                  draft_token_num=6)
    out = {"last": last.tolist(), "track": track.tolist()}
    # last accepted nodes: 5 and 1. Request 0 goes 10 -> 14 and crosses 12 at chain step 1 = node 2; request 1
    # goes 10 -> 12 and crosses 12 at chain step 1 = node 1.
    assert out == {"last": [5, 1], "track": [2, 1]}


@pytest.mark.parametrize("mode", ["reference", "triton"])
@pytest.mark.parametrize("bs, budget, depth, vocab", [(1, 1, 3, 20), (2, 7, 5, 30), (3, 15, 15, 60)])
def test_prepare_from_topk_equals_prepare_from_logits(bs, budget, depth, vocab, mode):
    g = torch.Generator().manual_seed(7 + budget)
    logits = torch.randn(bs, depth, vocab, generator=g) * 3
    roots = torch.randint(0, vocab, (bs,), generator=g)
    prefix = torch.randint(3, 40, (bs,), generator=g)
    prep = tp.TreePreparer(depth=depth, vocab=vocab, budget=budget, topk_cap=None, mode=mode, device="cpu")
    a = prep.prepare(logits, roots, prefix)
    lp, ids = tp.topk_logprobs(logits, prep.k)
    b = prep.prepare_from_topk(lp, ids, roots, prefix)
    for name in ("input_ids", "positions", "visibility", "retrive_index", "retrive_next_token",
                 "retrive_next_sibling", "parents"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    with pytest.raises(ValueError, match="shapes"):
        prep.prepare_from_topk(lp[:, :-1], ids[:, :-1], roots, prefix)


def test_oracle_topk_row_puts_the_oracle_on_top_and_keeps_the_drafters_order():
    sys.path.insert(0, str(REPO / "tests" / "gpu_standins"))
    try:
        import oracle_drafter as od
    finally:
        sys.path.pop(0)
    row = [(5, 12.0), (9, 11.0), (3, 10.0), (7, 9.0)]
    toks, lps = od.oracle_topk_row(row, [9, 1, 2, 5, 4, 8], k=6, vocab=100)
    assert toks == [5, 9, 3, 7, 1, 2]
    assert all(a > b for a, b in zip(lps, lps[1:]))
    full = torch.zeros(100)
    full[torch.tensor([5, 9, 3, 7])] = torch.tensor([12.0, 11.0, 10.0, 9.0])
    assert lps[0] == pytest.approx((12.0 - torch.logsumexp(full, 0)).item(), abs=1e-3)


def test_calibrated_oracle_states_its_own_accuracy():
    """DDTREE_TEST_ORACLE_CALIBRATED=1: the drafter's softmax gives the true token's rank the probability it has."""
    sys.path.insert(0, str(REPO / "tests" / "gpu_standins"))
    try:
        import oracle_drafter as od
    finally:
        sys.path.pop(0)
    vocab, rank_p = 151936, (0.88, 0.08, 0.02)
    values = od.calibrated_values(rank_p, vocab)
    full = torch.zeros(vocab, dtype=torch.float64)
    full[:4] = torch.tensor(values, dtype=torch.float64)
    probs = torch.softmax(full, 0)[:4].tolist()
    assert probs[:3] == pytest.approx(list(rank_p), rel=1e-6)
    assert probs[3] == pytest.approx(0.01, rel=1e-6)
    assert list(values) == sorted(values, reverse=True)
    assert od.top_values(vocab) == od.TOP_VALUES  # the e2e proofs keep their fixed values unless asked


def _oracle_module(monkeypatch, tmp_path, sequences: dict, device: bool):
    sys.path.insert(0, str(REPO / "tests" / "gpu_standins"))
    try:
        import oracle_drafter as od
    finally:
        sys.path.pop(0)
    path = tmp_path / "oracle.json"
    path.write_text(json.dumps({"sequences": sequences}))
    monkeypatch.setenv("DDTREE_TEST_ORACLE", str(path))
    monkeypatch.setenv("DDTREE_TEST_ORACLE_CALIBRATED", "1")
    if device:
        monkeypatch.setenv("DDTREE_TEST_ORACLE_DEVICE", "1")
    else:
        monkeypatch.delenv("DDTREE_TEST_ORACLE_DEVICE", raising=False)
    monkeypatch.setattr(od, "_ORACLE", None)
    monkeypatch.setattr(od, "_DEVICE_ORACLES", {})
    return od


@pytest.mark.parametrize("k", [3, 8, 16])
def test_the_device_oracle_equals_the_host_oracle_row_for_row(monkeypatch, tmp_path, k):
    """DDTREE_TEST_ORACLE_DEVICE=1 (gathers on the device, no host sync) proposes exactly what the host oracle does:
    the same ids and log-probs at every (request, depth), requests outside the oracle and depths past the known
    continuation keeping the drafter's row. Seed 1234, printed by pytest's parametrisation."""
    import random
    from types import SimpleNamespace

    rng = random.Random(1234)
    vocab, depth, bs = 500, 15, 5
    prompts = [[rng.randrange(vocab) for _ in range(rng.randrange(3, 9))] for _ in range(4)]
    seqs = {",".join(map(str, p)): p + [rng.randrange(vocab) for _ in range(rng.randrange(5, 40))] for p in prompts}
    reqs = [SimpleNamespace(origin_input_ids=p) for p in prompts] + [SimpleNamespace(origin_input_ids=[1, 2, 3])]
    prefix = torch.tensor([len(p) - 1 + rng.randrange(0, 30) for p in prompts] + [4])
    g = torch.Generator().manual_seed(1234)
    ids = torch.stack([torch.randperm(vocab, generator=g)[:k] for _ in range(bs * depth)]).view(bs, depth, k)
    lp = torch.sort(torch.randn(bs, depth, k, generator=g), dim=-1, descending=True).values.to(torch.bfloat16)
    for p, i in zip(prompts, range(4)):  # some drafter candidates collide with the oracle's tokens
        full = seqs[",".join(map(str, p))]
        pos = int(prefix[i]) + 1
        if pos < len(full):
            ids[i, 0, k - 1] = full[pos]
    results = []
    for device in (False, True):
        od = _oracle_module(monkeypatch, tmp_path, seqs, device)
        results.append(od.override(reqs=reqs, prefix_lens=prefix, root_tokens=None, lp=lp, ids=ids, vocab=vocab))
    (host_lp, host_ids), (dev_lp, dev_ids) = results
    assert torch.equal(host_ids, dev_ids)
    assert torch.allclose(host_lp, dev_lp, rtol=0, atol=1e-6)
    assert torch.equal(dev_ids[4], ids[4])  # not in the oracle: the drafter's own row
    assert not torch.equal(dev_ids[:4], ids[:4])


def test_the_device_oracle_tables_are_built_once_per_request(monkeypatch, tmp_path):
    from types import SimpleNamespace

    seqs = {"1,2": [1, 2, 3, 4, 5, 6], "7,8,9": [7, 8, 9, 10, 11]}
    od = _oracle_module(monkeypatch, tmp_path, seqs, True)
    oracle = od.device_oracle(100, torch.device("cpu"))
    reqs = [SimpleNamespace(origin_input_ids=[1, 2]), SimpleNamespace(origin_input_ids=[7, 8, 9])]
    top, valid = oracle.top4(reqs, torch.tensor([1, 2]), 4)
    assert oracle.full.shape[0] == 2 and valid.tolist() == [[True] * 4, [True, True, False, False]]
    assert (top[0, :, :] == torch.tensor([3, 4, 5, 6]).view(4, 1)).any(-1).tolist() == [
        od.rank_of("1,2", p) < 4 for p in range(2, 6)]
    oracle.top4(reqs[::-1], torch.tensor([2, 1]), 4)
    assert oracle.full.shape[0] == 2  # the same requests in another batch: no new rows


def test_the_device_oracle_leaves_a_batch_outside_the_oracle_alone(monkeypatch, tmp_path):
    """A server's first decodes (warm-up, health) come before any oracle request: the tables are still empty, and
    the drafter's rows must pass through (this crashed the deploy on the H200 on 2026-12-01)."""
    from types import SimpleNamespace

    od = _oracle_module(monkeypatch, tmp_path, {"1,2": [1, 2, 3, 4]}, True)
    ids = torch.arange(2 * 3 * 5).view(2, 3, 5)
    lp = torch.randn(2, 3, 5)
    reqs = [SimpleNamespace(origin_input_ids=[9]), SimpleNamespace(origin_input_ids=[8, 7])]
    new_lp, new_ids = od.override(reqs=reqs, prefix_lens=torch.tensor([0, 1]), root_tokens=None, lp=lp, ids=ids,
                                  vocab=100)
    assert torch.equal(new_ids, ids) and torch.equal(new_lp, lp)
