"""DDTREE rules: thin adapters over `ddtree_core`, the one source of truth shared with the SGLang payload."""

from __future__ import annotations

from ddtctl.rules import ddtree_core
from ddtctl.rules.engine import (
    ERROR, FACT_MODEL, INFO, RULES, WARNING, Context, Hit, Rule, rule,
)

REFERENCE = "ddtctl payload (ddtctl/rules/ddtree_core.py, enforced inside SGLang by the DDTREE payload)"

_DOCS = {
    "DDT101": ("DDTREE needs a DFlash drafter", "DDTree builds its tree from one DFlash block-diffusion pass: "
               "`--speculative-draft-model-path` must name a DFlash draft model."),
    "DDT102": ("DDTREE block size is positive", "`--speculative-dflash-block-size` must be > 0."),
    "DDT103": ("DDTREE draft tokens equal the block size", "As for DFLASH, `--speculative-num-draft-tokens` must equal "
               "the block size (it is derived from it when unset)."),
    "DDT104": ("DDTREE budget is at least 1", "`--speculative-ddtree-budget` B is the number of draft-tree nodes "
               "verified per step, root excluded; the verify width is B+1."),
    "DDT105": ("DDTREE topk cap is at least 1", "`--speculative-ddtree-topk-cap` caps the candidates per depth."),
    "DDT106": ("DDTREE budget is bounded", f"Budgets above {ddtree_core.MAX_VERIFY_BUDGET} make each verify pass "
               "too wide for one target forward; the paper's best budgets are 256-512."),
    "DDT107": ("DDTREE budget can be filled by the drafter", "A drafter of block size S proposes S-1 depths with at "
               "most K = min(topk cap, vocab) candidates each; a budget above the full tree's node count cannot be "
               "filled."),
    "DDT108": ("DDTREE runs with pipeline parallel size 1", "Like DFLASH, DDTREE supports only `pp_size == 1`."),
    "DDT109": ("DDTREE does not support constrained decoding", "A grammar mask is per position of one sequence; "
               "tree branches share positions, so `--grammar-backend` must be unset or none."),
    "DDT110": ("DDTREE runs without overlap scheduling (SGLang overrides it)",
               "DDTREE verifies a tree whose accepted depth is known only after verification, so the next step cannot "
               "be scheduled ahead of it. Without `--disable-overlap-schedule`, SGLang with the DDTREE payload "
               "declares `disable_overlap_schedule=True` in its resolution and logs a warning with this reason: "
               "SGLang 0.5.23's own convention for a feature that cannot overlap (pipeline parallelism, diffusion "
               "LLMs, the no_buffer mamba cache). `ddtctl dry-run` lists it as a change made by "
               "`speculative_hook.handle_speculative_decoding`. An info finding, never an error: set "
               "`disable-overlap-schedule: true` to say it in the launch."),
    "DDT111": ("DDTREE on a hybrid model needs extra-buffer mamba caching", "On hybrid Mamba/GDN targets, tree "
               "verification keeps recurrent-state snapshots per draft node: `--mamba-radix-cache-strategy "
               "extra_buffer` and an explicit `--mamba-full-memory-ratio` in (0, 1) are required. One finding names "
               "every missing flag."),
    "DDT112": ("DDTREE shadow-linear and allow-hybrid-unsafe exclude each other",
               "Two ways to verify a DDTree on a hybrid (Mamba / Gated-DeltaNet) target; they cannot both be set.\n\n"
               "`--speculative-ddtree-shadow-linear` (and the default on hybrid targets when neither flag is given): "
               "exact trees. The recurrent (linear-attention) layers give every tree node the state of its own "
               "root-to-node path: parent-indexed conv windows and SSM states, through SGLang's own EAGLE "
               "tree kernels (topk > 1) for Gated-DeltaNet. The tree verifies exactly as the target would decode "
               "each branch; the accepted node's state is committed. Cost: per-verify-token recurrent scratch.\n\n"
               "`--speculative-ddtree-allow-hybrid-unsafe`: verify the tree with the chain kernels, so sibling "
               "branches share recurrent state and outputs may differ from the target's greedy output. A test / "
               "negative-control mode (DDT113 warns).\n\n"
               "On a model without recurrent layers both flags have no effect; together they are still a "
               "contradiction and rejected."),
    "DDT113": ("DDTREE on a hybrid model with allow-hybrid-unsafe shares recurrent state across branches",
               "`--speculative-ddtree-allow-hybrid-unsafe` verifies the tree through the recurrent layers with the "
               "chain kernels: sibling branches see each other's recurrent state, so the accepted tokens can differ "
               "from the target's greedy output. Valid (SGLang with the payload logs the same warning), but meant "
               "for tests and negative controls; exact trees are the default on hybrid targets."),
}
# Rules of the core that are not errors (the engine reports their hits with this severity).
_SEVERITY = {"DDT110": INFO, "DDT113": WARNING}
# Rules of the core that need the model's facts (hybrid or not) to run.
_NEEDS_MODEL = ("DDT111", "DDT113")


def _is_ddtree(ctx: Context) -> bool:
    return ctx.algorithm == "DDTREE"


def _run_core(ctx: Context) -> list[ddtree_core.DdtreeViolation]:
    """The core's verdict for this context, computed once and shared by the DDT1xx rules."""
    cached = getattr(ctx, "_ddtree_violations", None)
    if cached is None:
        cached = _core_violations(ctx)
        ctx._ddtree_violations = cached  # type: ignore[attr-defined]
    return cached


def _core_violations(ctx: Context) -> list[ddtree_core.DdtreeViolation]:
    flags = dict(ctx.given)
    flags["speculative_algorithm"] = "DDTREE"
    model = {"architecture": ctx.model.architecture if ctx.model else None, "is_hybrid": ctx.is_hybrid,
             "vocab_size": (ctx.draft.vocab_size if ctx.draft and ctx.draft.vocab_size else
                            ctx.model.vocab_size if ctx.model else None),
             "draft_block_size": ctx.draft.block_size if ctx.draft else None}
    return ddtree_core.ddtree_violations(flags, model)


def _make(rule_id: str) -> Rule:
    title, doc = _DOCS[rule_id]
    needs = (FACT_MODEL,) if rule_id in _NEEDS_MODEL else ()

    def check(ctx: Context):
        for v in _run_core(ctx):
            if v.rule_id == rule_id:
                yield Hit(v.message, fix=v.fix, about=v.reads[0] if v.reads else None, edits=v.edits,
                          severity=v.severity)

    return Rule(id=rule_id, title=title, severity=_SEVERITY.get(rule_id, ERROR), reads=(), check=check, needs=needs,
                applies=_is_ddtree, reference=REFERENCE, doc=doc, sglang_enforces=True)


for _id in _DOCS:
    RULES[_id] = _make(_id)


@rule("DDT120", "the bundled DDTREE worker can serve this launch", severity=WARNING,
      reads=("enable_dp_attention", "attention_backend", "speculative_draft_window_size"),
      applies=_is_ddtree, reference="ddtctl payload ddtree_sglang/worker.py (refusals at server start)",
      sglang_enforces=False)
def worker_capability(ctx: Context):
    """SGLang with the payload accepts these launches (the configuration is right), but the DDTREE worker shipped in
    this payload refuses them when the server starts: it runs at any tp-size, but without DP attention (ranks would
    verify different batches), on the triton attention backend only (it verifies with a custom tree mask), and
    without a compact draft window. A server launched anyway stops at start-up with the worker's one-line reason.
    `ddtctl deploy` treats this warning as an error when the payload it ships carries this worker (byte for byte): it
    stops at preflight, before shipping or launching."""
    if ctx.dp_attention:
        yield Hit("the bundled DDTREE worker does not support DP attention (ranks would verify different batches); "
                  "the server would refuse to start", about="enable_dp_attention",
                  fix="remove enable-dp-attention / attn-dp-size (tensor parallelism alone serves DDTREE on many GPUs)")
    backend = ctx.given.get("attention_backend")
    if backend != "triton":
        yield Hit("the bundled DDTREE worker verifies with a custom tree mask on the triton attention backend only, "
                  + ("but attention-backend is not set (SGLang picks fa3/flashinfer/trtllm by GPU)" if backend is None
                     else f"got attention-backend {backend}"),
                  about="attention_backend", fix="set attention-backend: triton",
                  edits={"attention_backend": "triton"})
    if ctx.is_set("speculative_draft_window_size"):
        yield Hit("the bundled DDTREE worker does not support a compact draft window yet",
                  about="speculative_draft_window_size", fix="remove speculative-draft-window-size",
                  edits={"speculative_draft_window_size": None})

