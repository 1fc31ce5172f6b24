"""Facts about the target and draft models, read from config.json (never weights) or named in the profile."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.safeio import load_json

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


# What a config.json field may hold (issue #31: `num_hidden_layers: 10**15` made num_linear_layers loop for
# hours, `architectures` as a mapping or an infinite `total_size` crashed). Far above any real model.
_INT_BOUNDS = {
    "num_hidden_layers": 100_000,
    "num_attention_heads": 1_000_000,
    "num_key_value_heads": 1_000_000,
    "vocab_size": 100_000_000,
    "hidden_size": 10_000_000,
    "block_size": 1_000_000,
    "linear_num_key_heads": 1_000_000,
    "linear_num_value_heads": 1_000_000,
    "linear_key_head_dim": 1_000_000,
    "linear_value_head_dim": 1_000_000,
    "linear_conv_kernel_dim": 1_000_000,
    "full_attention_interval": 100_000,
}
MAX_LIST = 100_000  # entries of `architectures` / `layer_types`
MAX_WEIGHTS_BYTES = 1 << 52  # 4 PiB: a safetensors index's total_size beyond this is not a checkpoint


class ModelConfigError(UsageError):
    """A config.json (or its safetensors index) readable here but unusable: one line, where=the file."""


def _int(config: dict[str, Any], key: str, where: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    bound = _INT_BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise ModelConfigError(
            f"config.json field {key} is {shown}; expected an integer in 0..{bound:,}",
            where=where,
            fix="is this the model's own config.json?",
        )
    return value


def _sub_dict(config: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelConfigError(
            f"config.json field {key} is {type(value).__name__}; expected a mapping", where=where
        )
    return value


def _str_list(value: Any, key: str, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_LIST or not all(isinstance(v, str) for v in value):
        raise ModelConfigError(
            f"config.json field {key} must be a list of strings (at most {MAX_LIST:,})", where=where
        )
    return value


def _str(value: Any, key: str, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ModelConfigError(
        f"config.json field {key} is {type(value).__name__}; expected a string", where=where
    )


def facts_from_config(config: dict[str, Any], source: str = "config.json") -> ModelFacts:
    """The facts of a parsed config.json; every field read is type- and range-checked (ModelConfigError)."""
    text = _sub_dict(config, "text_config", source)

    def pick(key: str) -> int | None:
        own = _int(config, key, source)
        return own if own is not None else _int(text, key, source)

    archs = _str_list(config.get("architectures"), "architectures", source)
    dflash = _sub_dict(config, "dflash_config", source)
    block = _int(config, "block_size", source) or _int(dflash, "block_size", source)
    layer_types = _str_list(
        config.get("layer_types") if config.get("layer_types") is not None else text.get("layer_types"),
        "layer_types",
        source,
    )
    _str_list(text.get("layer_types"), "text_config.layer_types", source)  # is_hybrid reads it from raw
    ssm_dtype = _str(text.get("mamba_ssm_dtype"), "text_config.mamba_ssm_dtype", source) or _str(
        config.get("mamba_ssm_dtype"), "mamba_ssm_dtype", source
    )  # SGLang reads text_config first
    return ModelFacts(
        architecture=archs[0] if archs else None,
        source=source,
        num_hidden_layers=pick("num_hidden_layers"),
        num_attention_heads=pick("num_attention_heads"),
        num_key_value_heads=pick("num_key_value_heads") or pick("num_attention_heads"),
        vocab_size=pick("vocab_size"),
        hidden_size=pick("hidden_size"),
        block_size=block,
        is_dflash_draft=bool(dflash) or any("DFlash" in a for a in archs),
        linear_num_key_heads=pick("linear_num_key_heads"),
        linear_num_value_heads=pick("linear_num_value_heads"),
        linear_key_head_dim=pick("linear_key_head_dim"),
        linear_value_head_dim=pick("linear_value_head_dim"),
        linear_conv_kernel_dim=pick("linear_conv_kernel_dim"),
        full_attention_interval=pick("full_attention_interval"),
        layer_types=tuple(layer_types),
        mamba_ssm_dtype=ssm_dtype,
        raw=config,
    )


def _load(path: Path, limit: int, what: str) -> Any | None:
    """The JSON of `path`, None when there is no such file here (or it may not be read); a file that is there
    but is not a bounded, regular JSON file is a ModelConfigError."""
    try:
        return load_json(path, limit, what=what, error=ModelConfigError)
    except ModelConfigError as err:
        if err.message in ("no such file", "permission denied") or err.message.startswith("cannot read"):
            return None
        raise


def weights_bytes_of(model_dir: Path) -> int | None:
    """The size of a local checkpoint's weights: the safetensors index's
    `metadata.total_size`, else the sum of its *.safetensors files. None when there are none
    (a config-only directory, or a remote path's cached config)."""
    index = model_dir / "model.safetensors.index.json"
    doc = _load(index, 16 * MAX_CONFIG_BYTES, "safetensors index")
    if doc is not None:
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        total = meta.get("total_size") if isinstance(meta, dict) else None
        if total is not None:
            if (
                isinstance(total, bool)
                or not isinstance(total, (int, float))
                or not 0 < total <= MAX_WEIGHTS_BYTES
            ):
                raise ModelConfigError(
                    f"metadata.total_size is {str(total)[:40]}; expected bytes up to {MAX_WEIGHTS_BYTES:,}",
                    where=str(index),
                )
            return int(total)
    try:
        sizes = [f.stat().st_size for f in model_dir.glob("*.safetensors") if f.is_file()]
    except OSError:
        return None
    return sum(sizes) or None


def read_model_facts(
    path: str | Path | None, *, revision: str | None = None, what: str = "model", use_hub: bool = True
) -> ModelFacts | None:
    """Facts from `<path>/config.json` when it is readable here; for a Hugging Face hub id (`Org/Name`, no
    such path here) from the hub's config.json at `revision` (ddtctl.hub: that one file, through the hub
    cache; a HubError, exit 8, when the hub cannot give it). None when the path is not local (nor cached
    offline). A config.json that is there but hostile (a FIFO, /dev/zero, over 4 MiB, not JSON, nested too
    deep, a field of the wrong type or out of range) is a one-line ModelConfigError (exit 2), never a hang or
    a crash. `use_hub=False`: a hub id is not local, as any path that is not here."""
    if not path:
        return None
    try:
        config_path = Path(path).expanduser() / "config.json"
    except (RuntimeError, ValueError, TypeError):  # `~nobody/...`, a NUL byte
        return None
    config = _load(config_path, MAX_CONFIG_BYTES, "model config")
    if config is None:
        from ddtctl import hub

        if not use_hub or not hub.is_hub_id(path):
            return None
        snapshot = hub.config_dir(str(path), revision, what=what)
        if snapshot is None:
            return None
        config_path = snapshot / "config.json"
        config = _load(config_path, MAX_CONFIG_BYTES, "model config")
        if config is None:
            return None
    if not isinstance(config, dict):
        raise ModelConfigError(
            f"model config.json holds a JSON {type(config).__name__}, not an object", where=str(config_path)
        )
    facts = facts_from_config(config, source=str(config_path))
    facts.weights_bytes = weights_bytes_of(config_path.parent)
    return facts


def facts_from_architecture(architecture: str) -> ModelFacts:
    return ModelFacts(architecture=architecture, source="profile")
