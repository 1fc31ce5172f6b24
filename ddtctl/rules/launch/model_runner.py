"""Launch-time checks of sglang 0.5.23 srt/model_executor/model_runner.py and its components
(model_runner_components/: load_model_utils.py, moe_ep_setup.py, spec_aux_hidden_state.py,
ngram_embedding_manager.py): what the target runner checks while it loads the weights and wires the
speculative hidden-state capture. The resolver accepts every launch these rules reject."""

from __future__ import annotations

from ddtctl.rules.engine import DFLASH_FAMILY, FACT_DRAFT, FACT_MODEL, FACT_MODEL_CONFIG, Context, Hit, rule
from ddtctl.rules.launch.common import SRT, architectures, env_flag, int_field, text_config, tp_size
from ddtctl.rules.launch.draft_workers import dflash_config

COMPONENTS = f"{SRT}model_executor/model_runner_components/"
DFLASH_UTILS = f"{SRT}speculative/dflash_utils.py"


@rule(
    "DDT740",
    "--ple-offload-embedding is for Qwen4-Exp",
    reads=("ple_offload_embedding",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: bool(ctx.get("ple_offload_embedding")),
    reference=f"{COMPONENTS}load_model_utils.py:275-281 load_model_with_memory_saver",
    sglang_enforces=False,
)
def ple_offload_model(ctx: Context):
    """The per-layer-embedding offload exists only in Qwen4-Exp's model code: the target runner raises
    "--ple-offload-embedding only supports Qwen4ExpForConditionalGeneration" before it loads any other model.
    The resolver's offload check (DDT944) accepts the switch on any model."""
    if "Qwen4ExpForConditionalGeneration" in architectures(ctx.model):
        return None
    return Hit(
        f"--ple-offload-embedding only supports Qwen4ExpForConditionalGeneration, not "
        f"{ctx.known_model.architecture}; the model runner raises before loading the weights",
        fix="remove ple-offload-embedding",
        edits={"ple_offload_embedding": None},
    )


def _block_n(ctx: Context) -> int | None:
    quant = (ctx.model.raw if ctx.model is not None else {}).get("quantization_config")
    block = quant.get("weight_block_size") if isinstance(quant, dict) else None
    if isinstance(block, list) and block and isinstance(block[0], int) and block[0] > 0:
        return block[0]
    return None


@rule(
    "DDT741",
    "a block-quantized MoE shards into whole weight blocks",
    reads=("tp_size", "ep_size", "moe_dp_size"),
    needs=(FACT_MODEL_CONFIG,),
    applies=lambda ctx: _block_n(ctx) is not None and ctx.get("moe_a2a_backend") in (None, "none"),
    reference=f"{COMPONENTS}moe_ep_setup.py:138-176 check_quantized_moe_compatibility",
    sglang_enforces=False,
)
def quantized_moe(ctx: Context):
    """For a checkpoint quantized in weight blocks (quantization_config.weight_block_size, e.g. DeepSeek-V3
    FP8, Qwen3-30B-A3B-FP8: [128, 128]) the model runner checks, right after loading, that tp-size is a
    multiple of ep-size and that each MoE tensor-parallel rank (tp / ep / moe-dp) holds a whole number of
    weight blocks of moe_intermediate_size: moe_intermediate_size % moe_tp == 0 and (moe_intermediate_size /
    moe_tp) % block_n == 0 (unless SGLANG_SHARED_EXPERT_TP1). E.g. Qwen3-30B-A3B-FP8 (768) at tp 8: 96 per
    rank, not a multiple of 128. Not checked with an all-to-all MoE backend (SGLang sets ep-size itself)."""
    tp, ep, moe_dp = tp_size(ctx), int(ctx.get("ep_size", 1) or 1), int(ctx.get("moe_dp_size", 1) or 1)
    block = _block_n(ctx) or 1
    if tp % ep:
        return Hit(f"tp-size {tp} must be divisible by ep-size {ep}", about="ep_size", fix="set ep-size: 1")
    inter = int_field(text_config(ctx.model), "moe_intermediate_size")
    moe_tp = tp // ep // moe_dp
    if inter is None or moe_tp < 1:
        return None
    good = [t for t in (1, 2, 4, 8, 16) if inter % t == 0 and (inter // t) % block == 0]
    if inter % moe_tp or (not env_flag(ctx, "SGLANG_SHARED_EXPERT_TP1") and (inter // moe_tp) % block):
        return Hit(
            f"moe_intermediate_size {inter} over moe-tp {moe_tp} (tp {tp} / ep {ep} / moe-dp {moe_dp}) is "
            f"not a whole number of {block}-wide weight blocks; the model runner raises after loading",
            about="tp_size",
            fix=f"set ep-size: {tp} (expert parallelism) or a tp-size whose MoE shard is a multiple of "
            f"{block}" + (f" ({', '.join(map(str, good))})" if good else ""),
        )
    return None


def _aux_ids(ctx: Context) -> list[int]:
    ids = ctx.get("return_aux_hidden_state_layer_ids") or []
    return [i for i in ids if isinstance(i, int)] if isinstance(ids, list) else []


@rule(
    "DDT742",
    "aux hidden-state layer ids name target layers",
    reads=("return_aux_hidden_state_layer_ids",),
    needs=(FACT_MODEL_CONFIG,),
    applies=lambda ctx: bool(ctx.get("enable_return_aux_hidden_states")) and bool(_aux_ids(ctx)),
    reference=f"{COMPONENTS}spec_aux_hidden_state.py:93-128 _check_capture_layer_ids_in_range",
    sglang_enforces=False,
)
def aux_layer_range(ctx: Context):
    """With --enable-return-aux-hidden-states the target runner checks each id of
    --return-aux-hidden-state-layer-ids against the target's layers (num_hidden_layers x num_loops of the
    text config) and raises for one out of range. The resolver checks the ids are non-negative and distinct
    (DDT948), not the model's depth."""
    text = text_config(ctx.model)
    layers = int_field(text, "num_hidden_layers")
    if layers is None:
        return Hit(
            "--return-aux-hidden-state-layer-ids requires the target's num_hidden_layers in its config",
            fix="check the model's config.json",
        )
    layers *= int_field(text, "num_loops") or 1
    out = [i for i in _aux_ids(ctx) if i >= layers]
    if out:
        return Hit(
            f"--return-aux-hidden-state-layer-ids {out} out of range for a target with {layers} layers",
            fix=f"use layer ids below {layers}",
        )
    return None


def _dflash_target_layers(ctx: Context) -> int | None:
    text = text_config(ctx.model)
    layers = int_field(text, "num_hidden_layers")
    return layers * (int_field(text, "num_loops") or 1) if layers else None


@rule(
    "DDT743",
    "the DFlash draft's target layers exist in the target",
    reads=("speculative_draft_model_path",),
    needs=(FACT_MODEL_CONFIG, FACT_DRAFT),
    applies=lambda ctx: ctx.algorithm in DFLASH_FAMILY,
    reference=f"{COMPONENTS}spec_aux_hidden_state.py:201-251 _resolve_dflash_aux_hidden_state; "
    f"{DFLASH_UTILS}:348-381 build_target_layer_ids, :541-583 require_num_layers, resolve_target_layer_ids",
    sglang_enforces=False,
)
def dflash_target_layers(ctx: Context):
    """The target runner reads the DFlash draft's config to pick the target layers whose hidden states feed
    the draft: dflash_config.target_layer_ids (each must be a layer of the target: 0 <= id < the target's
    num_hidden_layers), else ids spread over the target from the draft's num_hidden_layers (the target needs
    at least 4 layers; the draft config must have num_hidden_layers). A draft trained for a deeper target
    (a Qwen3-30B-A3B DFlash, ids up to 45, on the 36-layer Qwen3-8B) passes the resolver and raises here."""

    target = _dflash_target_layers(ctx)
    if target is None:
        return Hit(
            "a DFlash draft needs the target's num_hidden_layers in its config",
            fix="check the target's config.json",
        )
    cfg = dflash_config(ctx)
    ids = cfg.get("target_layer_ids", (ctx.draft.raw if ctx.draft else {}).get("target_layer_ids"))
    about = "speculative_draft_model_path"
    if isinstance(ids, list) and ids:
        out = [i for i in ids if isinstance(i, int) and not 0 <= i < target]
        trained = cfg.get("num_target_layers") or text_config(ctx.draft).get("num_target_layers")
        if out:
            return Hit(
                f"the draft's target_layer_ids {out} are out of range for a target with {target} layers "
                f"(trained for num_target_layers={trained})",
                about=about,
                fix="use the DFlash draft trained for this target",
            )
        return None
    if ids is None:
        if int_field(text_config(ctx.draft), "num_hidden_layers") is None:
            return Hit(
                "DFLASH requires the draft's num_hidden_layers in its config",
                about=about,
                fix="use the draft's own config.json",
            )
        draft_layers = int_field(text_config(ctx.draft), "num_hidden_layers") or 0
        if draft_layers > 1 and target < 4:
            return Hit(
                f"DFlash layer selection requires a target of at least 4 layers; it has {target}",
                about=about,
            )
    return None


@rule(
    "DDT744",
    "n-gram embedding models need chunked prefill",
    reads=("chunked_prefill_size",),
    needs=(FACT_MODEL_CONFIG,),
    applies=lambda ctx: bool(
        text_config(ctx.model).get("use_ngram_embedding")
        or ((ctx.model.raw if ctx.model is not None else {}).get("use_ngram_embedding"))
    ),
    reference=f"{COMPONENTS}ngram_embedding_manager.py:43-58 NgramEmbeddingManager.from_model (assert)",
    sglang_enforces=False,
)
def ngram_embedding(ctx: Context):
    """A model whose config sets use_ngram_embedding sizes its n-gram token table from the chunked prefill
    size; the runner asserts chunked prefill is on (chunked_prefill_size > 0) once the pools exist.
    `--chunked-prefill-size -1` (or 0) passes the resolver and fails here."""
    size = ctx.given.get("chunked_prefill_size")
    if size is not None and size <= 0:
        return Hit(
            f"n-gram embedding requires chunked prefill (--chunked-prefill-size > 0); got {size}",
            about="chunked_prefill_size",
            fix="remove chunked-prefill-size",
            edits={"chunked_prefill_size": None},
        )
    return None
