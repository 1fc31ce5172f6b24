"""Checks of sglang 0.5.23 srt/arg_groups/speculative_hook.py `_handle_ngram`: NGRAM (DDT401-DDT404)."""

from __future__ import annotations

from ddtctl.rules.engine import (
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.common import SPEC_HOOK
from ddtctl.rules.hooks.resolution import effective_attention


@rule(
    "DDT401",
    "NGRAM runs on CUDA, CPU or XPU",
    reads=("device",),
    applies=lambda ctx: ctx.algorithm == "NGRAM" and ctx.is_set("device"),
    reference=f"{SPEC_HOOK} _handle_ngram",
)
def ngram_device(ctx: Context):
    """Ngram speculative decoding supports only CUDA, CPU and XPU devices."""
    if ctx.get("device") not in ("cuda", "cpu", "xpu"):
        return Hit(
            f"NGRAM speculative decoding does not support device {ctx.get('device')!r}",
            fix="set device: cuda",
        )


@rule(
    "DDT402",
    "NGRAM with BFS breadth > 1 and paged KV needs flashinfer",
    reads=("speculative_ngram_max_bfs_breadth", "page_size", "attention_backend"),
    applies=lambda ctx: ctx.algorithm == "NGRAM",
    reference=f"{SPEC_HOOK}:1355-1366 _handle_ngram",
)
def ngram_paged(ctx: Context):
    """NGRAM's topk is its max BFS breadth (10 by default); > 1 with a page size > 1 is only correct on
    flashinfer. The page size and backend are SGLang's resolved ones: e.g. a DeepSeek MLA target on SM100 gets
    trtllm_mla with page size 64."""
    breadth = ctx.get("speculative_ngram_max_bfs_breadth") or 1
    backend, page = effective_attention(ctx)
    if breadth > 1 and page > 1 and backend is not None and backend != "flashinfer":
        chosen = "" if ctx.is_set("attention_backend") else " (chosen by SGLang for this model and GPU)"
        return Hit(
            f"NGRAM with BFS breadth {breadth} and page size {page} produces wrong results "
            f"on {backend!r}{chosen}: only flashinfer supports it",
            about="page_size",
            fix="set page-size: 1 or attention-backend: flashinfer, or speculative-ngram-max-bfs-breadth: 1",
            edits={"page_size": 1} if ctx.is_set("page_size") else {},
        )


@rule(
    "DDT403",
    "NGRAM does not support DP attention",
    reads=("enable_dp_attention",),
    applies=lambda ctx: ctx.algorithm == "NGRAM" and ctx.dp_attention,
    reference=f"{SPEC_HOOK} _handle_ngram",
)
def ngram_dp(ctx: Context):
    """Ngram speculative decoding does not support DP attention."""
    return Hit(
        "NGRAM speculative decoding does not support DP attention",
        fix="remove enable-dp-attention",
        edits={"enable_dp_attention": None},
    )


@rule(
    "DDT404",
    "NGRAM external corpus budgets",
    reads=("speculative_ngram_external_corpus_path",),
    applies=lambda ctx: ctx.algorithm == "NGRAM" and ctx.is_set("speculative_ngram_external_corpus_path"),
    reference=f"{SPEC_HOOK} _handle_ngram",
)
def ngram_corpus(ctx: Context):
    """With an external corpus the SAM budget and max tokens must be positive, and the budget <= draft tokens
    - 1."""
    budget = ctx.get("speculative_ngram_external_sam_budget") or 0
    max_tokens = ctx.get("speculative_ngram_external_corpus_max_tokens") or 0
    tokens = ctx.given.get("speculative_num_draft_tokens") or 12
    if budget <= 0:
        yield Hit(
            "--speculative-ngram-external-sam-budget must be positive with an external corpus",
            about="speculative_ngram_external_sam_budget",
        )
    elif budget > tokens - 1:
        yield Hit(
            f"--speculative-ngram-external-sam-budget ({budget}) must be <= draft tokens - 1 ({tokens - 1})",
            about="speculative_ngram_external_sam_budget",
            edits={"speculative_ngram_external_sam_budget": tokens - 1},
            fix=f"set speculative-ngram-external-sam-budget: {tokens - 1}",
        )
    if max_tokens <= 0:
        yield Hit(
            "--speculative-ngram-external-corpus-max-tokens must be positive with an external corpus",
            about="speculative_ngram_external_corpus_max_tokens",
        )
