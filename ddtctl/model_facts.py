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
# Of those, the ones sglang 0.5.23 supports the extra_buffer mamba strategy for
# (with the triton linear-attn backend).
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
    # Gated-DeltaNet linear-attention shapes (Qwen3-Next, Qwen3.5, Qwen3.6
    # configs; None where the config has none)
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel_dim: int | None = None
    full_attention_interval: int | None = None
    layer_types: tuple[str, ...] = ()
    mamba_ssm_dtype: str | None = None  # the config's; SGLang's default is float32
    weights_bytes: int | None = (
        None  # the checkpoint's weight files (*.safetensors), when the directory is local
    )
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
        layer_types = (
            self.raw.get("layer_types") or (self.raw.get("text_config") or {}).get("layer_types") or []
        )
        return any(t in ("linear_attention", "mamba") for t in layer_types) if layer_types else False

    @property
    def num_linear_layers(self) -> int | None:
        """Layers with recurrent (linear-attention) state, as SGLang counts them for Qwen3-Next / Qwen3.5:
        every layer but each `full_attention_interval`-th (configs/qwen3_next.py layers_block_type); from
        `layer_types` when the config has no interval."""
        layers = self.num_hidden_layers
        interval = self.full_attention_interval
        if layers and interval and interval > 0:
            return sum(1 for i in range(layers) if (i + 1) % interval)
        if self.layer_types:
            return sum(1 for t in self.layer_types if t != "full_attention")
        return None

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


def _sub_dict(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def facts_from_config(config: dict[str, Any], source: str = "config.json") -> ModelFacts:
    text = _sub_dict(config, "text_config")

    def pick(key: str) -> Any:
        return config.get(key) if config.get(key) is not None else text.get(key)

    archs = config.get("architectures") or []
    dflash = _sub_dict(config, "dflash_config")
    block = _int(config.get("block_size")) or _int(dflash.get("block_size"))
    layer_types = pick("layer_types")
    ssm_dtype = text.get("mamba_ssm_dtype") or config.get("mamba_ssm_dtype")  # SGLang reads text_config first
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
        linear_num_key_heads=_int(pick("linear_num_key_heads")),
        linear_num_value_heads=_int(pick("linear_num_value_heads")),
        linear_key_head_dim=_int(pick("linear_key_head_dim")),
        linear_value_head_dim=_int(pick("linear_value_head_dim")),
        linear_conv_kernel_dim=_int(pick("linear_conv_kernel_dim")),
        full_attention_interval=_int(pick("full_attention_interval")),
        layer_types=tuple(t for t in layer_types if isinstance(t, str))
        if isinstance(layer_types, list)
        else (),
        mamba_ssm_dtype=ssm_dtype if isinstance(ssm_dtype, str) else None,
        raw=config,
    )


def weights_bytes_of(model_dir: Path) -> int | None:
    """The size of a local checkpoint's weights: the safetensors index's
    `metadata.total_size`, else the sum of its *.safetensors files. None when there are none
    (a config-only directory, or a remote path's cached config)."""
    index = model_dir / "model.safetensors.index.json"
    try:
        if index.is_file() and index.stat().st_size <= 16 * MAX_CONFIG_BYTES:
            total = (json.loads(index.read_text(encoding="utf-8")).get("metadata") or {}).get("total_size")
            if isinstance(total, (int, float)) and total > 0:
                return int(total)
        sizes = [f.stat().st_size for f in model_dir.glob("*.safetensors") if f.is_file()]
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None
    return sum(sizes) or None


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
    facts = facts_from_config(config, source=str(config_path))
    facts.weights_bytes = weights_bytes_of(config_path.parent)
    return facts


def facts_from_architecture(architecture: str) -> ModelFacts:
    return ModelFacts(architecture=architecture, source="profile")
