"""What the launch-time rules share: the reference prefix, the runners a launch builds (the target's, the
draft's) with the attention backends each constructs, and config.json readings as SGLang's ModelConfig makes
them (configs/model_config.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddtctl.model_facts import ModelFacts
from ddtctl.rules.engine import DFLASH_FAMILY, EAGLE_FAMILY, Context
from ddtctl.rules.hooks.common import MLA_ARCHITECTURES, attn_dp_size
from ddtctl.rules.hooks.overrides import dflash_draft_backend
from ddtctl.rules.hooks.resolution import resolve

SRT = "sglang 0.5.23 srt/"
REGISTRY = f"{SRT}layers/attention/attention_registry.py"

# configs/model_config.py:2540-2546 is_encoder_decoder_model; :2549-2550 is_local_attention_model
ENCODER_DECODER_ARCHITECTURES = (
    "WhisperForConditionalGeneration",
    "MllamaForConditionalGeneration",
    "MossVLForConditionalGeneration",
)
LOCAL_ATTENTION_ARCHITECTURES = ("Llama4ForConditionalGeneration",)
# configs/hybrid_arch.py:55-67 hybrid_gdn_config: the Gated-DeltaNet hybrids (Qwen3-Next, Qwen3.5 / 3.6, ...)
HYBRID_GDN_ARCHITECTURES = (
    "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration",
    "JetNemotronForCausalLM",
    "JetVLMForConditionalGeneration",
)
# hybrids whose linear-attention backend is not Gated-DeltaNet (configs/hybrid_arch.py mamba2_config,
# kimi_linear_config): Mamba2, short conv, KDA
NON_GDN_HYBRID_ARCHITECTURES = (
    "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM",
    "NemotronH_Omni_Reasoning_V3",
    "FalconH1ForCausalLM",
    "GraniteMoeHybridForCausalLM",
    "Lfm2ForCausalLM",
    "Lfm2MoeForCausalLM",
    "ZayaForCausalLM",
    "KimiLinearForCausalLM",
)


def text_config(model: ModelFacts | None) -> dict[str, Any]:
    """The config SGLang reads head counts from (hf_text_config: text_config when there is one)."""
    raw = (model.raw if model is not None else None) or {}
    text = raw.get("text_config")
    return text if isinstance(text, dict) else raw


def architectures(model: ModelFacts | None) -> list[str]:
    archs = ((model.raw if model is not None else None) or {}).get("architectures") or []
    if not archs and model is not None and model.architecture:
        archs = [model.architecture]
    return [a for a in archs if isinstance(a, str)]


def int_field(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def head_dims(model: ModelFacts) -> tuple[int | None, int | None]:
    """(head_dim, v_head_dim) as model_config.py:1341-1354 derives them for an MHA model."""
    text = text_config(model)
    head = int_field(text, "head_dim")
    if not head:
        hidden, heads = int_field(text, "hidden_size"), int_field(text, "num_attention_heads")
        head = hidden // heads if hidden and heads else None
    v_head = int_field(text, "v_head_dim") or head
    return head, v_head


def tp_size(ctx: Context) -> int:
    return int(ctx.get("tp_size", 1) or 1)


def attn_tp_size(ctx: Context) -> int:
    """runtime_context.py:73-76 derive_attn_tp_size: tp // attention-DP // attention-CP."""

    return max(1, tp_size(ctx) // max(1, attn_dp_size(ctx)) // max(1, int(ctx.get("attn_cp_size", 1) or 1)))


def kv_heads_per_rank(model: ModelFacts, tp: int) -> int | None:
    """model_config.py:1700-1711 get_num_kv_heads: at least one per GPU."""
    total = model.num_key_value_heads
    return max(1, total // tp) if total else None


@dataclass(frozen=True)
class Runner:
    """One model runner a launch builds: its role, the model it loads and the attention backends
    attention_backend_setup.py constructs for it (prefill, decode; equal when one backend serves)."""

    role: str  # target | draft
    model: ModelFacts | None
    prefill: str | None
    decode: str | None

    @property
    def backends(self) -> set[str]:
        return {b for b in (self.prefill, self.decode) if b}


def has_draft_runner(ctx: Context) -> bool:
    """Whether the algorithm builds a draft model runner (EAGLE / EAGLE3 / NEXTN / STANDALONE, DFLASH /
    DDTREE); NGRAM has none."""
    return ctx.algorithm in EAGLE_FAMILY or ctx.algorithm in DFLASH_FAMILY


def draft_model(ctx: Context) -> ModelFacts | None:
    """The draft runner's model: the draft checkpoint, else (NEXTN / MTP built into the target) the
    target's."""
    if ctx.draft is not None and ctx.draft.known:
        return ctx.draft
    if ctx.given.get("speculative_draft_model_path") is None:
        return ctx.model
    return None


def runners(ctx: Context) -> list[Runner]:
    """The target runner and, where the algorithm builds one, the draft runner, with the backends each
    constructs: model_runner_components/attention_backend_setup.py:181-200 resolve_attention_backend_strs (a
    draft runner with its own backend uses it for both modes, else the target's pair);
    model_runner.py:306-320 resolve_draft_attention_backend (EAGLE's draft: --speculative-draft-attention-
    backend, else the target's); draft_worker_common.py:32-63 (DFLASH's: the resolver's draft backend).
    Empty when the backends are unknown (no GPU or model)."""

    res = resolve(ctx)
    if res is None:
        return []
    prefill, decode = res.final_pair
    out = [Runner("target", ctx.model, prefill, decode)]
    if has_draft_runner(ctx):
        own = dflash_draft_backend(ctx, res) if ctx.algorithm in DFLASH_FAMILY else res.draft
        draft = draft_model(ctx)
        out.append(Runner("draft", draft, own or prefill, own or decode))
    return out


def is_mla_model(model: ModelFacts | None) -> bool | None:
    """model_config.py attention_arch == MLA (use_mla_backend), for the architectures ddtctl knows; None
    when the model is unknown."""

    if model is None or not model.known:
        return None
    nextn = tuple(f"{a}NextN" for a in MLA_ARCHITECTURES)
    return model.architecture in MLA_ARCHITECTURES or model.architecture in nextn


def is_hybrid_gdn(model: ModelFacts | None) -> bool:
    return model is not None and any(a in HYBRID_GDN_ARCHITECTURES for a in architectures(model))


def env_flag(ctx: Context, name: str) -> bool:
    """An EnvBool of environ.py as SGLang parses it (true / 1 / yes / y)."""
    return str(ctx.env.get(name, "")).strip().lower() in ("true", "1", "yes", "y")


def runner_label(runner: Runner) -> str:
    model = runner.model.architecture if runner.model is not None else "?"
    return f"the {runner.role} runner ({model})"
