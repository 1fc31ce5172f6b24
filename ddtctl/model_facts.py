"""Facts about the target and draft models, read from config.json (never weights) or named in the profile."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Hybrid linear-attention (Mamba / GDN / KDA) architectures whose KV cache includes recurrent state
# (sglang 0.5.23 arg_groups/overrides.py _MAMBA_RADIX_CACHE_ARCHS and _MAMBA_EXTRA_BUFFER_ARCHS).
HYBRID_ARCHITECTURES = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "KimiLinearForCausalLM",
        "KimiK3ForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
        "FalconH1ForCausalLM",
        "JetNemotronForCausalLM",
        "JetVLMForConditionalGeneration",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "ZayaForCausalLM",
        "Glm5NextForConditionalGeneration",
        "GraniteMoeHybridForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
    }
)
# Of those, the ones sglang 0.5.23 supports the extra_buffer mamba strategy for (with the triton linear-attn backend).
EXTRA_BUFFER_ARCHITECTURES = HYBRID_ARCHITECTURES - {
    "KimiK3ForConditionalGeneration",
    "JetNemotronForCausalLM",
    "JetVLMForConditionalGeneration",
    "Lfm2ForCausalLM",
    "Lfm2MoeForCausalLM",
    "ZayaForCausalLM",
}
# Architectures whose NEXTN/MTP draft layer ships inside the target checkpoint (no draft path needed).
BUILTIN_MTP_ARCHITECTURES = frozenset(
    {
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV4ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "HYV3ForCausalLM",
        "HYV4ForCausalLM",
        "Qwen4ExpForConditionalGeneration",
    }
)
MAX_CONFIG_BYTES = 4 * 1024 * 1024


@dataclass
class ModelFacts:
    architecture: str | None = None
    source: str = "unknown"  # "config.json" | "profile" | "unknown"
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    block_size: int | None = None  # DFlash drafters
    is_dflash_draft: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def known(self) -> bool:
        return self.architecture is not None

    @property
    def is_hybrid(self) -> bool | None:
        if self.architecture is None:
            return None
        if self.architecture in HYBRID_ARCHITECTURES:
            return True
        layer_types = self.raw.get("layer_types") or (self.raw.get("text_config") or {}).get("layer_types") or []
        return any(t in ("linear_attention", "mamba") for t in layer_types) if layer_types else False

    def as_rule_dict(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "is_hybrid": self.is_hybrid,
            "vocab_size": self.vocab_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def facts_from_config(config: dict[str, Any], source: str = "config.json") -> ModelFacts:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

    def pick(key: str) -> Any:
        return config.get(key) if config.get(key) is not None else text.get(key)

    archs = config.get("architectures") or []
    dflash = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    block = _int(config.get("block_size")) or _int(dflash.get("block_size"))
    return ModelFacts(
        architecture=archs[0] if archs and isinstance(archs[0], str) else None,
        source=source,
        num_hidden_layers=_int(pick("num_hidden_layers")),
        num_attention_heads=_int(pick("num_attention_heads")),
        num_key_value_heads=_int(pick("num_key_value_heads")) or _int(pick("num_attention_heads")),
        vocab_size=_int(pick("vocab_size")),
        hidden_size=_int(pick("hidden_size")),
        block_size=block,
        is_dflash_draft=bool(dflash) or any("DFlash" in a for a in archs if isinstance(a, str)),
        raw=config,
    )


def read_model_facts(path: str | Path | None) -> ModelFacts | None:
    """Facts from `<path>/config.json` when it is readable here; None when the path is not local."""
    if not path:
        return None
    config_path = Path(path).expanduser() / "config.json"
    try:
        if not config_path.is_file() or config_path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(config, dict):
        return None
    return facts_from_config(config, source=str(config_path))


def facts_from_architecture(architecture: str) -> ModelFacts:
    return ModelFacts(architecture=architecture, source="profile")
