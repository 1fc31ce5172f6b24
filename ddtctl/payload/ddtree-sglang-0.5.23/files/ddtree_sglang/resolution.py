"""DDTREE inside SGLang's own argument resolution (ServerArgs.resolve_once).

One resolution hook wraps the built-in step `handle_speculative_decoding` (sglang.srt.arg_groups.resolution_hooks):
  1. before it, DDTREE's launch rules run on what the user gave (the record's raw input) and the model's facts as
     SGLang reads them; an error finding raises ValueError("[rule id] message (fix: ...)"). The other findings are
     logged as warnings, and the values a finding overrides are declared (`declare_resolution`, SGLang's own way,
     e.g. overrides.py _pipeline_parallel_overlap_disable): DDTREE without an attention backend resolves with
     attention_backend=triton (DDT115). The rules are rules_core.py, a byte-identical copy of
     ddtctl/rules/ddtree/core.py, so `ddtctl validate` and SGLang-with-payload apply one set of rules;
  2. the built-in step runs (alias resolution, registered-algorithm callbacks);
  3. DDTREE then takes the DFLASH family's resolution (drafter checks, num_steps/topk = 1, draft tokens from the
     block size, draft attention backend, max running requests) on the real record, and declares its own
     resolved values: budget, topk cap and verify width (budget + 1).
"""

from __future__ import annotations

import logging
from typing import Any

from ddtree_sglang import ALGORITHM
from ddtree_sglang import rules_core

logger = logging.getLogger(__name__)
_installed = False


def _is_ddtree(server_args: Any) -> bool:
    from sglang.srt.arg_groups.overrides import resolving_view

    return str(resolving_view(server_args).speculative_algorithm or "").upper() == ALGORITHM


def user_flags(server_args: Any) -> dict:
    """What the user gave, dest-keyed (defaults read as given-as-default, which the rules treat as not set)."""
    raw = getattr(server_args, "_raw_input", None)
    if raw is None:
        from sglang.srt.arg_groups.arg_utils import record_fields

        raw = {f.name: getattr(server_args, f.name) for f in record_fields(type(server_args))}
    return dict(raw)


def _draft_block_size(server_args: Any) -> int | None:
    from sglang.srt.arg_groups.overrides import resolving_view

    cfg = resolving_view(server_args)
    path = cfg.speculative_draft_model_path
    if not path:
        return None
    try:
        from sglang.srt.utils.hf_transformers_utils import get_config

        draft = get_config(path, trust_remote_code=cfg.trust_remote_code,
                           revision=cfg.speculative_draft_model_revision)
    except Exception:
        return None
    for holder in (getattr(draft, "dflash_config", None), draft):
        value = holder.get("block_size") if isinstance(holder, dict) else getattr(holder, "block_size", None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def model_facts(server_args: Any) -> dict:
    """The model facts the rules need, as SGLang itself sees the model."""
    from sglang.srt.arg_groups.overrides import model_config_of

    facts: dict = {"architecture": None, "is_hybrid": None, "vocab_size": None, "draft_block_size": None}
    try:
        model_config = model_config_of(server_args)
    except Exception:
        model_config = None
    if model_config is not None:
        hf = model_config.hf_config
        archs = getattr(hf, "architectures", None) or []
        facts["architecture"] = archs[0] if archs else None
        try:
            from sglang.srt.configs.hybrid_arch import mambaish_config

            facts["is_hybrid"] = mambaish_config(model_config) is not None
        except Exception:
            facts["is_hybrid"] = None
        if not facts["is_hybrid"]:
            from sglang.srt.arg_groups import overrides

            if facts["architecture"] in getattr(overrides, "_MAMBA_RADIX_CACHE_ARCHS", ()):
                facts["is_hybrid"] = True
        text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
        vocab = getattr(text, "vocab_size", None)
        facts["vocab_size"] = vocab if isinstance(vocab, int) else None
    facts["draft_block_size"] = _draft_block_size(server_args)
    return facts


def format_violations(violations) -> str:
    parts = [f"[{v.rule_id}] {v.message} (fix: {v.fix})" for v in violations]
    return f"{ALGORITHM} rejected: " + " ; ".join(parts)


def validate_ddtree(server_args: Any) -> list:
    """Raise on the rules' errors; return the other findings (warnings, overrides) for apply_findings."""
    findings = rules_core.ddtree_violations(user_flags(server_args), model_facts(server_args))
    errors = [v for v in findings if v.severity == rules_core.ERROR]
    if errors:
        raise ValueError(format_violations(errors))
    return findings


def apply_findings(server_args: Any, findings) -> None:
    """Declare what the findings override (one declaration per rule, named after it) and log each finding."""
    from sglang.srt.arg_groups.overrides import declare_resolution

    for v in findings:
        if v.overrides:
            declare_resolution(server_args, f"ddtree_sglang.{v.rule_id}", **v.overrides)
        logger.warning("%s [%s] %s", ALGORITHM, v.rule_id, v.message)


def declare_ddtree(server_args: Any) -> None:
    """After the DFLASH family's resolution: DDTREE's own resolved values."""
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    cfg = resolving_view(server_args)
    flags = user_flags(server_args)
    flags["speculative_num_draft_tokens"] = cfg.speculative_num_draft_tokens
    resolved = rules_core.resolve_ddtree(flags, {"draft_block_size": cfg.speculative_num_draft_tokens})
    declare_resolution(
        server_args,
        "ddtree_sglang.resolve",
        speculative_algorithm=ALGORITHM,
        speculative_ddtree_budget=resolved["budget"],
        speculative_ddtree_topk_cap=resolved["topk_cap"],
        speculative_ddtree_verify_width=resolved["verify_width"],
        speculative_ddtree_shadow_linear=resolved["shadow_linear"],
        speculative_ddtree_allow_hybrid_unsafe=resolved["allow_hybrid_unsafe"],
    )


def handle_speculative_decoding(server_args: Any, previous) -> None:
    if not _is_ddtree(server_args):
        previous(server_args)
        return
    apply_findings(server_args, validate_ddtree(server_args))
    previous(server_args)
    from sglang.srt.arg_groups.speculative_hook import _handle_dflash

    try:
        _handle_dflash(server_args)
    except ValueError as exc:  # the DFLASH family's own checks; say why DFLASH is named for a DDTREE launch
        raise ValueError(f"{ALGORITHM} (drafts with the DFLASH drafter): {exc}") from exc
    declare_ddtree(server_args)


def install_hooks() -> None:
    global _installed
    if _installed:
        return
    from sglang.srt.arg_groups.resolution_hooks import register_resolution_hook

    register_resolution_hook("handle_speculative_decoding")(handle_speculative_decoding)
    _installed = True
