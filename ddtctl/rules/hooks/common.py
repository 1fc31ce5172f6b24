"""Small helpers every hook module reads: the reference prefix, attention-DP groups, MLA, speculation."""

from __future__ import annotations

from ddtctl.rules.engine import Context

AG = "sglang 0.5.23 srt/arg_groups/"
SPEC_HOOK = f"{AG}speculative_hook.py"


# Architectures whose attention is MLA (model_config.py use_mla_backend).
MLA_ARCHITECTURES = (
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV2ForCausalLM",
    "KimiK2ForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
)


def nonpositive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0


def attn_dp_size(ctx: Context) -> int:
    """Attention-DP groups as SGLang resolves them: `--dp-size N --enable-dp-attention` becomes
    `--attn-dp-size N` (parallel_hook.py:49-61 _handle_deprecated_dp_attention)."""
    attn = ctx.get("attn_dp_size", 1) or 1
    if attn == 1 and ctx.get("enable_dp_attention"):
        attn = ctx.get("dp_size", 1) or 1
    return attn


def is_mla(ctx: Context) -> bool:
    return ctx.model is not None and ctx.model.architecture in MLA_ARCHITECTURES


def is_speculative(ctx: Context) -> bool:
    """The algorithm SGLang keeps (aux hidden-state capture resets it: validation_hook.py:693-703)."""
    return ctx.algorithm is not None


def env_set(ctx: Context, name: str) -> bool:
    """Whether the server environment (the profile's `env:`) sets `name` at all (environ.py `is_set`)."""
    return name in ctx.env


def env_flag(ctx: Context, name: str, default: bool = False) -> bool:
    """An SGLANG_* boolean as environ.py EnvBool parses it (true/1/yes/y, false/0/no/n)."""
    value = ctx.env.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("true", "1", "yes", "y")


def env_int(ctx: Context, name: str, default: int | None) -> int | None:
    """An SGLANG_* integer (environ.py EnvInt); the default when unset or not a number."""
    try:
        return int(ctx.env[name])
    except (KeyError, ValueError):
        return default
