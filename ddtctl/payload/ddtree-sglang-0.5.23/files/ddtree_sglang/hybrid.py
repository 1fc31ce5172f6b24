"""Exact draft trees on hybrid (Mamba / Gated-DeltaNet) targets, through SGLang 0.5.23's own tree-state machinery.

SGLang already verifies EAGLE / NGRAM trees (topk > 1) on GDN hybrids with parent-indexed recurrent state: the
hybrid linear-attention backend hands `retrieve_next_token` / `retrieve_next_sibling` of the verify input to the
tree conv kernel (which derives `retrieve_parent_token`) and to the tree GDN verify kernel, so every node starts from
its parent's conv window and SSM state and its own state lands in the per-verify-token scratch
(`intermediate_conv_window`, `intermediate_ssm`). Three switches keep DDTREE (a DFLASH-family algorithm, for which
SGLang resolves `speculative_eagle_topk` to 1) on that path; all are HookRegistry hooks, active only for DDTREE in
tree mode (not `--speculative-ddtree-allow-hybrid-unsafe`):

  * AFTER `MambaAttnBackendBase.__init__` of the target's GDN backend: `topk = 2` (the backend's only tree switch,
    read at init from speculative_eagle_topk);
  * AROUND `memory_pool.conv_window_dedup_enabled`: False under SGLang's tree conv (`DDTREE_CONV_TREE=sglang`;
    the compact tree conv, the default, keeps the layout: below). With topk <= 1 on CUDA the pool overlaps
    consecutive verify tokens' conv windows (one shared buffer, `as_strided`), which is only right for a chain:
    SGLang's tree windows would overwrite each other;
  * AROUND `KVCacheConfigurator._handle_max_mamba_cache`: the memory budget counts the per-token scratch for the
    verify width max(block, B + 1) -- the width the pool is allocated with (max_speculative_num_draft_tokens) --
    instead of the drafter's block, so a wide tree cannot take memory the budget gave to the KV cache.

The commit after acceptance is SGLang's own `commit_mamba_states_after_verify` with the accepted node indices
(worker.py): the last accepted node's state becomes the request's state, and the mamba-track (extra_buffer) snapshot
is taken at the node on the accepted path where the track interval is crossed.

Compact tree verify (the default since its server-level exactness run on the H200, 2026-12-01; `DDTREE_GDN_TREE=
sglang` keeps SGLang's kernel; measured 1.16 / 1.45 x a DFLASH step at batch 1 / 8 against SGLang's kernel's
1.20 / 1.56, B=32 on the Qwen3.6-27B-shaped target, notes/step-cost-h200.md): AFTER
`GDNAttnBackend.__init__` the dispatcher's tree verify kernel becomes `CompactTreeVerify` (kernels/gdn_tree.py),
which computes the outputs in closed form over the tree and writes small per-node records instead of every node's
full SSM state. AROUND `scatter_mamba_states_after_mtp_verify` the SSM part of the commit then materialises the
accepted path's state from those records (the worker hands it the path: `pending_path`); the conv windows keep
SGLang's scatter. AROUND `memory_pool.alloc_intermediate_ssm` (a payload patch: the allocation moved into a
function) the scratch holds those records only, and `honest_mamba_budget` budgets that size, so the memory of
the per-node states goes to the KV cache. Needs fp32 SSM states and at most 128 verify nodes (one [64, 64]
tile pair: kernels/gdn_tree.py MAX_WIDTH); otherwise SGLang's kernel and scratch stay.

Shared ancestor matrix (the default since the H200 runs of 2026-12-01: the hybrid exactness suite's server
equal to plain greedy at measured ties, the 27B B=64 step 1.17 x DFLASH's; `DDTREE_GDN_ANCESTORS=derive` lets
every layer's kernel derive it): without it each compact verify call derives the tree's ancestor matrix from
retrieve_parent_token by squarings, 48 times a step on Qwen3.6-27B; given the matrix, the kernel ran 12-21 %
faster per layer (H200, bench/gdn_tree_gpu.py, block_v 64). `SharedAncestors` builds it at the first GDN
layer's call of each verify forward, with fixed-shape device ops (`ancestor_matrix`), so a captured CUDA graph
records the build and every replay rebuilds it from that replay's parents; the later layers reuse it.

Compact tree conv (the default since the H200 runs of 2026-12-01: bit-equal to SGLang's kernel at 17 and 65
nodes, batch 1 and 8, and 8.6 against 66 us a layer at 65 nodes, batch 1; `DDTREE_CONV_TREE=sglang` keeps
SGLang's tree conv, its own switch so that either kernel can be compared or turned off alone): AROUND
`causal_conv1d_update` (the module SGLang's GDN backend imports it from) the tree verify calls -- the ones with
retrieve_next_token -- run kernels/conv_tree.py instead of SGLang's tree conv, which walks the nodes one by one
and writes each node's whole conv window (1.80 ms per step for 48 layers at B=32, against DFLASH's 0.70 ms chain
conv, H200). It computes the nodes as tiles, fills retrieve_parent_token the same way, leaves the conv state as
it was before the step and writes each node's input only, into the last column of its window slot. SGLang's
deduplicated window layout (one [dim, width + W - 2] buffer per slot, meant for chains) holds those columns, so
`dense_conv_windows` keeps it and the scratch of conv windows shrinks by (W - 1) x. The commit
(`commit_tree_states`) then builds the window of the last accepted node and of the mamba-track node from the
pre-step state and the accepted path's inputs; `honest_mamba_budget` budgets the smaller scratch. The outputs are
bit-equal to SGLang's tree conv (tests/kernels/test_conv_tree.py; bench/conv_tree_gpu.py on the GPU).
"""

from __future__ import annotations

import logging
import os

import torch

from ddtree_sglang import ALGORITHM

logger = logging.getLogger(__name__)

STATE = {"tree_backends": 0, "compact_backends": 0, "conv_tree_calls": 0, "ancestor_builds": 0}
TREE_TOPK = 2
# gdn_tree.MAX_WIDTH: its two-block path (65..128 nodes) matched SGLang's kernel on the H200 and ran 1.6-4 x
# faster (bench/gdn_tree_gpu.py, 2026-12-01, block_v 64); wider trees keep SGLang's kernel
COMPACT_MAX_WIDTH = 128
# the compact tree conv: bit-equal to SGLang's tree conv and faster at every shape measured (H200, 2026-12-01,
# bench/conv_tree_gpu.py; a Qwen3.6-27B step at budget 64: 0.30 against 4.44 ms of conv)
CONV_TREE_DEFAULT = "compact"
# DDTREE_GDN_ANCESTORS unset: one ancestor matrix a verify forward, shared by the GDN layers (SharedAncestors)
ANCESTORS_DEFAULT = "shared"
# DDTREE_GDN_BLOCK2 unset: 65..128 nodes verify with block 2 on the full 64-row tile, the launch the H200 servers
# ran exact; "rows" sizes block 2 to its nodes (gdn_tree.py block2=None: 16 rows at 65), opt-in until its H200 run
BLOCK2_DEFAULT = "full"
# DDTREE_GDN_SOLVE: "squarings" (gdn_tree.py) or "levels" / "levels2", one / two tree levels a step (gdn_levels.py:
# as many steps as the tree is deep, one tile up to 128 nodes). "auto", the default, takes levels2 from
# LEVELS_FROM_NODES verify nodes on. H200, 2026-12-04, bench/gdn_tree_gpu.py --levels, Qwen3.6-27B's GDN at tp 1,
# us a layer at batch 1 / 8 (squarings with shared ancestors vs levels2): 65 nodes 29.1 / 178 vs 42.8 / 270;
# 97 nodes 56.4 / 492 vs 43.7 / 286; 128 nodes 52.2 vs 37.5 (batch 1); both as exact against SGLang's kernel.
# "levels4" / "levels16": the same kernel through log2 stages first (a DDTREE tree of depth <= 15 needs no level
# step at 16: 2 log2(depth) dependent products instead of ~depth / 2); opt-in until timed on a GPU.
SOLVE_DEFAULT = "auto"
SOLVE_LEVELS = {"levels": 1, "levels2": 2, "levels4": 4, "levels16": 16}
LEVELS_FROM_NODES = 81  # block 2 of the squarings grows past 16 rows here; levels2 is flat in the node count
PENDING: dict = {}  # the accepted path of the commit in progress (worker.py -> commit_tree_states)


def _spec():
    from sglang.srt.runtime_context import get_spec

    return get_spec()


def ddtree_active() -> bool:
    try:
        return str(getattr(_spec(), "speculative_algorithm", "") or "").upper() == ALGORITHM
    except Exception:
        return False


def tree_mode() -> bool:
    """DDTREE with exact trees on hybrid targets (everything but the unsafe sibling-sharing mode)."""
    return ddtree_active() and not bool(getattr(_spec(), "speculative_ddtree_allow_hybrid_unsafe", False))


def verify_width() -> int:
    spec = _spec()
    return max(int(getattr(spec, "speculative_num_draft_tokens", 0) or 0),
               int(getattr(spec, "speculative_ddtree_verify_width", 0) or 0))


class WidthView:
    """get_spec() with speculative_num_draft_tokens replaced (the verify width instead of the drafter's block)."""

    def __init__(self, spec, tokens: int):
        self._spec = spec
        self.speculative_num_draft_tokens = tokens

    def __getattr__(self, name):
        return getattr(self._spec, name)


def tree_backend(result, backend, model_runner, *args, **kwargs):
    """AFTER hook on MambaAttnBackendBase.__init__: the target's GDN backend runs its topk > 1 tree path."""
    if not tree_mode() or getattr(model_runner, "is_draft_worker", False):
        return None
    if type(backend).__name__ != "GDNAttnBackend":
        return None  # the worker refuses tree mode on other linear-attention backends, with the reason
    backend.topk = TREE_TOPK
    STATE["tree_backends"] += 1
    return None


# The compact GDN tree verify is the default since its server-level exactness run (H200, 2026-12-01: outputs equal
# plain greedy at B=15/32, CUDA graphs on); DDTREE_GDN_TREE=sglang keeps SGLang's kernel.
GDN_TREE_DEFAULT = "compact"


def compact_wanted() -> bool:
    return tree_mode() and os.environ.get("DDTREE_GDN_TREE", GDN_TREE_DEFAULT) == "compact"


def _kept_log(message: str, *args) -> None:
    """Asked for by name, a kernel that cannot run is worth a warning; by default, a line of info."""
    (logger.warning if "DDTREE_GDN_TREE" in os.environ else logger.info)(message, *args)


def _shipped_kernel(name: str):
    """ddtree_sglang.kernels.<name> as shipped in the payload; ddtctl.kernels.<name> in the ddtctl checkout (tests)."""
    import importlib

    try:
        return importlib.import_module(f"ddtree_sglang.kernels.{name}")
    except ImportError:
        return importlib.import_module(f"ddtctl.kernels.{name}")


def _gdn_tree():
    return _shipped_kernel("gdn_tree")


def _gdn_levels():
    return _shipped_kernel("gdn_levels")


class CompactTreeVerify:
    """The GDN dispatcher's tree verify kernel, replaced: outputs in closed form, per-node records (gdn_tree.py)."""

    supports_strided_target_verify_qkv = False
    # H200, Qwen3.6-27B's GDN, TF32 (bench/gdn_tree_gpu.py, 2026-12-01): as exact as block_v 32, 1.6-1.8 x faster
    # at 33-64 nodes and 1.4-2 x at 65-128 (the two-block kernel clamps it to 16 at tf32x3: shared memory)
    BLOCK_V = 64

    def __init__(self, depth_bound: int):
        self.depth_bound = depth_bound
        self.precision = os.environ.get("DDTREE_GDN_TREE_PRECISION", "tf32")
        self.ancestors = SharedAncestors() if shared_ancestors_wanted() else None
        self.full_block2 = os.environ.get("DDTREE_GDN_BLOCK2", BLOCK2_DEFAULT) != "rows"
        self.solve = os.environ.get("DDTREE_GDN_SOLVE", SOLVE_DEFAULT)
        self.levels_per_step = SOLVE_LEVELS.get(self.solve)
        if self.levels_per_step is not None:
            logger.info("DDTREE compact GDN verify: %d tree level(s) a step (gdn_levels.py)", self.levels_per_step)
        elif self.solve == "auto":
            logger.info("DDTREE compact GDN verify: two tree levels a step from %d nodes", LEVELS_FROM_NODES)
        if self.ancestors is not None:
            logger.info("DDTREE compact GDN verify: one ancestor matrix a verify forward, for all layers")

    def target_verify(self, *, A_log, dt_bias, q, k, v, a, b, ssm_states, cache_indices, query_start_loc,
                      intermediate_states_buffer, intermediate_state_indices, retrieve_parent_token, **_):
        STATE["key_heads"] = int(k.shape[2])  # the commit's records are laid out by key heads
        ancestors = None
        n_req = int(query_start_loc.shape[0]) - 1
        kernel_nodes = (n_req, int(k.shape[1]) // max(n_req, 1))  # requests, nodes per request
        if self.ancestors is not None and tuple(retrieve_parent_token.shape) == kernel_nodes:
            ancestors = self.ancestors.of(retrieve_parent_token, ssm_states.data_ptr(), self.depth_bound)
        call = dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=ssm_states,
                    cache_indices=cache_indices, query_start_loc=query_start_loc,
                    intermediate_states_buffer=intermediate_states_buffer,
                    intermediate_state_indices=intermediate_state_indices,
                    retrieve_parent_token=retrieve_parent_token, depth_bound=self.depth_bound,
                    precision=self.precision, block_v=self.BLOCK_V, ancestors=ancestors)
        levels = self.levels_per_step
        if levels is None and self.solve == "auto" and kernel_nodes[1] >= LEVELS_FROM_NODES:
            levels = 2
        if levels is not None:
            return _gdn_levels().tree_gdn_verify_levels(levels_per_step=levels, **call)
        kernels = _gdn_tree()
        two_block = kernel_nodes[1] > kernels.MAX_SINGLE_TILE
        return kernels.tree_gdn_verify(
            **call, block2=kernels.TWO_BLOCK_TILE if two_block and self.full_block2 else None)


def shared_ancestors_wanted() -> bool:
    return os.environ.get("DDTREE_GDN_ANCESTORS", ANCESTORS_DEFAULT) == "shared"


def ancestor_matrix(parents: torch.Tensor, depth_bound: int) -> torch.Tensor:
    """bool [bs, T, T], row i = the ancestors of node i and i itself, from parents [bs, T] (node 0 is the
    root, its entry ignored; an entry outside 0..T-1 is no parent), as the compact kernel derives it.
    Fixed-shape device ops only (no mask indexing, no host sync), so a CUDA graph can capture it: one hop
    up or none, squared until the paths span depth_bound hops. The 0/1 products sum to at most T, exact in
    TF32 too."""
    width = parents.shape[1]
    nodes = torch.arange(width, device=parents.device)
    hop = (parents[:, :, None] == nodes[None, None, :]) & (nodes > 0)[None, :, None]
    reach = (hop | torch.eye(width, dtype=torch.bool, device=parents.device)).float()
    for _ in range(max(1, int(depth_bound).bit_length())):
        reach = torch.bmm(reach, reach).clamp_(max=1.0)
    return reach > 0.5


class SharedAncestors:
    """The ancestor matrix of the verify forward in progress: built at its first GDN layer's call, reused by
    the later layers' calls. A forward is new when the forward-begin hook forgot the matrix
    (forget_tree_ancestors) or when the layer that built it calls again: CUDA-graph capture runs the forward
    several times (warm-ups, then the captured run) after one metadata init, and the captured run must
    record the build."""

    def __init__(self):
        self.matrix: torch.Tensor | None = None
        self._parents: tuple | None = None  # the parents' address, shape and device it was built from
        self._builder: int | None = None  # the building layer's SSM state address

    def forget(self) -> None:
        self.matrix = self._parents = self._builder = None

    def of(self, parents: torch.Tensor, layer: int, depth_bound: int) -> torch.Tensor:
        key = (parents.data_ptr(), tuple(parents.shape), str(parents.device))
        if self.matrix is None or key != self._parents or layer == self._builder:
            self.matrix = ancestor_matrix(parents, depth_bound)
            self._parents, self._builder = key, layer
            STATE["ancestor_builds"] += 1
        return self.matrix


def forget_tree_ancestors(result, backend, *args, **kwargs):
    """AFTER hook on GDNAttnBackend.init_forward_metadata and init_forward_metadata_out_graph (eager, capture
    and replay): a forward begins, the shared ancestor matrix of the one before is stale."""
    kernel = getattr(getattr(backend, "kernel_dispatcher", None), "tree_verify_kernel", None)
    if isinstance(kernel, CompactTreeVerify) and kernel.ancestors is not None:
        kernel.ancestors.forget()
    return None


def compact_planned(ssm_dtype) -> bool:
    """The compact tree verify applies: asked for, fp32 SSM states, a verify width its tiles take. One answer for
    the memory budget, the scratch allocation and the kernel."""
    if not compact_wanted():
        return False
    if ssm_dtype != torch.float32:
        _kept_log("DDTREE: SGLang's GDN tree kernel kept (the compact one needs fp32 SSM states)")
        return False
    if verify_width() > COMPACT_MAX_WIDTH:
        _kept_log("DDTREE: SGLang's GDN tree kernel kept (the compact one verifies at most %d nodes, not %d)",
                  COMPACT_MAX_WIDTH, verify_width())
        return False
    return True


def compact_tree_kernel(result, backend, model_runner, *args, **kwargs):
    """AFTER hook on GDNAttnBackend.__init__: the compact tree verify for the target (fp32 SSM states only)."""
    if not compact_wanted() or getattr(model_runner, "is_draft_worker", False):
        return None
    cache = model_runner.req_to_token_pool.mamba_pool.mamba_cache
    if getattr(cache, "intermediate_ssm", None) is None or not compact_planned(cache.temporal.dtype):
        if STATE.get("compact_scratch"):
            raise RuntimeError("DDTREE: the mamba pool holds compact verify records, but the compact GDN tree "
                               "kernel cannot run here; set DDTREE_GDN_TREE=sglang")
        return None
    backend.kernel_dispatcher.tree_verify_kernel = CompactTreeVerify(depth_bound=_depth_bound())
    STATE["compact_backends"] += 1
    return None


def compact_scratch(original, size, dtype, device, *args, **kwargs):
    """AROUND hook on memory_pool.alloc_intermediate_ssm (a payload patch): with the compact verify, a node's
    scratch row holds its records (gdn_tree.record_width floats) instead of a full [HV, V, K] state -- ~60 x less
    memory for Qwen3.6-27B's GDN layers, which the memory budget (honest_mamba_budget) gives to the KV cache."""
    if not compact_planned(dtype):
        return original(size, dtype, device, *args, **kwargs)
    layers, slots, width, hv, v, k = (int(x) for x in size)
    STATE["compact_scratch"] = True
    return torch.zeros(_gdn_tree().compact_scratch_shape(layers, slots, width, hv, v, k), dtype=dtype,
                       device=device)


def compact_budget_width(params, width: int, ssm: bool = True, conv: bool = False) -> int:
    """The draft-token count that makes SGLang's budget (mamba state per request x tokens) reserve what a
    compact pool allocates per slot: per verify token the SSM records (ssm) instead of a state, and the conv
    inputs in the deduplicated layout (conv: width + W - 2 columns per slot) instead of a window per token."""
    import math

    itemsize = params.dtype.conv.itemsize
    conv_bytes = sum(math.prod(shape) for shape in params.shape.conv) * itemsize
    hv, v, k = params.shape.temporal
    state_bytes = hv * v * k * params.dtype.temporal.itemsize
    ssm_row = _gdn_tree().record_width(hv, hv, k, v) * params.dtype.temporal.itemsize if ssm else state_bytes
    if conv:
        columns = [math.prod(shape[:-1]) * (width + shape[-1] - 1) for shape in params.shape.conv]
        conv_scratch = sum(columns) * itemsize
    else:
        conv_scratch = width * conv_bytes
    return max(1, math.ceil((conv_scratch + width * ssm_row) / (conv_bytes + state_bytes)))


def conv_compact_wanted() -> bool:
    return tree_mode() and os.environ.get("DDTREE_CONV_TREE", CONV_TREE_DEFAULT) == "compact"


def _conv_tree():
    return _shipped_kernel("conv_tree")


_CONV_ARGS = ("x", "conv_state", "weight", "bias", "activation")


def compact_tree_conv(original, *args, **kwargs):
    """AROUND hook on causal_conv1d_update: with the compact tree conv (DDTREE_CONV_TREE unset or compact) a
    tree verify call (retrieve_next_token given) runs kernels/conv_tree.py, which writes one input per node into
    the window scratch. Never SGLang's tree conv then: its whole windows would overwrite each other in the
    deduplicated layout."""
    if kwargs.get("retrieve_next_token") is None or not conv_compact_wanted():
        return original(*args, **kwargs)
    call = dict(zip(_CONV_ARGS, args), **kwargs)
    unsupported = [name for name in ("cache_seqlens", "num_accept_tokens") if call.get(name) is not None]
    if len(args) > len(_CONV_ARGS) or unsupported or call.get("intermediate_conv_window") is None \
            or call.get("pad_slot_id", -1) != -1 or call["x"].dim() != 3:
        raise RuntimeError(f"DDTREE compact tree conv: an unexpected tree conv call ({len(args)} positional, "
                           f"{sorted(call)}); set DDTREE_CONV_TREE=sglang")
    if not STATE["conv_tree_calls"]:
        logger.info("DDTREE hybrid tree verify: compact tree conv (kernels/conv_tree.py)")
    STATE["conv_tree_calls"] += 1
    return _conv_tree().tree_conv_verify(
        call["x"], call["conv_state"], call["weight"], call.get("bias"), call.get("activation"),
        conv_state_indices=call["conv_state_indices"],
        intermediate_conv_window=call["intermediate_conv_window"],
        intermediate_state_indices=call["intermediate_state_indices"],
        retrieve_next_token=call["retrieve_next_token"], retrieve_next_sibling=call["retrieve_next_sibling"],
        retrieve_parent_token=call["retrieve_parent_token"])


def _depth_bound() -> int:
    return max(1, int(getattr(_spec(), "speculative_num_draft_tokens", 16) or 16) - 1)


def pending_path(accept_index, accept_lens, width: int) -> None:
    """worker.py, right before SGLang's commit: the accepted path the compact commit replays."""
    PENDING.update(accept_index=accept_index, accept_lens=accept_lens, width=width)


def commit_tree_states(original, mamba_caches, state_indices, last_steps, track_indices, track_steps,
                       src_indices_raw=None, *args, **kwargs):
    """AROUND hook on scatter_mamba_states_after_mtp_verify: the scratch parts a compact kernel wrote hold
    records, not states or windows, so their commit replays the accepted path; SGLang's scatter moves the other
    parts."""
    ssm = bool(STATE["compact_backends"]) and tree_mode()
    conv = conv_compact_wanted()
    if not ssm and not conv:
        return original(mamba_caches, state_indices, last_steps, track_indices, track_steps, src_indices_raw,
                        *args, **kwargs)
    if not PENDING:
        raise RuntimeError("DDTREE compact tree commit without the accepted path (pending_path was not called)")
    path = dict(PENDING)
    PENDING.clear()
    n_req = state_indices.shape[0]
    rows = src_indices_raw if src_indices_raw is not None else torch.arange(
        n_req, dtype=torch.int32, device=state_indices.device)
    accept_index, accept_lens = path["accept_index"][:n_req], path["accept_lens"][:n_req]
    if ssm:
        n_heads = STATE.get("key_heads")
        if not n_heads:
            raise RuntimeError("DDTREE compact tree commit before any compact verify")
        _gdn_tree().tree_gdn_commit(
            temporal=mamba_caches.temporal, intermediate_ssm=mamba_caches.intermediate_ssm,
            state_indices=state_indices, scratch_rows=rows, accept_index=accept_index,
            accept_lens=accept_lens, width=path["width"], n_heads=n_heads, track_indices=track_indices,
            track_nodes=track_steps, precision=os.environ.get("DDTREE_GDN_TREE_PRECISION", "tf32x3"))
    if conv:
        if not STATE["conv_tree_calls"] or len(mamba_caches.conv) != 1:
            raise RuntimeError("DDTREE compact conv commit without a compact tree conv before it (or with "
                               f"{len(mamba_caches.conv)} conv caches); set DDTREE_CONV_TREE=sglang")
        _conv_tree().tree_conv_commit(
            conv=mamba_caches.conv[0], intermediate_conv_window=mamba_caches.intermediate_conv_window[0],
            state_indices=state_indices, scratch_rows=rows, accept_index=accept_index,
            accept_lens=accept_lens, width=path["width"], track_indices=track_indices,
            track_nodes=track_steps)
    if ssm and conv:
        return None
    return original(_Remaining(mamba_caches, ssm=not ssm, conv=not conv), state_indices, last_steps,
                    track_indices, track_steps, src_indices_raw, *args, **kwargs)


class _Remaining:
    """The speculative caches with the parts a compact commit wrote emptied: SGLang's scatter skips empty SSM
    and conv states and moves the rest."""

    def __init__(self, caches, ssm: bool, conv: bool):
        self.temporal = caches.temporal if ssm else caches.temporal.new_empty(0)
        self.intermediate_ssm = caches.intermediate_ssm
        self.conv = caches.conv if conv else [c.new_empty(0) for c in caches.conv]
        self.intermediate_conv_window = caches.intermediate_conv_window


def dense_conv_windows(original, *args, **kwargs):
    """AROUND hook on memory_pool.conv_window_dedup_enabled: dense per-token conv windows for SGLang's tree
    conv. The compact tree conv writes one input column per node, which SGLang's own (deduplicated) layout
    holds."""
    if tree_mode() and not conv_compact_wanted():
        return False
    return original(*args, **kwargs)


def honest_mamba_budget(original, configurator, *args, **kwargs):
    """AROUND hook on KVCacheConfigurator._handle_max_mamba_cache: budget the scratch of the real verify width."""
    if not ddtree_active():
        return original(configurator, *args, **kwargs)
    import sglang.srt.mem_cache.kv_cache_configurator as kvc

    width = verify_width()
    params = getattr(getattr(configurator, "mambaish_config", None), "mamba2_cache_params", None)
    if params is not None and not _unified_memory():
        ssm = compact_planned(params.dtype.temporal)
        conv = conv_compact_wanted() and not getattr(params.shape, "disable_conv_window_dedup", False)
        if ssm or conv:
            width = compact_budget_width(params, width, ssm=ssm, conv=conv)
    real = kvc.get_spec
    kvc.get_spec = lambda: WidthView(real(), width)
    try:
        return original(configurator, *args, **kwargs)
    finally:
        kvc.get_spec = real


def _unified_memory() -> bool:
    """The unified memory pool allocates its own scratch (full states): the budget must count those."""
    try:
        from sglang.srt.runtime_context import get_memory

        return bool(getattr(get_memory(), "enable_unified_memory", False))
    except Exception:
        return False


def register_hooks(HookRegistry, HookType) -> None:
    HookRegistry.register(
        "sglang.srt.layers.attention.hybrid_linear_attn_backend.MambaAttnBackendBase.__init__", tree_backend,
        HookType.AFTER)
    HookRegistry.register("sglang.srt.mem_cache.memory_pool.conv_window_dedup_enabled", dense_conv_windows,
                          HookType.AROUND)
    HookRegistry.register("sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend.__init__",
                          compact_tree_kernel, HookType.AFTER)
    for begin in ("init_forward_metadata", "init_forward_metadata_out_graph"):
        HookRegistry.register(f"sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend.{begin}",
                              forget_tree_ancestors, HookType.AFTER)
    HookRegistry.register("sglang.kernels.ops.mamba.mamba_state_scatter_triton.scatter_mamba_states_after_mtp_verify",
                          commit_tree_states, HookType.AROUND)
    HookRegistry.register("sglang.srt.mem_cache.memory_pool.alloc_intermediate_ssm", compact_scratch,
                          HookType.AROUND)
    HookRegistry.register("sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_update",
                          compact_tree_conv, HookType.AROUND)
    HookRegistry.register(
        "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._handle_max_mamba_cache",
        honest_mamba_budget, HookType.AROUND)
