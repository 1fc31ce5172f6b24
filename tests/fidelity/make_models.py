"""Writes the config.json-only model directories of the fidelity corpus (tests/fidelity/models/<name>/config.json).

Dimensions follow the public checkpoints they imitate; SGLang's resolver reads only config.json (no weights, no
tokenizer). Run `python tests/fidelity/make_models.py` after changing a definition here; the output is committed.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "models"

_QWEN_COMMON = {"vocab_size": 151936, "rms_norm_eps": 1e-6, "hidden_act": "silu", "torch_dtype": "bfloat16",
                "bos_token_id": 151643, "eos_token_id": 151645, "attention_bias": False, "attention_dropout": 0.0,
                "initializer_range": 0.02, "use_cache": True}


def qwen3_dense(hidden=4096, layers=36, heads=32, kv=8, inter=12288):
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
            "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
            "num_hidden_layers": layers, "max_position_embeddings": 40960, "rope_theta": 1000000,
            "rope_scaling": None, "tie_word_embeddings": False, "max_window_layers": layers,
            "sliding_window": None, "use_sliding_window": False, **_QWEN_COMMON}


def qwen3_moe():
    return {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
            "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
            "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
            "router_aux_loss_coef": 0.001, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "num_hidden_layers": 48, "max_position_embeddings": 262144, "rope_theta": 10000000, "rope_scaling": None,
            "tie_word_embeddings": False, "max_window_layers": 48, "sliding_window": None,
            "use_sliding_window": False, **_QWEN_COMMON}


def _gdn_text(hidden, layers, heads, kv, inter, moe: dict | None):
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    cfg = {"hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": 256, "num_hidden_layers": layers,
           "max_position_embeddings": 262144, "rope_theta": 10000000, "partial_rotary_factor": 0.25,
           "full_attention_interval": 4, "layer_types": layer_types,
           "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
           "linear_num_key_heads": 16, "linear_num_value_heads": 32 if hidden < 5000 else 48,
           "tie_word_embeddings": False, **_QWEN_COMMON}
    if moe:
        cfg.update(moe)
    return cfg


_NEXT_MOE = {"num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
             "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1, "mlp_only_layers": [],
             "norm_topk_prob": True}


def qwen3_next():
    cfg = _gdn_text(2048, 48, 16, 2, 5120, _NEXT_MOE)
    cfg.update(architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next")
    return cfg


def qwen3_5_text():
    cfg = _gdn_text(5120, 64, 24, 4, 17408, None)
    cfg.update(architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", vocab_size=248320)
    return cfg


def _vision():
    return {"depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 4304,
            "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
            "out_hidden_size": 5120, "num_position_embeddings": 2304, "deepstack_visual_indexes": []}


def qwen3_5_vl(moe: bool, name_27b: bool = True):
    if moe:
        text = _gdn_text(2048, 40, 16, 2, 5120, {"num_experts": 256, "num_experts_per_tok": 8,
                                                 "moe_intermediate_size": 512,
                                                 "shared_expert_intermediate_size": 512})
        text.update(model_type="qwen3_5_moe_text", vocab_size=248320)
        vision = dict(_vision(), out_hidden_size=2048)
        return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                "text_config": text, "vision_config": vision, "image_token_id": 248056, "video_token_id": 248057,
                "vision_start_token_id": 248053, "vision_end_token_id": 248054, "tie_word_embeddings": False}
    text = _gdn_text(5120, 64, 24, 4, 17408, None)
    text.update(model_type="qwen3_5_text", vocab_size=248320)
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": text, "vision_config": _vision(), "image_token_id": 248056, "video_token_id": 248057,
            "vision_start_token_id": 248053, "vision_end_token_id": 248054, "tie_word_embeddings": False}


def dflash(hidden, target_layers, block_size: int | None, layers=5, vocab=151936, mask=151669):
    step = max(1, (target_layers - 2) // (layers - 1))
    ids = [1 + i * step for i in range(layers)]
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
           "intermediate_size": hidden * 3, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
           "num_hidden_layers": layers, "num_target_layers": target_layers, "max_position_embeddings": 40960,
           "rope_theta": 1000000, "rope_scaling": None, "tie_word_embeddings": False,
           "dflash_config": {"mask_token_id": mask, "target_layer_ids": ids}, **_QWEN_COMMON}
    cfg["vocab_size"] = vocab
    if block_size is not None:
        cfg["block_size"] = block_size
    return cfg


def eagle3():
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "num_hidden_layers": 1, "max_position_embeddings": 40960, "rope_theta": 1000000, "vocab_size": 151936,
            "draft_vocab_size": 32000, "target_hidden_size": 4096, "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "torch_dtype": "bfloat16", "tie_word_embeddings": False, "bos_token_id": 151643,
            "eos_token_id": 151645}


def deepseek_v3_nextn():
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
            "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
            "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128,
            "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8,
            "topk_group": 4, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
            "norm_topk_prob": True, "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512,
            "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "max_position_embeddings": 163840, "rope_theta": 10000, "vocab_size": 129280,
            "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                             "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": False,
            "bos_token_id": 0, "eos_token_id": 1, "attention_bias": False, "ep_size": 1}


def deepseek_v32():
    """DeepSeek V3.2 (DSA: DeepSeek Sparse Attention): V3's shape plus the lightning indexer."""
    return {**deepseek_v3_nextn(), "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
            "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}


def deepseek_v32_sink():
    """A DSA model with learnable attention sinks and index top-k shared every other layer."""
    return {**deepseek_v32(), "learnable_sink": True, "index_topk_freq": 2}


def _minimal(architecture: str, model_type: str, **extra) -> dict:
    """A config.json with only the architecture and model type: transformers' config class fills its defaults
    (the public checkpoint's shape), which is all SGLang's resolver reads."""
    return {"architectures": [architecture], "model_type": model_type, "torch_dtype": "bfloat16", **extra}


def nemotron_h():
    """A Mamba2 hybrid (NemotronHForCausalLM, 8B-like): Mamba2 layers `M`, attention `*`, MLP `-`."""
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    return {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
            "intermediate_size": 21504, "hybrid_override_pattern": pattern, "num_hidden_layers": len(pattern),
            "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 8, "mlp_hidden_act": "relu2",
            "attention_bias": False, "mlp_bias": False, "use_bias": False, "layer_norm_epsilon": 1e-5,
            "max_position_embeddings": 8192, "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_n_groups": 8,
            "mamba_head_dim": 64, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_hidden_act": "silu",
            "mamba_chunk_size": 128, "vocab_size": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "use_cache": True}


MODELS = {
    "qwen3-8b": qwen3_dense(),
    "qwen3-8b-dflash-b16": dflash(4096, 36, 16),
    "qwen3-8b-dflash-b8": dflash(4096, 36, 8),
    "qwen3-8b-dflash-noblock": dflash(4096, 36, None),
    "qwen3-8b-eagle3": eagle3(),
    "qwen3-30b-a3b": qwen3_moe(),
    "qwen3-30b-a3b-dflash-b16": dflash(2048, 48, 16),
    "qwen3-next-80b-a3b": qwen3_next(),
    "qwen3-next-dflash-b16": dflash(2048, 48, 16),
    "qwen3.5-27b-text": qwen3_5_text(),
    "qwen3.6-27b": qwen3_5_vl(moe=False),
    "qwen3.6-35b-a3b": qwen3_5_vl(moe=True),
    "qwen3.6-27b-dflash-b16": dflash(5120, 64, 16, vocab=248320, mask=248077),
    "qwen3.6-35b-a3b-dflash-b16": dflash(2048, 40, 16, vocab=248320, mask=248077),
    "deepseek-v3-nextn": deepseek_v3_nextn(),
    "nemotron-h-8b": nemotron_h(),
    "deepseek-v32": deepseek_v32(),
    "deepseek-v32-sink": deepseek_v32_sink(),
    "llama4-scout": _minimal("Llama4ForCausalLM", "llama4_text"),
    "gpt-oss": _minimal("GptOssForCausalLM", "gpt_oss", num_hidden_layers=24, sliding_window=128,
                        layer_types=["sliding_attention", "full_attention"] * 12),
    "olmo2": _minimal("Olmo2ForCausalLM", "olmo2"),
    "lfm2": _minimal("Lfm2ForCausalLM", "lfm2"),
    "exaone4": _minimal("Exaone4ForCausalLM", "exaone4"),
    "iquest-q1": _minimal("IQuestQ1ForCausalLM", "iquest_q1"),
    "iquest-q1-mtp": _minimal("IQuestQ1MTP", "iquest_q1_mtp", num_hidden_layers=1),
    "iquest-q1-mtp-l40": _minimal("IQuestQ1MTP", "iquest_q1_mtp", num_hidden_layers=1, num_target_layers=40),
}


def main() -> None:
    for name, cfg in MODELS.items():
        d = ROOT / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(MODELS)} model dirs under {ROOT}")


if __name__ == "__main__":
    main()
