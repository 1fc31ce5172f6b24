"""The DDTREE payload's hybrid kernels as the server's environment switches them: DDT116 checks the
switches, `kernel_plan` tells DDT114 which verify scratch SGLang then allocates.

The payload (ddtctl/payload/ddtree-sglang-0.5.23/files/ddtree_sglang/hybrid.py, cited below by name)
reads three variables of the server process, in DDTREE's tree mode only (hybrid.py tree_mode: DDTREE
without --speculative-ddtree-allow-hybrid-unsafe), on the target's Gated-DeltaNet backend only:

  DDTREE_GDN_TREE=compact    (the default; hybrid.py compact_wanted, GDN_TREE_DEFAULT; "sglang" turns it
                             off) the compact GDN tree verify, and
                             an `intermediate_ssm` of per-node records instead of per-node states -- when the
                             SSM states are float32 and the verify width is at most 128 (hybrid.py
                             compact_planned, COMPACT_MAX_WIDTH = kernels/gdn_tree.py MAX_WIDTH);
                             otherwise SGLang's kernel and its full-state scratch stay.
  DDTREE_GDN_TREE_PRECISION  the compact kernels' Triton dot precision (hybrid.py CompactTreeVerify, default
                             tf32; commit_tree_states, default tf32x3); read only with the compact GDN verify.
  DDTREE_GDN_ANCESTORS=shared (the default; hybrid.py shared_ancestors_wanted, ANCESTORS_DEFAULT; "derive"
                             turns it off) the compact GDN verify's ancestor matrix built once per verify
                             forward and shared by the layers' kernel calls; read only with the compact GDN
                             verify.
  DDTREE_GDN_BLOCK2=rows     (default "full"; hybrid.py BLOCK2_DEFAULT, opt-in until its H200 run) the
                             compact GDN verify of 65..128 nodes with block 2 on its own rows (16 at 65 nodes)
                             instead of a full 64-row tile; read only with the compact GDN verify.
  DDTREE_GDN_SOLVE=levels    (default "auto": levels2 from 81 verify nodes on, the squarings below; hybrid.py
                             SOLVE_DEFAULT, LEVELS_FROM_NODES, from the H200 kernel run of 2026-12-04) the
                             compact GDN verify solved one tree level a step ("levels2" / "levels4" /
                             "levels16": 2 / 4 / 16, the last two after log2 squaring stages, opt-in until
                             timed; "squarings": never), one tile up to 128 nodes; read only with the
                             compact GDN verify.
  DDTREE_CONV_TREE=compact   (the default; hybrid.py conv_compact_wanted, CONV_TREE_DEFAULT; "sglang"
                             turns it off) the compact tree conv, which keeps SGLang's deduplicated
                             conv-window layout (hybrid.py dense_conv_windows).

  DDTREE_VERIFY_ATTN=splitkv (the default; verify_attn.py wanted, any DDTREE target on the triton
                             backend; "extend" keeps SGLang's prefill kernel with the tree mask) the target
                             verify's attention split over the prefix, the tree mask on the drafts only.

Any value of the two kernel switches other than "compact" is SGLang's kernel, silently (hybrid.py compares
with "compact" only), so an unset switch is compact and a misspelt one is not.
Under --enable-unified-memory the unified pool allocates its own scratch, full states and dense windows
(sglang 0.5.23 mem_cache/unified_memory_pool.py, not through the payload's alloc_intermediate_ssm hook): the
compact kernels still run there, but save no memory (hybrid.py _unified_memory, honest_mamba_budget).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ddtctl.rules.ddtree import core as ddtree_core
from ddtctl.rules.engine import ERROR, INFO, WARNING, Context, Hit, rule

GDN_TREE, CONV_TREE, PRECISION = "DDTREE_GDN_TREE", "DDTREE_CONV_TREE", "DDTREE_GDN_TREE_PRECISION"
# hybrid.py shared_ancestors_wanted: "shared" (ANCESTORS_DEFAULT, since its H200 server runs) builds the
# ancestor matrix once per verify forward (any other value: each layer's kernel derives it, "derive" by name)
ANCESTORS = "DDTREE_GDN_ANCESTORS"
ANCESTORS_CHOICES = ("derive", "shared")
# hybrid.py CompactTreeVerify: "rows" sizes the two-block kernel's block 2 to its nodes (any other value: the
# full 64-row tile, "full" by name)
BLOCK2 = "DDTREE_GDN_BLOCK2"
BLOCK2_CHOICES = ("full", "rows")
# hybrid.py CompactTreeVerify (SOLVE_LEVELS): "levels" / "levels2" / "levels4" / "levels16" solve 1 / 2 / 4 /
# 16 tree levels a step (kernels/gdn_levels.py); "auto" (the default) levels2 from LEVELS_FROM_NODES verify
# nodes on; any other value: the squarings of kernels/gdn_tree.py, "squarings" by name
SOLVE = "DDTREE_GDN_SOLVE"
SOLVE_CHOICES = ("auto", "squarings", "levels", "levels2", "levels4", "levels16")
# the payload's verify_attn.py: the target verify's attention split over the prefix (the default), any target
VERIFY_ATTN = "DDTREE_VERIFY_ATTN"
VERIFY_ATTN_CHOICES = ("extend", "splitkv")
# hybrid.py compact_wanted / conv_compact_wanted: the values the payload knows
KERNEL_CHOICES = ("sglang", "compact")
# hybrid.py GDN_TREE_DEFAULT (the compact GDN verify since its H200 server-level exactness run) and
# CONV_TREE_DEFAULT (the compact tree conv since its H200 runs: bit-equal to SGLang's, faster at every shape)
DEFAULTS = {GDN_TREE: "compact", CONV_TREE: "compact"}
# the switches that keep SGLang's own tree kernels (GDN verify with full states, dense conv windows)
SGLANG_KERNELS = {GDN_TREE: "sglang", CONV_TREE: "sglang"}
# The Triton dot precisions the compact kernels are written for (ddtctl/kernels/gdn_tree.py: tf32 by default,
# tf32x3 for fp32-level results, ieee where tf32x3 is wrong)
PRECISION_CHOICES = ("tf32", "tf32x3", "ieee")
COMPACT_MAX_WIDTH = 128  # hybrid.py COMPACT_MAX_WIDTH (ddtctl/kernels/gdn_tree.py MAX_WIDTH)
REFERENCE = (
    "ddtctl payload ddtree_sglang/hybrid.py (GDN_TREE_DEFAULT, CONV_TREE_DEFAULT, compact_wanted, "
    "compact_planned, conv_compact_wanted, shared_ancestors_wanted) and ddtree_sglang/verify_attn.py (wanted)"
)
_SSM_DTYPES = ("float32", "bfloat16", "float16")  # configs/mamba_utils.py mamba2_state_dtype's dtype_map


def env_key(name: str) -> str:
    """The Context key (line, finding key) of an environment variable of the profile's `env:`."""
    return f"env.{name}"


def tree_mode(ctx: Context) -> bool:
    """hybrid.py tree_mode: DDTREE verifying exact trees (not the unsafe sibling-sharing mode)."""
    return ctx.algorithm == "DDTREE" and not ctx.get("speculative_ddtree_allow_hybrid_unsafe")


def ssm_dtype(ctx: Context) -> tuple[str, str]:
    """The SSM state dtype SGLang uses, and where it comes from: --mamba-ssm-dtype (which SGLang copies into
    SGLANG_MAMBA_SSM_DTYPE, serving_hook.py handle_environment_variables) over that variable over the config's
    mamba_ssm_dtype over float32; an unknown name is skipped (configs/mamba_utils.py mamba2_state_dtype)."""
    flag = ctx.given.get("mamba_ssm_dtype")
    if flag:
        return str(flag), "--mamba-ssm-dtype"
    env = ctx.env.get("SGLANG_MAMBA_SSM_DTYPE")
    if env in _SSM_DTYPES:
        return str(env), "SGLANG_MAMBA_SSM_DTYPE"
    config = ctx.model.mamba_ssm_dtype if ctx.model else None
    if config in _SSM_DTYPES:
        return str(config), "the model config's mamba_ssm_dtype"
    return "float32", "SGLang's default"


def conv_dtype_bytes(env: dict[str, str]) -> int:
    """SGLANG_MAMBA_CONV_DTYPE: bfloat16 unless it names another known dtype (mamba_utils.py
    mamba2_state_dtype)."""
    return 4 if env.get("SGLANG_MAMBA_CONV_DTYPE") == "float32" else 2


def record_floats(value_heads: int, value_dim: int, key_dim: int) -> int:
    """Floats of one node's records in the compact scratch (per layer, one TP shard):
    ddtctl/kernels/gdn_tree.py compact_scratch_shape -> record_width(hv, hv, k, v) = u [HV, V] + normalized
    keys [H <= HV, K] + decay [HV]."""
    return value_heads * value_dim + value_heads * key_dim + value_heads


@dataclass(frozen=True)
class KernelPlan:
    """What a DDTREE server on a Gated-DeltaNet target runs and allocates, given its environment."""

    gdn_compact: bool  # the compact GDN tree verify runs (hybrid.py compact_tree_kernel)
    conv_compact: bool  # the compact tree conv runs (hybrid.py compact_tree_conv)
    compact_ssm_scratch: bool  # intermediate_ssm holds records (hybrid.py compact_scratch)
    dense_conv: bool  # a window per verify token (hybrid.py dense_conv_windows), else SGLang's shared layout
    gdn_kept: str | None  # why SGLang's GDN kernel runs although DDTREE_GDN_TREE is compact, if it does

    def describe(self) -> str:
        """The kernels assumed, for DDT114's message ("" for SGLang's own)."""
        parts = [f"{GDN_TREE}=compact"] if self.gdn_compact else []
        parts += [f"{CONV_TREE}=compact"] if self.conv_compact else []
        return " and ".join(parts)


def switch(env: dict[str, str], name: str) -> str:
    """A kernel switch's value in the server's environment, its default when unset."""
    return env.get(name, DEFAULTS[name])


def kernel_plan(ctx: Context, width: int, env: dict[str, str] | None = None) -> KernelPlan:
    """hybrid.py's decisions for this launch at verify width `width` (max(block, budget + 1): hybrid.py
    verify_width), with `env` (default: the profile's) as the server's environment."""
    env = ctx.env if env is None else env
    tree = tree_mode(ctx)
    unified = bool(ctx.get("enable_unified_memory"))
    gdn_wanted = tree and switch(env, GDN_TREE) == "compact"  # hybrid.py compact_wanted
    dtype, source = ssm_dtype(ctx)
    kept = None
    if gdn_wanted and dtype != "float32":  # hybrid.py compact_planned
        kept = f"the compact GDN tree verify needs float32 SSM states, {source} gives {dtype}"
    elif gdn_wanted and width > COMPACT_MAX_WIDTH:  # hybrid.py compact_planned
        kept = (
            f"the compact GDN tree verify takes at most {COMPACT_MAX_WIDTH} verify nodes, this tree has "
            f"{width} (speculative-ddtree-budget + 1)"
        )
    gdn = gdn_wanted and kept is None
    conv = tree and switch(env, CONV_TREE) == "compact"  # hybrid.py conv_compact_wanted
    return KernelPlan(
        gdn_compact=gdn,
        conv_compact=conv,
        compact_ssm_scratch=gdn and not unified,  # the unified pool allocates full states itself
        dense_conv=unified or (tree and not conv),  # hybrid.py dense_conv_windows; the unified pool: dense
        gdn_kept=kept,
    )


def _is_gdn(ctx: Context) -> bool | None:
    """A Gated-DeltaNet target (the linear-attention shape in its config.json); None when the config is
    unknown."""
    m = ctx.model
    if m is None or not m.known:
        return None
    if m.is_hybrid is False:
        return False
    if m.source == "profile":
        return None  # the architecture alone: no layer shapes
    return bool(m.linear_num_value_heads and m.linear_value_head_dim and m.linear_key_head_dim)


def _not_applicable(ctx: Context) -> str | None:
    """Why neither compact kernel can run on this launch, whatever the switches say."""
    if ctx.algorithm != "DDTREE":
        algo = ctx.given.get("speculative_algorithm")
        return f"the payload's hybrid kernels serve DDTREE only, speculative-algorithm is {algo or 'unset'}"
    if ctx.get("speculative_ddtree_allow_hybrid_unsafe"):
        return "speculative-ddtree-allow-hybrid-unsafe verifies the tree with SGLang's chain kernels"
    gdn = _is_gdn(ctx)
    name = (ctx.model.architecture if ctx.model else None) or "the model"
    if gdn is False and ctx.is_hybrid is False:
        return f"{name} has no recurrent (linear-attention) layers"
    if gdn is False:
        return f"{name} has no Gated-DeltaNet layers (the kernels serve GDN targets only)"
    return None


def _verify_width(ctx: Context) -> int:
    resolved = ddtree_core.resolve_ddtree(
        ctx.given, {"draft_block_size": ctx.draft.block_size if ctx.draft else None}
    )
    return max(resolved["block_size"] or 0, resolved["verify_width"] or 0)


def _uses_switches(ctx: Context) -> bool:
    switches = (GDN_TREE, CONV_TREE, PRECISION, ANCESTORS, BLOCK2, SOLVE, VERIFY_ATTN)
    return any(name in ctx.env for name in switches)


@rule(
    "DDT116",
    "DDTREE's kernel env switches are known and take effect",
    severity=ERROR,
    reads=(
        "speculative_algorithm",
        "speculative_ddtree_budget",
        "mamba_ssm_dtype",
        "speculative_ddtree_allow_hybrid_unsafe",
        "enable_unified_memory",
    ),
    applies=_uses_switches,
    reference=REFERENCE,
    sglang_enforces=False,
    evidence="the payload does not validate the switches (ddtree_sglang/hybrid.py compares with 'compact'): "
    "a misspelt one runs SGLang's kernel, whose verify scratch is ~60x the compact records DDT114 sized "
    "(notes/step-cost-h200.md), and an unknown precision reaches Triton's tl.dot input_precision",
)
def kernel_switches(ctx: Context) -> Iterator[Hit]:
    """The profile's `env:` may switch the DDTREE payload's kernels for hybrid Gated-DeltaNet targets:
    `DDTREE_GDN_TREE` (compact by default: the compact GDN tree verify, per-node records instead of per-node
    SSM states in the verify scratch, ~60 x smaller on Qwen3.6-27B; `sglang` keeps SGLang's kernel),
    `DDTREE_GDN_TREE_PRECISION` (its Triton dot precision: tf32, tf32x3 or ieee),
    `DDTREE_GDN_ANCESTORS` (shared by default: its ancestor matrix built once per verify forward and shared
    by the layers; `derive` has every layer's kernel call derive it), `DDTREE_GDN_BLOCK2` (`rows`, opt-in:
    the 65..128-node kernel's second block on its own rows instead of a full 64-row tile),
    `DDTREE_GDN_SOLVE` (`auto` by default: two tree levels a step from 81 verify nodes on, the squarings
    below; `levels` / `levels2` / `levels4` / `levels16` / `squarings` force one), and
    `DDTREE_CONV_TREE` (compact by default: the compact tree conv, one input per node in SGLang's
    deduplicated conv-window layout, bit-equal to SGLang's tree conv on the H200; `sglang` keeps SGLang's).
    `DDTREE_VERIFY_ATTN` (`splitkv` by default, any DDTREE target: the target verify's attention split over
    the prefix, kernels/tree_attn.py; `extend` keeps SGLang's prefill kernel with the tree mask).

    An unknown value is an error: the payload compares with "compact" only, so a typo silently runs SGLang's
    kernel (and a precision other than these reaches Triton's dots untried). A switch set to compact that
    cannot take effect is a warning naming the reason, SGLang's kernel running instead: not DDTREE, the unsafe
    chain mode, a model without Gated-DeltaNet layers, non-float32 SSM states or a verify width above 128
    (compact GDN verify only); so is a precision, an ancestor mode or a block-2 tile without the compact
    GDN verify, which alone reads them. Under --enable-unified-memory the kernels run but the unified pool's
    scratch keeps full size (info). The switches are choices: no automatic fix. Only the profile's `env:` is
    read (not a host's inventory env)."""
    switches = (
        (GDN_TREE, KERNEL_CHOICES),
        (CONV_TREE, KERNEL_CHOICES),
        (PRECISION, PRECISION_CHOICES),
        (ANCESTORS, ANCESTORS_CHOICES),
        (BLOCK2, BLOCK2_CHOICES),
        (SOLVE, SOLVE_CHOICES),
        (VERIFY_ATTN, VERIFY_ATTN_CHOICES),
    )
    for name, choices in switches:
        value = ctx.env.get(name)
        if value is not None and value not in choices:
            yield Hit(
                f"{name}={value!r} is not a value the DDTREE payload knows (allowed: {', '.join(choices)})",
                fix=f"set env {name} to one of {', '.join(choices)}, or remove it",
                about=env_key(name),
            )
    if ctx.env.get(VERIFY_ATTN) == "splitkv" and ctx.algorithm != "DDTREE":
        algo = ctx.given.get("speculative_algorithm")
        yield Hit(
            f"{VERIFY_ATTN}=splitkv has no effect: the tree split-KV attention serves DDTREE's target verify "
            f"only, speculative-algorithm is {algo or 'unset'}; SGLang's attention runs",
            fix=f"remove {VERIFY_ATTN} from env",
            about=env_key(VERIFY_ATTN),
            severity=WARNING,
        )
    reason = _not_applicable(ctx)
    plan = kernel_plan(ctx, _verify_width(ctx)) if reason is None else None
    gdn_kept = reason if plan is None else plan.gdn_kept  # why the compact GDN verify does not run, if so
    # only a switch set to compact by name earns a warning: a default that cannot apply is no one's mistake
    for name in (GDN_TREE, CONV_TREE):
        why = reason if name == CONV_TREE else gdn_kept
        if ctx.env.get(name) == "compact" and why is not None:
            yield _kept(name, why)
    # a precision or an ancestor mode without the compact GDN verify is unused; with the verify asked for by
    # name but kept, its own warning says why
    for name, used in (
        (PRECISION, ctx.env.get(PRECISION) in PRECISION_CHOICES),
        (ANCESTORS, ctx.env.get(ANCESTORS) in ANCESTORS_CHOICES),
        (BLOCK2, ctx.env.get(BLOCK2) in BLOCK2_CHOICES),
        (SOLVE, ctx.env.get(SOLVE) in SOLVE_CHOICES),
    ):
        if used and switch(ctx.env, GDN_TREE) != "compact":
            yield _unused_with_gdn_verify(name, reason or f"{GDN_TREE} is not compact")
        elif used and gdn_kept is not None and GDN_TREE not in ctx.env:
            yield _unused_with_gdn_verify(name, gdn_kept)
    if plan is not None and ctx.get("enable_unified_memory") and (plan.gdn_compact or plan.conv_compact):
        yield Hit(
            f"{plan.describe()} under enable-unified-memory: the kernels run, but the unified pool allocates "
            "the full verify scratch (full SSM states, dense conv windows); no memory is saved",
            fix="nothing to do; without enable-unified-memory the scratch shrinks (DDT114 sizes it)",
            about=env_key(GDN_TREE if plan.gdn_compact else CONV_TREE),
            severity=INFO,
        )


def _kept(name: str, reason: str) -> Hit:
    kernel = "GDN tree verify" if name == GDN_TREE else "tree conv"
    return Hit(
        f"{name}=compact has no effect: {reason}; SGLang's {kernel} runs instead",
        fix=f"remove {name} from env (or change the launch so the compact kernel applies)",
        about=env_key(name),
        severity=WARNING,
    )


_SETS = {
    PRECISION: "the compact GDN tree verify's precision",
    ANCESTORS: "how the compact GDN tree verify gets its ancestor matrix",
    BLOCK2: "the compact GDN tree verify's second block of 65..128 nodes",
    SOLVE: "how the compact GDN tree verify solves its nodes (squarings or tree levels)",
}


def _unused_with_gdn_verify(name: str, reason: str) -> Hit:
    return Hit(
        f"{name} has no effect: it sets {_SETS[name]}, which does not run ({reason})",
        fix=f"remove {name} from env",
        about=env_key(name),
        severity=WARNING,
    )
