"""Checks of SGLang 0.5.23's resolution hooks (arg_groups/*) that are not about one speculative algorithm: parallel
layouts, KV-cache dtypes x GPU generation x attention backend, LoRA, MoE all-to-all, mutually exclusive features.

Each rule was derived from a raise / assert site of the pinned wheel (found by tools/raise_sites.py, mapped in
ddtctl/rules/coverage.yaml) and cites its file:line. `resolved_attention` models SGLang's attention-backend
auto-selection (model_override_base.py:277 get_default_attn_backend; overrides.py:1127, 1156) where a check reads the
resolved backend.
"""

from __future__ import annotations

from ddtctl.rules.engine import EAGLE_FAMILY, FACT_GPU, FACT_MODEL, INFO, Context, Hit, rule

AG = "sglang 0.5.23 srt/arg_groups/"

# Architectures whose attention is MLA (model_config.py use_mla_backend).
MLA_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV2ForCausalLM",
                     "KimiK2ForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM")


def attn_dp_size(ctx: Context) -> int:
    """Attention-DP groups as SGLang resolves them: `--dp-size N --enable-dp-attention` becomes `--attn-dp-size N`
    (parallel_hook.py:49-61 _handle_deprecated_dp_attention)."""
    attn = ctx.get("attn_dp_size", 1) or 1
    if attn == 1 and ctx.get("enable_dp_attention"):
        attn = ctx.get("dp_size", 1) or 1
    return attn


def is_mla(ctx: Context) -> bool:
    return ctx.model is not None and ctx.model.architecture in MLA_ARCHITECTURES


def resolved_attention(ctx: Context) -> str | None:
    """The attention backend SGLang resolves, when ddtctl can tell (None: unknown, e.g. no GPU declared).

    overrides.py:1127 _attention_backend_default: prefill == decode backend wins; else the explicit
    --attention-backend; else model_override_base.py:277 get_default_attn_backend: MHA on SM90 -> fa3 unless an
    EAGLE topk > 1; MHA on SM100 -> trtllm_mha for plain / topk-1 launches whose topk is known (hybrid GDN targets:
    only with a speculative algorithm), else flashinfer (triton for hybrid targets); SM120 -> flashinfer. MLA: SM90
    fa3, SM100 trtllm_mla (DeepSeek's model override), SM120 triton."""
    prefill, decode = ctx.get("prefill_attention_backend"), ctx.get("decode_attention_backend")
    if prefill is not None and prefill == decode:
        return prefill
    if ctx.get("attention_backend") is not None:
        return ctx.get("attention_backend")
    if ctx.gpu is None or ctx.model is None or not ctx.model.known:
        return None
    sm = ctx.gpu.sm
    algo = ctx.algorithm
    topk = ctx.given.get("speculative_eagle_topk")
    if is_mla(ctx):
        # DeepSeek's model override picks trtllm_mla on SM100 only when no backend is given at all.
        explicit = prefill is not None or decode is not None
        return {90: "fa3", 100: "flashinfer" if explicit else "trtllm_mla",
                103: "flashinfer" if explicit else "trtllm_mla"}.get(sm, "triton")
    tree = algo in EAGLE_FAMILY + ("EAGLE3",) and topk is not None and topk > 1
    if sm == 90:
        return "flashinfer" if tree else "fa3"
    if sm in (100, 103):
        topk_known = algo is None or topk is not None or algo in ("DFLASH", "DDTREE", "DSPARK")
        if not tree and topk_known and not (ctx.is_hybrid and algo is None and prefill is None and decode is None):
            return "trtllm_mha"
        # hybrid GDN targets get triton from their model override only when no backend is given at all
        hybrid_default = ctx.is_hybrid and ctx.get("prefill_attention_backend") is None and \
            ctx.get("decode_attention_backend") is None
        return "triton" if hybrid_default else "flashinfer"
    return "flashinfer"


def resolved_page(ctx: Context, backend: str | None = None) -> int:
    """The page size SGLang runs with: the given one, or what the backend forces (overrides.py:1156-1200
    _mla_backend_page_constraints; overrides.py:1273-1296 _fa4_page_constraint)."""
    page = ctx.get("page_size") or 1
    backend = backend if backend is not None else resolved_attention(ctx)
    involved = {backend, ctx.get("decode_attention_backend"), ctx.get("prefill_attention_backend")}
    if "flashmla" in (backend, ctx.get("decode_attention_backend")):
        page = 64
    if "trtllm_mla" in (backend, ctx.get("decode_attention_backend")) and page not in (32, 64):
        page = 64
    if "cutedsl_mla" in involved and page not in (32, 64):
        page = 64
    if ("trtllm_mha" in involved or ctx.get("speculative_draft_attention_backend") == "trtllm_mha") and \
            page not in (16, 32, 64, 128):
        page = 64
    if "hpc_ops" in involved:
        page = 64
    if "fa4" in involved and not is_mla(ctx) and ctx.gpu is not None and ctx.gpu.sm in (100, 103) and \
            (ctx.given.get("speculative_eagle_topk") or 0) <= 1:
        page = 128
    return page


def backends(ctx: Context) -> tuple[str | None, str | None]:
    """(prefill, decode) backends as attention_backends_of (model_override_base.py:138) reads them."""
    main = resolved_attention(ctx)
    return (ctx.get("prefill_attention_backend") or main, ctx.get("decode_attention_backend") or main)


# ---------------------------------------------------------------- parallel layouts

@rule("DDT901", "moe-dense-tp-size is 1 or tp-size", reads=("moe_dense_tp_size",),
      applies=lambda ctx: ctx.is_set("moe_dense_tp_size"), reference=f"{AG}validation_hook.py:207-211 (assert)")
def moe_dense_tp(ctx: Context):
    """`--moe-dense-tp-size` only supports None, 1 or the tp size."""
    value, tp = ctx.get("moe_dense_tp_size"), ctx.get("tp_size", 1)
    if value not in (1, tp):
        return Hit(f"--moe-dense-tp-size {value} must be 1 or --tp-size ({tp})", fix="set moe-dense-tp-size: 1",
                   edits={"moe_dense_tp_size": 1})


@rule("DDT902", "two-batch overlap without an EP all-to-all backend needs attention DP",
      reads=("enable_two_batch_overlap",), applies=lambda ctx: bool(ctx.get("enable_two_batch_overlap")),
      reference=f"{AG}validation_hook.py:763-771 check_two_batch_overlap")
def two_batch_overlap(ctx: Context):
    """`--enable-two-batch-overlap` with `--moe-a2a-backend none` is only valid on the DP-attention TP-MoE path."""
    if (ctx.get("moe_a2a_backend") or "none") == "none" and attn_dp_size(ctx) <= 1:
        return Hit("--enable-two-batch-overlap without an EP all-to-all backend (--moe-a2a-backend none) requires "
                   "attention DP (--attn-dp-size > 1)", fix="remove enable-two-batch-overlap",
                   edits={"enable_two_batch_overlap": None})


@rule("DDT903", "attention context parallelism divides tp", reads=("attn_cp_size", "tp_size"),
      applies=lambda ctx: (ctx.get("attn_cp_size", 1) or 1) > 1,
      reference=f"{AG}parallel_hook.py:157-163 handle_context_parallelism (assert)")
def attn_cp_divides(ctx: Context):
    """`tp_size % attn_cp_size == 0` and `tp_size % (attn_dp_size * attn_cp_size) == 0`."""
    tp, cp, dp = ctx.get("tp_size", 1), ctx.get("attn_cp_size"), attn_dp_size(ctx)
    if tp % cp:
        return Hit(f"--tp-size {tp} must be divisible by --attn-cp-size {cp}", fix=f"set tp-size to a multiple of {cp}")
    if tp % (dp * cp):
        return Hit(f"--tp-size {tp} must be divisible by attn-dp-size x attn-cp-size ({dp} x {cp})",
                   fix="make tp-size a multiple of attn-dp-size x attn-cp-size")


@rule("DDT904", "DP / all-to-all LM heads need attention DP", reads=("enable_dp_lm_head",),
      applies=lambda ctx: bool(ctx.get("enable_dp_lm_head")) or bool(ctx.given.get("enable_tp_lm_head_all_to_all")),
      reference="sglang 0.5.23 srt/arg_groups/overrides.py:1366-1370 _data_parallelism_defaults (override); "
                "overrides.py:1422-1433 _dp_lm_head_validation (assert)")
def dp_lm_head(ctx: Context):
    """`--enable-dp-lm-head` and `--enable-tp-lm-head-all-to-all` require attention DP, and exclude each other.
    With a single DP rank in all (dp-size x attn-dp-size = 1) SGLang switches `--enable-dp-lm-head` off itself: an
    override, reported as info."""
    if ctx.get("enable_dp_lm_head") and (ctx.get("dp_size", 1) or 1) * attn_dp_size(ctx) == 1:
        return Hit("--enable-dp-lm-head has no effect with a single DP rank: SGLang sets enable_dp_lm_head=False",
                   severity=INFO, fix="remove enable-dp-lm-head", edits={"enable_dp_lm_head": None})
    if attn_dp_size(ctx) <= 1:
        dest = "enable_dp_lm_head" if ctx.get("enable_dp_lm_head") else "enable_tp_lm_head_all_to_all"
        return Hit(f"--{dest.replace('_', '-')} requires attention DP (--attn-dp-size > 1, or --dp-size with "
                   "--enable-dp-attention)", about=dest, fix=f"remove {dest.replace('_', '-')}", edits={dest: None})
    if ctx.get("enable_dp_lm_head") and ctx.given.get("enable_tp_lm_head_all_to_all"):
        return Hit("--enable-tp-lm-head-all-to-all is incompatible with --enable-dp-lm-head",
                   about="enable_tp_lm_head_all_to_all")


@rule("DDT905", "MoE all-to-all backends that need attention DP", reads=("moe_a2a_backend",),
      applies=lambda ctx: ctx.get("moe_a2a_backend") in ("pplx", "flashinfer"),
      reference=f"{AG}moe_hook.py:483 (flashinfer), moe_hook.py:592 (pplx) handle_a2a_moe (assert)")
def a2a_needs_dp(ctx: Context):
    """`--moe-a2a-backend flashinfer` needs --attn-dp-size equal to --tp-size; `pplx` needs attention DP with at
    least 2 groups."""
    backend, dp, tp = ctx.get("moe_a2a_backend"), attn_dp_size(ctx), ctx.get("tp_size", 1)
    if backend == "pplx" and dp < 2:
        return Hit("--moe-a2a-backend pplx requires attention DP with at least 2 groups (--attn-dp-size >= 2)")
    if backend == "flashinfer" and dp != tp:
        return Hit(f"--moe-a2a-backend flashinfer requires --attn-dp-size equal to --tp-size ({dp} != {tp})")


@rule("DDT906", "decode context parallelism options need --dcp-size > 1", reads=("dcp_replicate_q_proj",),
      applies=lambda ctx: bool(ctx.given.get("dcp_replicate_q_proj")) and (ctx.get("dcp_size", 1) or 1) <= 1,
      reference=f"{AG}parallel_hook.py:266-267 handle_decode_context_parallelism")
def dcp(ctx: Context):
    """`--dcp-replicate-q-proj` requires `--dcp-size > 1`."""
    return Hit("--dcp-replicate-q-proj requires --dcp-size > 1", fix="remove dcp-replicate-q-proj",
               edits={"dcp_replicate_q_proj": None})


@rule("DDT907", "elastic EP options need --elastic-ep-backend",
      reads=("max_ep_size", "ep_join_mode", "elastic_ep_initial_size"),
      applies=lambda ctx: ctx.is_set("max_ep_size") or ctx.is_set("ep_join_mode") or ctx.is_set("elastic_ep_initial_size"),
      reference=f"{AG}parallel_hook.py:546-548, 566-570, 572-581 handle_elastic_ep (assert)")
def elastic_ep(ctx: Context):
    """`--max-ep-size` and `--elastic-ep-join-mode` require `--elastic-ep-backend`; `--max-ep-size` is positive;
    `--elastic-ep-initial-size` needs an elastic deployment with --max-ep-size above --tp-size."""
    backend = ctx.given.get("elastic_ep_backend")
    for dest, flag in (("ep_join_mode", "elastic-ep-join-mode"), ("max_ep_size", "max-ep-size")):
        if ctx.is_set(dest) and backend is None:
            return Hit(f"--{flag} requires --elastic-ep-backend to be set", about=dest,
                       fix=f"set elastic-ep-backend or remove {flag}")
    max_ep = ctx.given.get("max_ep_size")
    if max_ep is not None and max_ep <= 0:
        return Hit(f"--max-ep-size must be positive, got {max_ep}", about="max_ep_size")
    if ctx.is_set("elastic_ep_initial_size") and not (backend is not None and max_ep is not None
                                                      and max_ep > ctx.get("tp_size", 1)):
        return Hit("--elastic-ep-initial-size is only valid with --elastic-ep-backend and --max-ep-size larger than "
                   "--tp-size", about="elastic_ep_initial_size", fix="remove elastic-ep-initial-size",
                   edits={"elastic_ep_initial_size": None})


@rule("DDT908", "layernorm sequence parallelism needs tp > 1", reads=("enable_layernorm_sp",),
      applies=lambda ctx: bool(ctx.get("enable_layernorm_sp")) or bool(ctx.get("enable_megamoe_for_layernorm_sp")),
      reference=f"{AG}layernorm_sp_hook.py:24-26, 135-137 handle_layernorm_sp")
def layernorm_sp(ctx: Context):
    """`--enable-megamoe-for-layernorm-sp` requires `--enable-layernorm-sp`, which requires tp_size > 1."""
    if ctx.get("enable_megamoe_for_layernorm_sp") and not ctx.get("enable_layernorm_sp"):
        return Hit("--enable-megamoe-for-layernorm-sp requires --enable-layernorm-sp",
                   about="enable_megamoe_for_layernorm_sp")
    if ctx.get("enable_layernorm_sp") and (ctx.get("tp_size", 1) or 1) <= 1:
        return Hit("--enable-layernorm-sp requires --tp-size > 1", fix="remove enable-layernorm-sp",
                   edits={"enable_layernorm_sp": None})


@rule("DDT909", "pipeline micro-batch size is positive", reads=("pp_max_micro_batch_size",),
      applies=lambda ctx: ctx.is_set("pp_max_micro_batch_size") and ctx.get("pp_max_micro_batch_size") <= 0,
      reference=f"{AG}validation_hook.py:182-185 (assert)")
def pp_micro_batch(ctx: Context):
    """`--pp-max-micro-batch-size` must be a positive integer (or unset for auto)."""
    return Hit(f"--pp-max-micro-batch-size must be positive, got {ctx.get('pp_max_micro_batch_size')}",
               edits={"pp_max_micro_batch_size": None}, fix="remove pp-max-micro-batch-size")


# ---------------------------------------------------------------- KV cache x GPU x attention backend

@rule("DDT910", "FP4 / MXFP8 KV caches need Blackwell", reads=("kv_cache_dtype",), needs=(FACT_GPU,),
      applies=lambda ctx: ctx.get("kv_cache_dtype") in ("mxfp8", "nvfp4"),
      reference=f"{AG}kv_cache_hook.py:105-109 handle_mxfp8_kv_cache_compatibility; "
                f"kv_cache_hook.py:125-131 handle_kv4_compatibility")
def kv_dtype_generation(ctx: Context):
    """`--kv-cache-dtype mxfp8` needs an SM100+ (Blackwell) GPU; `nvfp4` needs SM100 or SM120."""
    dtype, sm = ctx.get("kv_cache_dtype"), ctx.gpu.sm
    if dtype == "mxfp8" and sm < 100:
        return Hit(f"--kv-cache-dtype mxfp8 requires a Blackwell (SM100+) GPU, not {ctx.gpu.name} (sm{sm})",
                   fix="use kv-cache-dtype: fp8_e4m3", edits={"kv_cache_dtype": "fp8_e4m3"})
    if dtype == "nvfp4" and sm not in (100, 120):
        return Hit(f"--kv-cache-dtype nvfp4 requires SM100 or SM120, not {ctx.gpu.name} (sm{sm})",
                   fix="use kv-cache-dtype: fp4_mx_block16", edits={"kv_cache_dtype": "fp4_mx_block16"})


_KV4_MHA = ("triton", "torch_native", "flex_attention", "trtllm_mha")
_KV4_MLA = ("flashinfer", "trtllm_mla")


@rule("DDT911", "FP4 KV cache runs on the FP4-capable attention backends", reads=("kv_cache_dtype", "attention_backend"),
      needs=(FACT_GPU, FACT_MODEL),
      applies=lambda ctx: ctx.get("kv_cache_dtype") in ("nvfp4", "fp4_mx_block16") and "fa4" not in backends(ctx),
      reference=f"{AG}kv_cache_hook.py:296-318 handle_kv4_compatibility (assert)")
def kv4_backend(ctx: Context):
    """FP4 KV caches (nvfp4, fp4_mx_block16) without FA4 prefill need attention backend triton, torch_native,
    flex_attention or trtllm_mha (MHA models), flashinfer or trtllm_mla (MLA models). SGLang's automatic choice
    counts (fa3 on Hopper, flashinfer on SM120)."""
    if ctx.get("kv_cache_dtype") == "nvfp4" and ctx.gpu.sm not in (100, 120):
        return None  # DDT910
    backend = resolved_attention(ctx)
    allowed = _KV4_MLA if is_mla(ctx) else _KV4_MHA
    if backend is not None and backend not in allowed:
        chosen = "" if ctx.is_set("attention_backend") else " (chosen by SGLang for this model and GPU)"
        return Hit(f"--kv-cache-dtype {ctx.get('kv_cache_dtype')} needs attention backend {' / '.join(allowed)}, "
                   f"got {backend!r}{chosen}", about="kv_cache_dtype",
                   fix=f"set attention-backend: {allowed[0]}", edits={"attention_backend": allowed[0]})


@rule("DDT912", "MLA attention backends: GPU generation, kv dtype, decode only",
      reads=("attention_backend", "decode_attention_backend", "prefill_attention_backend"), needs=(FACT_GPU,),
      applies=lambda ctx: bool({"trtllm_mla", "cutedsl_mla"} & {ctx.get("attention_backend"),
                                                               ctx.get("decode_attention_backend"),
                                                               ctx.get("prefill_attention_backend")}),
      reference="sglang 0.5.23 srt/arg_groups/overrides.py:1206-1218 _mla_kv_cache_dtype_checks; "
                "overrides.py:1232-1256 _cutedsl_prefill_backend_fill")
def mla_backends(ctx: Context):
    """trtllm_mla (as attention or decode backend) needs a Blackwell GPU and kv-cache-dtype fp8_e4m3/bf16/auto;
    cutedsl_mla is decode-only (never the prefill backend), SM100 only, kv-cache-dtype fp8_e4m3/bf16/auto."""
    main, decode, prefill = (ctx.get("attention_backend"), ctx.get("decode_attention_backend"),
                             ctx.get("prefill_attention_backend"))
    if main == prefill == decode or (prefill is not None and prefill == decode):
        main = prefill
    sm, dtype = ctx.gpu.sm, ctx.get("kv_cache_dtype") or "auto"
    if "trtllm_mla" in (main, decode):
        if sm < 100:
            return Hit(f"attention backend trtllm_mla needs a Blackwell GPU (SM100/SM12x), not {ctx.gpu.name}",
                       fix="use attention-backend: flashinfer or triton")
        if dtype not in ("fp8_e4m3", "bf16", "auto"):
            return Hit(f"attention backend trtllm_mla supports kv-cache-dtype fp8_e4m3, bf16 or auto, not {dtype}",
                       about="kv_cache_dtype", fix="set kv-cache-dtype: fp8_e4m3")
    if "cutedsl_mla" in (main, decode, prefill):
        if prefill == "cutedsl_mla":
            return Hit("cutedsl_mla only supports decoding: it cannot be the prefill attention backend",
                       about="prefill_attention_backend", fix="remove prefill-attention-backend")
        if sm not in (100, 103):
            return Hit(f"attention backend cutedsl_mla needs an SM100 GPU, not {ctx.gpu.name} (sm{sm})",
                       fix="use attention-backend: flashinfer or triton")
        if dtype not in ("fp8_e4m3", "bf16", "bfloat16", "auto"):
            return Hit(f"attention backend cutedsl_mla supports kv-cache-dtype fp8_e4m3, bf16 or auto, not {dtype}",
                       about="kv_cache_dtype")


_DETERMINISTIC = ("ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton")


@rule("DDT913", "deterministic inference runs on a deterministic attention backend",
      reads=("enable_deterministic_inference", "attention_backend"),
      applies=lambda ctx: bool(ctx.get("enable_deterministic_inference")) and ctx.is_set("attention_backend"),
      reference="sglang 0.5.23 srt/arg_groups/overrides.py:1093-1123 _deterministic_attention_backend; "
                "choices.py:113 DETERMINISTIC_ATTENTION_BACKEND_CHOICES")
def deterministic(ctx: Context):
    """`--enable-deterministic-inference` supports attention backends ascend, fa3, fa4, flashinfer, intel_xpu and
    triton; unset, SGLang picks one itself."""
    backend = ctx.get("attention_backend")
    if backend not in _DETERMINISTIC:
        return Hit(f"--enable-deterministic-inference does not support attention backend {backend!r} "
                   f"(only {', '.join(_DETERMINISTIC)})", about="attention_backend",
                   fix="remove attention-backend (SGLang picks a deterministic one)", edits={"attention_backend": None})


@rule("DDT914", "flex_attention does not run speculative decoding", reads=("attention_backend",),
      applies=lambda ctx: ctx.get("attention_backend") == "flex_attention" and ctx.algorithm is not None,
      reference=f"{AG}attention_hook.py:161-163 handle_attention_backend_compatibility (assert)")
def flex_spec(ctx: Context):
    """The flex_attention backend does not support speculative decoding."""
    return Hit("speculative decoding is not supported with the flex_attention backend",
               fix="use attention-backend: triton", edits={"attention_backend": "triton"})


@rule("DDT915", "hierarchical cache and KV offload need the radix cache / decode side",
      reads=("enable_hierarchical_cache", "disaggregation_decode_enable_offload_kvcache"),
      applies=lambda ctx: bool(ctx.get("enable_hierarchical_cache")) and bool(ctx.get("disable_radix_cache"))
      or bool(ctx.get("disaggregation_decode_enable_offload_kvcache")),
      reference=f"{AG}kv_cache_hook.py:394-403 handle_cache_compatibility")
def hicache(ctx: Context):
    """`--enable-hierarchical-cache` and `--disable-radix-cache` are mutually exclusive;
    `--disaggregation-decode-enable-offload-kvcache` is only for `--disaggregation-mode decode`."""
    if ctx.get("enable_hierarchical_cache") and ctx.get("disable_radix_cache"):
        return Hit("--enable-hierarchical-cache and --disable-radix-cache are mutually exclusive",
                   about="disable_radix_cache", fix="remove disable-radix-cache")
    if ctx.get("disaggregation_decode_enable_offload_kvcache") and ctx.get("disaggregation_mode") != "decode":
        return Hit("--disaggregation-decode-enable-offload-kvcache is only supported with --disaggregation-mode decode",
                   about="disaggregation_decode_enable_offload_kvcache")


# ---------------------------------------------------------------- LoRA, sampling, serving options

@rule("DDT916", "LoRA needs adapters or their shape", reads=("enable_lora", "max_loras_per_batch"),
      applies=lambda ctx: bool(ctx.get("enable_lora")) or (ctx.get("max_loras_per_batch") or 1) <= 0
      or str(ctx.get("moe_runner_backend") or "").startswith("lora"),
      reference=f"{AG}lora_hook.py:36 (assert), lora_hook.py:152-154 (assert), lora_hook.py:199-203")
def lora(ctx: Context):
    """`--max-loras-per-batch` must be positive; `--enable-lora` without `--lora-paths` needs `--max-lora-rank` and
    `--lora-target-modules`; a `lora_*` MoE runner needs `--enable-lora`."""
    if (ctx.get("max_loras_per_batch") or 1) <= 0:
        yield Hit(f"--max-loras-per-batch must be positive, got {ctx.get('max_loras_per_batch')}",
                  about="max_loras_per_batch")
    enabled = ctx.get("enable_lora") or ctx.given.get("lora_paths")
    if ctx.get("enable_lora") and not ctx.given.get("lora_paths") and not (
            ctx.get("max_lora_rank") and ctx.given.get("lora_target_modules")):
        yield Hit("--enable-lora without --lora-paths needs both --max-lora-rank and --lora-target-modules",
                  about="enable_lora", fix="set lora-paths, or max-lora-rank and lora-target-modules")
    backend = str(ctx.get("moe_runner_backend") or "")
    if backend.startswith("lora") and not enabled:
        yield Hit(f"--moe-runner-backend {backend} requires --enable-lora (or --lora-paths)", about="moe_runner_backend")


@rule("DDT917", "the intel_xpu sampling backend needs an XPU device", reads=("sampling_backend",),
      applies=lambda ctx: ctx.get("sampling_backend") == "intel_xpu" and ctx.get("device") != "xpu",
      reference=f"{AG}validation_hook.py:480-487 check_server_args")
def sampling_backend(ctx: Context):
    """`--sampling-backend intel_xpu` requires `--device xpu`."""
    return Hit("--sampling-backend intel_xpu requires --device xpu", fix="remove sampling-backend",
               edits={"sampling_backend": None})


@rule("DDT918", "aux hidden-state capture names a capturing speculative algorithm, without a draft",
      reads=("enable_return_aux_hidden_states",), applies=lambda ctx: bool(ctx.get("enable_return_aux_hidden_states")),
      reference=f"{AG}validation_hook.py:704-733 handle_aux_hidden_state_capture")
def aux_hidden(ctx: Context):
    """`--enable-return-aux-hidden-states` needs `--speculative-algorithm` EAGLE3, DFLASH or DSPARK (it only names
    the capture convention; SGLang then resets the algorithm to None), no `--speculative-draft-model-path`,
    pp-size 1, and `--return-aux-hidden-state-layer-ids` unless the convention is EAGLE3."""
    method = str(ctx.given.get("speculative_algorithm") or "").upper()
    if method not in ("EAGLE3", "DFLASH", "DSPARK"):
        return Hit("--enable-return-aux-hidden-states needs --speculative-algorithm EAGLE3, DFLASH or DSPARK",
                   fix="remove enable-return-aux-hidden-states", edits={"enable_return_aux_hidden_states": None})
    if ctx.is_set("speculative_draft_model_path"):
        return Hit("--enable-return-aux-hidden-states captures without a draft: drop --speculative-draft-model-path",
                   about="speculative_draft_model_path", edits={"speculative_draft_model_path": None})
    if (ctx.get("pp_size", 1) or 1) != 1:
        return Hit("--enable-return-aux-hidden-states only supports --pp-size 1", about="pp_size")
    if method != "EAGLE3" and not ctx.given.get("return_aux_hidden_state_layer_ids"):
        return Hit(f"--enable-return-aux-hidden-states with {method} requires --return-aux-hidden-state-layer-ids")


@rule("DDT919", "context length within the model's", reads=("context_length",), needs=(FACT_MODEL,),
      applies=lambda ctx: ctx.is_set("context_length") and ctx.model.source not in ("profile", "unknown"),
      reference="sglang 0.5.23 srt/configs/model_config.py:1291-1310 _derive_context_length; "
                "utils/hf_transformers/common.py:677 get_context_length")
def context_length(ctx: Context):
    """A `--context-length` above the model's derived context length (max_position_embeddings x rope factor) is
    rejected unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set in the server's environment."""
    derived = derived_context_length(ctx.model.raw)
    value = ctx.get("context_length")
    if derived is not None and value > derived:
        return Hit(f"--context-length {value} is greater than the model's derived context length {derived} "
                   "(SGLang refuses unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)",
                   fix=f"set context-length: {derived} or less", edits={"context_length": derived})


_CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


def derived_context_length(raw: dict) -> int | None:
    config = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    rope = config.get("rope_scaling") or {}
    factor = 1
    if isinstance(rope, dict) and rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in _CONTEXT_KEYS:
        if config.get(key) is not None:
            return int(factor * config[key])
    return None if not raw else 2048


@rule("DDT920", "UNO reuses the target with a LoRA adapter", reads=("uno_lora_path", "speculative_draft_model_path"),
      applies=lambda ctx: ctx.algorithm == "UNO", reference=f"{AG}speculative_hook.py:449-460 _handle_uno")
def uno(ctx: Context):
    """UNO needs `--uno-lora-path`, accepts no `--speculative-draft-model-path`, and runs on CUDA only."""
    if ctx.is_set("speculative_draft_model_path"):
        return Hit("UNO reuses the target model and does not accept --speculative-draft-model-path",
                   about="speculative_draft_model_path", edits={"speculative_draft_model_path": None},
                   fix="remove speculative-draft-model-path")
    if not ctx.is_set("uno_lora_path"):
        return Hit("UNO requires --uno-lora-path", fix="set uno-lora-path to the UNO adapter")


@rule("DDT921", "DSPARK needs a draft model and draft tokens = gamma + 1",
      reads=("speculative_draft_model_path", "speculative_num_draft_tokens"),
      applies=lambda ctx: ctx.algorithm == "DSPARK", reference=f"{AG}speculative_hook.py:749-755, 826-833 _handle_dspark")
def dspark(ctx: Context):
    """DSPARK (dense) requires `--speculative-draft-model-path`; an explicit `--speculative-num-draft-tokens` must
    equal the drafter's gamma + 1."""
    if not ctx.is_set("speculative_draft_model_path"):
        return Hit("DSPARK speculative decoding requires --speculative-draft-model-path",
                   fix="set speculative-draft-model-path")
    tokens = ctx.given.get("speculative_num_draft_tokens")
    gamma = ctx.draft.block_size if ctx.draft is not None and ctx.draft.block_size else None
    if tokens is not None and gamma is not None and tokens != gamma + 1:
        return Hit(f"DSPARK needs --speculative-num-draft-tokens = gamma + 1 ({gamma + 1}), got {tokens}",
                   about="speculative_num_draft_tokens", edits={"speculative_num_draft_tokens": None},
                   fix="remove speculative-num-draft-tokens")


@rule("DDT922", "watermarking supports NGRAM, EAGLE and EAGLE3", reads=("enable_watermark",),
      applies=lambda ctx: bool(ctx.get("enable_watermark")),
      reference=f"{AG}validation_hook.py:82-96 check_watermark")
def watermark(ctx: Context):
    """`--enable-watermark` is not supported with PD disaggregation and only with NGRAM / EAGLE / EAGLE3."""
    if ctx.get("disaggregation_mode") not in (None, "null"):
        return Hit("--enable-watermark is not supported with PD disaggregation", about="disaggregation_mode")
    if ctx.algorithm not in (None, "NGRAM", "EAGLE", "EAGLE3"):
        return Hit(f"--enable-watermark supports speculative algorithms NGRAM, EAGLE and EAGLE3, not {ctx.algorithm}")


@rule("DDT924", "serving options that need their companions", reads=("enable_ssl_refresh", "enable_quant_communications"),
      applies=lambda ctx: bool(ctx.get("enable_ssl_refresh")) or bool(ctx.get("enable_quant_communications"))
      or bool(ctx.get("enable_prefill_cp")),
      reference=f"{AG}serving_hook.py:83-86 handle_ssl_validation; validation_hook.py:349-353 check_server_args; "
                f"parallel_hook.py:151-154 handle_context_parallelism")
def companions(ctx: Context):
    """`--enable-ssl-refresh` needs `--ssl-certfile` and `--ssl-keyfile`; `--enable-quant-communications` needs
    tp-size > 1 on an NPU device; `--enable-prefill-cp` needs `--cp-strategy`."""
    if ctx.get("enable_ssl_refresh") and not (ctx.given.get("ssl_certfile") and ctx.given.get("ssl_keyfile")):
        yield Hit("--enable-ssl-refresh requires --ssl-certfile and --ssl-keyfile", about="enable_ssl_refresh")
    if ctx.get("enable_quant_communications"):
        if (ctx.get("tp_size", 1) or 1) == 1:
            yield Hit("--enable-quant-communications is only used with --tp-size > 1", about="enable_quant_communications")
        elif ctx.get("device") != "npu":
            yield Hit("--enable-quant-communications is only supported on the NPU device",
                      about="enable_quant_communications")
    if ctx.get("enable_prefill_cp") and ctx.given.get("cp_strategy") is None:
        yield Hit("--enable-prefill-cp requires --cp-strategy", about="enable_prefill_cp")


@rule("DDT925", "prefill_complete allocation is for PD-disaggregated Mooncake deployments",
      reads=("disaggregation_decode_allocation_policy",),
      applies=lambda ctx: ctx.get("disaggregation_decode_allocation_policy") == "prefill_complete",
      reference=f"{AG}pd_disaggregation_hook.py:47-48, 198-215 _validate_prefill_complete")
def prefill_complete(ctx: Context):
    """`--disaggregation-decode-allocation-policy prefill_complete` needs a prefill or decode node, the Mooncake
    transfer backend, pp/attn-cp/dcp 1 and attention TP 1 (tp-size equal to the attention-DP size)."""
    problems = []
    if ctx.get("disaggregation_mode") not in ("prefill", "decode"):
        problems.append("aggregated serving")
    if (ctx.get("disaggregation_transfer_backend") or "mooncake") != "mooncake":
        problems.append("transfer backends other than Mooncake")
    if any((ctx.get(d, 1) or 1) != 1 for d in ("pp_size", "attn_cp_size", "dcp_size")):
        problems.append("pipeline or attention context parallelism")
    dp = (ctx.get("dp_size", 1) or 1) if ctx.get("enable_dp_attention") else 1
    if ctx.get("tp_size", 1) != dp:
        problems.append("attention tensor parallelism greater than one")
    if problems:
        return Hit("--disaggregation-decode-allocation-policy prefill_complete does not yet support "
                   + ", ".join(problems), fix="remove disaggregation-decode-allocation-policy",
                   edits={"disaggregation_decode_allocation_policy": None})


_DSA_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN",
                      "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
                      "GlmMoeDsaForCausalLMNextN", "Glm5NextForConditionalGenerationNextN",
                      "Glm5NextForConditionalGeneration", "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN",
                      "Dots3NoteForCausalLM", "Dots3NoteForCausalLMNextN", "HYV4ForCausalLM", "HYV4ForCausalLMNextN")
_CP_DECODE_ATTN_TP_ARCHITECTURES = ("DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN",
                                    "DeepseekV4ForCausalLMDSpark", "GlmMoeDsaForCausalLM",
                                    "GlmMoeDsaForCausalLMNextN")


def _is_dsa(ctx: Context) -> bool:
    """configs/model_config.py:191-212 is_deepseek_dsa: a DSA architecture whose config sets index_topk."""
    raw = ctx.model.raw or {}
    config = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    return ctx.model.architecture in _DSA_ARCHITECTURES and config.get("index_topk") is not None


@rule("DDT926", "sparse-attention features need a sparse-attention model",
      reads=("enable_hisparse", "enable_dsa_cache_layer_split", "enable_cp_decode_attn_tp"), needs=(FACT_MODEL,),
      applies=lambda ctx: any(ctx.get(d) for d in ("enable_hisparse", "enable_dsa_cache_layer_split",
                                                   "enable_cp_decode_attn_tp")),
      reference=f"{AG}hisparse_hook.py:100-108 validate_hisparse (assert); model_hook.py:187-205 "
                "handle_model_specific_adjustments; layers/cp/cp_decode_attn_tp.py:29-37")
def sparse_attention_features(ctx: Context):
    """`--enable-hisparse` and `--enable-dsa-cache-layer-split` need a DeepSeek-Sparse-Attention model (DeepSeek
    V3.2, GLM-5, ...; hisparse also DeepSeek V4 and MiniMax M3); `--enable-cp-decode-attn-tp` needs DeepSeek V4 or
    GLM-5 DSA."""
    arch = ctx.model.architecture
    dsa = _is_dsa(ctx)
    hisparse_ok = dsa or str(arch).startswith("DeepseekV4") or "MiniMaxM3" in str(arch)
    if ctx.get("enable_hisparse") and not hisparse_ok:
        yield Hit(f"--enable-hisparse is only supported for DSA models, DeepSeek V4 and MiniMax M3, not {arch}",
                  about="enable_hisparse", edits={"enable_hisparse": None}, fix="remove enable-hisparse")
    if ctx.get("enable_dsa_cache_layer_split") and not dsa:
        yield Hit(f"--enable-dsa-cache-layer-split is only supported for DSA models, not {arch}",
                  about="enable_dsa_cache_layer_split", edits={"enable_dsa_cache_layer_split": None})
    if ctx.get("enable_cp_decode_attn_tp") and arch not in _CP_DECODE_ATTN_TP_ARCHITECTURES:
        yield Hit(f"--enable-cp-decode-attn-tp is only supported for DeepSeek V4 and GLM-5 DSA, not {arch}",
                  about="enable_cp_decode_attn_tp", edits={"enable_cp_decode_attn_tp": None})
