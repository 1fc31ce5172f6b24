"""Launch-time checks of sglang 0.5.23 srt/layers/attention/attention_registry.py (the backend factories the
model runner calls once per runner, target and draft) and of the backends' constructors they call
(hpc_ops_backend.py, trtllm_mha_backend.py, flashattention_backend.py, dsa_backend.py). SGLang's resolver
accepts every launch these rules reject; the process dies while the scheduler builds its attention backends,
after the weights are loaded. DDT701 (fa3 per GPU generation) is the first of them."""

from __future__ import annotations

from ddtctl.rules.engine import ERROR, FACT_GPU, FACT_MODEL, FACT_MODEL_CONFIG, Context, Hit, rule
from ddtctl.rules.hooks.common import is_mla
from ddtctl.rules.hooks.resolution import backends, is_dsa, resolved_page
from ddtctl.rules.launch.common import (
    ENCODER_DECODER_ARCHITECTURES,
    NON_GDN_HYBRID_ARCHITECTURES,
    REGISTRY,
    SRT,
    architectures,
    attn_tp_size,
    head_dims,
    int_field,
    is_hybrid_gdn,
    is_mla_model,
    kv_heads_per_rank,
    runner_label,
    runners,
    text_config,
    tp_size,
)

HPC = f"{SRT}layers/attention/hpc_ops_backend.py"
TRTLLM_MHA = f"{SRT}layers/attention/trtllm_mha_backend.py"
MLA_ONLY = ("trtllm_mla", "cutedsl_mla")
# hpc_ops_backend.py:65-70
HPC_HEAD_DIM, HPC_GQA, HPC_FP8_HEADS = 128, (4, 8), ((8, 1), (64, 8))
# attention_registry.py:44, 464-471: the backends a hybrid GDN model may run on Blackwell
HYBRID_GDN_SM100 = ("triton", "trtllm_mha", "fa4", "flashinfer")
HYBRID_GDN_SM120 = ("triton", "trtllm_mha", "flashinfer")


def _uses(ctx: Context, *names: str) -> bool:
    return any(set(names) & r.backends for r in runners(ctx))


def _backend_fix(ctx: Context, bad: str, good: str) -> tuple[str, dict]:
    """A fix that replaces a backend the launch names; nothing to edit when SGLang chose it."""
    for dest in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        if ctx.get(dest) == bad:
            return f"set {dest.replace('_', '-')}: {good}", {dest: good}
    return f"set attention-backend: {good}", {}


@rule(
    "DDT710",
    "MLA-only attention backends need an MLA model on every runner",
    reads=("attention_backend", "decode_attention_backend", "speculative_draft_attention_backend"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: _uses(ctx, *MLA_ONLY),
    reference=f"{REGISTRY}:94-124 create_trtllm_mla_backend / create_cutedsl_mla_backend",
    sglang_enforces=False,
)
def mla_only_backends(ctx: Context):
    """trtllm_mla and cutedsl_mla read the compressed MLA latent cache: their factories raise "can only be
    used with MLA models" for a runner whose model is not MLA (DeepSeek V2/V3/V3.2, Kimi K2, GLM-4.x MoE
    Lite...). The resolver accepts the flag on any model, and the draft runner builds the same backend as
    the target unless --speculative-draft-attention-backend names another: an EAGLE3 draft (a Llama layer)
    of a DeepSeek target on trtllm_mla dies there too."""
    for runner in runners(ctx):
        bad = sorted(set(MLA_ONLY) & runner.backends)
        if bad and is_mla_model(runner.model) is False:
            fix = (
                "set speculative-draft-attention-backend: flashinfer"
                if runner.role == "draft"
                else _backend_fix(ctx, bad[0], "flashinfer")[0]
            )
            return Hit(
                f"attention backend {bad[0]} can only be used with MLA models; {runner_label(runner)} is not "
                "MLA, so the model runner fails creating it at startup",
                about=(
                    "speculative_draft_attention_backend" if runner.role == "draft" else "attention_backend"
                ),
                fix=fix,
            )
    return None


@rule(
    "DDT711",
    "trtllm_mha and hpc_ops refuse MLA models",
    reads=("attention_backend", "prefill_attention_backend", "decode_attention_backend"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: _uses(ctx, "trtllm_mha", "hpc_ops"),
    reference=f"{REGISTRY}:277-289 create_trtllm_mha_backend / create_hpc_ops_backend",
    sglang_enforces=False,
)
def mha_only_backends(ctx: Context):
    """trtllm_mha (TRT-LLM's MHA kernels) and hpc_ops are paged MHA backends: their factories raise "can only
    be used with non-MLA models" for an MLA runner. The resolver accepts `--attention-backend trtllm_mha` on
    DeepSeek; the launch dies building the backend."""
    for runner in runners(ctx):
        bad = sorted({"trtllm_mha", "hpc_ops"} & runner.backends)
        if bad and is_mla_model(runner.model):
            fix, edits = _backend_fix(ctx, bad[0], "flashinfer")
            return Hit(
                f"attention backend {bad[0]} can only be used with non-MLA models; {runner_label(runner)} is "
                "MLA",
                fix=f"{fix} (or trtllm_mla on Blackwell)",
                edits=edits,
            )
    return None


@rule(
    "DDT712",
    "trtllm_mla cannot decode with decode context parallelism under speculative decoding",
    reads=("dcp_size", "attention_backend", "decode_attention_backend"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: (ctx.get("dcp_size", 1) or 1) > 1 and ctx.algorithm is not None,
    reference=f"{REGISTRY}:98-107 create_trtllm_mla_backend",
    sglang_enforces=False,
)
def trtllm_mla_dcp(ctx: Context):
    """With --dcp-size > 1 and a speculative algorithm, trtllm_mla as the decode backend raises: it does not
    forward the cyclic DCP metadata to its decode kernel and returns no rank-local LSE for the cross-rank
    merge. SGLang names cutedsl_mla instead."""
    if any(r.decode == "trtllm_mla" for r in runners(ctx) if r.role == "target"):
        return Hit(
            "trtllm_mla cannot serve decode context parallelism (--dcp-size "
            f"{ctx.get('dcp_size')}) with speculative decoding; the model runner raises at startup",
            about="dcp_size",
            fix="set decode-attention-backend: cutedsl_mla",
            edits={"decode_attention_backend": "cutedsl_mla"},
        )
    return None


@rule(
    "DDT713",
    "encoder-decoder models need a cross-attention backend",
    reads=("attention_backend",),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: any(a in ENCODER_DECODER_ARCHITECTURES for a in architectures(ctx.model)),
    reference=f"{REGISTRY}:206-214 create_triton_backend (assert), :290-293 create_hpc_ops_backend",
    sglang_enforces=False,
)
def cross_attention(ctx: Context):
    """Whisper, Mllama and MossVL (model_config.py is_encoder_decoder_model) run cross attention, which the
    triton and hpc_ops backends do not implement: their factories assert / raise at startup. SGLang's
    message names flashinfer."""
    for runner in runners(ctx):
        bad = sorted({"triton", "hpc_ops"} & runner.backends)
        if bad and runner.role == "target":
            fix, edits = _backend_fix(ctx, bad[0], "flashinfer")
            return Hit(
                f"cross attention ({ctx.known_model.architecture}) is not supported by the {bad[0]} "
                "attention backend; the model runner fails creating it",
                fix=fix,
                edits=edits,
            )
    return None


@rule(
    "DDT714",
    "hpc_ops runs on SM90, without speculative decoding, with a bf16 or fp8_e4m3 KV cache",
    reads=("attention_backend", "kv_cache_dtype", "speculative_algorithm"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: _uses(ctx, "hpc_ops"),
    reference=f"{REGISTRY}:294-297; {HPC}:137-162 HPCOpsAttnBackend.__init__",
    sglang_enforces=False,
)
def hpc_ops(ctx: Context):
    """The hpc_ops backend (Tencent HPC-Ops) ships sm90a kernels only, refuses speculative decoding (its
    factory and its constructor both raise) and reads a bfloat16 or fp8_e4m3 KV cache only. The resolver
    accepts all three; the launch dies building the backend. (Its page size is not checked here: SGLang's
    resolver snaps it to the 64 the constructor requires.)"""
    gpu = ctx.known_gpu
    if gpu.sm // 10 != 9:
        fix, edits = _backend_fix(ctx, "hpc_ops", "triton")
        return Hit(
            f"the hpc_ops attention backend requires an SM90 (Hopper) GPU; {gpu.name} is sm{gpu.sm}",
            fix=fix,
            edits=edits,
        )
    if ctx.algorithm is not None:
        return Hit(
            "the hpc_ops attention backend does not support speculative decoding "
            f"({ctx.algorithm}); its factory raises at startup",
            about="speculative_algorithm",
            fix="use attention-backend: fa3 (or drop the speculative algorithm)",
        )
    kv = ctx.get("kv_cache_dtype") or "auto"
    if kv not in ("auto", "bf16", "bfloat16", "fp8_e4m3"):
        return Hit(
            f"the hpc_ops attention backend only supports a bf16 or fp8_e4m3 KV cache, not {kv}",
            about="kv_cache_dtype",
            fix="set kv-cache-dtype: fp8_e4m3 (or remove it)",
            edits={"kv_cache_dtype": "fp8_e4m3"},
        )
    return None


@rule(
    "DDT715",
    "hpc_ops kernels fit the model's head shape per rank",
    reads=("tp_size", "attention_backend", "kv_cache_dtype"),
    needs=(FACT_GPU, FACT_MODEL_CONFIG),
    applies=lambda ctx: _uses(ctx, "hpc_ops") and not is_mla_model(ctx.model),
    reference=f"{HPC}:163-193 HPCOpsAttnBackend.__init__",
    sglang_enforces=False,
)
def hpc_ops_heads(ctx: Context):
    """hpc_ops kernels are specialised: head_dim 128 and 4 or 8 query heads per KV head on each rank; with
    an fp8_e4m3 KV cache the fused QKNorm+RoPE+quant kernel also needs (query heads, KV heads) per rank of
    (8, 1) or (64, 8). SGLang checks the per-rank shape (num_attention_heads // tp) when it builds the
    backend."""
    model = ctx.known_model
    tp = tp_size(ctx)
    heads, kv = model.num_attention_heads, kv_heads_per_rank(model, tp)
    head_dim, _ = head_dims(model)
    if not heads or not kv or not head_dim:
        return None
    q = heads // tp
    if ctx.get("kv_cache_dtype") == "fp8_e4m3" and (q, kv) not in HPC_FP8_HEADS:
        return Hit(
            f"hpc_ops with an fp8_e4m3 KV cache needs (query heads, KV heads) per rank in {HPC_FP8_HEADS}; "
            f"tp-size {tp} gives ({q}, {kv})",
            about="kv_cache_dtype",
            fix="set kv-cache-dtype: bfloat16 (or a tp-size that gives a supported shape)",
        )
    if head_dim != HPC_HEAD_DIM or q // kv not in HPC_GQA:
        return Hit(
            f"hpc_ops needs head_dim {HPC_HEAD_DIM} and {' or '.join(map(str, HPC_GQA))} query heads per KV "
            f"head on each rank; the model has head_dim {head_dim}, {q} / {kv} per rank at tp-size {tp}",
            fix="use attention-backend: fa3",
        )
    return None


@rule(
    "DDT716",
    "hybrid Gated-DeltaNet models on Blackwell run on triton, trtllm_mha, flashinfer (or fa4 on SM100)",
    reads=("attention_backend", "prefill_attention_backend", "decode_attention_backend"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: ctx.gpu is not None and ctx.gpu.sm >= 100 and is_hybrid_gdn(ctx.model),
    reference=f"{REGISTRY}:460-476 attn_backend_wrapper (assert)",
    sglang_enforces=False,
)
def hybrid_gdn_blackwell(ctx: Context):
    """The model runner wraps a hybrid GDN model's (Qwen3-Next, Qwen3.5, Qwen3.6) full-attention backend with
    the GDN linear-attention backend, and on Blackwell it asserts that the prefill and decode backends are
    ones the wrapper supports there: triton, trtllm_mha, fa4 or flashinfer on SM100/SM103, the same without
    fa4 on SM120 (RTX PRO 6000, RTX 5090). SGLang's default (triton) passes; torch_native, flex_attention or
    fa3 chosen by hand pass the resolver and fail here."""
    gpu = ctx.known_gpu
    allowed = HYBRID_GDN_SM120 if gpu.sm == 120 else HYBRID_GDN_SM100
    target = next((r for r in runners(ctx) if r.role == "target"), None)
    if target is None:
        return None
    bad = sorted(b for b in target.backends if b not in allowed)
    if bad:
        fix, edits = _backend_fix(ctx, bad[0], "triton")
        return Hit(
            f"on {gpu.name} (sm{gpu.sm}) a hybrid GDN model runs only on {', '.join(allowed)}; "
            f"prefill={target.prefill}, decode={target.decode}",
            fix=fix,
            edits=edits,
        )
    return None


@rule(
    "DDT717",
    "trtllm_mha with pages of 128+ on SM100 needs GQA, equal QK/V head dims and a power-of-2 page",
    reads=("page_size", "attention_backend", "tp_size"),
    needs=(FACT_GPU, FACT_MODEL_CONFIG),
    applies=lambda ctx: ctx.gpu is not None and ctx.gpu.sm in (100, 103) and _uses(ctx, "trtllm_mha"),
    reference=f"{TRTLLM_MHA}:366-389 TRTLLMHAAttnBackend.__init__",
    sglang_enforces=False,
)
def trtllm_mha_large_pages(ctx: Context):
    """TRT-LLM-GEN (SM100/SM103; SM90 and SM120 use XQA) serves a page size of 128 or more only through its
    dynamic tokens-per-page kernels, which exist for GQA (more than one query head per KV head on each
    attention-TP rank) with equal QK and V head dims and a power-of-2 page. The constructor raises otherwise,
    before CUDA-graph capture would fail on the missing kernel."""

    page = resolved_page(ctx)
    model = ctx.known_model
    attn_tp = attn_tp_size(ctx)
    if page < 128 or not model.num_attention_heads:
        return None
    q, kv = model.num_attention_heads // attn_tp, kv_heads_per_rank(model, attn_tp) or 1
    head, v_head = head_dims(model)
    if q // kv <= 1 or head != v_head or page & (page - 1):
        return Hit(
            f"trtllm_mha with page-size {page} needs GQA (got {q}/{kv} heads per rank), equal QK/V head dims "
            f"(got {head}/{v_head}) and a power-of-2 page",
            about="page_size",
            fix="set page-size: 64",
            edits={"page_size": 64},
        )
    return None


@rule(
    "DDT718",
    "SGLANG_TRTLLM_MHA_DECODE_SEQ_LEN_SPLITS is at least 1",
    reads=("attention_backend",),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: "SGLANG_TRTLLM_MHA_DECODE_SEQ_LEN_SPLITS" in ctx.env and _uses(ctx, "trtllm_mha"),
    reference=f"{TRTLLM_MHA}:409-415 TRTLLMHAAttnBackend.__init__; environ.py:1270",
    sglang_enforces=False,
)
def trtllm_mha_splits(ctx: Context):
    """The trtllm_mha backend reads SGLANG_TRTLLM_MHA_DECODE_SEQ_LEN_SPLITS (an integer, default 1) when it is
    built and raises below 1; a value that is not an integer fails SGLang's environment parser there too."""
    name = "SGLANG_TRTLLM_MHA_DECODE_SEQ_LEN_SPLITS"
    value = str(ctx.env[name]).strip()
    try:
        ok = int(value) >= 1
    except ValueError:
        ok = False
    if not ok:
        return Hit(
            f"{name}={value!r}: the trtllm_mha backend needs an integer of at least 1",
            about=f"env.{name}",
            fix=f"set env {name}: 1 (or remove it)",
        )
    return None


def _local_attention(ctx: Context) -> bool:
    return ctx.model is not None and ctx.model.architecture == "Llama4ForConditionalGeneration"


@rule(
    "DDT719",
    "Llama 4 local attention on fa3 / fa4: a chunk size, and no unified memory",
    reads=("attention_backend", "enable_unified_memory"),
    needs=(FACT_GPU, FACT_MODEL_CONFIG),
    applies=lambda ctx: _local_attention(ctx) and _uses(ctx, "fa3", "fa4"),
    reference=f"{SRT}layers/attention/flashattention_backend.py:380-397 _maybe_init_local_attn_builder",
    sglang_enforces=False,
)
def local_attention(ctx: Context):
    """Llama 4 (model_config.py is_local_attention_model) runs chunked local attention, which the fa3 / fa4
    backend builds from the config's attention_chunk_size (text_config; transformers fills 8192 when the key
    is absent, so only an explicit null fails): it asserts the size is set, and that --enable-unified-memory
    is off (local attention re-translates page tables through the static full-to-SWA map the unified pool
    does not have)."""

    if ctx.get("enable_unified_memory"):
        return Hit(
            "--enable-unified-memory does not support local-attention models (Llama 4) on the fa3/fa4 "
            "backend",
            about="enable_unified_memory",
            fix="remove enable-unified-memory",
            edits={"enable_unified_memory": None},
        )
    text = text_config(ctx.model)
    if "attention_chunk_size" in text and text["attention_chunk_size"] is None:
        return Hit(
            "Llama 4 local attention needs attention_chunk_size in the model config; the fa3/fa4 backend "
            "asserts it at startup",
            fix="use the model's own config.json (or attention-backend: flashinfer)",
        )
    return None


@rule(
    "DDT720",
    "DSA prefill kernels flashmla_sparse_q8 and triton_sparse_mla: GPU, heads and modes",
    reads=("dsa_prefill_backend", "enable_mixed_chunk", "enable_hisparse", "dsa_triton_union", "tp_size"),
    severity=ERROR,
    needs=(FACT_GPU, FACT_MODEL_CONFIG),
    applies=lambda ctx: ctx.get("dsa_prefill_backend") in ("flashmla_sparse_q8", "triton_sparse_mla"),
    reference=f"{SRT}layers/attention/dsa_backend.py:361-406, 421-488, 679-697 "
    "(_validate_triton_sparse_mla_backend, _validate_flashmla_sparse_q8_backend)",
    sglang_enforces=False,
)
def dsa_prefill(ctx: Context):
    """The DSA backend (DeepSeek V3.2 and its relatives) validates its prefill kernel when it is built:
    flashmla_sparse_q8 is SM90-only and runs ragged extend batches only (no --enable-mixed-chunk, no
    HiSparse page translation); triton_sparse_mla needs SM90 or newer, at most 32 query heads per rank
    (128 / attention-TP for DeepSeek), a model with index_kpool 1, and a --dsa-triton-union of 0, 2 or 4
    with query heads x union a power of two in [16, 32]. Only a DSA model builds the backend."""

    if not is_dsa(ctx):
        return None
    gpu, backend = ctx.known_gpu, ctx.get("dsa_prefill_backend")
    if backend == "flashmla_sparse_q8":
        if gpu.sm // 10 != 9:
            return Hit(
                f"--dsa-prefill-backend flashmla_sparse_q8 is SM90-only; {gpu.name} is sm{gpu.sm}",
                about="dsa_prefill_backend",
                fix="set dsa-prefill-backend: flashmla_sparse",
                edits={"dsa_prefill_backend": "flashmla_sparse"},
            )
        for dest, what in (("enable_mixed_chunk", "--enable-mixed-chunk"), ("enable_hisparse", "HiSparse")):
            if ctx.get(dest):
                return Hit(
                    f"--dsa-prefill-backend flashmla_sparse_q8 does not support {what}",
                    about=dest,
                    fix=f"remove {dest.replace('_', '-')} (or use dsa-prefill-backend: flashmla_sparse)",
                )
        return None
    if gpu.sm < 90:
        return Hit(
            f"triton_sparse_mla requires SM90 (Hopper) or newer; {gpu.name} is sm{gpu.sm}",
            about="dsa_prefill_backend",
            fix="set dsa-prefill-backend: flashmla_sparse (or tilelang)",
        )
    heads = (ctx.known_model.num_attention_heads or 0) // attn_tp_size(ctx)
    if heads > 32:
        return Hit(
            f"triton_sparse_mla is validated up to 32 query heads per rank; attention-TP "
            f"{attn_tp_size(ctx)} leaves {heads}",
            fix="raise tp-size (or use dsa-prefill-backend: flashmla_sparse)",
        )
    kpool = text_config(ctx.model).get("index_kpool") or 1
    if isinstance(kpool, int) and kpool > 1:
        return Hit(
            f"triton_sparse_mla does not support index_kpool > 1 (the model's is {kpool})",
            about="dsa_prefill_backend",
            fix="set dsa-prefill-backend: flashmla_sparse",
            edits={"dsa_prefill_backend": "flashmla_sparse"},
        )
    union = ctx.get("dsa_triton_union") or 0
    rows = heads * union
    if union not in (0, 2, 4) or (union and (rows < 16 or rows > 32 or rows & (rows - 1))):
        return Hit(
            f"--dsa-triton-union {union} needs 0, 2 or 4 with query heads per rank x union "
            f"({heads} x {union}) a power of two in [16, 32]",
            about="dsa_triton_union",
            fix="set dsa-triton-union: 0",
            edits={"dsa_triton_union": 0},
        )
    return None


HYBRID_LINEAR = f"{SRT}layers/attention/hybrid_linear_attn_backend.py"
# attention_registry.py:480-521: the mamba2 hybrids that get Mamba2AttnBackend (not the short-conv sidecar)
MAMBA2_ARCHITECTURES = (
    "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM",
    "NemotronH_Omni_Reasoning_V3",
    "FalconH1ForCausalLM",
    "GraniteMoeHybridForCausalLM",
)


@rule(
    "DDT721",
    "multi-item scoring on a hybrid model needs the Gated-DeltaNet backend",
    reads=("enable_mis",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: (
        bool(ctx.get("enable_mis"))
        and ctx.model is not None
        and ctx.model.architecture in NON_GDN_HYBRID_ARCHITECTURES
    ),
    reference=f"{HYBRID_LINEAR}:59-81 MambaAttnBackendBase.validate_mis_support; "
    f"{SRT}layers/attention/linear/gdn_backend.py:515-519",
    sglang_enforces=False,
)
def mis_hybrid(ctx: Context):
    """A hybrid model's linear-attention backend is built with the runner's attention backends, and each
    refuses --enable-mis unless it declares multi-item scoring support: only the Gated-DeltaNet backend
    (Qwen3-Next, Qwen3.5 / 3.6) does. Mamba2 (Nemotron-H, Falcon-H1, Granite hybrids), KDA (Kimi Linear)
    and short-conv (LFM2, ZAYA) hybrids raise at startup (the rule names those; a hybrid it cannot place is
    not checked)."""
    return Hit(
        f"--enable-mis: the linear-attention backend of {ctx.known_model.architecture} does not support "
        "multi-item scoring (only the Gated-DeltaNet one does); it raises at startup",
        fix="remove enable-mis",
        edits={"enable_mis": None},
    )


@rule(
    "DDT722",
    "a Mamba2 hybrid's extra-buffer track interval covers its chunk",
    reads=("mamba_track_interval", "mamba_radix_cache_strategy"),
    needs=(FACT_MODEL_CONFIG,),
    applies=lambda ctx: (
        ctx.model is not None
        and ctx.model.architecture in MAMBA2_ARCHITECTURES
        and ctx.get("mamba_radix_cache_strategy") in ("extra_buffer", "extra_buffer_lazy")
        and not ctx.get("disable_radix_cache")
    ),
    reference=f"{HYBRID_LINEAR}:1066-1083 Mamba2AttnBackend.__init__ (asserts); :137-142 mamba_chunk_size",
    sglang_enforces=False,
)
def mamba2_track_interval(ctx: Context):
    """With an extra-buffer mamba strategy the Mamba2 backend (Nemotron-H, Falcon-H1, Granite hybrids)
    checkpoints states every --mamba-track-interval tokens from its chunked scan, and asserts the interval is
    at least the model's mamba_chunk_size (the text config's; not checked when the config.json leaves it to
    the config class's default)."""

    chunk = int_field(text_config(ctx.model), "mamba_chunk_size")
    if not chunk:
        return None
    interval = int(ctx.get("mamba_track_interval") or 0)
    if interval < chunk:
        return Hit(
            f"--mamba-track-interval {interval} is below the model's mamba_chunk_size {chunk}; the Mamba2 "
            "backend asserts it at startup",
            about="mamba_track_interval",
            fix=f"set mamba-track-interval: {max(chunk, 256)}",
            edits={"mamba_track_interval": max(chunk, 256)},
        )
    return None


@rule(
    "DDT723",
    "the dsa attention backend needs a DeepSeek DSA model",
    reads=("attention_backend", "prefill_attention_backend", "decode_attention_backend"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: _uses(ctx, "dsa", "nsa"),
    reference=f"{REGISTRY}:150-174 create_dsa_backend; {SRT}layers/attention/dsa_backend.py:526-528 "
    "DeepseekSparseAttnBackend.__init__ (assert)",
    sglang_enforces=False,
)
def dsa_model(ctx: Context):
    """The DSA (DeepSeek sparse attention) backend, also spelled nsa, reads the model's indexer: its
    constructor asserts the model is a DeepSeek DSA model (a DSA architecture whose config sets index_topk:
    configs/model_config.py is_deepseek_dsa). The resolver accepts `--attention-backend dsa` on any model and
    the launch dies building the backend; for a DSA model SGLang picks it by itself."""

    if is_dsa(ctx):
        return None
    fix, edits = _backend_fix(ctx, "dsa", "flashinfer")
    if not edits:
        fix, edits = _backend_fix(ctx, "nsa", "flashinfer")
    return Hit(
        f"the dsa attention backend only supports DeepSeek DSA models; {ctx.known_model.architecture} is not "
        "one (no index_topk), and the backend asserts at startup",
        fix=fix,
        edits=edits,
    )


def _fa3_backends(ctx: Context) -> set:
    """The backends the model runner creates (prefill / decode as resolved; fa3 + fp8_e5m2 becomes triton)."""

    return set(backends(ctx))


@rule(
    "DDT701",
    "FlashAttention-3 runs on SM80 / SM90 only",
    reads=("attention_backend",),
    needs=(FACT_GPU,),
    applies=lambda ctx: "fa3" in _fa3_backends(ctx),
    reference="sglang 0.5.23 srt/layers/attention/attention_registry.py:238-249 "
    "create_flashattention_v3_backend "
    "(assert at model load; the resolver accepts it)",
    sglang_enforces=False,
    evidence="create_flashattention_v3_backend asserts SM80..SM90 when the model runner builds the backend "
    "(tests/fidelity/cases.yaml q3-fa3-on-b200, stricter_by_design)",
)
def backend_generation(ctx: Context):
    """fa3 (FlashAttention-3, as the resolved prefill or decode backend) has kernels for SM80 (not for MLA
    models) and SM90 only: SGLang's resolver accepts it on Blackwell, and the model runner then fails creating
    the backend ('FlashAttention v3 Backend requires SM>=80 and SM<=90'), so ddtctl is stricter than the
    resolver here. The trtllm_mha generations are DDT937."""
    gpu = ctx.known_gpu
    sm = gpu.sm

    if not (sm == 90 or (80 <= sm < 90 and not is_mla(ctx))):
        return Hit(
            f"attention backend fa3 has no kernels for {gpu.name} (sm{sm}); the model runner fails "
            "creating it at startup",
            fix="use attention-backend: triton or flashinfer",
            edits={"attention_backend": None} if ctx.get("attention_backend") == "fa3" else {},
        )
