"""The constraint graph: rules as data (id, severity, reads, needs, condition, message, fix, reference).

A rule's `check` returns hits; the engine turns them into findings with the profile line of the flag the hit
is about. Rules that need facts (model config, draft config, GPU) that are unknown are not run; the engine
reports which and why, so "valid" never silently means "not checked".
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ddtctl.findings import ERROR, INFO, SEVERITY_ORDER, WARNING, Finding  # noqa: F401  (re-exported)
from ddtctl.model_facts import ModelFacts
from ddtctl.schema.gpus import GpuSpec

# Algorithm names as SGLang 0.5.23 knows them (spec_info.py), plus DDTREE from the payload. NEXTN is EAGLE.
KNOWN_ALGORITHMS = (
    "EAGLE",
    "EAGLE3",
    "NEXTN",
    "STANDALONE",
    "NGRAM",
    "DFLASH",
    "DSPARK",
    "UNO",
    "FROZEN_KV_MTP",
    "DDTREE",
)
DFLASH_FAMILY = ("DFLASH", "DDTREE")
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")


@dataclass
class Hit:
    message: str
    fix: str | None = None
    about: str | None = None  # dest whose line the finding points at
    edits: dict[str, Any] = field(default_factory=dict)  # dest -> value (None = remove)
    severity: str | None = None  # override the rule's
    # Whether `edits` is an unsafe fix (applied only with `validate --fix --unsafe-fixes`). None, the default:
    # decided from the edits themselves (ddtctl.fix.edit_safety: removing a flag or guessing a number is
    # unsafe, setting a switch or a choice is safe). Set True for a choice that is a guess, False for a number
    # derived from the user's own values.
    unsafe: bool | None = None


@dataclass
class Context:
    """What rules read: the flags the user gave (by SGLang dest), catalog defaults, and facts."""

    given: dict[str, Any]
    defaults: dict[str, Any]
    lines: dict[str, int | None]
    keys: dict[str, str]
    model: ModelFacts | None = None
    draft: ModelFacts | None = None
    gpu: GpuSpec | None = None
    gpu_count: int | None = None
    anchor_line: int | None = None  # where findings about absent flags point (the algorithm / `server:` line)
    # the profile's `env:` (the server process's environment); a hit about "env.NAME" points at its line
    env: dict[str, str] = field(default_factory=dict)
    # verdicts derived from this context that several rules share, computed once (e.g. the DDTREE core's)
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def get(self, dest: str, default: Any = None) -> Any:
        if dest in self.given and self.given[dest] is not None:
            return self.given[dest]
        value = self.defaults.get(dest)
        return default if value is None else value

    def is_set(self, dest: str) -> bool:
        return self.given.get(dest) is not None

    @property
    def known_model(self) -> ModelFacts:
        """`model` where a rule relies on it: one that needs FACT_MODEL / FACT_MODEL_CONFIG (run_rules skips
        it while the model is unknown), or code behind such a check."""
        if self.model is None:
            raise RuntimeError("model facts read without needs=(FACT_MODEL,) or a check that they are known")
        return self.model

    @property
    def known_gpu(self) -> GpuSpec:
        """`gpu` where a rule relies on it: one that needs FACT_GPU (run_rules skips it while the GPU is
        unknown), or code behind such a check."""
        if self.gpu is None:
            raise RuntimeError("the GPU read without needs=(FACT_GPU,) or a check that it is known")
        return self.gpu

    @property
    def algorithm(self) -> str | None:
        algo = self.given.get("speculative_algorithm")
        if algo is None or self.given.get("enable_return_aux_hidden_states"):
            # With aux hidden-state capture the algorithm only names the capture convention; SGLang resets it
            # to None (validation_hook.py:693-703 handle_aux_hidden_state_capture), so no speculative rule
            # applies.
            return None
        algo = str(algo).upper()
        return "EAGLE" if algo == "NEXTN" else algo

    @property
    def is_hybrid(self) -> bool | None:
        return None if self.model is None or not self.model.known else self.model.is_hybrid

    @property
    def dp_attention(self) -> bool:
        return bool(self.get("enable_dp_attention")) or (self.get("attn_dp_size") or 1) > 1

    def draft_tokens(self) -> int | None:
        """speculative_num_draft_tokens as SGLang resolves it for the DFLASH family."""
        for dest in ("speculative_dflash_block_size", "speculative_num_draft_tokens"):
            value = self.given.get(dest)
            if isinstance(value, int) and value > 0:
                return value
        if self.algorithm in DFLASH_FAMILY:
            if self.draft is not None and self.draft.block_size:
                return self.draft.block_size
        return None


FACT_MODEL, FACT_DRAFT, FACT_GPU = "model", "draft", "gpu"
FACT_MODEL_CONFIG = "model-config"  # head counts and sizes: only config.json has them, not model.architecture
FACT_HELP = {
    FACT_MODEL_CONFIG: "model config.json not readable here (head counts and layer shapes unknown; "
    "`ddtctl facts HOST` caches it)",
    FACT_MODEL: "model facts unknown (make model.path/config.json readable here or set model.architecture)",
    FACT_DRAFT: "draft model facts unknown (the draft's config.json is not readable here)",
    FACT_GPU: "GPU unknown (set hardware.gpu or pass --gpu)",
}


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str
    reads: tuple[str, ...]
    check: Callable[[Context], Iterable[Hit]]
    needs: tuple[str, ...] = ()
    applies: Callable[[Context], bool] | None = None
    reference: str = ""
    doc: str = ""
    sglang_enforces: bool = True  # False: SGLang 0.5.23 misses it at launch (ddtctl is stricter by design)
    # Why an error-severity rule is an error where no raise site of SGLang's resolver maps to it
    # (ddtctl/rules/coverage.yaml): the runtime failure it prevents, with its evidence (a file:line, a test, a
    # note). tests/rules/test_evidence.py fails on an error rule with neither.
    evidence: str = ""


RULES: dict[str, Rule] = {}


def rule(
    id: str,
    title: str,
    *,
    severity: str = ERROR,
    reads: tuple[str, ...] = (),
    needs: tuple[str, ...] = (),
    applies: Callable[[Context], bool] | None = None,
    reference: str = "",
    sglang_enforces: bool = True,
    evidence: str = "",
):
    def register(fn: Callable[[Context], Iterable[Hit] | Hit | None]) -> Callable:
        def check(ctx: Context) -> Iterable[Hit]:
            result = fn(ctx)
            if result is None:
                return ()
            if isinstance(result, Hit):
                return (result,)
            return result

        if id in RULES:
            raise RuntimeError(f"duplicate rule id {id}")
        RULES[id] = Rule(
            id=id,
            title=title,
            severity=severity,
            reads=reads,
            check=check,
            needs=needs,
            applies=applies,
            reference=reference,
            doc=inspect.cleandoc(fn.__doc__ or ""),
            sglang_enforces=sglang_enforces,
            evidence=evidence,
        )
        return fn

    return register


def _fact_available(ctx: Context, fact: str) -> bool:
    if fact == FACT_MODEL:
        return ctx.model is not None and ctx.model.known
    if fact == FACT_MODEL_CONFIG:
        return ctx.model is not None and ctx.model.known and ctx.model.source != "profile"
    if fact == FACT_DRAFT:
        return ctx.draft is not None and ctx.draft.known
    if fact == FACT_GPU:
        return ctx.gpu is not None
    return True


def run_rules(ctx: Context, rules: Iterable[Rule]) -> tuple[list[Finding], dict[str, str]]:
    """Findings of `rules` (every rule: `ddtctl.rules.all_rules()`), and the rules that could not run with the
    reason."""
    findings: list[Finding] = []
    skipped: dict[str, str] = {}
    for r in rules:
        if r.applies is not None and not r.applies(ctx):
            continue
        missing = [f for f in r.needs if not _fact_available(ctx, f)]
        if missing:
            skipped[r.id] = FACT_HELP[missing[0]]
            continue
        for hit in r.check(ctx):
            about = hit.about or (r.reads[0] if r.reads else None)
            findings.append(
                Finding(
                    rule=r.id,
                    severity=hit.severity or r.severity,
                    message=hit.message,
                    line=(ctx.lines.get(about) if about else None) or ctx.anchor_line,
                    fix=hit.fix,
                    key=_finding_key(ctx, about),
                    edits={d.replace("_", "-"): v for d, v in hit.edits.items()},
                    unsafe=hit.unsafe,
                )
            )
    return findings, skipped


def _finding_key(ctx: Context, about: str | None) -> str | None:
    """The profile key a hit is about: its flag's key as written, a dashed dest, or "env.NAME" as is."""
    if about is None:
        return None
    if about.startswith("env."):
        return ctx.keys.get(about, about)
    return ctx.keys.get(about, about.replace("_", "-"))
