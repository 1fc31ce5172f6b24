"""DDTREE launch rules: the single source of truth.

Stdlib only and importable on its own: ddtctl's static rules call it, and the DDTREE payload ships this very file so
that SGLang-with-payload enforces the same rules inside its own resolution. Inputs are SGLang field names (dests).

    flags: {"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 64, ...}  (values the user gave; absent or
           None = not given)
    model: {"architecture": "Qwen3_5ForCausalLM", "is_hybrid": True, "vocab_size": 248320,
            "draft_block_size": 16}  (None = unknown)

A finding's severity says what SGLang-with-payload does with it: "error" rejects the launch (ValueError), "warning"
is logged, "info" with `overrides` is a value SGLang declares in place of the user's (a resolution override plus a
logged warning, SGLang's own convention for a feature that cannot run as asked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

DDTREE = "DDTREE"
# The DDTree fields SGLang learns from the payload, with their defaults (None: derived, see resolve_ddtree).
DDTREE_FLAGS: dict[str, Any] = {
    "speculative_ddtree_budget": None,  # default: block_size - 1 (a chain-sized tree)
    "speculative_ddtree_topk_cap": None,  # default: the budget (no cap beyond the budget)
    "speculative_ddtree_shadow_linear": False,
    "speculative_ddtree_allow_hybrid_unsafe": False,
}
# Above this many nodes a verify pass stops being one target forward of reasonable width.
MAX_VERIFY_BUDGET = 4096
ERROR, WARNING, INFO = "error", "warning", "info"
ATTENTION_BACKEND_FLAGS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


@dataclass(frozen=True)
class DdtreeViolation:
    rule_id: str
    message: str
    fix: str
    edits: dict[str, Any] = field(default_factory=dict)  # dest -> value that fixes it (when derivable)
    reads: tuple[str, ...] = ()
    severity: str = ERROR
    overrides: dict[str, Any] = field(default_factory=dict)  # dest -> value SGLang-with-payload declares instead


def _given(flags: Mapping[str, Any], key: str) -> bool:
    return flags.get(key) is not None


def block_size_of(flags: Mapping[str, Any], model: Mapping[str, Any]) -> int | None:
    for value in (flags.get("speculative_dflash_block_size"), flags.get("speculative_num_draft_tokens"),
                  model.get("draft_block_size")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def max_tree_nodes(depth: int, topk: int) -> int:
    """Nodes in a full tree of `depth` levels with `topk` children per node (root not counted)."""
    if topk <= 1:
        return depth
    total, level = 0, 1
    for _ in range(depth):
        level *= topk
        total += level
        if total > MAX_VERIFY_BUDGET:
            return total
    return total


def resolve_ddtree(flags: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """The DDTree values a server would run with: budget, topk cap, verify width (budget + 1), block size."""
    block = block_size_of(flags, model)
    budget = flags.get("speculative_ddtree_budget")
    if budget is None and block is not None:
        budget = max(block - 1, 1)
    cap = flags.get("speculative_ddtree_topk_cap")
    if cap is None:
        cap = budget
    return {
        "block_size": block,
        "budget": budget,
        "topk_cap": cap,
        "verify_width": None if budget is None else budget + 1,
        "shadow_linear": bool(flags.get("speculative_ddtree_shadow_linear")),
        "allow_hybrid_unsafe": bool(flags.get("speculative_ddtree_allow_hybrid_unsafe")),
    }


def ddtree_violations(flags: Mapping[str, Any], model: Mapping[str, Any]) -> list[DdtreeViolation]:
    if str(flags.get("speculative_algorithm") or "").upper() != DDTREE:
        return []
    out: list[DdtreeViolation] = []

    if not _given(flags, "speculative_draft_model_path"):
        out.append(DdtreeViolation(
            "DDT101", "DDTREE needs a DFlash drafter: --speculative-draft-model-path is not set.",
            "set speculative-draft-model-path to the DFlash draft model directory",
            reads=("speculative_draft_model_path",)))

    block = flags.get("speculative_dflash_block_size")
    tokens = flags.get("speculative_num_draft_tokens")
    if block is not None and block <= 0:
        out.append(DdtreeViolation(
            "DDT102", f"DDTREE needs a positive --speculative-dflash-block-size, got {block}.",
            "set speculative-dflash-block-size to the drafter's block_size (e.g. 16)",
            reads=("speculative_dflash_block_size",)))
    elif block is not None and tokens is not None and tokens != block:
        out.append(DdtreeViolation(
            "DDT103",
            f"--speculative-num-draft-tokens ({tokens}) differs from --speculative-dflash-block-size ({block}); "
            "for the DFLASH family they must match.",
            "remove speculative-num-draft-tokens (it is taken from the block size)",
            edits={"speculative_num_draft_tokens": None},
            reads=("speculative_num_draft_tokens", "speculative_dflash_block_size")))

    budget = flags.get("speculative_ddtree_budget")
    cap = flags.get("speculative_ddtree_topk_cap")
    if budget is not None and budget < 1:
        out.append(DdtreeViolation(
            "DDT104",
            f"--speculative-ddtree-budget must be >= 1 (nodes in the draft tree, root excluded), got {budget}.",
            "set speculative-ddtree-budget to at least 1 (64 is a good start)",
            edits={"speculative_ddtree_budget": 64}, reads=("speculative_ddtree_budget",)))
    if cap is not None and cap < 1:
        out.append(DdtreeViolation(
            "DDT105", f"--speculative-ddtree-topk-cap must be >= 1, got {cap}.",
            "set speculative-ddtree-topk-cap to at least 1, or remove it (defaults to the budget)",
            edits={"speculative_ddtree_topk_cap": None}, reads=("speculative_ddtree_topk_cap",)))
    if budget is not None and budget > MAX_VERIFY_BUDGET:
        out.append(DdtreeViolation(
            "DDT106", f"--speculative-ddtree-budget {budget} exceeds {MAX_VERIFY_BUDGET}: the verify pass would be "
            f"{budget + 1} tokens wide per request.",
            f"set speculative-ddtree-budget to at most {MAX_VERIFY_BUDGET} (the paper's best budgets are 256-512)",
            edits={"speculative_ddtree_budget": 512}, reads=("speculative_ddtree_budget",)))
    resolved = resolve_ddtree(flags, model)
    if budget is not None and budget >= 1 and resolved["block_size"] is not None and (cap is None or cap >= 1):
        depth = resolved["block_size"] - 1
        k = resolved["topk_cap"]
        vocab = model.get("vocab_size")
        if isinstance(vocab, int) and vocab > 0:
            k = min(k, vocab)
        limit = max_tree_nodes(depth, k)
        if budget > limit:
            out.append(DdtreeViolation(
                "DDT107",
                f"--speculative-ddtree-budget {budget} cannot be filled: a drafter of block size "
                f"{resolved['block_size']} proposes {depth} depths with at most {k} candidates each, "
                f"{limit} nodes at most.",
                f"set speculative-ddtree-budget to at most {limit}, or raise speculative-ddtree-topk-cap",
                edits={"speculative_ddtree_budget": limit},
                reads=("speculative_ddtree_budget", "speculative_ddtree_topk_cap", "speculative_dflash_block_size")))

    pp = flags.get("pp_size")
    if pp is not None and pp != 1:
        out.append(DdtreeViolation(
            "DDT108", f"DDTREE supports only pipeline parallel size 1, got --pp-size {pp}.",
            "set pp-size: 1 (use tp-size for multi-GPU)", edits={"pp_size": 1}, reads=("pp_size",)))

    grammar = flags.get("grammar_backend")
    if grammar is not None and str(grammar).lower() != "none":
        out.append(DdtreeViolation(
            "DDT109", f"DDTREE does not support constrained decoding, but --grammar-backend is {grammar!r}: "
            "a grammar mask cannot be applied across tree branches.",
            "remove grammar-backend or set it to none", edits={"grammar_backend": None},
            reads=("grammar_backend",)))

    if all(flags.get(k) is None for k in ATTENTION_BACKEND_FLAGS):
        out.append(DdtreeViolation(
            "DDT115", "DDTREE verifies its draft tree with a custom attention mask, on the triton attention backend; "
            "attention-backend is not set, so SGLang with the DDTREE payload declares attention_backend=triton "
            "(instead of the GPU's default fa3 / flashinfer / trtllm_mha).",
            "nothing to do; set attention-backend: triton to say so in the launch",
            reads=("attention_backend",), severity=INFO, overrides={"attention_backend": "triton"}))

    shadow = bool(flags.get("speculative_ddtree_shadow_linear"))
    unsafe = bool(flags.get("speculative_ddtree_allow_hybrid_unsafe"))
    if shadow and unsafe:
        out.append(DdtreeViolation(
            "DDT112",
            "--speculative-ddtree-shadow-linear (exact trees: every tree node verified on the recurrent state of its "
            "own root-to-node path) and --speculative-ddtree-allow-hybrid-unsafe (chain kernels: sibling branches "
            "share recurrent state) contradict each other.",
            "remove speculative-ddtree-allow-hybrid-unsafe (exact trees are the default on hybrid targets)",
            edits={"speculative_ddtree_allow_hybrid_unsafe": None},
            reads=("speculative_ddtree_allow_hybrid_unsafe", "speculative_ddtree_shadow_linear")))

    if model.get("is_hybrid"):
        missing = []
        edits: dict[str, Any] = {}
        strategy = flags.get("mamba_radix_cache_strategy")
        if strategy != "extra_buffer":
            missing.append("--mamba-radix-cache-strategy extra_buffer"
                           + (f" (got {strategy})" if strategy not in (None, "auto") else ""))
            edits["mamba_radix_cache_strategy"] = "extra_buffer"
        ratio = flags.get("mamba_full_memory_ratio")
        if ratio is None or not (0 < float(ratio) < 1):
            missing.append("--mamba-full-memory-ratio in (0, 1)" + (f" (got {ratio})" if ratio is not None else ""))
            edits["mamba_full_memory_ratio"] = 0.5
        if missing:
            arch = model.get("architecture") or "this model"
            out.append(DdtreeViolation(
                "DDT111",
                f"DDTREE on the hybrid (Mamba/GDN) model {arch} needs {' and '.join(missing)}: tree verification "
                "keeps a recurrent-state snapshot per draft node in extra buffers, sized from the full-attention "
                "memory share.",
                "set mamba-radix-cache-strategy: extra_buffer and mamba-full-memory-ratio: 0.5 (tune the ratio)",
                edits=edits, reads=("mamba_radix_cache_strategy", "mamba_full_memory_ratio")))
        if unsafe and not shadow:
            arch = model.get("architecture") or "this model"
            out.append(DdtreeViolation(
                "DDT113",
                f"DDTREE on the hybrid model {arch} with --speculative-ddtree-allow-hybrid-unsafe: the tree is "
                "verified with the chain kernels, so sibling branches share recurrent (linear-attention) state; "
                "outputs may differ from the target's greedy output. A test / negative-control mode.",
                "remove speculative-ddtree-allow-hybrid-unsafe (exact trees through parent-indexed recurrent state "
                "are the default)",
                reads=("speculative_ddtree_allow_hybrid_unsafe",), severity=WARNING))
    return out
