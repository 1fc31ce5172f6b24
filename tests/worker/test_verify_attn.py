"""verify_attn.py: the DDTREE target's triton backend dispatches target verify to the tree split-KV kernel
(DDTREE_VERIFY_ATTN=splitkv) through SGLang's own `use_verify_splitkv` / `verify_splitkv_fwd` switch -- for the DDTREE
target only. The kernel's exactness: tests/kernels/test_tree_attn.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from ddtree_sglang import verify_attn  # noqa: E402


def _backend(draft=False):
    return SimpleNamespace(is_draft_runner=draft, use_verify_splitkv=False, use_verify_shared_kv=False,
                           verify_splitkv_fwd=None)


@pytest.fixture
def kernel(monkeypatch):
    calls = []

    def tree_verify_fwd(*args, **kwargs):
        calls.append(args)
        return args[0] == "served"

    monkeypatch.setattr(verify_attn, "_tree_attn", lambda: SimpleNamespace(
        tree_verify_fwd=tree_verify_fwd))
    monkeypatch.setattr(verify_attn, "STATE", {"backends": 0, "calls": 0, "served": 0})
    return calls


@pytest.mark.parametrize("env, algo, draft, installed", [
    ("splitkv", "DDTREE", False, True),
    (None, "DDTREE", False, True),  # the default
    ("extend", "DDTREE", False, False),
    ("Splitkv", "DDTREE", False, False),  # compared exactly: anything but splitkv keeps SGLang's kernel
    ("splitkv", "DDTREE", True, False),  # the drafter's runner
    ("splitkv", "DFLASH", False, False),  # other algorithms keep SGLang's dispatch
])
def test_the_tree_kernel_serves_the_ddtree_targets_verify_only(monkeypatch, kernel, env, algo, draft, installed):
    if env is None:
        monkeypatch.delenv(verify_attn.VARIABLE, raising=False)
    else:
        monkeypatch.setenv(verify_attn.VARIABLE, env)
    monkeypatch.setattr(verify_attn, "_spec", lambda: SimpleNamespace(speculative_algorithm=algo))
    backend = _backend(draft)
    verify_attn.install(None, backend, None)
    assert backend.use_verify_splitkv is installed
    assert (backend.verify_splitkv_fwd is not None) is installed
    assert verify_attn.STATE["backends"] == int(installed)


def test_calls_are_counted_and_a_refusal_falls_back(monkeypatch, kernel):
    monkeypatch.setenv(verify_attn.VARIABLE, "splitkv")
    monkeypatch.setattr(verify_attn, "_spec", lambda: SimpleNamespace(speculative_algorithm="DDTREE"))
    backend = _backend()
    verify_attn.install(None, backend, None)
    assert backend.verify_splitkv_fwd("served", 1) is True
    assert backend.verify_splitkv_fwd("not served", 2) is False  # the backend then runs the extend kernel
    assert verify_attn.STATE["calls"] == 2 and verify_attn.STATE["served"] == 1 and len(kernel) == 2


def test_the_backends_verify_call_reaches_the_tree_kernel(monkeypatch):
    """The call exactly as sglang 0.5.23's TritonAttnBackend.forward_extend makes it (15 positional arguments, then
    logit_cap .. max_bs by keyword) runs kernels/tree_attn.py (Triton's interpreter here) and writes the
    attention of a prefix plus an ancestor-only tree."""
    from ddtctl.kernels import tree_attn

    monkeypatch.setenv(verify_attn.VARIABLE, "splitkv")
    monkeypatch.setattr(verify_attn, "_spec", lambda: SimpleNamespace(speculative_algorithm="DDTREE"))
    monkeypatch.setattr(verify_attn, "STATE", {"backends": 0, "calls": 0, "served": 0})
    backend = _backend()
    verify_attn.install(None, backend, None)
    torch.manual_seed(0)
    n, prefix, h_q, h_kv, dim = 5, 7, 4, 2, 16
    parents = [-1, 0, 0, 1, 1]  # root; two children; two grandchildren under node 1
    vis = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            vis[i, j], j = True, parents[j]
    q, k, v = torch.randn(n, h_q, dim), torch.randn(n, h_kv, dim), torch.randn(n, h_kv, dim)
    k_pool, v_pool = torch.randn(prefix + 3, h_kv, dim), torch.randn(prefix + 3, h_kv, dim)
    slots = torch.randperm(prefix + 3)[:prefix]
    mask = torch.cat([torch.ones(n, prefix, dtype=torch.bool), vis], 1).reshape(-1)
    o = torch.zeros(n, h_q, dim)
    served = backend.verify_splitkv_fwd(
        q, k, v, o, k_pool, v_pool, torch.tensor([0, n], dtype=torch.int32), torch.tensor([0, prefix], dtype=torch.int32),
        slots.to(torch.int64), mask, True, torch.tensor([0, mask.numel()], dtype=torch.int64), n, 1.0, 1.0,
        dim**-0.5, logit_cap=0.0, sliding_window_size=-1, sinks=None, window_kv_offsets=None,
        xai_temperature_len=-1, max_bs=8)
    want = tree_attn.tree_attention_reference(q, k, v, k_pool, v_pool, slots, vis)
    assert served is True and verify_attn.STATE["served"] == 1
    assert float((o.double() - want).abs().max()) < 1e-4
