"""The split-KV tree verify attention (ddtctl/kernels/tree_attn.py) in Triton's interpreter: outputs
equal the float64 attention over [whole prefix + ancestors-or-self] and SGLang 0.5.23's own
`extend_attention_fwd` (run from the release's source under the interpreter) with the same custom mask, on
DDTREE trees from the best-first build and chains, GQA heads, head dims 64, 128 and 256, prefixes of 0, 1, 37,
150 and 300 keys (different per request) in shuffled pool slots, verify widths 5 to 129, empty splits, a
bool or uint8 mask whose prefix columns hold garbage (never read); unsupported calls return False and leave
the output alone. fp32 here (the interpreter mangles bf16); bench/tree_attn_gpu.py checks bf16 on the GPU."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ddtctl.kernels import tree_attn
from ddtctl.kernels.reference import build, visibility_from_parents

REPO = Path(__file__).resolve().parents[2]
SEED = 6060
TOL = 2e-5  # fp32 against float64 and against SGLang's fp32 kernel (softmax of O(1) scores)

@pytest.fixture(scope="module")
def sglang_extend(tmp_path_factory):
    """SGLang 0.5.23's extend_attention_fwd and _fwd_kernel, from the release's source (no sglang import)."""
    sys.path.insert(0, str(REPO / "tests" / "worker"))
    from worker_sglang_source import extend_attention_from_source

    found = extend_attention_from_source(tmp_path_factory.mktemp("sgl"))
    if found is None:
        pytest.skip("sglang 0.5.23's extend_attention.py is not reachable (make test builds the managed env)")
    return found


def _ddtree(rng: random.Random, width: int) -> list[int]:
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    lp = torch.log_softmax(torch.randn(15, 16, generator=gen) * rng.choice([1.0, 2.5, 6.0]), -1)
    top = lp.topk(min(width - 1, 16), -1)
    return [int(p) for p in build(top.values.numpy(), top.indices.numpy().astype("int64"), width - 1).parents]


def _parents(rng: random.Random, width: int, kind: str) -> list[int]:
    return [-1] + list(range(width - 1)) if kind == "chain" else _ddtree(rng, width)


def make_case(seed: int, bs: int, width: int, prefixes: list[int], h_q: int = 4, h_kv: int = 2, dim: int = 64,
              kinds: list[str] | None = None, mask_dtype=torch.uint8) -> SimpleNamespace:
    """A verify call as SGLang's triton backend makes it: nodes' q/k/v, a pool with the prefixes in shuffled
    slots, and the flat custom mask [n, prefix + n] per request with garbage in its prefix columns."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    kinds = kinds or ["ddtree"] * bs
    trees = [_parents(rng, width, kind) for kind in kinds]
    vis = [torch.from_numpy(visibility_from_parents(np.asarray(t))) for t in trees]
    total, slots = bs * width, sum(prefixes) + 7
    c = SimpleNamespace(bs=bs, width=width, prefixes=prefixes, trees=trees, vis=vis, h_q=h_q)
    c.q, c.k, c.v = torch.randn(total, h_q, dim), torch.randn(total, h_kv, dim), torch.randn(total, h_kv, dim)
    c.k_pool, c.v_pool = torch.randn(slots, h_kv, dim), torch.randn(slots, h_kv, dim)
    perm = torch.randperm(slots)
    c.slots = [perm[sum(prefixes[:r]): sum(prefixes[: r + 1])] for r in range(bs)]
    c.kv_indices = torch.cat(c.slots).to(torch.int64)
    c.kv_indptr = torch.tensor([0, *np.cumsum(prefixes)], dtype=torch.int32)
    c.qo_indptr = torch.arange(0, total + 1, width, dtype=torch.int32)
    chunks, starts = [], [0]
    for r in range(bs):
        m = torch.randint(0, 2, (width, prefixes[r] + width), dtype=torch.uint8)  # prefix columns: garbage
        m[:, prefixes[r]:] = vis[r].to(torch.uint8)
        chunks.append(m.reshape(-1))
        starts.append(starts[-1] + m.numel())
    c.mask = torch.cat(chunks).to(mask_dtype)
    c.mask_indptr = torch.tensor(starts, dtype=torch.int64)
    return c


def call_args(c: SimpleNamespace, o: torch.Tensor, causal: bool = True, mask=None, k_scale=1.0, v_scale=1.0):
    """extend_attention_fwd's positional arguments for the case."""
    return (c.q, c.k, c.v, o, c.k_pool, c.v_pool, c.qo_indptr, c.kv_indptr, c.kv_indices,
            c.mask if mask is None else mask, causal, c.mask_indptr, c.width, k_scale, v_scale)


def reference(c: SimpleNamespace, vis=None, k_scale=1.0, v_scale=1.0) -> torch.Tensor:
    vis = vis or c.vis
    out = []
    for r in range(c.bs):
        rows = slice(r * c.width, (r + 1) * c.width)
        out.append(tree_attn.tree_attention_reference(c.q[rows], c.k[rows], c.v[rows], c.k_pool, c.v_pool,
                                                      c.slots[r], vis[r], k_scale=k_scale, v_scale=v_scale))
    return torch.cat(out)


CASES = [  # (bs, width, prefixes, dim, kinds, n_splits, block_m, mask dtype, causal, k_scale, v_scale)
    (1, 5, [37], 64, ["ddtree"], None, None, torch.uint8, True, 1.0, 1.0),
    (1, 16, [150], 128, ["ddtree"], 4, None, torch.bool, True, 1.0, 1.0),
    (3, 33, [0, 1, 150], 64, ["ddtree", "chain", "ddtree"], None, None, torch.uint8, True, 1.0, 1.0),
    (3, 16, [150, 0, 37], 64, ["chain", "ddtree", "ddtree"], 16, 16, torch.bool, False, 0.5, 1.5),
    (3, 5, [1, 37, 0], 128, ["ddtree", "ddtree", "chain"], 4, None, torch.uint8, True, 1.0, 1.0),
    (1, 65, [150], 64, ["ddtree"], 2, None, torch.uint8, True, 1.0, 1.0),
    (1, 33, [1], 64, ["ddtree"], 1, 16, torch.uint8, False, 1.0, 1.0),
    (2, 129, [300, 37], 64, ["ddtree", "chain"], 8, None, torch.uint8, True, 1.0, 1.0),
    (2, 17, [70, 0], 256, ["ddtree", "ddtree"], 4, None, torch.uint8, True, 1.0, 1.0),  # Qwen3.6-27B's D
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_the_float64_reference_and_sglangs_extend_attention(case, sglang_extend):
    bs, width, prefixes, dim, kinds, n_splits, block_m, mask_dtype, causal, ks, vs = CASES[case]
    c = make_case(SEED + case, bs, width, prefixes, dim=dim, kinds=kinds, mask_dtype=mask_dtype)
    o = torch.full_like(c.q, 7.0)
    t0 = time.perf_counter()
    assert tree_attn.tree_verify_fwd(*call_args(c, o, causal, k_scale=ks, v_scale=vs), n_splits=n_splits,
                                     block_m=block_m)
    t1 = time.perf_counter()
    o_sgl = torch.full_like(c.q, 7.0)
    sglang_extend(*call_args(c, o_sgl, causal, k_scale=ks, v_scale=vs))
    print(f"case {case}: ours {t1 - t0:.1f} s, sglang {time.perf_counter() - t1:.1f} s (interpreter)")
    want = reference(c, k_scale=ks, v_scale=vs)
    assert (o.double() - want).abs().max() < TOL
    assert (o - o_sgl).abs().max() < TOL
    assert (o_sgl.double() - want).abs().max() < TOL  # the reference is SGLang's semantics


@pytest.mark.parametrize(("h_q", "h_kv", "dim", "width"), [
    (3, 1, 256, 65),  # Qwen3.6-27B's full attention on one of 8 tensor-parallel ranks (24 / 4 heads), budget 64
    (6, 1, 256, 33),  # ... on one of 4 ranks
    (4, 1, 128, 17),  # an 8B target (32 / 8 heads) at tp 8
])
def test_a_tensor_parallel_ranks_heads(h_q, h_kv, dim, width, sglang_extend):
    """A rank's share of the heads, automatic tiles: an odd query-group size (3 query heads to one KV head) and
    a single KV head serve as the whole model's heads do."""
    c = make_case(SEED + 80 + h_q, 2, width, [150, 37], h_q=h_q, h_kv=h_kv, dim=dim)
    o = torch.full_like(c.q, 7.0)
    assert tree_attn.tree_verify_fwd(*call_args(c, o, True))
    o_sgl = torch.full_like(c.q, 7.0)
    sglang_extend(*call_args(c, o_sgl, True))
    assert (o.double() - reference(c)).abs().max() < TOL
    assert (o - o_sgl).abs().max() < TOL


def test_every_ancestor_bit_is_read():
    """Clearing one ancestor's bit in one node's row changes that row (and only it) to the reference's with
    the edited visibility; the unedited reference then no longer matches."""
    c = make_case(SEED + 50, 1, 16, [37])
    row = max(range(16), key=lambda i: int(c.vis[0][i].sum()))  # the deepest node: several ancestors
    col = int(np.flatnonzero(c.vis[0][row].numpy())[1])  # an ancestor other than the root
    edited = c.mask.clone()
    edited[37 + row * (37 + 16) + col] = 0
    vis = [c.vis[0].clone()]
    vis[0][row, col] = False
    o, o_edit = torch.zeros_like(c.q), torch.zeros_like(c.q)
    assert tree_attn.tree_verify_fwd(*call_args(c, o))
    assert tree_attn.tree_verify_fwd(*call_args(c, o_edit, mask=edited))
    assert (o_edit.double() - reference(c, vis)).abs().max() < TOL
    assert (o_edit[row] - o[row]).abs().max() > 1e-3
    others = [i for i in range(16) if i != row]
    assert torch.equal(o_edit[others], o[others])


def _unsupported(c: SimpleNamespace):
    """(why, positional args, keyword args) of calls the kernel must refuse."""
    o = torch.full_like(c.q, 7.0)
    base = list(call_args(c, o))
    ragged = SimpleNamespace(**{**vars(c), "q": c.q[:-1], "k": c.k[:-1], "v": c.v[:-1]})
    mla_v = torch.randn(c.v.shape[0], c.v.shape[1], 32)
    mla = base.copy()
    mla[2], mla[5] = mla_v, torch.randn(c.v_pool.shape[0], c.v_pool.shape[1], 32)

    def with_(i, value):
        args = base.copy()
        args[i] = value
        return args

    return o, [
        ("no custom mask", with_(9, None), {}),
        ("logit cap", base, {"logit_cap": 30.0}),
        ("prefix columns masked", base, {"skip_prefix_custom_mask": False}),
        ("sliding window", base, {"sliding_window_size": 8}),
        ("sinks", base, {"sinks": torch.zeros(c.h_q)}),
        ("xai temperature", base, {"xai_temperature_len": 4}),
        ("ragged extend", list(call_args(ragged, o)), {}),
        ("max_len_extend differs", with_(12, c.width + 1), {}),
        ("device k_scale", with_(13, torch.tensor(1.0)), {}),
        ("MLA head dims", mla, {}),
        ("strided output", with_(3, torch.full((o.shape[0], o.shape[1], 2 * o.shape[2]), 7.0)[..., ::2]), {}),
    ]


def test_unsupported_calls_return_false_and_leave_the_output_alone():
    c = make_case(SEED + 60, 2, 5, [3, 0])
    o, calls = _unsupported(c)
    for why, args, kwargs in calls:
        assert tree_attn.tree_verify_fwd(*args, **kwargs) is False, why
        assert bool((o == 7.0).all()), why
    wide = make_case(SEED + 61, 1, tree_attn.MAX_L_EXT + 1, [0], h_q=2, h_kv=1, dim=16, kinds=["chain"])
    o = torch.full_like(wide.q, 7.0)
    assert tree_attn.tree_verify_fwd(*call_args(wide, o)) is False
    assert bool((o == 7.0).all())


def test_the_control_case_is_served():
    """The negative test's base call itself is served (so each refusal above is the one change's doing)."""
    c = make_case(SEED + 60, 2, 5, [3, 0])
    o = torch.full_like(c.q, 7.0)
    assert tree_attn.tree_verify_fwd(*call_args(c, o))
    assert (o.double() - reference(c)).abs().max() < TOL


@pytest.mark.parametrize(
    ("bs", "h_q", "l_ext", "avg_prefix", "splits"),
    [
        (1, 32, 65, 1024, 8),  # 64 base programs: 8 splits fill the GPU
        (1, 32, 17, 4096, 16),  # 32 base programs, capped at MAX_SPLITS
        (1, 32, 17, 1024, 8),  # ... and by the prefix: 1024 / 8 = MIN_SPLIT_KEYS
        (8, 32, 129, 4096, 2),  # 128-row tiles: 512 base programs, 2 splits reach TARGET_PROGRAMS
        (1, 32, 65, 150, 1),  # a short prefix: no split under MIN_SPLIT_KEYS keys
        (1, 32, 65, 300, 2),
        (1, 24, 129, 1 << 20, 16),  # CUDA graphs: kv_indices max-size, the occupancy bound decides
    ],
)
def test_launch_from_static_shapes(bs, h_q, l_ext, avg_prefix, splits):
    launch = tree_attn.choose_launch(bs, h_q, l_ext, 128, avg_prefix)
    assert launch.n_splits == splits
    assert launch.block_m * -(-l_ext // launch.block_m) >= l_ext
    assert launch.n_splits & (launch.n_splits - 1) == 0


def test_scratch_keeps_its_address_for_smaller_batches_and_keeps_an_outgrown_buffer_alive():
    s = tree_attn.scratch_for(4, 3, 16, torch.device("cpu"), 40)
    first = s.part_o
    assert tree_attn.scratch_for(4, 3, 16, torch.device("cpu"), 20).part_o.data_ptr() == first.data_ptr()
    grown = tree_attn.scratch_for(4, 3, 16, torch.device("cpu"), 80)
    assert grown.part_o.shape == (4, 80, 3, 16) and grown.part_lse.shape == (4, 80, 3)
    assert any(t is first for t in grown.retired)  # a graph captured on it may still replay


def test_the_signature_is_extend_attention_fwds_positionally(sglang_extend):
    """A drop-in at SGLang's call site: the same parameters in the same order (q_extend.. o_extend named q.. o
    here), then our own extras; the keywords the triton backend passes are ours too."""
    import inspect

    ours_for = {"q_extend": "q", "k_extend": "k", "v_extend": "v", "o_extend": "o"}
    theirs = [ours_for.get(name, name) for name in inspect.signature(sglang_extend).parameters][:21]
    ours = list(inspect.signature(tree_attn.tree_verify_fwd).parameters)
    assert ours[:21] == theirs
    assert {"logit_cap", "sliding_window_size", "sinks", "window_kv_offsets", "xai_temperature_len",
            "max_bs"} <= set(ours)


def test_a_split_gets_at_least_min_split_keys_whatever_the_split_count():
    """Under CUDA graphs the split count is chosen without the prefix length; a short prefix then runs in
    fewer, fuller splits (300 keys, 16 splits: 128 + 128 + 44, thirteen empty), and the result stays exact."""
    c = make_case(SEED + 70, 1, 5, [300])
    o = torch.zeros_like(c.q)
    assert tree_attn.tree_verify_fwd(*call_args(c, o), n_splits=16)
    lse = tree_attn.scratch_for(16, c.h_q, c.q.shape[2], c.q.device, 5).part_lse[:, :5]
    ran = torch.isfinite(lse).all(-1).all(-1)
    assert ran.tolist() == [True] * 3 + [False] * 13
    assert (o.double() - reference(c)).abs().max() < TOL
