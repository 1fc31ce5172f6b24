"""The compact tree conv verify and commit (ddtctl/kernels/conv_tree.py) in Triton's interpreter: outputs and
parents bit-equal to SGLang 0.5.23's own tree conv (`causal_conv1d_update` with retrieve_next_token /
_sibling, run from the release's source under the interpreter), outputs and committed windows equal to the
float64 node-by-node reference, on DDTREE trees, chains deeper than the window, stars (long sibling
chains), padding requests, bias or not, silu or not, widths 3 and 4, the dense and SGLang's deduplicated
window layouts, and the mamba-track window. fp32 here (the interpreter mangles bf16);
bench/conv_tree_gpu.py checks bf16 on the GPU."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from ddtctl.kernels import conv_tree
from ddtctl.kernels.reference import build

REPO = Path(__file__).resolve().parents[2]
SEED = 5150


def _ddtree(rng: random.Random, width: int) -> list[int]:
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    lp = torch.log_softmax(torch.randn(15, 16, generator=gen) * rng.choice([1.0, 2.5, 6.0]), -1)
    top = lp.topk(min(width - 1, 16), -1)
    return [int(p) for p in build(top.values.numpy(), top.indices.numpy().astype("int64"), width - 1).parents]


def _tree(rng: random.Random, width: int, kind: str) -> list[int]:
    if kind == "chain":
        return [-1] + list(range(width - 1))
    if kind == "star":  # every node a child of the root: one sibling chain of width - 1 nodes
        return [-1] + [0] * (width - 1)
    return _ddtree(rng, width)


def _retrieve(trees: list[list[int]], dtype=torch.int32):
    sys.path.insert(0, str(REPO / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files"))
    from ddtree_sglang.tree_prep import retrive_arrays

    _, nt, ns = retrive_arrays(torch.tensor(trees, dtype=torch.int64))
    return nt.to(dtype).contiguous(), ns.to(dtype).contiguous()


@pytest.fixture(scope="module")
def sglang_conv(tmp_path_factory):
    """SGLang 0.5.23's causal_conv1d_update and its kernel, from the release's source (no sglang import)."""
    sys.path.insert(0, str(REPO / "tests" / "worker"))
    sys.path.insert(0, str(REPO / "bench"))
    from hybrid_tree_kernels import _fix_interpreter_compares
    from worker_sglang_source import load_functions, sglang_source

    found = sglang_source("sglang/kernels/ops/mamba/causal_conv1d_triton.py")
    if found is None:
        pytest.skip("sglang 0.5.23's causal_conv1d_triton.py is not reachable (make test builds the managed "
                    "env)")
    _fix_interpreter_compares()  # SGLang's kernel splats comparison scalars (a Triton 3.9 interpreter defect)
    preamble = ("from typing import Optional, Union\nPAD_SLOT_ID = -1\n\n\ndef is_arch_support_pdl():\n"
                "    return False\n\n\n")
    mod = load_functions(found[0], ["_causal_conv1d_update_kernel", "causal_conv1d_update"],
                         tmp_path_factory.mktemp("sgl"), "ddtree_test_sglang_conv", preamble=preamble)
    return mod.causal_conv1d_update


def _dedup_view(layers: int, rows: int, width: int, dim: int, cols: int, dtype=torch.float32) -> torch.Tensor:
    """memory_pool._allocate_deduplicated_conv_window's layout: one [dim, width + cols - 1] buffer per (layer,
    row), step t's window the columns t .. t + cols - 1."""
    phys = torch.zeros(layers, rows, dim, width + cols - 1, dtype=dtype)
    return phys.as_strided((layers, rows, width, dim, cols), (*phys.stride()[:2], 1, *phys.stride()[2:]))


def _case(case: int, dtype=torch.float32):
    rng = random.Random(SEED + case)
    torch.manual_seed(SEED + case)
    kw = rng.choice([4, 4, 3])
    bs, width = rng.randint(1, 3), rng.choice([5, 9, 17, 33, 65])
    kinds = [rng.choice(["ddtree", "ddtree", "chain", "star"]) for _ in range(bs)]
    trees = [_tree(rng, width, k) for k in kinds]
    dim = rng.choice([24, 40])
    slots = bs + 2
    x = torch.randn(bs, width, dim).transpose(1, 2)  # SGLang's view [bs, dim, T] of the [bs, T, dim] inputs
    weight, state = torch.randn(dim, kw) * 0.5, torch.randn(slots, dim, kw - 1)
    bias = torch.randn(dim) * 0.2 if case % 2 == 0 else None
    act = "silu" if case % 3 != 2 else None
    idx = torch.tensor(rng.sample(range(slots), bs), dtype=torch.int32)
    if bs > 1 and case % 2 == 1:
        idx[-1] = -1  # a CUDA-graph padding request
    x, weight, state = x.to(dtype), weight.to(dtype), state.to(dtype)
    bias = bias.to(dtype) if bias is not None else None
    return rng, trees, x, weight, bias, act, state, idx


@pytest.mark.parametrize("case", range(8))
def test_verify_is_bit_equal_to_sglangs_tree_conv_and_matches_the_reference(case, sglang_conv):
    """fp16 in two cases: products rounded to the operands' dtype before the fp32 sum, as SGLang's kernel
    rounds them."""
    half = case % 4 == 3
    rng, trees, x, weight, bias, act, state, idx = _case(case, torch.float16 if half else torch.float32)
    if case == 7:
        state = state.float()  # an fp32 conv state under fp16 inputs: each product in its operands' dtype
    bs, dim, width = x.shape
    kw = weight.shape[1]
    print(f"seed {SEED + case}: bs {bs} width {width} W {kw} bias {bias is not None} act {act} "
          f"pad {int(idx[-1]) < 0}")
    nt, ns = _retrieve(trees)
    rows = torch.arange(bs, dtype=torch.int32)
    icw_sgl = torch.zeros(bs + 1, width, dim, kw - 1, dtype=x.dtype)
    par_sgl = torch.full_like(nt, -7)
    state_sgl = state.clone()
    out_sgl = sglang_conv(x, state_sgl, weight, bias, act, conv_state_indices=idx,
                          intermediate_conv_window=icw_sgl, intermediate_state_indices=rows,
                          retrieve_next_token=nt, retrieve_next_sibling=ns, retrieve_parent_token=par_sgl)
    recs = torch.zeros_like(icw_sgl) if case % 2 else _dedup_view(1, bs + 1, width, dim, kw - 1, x.dtype)[0]
    par = torch.full_like(nt, -7)
    state_ours = state.clone()
    out = conv_tree.tree_conv_verify(x, state_ours, weight, bias, act, conv_state_indices=idx,
                                     intermediate_conv_window=recs, intermediate_state_indices=rows,
                                     retrieve_next_token=nt, retrieve_next_sibling=ns,
                                     retrieve_parent_token=par, block_n=16, block_t=8 if case % 2 else 32)
    assert out.stride() == x.stride()
    assert torch.equal(state_ours, state)  # the pre-step conv state stays for the commit
    for r in range(bs):
        want = [0] + trees[r][1:]
        assert par[r].tolist() == want
        if idx[r] < 0:
            continue
        assert par_sgl[r].tolist() == want
        assert torch.equal(out[r], out_sgl[r])
        ref_out, ref_win = conv_tree.tree_conv_reference(x[r].T, weight, bias, state[int(idx[r])], trees[r],
                                                         silu=act is not None)
        assert (out[r].T.double() - ref_out).abs().max() < (2e-2 if half else 1e-5)
        assert torch.equal(recs[r, :, :, kw - 2], x[r].T)  # node t's record: its own input
        assert torch.equal(icw_sgl[r].double(), ref_win)  # SGLang's per-node windows are the reference's


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the bf16 cases' verify outputs (not checked here)
@pytest.mark.parametrize("case", range(6))
def test_commit_writes_the_accepted_nodes_window_and_the_track_nodes(case):
    """bf16 pools in half the cases (the commit only moves inputs; the interpreter's bf16 arithmetic is
    broken, its loads and stores are not)."""
    dtype = torch.bfloat16 if case % 2 == 1 else torch.float32
    rng, trees, x, weight, bias, act, _, idx = _case(case, dtype)
    bs, dim, width = x.shape
    kw = weight.shape[1]
    layers, slots = 2, bs + 3
    xs = [x, torch.randn_like(x)]  # each layer its own inputs and states
    conv = torch.randn(layers, slots, dim, kw - 1).to(dtype)
    recs = _dedup_view(layers, bs + 1, width, dim, kw - 1, dtype) if case % 3 != 1 else torch.zeros(
        layers, bs + 1, width, dim, kw - 1, dtype=dtype)
    nt, ns = _retrieve(trees, torch.int64)
    rows = torch.arange(bs, dtype=torch.int32)
    for layer in range(layers):
        conv_tree.tree_conv_verify(xs[layer], conv[layer], weight, bias, act, conv_state_indices=idx,
                                   intermediate_conv_window=recs[layer], intermediate_state_indices=rows,
                                   retrieve_next_token=nt, retrieve_next_sibling=ns,
                                   retrieve_parent_token=torch.empty_like(nt), block_n=16)
    paths, accept, lens = [], [], []
    for r in range(bs):
        node = rng.choice([0, 1 % width, rng.randrange(width)])  # the root alone, a short path, any node
        path = [node]
        while path[-1] != 0:
            path.append(trees[r][path[-1]])
        path = path[::-1]
        paths.append(path)
        accept.append([r * width + n for n in path] + [-1] * (width - len(path)))
        lens.append(len(path))
    free = [s for s in range(slots) if s not in idx.tolist()]
    track_slot = torch.full((bs,), -1, dtype=torch.int32)
    track_node = torch.full((bs,), -1, dtype=torch.int64)
    if idx[0] >= 0:
        track_slot[0], track_node[0] = free[0], paths[0][rng.randrange(len(paths[0]))]
    before = conv.clone()
    conv_tree.tree_conv_commit(conv=conv, intermediate_conv_window=recs, state_indices=idx, scratch_rows=rows,
                               accept_index=torch.tensor(accept),
                               accept_lens=torch.tensor(lens, dtype=torch.int32), width=width,
                               track_indices=track_slot, track_nodes=track_node, block_n=16)
    touched = set()
    for layer in range(layers):
        for r in range(bs):
            if idx[r] < 0:
                continue
            _, win = conv_tree.tree_conv_reference(xs[layer][r].T, weight, bias, before[layer, int(idx[r])],
                                                   trees[r])
            assert torch.equal(conv[layer, int(idx[r])].double(), win[paths[r][-1]]), (layer, r, paths[r])
            touched.add(int(idx[r]))
            if r == 0 and track_slot[0] >= 0:
                assert torch.equal(conv[layer, int(track_slot[0])].double(), win[int(track_node[0])])
                touched.add(int(track_slot[0]))
    for s in set(range(slots)) - touched:
        assert torch.equal(conv[:, s], before[:, s])


def test_records_fit_sglangs_deduplicated_layout_where_its_own_tree_windows_do_not(sglang_conv):
    """Why the compact conv may keep the pool's deduplicated windows: one column per node. SGLang's tree conv
    writing whole windows into that layout overwrites one node's window with another's."""
    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    trees = [_ddtree(rng, 17)]
    x, weight, state = torch.randn(1, 17, 24).transpose(1, 2), torch.randn(24, 4), torch.randn(2, 24, 3)
    nt, ns = _retrieve(trees)
    common = dict(conv_state_indices=torch.tensor([1], dtype=torch.int32),
                  intermediate_state_indices=torch.tensor([0], dtype=torch.int32), retrieve_next_token=nt,
                  retrieve_next_sibling=ns, retrieve_parent_token=torch.empty_like(nt))
    _, ref_win = conv_tree.tree_conv_reference(x[0].T, weight, None, state[1], trees[0], silu=True)
    theirs = _dedup_view(1, 2, 17, 24, 3)[0]
    sglang_conv(x, state.clone(), weight, None, "silu", intermediate_conv_window=theirs, **common)
    assert not torch.equal(theirs[0], ref_win.float())
    ours = _dedup_view(1, 2, 17, 24, 3)[0]
    conv_tree.tree_conv_verify(x, state.clone(), weight, None, "silu", intermediate_conv_window=ours,
                               **common)
    assert torch.equal(ours[0, :, :, 2], x[0].T)


@pytest.mark.parametrize(("state_columns", "activation", "why"), [(2, "silu", "width-4 kernel"),
                                                                  (3, "gelu", "activation")])
def test_refuses_a_window_or_activation_the_kernel_does_not_take(state_columns, activation, why):
    x = torch.randn(1, 8, 4)
    nt = torch.full((1, 4), -1, dtype=torch.int32)
    with pytest.raises(ValueError, match=why):
        conv_tree.tree_conv_verify(x, torch.zeros(1, 8, state_columns), torch.zeros(8, 4), None, activation,
                                   conv_state_indices=torch.zeros(1, dtype=torch.int32),
                                   intermediate_conv_window=torch.zeros(1, 4, 8, 3),
                                   intermediate_state_indices=torch.zeros(1, dtype=torch.int32),
                                   retrieve_next_token=nt, retrieve_next_sibling=nt, retrieve_parent_token=nt)


@pytest.mark.parametrize("kind, width", [
    ("broom", 128), ("broom", 129), ("chain", 129), ("ddtree", 129), ("star", 2),
])
def test_parents_of_the_widest_trees_come_out_of_the_parents_kernel(kind, width):
    """The parents kernel pointer-jumps through memory. A broom of 128 nodes (root, node 1, then 126 children
    of node 1: one sibling chain in a 128-row tile, whose parent is not the root's 0 a pending node starts
    with) takes all LOG_TP rounds; a chain takes none. int64 arrays, as SGLang's."""
    rng = random.Random(SEED + width)
    first = [-1, 0] + [1] * (width - 2) if kind == "broom" else _tree(rng, width, kind)
    trees = [first, _tree(rng, width, "ddtree")]
    nt, ns = _retrieve(trees, torch.int64)
    dim, kw = 8, 4
    x = torch.randn(2, width, dim).transpose(1, 2)
    par = torch.full_like(nt, -7)
    conv_tree.tree_conv_verify(x, torch.zeros(2, dim, kw - 1), torch.ones(dim, kw), None, None,
                               conv_state_indices=torch.tensor([0, 1], dtype=torch.int32),
                               intermediate_conv_window=torch.zeros(2, width, dim, kw - 1),
                               intermediate_state_indices=torch.tensor([0, 1], dtype=torch.int32),
                               retrieve_next_token=nt, retrieve_next_sibling=ns, retrieve_parent_token=par)
    assert par.tolist() == [[0] + t[1:] for t in trees]


def test_refuses_trees_wider_than_its_packed_node_indices():
    with pytest.raises(ValueError, match="10 bits"):
        conv_tree.tree_conv_verify(torch.zeros(1, 4, 1025), torch.zeros(1, 4, 3), torch.ones(4, 4),
                                   None, None, conv_state_indices=torch.zeros(1, dtype=torch.int32),
                                   intermediate_conv_window=torch.zeros(1, 1025, 4, 3),
                                   intermediate_state_indices=torch.zeros(1, dtype=torch.int32),
                                   retrieve_next_token=torch.full((1, 1025), -1),
                                   retrieve_next_sibling=torch.full((1, 1025), -1),
                                   retrieve_parent_token=torch.zeros(1, 1025, dtype=torch.int64))
