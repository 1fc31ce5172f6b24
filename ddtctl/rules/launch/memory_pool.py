"""Launch-time checks of sglang 0.5.23's memory-pool initialisation:
mem_cache/kv_cache_configurator.py (KVCacheConfigurator.configure, the profiled KV budget, the hybrid mamba
state cache), mem_cache/memory_pool.py (the pools' constructors) and managers/tp_worker.py
alloc_memory_pool's validation. They run after the weights are loaded, once per runner; SGLang's resolver
accepts every launch these rules reject."""

from __future__ import annotations

from ddtctl.argv_parser import human_readable_int
from ddtctl.rules.engine import FACT_GPU, FACT_MODEL, FACT_MODEL_CONFIG, WARNING, Context, Hit, rule
from ddtctl.rules.hooks.common import attn_dp_size
from ddtctl.rules.launch.common import SRT, architectures, env_flag, text_config, tp_size

CONFIGURATOR = f"{SRT}mem_cache/kv_cache_configurator.py"
POOL = f"{SRT}mem_cache/memory_pool.py"
GIB = 1 << 30
# kv_cache_configurator.py:227-229
MAMBA_RATIO, MAMBA_DROP_ON_SKIP, MAMBA_NO_BUFFER_ON_SKIP = 3, 1, 1


def _pp(ctx: Context) -> int:
    return int(ctx.get("pp_size", 1) or 1)


def _fraction_bound(ctx: Context) -> tuple[float, str]:
    """The largest mem-fraction-static the launch can run with: the given one, else the ceiling of
    memory_hook.py:281-327's default, (gpu_mem - reserved) / gpu_mem with reserved >= 1536 MiB + tp x pp / 8
    GiB."""
    given = ctx.given.get("mem_fraction_static")
    if given is not None:
        return float(given), f"--mem-fraction-static {given:g}"
    gpu_mib = ctx.known_gpu.memory_gb * 1024
    reserved = 1536 + tp_size(ctx) * _pp(ctx) / 8 * 1024
    return (gpu_mib - reserved) / gpu_mib, "the largest mem-fraction-static SGLang derives for this GPU"


def _weights_apply(ctx: Context) -> bool:
    """The checkpoint's size is what the GPU holds: no quantization on load, no offload, real weights."""
    return (
        ctx.model is not None
        and bool(ctx.model.weights_bytes)
        and ctx.gpu is not None
        and bool(ctx.gpu.memory_gb)
        and ctx.given.get("quantization") is None
        and not (ctx.get("cpu_offload_gb") or 0) > 0
        and not (ctx.get("offload_group_size") or 0) > 0
        and ctx.get("load_format") != "dummy"
    )


@rule(
    "DDT730",
    "the checkpoint's weights fit the static memory budget",
    reads=("mem_fraction_static", "tp_size", "pp_size"),
    needs=(FACT_GPU, FACT_MODEL_CONFIG),
    applies=_weights_apply,
    reference=f"{CONFIGURATOR}:2990-3061 KVCacheConfigurator._profile_available_bytes",
    sglang_enforces=False,
)
def weights_fit(ctx: Context):
    """After loading the weights SGLang sizes the KV cache from the free memory minus the non-static slack,
    pre-load memory x (1 - mem-fraction-static); when the weights (target and draft: both are resident) take
    the whole static share nothing is left and it raises "Loaded weights leave no GPU memory for the KV
    cache". The free memory before loading is at most the GPU's, so the launch cannot start when the weights
    per GPU, checkpoint bytes / (tp x pp) (the checkpoint's *.safetensors, read where the model directory is
    local; the draft's divided likewise), reach GPU memory x mem-fraction-static (the given one, else the
    largest SGLang derives: (memory - 1.5 GiB - tp x pp / 8 GiB) / memory). Not checked with --quantization
    (weights change size on load), CPU offload or --load-format dummy; a warning, not an error, when the
    checkpoint may shrink on load (stored in float32, or served with another --dtype)."""
    gpu = ctx.known_gpu
    shards = tp_size(ctx) * _pp(ctx)
    weights = (ctx.known_model.weights_bytes or 0) / shards
    draft = ctx.draft.weights_bytes if ctx.draft is not None and ctx.draft.weights_bytes else 0
    weights += draft / shards
    fraction, how = _fraction_bound(ctx)
    budget = gpu.memory_gb * GIB * fraction
    if weights >= budget:
        need = min(0.99, weights / (gpu.memory_gb * GIB) + 0.05)
        stored = str((ctx.known_model.raw or {}).get("torch_dtype") or "")
        narrowed = stored in ("float32", "float") or ctx.given.get("dtype") not in (None, "auto", stored)
        return Hit(
            f"the weights take {weights / GIB:,.1f} GiB per GPU (tp x pp = {shards}"
            f"{', with the draft' if draft else ''}), at least the static budget of {gpu.name}: "
            f"{gpu.memory_gb} GiB x {fraction:.3f} ({how}) = {budget / GIB:,.1f} GiB; SGLang raises "
            "'Loaded weights leave no GPU memory for the KV cache'",
            about="mem_fraction_static" if ctx.is_set("mem_fraction_static") else "tp_size",
            fix=f"raise tp-size (or mem-fraction-static above {need:.2f})",
            # a checkpoint stored wider than it is served (float32 -> --dtype bfloat16) shrinks on load
            severity=WARNING if narrowed else None,
        )
    return None


def _mamba_ratio_floor(ctx: Context) -> tuple[int, str]:
    """The fewest state slots per request kv_cache_configurator.py:3063-3087 _calculate_mamba_ratio gives:
    1 without the radix cache, else 3 (2 under SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK) plus the extra-buffer
    tracking slots (allocation_sizing.py:11-19: 2 with the overlap scheduler, 1 without or lazy)."""
    if ctx.get("disable_radix_cache"):
        return 1, "without the radix cache"
    skip = env_flag(ctx, "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK")
    base = MAMBA_RATIO - (MAMBA_DROP_ON_SKIP if skip else 0)
    strategy = ctx.get("mamba_radix_cache_strategy") or "auto"
    if strategy == "extra_buffer":
        extra = 1 if ctx.get("disable_overlap_schedule") else 2
    elif strategy == "extra_buffer_lazy":
        extra = 1
    elif strategy == "no_buffer" and skip:
        extra = MAMBA_NO_BUFFER_ON_SKIP
    else:  # auto: SGLang may pick no_buffer
        extra = 0
    return base + extra, f"{base + extra} state slots per request ({strategy} strategy)"


@rule(
    "DDT731",
    "--max-mamba-cache-size leaves a state slot for one request per DP rank",
    reads=("max_mamba_cache_size",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: ctx.is_set("max_mamba_cache_size") and bool(ctx.is_hybrid),
    reference=f"{CONFIGURATOR}:3132-3160 resolve_max_num_reqs, :3289-3400 _handle_max_mamba_cache",
    sglang_enforces=False,
)
def mamba_cache_size(ctx: Context):
    """On a hybrid (mamba / linear-attention) model an explicit --max-mamba-cache-size is split over the
    attention-DP ranks; SGLang raises when that leaves no state cache (max_mamba_cache_size <= 0: "Not enough
    GPU memory for hybrid state cache"), or fewer slots than one request needs (max_mamba_cache_size //
    slots per request == 0: "state cache is too small to serve any requests"). The slots per request are
    at least 1 without the radix cache, else at least 3 (2 under SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK), plus 1
    or 2 tracking slots for an extra-buffer strategy."""

    size = int(ctx.get("max_mamba_cache_size") or 0)
    dp = max(1, attn_dp_size(ctx))
    per_rank = size // dp
    ratio, how = _mamba_ratio_floor(ctx)
    if per_rank < ratio:
        return Hit(
            f"--max-mamba-cache-size {size} gives {per_rank} state slots per attention-DP rank, fewer than "
            f"the {how}; SGLang's hybrid state cache cannot serve one request",
            fix=f"set max-mamba-cache-size: {ratio * dp * 8} (or remove it: SGLang sizes it from memory)",
            edits={"max_mamba_cache_size": ratio * dp * 8},
            unsafe=True,
        )
    return None


@rule(
    "DDT732",
    "the lazy extra-buffer mamba strategy needs the overlap scheduler",
    reads=("mamba_radix_cache_strategy", "disable_overlap_schedule"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        ctx.get("mamba_radix_cache_strategy") == "extra_buffer_lazy"
        and bool(ctx.get("disable_overlap_schedule"))
        and not ctx.get("disable_radix_cache")
        and bool(ctx.is_hybrid)
    ),
    reference=f"{CONFIGURATOR}:3063-3078 _calculate_mamba_ratio (assert); arg_groups/overrides.py:269-274",
    sglang_enforces=False,
)
def lazy_extra_buffer(ctx: Context):
    """`--mamba-radix-cache-strategy extra_buffer_lazy` defers the second tracking slot to the overlap
    scheduler; with --disable-overlap-schedule the resolver accepts it and the KV-cache configurator asserts
    "Lazy extra buffer requires overlap schedule" when it sizes the hybrid state cache (radix cache on)."""
    return Hit(
        "mamba-radix-cache-strategy extra_buffer_lazy requires the overlap scheduler; "
        "--disable-overlap-schedule makes the KV-cache configurator assert at startup",
        fix="set mamba-radix-cache-strategy: extra_buffer",
        edits={"mamba_radix_cache_strategy": "extra_buffer"},
    )


# configs/model_config.py:2651-2697 is_hybrid_swa_model (its allowlist, with SWA_SINK_ARCHS and
# MIMO_V2_MODEL_ARCHS of :74-96)
HYBRID_SWA_ARCHITECTURES = frozenset(
    {
        "BeamForCausalLM",
        "Llama4ForConditionalGeneration",
        "DeepseekV4ForCausalLM",
        "DeepseekV4ForCausalLMNextN",
        "DeepseekV4ForCausalLMDSpark",
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
        "IQuestQ1MTP",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Step3p7ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "LagunaForCausalLM",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        "UnlimitedOCRForCausalLM",
    }
)
DEEPSEEK_V4 = ("DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark")


def _unified_pool_model(ctx: Context) -> bool:
    """Whether the unified pool has a branch for the model: a mamba hybrid, or a hybrid-SWA model (the
    allowlist, or a config that opts in with is_hybrid_swa) other than DeepSeek-V4; an architecture ddtctl
    cannot classify counts as one (not checked)."""

    archs = architectures(ctx.model)
    if any(a in DEEPSEEK_V4 for a in archs):
        return False
    if ctx.is_hybrid or text_config(ctx.model).get("is_hybrid_swa"):
        return True
    return any(a in HYBRID_SWA_ARCHITECTURES for a in archs) and not ctx.get("disable_hybrid_swa_memory")


def _known_transformer(ctx: Context) -> bool:
    """A model ddtctl can classify: its architecture is one of the fixtures' families (Qwen, Llama,
    DeepSeek V2/V3, Mistral...), none of them hybrid."""
    arch = ctx.model.architecture if ctx.model is not None else None
    return bool(arch) and ctx.is_hybrid is False


@rule(
    "DDT733",
    "--enable-unified-memory needs a hybrid Mamba or hybrid sliding-window model",
    reads=("enable_unified_memory",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: bool(ctx.get("enable_unified_memory")) and _known_transformer(ctx),
    reference=f"{CONFIGURATOR}:596-642 KVCacheConfigurator._init_pools",
    sglang_enforces=False,
)
def unified_memory_model(ctx: Context):
    """The unified memory pool replaces the hybrid pools only (hybrid Mamba / linear attention, and hybrid
    sliding-window models: configs/model_config.py is_hybrid_swa_model), DeepSeek-V4 excluded: for any other
    model (a dense or MoE transformer) the configurator raises rather than leave the flag a no-op, after the
    weights are loaded. The resolver accepts the flag on any model."""
    if _unified_pool_model(ctx):
        return None
    return Hit(
        f"--enable-unified-memory only supports hybrid Mamba and hybrid sliding-window models; "
        f"{ctx.known_model.architecture} is neither, and the KV-cache configurator raises at startup",
        fix="remove enable-unified-memory",
        edits={"enable_unified_memory": None},
    )


@rule(
    "DDT734",
    "--enable-linear-replayssm-spec with DFLASH or DSPARK needs a KDA model",
    reads=("enable_linear_replayssm_spec", "speculative_algorithm"),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        bool(ctx.get("enable_linear_replayssm_spec"))
        and str(ctx.given.get("speculative_algorithm") or "").upper() in ("DFLASH", "DSPARK")
        and bool(ctx.is_hybrid)
    ),
    reference=f"{CONFIGURATOR}:1700-1717 KVCacheConfigurator._build_hybrid_req_pool",
    sglang_enforces=False,
)
def replayssm_kda(ctx: Context):
    """DSPARK / DFLASH commit the replay-SSM state through the KDA backend's fold; on any other hybrid model
    (Gated-DeltaNet, Mamba2) the hybrid request pool raises when it is built."""
    if ctx.known_model.architecture in ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration"):
        return None
    return Hit(
        f"--enable-linear-replayssm-spec with {ctx.given.get('speculative_algorithm')} requires a KDA model "
        f"(Kimi Linear); {ctx.known_model.architecture} is not",
        fix="remove enable-linear-replayssm-spec",
        edits={"enable_linear_replayssm_spec": None},
    )


def _tokens(value) -> int:
    """A token count as SGLang's human_readable_int reads it (4096, 4k, 4Ki)."""
    return value if isinstance(value, int) else human_readable_int(str(value))


@rule(
    "DDT735",
    "the context length and token budget leave room for one request",
    reads=("context_length", "max_total_tokens"),
    applies=lambda ctx: ctx.is_set("context_length") or ctx.is_set("max_total_tokens"),
    reference=f"{SRT}managers/tp_worker.py:419-425 TpModelWorker.alloc_memory_pool (asserts); "
    f"{CONFIGURATOR}:3089-3130 _apply_token_constraints, resolve_max_num_reqs",
    sglang_enforces=False,
)
def request_room(ctx: Context):
    """After the pools are built the worker asserts a request can run: max-running-requests > 0 (the token
    budget // 2, capped by --max-total-tokens) and a longest request of min(context length, token budget)
    - 1 > 0 tokens. --context-length 1 or --max-total-tokens below 2 pass the resolver and fail those
    asserts."""
    if ctx.is_set("context_length") and _tokens(ctx.get("context_length")) <= 1:
        return Hit(
            f"--context-length {ctx.get('context_length')} leaves no room for a request: the worker asserts "
            "'Memory pool size is too small'",
            about="context_length",
            fix="remove context-length (or set it above 1)",
            edits={"context_length": None},
        )
    if ctx.is_set("max_total_tokens") and _tokens(ctx.get("max_total_tokens")) < 2:
        return Hit(
            f"--max-total-tokens {ctx.get('max_total_tokens')} leaves max-running-requests at 0 (the token "
            "budget // 2): the worker asserts 'max_running_request is zero'",
            about="max_total_tokens",
            fix="remove max-total-tokens",
            edits={"max_total_tokens": None},
        )
    return None
