"""ddtctl's own rules: checks that no SGLang 0.5.23 hook performs. SGLang's resolver accepts these launches
and the server fails later (the scheduler binding GPUs past the host's, the model load splitting the
attention heads, the mamba pool sized from a non-positive ratio), so ddtctl is stricter by design
(sglang_enforces=False; each rule's evidence cites the failing site): DDT601, DDT602, DDT506. Every check
SGLang's hooks perform lives in rules/hooks/, named after its hook file; DDTREE's own rules in
rules/ddtree/."""

from __future__ import annotations

from ddtctl.rules.engine import (
    FACT_MODEL_CONFIG,
    WARNING,
    Context,
    Hit,
    rule,
)


@rule(
    "DDT601",
    "GPUs requested fit the host",
    reads=("tp_size", "pp_size"),
    applies=lambda ctx: ctx.gpu_count is not None,
    reference="runtime: NCCL init fails",
    sglang_enforces=False,
    evidence="the scheduler processes bind GPUs base-gpu-id + rank x gpu-id-step: a rank past the host's "
    "GPUs "
    "has no device to set (torch.cuda.set_device raises), before NCCL can initialise",
)
def world_size(ctx: Context):
    """tp x pp x (dp without DP attention) GPUs per node must be available: hardware.count GPUs per host."""
    tp, pp, dp = ctx.get("tp_size", 1), ctx.get("pp_size", 1), ctx.get("dp_size", 1)
    nnodes = ctx.get("nnodes", 1) or 1
    per_node_tp = tp * pp // nnodes if (tp * pp) % nnodes == 0 else tp * pp
    needed = per_node_tp * (1 if ctx.dp_attention else dp)
    if needed > ctx.gpu_count:
        return Hit(
            f"this launch needs {needed} GPUs per host (tp {tp} x pp {pp}"
            + ("" if ctx.dp_attention else f" x dp {dp}")
            + f" / {nnodes} node(s)) but hardware.count is {ctx.gpu_count}",
            fix=f"set tp-size so that tp x pp fits {ctx.gpu_count} GPUs",
        )


@rule(
    "DDT602",
    "tensor parallel size divides the attention heads",
    reads=("tp_size",),
    needs=(FACT_MODEL_CONFIG,),
    applies=lambda ctx: (ctx.get("tp_size", 1) or 1) > 1,
    reference="runtime: model load asserts head divisibility",
    sglang_enforces=False,
    evidence="model load: QKVParallelLinear splits the heads with sglang/srt/distributed/utils.py:75 divide, "
    "whose ensure_divisibility asserts (layers/linear.py:1139)",
)
def heads_divisible(ctx: Context):
    """Attention heads are split across TP ranks: `num_attention_heads % tp_size == 0`, and KV heads either
    divide by tp or tp by them (replication). SGLang only finds out while loading weights."""
    tp = ctx.get("tp_size")
    attn_tp = tp // (ctx.get("dp_size", 1) if ctx.dp_attention else 1) or 1
    heads, kv = ctx.known_model.num_attention_heads, ctx.known_model.num_key_value_heads
    if heads and heads % attn_tp:
        yield Hit(
            f"--tp-size {tp} does not divide the model's {heads} attention heads",
            fix=f"use a tp-size that divides {heads}",
        )
    if kv and kv % attn_tp and attn_tp % kv:
        yield Hit(
            f"--tp-size {tp} and the model's {kv} KV heads do not divide each other",
            fix=f"use a tp-size that divides {kv} or is a multiple of it",
        )


@rule(
    "DDT506",
    "mamba full memory ratio is a fraction",
    reads=("mamba_full_memory_ratio",),
    applies=lambda ctx: ctx.is_set("mamba_full_memory_ratio"),
    reference="sglang 0.5.23 fields/schedule.py (not validated)",
    sglang_enforces=False,
    evidence="a ratio <= 0: mem_cache/kv_cache_configurator.py:3354-3355 sizes the mamba pool as budget x "
    "ratio / (1 + ratio) at start-up: -1 divides by zero, other negatives give a negative pool "
    "(tests/fidelity/cases.yaml next-full-memory-ratio-negative)",
)
def memory_ratio(ctx: Context):
    """SGLang does not validate `--mamba-full-memory-ratio`: a ratio <= 0 breaks the mamba pool's sizing at
    start-up (an error); above 1 the pool is still sized (ratio / (1 + ratio) of the budget), so SGLang runs
    it: a warning that the intended range is (0, 1]."""
    ratio = ctx.get("mamba_full_memory_ratio")
    if ratio <= 0:
        return Hit(
            f"--mamba-full-memory-ratio must be positive, got {ratio}: the mamba pool is sized as "
            "budget x ratio / (1 + ratio)",
            fix="set mamba-full-memory-ratio: 0.5",
            edits={"mamba_full_memory_ratio": 0.5},
        )
    if ratio > 1:
        return Hit(
            f"--mamba-full-memory-ratio {ratio} is above 1: SGLang runs it, but the ratio is meant in (0, 1]",
            fix="set mamba-full-memory-ratio: 0.5",
            edits={"mamba_full_memory_ratio": 0.5},
            severity=WARNING,
        )
