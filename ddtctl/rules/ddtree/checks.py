"""DDTREE rules. DDT101-DDT115 (and DDT117, schedule.py) are small checks over `core` (core.py), the one
source of truth shared with the SGLang payload (which ships that file byte for byte and enforces it inside
SGLang's resolution): each check here gives a rule its id, title, reads and doc, and reports the core's
verdict for that id, message and fix included. DDT120 (the bundled worker's refusals) and DDT114 (the
recurrent verify scratch) are ddtctl's own, stricter than SGLang; so is DDT116 (the payload's hybrid kernels
as the profile's `env:` switches them), in kernels.py, whose decisions DDT114 sizes the scratch with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ddtctl.rules.ddtree import core as ddtree_core
from ddtctl.rules.ddtree.kernels import (
    COMPACT_MAX_WIDTH,
    CONV_TREE,
    GDN_TREE,
    SGLANG_KERNELS,
    conv_dtype_bytes,
    kernel_plan,
    record_floats,
    ssm_dtype,
    switch,
)
from ddtctl.rules.engine import (
    ERROR,
    FACT_MODEL,
    FACT_MODEL_CONFIG,
    INFO,
    WARNING,
    Context,
    Hit,
    rule,
)

REFERENCE = "ddtctl payload (ddtctl/rules/ddtree/core.py, enforced inside SGLang by the DDTREE payload)"


def _is_ddtree(ctx: Context) -> bool:
    return ctx.algorithm == "DDTREE"


def _core_violations(ctx: Context) -> list[ddtree_core.DdtreeViolation]:
    """The core's verdict for this context, computed once and shared by the DDT1xx checks."""
    cached = ctx.memo.get("ddtree_violations")
    if cached is None:
        flags = dict(ctx.given)
        flags["speculative_algorithm"] = "DDTREE"
        model = {
            "architecture": ctx.model.architecture if ctx.model else None,
            "is_hybrid": ctx.is_hybrid,
            "vocab_size": (
                ctx.draft.vocab_size
                if ctx.draft and ctx.draft.vocab_size
                else ctx.model.vocab_size
                if ctx.model
                else None
            ),
            "draft_block_size": ctx.draft.block_size if ctx.draft else None,
        }
        cached = ctx.memo["ddtree_violations"] = ddtree_core.ddtree_violations(flags, model)
    return cached


def core_hits(ctx: Context, rule_id: str) -> Iterator[Hit]:
    """The core's violations of `rule_id` as hits (message, fix, edits, severity) about its first flag."""
    for v in _core_violations(ctx):
        if v.rule_id == rule_id:
            yield Hit(
                v.message,
                fix=v.fix,
                about=v.reads[0] if v.reads else None,
                edits=v.edits,
                severity=v.severity,
            )


def core_rule(
    rule_id: str, title: str, *, reads: tuple[str, ...], severity: str = ERROR, needs: tuple[str, ...] = ()
) -> Callable[[Callable[[Context], Iterator[Hit]]], Callable]:
    """Register a DDTREE rule decided by `ddtree_core` (the decorated function's docstring is its doc)."""
    evidence = "no wheel raise site: the DDTREE payload raises it in SGLang's resolver (ddtree_cases.yaml)"
    extra: dict[str, Any] = {"applies": _is_ddtree, "reference": REFERENCE, "evidence": evidence}
    return rule(rule_id, title, severity=severity, reads=reads, needs=needs, **extra)


@core_rule("DDT101", "DDTREE needs a DFlash drafter", reads=("speculative_draft_model_path",))
def ddtree_drafter(ctx: Context) -> Iterator[Hit]:
    """DDTree builds its tree from one DFlash block-diffusion pass: `--speculative-draft-model-path` must name
    a DFlash draft model."""
    return core_hits(ctx, "DDT101")


@core_rule("DDT102", "DDTREE block size is positive", reads=("speculative_dflash_block_size",))
def ddtree_block_size(ctx: Context) -> Iterator[Hit]:
    """`--speculative-dflash-block-size` must be > 0."""
    return core_hits(ctx, "DDT102")


@core_rule(
    "DDT103",
    "DDTREE draft tokens equal the block size",
    reads=("speculative_num_draft_tokens", "speculative_dflash_block_size"),
)
def ddtree_draft_tokens(ctx: Context) -> Iterator[Hit]:
    """As for DFLASH, `--speculative-num-draft-tokens` must equal the block size (it is derived from it when
    unset)."""
    return core_hits(ctx, "DDT103")


@core_rule("DDT104", "DDTREE budget is at least 1", reads=("speculative_ddtree_budget",))
def ddtree_budget_positive(ctx: Context) -> Iterator[Hit]:
    """`--speculative-ddtree-budget` B is the number of draft-tree nodes verified per step, root excluded; the
    verify width is B+1."""
    return core_hits(ctx, "DDT104")


@core_rule("DDT105", "DDTREE topk cap is at least 1", reads=("speculative_ddtree_topk_cap",))
def ddtree_topk_cap(ctx: Context) -> Iterator[Hit]:
    """`--speculative-ddtree-topk-cap` caps the candidates per depth."""
    return core_hits(ctx, "DDT105")


@core_rule("DDT106", "DDTREE budget is bounded", reads=("speculative_ddtree_budget",))
def ddtree_budget_bounded(ctx: Context) -> Iterator[Hit]:
    """Budgets above 4096 (ddtree_core.MAX_VERIFY_BUDGET) make each verify pass too wide for one target
    forward; the paper's best budgets are 256-512."""
    return core_hits(ctx, "DDT106")


@core_rule(
    "DDT107",
    "DDTREE budget can be filled by the drafter",
    reads=("speculative_ddtree_budget", "speculative_ddtree_topk_cap", "speculative_dflash_block_size"),
)
def ddtree_budget_fillable(ctx: Context) -> Iterator[Hit]:
    """A drafter of block size S proposes S-1 depths with at most K = min(topk cap, vocab) candidates each; a
    budget above the full tree's node count cannot be filled."""
    return core_hits(ctx, "DDT107")


@core_rule("DDT108", "DDTREE runs with pipeline parallel size 1", reads=("pp_size",))
def ddtree_pp(ctx: Context) -> Iterator[Hit]:
    """Like DFLASH, DDTREE supports only `pp_size == 1`."""
    return core_hits(ctx, "DDT108")


@core_rule("DDT109", "DDTREE does not support constrained decoding", reads=("grammar_backend",))
def ddtree_grammar(ctx: Context) -> Iterator[Hit]:
    """A grammar mask is per position of one sequence; tree branches share positions, so `--grammar-backend`
    must be unset or none."""
    return core_hits(ctx, "DDT109")


@core_rule(
    "DDT111",
    "DDTREE on a hybrid model needs extra-buffer mamba caching",
    reads=("mamba_radix_cache_strategy", "mamba_full_memory_ratio"),
    needs=(FACT_MODEL,),
)
def ddtree_hybrid_cache(ctx: Context) -> Iterator[Hit]:
    """On hybrid Mamba/GDN targets, tree verification keeps recurrent-state snapshots per draft node:
    `--mamba-radix-cache-strategy extra_buffer` and an explicit `--mamba-full-memory-ratio` in (0, 1) are
    required. One finding names every missing flag."""
    return core_hits(ctx, "DDT111")


@core_rule(
    "DDT112",
    "DDTREE shadow-linear and allow-hybrid-unsafe exclude each other",
    reads=("speculative_ddtree_allow_hybrid_unsafe", "speculative_ddtree_shadow_linear"),
)
def ddtree_hybrid_modes(ctx: Context) -> Iterator[Hit]:
    """Two ways to verify a DDTree on a hybrid (Mamba / Gated-DeltaNet) target; they cannot both be set.

    `--speculative-ddtree-shadow-linear` (and the default on hybrid targets when neither flag is given): exact
    trees. The recurrent (linear-attention) layers give every tree node the state of its own
    root-to-node path: parent-indexed conv windows and SSM states, through SGLang's own EAGLE tree kernels
    (topk > 1) for Gated-DeltaNet. The tree verifies exactly as the target would decode each branch; the
    accepted node's state is committed. Cost: per-verify-token recurrent scratch (DDT114).

    `--speculative-ddtree-allow-hybrid-unsafe`: verify the tree with the chain kernels, so sibling branches
    share recurrent state and outputs may differ from the target's greedy output. A test / negative-control
    mode (DDT113 warns).

    On a model without recurrent layers both flags have no effect; together they are still a contradiction and
    rejected."""
    return core_hits(ctx, "DDT112")


@core_rule(
    "DDT113",
    "DDTREE on a hybrid model with allow-hybrid-unsafe shares recurrent state across branches",
    reads=("speculative_ddtree_allow_hybrid_unsafe",),
    severity=WARNING,
    needs=(FACT_MODEL,),
)
def ddtree_hybrid_unsafe(ctx: Context) -> Iterator[Hit]:
    """`--speculative-ddtree-allow-hybrid-unsafe` verifies the tree through the recurrent layers with the
    chain kernels: sibling branches see each other's recurrent state, so the accepted tokens can differ from
    the target's greedy output. Valid (SGLang with the payload logs the same warning), but meant for tests and
    negative controls; exact trees are the default on hybrid targets."""
    return core_hits(ctx, "DDT113")


@core_rule(
    "DDT115",
    "DDTREE serves on the triton attention backend (SGLang resolves it when unset)",
    reads=("attention_backend",),
    severity=INFO,
)
def ddtree_attention_backend(ctx: Context) -> Iterator[Hit]:
    """The DDTREE worker verifies its tree with a custom (ancestor-only) attention mask and is proven on
    SGLang's triton attention backend. When none of `--attention-backend`, `--prefill-attention-backend` and
    `--decode-attention-backend` is given, SGLang with the DDTREE payload declares `attention_backend=triton`
    in its resolution (logged, and listed by `ddtctl dry-run`), before SGLang would pick the GPU's default
    (fa3 on Hopper, flashinfer / trtllm_mha on Blackwell). An info finding; an explicit other backend is
    DDT120's warning instead."""
    return core_hits(ctx, "DDT115")


@rule(
    "DDT120",
    "the bundled DDTREE worker can serve this launch",
    severity=WARNING,
    reads=("enable_dp_attention", "attention_backend", "speculative_draft_window_size"),
    applies=_is_ddtree,
    reference="ddtctl payload ddtree_sglang/worker.py (refusals at server start)",
    sglang_enforces=False,
)
def worker_capability(ctx: Context):
    """SGLang with the payload accepts these launches (the configuration is right), but the DDTREE worker
    shipped in this payload refuses them when the server starts: it runs at any tp-size, but without DP
    attention (ranks would verify different batches), on the triton attention backend only (it verifies with a
    custom tree mask), and without a compact draft window. A server launched anyway stops at start-up with the
    worker's one-line reason. `ddtctl deploy` treats this warning as an error when the payload it ships
    carries this worker (byte for byte): it stops at preflight, before shipping or launching."""
    if ctx.dp_attention:
        yield Hit(
            "the bundled DDTREE worker does not support DP attention (ranks would verify different batches); "
            "the server would refuse to start",
            about="enable_dp_attention",
            fix="remove enable-dp-attention / attn-dp-size "
            "(tensor parallelism alone serves DDTREE on many GPUs)",
        )
    for (
        flag
    ) in ddtree_core.ATTENTION_BACKEND_FLAGS:  # unset: SGLang with the payload resolves triton (DDT115)
        backend = ctx.given.get(flag)
        if backend is not None and backend != "triton":
            yield Hit(
                "the bundled DDTREE worker verifies with a custom tree mask on the triton attention backend "
                f"only, got {flag.replace('_', '-')} {backend}",
                about=flag,
                fix=f"set {flag.replace('_', '-')}: triton (or leave the attention backends unset)",
                edits={flag: "triton"},
            )
            break
    if ctx.is_set("speculative_draft_window_size"):
        yield Hit(
            "the bundled DDTREE worker does not support a compact draft window yet",
            about="speculative_draft_window_size",
            fix="remove speculative-draft-window-size",
            edits={"speculative_draft_window_size": None},
        )


# -- DDT114: the recurrent layers' per-verify-token scratch --------------------------------------------------
MIB, GIB = 1 << 20, 1 << 30
DEFAULT_MAX_RUNNING_REQUESTS = (
    48  # the DFLASH family's default (speculative_hook.py _handle_dflash), DDTREE's too
)
# SGLang derives mem_fraction_static from the GPU's memory minus activation, CUDA-graph and (for VLMs) vision
# reserves (memory_hook.py handle_gpu_memory_settings); its resolver gives 0.78-0.84 for Qwen3.6-27B on RTX
# PRO 6000, H200 and B200 at tp 1-8. Unset, ddtctl assumes the low end.
DEFAULT_MEM_FRACTION_STATIC = 0.78
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
CONV_DTYPE_BYTES = (
    2  # SGLANG_MAMBA_CONV_DTYPE, bfloat16 by default (configs/mamba_utils.py mamba2_state_dtype)
)


@dataclass(frozen=True)
class VerifyScratch:
    """Per-verify-token recurrent scratch SGLang allocates for a hybrid Gated-DeltaNet target (memory_pool.py
    MambaPool, SpeculativeState): `intermediate_ssm` [layers, reqs + 1, n, HV, V, K] in the SSM dtype and
    `intermediate_conv_window` [layers, reqs + 1, n, conv_dim, conv_kernel - 1] in the conv dtype, n the
    verify width. Tree verify keeps the conv windows dense (one per token); the chain kernels share one
    [conv_dim, n + kernel - 2] window per request (memory_pool.py conv_window_dedup_enabled). The payload's
    compact kernels (ddtree/kernels.py) shrink both: `kernels` names those assumed (none for SGLang's own)."""

    linear_layers: int
    width: int  # n = max(block size, budget + 1)
    ssm_bytes_per_token: int  # per request, all linear layers
    conv_bytes_per_request: int  # all linear layers, all n tokens
    linear_tp: int
    kernels: tuple[str, ...] = ()  # e.g. ("DDTREE_GDN_TREE=compact",): the payload's compact kernels assumed

    @property
    def per_request(self) -> int:
        return self.ssm_bytes_per_token * self.width + self.conv_bytes_per_request

    def total(self, requests: int) -> int:
        """Bytes for `requests` running requests: the pool has requests + 1 slots (its padding slot)."""
        return self.per_request * (requests + 1)


def _shard(n: int, tp: int) -> int:
    return -(-n // tp)


def verify_scratch(
    *,
    linear_layers: int,
    num_key_heads: int,
    num_value_heads: int,
    key_head_dim: int,
    value_head_dim: int,
    conv_kernel: int,
    width: int,
    linear_tp: int = 1,
    ssm_dtype_bytes: int = 4,
    conv_dtype_bytes: int = CONV_DTYPE_BYTES,
    dense_conv: bool = True,
    compact_ssm: bool = False,
    kernels: tuple[str, ...] = (),
) -> VerifyScratch:
    """One GPU's scratch (its linear-attention TP shard): HV = value heads / tp, conv_dim = (2 x key heads x
    key dim + value heads x value dim) / tp, as configs/mamba_utils.py Mamba2StateShape.create shards them.
    `compact_ssm`: a node's row holds the compact GDN verify's records instead of its [HV, V, K] state
    (hybrid.py compact_scratch, shape from kernels/gdn_tree.py compact_scratch_shape); `dense_conv` False:
    SGLang's deduplicated [conv_dim, n + kernel - 2] window per request (chain kernels, or the compact tree
    conv, hybrid.py dense_conv_windows)."""
    hv = _shard(num_value_heads, linear_tp)
    conv_dim = _shard(2 * num_key_heads * key_head_dim + num_value_heads * value_head_dim, linear_tp)
    state = hv * value_head_dim * key_head_dim
    row = record_floats(hv, value_head_dim, key_head_dim) if compact_ssm else state
    ssm = linear_layers * row * ssm_dtype_bytes
    columns = width * (conv_kernel - 1) if dense_conv else width + conv_kernel - 2
    conv = linear_layers * conv_dim * columns * conv_dtype_bytes
    return VerifyScratch(
        linear_layers=linear_layers,
        width=width,
        ssm_bytes_per_token=ssm,
        conv_bytes_per_request=conv,
        linear_tp=linear_tp,
        kernels=kernels,
    )


def _scratch_for(
    ctx: Context, *, budget: int | None = None, tp: int | None = None, env: dict[str, str] | None = None
) -> VerifyScratch | None:
    """The scratch SGLang allocates for this launch (with `budget` / `tp` / the server environment `env` in
    place of the profile's), the payload's kernels decided as hybrid.py decides them (ddtree/kernels.py)."""
    m = ctx.known_model
    shape = (
        m.num_linear_layers,
        m.linear_num_key_heads,
        m.linear_num_value_heads,
        m.linear_key_head_dim,
        m.linear_value_head_dim,
        m.linear_conv_kernel_dim,
    )
    sizes = [x for x in shape if isinstance(x, int) and x > 0]
    if len(sizes) != len(shape):
        return None  # not a Gated-DeltaNet config (or an incomplete one): nothing to size
    flags = dict(ctx.given)
    if budget is not None:
        flags["speculative_ddtree_budget"] = budget
    resolved = ddtree_core.resolve_ddtree(
        flags, {"draft_block_size": ctx.draft.block_size if ctx.draft else None}
    )
    width = max(resolved["block_size"] or 0, resolved["verify_width"] or 0)
    if width <= 0:
        return None
    tp = tp or ctx.get("tp_size", 1) or 1
    linear_tp = max(1, tp // (ctx.get("dp_size", 1) or 1)) if ctx.dp_attention else tp
    plan = kernel_plan(ctx, width, env)
    layers, kh, vh, kd, vd, kernel = sizes
    return verify_scratch(
        linear_layers=layers,
        num_key_heads=kh,
        num_value_heads=vh,
        key_head_dim=kd,
        value_head_dim=vd,
        conv_kernel=kernel,
        width=width,
        linear_tp=linear_tp,
        ssm_dtype_bytes=_DTYPE_BYTES.get(ssm_dtype(ctx)[0], 4),
        conv_dtype_bytes=conv_dtype_bytes(ctx.env if env is None else env),
        dense_conv=plan.dense_conv,
        compact_ssm=plan.compact_ssm_scratch,
        kernels=tuple(
            [f"{GDN_TREE}=compact"] * plan.compact_ssm_scratch
            + [f"{CONV_TREE}=compact"] * (plan.conv_compact and not plan.dense_conv)
        ),
    )


def _requests(ctx: Context) -> int:
    reqs = ctx.get("max_running_requests") or DEFAULT_MAX_RUNNING_REQUESTS
    return max(1, reqs // (ctx.get("dp_size", 1) or 1)) if ctx.dp_attention else reqs


def _room(ctx: Context, tp: int) -> tuple[float, str] | None:
    """Bytes one GPU has for the scratch, and how that was computed; None when the GPU's memory is unknown."""
    if ctx.gpu is None or not ctx.gpu.memory_gb:
        return None
    fraction = ctx.get("mem_fraction_static") or DEFAULT_MEM_FRACTION_STATIC
    room = ctx.gpu.memory_gb * 1e9 * fraction
    how = f"{ctx.gpu.memory_gb} GB x mem-fraction-static {fraction:g}"
    weights = ctx.known_model.weights_bytes
    if weights:
        room -= weights / tp
        how += f" - {weights / tp / MIB:,.0f} MiB of weights"
    return room, how


@rule(
    "DDT114",
    "DDTREE's recurrent verify scratch fits one GPU",
    reads=("max_running_requests",),
    needs=(FACT_MODEL_CONFIG,),
    applies=lambda ctx: _is_ddtree(ctx) and ctx.is_hybrid is not False,
    reference="sglang 0.5.23 srt/mem_cache/memory_pool.py MambaPool "
    "(intermediate_ssm, intermediate_conv_window)",
    sglang_enforces=False,
    evidence="MambaPool's start-up allocation runs out of GPU memory (ddtree_cases.yaml dd-h36-vl-seed-b128)",
)
def verify_scratch_fits(ctx: Context):
    """On a hybrid Gated-DeltaNet target (Qwen3-Next, Qwen3.5, Qwen3.6) SGLang keeps, for every verify token
    of every request slot, the recurrent state that token leaves behind, so that the accepted node's state can
    be committed:

        intermediate_ssm          [L, R + 1, n, HV, V, K]          mamba SSM dtype (float32 unless
                                                                   --mamba-ssm-dtype or the config's
                                                                   mamba_ssm_dtype says otherwise)
        intermediate_conv_window  [L, R + 1, n, conv_dim, k - 1]   bfloat16 (dense: one window per tree node)

    L = linear-attention layers (all but every `full_attention_interval`-th), R = max-running-requests (48
    when unset, the DFLASH family's default), n = the verify width max(block size, budget + 1), HV = linear
    value heads / tp, V / K = linear value / key head dims, conv_dim = (2 x linear key heads x K + linear
    value heads x V) / tp, k = linear_conv_kernel_dim. For a Qwen3.6-27B (48 linear layers, 16 key / 48 value
    heads of 128, kernel 4) that is 146.8 MiB per verify token per request at tp 1 (144 MiB SSM + 2.8 MiB
    conv): at budget 64 (n = 65), 9.3 GiB per request, 457 GiB for 48 + 1 slots; at tp 8, 1.2 GiB per request
    and 57 GiB in all, per GPU.

    The rule errors when the total cannot fit on one GPU: the GPU's memory (hardware.gpu / --gpu) x
    mem-fraction-static (0.78 when unset: SGLang derives it per GPU, 0.78-0.84 for this model), minus the
    weights per GPU when the checkpoint is local (its *.safetensors). SGLang itself would shrink the mamba
    cache and cap max-running-requests far below the requested value, or fail at start-up when not even one
    request fits; ddtctl is stricter by design. The fix names the largest max-running-requests that fits, else
    a budget, else a tp-size, and -- where they would make it fit -- the payload's compact kernels not yet
    switched on (below). Without a known GPU the rule cannot decide: it reports the scratch as an info finding
    instead. Other hybrid families (Mamba2, KDA) are not sized.

    The profile's `env:` is read as the server's environment, as the payload reads it (ddtree/kernels.py,
    DDT116): with the compact GDN tree verify (`DDTREE_GDN_TREE` unset or `compact`; float32 SSM states,
    verify width <= 128) a node's SSM row holds its records, HV x V + HV x K + HV floats instead of HV x V x K
    (~64 x less); `DDTREE_GDN_TREE=sglang` keeps SGLang's full states. With the compact tree conv
    (`DDTREE_CONV_TREE` unset or `compact`, any width and SSM dtype) the conv windows keep SGLang's
    deduplicated layout, [conv_dim, n + k - 2] per request; `DDTREE_CONV_TREE=sglang` keeps them dense.
    Under --enable-unified-memory the unified pool allocates the full scratch whatever the switches.
    The message names the kernels it assumed and SGLang's own size. `SGLANG_MAMBA_SSM_DTYPE` /
    `SGLANG_MAMBA_CONV_DTYPE` there set the dtypes as in SGLang (--mamba-ssm-dtype wins)."""
    scratch = _scratch_for(ctx)
    if scratch is None:
        return
    reqs = _requests(ctx)
    total = scratch.total(reqs)
    figure = _figure(ctx, scratch, reqs)
    tp = ctx.get("tp_size", 1) or 1
    room = _room(ctx, tp)
    if room is None:
        yield Hit(
            figure + "; cannot compare with the GPU's memory: GPU unknown (set hardware.gpu or pass --gpu)",
            severity=INFO,
        )
        return
    space, how = room
    if total <= space:
        return
    fixes, edits = [], {}
    fit = int(space // scratch.per_request) - 1
    if fit >= 1:
        fixes.append(f"set max-running-requests: {fit}")
        edits["max_running_requests"] = fit
    budget = _largest_budget(ctx, space, reqs)
    if budget is not None:
        fixes.append(_budget_fix(ctx, scratch, budget))
    bigger = _smallest_tp(ctx, tp, reqs)
    if bigger is not None:
        fixes.append(f"set tp-size: {bigger}")
    compact = _compact_option(ctx, scratch, space, reqs)
    if compact is not None:
        fixes.append(compact)
    yield Hit(
        f"{figure}: more than one {ctx.known_gpu.name} holds ({space / MIB:,.0f} MiB = {how})",
        fix=" or ".join(fixes) if fixes else "use GPUs with more memory, or serve with DFLASH (chain verify)",
        edits=edits,
    )


def _figure(ctx: Context, scratch: VerifyScratch, reqs: int) -> str:
    """The scratch in words: per request, in all, the kernels it assumes and, then, SGLang's own size."""
    total, kernels = scratch.total(reqs), " and ".join(scratch.kernels)
    figure = (
        f"DDTREE's recurrent verify scratch{' with ' + kernels if kernels else ''}: "
        f"{scratch.per_request / MIB:,.0f} MiB per request "
        f"({scratch.linear_layers} linear layers, verify width {scratch.width}, linear-attention tp "
        f"{scratch.linear_tp}), {total / MIB:,.0f} MiB for {reqs} running requests + 1 slot, per GPU"
    )
    stock = _scratch_for(ctx, env=_without_switches(ctx.env)) if scratch.kernels else None
    if stock is not None:
        figure += (
            f" ({total / GIB:,.1f} GiB instead of {stock.total(reqs) / GIB:,.1f} GiB with SGLang's kernels)"
        )
    return figure


def _without_switches(env: dict[str, str]) -> dict[str, str]:
    """The server's environment with SGLang's own kernels (both compact kernels are the defaults)."""
    return {**env, **SGLANG_KERNELS}


def _compact_option(ctx: Context, scratch: VerifyScratch, space: float, reqs: int) -> str | None:
    """The payload's compact kernels not yet switched on that would make the scratch fit (at a budget of at
    most COMPACT_MAX_WIDTH - 1 = 127 for the compact GDN verify when the tree is wider), as fix text; None
    when none would."""
    current = _current_budget(ctx)
    budgets: list[int | None] = [None]
    if current is not None and current >= COMPACT_MAX_WIDTH:
        narrower = _scratch_for(ctx, budget=COMPACT_MAX_WIDTH - 1)
        if narrower is not None and narrower.total(reqs) > space:  # else that budget alone is the fix
            budgets.append(COMPACT_MAX_WIDTH - 1)  # the widest tree the compact GDN verify takes
    for switches in ((GDN_TREE,), (CONV_TREE,), (GDN_TREE, CONV_TREE)):
        if all(switch(ctx.env, name) == "compact" for name in switches):
            continue  # already asked for: the budget above is the fix then
        env = {**ctx.env, **{name: "compact" for name in switches}}
        for budget in budgets:
            s = _scratch_for(ctx, budget=budget, env=env)
            if s is None or s.kernels == scratch.kernels or s.total(reqs) > space:
                continue
            off = [name for name in switches if switch(ctx.env, name) != "compact"]
            how = " and ".join(f"env {name}: compact" for name in off)
            if budget is not None:
                how = f"speculative-ddtree-budget: {budget} and {how}"
            return f"set {how}"
    return None


def _current_budget(ctx: Context) -> int | None:
    return ddtree_core.resolve_ddtree(
        ctx.given, {"draft_block_size": ctx.draft.block_size if ctx.draft else None}
    )["budget"]


def _largest_budget(ctx: Context, space: float, reqs: int) -> int | None:
    """The largest smaller budget whose scratch fits. The scratch grows with the budget, except where the tree
    outgrows the compact GDN verify (COMPACT_MAX_WIDTH nodes) and full states come back: bisect each side of
    that step, the wider side first."""
    current = _current_budget(ctx)
    top = (current or 1) - 1
    compact_top = COMPACT_MAX_WIDTH - 1  # budget + 1 verify nodes
    for lo, hi in ((compact_top + 1, top), (1, min(top, compact_top))):
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            s = _scratch_for(ctx, budget=mid)
            if s is not None and s.total(reqs) <= space:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        if best is not None:
            return best
    return None


def _budget_fix(ctx: Context, scratch: VerifyScratch, budget: int) -> str:
    narrower = _scratch_for(ctx, budget=budget)
    added = [k for k in narrower.kernels if k not in scratch.kernels] if narrower else []
    if added:  # e.g. the compact GDN verify, where the compact conv runs at either budget
        return f"set speculative-ddtree-budget: {budget} (then the {' and '.join(added)} kernels apply)"
    return f"set speculative-ddtree-budget: {budget}"


def _smallest_tp(ctx: Context, tp: int, reqs: int) -> int | None:
    limit = ctx.gpu_count or 8
    m = ctx.known_model
    heads = [h for h in (m.linear_num_key_heads, m.linear_num_value_heads, m.num_attention_heads) if h]
    candidate = tp * 2
    while candidate <= limit:
        if all(h % candidate == 0 for h in heads):
            s, room = _scratch_for(ctx, tp=candidate), _room(ctx, candidate)
            if s is not None and room is not None and s.total(reqs) <= room[0]:
                return candidate
        candidate *= 2
    return None
