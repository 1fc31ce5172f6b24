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
    "speculative_ddtree_budget": None,  # default: default_budget(block size), or a schedule's widest tree
    "speculative_ddtree_topk_cap": None,  # default: the budget (no cap beyond the budget)
    "speculative_ddtree_shadow_linear": False,
    "speculative_ddtree_allow_hybrid_unsafe": False,
    "speculative_ddtree_budget_schedule": None,  # default: one budget at every batch size
}
# Above this many nodes a verify pass stops being one target forward of reasonable width.
MAX_VERIFY_BUDGET = 4096
# The widest tree the payload's compact GDN tree verify takes on hybrid targets (128 verify nodes, hybrid.py
# COMPACT_MAX_WIDTH); a schedule serves the batches it exists for with the compact kernels, so it stays under it.
COMPACT_MAX_BUDGET = 127
CHAIN = 0  # a schedule's budget 0 ("chain"): DFLASH's chain of the block, the drafter's top-1 at every depth
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


def default_budget(block_size: int) -> int:
    """The budget of a launch that gives none (and no schedule): a chain-sized tree, one node per draft depth
    (block size - 1). The one place it is written: ddtctl's rules and resolution call it, and the payload's
    worker calls its copy (ddtree_sglang.rules_core)."""
    return max(block_size - 1, 1)


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


def parse_budget_schedule(text: Any) -> tuple[tuple[int | None, int], ...]:
    """`--speculative-ddtree-budget-schedule "2:127,4:64,8:16,0"` -> ((2, 127), (4, 64), (8, 16), (None, 0)): a
    batch of at most 2 requests verifies a 127-node tree, at most 4 a 64-node one, at most 8 a 16-node one, any
    larger batch the chain (budget 0, or the word `chain`: the drafter's top-1 at every depth, DFLASH's block).
    MAX_BS:BUDGET entries with increasing MAX_BS, then one bare BUDGET for every larger batch. ValueError (one
    line, what is wrong) for anything else."""
    entries = [e.strip() for e in str(text).split(",")]
    if not entries or not all(entries):
        raise ValueError(f"{text!r} has an empty entry; want MAX_BS:BUDGET,...,BUDGET (e.g. 2:127,4:64,8:16,0)")
    out: list[tuple[int | None, int]] = []
    for i, entry in enumerate(entries):
        max_bs, sep, budget = entry.rpartition(":")
        try:
            value = CHAIN if budget.strip().lower() == "chain" else int(budget)
            bound = int(max_bs) if sep else None
        except ValueError:
            raise ValueError(f"{entry!r} is not MAX_BS:BUDGET or BUDGET (whole numbers; budget 0 or chain: the "
                             "chain)") from None
        if value < 0 or (bound is not None and bound < 1):
            raise ValueError(f"{entry!r}: batch sizes start at 1 and budgets at 0 (the chain)")
        if (bound is None) != (i == len(entries) - 1):
            raise ValueError("the last entry, and only the last, is a bare BUDGET (for every larger batch), "
                             f"got {entry!r} at position {i + 1}")
        if bound is not None and out and bound <= (out[-1][0] or 0):
            raise ValueError(f"batch sizes must increase: {entry!r} follows {out[-1][0]}:{out[-1][1]}")
        out.append((bound, value))
    return tuple(out)


def schedule_budget(schedule: tuple[tuple[int | None, int], ...], batch_size: int) -> int:
    """The budget a schedule gives a batch of `batch_size` requests (0: the chain)."""
    for bound, budget in schedule:
        if bound is None or batch_size <= bound:
            return budget
    return schedule[-1][1]


def _schedule(flags: Mapping[str, Any]) -> tuple[tuple[int | None, int], ...] | None:
    text = flags.get("speculative_ddtree_budget_schedule")
    if text is None:
        return None
    try:
        return parse_budget_schedule(text)
    except ValueError:
        return None


def resolve_ddtree(flags: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """The DDTree values a server would run with: budget, topk cap, verify width (budget + 1), block size, and
    the budget schedule (None: the budget at every batch size). With a schedule and no budget, the budget is its
    widest tree: the verify width, the scratch (DDT114) and the draft top-K are sized for it."""
    block = block_size_of(flags, model)
    budget = flags.get("speculative_ddtree_budget")
    schedule = _schedule(flags)
    if budget is None and schedule is not None and max(b for _, b in schedule) > CHAIN:
        budget = max(b for _, b in schedule)
    if budget is None and block is not None:
        budget = default_budget(block)
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
        "budget_schedule": schedule,
    }


def _schedule_violation(flags: Mapping[str, Any], model: Mapping[str, Any]) -> DdtreeViolation | None:
    """DDT117: a budget schedule that parses, whose every tree the drafter can fill within the budget (the
    widest tree the server is sized for) and, on hybrid targets, the compact GDN verify takes."""
    text = flags.get("speculative_ddtree_budget_schedule")
    if text is None:
        return None
    fix = ("write it as MAX_BS:BUDGET entries with increasing batch sizes, then the budget for larger batches, "
           "e.g. speculative-ddtree-budget-schedule: \"2:127,4:64,8:16,0\" (0: the chain)")
    try:
        schedule = parse_budget_schedule(text)
    except ValueError as err:
        return DdtreeViolation(
            "DDT117", f"--speculative-ddtree-budget-schedule {text!r}: {err}.", fix,
            reads=("speculative_ddtree_budget_schedule", "speculative_ddtree_budget", "speculative_ddtree_topk_cap"))
    resolved = resolve_ddtree(flags, model)
    given = flags.get("speculative_ddtree_budget")
    block, cap = resolved["block_size"], flags.get("speculative_ddtree_topk_cap")
    vocab = model.get("vocab_size")
    for bound, budget in schedule:
        where = f"batches of at most {bound}" if bound is not None else "larger batches"
        problem = None
        if budget > MAX_VERIFY_BUDGET:
            problem = f"budget {budget} exceeds {MAX_VERIFY_BUDGET}", f"at most {MAX_VERIFY_BUDGET}"
        elif isinstance(given, int) and given >= 1 and budget > given:
            problem = (f"budget {budget} is wider than --speculative-ddtree-budget {given} (the widest tree the "
                       "server is sized for)", f"at most {given}, or raise speculative-ddtree-budget (or remove it: "
                       "the schedule's widest tree)")
        elif model.get("is_hybrid") and budget > COMPACT_MAX_BUDGET:
            problem = (f"budget {budget} is wider than the {COMPACT_MAX_BUDGET} nodes the compact GDN tree verify "
                       "takes on this hybrid target", f"at most {COMPACT_MAX_BUDGET}")
        elif budget > CHAIN and block is not None and (cap is None or cap >= 1):
            k = min(cap if cap is not None else budget, vocab) if isinstance(vocab, int) and vocab > 0 else (
                cap if cap is not None else budget)
            limit = max_tree_nodes(block - 1, k)
            if budget > limit:
                problem = (f"budget {budget} cannot be filled: {block - 1} depths with at most {k} candidates each "
                           f"(--speculative-ddtree-topk-cap) give {limit} nodes", f"at most {limit}, or raise "
                           "speculative-ddtree-topk-cap")
        if problem is not None:
            return DdtreeViolation(
                "DDT117", f"--speculative-ddtree-budget-schedule {text!r}: {where}: {problem[0]}.",
                f"make every budget of the schedule {problem[1]}",
                reads=("speculative_ddtree_budget_schedule", "speculative_ddtree_budget", "speculative_ddtree_topk_cap"))
    return None


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

    schedule_violation = _schedule_violation(flags, model)
    if schedule_violation is not None:
        out.append(schedule_violation)

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
