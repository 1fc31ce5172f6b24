"""verify_attn.py: the DDTREE target's triton backend dispatches target verify to the tree split-KV kernel
(DDTREE_VERIFY_ATTN=splitkv) through SGLang's own `use_verify_splitkv` / `verify_splitkv_fwd` switch -- for the DDTREE
target only. The kernel's exactness: tests/kernels/test_tree_attn.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

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
    (None, "DDTREE", False, False),  # opt-in
    ("extend", "DDTREE", False, False),
    ("Splitkv", "DDTREE", False, False),  # compared exactly, like the payload's other switches
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
