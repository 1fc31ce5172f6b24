"""Checks of SGLang 0.5.23's resolution hooks (arg_groups/*) that are not about one speculative algorithm: parallel
layouts, KV-cache dtypes x GPU generation x attention backend, LoRA, MoE all-to-all, mutually exclusive features.

Each rule was derived from a raise / assert site of the pinned wheel (found by tools/raise_sites.py, mapped in
ddtctl/rules/coverage.yaml) and cites its file:line. `resolve` models what SGLang's pipeline makes of the attention
backends, the page size and the radix cache before its checks read them (deprecated spellings, model overrides,
deterministic inference, NVFP4, default fill, page snaps; arg_groups/pipeline.py order). Checked against SGLang's own
resolved values over fuzzed launches: identical attention / prefill / decode backend and page size on all 1287 and
1261 accepted cases of seeds 2026 and 7 (N=2000 each).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddtctl.rules.engine import FACT_GPU, FACT_MODEL, INFO, Context, Hit, rule

AG = "sglang 0.5.23 srt/arg_groups/"

# Architectures whose attention is MLA (model_config.py use_mla_backend).
MLA_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV2ForCausalLM",
                     "KimiK2ForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM")


def _nonpositive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0


def attn_dp_size(ctx: Context) -> int:
    """Attention-DP groups as SGLang resolves them: `--dp-size N --enable-dp-attention` becomes `--attn-dp-size N`
    (parallel_hook.py:49-61 _handle_deprecated_dp_attention)."""
    attn = ctx.get("attn_dp_size", 1) or 1
    if attn == 1 and ctx.get("enable_dp_attention"):
        attn = ctx.get("dp_size", 1) or 1
    return attn


def is_mla(ctx: Context) -> bool:
    return ctx.model is not None and ctx.model.architecture in MLA_ARCHITECTURES


# --------------------------------------------------------------- SGLang's attention-backend / page-size resolution

# arg_groups/serving_hook.py:304 handle_deprecated_args: deprecated backend spellings.
BACKEND_ALIASES = {"compressed": "dsv4", "tokenspeed_mla": "cutedsl_mla"}
# model_overrides/qwen3_5.py:17-23 _qwen3_5_hybrid_overrides (Qwen3_5ForCausalLM is not registered there).
QWEN35_HYBRID_OVERRIDE = ("Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                          "InternS2PreviewForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
                          "Qwen3_5ForConditionalGeneration")
# model_overrides/deepseek_v2.py:37-49 _deepseek_family_overrides.
DEEPSEEK_FAMILY = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
                   "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
                   "Glm5NextForConditionalGeneration")
# overrides.py:1039-1058 _deterministic_is_deepseek_model; attention_hook.py:626-635.
DETERMINISTIC_DEEPSEEK = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                          "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
                          "Glm4MoeLiteForCausalLM", "Glm5NextForConditionalGeneration")
# choices.py:113-120, 249.
DETERMINISTIC_BACKENDS = ("ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton")
RADIX_DETERMINISTIC_BACKENDS = ("ascend", "fa3", "fa4", "triton")
_NVFP4_PREFILL = {"fp8_e4m3": "flashinfer", "nvfp4": "trtllm_mha"}  # kv_cache_hook.py:25-31


@dataclass
class Resolution:
    """SGLang's attention-related fields after its resolution pipeline (as far as ddtctl models it). `attention`,
    `prefill` and `decode` are the fields (prefill / decode None: they fall back to `attention`)."""

    attention: str | None
    prefill: str | None
    decode: str | None
    draft: str | None
    page: int  # the page size SGLang runs with
    page_at_mamba: int | None  # the page size when model_hook.py:737 validates the mamba cache
    attention_at_mamba: str | None  # the attention backend then (the user's, or the model override's)
    radix_at_mamba: bool  # whether the radix cache is off then
    kv_cache_dtype: str
    deterministic: bool
    radix_disabled: bool  # --disable-radix-cache, or turned off by deterministic inference
    errors: list = field(default_factory=list)  # (kind, reference, message): raises met while resolving
    # what runs in the end: the DDTREE payload declares attention_backend=triton in the speculative hook when no
    # backend is set (DDT115), after the checks above read the GPU's default (whose page snap stays)
    final_attention: str | None = None
    final_page: int | None = None

    def __post_init__(self):
        if self.final_attention is None:
            self.final_attention = self.attention
        if self.final_page is None:
            self.final_page = self.page

    @property
    def pair(self) -> tuple[str | None, str | None]:
        """(prefill, decode) as attention_backends_of reads them (model_override_base.py:138-152)."""
        return self.prefill or self.attention, self.decode or self.attention

    @property
    def final_pair(self) -> tuple[str | None, str | None]:
        return self.prefill or self.final_attention, self.decode or self.final_attention


def is_deterministic(ctx: Context) -> bool:
    """attention_hook.py:586-592: --rl-on-policy-target turns deterministic inference on."""
    return bool(ctx.get("enable_deterministic_inference")) or ctx.given.get("rl_on_policy_target") is not None


def _no_spec_or_topk_one(topk, page) -> bool:
    """utils/common.py:3960 is_no_spec_infer_or_topk_one (reads the raw topk, with or without an algorithm)."""
    return topk is None or (topk == 1 and page in (1, None))


def _default_backend(ctx: Context, page, mla: bool) -> str:
    """model_override_base.py:277-351 get_default_attn_backend (CUDA)."""
    sm, topk = ctx.gpu.sm, ctx.given.get("speculative_eagle_topk")
    raw_algo = str(ctx.given.get("speculative_algorithm") or "").upper() or None
    if ctx.given.get("enable_return_aux_hidden_states"):
        raw_algo = None
    if mla:
        return {90: "fa3", 100: "flashinfer", 103: "flashinfer"}.get(sm, "triton")
    if sm == 90 and _no_spec_or_topk_one(topk, page):
        return "fa3"
    # DFLASH's topk is declared later (model_override_base.py:268 _forces_eagle_topk_one, by name: not DDTREE)
    if sm in (100, 103) and _no_spec_or_topk_one(topk, page) and (
            raw_algo is None or topk is not None or raw_algo == "DFLASH"):
        return "trtllm_mha"
    return "flashinfer"


def resolve(ctx: Context) -> Resolution | None:
    """SGLang's attention backends and page size for this launch, in its pipeline's order (arg_groups/pipeline.py):
    deprecated spellings (serving_hook.py:304-333), model overrides (model_hook.py:233; qwen3_5.py:24-48,
    deepseek_v2.py:179-185), the mamba cache pass (model_hook.py:737), deterministic inference
    (attention_hook.py:580-662, overrides.py:1093-1123), NVFP4 backends (kv_cache_hook.py:34-92), the default fill
    and page snaps (attention_hook.py:110-277; overrides.py:1127-1337). None: unknown (no GPU or model)."""
    if ctx.gpu is None or ctx.model is None or not ctx.model.known:
        return None
    sm, arch, mla = ctx.gpu.sm, ctx.model.architecture, is_mla(ctx)
    errors: list = []
    raw = {d: ctx.get(d) for d in ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
                                   "speculative_draft_attention_backend")}
    att, pre, dec, draft = (BACKEND_ALIASES.get(raw[d], raw[d]) for d in raw)
    if raw["prefill_attention_backend"] == "tokenspeed_mla":
        pre = "trtllm_mla"  # serving_hook.py:320-322: cutedsl_mla is decode-only
    kv = ctx.get("kv_cache_dtype") or "auto"
    if "tokenspeed_mla" in (raw["attention_backend"], raw["decode_attention_backend"]):
        kv = "fp8_e4m3"  # serving_hook.py:324-329
    page = ctx.given.get("page_size")
    topk = ctx.given.get("speculative_eagle_topk")
    algo = ctx.algorithm
    radix_off = bool(ctx.get("disable_radix_cache"))
    if ctx.get("disaggregation_mode") == "decode":
        # pd_disaggregation_hook.py:98-129: a decode server runs without the radix cache unless asked for it
        radix_off = not ctx.get("disaggregation_decode_enable_radix_cache")
    # model overrides
    if arch in QWEN35_HYBRID_OVERRIDE and sm in (100, 103) and att is None:
        strategy = ctx.get("mamba_radix_cache_strategy") or "auto"
        extra = not radix_off and strategy in ("extra_buffer", "extra_buffer_lazy")
        default = _default_backend(ctx, page, False)
        att = "trtllm_mha" if default == "trtllm_mha" and (extra or radix_off or algo is not None) else "triton"
        page = 64 if att == "trtllm_mha" else 1
    elif arch in DEEPSEEK_FAMILY and sm in (100, 103) and att is None and pre is None and dec is None \
            and not _is_dsa(ctx):
        att = "trtllm_mla"
    page_at_mamba, attention_at_mamba, radix_at_mamba = page, att, radix_off
    # deterministic inference
    deterministic = is_deterministic(ctx)
    if deterministic:
        if att is None:
            att = ("triton" if arch in DETERMINISTIC_DEEPSEEK else "flashinfer") if sm >= 100 else "fa3"
        elif att not in DETERMINISTIC_BACKENDS:
            errors.append(("deterministic", "overrides.py:1116-1121 _deterministic_attention_backend",
                           f"--enable-deterministic-inference supports attention backends "
                           f"{', '.join(DETERMINISTIC_BACKENDS)}, not {att!r}"))
        if att not in RADIX_DETERMINISTIC_BACKENDS:
            if arch in DETERMINISTIC_DEEPSEEK:
                errors.append(("deterministic", "attention_hook.py:643-647 handle_deterministic_inference",
                               f"deterministic inference on {arch} needs attention backend "
                               f"{' / '.join(RADIX_DETERMINISTIC_BACKENDS)}, got {att!r}"))
            radix_off = True  # attention_hook.py:656-662
    # NVFP4 KV cache picks its prefill / decode backends
    if kv == "nvfp4":
        requested = ctx.get("prefill_kv_cache_dequant_dtype") or "auto"
        if requested == "auto":
            explicit = pre or att
            if explicit in ("flashinfer", "trtllm_mha"):
                requested = "fp8_e4m3" if explicit == "flashinfer" else "nvfp4"
            elif explicit is not None:
                errors.append(("nvfp4", "kv_cache_hook.py:48-55 handle_nvfp4_prefill_kv_dequant_dtype",
                               f"--kv-cache-dtype nvfp4 prefills from an FP8 E4M3 workspace (flashinfer) or native "
                               f"NVFP4 (trtllm_mha), but attention backend {explicit!r} provides neither"))
                requested = None
            else:
                requested = "nvfp4" if sm in (100, 103) else "fp8_e4m3"
        if requested is not None:
            if requested == "nvfp4" and sm not in (100, 103):
                errors.append(("nvfp4", "kv_cache_hook.py:59-63 handle_nvfp4_prefill_kv_dequant_dtype",
                               "native NVFP4 prefill needs SM100: use --prefill-kv-cache-dequant-dtype fp8_e4m3"))
            target = _NVFP4_PREFILL.get(requested)
            if pre is not None and target is not None and pre != target:
                errors.append(("nvfp4", "kv_cache_hook.py:66-76 handle_nvfp4_prefill_kv_dequant_dtype",
                               f"NVFP4 prefill dequant {requested} needs prefill backend {target!r}, not {pre!r}"))
            if dec not in (None, "trtllm_mha"):
                errors.append(("nvfp4", "kv_cache_hook.py:78-84 handle_nvfp4_prefill_kv_dequant_dtype",
                               f"NVFP4 decode needs --decode-attention-backend trtllm_mha, not {dec!r}"))
            if not any(kind == "nvfp4" for kind, _, _ in errors):
                pre, dec = target, "trtllm_mha"
    # default fill (overrides.py:1126-1140)
    if pre is not None and pre == dec:
        att = pre
    elif att is None:
        att = _default_backend(ctx, page, mla)
    both = (att, pre, dec)
    # page snaps (overrides.py:1142-1200)
    page_now = page
    if "flashmla" in (att, dec):
        page_now = 64
    if "trtllm_mla" in (att, dec) and page_now not in (32, 64):
        page_now = 64
    if "cutedsl_mla" in both and page_now not in (32, 64):
        page_now = 64
    if ("trtllm_mha" in both or draft == "trtllm_mha") and page_now not in (16, 32, 64, 128):
        page_now = 64
    if "hpc_ops" in both and page_now != 64:
        page_now = 64
    if "cutedsl_mla" in both and pre is None:
        pre = "trtllm_mla"  # overrides.py:1251-1252
    if att == "fa3" and kv == "fp8_e5m2":
        att = "triton"  # overrides.py:1259-1266
    both = (att, pre, dec)
    if "fa4" in both and not mla and sm in (100, 103) and (topk or 0) <= 1:
        page_now = 128  # overrides.py:1269-1296
    if "intel_xpu" in (pre or att, dec or att):
        sizes = (64, 128, 16, 32) if mla else (64, 128)
        if page_now not in sizes:
            page_now = 128  # overrides.py:1324-1337
    if ctx.get("enable_mis"):
        radix_off = True  # attention_hook.py:556-562 handle_multi_item_scoring
    out = Resolution(att, pre, dec, draft, page_now or 1, page_at_mamba, attention_at_mamba, radix_at_mamba, kv,
                     deterministic, radix_off, errors)
    if algo == "DDTREE" and all(raw[d] is None for d in ("attention_backend", "prefill_attention_backend",
                                                         "decode_attention_backend")):
        # ddtree_core.py DDT115 (the payload's resolution.py apply_findings, in the speculative hook): the page
        # size snapped earlier for the GPU's default backend (e.g. DeepSeek's trtllm_mla -> 64) stays
        out.final_attention = "triton"
    return out


def resolved_attention(ctx: Context) -> str | None:
    """The attention backend SGLang resolves (None: unknown, e.g. no GPU declared). See `resolve`."""
    res = resolve(ctx)
    if res is None:
        prefill, decode = ctx.get("prefill_attention_backend"), ctx.get("decode_attention_backend")
        if prefill is not None and prefill == decode:
            return prefill
        return ctx.get("attention_backend")
    return res.final_attention


def resolved_page(ctx: Context, backend: str | None = None) -> int:
    """The page size SGLang runs with (see `resolve`); without GPU / model facts, the given one."""
    res = resolve(ctx)
    return res.final_page if res is not None else (ctx.get("page_size") or 1)


def backends(ctx: Context) -> tuple[str | None, str | None]:
    """(prefill, decode) backends as attention_backends_of (model_override_base.py:138) reads them."""
    res = resolve(ctx)
    if res is None:
        main = resolved_attention(ctx)
        return (ctx.get("prefill_attention_backend") or main, ctx.get("decode_attention_backend") or main)
    return res.pair


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
    if _a2a(ctx) == "none" and attn_dp_size(ctx) <= 1:
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
      reference=f"{AG}moe_hook.py:41-67, 475-487 (flashinfer), moe_hook.py:592 (pplx) handle_a2a_moe (assert)")
def a2a_needs_dp(ctx: Context):
    """`--moe-a2a-backend flashinfer` needs attention DP with --attn-dp-size equal to --tp-size (so not at tp 1);
    `pplx` needs attention DP with at least 2 groups."""
    backend, dp, tp = ctx.get("moe_a2a_backend"), attn_dp_size(ctx), ctx.get("tp_size", 1)
    if backend == "pplx" and dp < 2:
        return Hit("--moe-a2a-backend pplx requires attention DP with at least 2 groups (--attn-dp-size >= 2)")
    if backend == "flashinfer" and not (dp > 1 and dp == tp):
        # moe_hook.py:41-67 _flashinfer_a2a_topology_is_supported: attention DP on (attn_dp_size > 1, which
        # runtime_context.py:191 attn_dp_enabled_of reads) with as many groups as TP ranks
        return Hit(f"--moe-a2a-backend flashinfer requires attention DP with --attn-dp-size equal to --tp-size "
                   f"(attn-dp-size {dp}, tp-size {tp})")


@rule("DDT906", "decode context parallelism options need --dcp-size > 1", reads=("dcp_replicate_q_proj",),
      applies=lambda ctx: bool(ctx.given.get("dcp_replicate_q_proj")) and (ctx.get("dcp_size", 1) or 1) <= 1,
      reference=f"{AG}parallel_hook.py:266-267 handle_decode_context_parallelism")
def dcp(ctx: Context):
    """`--dcp-replicate-q-proj` requires `--dcp-size > 1`."""
    return Hit("--dcp-replicate-q-proj requires --dcp-size > 1", fix="remove dcp-replicate-q-proj",
               edits={"dcp_replicate_q_proj": None})


@rule("DDT907", "elastic EP options need --elastic-ep-backend",
      reads=("max_ep_size", "ep_join_mode", "elastic_ep_initial_size"),
      applies=lambda ctx: any(ctx.is_set(d) for d in ("max_ep_size", "ep_join_mode", "elastic_ep_initial_size"))
      or (ctx.given.get("ep_join_rank_offset") or 0) != 0,
      reference=f"{AG}parallel_hook.py:546-581 handle_elastic_ep (assert)")
def elastic_ep(ctx: Context):
    """`--max-ep-size` and `--elastic-ep-join-mode` require `--elastic-ep-backend`; `--max-ep-size` is positive;
    `--elastic-ep-initial-size` needs an elastic deployment with --max-ep-size above --tp-size;
    `--elastic-ep-join-rank-offset` is only for `--elastic-ep-join-mode scale` and non-negative; a scale joiner needs
    `--node-rank 1` and a positive join rank offset."""
    backend = ctx.given.get("elastic_ep_backend")
    offset = ctx.given.get("ep_join_rank_offset") or 0
    if offset != 0 and ctx.get("ep_join_mode") != "scale":
        return Hit("--elastic-ep-join-rank-offset is only valid with --elastic-ep-join-mode scale",
                   about="ep_join_rank_offset", fix="remove elastic-ep-join-rank-offset",
                   edits={"ep_join_rank_offset": None})
    if offset < 0:
        return Hit(f"--elastic-ep-join-rank-offset must be >= 0, got {offset}", about="ep_join_rank_offset")
    if ctx.get("ep_join_mode") == "scale" and backend is not None:
        if (ctx.get("node_rank") or 0) != 1:
            return Hit("an elastic EP scale joiner runs at --node-rank 1", about="ep_join_mode")
        if offset <= 0:
            return Hit("an elastic EP scale joiner needs --elastic-ep-join-rank-offset (the current EP size)",
                       about="ep_join_mode")
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
_KV4_FA4_MHA = ("triton", "torch_native", "flex_attention")
_NATIVE_NVFP4_SPEC = ("EAGLE", "EAGLE3", "NGRAM")  # kv_cache_hook.py:159-164 (NEXTN is EAGLE)


@rule("DDT911", "FP4 KV cache runs on the FP4-capable attention backends",
      reads=("kv_cache_dtype", "attention_backend"),
      needs=(FACT_GPU, FACT_MODEL),
      applies=lambda ctx: ctx.get("kv_cache_dtype") in ("nvfp4", "fp4_mx_block16"),
      reference=f"{AG}kv_cache_hook.py:112-320 handle_kv4_compatibility")
def kv4_backend(ctx: Context):
    """FP4 KV caches (nvfp4, fp4_mx_block16), with the backends SGLang resolves (an nvfp4 cache picks its own:
    flashinfer prefill + trtllm_mha decode, or trtllm_mha for both on SM100). One backend for prefill and decode
    (not FA4 prefill) must be triton, torch_native, flex_attention or trtllm_mha (MHA models), flashinfer or
    trtllm_mla (MLA models); FA4 prefill needs a matching decode backend. Native NVFP4 on SM100 trtllm_mha supports
    EAGLE/EAGLE3/NEXTN and breadth-1 NGRAM only, with a trtllm_mha draft backend, and no PD disaggregation,
    hierarchical cache or LMCache. No FP4 KV cache runs with --enable-unified-memory."""
    res = resolve(ctx)
    dtype = res.kv_cache_dtype
    if dtype == "nvfp4" and ctx.gpu.sm not in (100, 103, 120):
        return None  # DDT910
    if any(kind == "nvfp4" for kind, _, _ in res.errors):
        return None  # DDT927
    if ctx.get("enable_unified_memory"):
        return Hit("FP4 KV caches do not support --enable-unified-memory", about="enable_unified_memory",
                   fix="remove enable-unified-memory", edits={"enable_unified_memory": None})
    prefill, decode = res.pair
    native = dtype == "nvfp4" and ctx.gpu.sm in (100, 103) and "trtllm_mha" in (prefill, decode)
    algo = ctx.algorithm
    if native and algo is not None:
        if algo not in _NATIVE_NVFP4_SPEC:
            return Hit(f"native NVFP4 KV (trtllm_mha on SM100) supports speculative algorithms EAGLE, EAGLE3, NEXTN "
                       f"and breadth-1 NGRAM, not {algo}", about="speculative_algorithm")
        if algo == "NGRAM" and (ctx.get("speculative_ngram_max_bfs_breadth") or 10) != 1:
            return Hit("native NVFP4 KV with NGRAM needs --speculative-ngram-max-bfs-breadth 1 (trtllm_mha verifies "
                       "linear chains only)", about="speculative_ngram_max_bfs_breadth",
                       fix="set speculative-ngram-max-bfs-breadth: 1", edits={"speculative_ngram_max_bfs_breadth": 1})
        if algo != "NGRAM" and res.draft not in (None, "trtllm_mha"):
            return Hit(f"native NVFP4 KV speculative decoding needs --speculative-draft-attention-backend trtllm_mha, "
                       f"not {res.draft!r}", about="speculative_draft_attention_backend",
                       fix="remove speculative-draft-attention-backend",
                       edits={"speculative_draft_attention_backend": None})
    if native and (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit("native NVFP4 KV (trtllm_mha on SM100) does not support PD disaggregation",
                   about="disaggregation_mode")
    if native and (ctx.get("enable_hierarchical_cache") or ctx.get("enable_lmcache")):
        return Hit("native NVFP4 KV (trtllm_mha on SM100) does not support the hierarchical cache or LMCache",
                   about="enable_hierarchical_cache" if ctx.get("enable_hierarchical_cache") else "enable_lmcache")
    if prefill != decode and prefill != "fa4":
        return None  # a split pair only warns (kv_cache_hook.py:264-272)
    chosen = "" if ctx.is_set("attention_backend") else " (chosen by SGLang for this model and GPU)"
    if prefill == "fa4":
        allowed = _KV4_MLA if is_mla(ctx) else _KV4_FA4_MHA
        if decode not in allowed:
            return Hit(f"--kv-cache-dtype {dtype} with FA4 prefill needs decode backend {' / '.join(allowed)}, "
                       f"got {decode!r}", about="decode_attention_backend",
                       fix=f"set decode-attention-backend: {allowed[0]}",
                       edits={"decode_attention_backend": allowed[0]})
        return None
    allowed = _KV4_MLA if is_mla(ctx) else _KV4_MHA
    if res.attention not in allowed:
        return Hit(f"--kv-cache-dtype {dtype} needs attention backend {' / '.join(allowed)}, "
                   f"got {res.attention!r}{chosen}", about="kv_cache_dtype",
                   fix=f"set attention-backend: {allowed[0]}", edits={"attention_backend": allowed[0]})


@rule("DDT927", "NVFP4 KV cache picks its own prefill and decode backends",
      reads=("kv_cache_dtype", "prefill_kv_cache_dequant_dtype"), needs=(FACT_GPU, FACT_MODEL),
      applies=lambda ctx: ctx.get("kv_cache_dtype") == "nvfp4"
      or (ctx.get("prefill_kv_cache_dequant_dtype") or "auto") != "auto",
      reference=f"{AG}kv_cache_hook.py:34-92 handle_nvfp4_prefill_kv_dequant_dtype")
def nvfp4_backends(ctx: Context):
    """`--prefill-kv-cache-dequant-dtype` applies only to `--kv-cache-dtype nvfp4`. With nvfp4, SGLang chooses the
    prefill backend from the dequant dtype (fp8_e4m3 -> flashinfer; nvfp4 -> trtllm_mha, SM100 only) and decodes
    on trtllm_mha: an explicit attention / prefill backend other than flashinfer or trtllm_mha, a prefill backend
    that contradicts the dequant dtype, or a decode backend other than trtllm_mha is refused."""
    if ctx.get("kv_cache_dtype") != "nvfp4":
        return Hit("--prefill-kv-cache-dequant-dtype applies only with --kv-cache-dtype nvfp4",
                   about="prefill_kv_cache_dequant_dtype", fix="remove prefill-kv-cache-dequant-dtype",
                   edits={"prefill_kv_cache_dequant_dtype": None})
    if ctx.gpu.sm not in (100, 103, 120):
        return None  # DDT910
    for kind, where, message in resolve(ctx).errors:
        if kind == "nvfp4":
            return Hit(f"{message} ({where})", about="kv_cache_dtype",
                       fix="remove the attention backend flags (nvfp4 selects its own)",
                       edits={d: None for d in ("attention_backend", "prefill_attention_backend",
                                                "decode_attention_backend") if ctx.is_set(d)})


@rule("DDT912", "MLA attention backends: GPU generation, kv dtype, decode only",
      reads=("attention_backend", "decode_attention_backend", "prefill_attention_backend"), needs=(FACT_GPU,),
      applies=lambda ctx: _mla_backend_involved(ctx),
      reference="sglang 0.5.23 srt/arg_groups/overrides.py:1203-1218 _mla_kv_cache_dtype_checks; "
                "overrides.py:1232-1256 _cutedsl_prefill_backend_fill; serving_hook.py:304-333 (tokenspeed_mla); "
                "model_overrides/deepseek_v2.py:177-185 (trtllm_mla on SM100)")
def mla_backends(ctx: Context):
    """trtllm_mla (as attention or decode backend, also SGLang's own choice for DeepSeek V3 on SM100) needs a
    Blackwell GPU and kv-cache-dtype fp8_e4m3/bf16/auto; cutedsl_mla (and its deprecated spelling tokenspeed_mla,
    which also forces an fp8_e4m3 KV cache) is decode-only (never the prefill backend), SM100 only,
    kv-cache-dtype fp8_e4m3/bf16/auto."""
    res = resolve(ctx)
    if res is not None:
        main, decode, prefill, dtype = res.attention, res.decode, res.prefill, res.kv_cache_dtype
        explicit_prefill = ctx.get("prefill_attention_backend")  # tokenspeed_mla prefill becomes trtllm_mla
    else:
        main, decode, prefill = (BACKEND_ALIASES.get(ctx.get(d), ctx.get(d)) for d in
                                 ("attention_backend", "decode_attention_backend", "prefill_attention_backend"))
        if ctx.get("prefill_attention_backend") == "tokenspeed_mla":
            prefill = "trtllm_mla"
        if prefill is not None and prefill == decode:
            main = prefill
        dtype = ctx.get("kv_cache_dtype") or "auto"
        explicit_prefill = ctx.get("prefill_attention_backend")
    sm = ctx.gpu.sm
    chosen = "" if {"trtllm_mla"} & {ctx.get("attention_backend"), ctx.get("decode_attention_backend")} else \
        " (chosen by SGLang for this model and GPU)"
    if "trtllm_mla" in (main, decode):
        if sm < 100:
            return Hit(f"attention backend trtllm_mla needs a Blackwell GPU (SM100/SM12x), not {ctx.gpu.name}",
                       fix="use attention-backend: flashinfer or triton")
        if dtype not in ("fp8_e4m3", "bf16", "auto"):
            return Hit(f"attention backend trtllm_mla{chosen} supports kv-cache-dtype fp8_e4m3, bf16 or auto, "
                       f"not {dtype}", about="kv_cache_dtype", fix="set kv-cache-dtype: fp8_e4m3",
                       edits={"kv_cache_dtype": "fp8_e4m3"})
    if "cutedsl_mla" in (main, decode, prefill):
        if explicit_prefill == "cutedsl_mla":
            return Hit("cutedsl_mla only supports decoding: it cannot be the prefill attention backend",
                       about="prefill_attention_backend", fix="remove prefill-attention-backend")
        if sm not in (100, 103):
            return Hit(f"attention backend cutedsl_mla (tokenspeed_mla) needs an SM100 GPU, not {ctx.gpu.name} "
                       f"(sm{sm})", fix="use attention-backend: flashinfer or triton")
        if dtype not in ("fp8_e4m3", "bf16", "bfloat16", "auto"):
            return Hit(f"attention backend cutedsl_mla supports kv-cache-dtype fp8_e4m3, bf16 or auto, not {dtype}",
                       about="kv_cache_dtype")


def _mla_backend_involved(ctx: Context) -> bool:
    given = {ctx.get("attention_backend"), ctx.get("decode_attention_backend"), ctx.get("prefill_attention_backend")}
    if given & {"trtllm_mla", "cutedsl_mla"} or "tokenspeed_mla" in (ctx.get("attention_backend"),
                                                                    ctx.get("decode_attention_backend")):
        return True
    res = resolve(ctx)
    return res is not None and "trtllm_mla" in (res.attention, res.decode)


@rule("DDT913", "deterministic inference runs on a deterministic attention backend",
      reads=("enable_deterministic_inference", "attention_backend"), needs=(FACT_GPU, FACT_MODEL),
      applies=is_deterministic,
      reference="sglang 0.5.23 srt/arg_groups/attention_hook.py:580-662 handle_deterministic_inference; "
                "overrides.py:1093-1123 _deterministic_attention_backend; choices.py:113, 249")
def deterministic(ctx: Context):
    """`--enable-deterministic-inference` (also turned on by `--rl-on-policy-target`) supports attention backends
    ascend, fa3, fa4, flashinfer, intel_xpu and triton; the backend counts as SGLang has it at that point, which
    includes a model's own override (trtllm_mha for Qwen3.5/3.6 hybrids and trtllm_mla for DeepSeek on SM100).
    Unset, SGLang picks fa3 (Hopper) or flashinfer / triton (Blackwell). DeepSeek-style MLA models need one that
    keeps the radix cache (ascend, fa3, fa4, triton)."""
    for kind, where, message in resolve(ctx).errors:
        if kind == "deterministic":
            return Hit(f"{message} ({where})", about="attention_backend" if ctx.is_set("attention_backend")
                       else "enable_deterministic_inference",
                       fix="set attention-backend: triton", edits={"attention_backend": "triton"})


@rule("DDT914", "flex_attention does not run speculative decoding", reads=("attention_backend",),
      applies=lambda ctx: ctx.get("attention_backend") == "flex_attention" and ctx.algorithm is not None,
      reference=f"{AG}attention_hook.py:161-163 handle_attention_backend_compatibility (assert)")
def flex_spec(ctx: Context):
    """The flex_attention backend does not support speculative decoding."""
    return Hit("speculative decoding is not supported with the flex_attention backend",
               fix="use attention-backend: triton", edits={"attention_backend": "triton"})


@rule("DDT915", "hierarchical cache and KV offload need the radix cache / decode side",
      reads=("enable_hierarchical_cache", "disaggregation_decode_enable_offload_kvcache"),
      applies=lambda ctx: bool(ctx.get("enable_hierarchical_cache"))
      or bool(ctx.get("disaggregation_decode_enable_offload_kvcache"))
      or ctx.get("disaggregation_decode_retraction_backup") == "host_pool",
      reference=f"{AG}kv_cache_hook.py:353-374, 393-403 handle_cache_compatibility; attention_hook.py:656-662; "
                f"pd_disaggregation_hook.py:98-129; attention_hook.py:556-562")
def hicache(ctx: Context):
    """`--enable-hierarchical-cache` needs the radix cache: not with `--disable-radix-cache`, nor where SGLang turns
    it off itself (deterministic inference on a backend other than ascend/fa3/fa4/triton, a PD decode server without
    `--disaggregation-decode-enable-radix-cache`, `--enable-mis`). `--disaggregation-decode-enable-offload-kvcache`
    is only for `--disaggregation-mode decode`, as is `--disaggregation-decode-retraction-backup host_pool` (no
    --dcp-size > 1; with priority scheduling it needs --disable-priority-preemption)."""
    if ctx.get("disaggregation_decode_retraction_backup") == "host_pool":
        if ctx.get("disaggregation_mode") != "decode":
            return Hit("--disaggregation-decode-retraction-backup host_pool is only supported on a PD decode server",
                       about="disaggregation_decode_retraction_backup",
                       edits={"disaggregation_decode_retraction_backup": None})
        if (ctx.get("dcp_size", 1) or 1) > 1:
            return Hit("--disaggregation-decode-retraction-backup host_pool does not support --dcp-size > 1",
                       about="disaggregation_decode_retraction_backup")
        if ctx.get("enable_priority_scheduling") and not ctx.get("disable_priority_preemption"):
            return Hit("--disaggregation-decode-retraction-backup host_pool with priority scheduling needs "
                       "--disable-priority-preemption", about="disaggregation_decode_retraction_backup")
    res = resolve(ctx)
    radix_off = res.radix_disabled if res is not None else bool(ctx.get("disable_radix_cache"))
    if ctx.get("enable_hierarchical_cache") and radix_off:
        if ctx.get("disable_radix_cache"):
            return Hit("--enable-hierarchical-cache and --disable-radix-cache are mutually exclusive",
                       about="disable_radix_cache", fix="remove disable-radix-cache")
        why = ("deterministic inference on attention backend " + repr(res.attention)
               if res.deterministic and res.attention not in RADIX_DETERMINISTIC_BACKENDS
               else "a PD decode server" if ctx.get("disaggregation_mode") == "decode" else "--enable-mis")
        return Hit(f"--enable-hierarchical-cache needs the radix cache, which SGLang turns off for {why}",
                   about="enable_hierarchical_cache", fix="remove enable-hierarchical-cache",
                   edits={"enable_hierarchical_cache": None})
    if ctx.get("disaggregation_decode_enable_offload_kvcache") and ctx.get("disaggregation_mode") != "decode":
        return Hit("--disaggregation-decode-enable-offload-kvcache is only supported with --disaggregation-mode decode",
                   about="disaggregation_decode_enable_offload_kvcache")


# ---------------------------------------------------------------- LoRA, sampling, serving options

@rule("DDT916", "LoRA needs adapters or their shape", reads=("enable_lora", "max_loras_per_batch"),
      applies=lambda ctx: bool(ctx.get("enable_lora")) or _nonpositive(ctx.get("max_loras_per_batch"))
      or str(ctx.get("moe_runner_backend") or "").startswith("lora")
      or (ctx.algorithm is not None and str(ctx.get("speculative_moe_runner_backend") or "").startswith("lora")),
      reference=f"{AG}lora_hook.py:36 (assert), lora_hook.py:152-154 (assert), lora_hook.py:186-196, 199-203")
def lora(ctx: Context):
    """`--max-loras-per-batch` must be positive; `--enable-lora` without `--lora-paths` needs `--max-lora-rank` and
    `--lora-target-modules`; a `lora_*` MoE runner needs `--enable-lora`, and is never the draft's
    (`--speculative-moe-runner-backend`)."""
    if _nonpositive(ctx.get("max_loras_per_batch")):
        yield Hit(f"--max-loras-per-batch must be positive, got {ctx.get('max_loras_per_batch')}",
                  about="max_loras_per_batch")
    draft_runner = str(ctx.get("speculative_moe_runner_backend") or "")
    if ctx.algorithm is not None and draft_runner.startswith("lora"):
        yield Hit(f"--speculative-moe-runner-backend {draft_runner} is not supported: draft models have no LoRA "
                  "adapters", about="speculative_moe_runner_backend", edits={"speculative_moe_runner_backend": None})
    enabled = ctx.get("enable_lora") or ctx.given.get("lora_paths")
    if ctx.get("enable_lora") and not ctx.given.get("lora_paths") and not (
            ctx.get("max_lora_rank") and ctx.given.get("lora_target_modules")):
        yield Hit("--enable-lora without --lora-paths needs both --max-lora-rank and --lora-target-modules",
                  about="enable_lora", fix="set lora-paths, or max-lora-rank and lora-target-modules")
    backend = str(ctx.get("moe_runner_backend") or "")
    if backend.startswith("lora") and not enabled:
        yield Hit(f"--moe-runner-backend {backend} requires --enable-lora (or --lora-paths)",
                  about="moe_runner_backend")


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
      applies=lambda ctx: ctx.algorithm == "DSPARK",
      reference=f"{AG}speculative_hook.py:749-755, 826-833 _handle_dspark")
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


@rule("DDT924", "serving options that need their companions",
      reads=("enable_ssl_refresh", "enable_quant_communications"),
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
            yield Hit("--enable-quant-communications is only used with --tp-size > 1",
                      about="enable_quant_communications")
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


# ---------------------------------------------------------------- caches, MoE backends, model-gated options

def _speculative(ctx: Context) -> bool:
    """The algorithm SGLang keeps (aux hidden-state capture resets it: validation_hook.py:693-703)."""
    return ctx.algorithm is not None


@rule("DDT928", "LMCache runs alone: radix cache on, no speculative decoding, no DP attention",
      reads=("enable_lmcache",), applies=lambda ctx: bool(ctx.get("enable_lmcache")),
      reference=f"{AG}kv_cache_hook.py:433-473 handle_cache_compatibility")
def lmcache(ctx: Context):
    """`--enable-lmcache` excludes `--enable-hierarchical-cache` and the unified-cache external linker, needs the
    radix cache (also when SGLang turns it off itself, e.g. a PD decode server or deterministic inference on a
    non-radix backend), and does not support speculative decoding, attention DP, `--dcp-size > 1`, streaming
    sessions, `--hicache-host-memory-mode buffer_only` or PD disaggregation."""
    res = resolve(ctx)
    radix_off = res.radix_disabled if res is not None else bool(ctx.get("disable_radix_cache"))
    if ctx.get("enable_hierarchical_cache"):
        return Hit("--enable-lmcache and --enable-hierarchical-cache are mutually exclusive",
                   about="enable_hierarchical_cache", fix="remove enable-hierarchical-cache",
                   edits={"enable_hierarchical_cache": None})
    if ctx.get("enable_unified_cache_external_linker"):
        return Hit("--enable-lmcache and --enable-unified-cache-external-linker are mutually exclusive",
                   about="enable_unified_cache_external_linker")
    if radix_off:
        return Hit("--enable-lmcache requires the radix cache" + (
            "" if ctx.get("disable_radix_cache") else " (SGLang turns it off for this launch)"),
            about="disable_radix_cache" if ctx.get("disable_radix_cache") else "enable_lmcache")
    if _speculative(ctx):
        return Hit("--enable-lmcache does not support speculative decoding (LMCacheUnifiedRadixCache)",
                   about="enable_lmcache", fix="remove enable-lmcache", edits={"enable_lmcache": None})
    if attn_dp_size(ctx) > 1:
        return Hit("--enable-lmcache does not support DP attention", about="enable_lmcache")
    if (ctx.get("dcp_size", 1) or 1) > 1:
        return Hit("--enable-lmcache does not support --dcp-size > 1", about="enable_lmcache")
    if ctx.get("enable_streaming_session"):
        return Hit("--enable-lmcache does not support streaming sessions", about="enable_streaming_session")
    if ctx.get("hicache_host_memory_mode") == "buffer_only":
        return Hit("--hicache-host-memory-mode buffer_only is a HiCache-only mode", about="hicache_host_memory_mode")
    if (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit("--enable-lmcache supports colocated prefill/decode only, not PD disaggregation",
                   about="disaggregation_mode")


# server_args.py:335-340 LANGUAGE_MODEL_ONLY_ARCHITECTURES
LANGUAGE_MODEL_ONLY_ARCHITECTURES = ("DeepseekV4ForCausalLM", "MuseGlimmerForConditionalGeneration",
                                     "Cosmos3ForConditionalGeneration", "Cosmos3EdgeForConditionalGeneration")


# pd_disaggregation_hook.py:352-371
ENCODER_DISAGGREGATION_ARCHITECTURES = (
    "Qwen2VLForConditionalGeneration", "Qwen3VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "Qwen3OmniMoeForConditionalGeneration",
    "Qwen2AudioForConditionalGeneration", "Qwen2_5OmniForConditionalGeneration", "Dots3NoteForCausalLM",
    "KimiVLForConditionalGeneration", "KimiK25ForConditionalGeneration", "KimiK3ForConditionalGeneration",
    "MiMoV2ForCausalLM", "Glm5NextForConditionalGeneration", "MiniMaxM3SparseForConditionalGeneration",
    "MuseSparkForConditionalGeneration")


@rule("DDT929", "--language-model-only and encoder disaggregation", reads=("language_model_only",),
      needs=(FACT_MODEL,), applies=lambda ctx: any(ctx.get(d) for d in (
          "language_model_only", "enable_prefix_mm_cache", "encoder_only", "language_only")),
      reference=f"{AG}model_hook.py:1079-1108 handle_language_model_only; "
                f"pd_disaggregation_hook.py:298-314, 352-375 handle_encoder_disaggregation")
def language_model_only(ctx: Context):
    """`--language-model-only` serves only the language model of a multimodal checkpoint: DeepSeek V4, Muse Glimmer
    and Cosmos3 only; not with --encoder-only / --language-only / --enable-prefix-mm-cache /
    --enable-broadcast-mm-inputs-process / --mm-enable-dp-encoder, nor PD disaggregation. `--enable-prefix-mm-cache`
    needs `--encoder-only`, which excludes `--language-only` and PD disaggregation; `--encoder-only` /
    `--language-only` need a multimodal architecture SGLang splits (Qwen2/2.5/3-VL, Qwen3.5/3.6, Kimi-VL, ...)."""
    if ctx.get("language_model_only"):
        for dest in ("encoder_only", "language_only", "enable_prefix_mm_cache", "enable_broadcast_mm_inputs_process",
                     "mm_enable_dp_encoder"):
            if ctx.get(dest):
                return Hit(f"--language-model-only cannot be combined with --{dest.replace('_', '-')}", about=dest)
        model_type = (ctx.model.raw or {}).get("model_type")
        if (ctx.get("disaggregation_mode") or "null") != "null" and model_type != "deepseek_v41":
            return Hit("--language-model-only is incompatible with --disaggregation-mode prefill/decode",
                       about="disaggregation_mode")
        if ctx.model.architecture not in LANGUAGE_MODEL_ONLY_ARCHITECTURES:
            return Hit(f"--language-model-only does not support {ctx.model.architecture} (only "
                       f"{', '.join(LANGUAGE_MODEL_ONLY_ARCHITECTURES)})", about="language_model_only",
                       fix="remove language-model-only", edits={"language_model_only": None})
    if ctx.get("enable_prefix_mm_cache") and not ctx.get("encoder_only"):
        return Hit("--enable-prefix-mm-cache requires --encoder-only", about="enable_prefix_mm_cache")
    if ctx.get("encoder_only") and ctx.get("language_only"):
        return Hit("--encoder-only and --language-only exclude each other", about="encoder_only")
    if ctx.get("encoder_only") and (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit("--encoder-only cannot be combined with --disaggregation-mode prefill/decode", about="encoder_only")
    split = "encoder_only" if ctx.get("encoder_only") else "language_only" if ctx.get("language_only") else None
    if split and ctx.model.architecture not in ENCODER_DISAGGREGATION_ARCHITECTURES:
        return Hit(f"--{split.replace('_', '-')} (encoder disaggregation) does not support {ctx.model.architecture}",
                   about=split, fix=f"remove {split.replace('_', '-')}", edits={split: None})


def _quantization(ctx: Context) -> str | None | bool:
    """--quantization, or False when the checkpoint's own quantization_config decides (unknown here)."""
    given = ctx.given.get("quantization")
    if given is not None:
        return given
    raw = (ctx.model.raw if ctx.model is not None else None) or {}
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    if raw.get("quantization_config") or text.get("quantization_config") or ctx.model is None or not ctx.model.known:
        return False
    return None


_RUNNER_QUANT = {
    "flashinfer_cutlass": ("modelopt_fp4", "modelopt_fp8", "modelopt_mixed", None),
    "flashinfer_cutedsl": ("modelopt_fp4", "modelopt_mixed", "nvfp4_online"),
    "flashinfer_trtllm": ("modelopt_fp4", "nvfp4_online", "fp8", "mxfp8", "modelopt_fp8", "modelopt_mixed",
                          "compressed-tensors", None),
    "experimental_sgl_trtllm": ("modelopt_fp4", "nvfp4_online", "fp8", "mxfp8", "modelopt_fp8", "modelopt_mixed",
                                "compressed-tensors", None),
    "flashinfer_trtllm_routed": ("fp8", "mxfp8", "modelopt_fp4", "modelopt_mixed", "nvfp4_online",
                                 "minimax_m3_nvfp4", None),
}


@rule("DDT930", "MoE runner backends and the quantizations they run", reads=("moe_runner_backend",),
      applies=lambda ctx: ctx.get("moe_runner_backend") in _RUNNER_QUANT,
      reference=f"{AG}moe_hook.py:70-163 handle_moe_kernel_config (assert)")
def moe_runner_quant(ctx: Context):
    """flashinfer_cutlass runs unquantized or ModelOpt FP4/FP8/mixed experts; flashinfer_cutedsl only NVFP4
    (modelopt_fp4, modelopt_mixed, nvfp4_online, or an NVFP4 checkpoint); flashinfer_trtllm(_routed) the FP4 / FP8
    family or unquantized. flashinfer_cutlass and flashinfer_cutedsl need ep-size 1 or tp-size; flashinfer_cutedsl
    runs with moe-a2a-backend none, deepep or flashinfer. (Checked where the quantization is known: --quantization,
    or a checkpoint without a quantization_config.)"""
    backend = ctx.get("moe_runner_backend")
    quant = _quantization(ctx)
    if quant is not False and quant not in _RUNNER_QUANT[backend]:
        label = "bfloat16 (no quantization)" if quant is None else repr(quant)
        return Hit(f"--moe-runner-backend {backend} does not run {label} experts (supports "
                   f"{', '.join(str(q) for q in _RUNNER_QUANT[backend] if q)})", about="moe_runner_backend",
                   fix="remove moe-runner-backend", edits={"moe_runner_backend": None})
    if backend in ("flashinfer_cutlass", "flashinfer_cutedsl"):
        ep, tp = _resolved_ep(ctx), ctx.get("tp_size", 1)
        if ep not in (1, tp):
            return Hit(f"--moe-runner-backend {backend} needs --ep-size 1 or --tp-size ({tp}), got {ep}",
                       about="ep_size")
        if backend == "flashinfer_cutedsl" and _a2a(ctx) not in ("none", "deepep", "flashinfer"):
            return Hit(f"--moe-runner-backend flashinfer_cutedsl supports --moe-a2a-backend none, deepep or "
                       f"flashinfer, not {_a2a(ctx)}", about="moe_a2a_backend")


# overrides.py:1578-1591 _A2A_EP_SPANNING_BACKENDS: these set ep-size to tp-size (overrides.py:1611-1620)
_EP_SPANNING = ("megamoe", "deepep", "deepep_v2", "mooncake", "nixl", "ascend_fuseep", "flashinfer",
                "flashinfer_megamoe", "mori", "pplx")


def _a2a(ctx: Context) -> str:
    """--moe-a2a-backend as resolved: `--moe-runner-backend megamoe` is an alias for `--moe-a2a-backend megamoe`
    (mega_moe_hook.py:259-276); Waterfill forces deepep (overrides.py:1596-1607); ascend_tp runs as none."""
    if ctx.get("moe_runner_backend") == "megamoe":
        return "megamoe"
    backend = ctx.get("moe_a2a_backend") or "none"
    if backend == "ascend_tp":
        return "none"  # moe_hook.py:459-468
    if ctx.get("enable_waterfill") and backend not in ("deepep", "megamoe"):
        return "deepep"
    return backend


def _resolved_ep(ctx: Context) -> int:
    return ctx.get("tp_size", 1) if _a2a(ctx) in _EP_SPANNING else (ctx.get("ep_size", 1) or 1)


def default_chunked_prefill(ctx: Context) -> int | None:
    """memory_hook.py:89-178 handle_gpu_memory_settings: the chunked prefill size by GPU memory (a generation-only
    GPU counts as the product `ddtctl dry-run` declares for it)."""
    if ctx.gpu is None:
        return None
    memory = ctx.gpu.memory_gb
    if not memory:
        from ddtctl.dryrun import _REPRESENTATIVE
        from ddtctl.schema.gpus import resolve_gpu

        name = _REPRESENTATIVE.get(ctx.gpu.sm)
        memory = resolve_gpu(name).memory_gb if name else 0
    if not memory:
        return None
    mb = memory * 1024
    for limit, size in ((20, 2048), (35, 4096), (60, 4096), (90, 8192), (160, 8192)):
        if mb < limit * 1024:
            return size
    return 16384


def chunked_prefill(ctx: Context) -> int | None:
    """chunked_prefill_size as the checks after handle_data_parallelism read it: the given or default size, divided
    by the attention-DP groups (parallel_hook.py:314-331)."""
    size = ctx.given.get("chunked_prefill_size")
    if size is None:
        size = -1 if ctx.get("enable_mis") else default_chunked_prefill(ctx)
    dp = attn_dp_size(ctx)
    if size is not None and dp > 1:
        size = size // dp
    return size


_FLASHINFER_MEGAMOE_ARCHITECTURES = (  # moe_hook.py:240-254 validate_flashinfer_megamoe_model
    "BeamForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
    "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM", "GlmMoeDsaForCausalLM", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "KimiK3ForConditionalGeneration",
    "KimiK3LinearForCausalLM")


# mega_moe_hook.py:51-64 MEGA_MOE_NO_FALLBACK_ARCHS: these check the per-rank token budget
_MEGA_MOE_NO_FALLBACK = ("DeepseekV4ForCausalLM", "InternS2PreviewForConditionalGeneration", "MellumForCausalLM",
                         "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
                         "Qwen3VLMoeForConditionalGeneration", "Qwen3_5MoeForCausalLM",
                         "Qwen3_5MoeForConditionalGeneration")
_MEGA_MOE_TOKENS_PER_RANK = 8192  # environ.py:1470 SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK


def default_decode_graph_bs(ctx: Context) -> int | None:
    """memory_hook.py:89-181: the decode CUDA-graph max batch size by GPU memory and tp."""
    chunk = default_chunked_prefill(ctx)
    if chunk is None:
        return None
    tp = ctx.get("tp_size", 1) or 1
    memory = ctx.gpu.memory_gb or {8192: 141, 16384: 180, 4096: 48, 2048: 16}.get(chunk, 0)
    if memory < 20:
        return 8
    if memory < 35:
        return 48 if tp < 4 else 160
    if memory < 60:
        return 32 if tp < 4 else 160
    if memory < 160:
        return 256 if tp < 4 else 512
    return 512


def _mega_moe_budget(ctx: Context):
    """mega_moe_hook.py:160-256 validate_mega_moe_token_budget (CUDA, default env)."""
    budget = _MEGA_MOE_TOKENS_PER_RANK
    mode = ctx.get("disaggregation_mode") or "null"
    tp, dp, cp = ctx.get("tp_size", 1) or 1, attn_dp_size(ctx), ctx.get("attn_cp_size", 1) or 1
    if mode != "prefill" and not ctx.is_set("cuda_graph_max_bs") and ctx.gpu is not None:
        max_bs = default_decode_graph_bs(ctx)
        if max_bs is not None and ctx.is_set("max_running_requests"):
            per_rank = ctx.get("max_running_requests") // dp
            align = max(tp // dp, 1)
            max_bs = min(max_bs, -(-per_rank // align) * align)
        per_req = 1
        if ctx.algorithm is not None:
            per_req = ctx.given.get("speculative_num_draft_tokens") or ctx.draft_tokens()
        if max_bs is not None and per_req and max_bs * per_req > budget:
            return Hit(f"MegaMoE's per-rank token budget ({budget}, SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_"
                       f"PER_RANK) is below the largest decode forward ({max_bs} x {per_req} tokens)",
                       about="moe_a2a_backend", fix="lower cuda-graph-max-bs or max-running-requests")
    if mode == "decode":
        return None
    chunk = chunked_prefill(ctx)
    if chunk is None:
        return None
    if chunk <= 0:
        return Hit(f"{ctx.model.architecture} with MegaMoE requires chunked prefill (a positive "
                   "--chunked-prefill-size)", about="chunked_prefill_size")
    if dp > 1:
        local, align = chunk // dp, max(tp // dp // cp, 1)
    else:
        local, align = chunk, max(tp // cp, 1)
    need = -(-local // align) * align
    if need > budget:
        return Hit(f"{ctx.model.architecture} with MegaMoE needs {need} prefill tokens per rank (chunked prefill "
                   f"{chunk}{'' if ctx.is_set('chunked_prefill_size') else ', the default here'}), more than "
                   f"SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK ({budget})", about="chunked_prefill_size",
                   fix=f"set chunked-prefill-size: {budget}", edits={"chunked_prefill_size": budget})
    return None


@rule("DDT931", "MoE all-to-all backends: DeepEP v2, MoRI, MegaMoE, FlashInfer dispatch", reads=("moe_a2a_backend",),
      applies=lambda ctx: _a2a(ctx) in ("deepep_v2", "mori", "megamoe", "flashinfer_megamoe")
      or ctx.get("flashinfer_a2a_dispatch_type") not in (None, "auto"),
      reference=f"{AG}moe_hook.py:405-420, 709-731 (deepep_v2); moe_hook.py:548-573, 834-837 (mori); "
                f"mega_moe_hook.py:22-48 check_mega_moe_compat, 160-256 validate_mega_moe_token_budget; "
                f"moe_hook.py:237-277, 315-335 (flashinfer_megamoe); moe_hook.py:307-313 (dispatch type)")
def a2a_backends(ctx: Context):
    """`--moe-a2a-backend deepep_v2` runs only on architectures a model package registered with
    register_deepep_v2_model (SGLang 0.5.23 registers none itself). MoRI dispatches a whole chunked-prefill chunk per
    rank: the chunked prefill size (SGLang's default is 8192 or 16384 on >= 90 GB GPUs) must not exceed
    SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (4096 unless set) except on a PD decode server or with chunked
    prefill off. MegaMoE (also `--moe-runner-backend megamoe`) needs an SM90 or SM100 GPU and no two-batch /
    single-batch overlap; on MoE blocks without a fallback (Qwen2/3 MoE, Qwen3-Next, Qwen3.5/3.6 MoE, ...) each
    rank's prefill chunk and largest decode forward must fit SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK
    (8192 by default; SGLang's default chunked prefill is 16384 on >= 160 GB GPUs). FlashInfer MegaMoE
    (`flashinfer_megamoe`) is validated for DeepSeek, GLM-4 MoE, Qwen2/3 MoE, Nemotron-H, Kimi-K3 and Beam only,
    with MXFP8 / NVFP4 experts. `--flashinfer-a2a-dispatch-type` needs `--moe-a2a-backend flashinfer`."""
    backend = _a2a(ctx)
    if backend != "flashinfer" and ctx.get("flashinfer_a2a_dispatch_type") not in (None, "auto"):
        return Hit("--flashinfer-a2a-dispatch-type requires --moe-a2a-backend flashinfer",
                   about="flashinfer_a2a_dispatch_type", fix="remove flashinfer-a2a-dispatch-type",
                   edits={"flashinfer_a2a_dispatch_type": None})
    if backend == "flashinfer_megamoe" and ctx.model is not None and ctx.model.known:
        if ctx.model.architecture not in _FLASHINFER_MEGAMOE_ARCHITECTURES:
            return Hit(f"--moe-a2a-backend flashinfer_megamoe is not validated for {ctx.model.architecture}",
                       about="moe_a2a_backend")
        if _quantization(ctx) in (None, "fp8", "modelopt_fp8", "modelopt", "w8a8_fp8"):
            return Hit("--moe-a2a-backend flashinfer_megamoe supports MXFP8 / NVFP4 (FP4) experts only, not "
                       f"{_quantization(ctx) or 'unquantized'} ones", about="moe_a2a_backend")
    if backend == "deepep_v2":
        return Hit("--moe-a2a-backend deepep_v2 is not validated for any architecture SGLang 0.5.23 ships "
                   "(a model package must call register_deepep_v2_model)", about="moe_a2a_backend",
                   fix="use moe-a2a-backend: deepep", edits={"moe_a2a_backend": "deepep"})
    if backend == "mori":
        chunk = chunked_prefill(ctx)
        if chunk is not None and chunk > 4096 and ctx.get("disaggregation_mode") != "decode":
            return Hit(f"--moe-a2a-backend mori dispatches up to --chunked-prefill-size ({chunk}) tokens per rank, "
                       "more than SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (4096 by default)",
                       about="chunked_prefill_size", fix="set chunked-prefill-size: 4096",
                       edits={"chunked_prefill_size": 4096})
    if backend == "megamoe":
        if ctx.get("enable_two_batch_overlap") or ctx.get("enable_single_batch_overlap"):
            return Hit("--moe-a2a-backend megamoe has no two-batch / single-batch overlap",
                       about="enable_two_batch_overlap")
        if ctx.gpu is not None and ctx.gpu.sm not in (90, 100, 103):
            return Hit(f"--moe-a2a-backend megamoe needs an SM90 or SM100 GPU, not {ctx.gpu.name} (sm{ctx.gpu.sm})",
                       about="moe_a2a_backend")
        if ctx.model is not None and ctx.model.architecture in _MEGA_MOE_NO_FALLBACK:
            return _mega_moe_budget(ctx)


@rule("DDT932", "EPLB and DWDP layouts", reads=("enable_eplb", "dwdp_size"),
      applies=lambda ctx: bool(ctx.get("enable_eplb")) or (ctx.get("dwdp_size", 1) or 1) > 1
      or ctx.is_set("ep_dispatch_algorithm"),
      reference=f"{AG}parallel_hook.py:433-457 handle_dwdp (assert); parallel_hook.py:750-791 "
                f"handle_eplb_and_dispatch")
def eplb_dwdp(ctx: Context):
    """`--enable-eplb` needs expert parallelism (ep-size > 1 as resolved: an EP-spanning all-to-all backend makes
    it tp-size) unless it joins by `--elastic-ep-join-mode scale`; `--ep-dispatch-algorithm static|lp` needs an
    all-to-all backend. `--dwdp-size` > 1 must equal tp-size, with no decode-only PD, EPLB, speculative decoding,
    pipeline parallelism or two-batch overlap."""
    dwdp = ctx.get("dwdp_size", 1) or 1
    if dwdp > 1:
        tp = ctx.get("tp_size", 1)
        if dwdp != tp:
            return Hit(f"--dwdp-size ({dwdp}) must equal --tp-size ({tp})", about="dwdp_size")
        for bad, why in ((ctx.get("disaggregation_mode") not in (None, "null", "prefill"),
                          "--disaggregation-mode null or prefill"),
                         (bool(ctx.get("enable_eplb")), "no --enable-eplb"),
                         (_speculative(ctx), "no speculative decoding"),
                         ((ctx.get("pp_size", 1) or 1) != 1, "--pp-size 1"),
                         (bool(ctx.get("enable_two_batch_overlap")), "no two-batch overlap")):
            if bad:
                return Hit(f"DWDP (--dwdp-size {dwdp}) requires {why}", about="dwdp_size")
    if _a2a(ctx) == "none" and ctx.get("ep_dispatch_algorithm") in ("static", "lp"):
        return Hit(f"--ep-dispatch-algorithm {ctx.get('ep_dispatch_algorithm')} needs an all-to-all backend; use "
                   "dynamic with --moe-a2a-backend none", about="ep_dispatch_algorithm")
    if ctx.get("enable_eplb") and ctx.get("ep_join_mode") != "scale" and _resolved_ep(ctx) <= 1 and dwdp <= 1:
        return Hit("--enable-eplb needs expert parallelism (--ep-size > 1)", about="enable_eplb",
                   fix="set ep-size to tp-size, or remove enable-eplb")


@rule("DDT933", "linear-attention FlashInfer kernels on SM100+ need a bfloat16 SSM state",
      reads=("linear_attn_backend", "linear_attn_decode_backend", "linear_attn_verify_backend", "mamba_ssm_dtype"),
      needs=(FACT_GPU,), applies=lambda ctx: any(ctx.is_set(d) for d in (
          "linear_attn_backend", "linear_attn_decode_backend", "linear_attn_verify_backend")),
      reference=f"{AG}attention_hook.py:280-377 handle_linear_attn_backend")
def linear_attn(ctx: Context):
    """The FlashInfer GDN decode / verify kernels on SM100 and newer need `--mamba-ssm-dtype bfloat16` (for any
    model: SGLang checks the flags, not the architecture); `--linear-attn-decode-backend flashkda` is refused
    (FlashKDA is prefill-only)."""
    if ctx.get("linear_attn_decode_backend") == "flashkda":
        return Hit("--linear-attn-decode-backend flashkda is not supported: FlashKDA is prefill-only",
                   about="linear_attn_decode_backend", edits={"linear_attn_decode_backend": None},
                   fix="use linear-attn-prefill-backend: flashkda")
    base, dtype, sm = ctx.get("linear_attn_backend"), ctx.get("mamba_ssm_dtype"), ctx.gpu.sm
    decode = ctx.get("linear_attn_decode_backend")
    if decode is None and base != "helion" and sm in (100, 103) and dtype == "bfloat16":
        decode = "flashinfer"
    decode = decode or base
    if decode == "flashkda":
        decode = "triton"
    verify = ctx.get("linear_attn_verify_backend") or ("flashinfer" if decode == "flashinfer" else None)
    for stage, backend in (("decode", decode), ("verify", verify)):
        if backend == "flashinfer" and dtype != "bfloat16" and sm >= 100:
            return Hit(f"--linear-attn-{stage}-backend flashinfer on {ctx.gpu.name} (SM100+) requires "
                       f"--mamba-ssm-dtype bfloat16, got {dtype!r}", about="mamba_ssm_dtype",
                       fix="set mamba-ssm-dtype: bfloat16", edits={"mamba_ssm_dtype": "bfloat16"})


@rule("DDT934", "options that only one model family implements",
      reads=("enable_encoder_swa_bounded_replay", "shared_experts_tp_size"), needs=(FACT_MODEL,),
      applies=lambda ctx: bool(ctx.get("enable_encoder_swa_bounded_replay"))
      or ctx.is_set("shared_experts_tp_size"),
      reference=f"{AG}model_hook.py:1036-1045 handle_model_capability_adjustments; "
                f"parallel_hook.py:202-226 handle_shared_experts_tp")
def model_gated(ctx: Context):
    """`--enable-encoder-swa-bounded-replay` needs DeepSeek-V4.1; `--shared-experts-tp-size` is a positive divisor
    of the attention TP size and Kimi-K3 only."""
    arch = ctx.model.architecture
    if ctx.get("enable_encoder_swa_bounded_replay") and (ctx.model.raw or {}).get("model_type") != "deepseek_v41":
        yield Hit(f"--enable-encoder-swa-bounded-replay requires DeepSeek-V4.1, not {arch}",
                  about="enable_encoder_swa_bounded_replay", edits={"enable_encoder_swa_bounded_replay": None})
    size = ctx.given.get("shared_experts_tp_size")
    if size is not None:
        attn_tp = max((ctx.get("tp_size", 1) or 1) // max(attn_dp_size(ctx), 1) // max(ctx.get("attn_cp_size", 1)
                                                                                        or 1, 1), 1)
        if size < 1 or attn_tp % size:
            yield Hit(f"--shared-experts-tp-size ({size}) must be a positive divisor of the attention TP size "
                      f"({attn_tp})", about="shared_experts_tp_size")
        elif arch != "KimiK3ForConditionalGeneration":
            yield Hit(f"--shared-experts-tp-size is only supported for Kimi-K3, not {arch}",
                      about="shared_experts_tp_size", edits={"shared_experts_tp_size": None})


# (dest, lowest allowed, SGLang's check): plain range checks of the resolver
_RANGES = (
    ("prefill_decode_interval", 0, "validation_hook.py:659-660"),
    ("prefill_decode_interval_min_bs", 0, "validation_hook.py:661-662"),
    ("schedule_conservativeness", 0, "validation_hook.py:314-316"),
    ("tokenizer_worker_num", 1, "validation_hook.py:273"),
    ("detokenizer_worker_num", 1, "validation_hook.py:274"),
    ("mm_processor_worker_num", 0, "validation_hook.py:275"),
    ("mm_io_worker_num", 0, "validation_hook.py:276"),
    ("base_gpu_id", 0, "validation_hook.py:204"),
    ("gpu_id_step", 1, "validation_hook.py:205"),
    ("sampling_mask_max_tokens", 1, "validation_hook.py:686-690"),
    ("swa_prefix_tails", 0, "kv_cache_hook.py:429-431 handle_cache_compatibility"),
    ("linear_replayssm_cache_len", 1, "attention_hook.py:431-435 handle_linear_attn_backend (with ReplaySSM)"),
    ("cuda_graph_prefill_max_context", 1, "cuda_graph_hook.py:423-427 _resolve_max_context_size"),
    ("asr_max_buffer_seconds", 1e-9, "serving_hook.py:124-129 handle_asr_validation"),
)


@rule("DDT935", "values SGLang range-checks", reads=tuple(d for d, _, _ in _RANGES),
      applies=lambda ctx: any(ctx.is_set(d) for d, _, _ in _RANGES) or (ctx.given.get("moe_dp_size") or 1) > 1,
      reference=f"{AG}validation_hook.py:657-662 validate_prefill_decode_interval; validation_hook.py "
                f"check_server_args; kv_cache_hook.py:429-431")
def ranges(ctx: Context):
    """Integer options SGLang range-checks at resolve time: --prefill-decode-interval(-min-bs) and
    --schedule-conservativeness non-negative; tokenizer / detokenizer workers >= 1; multimodal workers >= 0;
    --base-gpu-id >= 0, --gpu-id-step >= 1; --sampling-mask-max-tokens positive; --swa-prefix-tails non-negative;
    --linear-replayssm-cache-len >= 1 with ReplaySSM; --cuda-graph-prefill-max-context and
    --asr-max-buffer-seconds positive; --moe-dp-size divides tp-size, with ep-size x moe-dp-size = tp-size,
    pp-size 1 and attn-cp-size equal to it."""
    for dest, low, where in _RANGES:
        value = ctx.given.get(dest)
        if dest == "linear_replayssm_cache_len" and not ctx.get("enable_linear_replayssm"):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < low:
            bound = "positive" if low == 1e-9 else f">= {low}"
            yield Hit(f"--{dest.replace('_', '-')} must be {bound}, got {value} ({where})", about=dest,
                      fix=f"remove {dest.replace('_', '-')}", edits={dest: None})
    moe_dp = ctx.given.get("moe_dp_size")
    if isinstance(moe_dp, int) and moe_dp > 1:
        # parallel_hook.py:170-191 handle_context_parallelism (assert)
        tp, ep = ctx.get("tp_size", 1) or 1, _resolved_ep(ctx)
        if tp % moe_dp:
            yield Hit(f"--tp-size ({tp}) must be divisible by --moe-dp-size ({moe_dp})", about="moe_dp_size")
        elif ep * moe_dp > tp or (ep > 1 and ep * moe_dp != tp):
            yield Hit(f"ep-size x moe-dp-size ({ep} x {moe_dp}) must equal --tp-size ({tp}) (or ep-size 1)",
                      about="moe_dp_size")
        elif (ctx.get("pp_size", 1) or 1) != 1:
            yield Hit("--moe-dp-size > 1 does not support pipeline parallelism", about="moe_dp_size")
        elif (ctx.get("attn_cp_size", 1) or 1) != moe_dp:
            yield Hit(f"--moe-dp-size ({moe_dp}) must equal --attn-cp-size ({ctx.get('attn_cp_size', 1)})",
                      about="moe_dp_size")


@rule("DDT936", "PD-Multiplexing runs alone", reads=("enable_pdmux",),
      applies=lambda ctx: bool(ctx.get("enable_pdmux")),
      reference=f"{AG}validation_hook.py:248-262 check_server_args (assert)")
def pdmux(ctx: Context):
    """`--enable-pdmux` needs pp-size 1, chunked prefill off (`--chunked-prefill-size -1`: SGLang's default is on),
    no PD disaggregation and overlap scheduling off."""
    if (ctx.get("pp_size", 1) or 1) != 1:
        return Hit("PD-Multiplexing needs --pp-size 1", about="pp_size")
    chunk = chunked_prefill(ctx)
    if chunk is not None and chunk != -1:
        return Hit(f"PD-Multiplexing is not compatible with chunked prefill (--chunked-prefill-size {chunk}"
                   f"{'' if ctx.is_set('chunked_prefill_size') else ', SGLang default'}): set it to -1",
                   about="chunked_prefill_size", fix="set chunked-prefill-size: -1", edits={"chunked_prefill_size": -1})
    if (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit("PD-Multiplexing is not compatible with PD disaggregation", about="disaggregation_mode")
    if not overlap_disabled(ctx):
        return Hit("PD-Multiplexing is not compatible with overlap scheduling", about="enable_pdmux",
                   fix="set disable-overlap-schedule: true", edits={"disable_overlap_schedule": True})


def overlap_disabled(ctx: Context) -> bool:
    """disable_overlap_schedule as SGLang resolves it: given, pp > 1 (overrides.py:1623-1628), or the mamba cache's
    `auto` strategy falling back to no_buffer (overrides.py:484-486)."""
    if ctx.get("disable_overlap_schedule") or (ctx.get("pp_size", 1) or 1) > 1:
        return True
    from ddtctl.rules import mamba

    return mamba._mamba_cache_active(ctx) and mamba._effective_strategy(ctx) == "no_buffer" \
        and mamba._strategy(ctx) == "auto"


_CUDA_ONLY_TRTLLM = (90, 100, 103, 120)


@rule("DDT937", "TRT-LLM MHA backends per GPU generation", reads=("attention_backend",), needs=(FACT_GPU,),
      applies=lambda ctx: "trtllm_mha" in _involved(ctx),
      reference=f"{AG}attention_hook.py:198-237 handle_attention_backend_compatibility")
def trtllm_mha_generation(ctx: Context):
    """trtllm_mha (as resolved prefill or decode backend) runs on SM90, SM100 and SM120 only; its SM120 prefill
    (FMHAv2) does not take an fp8_e4m3 KV cache; prefill context parallelism on it needs SM100."""
    prefill, decode = backends(ctx)
    sm = ctx.gpu.sm
    if "trtllm_mha" in (prefill, decode) and sm not in _CUDA_ONLY_TRTLLM:
        return Hit(f"attention backend trtllm_mha needs SM90, SM100 or SM120, not {ctx.gpu.name} (sm{sm})",
                   fix="use attention-backend: triton or flashinfer", edits={"attention_backend": None})
    kv = resolve(ctx).kv_cache_dtype if resolve(ctx) is not None else ctx.get("kv_cache_dtype")
    if prefill == "trtllm_mha" and sm == 120 and kv == "fp8_e4m3":
        return Hit("TRT-LLM FMHAv2 prefill (trtllm_mha) on SM120 does not support an fp8_e4m3 KV cache",
                   about="kv_cache_dtype")
    if prefill == "trtllm_mha" and sm not in (100, 103) and (ctx.get("attn_cp_size", 1) or 1) > 1:
        return Hit("prefill context parallelism with the trtllm_mha prefill backend needs SM100", about="attn_cp_size")


def _involved(ctx: Context) -> set:
    res = resolve(ctx)
    if res is None:
        return {ctx.get("attention_backend"), ctx.get("prefill_attention_backend"), ctx.get("decode_attention_backend")}
    return set(res.pair)


@rule("DDT938", "feature switches that need their mode", reads=("enable_mamba_cache_stochastic_rounding",),
      applies=lambda ctx: any((
          ctx.get("enable_mamba_cache_stochastic_rounding"), (ctx.get("kv_canary_sweep_interval") or 0) > 0,
          ctx.get("retraction_policy") == "priority", ctx.get("enable_mis"), ctx.get("enable_amd_monokernel"),
          ctx.get("enable_deepseek_v4_fp4_indexer"), ctx.get("prefill_only_disable_kv_cache"),
          ctx.get("enable_page_major_kv_layout"), ctx.get("enable_linker_mla_dedup"), ctx.get("quantize_and_serve"),
          ctx.get("enable_kv_cache_sharding"), ctx.get("enable_linear_replayssm"),
          ctx.get("enable_linear_replayssm_spec"), ctx.get("radix_eviction_policy") == "tlru",
          ctx.get("dcp_comm_backend") in ("a2a", "fi_a2a"))),
      reference=f"{AG}mamba_hook.py:30-52; validation_hook.py:303-306, 374-377; attention_hook.py:572-576, 409-437; "
                "kernel_plugins/amd/binding.py:130-141, 205-217; serving_hook.py:464-470; kv_cache_hook.py:865-884, "
                "770-789; hicache_hook.py:39-43; configs/model_config.py:1968-1990; kv_shard_hook.py:99-104; "
                "parallel_hook.py:251-257; attention_hook.py:450-505; kv_cache_hook.py:375-391")
def feature_modes(ctx: Context):
    """Switches SGLang refuses outside their mode: Mamba SSM stochastic rounding needs `--mamba-ssm-dtype float16`
    (and SM100 with the triton mamba backend); `--kv-canary-sweep-interval` needs `--kv-canary log|raise`;
    `--retraction-policy priority` needs `--enable-priority-scheduling`; `--enable-mis` needs flashinfer for
    prefill and decode; `--enable-amd-monokernel` needs an AMD GPU; `--enable-deepseek-v4-fp4-indexer` needs SM100 /
    SM120; `--prefill-only-disable-kv-cache` needs `--is-embedding`; `--enable-page-major-kv-layout` needs
    `--enable-unified-memory`; `--enable-linker-mla-dedup` needs the Mooncake unified-cache linker;
    `--quantize-and-serve` needs a ModelOpt `--quantization`; `--enable-kv-cache-sharding` runs on PD prefill workers
    only; `--enable-linear-replayssm` needs a triton/helion linear decode backend, the no_buffer mamba strategy and
    no PD disaggregation; `--enable-linear-replayssm-spec` needs a linear draft chain, a triton/flashinfer linear
    decode backend, no PD prefill role and not `--enable-linear-replayssm` as well; `--radix-eviction-policy tlru`
    needs a threshold above next_prompt_estimate (both 0 unless configured); `--dcp-comm-backend a2a|fi_a2a` needs
    `--dcp-size > 1`."""
    sm = ctx.gpu.sm if ctx.gpu is not None else None
    if ctx.get("enable_mamba_cache_stochastic_rounding"):
        if ctx.get("mamba_ssm_dtype") != "float16":
            yield Hit("--enable-mamba-cache-stochastic-rounding requires --mamba-ssm-dtype float16",
                      about="enable_mamba_cache_stochastic_rounding", fix="set mamba-ssm-dtype: float16",
                      edits={"mamba_ssm_dtype": "float16"})
        elif (ctx.get("mamba_backend") or "triton") == "triton" and sm is not None and sm not in (100, 103):
            yield Hit("Mamba stochastic rounding with --mamba-backend triton needs SM100",
                      about="enable_mamba_cache_stochastic_rounding")
    if (ctx.get("kv_canary_sweep_interval") or 0) > 0 and (ctx.get("kv_canary") or "none") == "none":
        yield Hit("--kv-canary-sweep-interval requires --kv-canary log or raise", about="kv_canary_sweep_interval")
    if ctx.get("retraction_policy") == "priority" and not ctx.get("enable_priority_scheduling"):
        yield Hit("--retraction-policy priority requires --enable-priority-scheduling", about="retraction_policy",
                  fix="set enable-priority-scheduling: true", edits={"enable_priority_scheduling": True})
    if ctx.get("enable_mis") and resolve(ctx) is not None and set(resolve(ctx).pair) != {"flashinfer"}:
        yield Hit(f"--enable-mis (multi-item scoring) needs the flashinfer attention backend, not "
                  f"{'/'.join(sorted(map(str, set(resolve(ctx).pair))))}", about="enable_mis",
                  fix="set attention-backend: flashinfer", edits={"attention_backend": "flashinfer"})
    if ctx.get("enable_amd_monokernel") and ctx.gpu is not None:
        yield Hit(f"--enable-amd-monokernel needs an AMD GPU, not {ctx.gpu.name}", about="enable_amd_monokernel",
                  edits={"enable_amd_monokernel": None})
    if ctx.get("enable_deepseek_v4_fp4_indexer") and sm is not None and sm not in (100, 103, 120):
        yield Hit(f"--enable-deepseek-v4-fp4-indexer needs SM100 or SM120, not {ctx.gpu.name}",
                  about="enable_deepseek_v4_fp4_indexer")
    if ctx.get("prefill_only_disable_kv_cache") and not ctx.get("is_embedding") and ctx.model is not None and \
            str(ctx.model.architecture or "").endswith(("ForCausalLM", "ForConditionalGeneration")):
        yield Hit("--prefill-only-disable-kv-cache requires --is-embedding", about="prefill_only_disable_kv_cache")
    if ctx.get("enable_page_major_kv_layout") and not ctx.get("enable_unified_memory"):
        yield Hit("--enable-page-major-kv-layout requires --enable-unified-memory (temporarily)",
                  about="enable_page_major_kv_layout", edits={"enable_page_major_kv_layout": None})
    if ctx.get("enable_linker_mla_dedup") and not (ctx.get("enable_unified_cache_external_linker") and
                                                   ctx.get("unified_cache_external_linker_backend") == "mooncake"):
        yield Hit("--enable-linker-mla-dedup requires the Mooncake unified-cache external linker",
                  about="enable_linker_mla_dedup")
    if ctx.get("quantize_and_serve") and ctx.get("quantization") not in (
            "modelopt", "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed"):
        yield Hit("--quantize-and-serve requires a ModelOpt --quantization (modelopt, modelopt_fp8, modelopt_fp4, "
                  "nvfp4_online, modelopt_mixed)", about="quantize_and_serve")
    if ctx.get("enable_kv_cache_sharding") and ctx.get("disaggregation_mode") != "prefill":
        yield Hit("--enable-kv-cache-sharding is only supported on PD prefill workers (--disaggregation-mode prefill)",
                  about="enable_kv_cache_sharding")
    if ctx.get("enable_linear_replayssm"):
        decode = ctx.get("linear_attn_decode_backend") or ctx.get("linear_attn_backend") or "triton"
        if decode == "flashkda":
            decode = "triton"
        from ddtctl.rules import mamba

        if decode not in ("triton", "helion"):
            yield Hit(f"--enable-linear-replayssm needs the triton or helion linear decode backend, not {decode}",
                      about="enable_linear_replayssm")
        elif not mamba._at_mamba(ctx)[2] and (mamba._effective_strategy(ctx) if mamba._mamba_cache_active(ctx)
                                              else mamba._strategy(ctx)) in mamba.EXTRA:
            yield Hit("--enable-linear-replayssm requires --mamba-radix-cache-strategy no_buffer",
                      about="enable_linear_replayssm")
        elif (ctx.get("disaggregation_mode") or "null") != "null":
            yield Hit("--enable-linear-replayssm is not supported under PD disaggregation",
                      about="enable_linear_replayssm")
    if ctx.get("enable_linear_replayssm_spec"):
        decode = ctx.get("linear_attn_decode_backend") or ctx.get("linear_attn_backend") or "triton"
        if ctx.given.get("speculative_eagle_topk") not in (None, 1):
            yield Hit("--enable-linear-replayssm-spec requires a linear draft chain (--speculative-eagle-topk 1)",
                      about="enable_linear_replayssm_spec")
        elif decode not in ("triton", "flashinfer"):
            yield Hit(f"--enable-linear-replayssm-spec needs the triton or flashinfer linear decode backend, not "
                      f"{decode}", about="enable_linear_replayssm_spec")
        elif ctx.get("disaggregation_mode") == "prefill":
            yield Hit("--enable-linear-replayssm-spec is not supported on a PD prefill server",
                      about="enable_linear_replayssm_spec")
        elif ctx.get("enable_linear_replayssm"):
            yield Hit("--enable-linear-replayssm-spec and --enable-linear-replayssm exclude each other",
                      about="enable_linear_replayssm_spec")
    if ctx.get("radix_eviction_policy") == "tlru":
        config = ctx.get("radix_eviction_policy_config") or {}
        if isinstance(config, str):
            import json

            try:
                config = json.loads(config)
            except ValueError:
                config = None
        if isinstance(config, dict):
            threshold, estimate = config.get("threshold", 0), config.get("next_prompt_estimate", 0)
            if not (isinstance(threshold, (int, float)) and isinstance(estimate, (int, float))):
                pass
            elif threshold < 0 or estimate < 0:
                yield Hit("--radix-eviction-policy tlru needs non-negative threshold and next_prompt_estimate",
                          about="radix_eviction_policy_config")
            elif threshold <= estimate:
                yield Hit(f"--radix-eviction-policy tlru needs a threshold above next_prompt_estimate in "
                          f"--radix-eviction-policy-config (got {threshold} <= {estimate}; both default to 0)",
                          about="radix_eviction_policy", fix="set radix-eviction-policy-config with a threshold")
    if ctx.get("dcp_comm_backend") in ("a2a", "fi_a2a") and (ctx.get("dcp_size", 1) or 1) <= 1:
        yield Hit(f"--dcp-comm-backend {ctx.get('dcp_comm_backend')} requires --dcp-size > 1",
                  about="dcp_comm_backend", edits={"dcp_comm_backend": None})


@rule("DDT939", "--enable-nvidia-megakernel needs the sgl-nvidia-mega plugin", severity="warning",
      reads=("enable_nvidia_megakernel",), applies=lambda ctx: bool(ctx.get("enable_nvidia_megakernel")),
      reference="sglang 0.5.23 srt/kernel_plugins/nvidia/binding.py:288-298, 363-382 handle_nvidia_megakernel")
def nvidia_megakernel(ctx: Context):
    """SGLang refuses `--enable-nvidia-megakernel` unless the sgl-nvidia-mega plugin is installed on the server
    host and has a spec for the model; ddtctl cannot see either (`ddtctl dry-run` on the host can)."""
    return Hit("--enable-nvidia-megakernel needs the sgl-nvidia-mega plugin on the server host, with a spec for "
               "this model: not checked statically (run `ddtctl dry-run` on the host)",
               about="enable_nvidia_megakernel")


def _page_major_problem(ctx: Context) -> str | None:
    """kv_cache_hook.py:790-862 handle_page_major_kv_layout: the backends that read the page-major (strided) KV and
    state layout."""
    res = resolve(ctx)
    if res is not None:
        mla = is_mla(ctx)
        allowed = {"triton", "fa3", "trtllm_mla", "flashinfer", "cutedsl_mla", "flashmla"} if mla else \
            {"triton", "fa3", "fa4", "flashinfer", "trtllm_mha"}
        used = {b for b in res.pair if b is not None}
        if not used <= allowed and not (not mla and (ctx.model.raw or {}).get("v_head_dim")):
            return (f"the resolved attention backends {'/'.join(sorted(used))} are not among "
                    f"{', '.join(sorted(allowed))}")
    mla = is_mla(ctx) if ctx.model is not None and ctx.model.known else False
    decode_ok = {"triton", "flashinfer"} | ({"cutedsl", "helion"} if mla else set())
    prefill_ok = {"triton", "flashkda", "flashinfer"} | ({"cutedsl", "helion"} if mla else set())
    decode = ctx.get("linear_attn_decode_backend") or ctx.get("linear_attn_backend")
    prefill = ctx.get("linear_attn_prefill_backend") or ctx.get("linear_attn_backend")
    if decode not in decode_ok | {None}:
        return f"the linear-attention decode backend must be one of {', '.join(sorted(decode_ok))}, not {decode}"
    if prefill not in prefill_ok | {None}:
        return f"the linear-attention prefill backend must be one of {', '.join(sorted(prefill_ok))}, not {prefill}"
    if ctx.get("mamba_backend") not in (None, "triton"):
        return f"it needs --mamba-backend triton, not {ctx.get('mamba_backend')}"
    return None


_SPEC_VERIFY_AUDITED = ("triton", "trtllm_mla", "cutedsl_mla", "flashmla", "flashinfer", "fa3")  # kv_cache_hook.py:475
_SPEC_MHA_AUDITED = ("triton", "flashinfer", "fa3", "trtllm_mha")  # kv_cache_hook.py:490


@rule("DDT940", "the unified memory pool's audited combinations", reads=("enable_unified_memory",),
      needs=(FACT_MODEL,), applies=lambda ctx: bool(ctx.get("enable_unified_memory")),
      reference=f"{AG}kv_cache_hook.py:528-640 handle_unified_memory_pool (assert); kv_cache_hook.py:496-525 "
                "_assert_spec_verify_backends; kv_cache_hook.py:770-862 handle_page_major_kv_layout")
def unified_memory(ctx: Context):
    """`--enable-unified-memory` implies the page-major KV layout (its attention, linear-attention and mamba
    backend allow-lists, kv_cache_hook.py:770-862). It is audited for speculative algorithms DSPARK, DFLASH,
    EAGLE and EAGLE3 with a linear draft chain (topk 1) only; EAGLE/EAGLE3 need a unified target (a Mamba or
    sliding-window hybrid) and no hierarchical cache; DFLASH verifies on triton/flashinfer/fa3/trtllm_mha; no
    two-batch overlap, LMCache or unified-cache external linker; with PD disaggregation no pipeline parallelism and
    no speculative decoding over Mooncake."""
    problem = _page_major_problem(ctx)
    if problem:
        return Hit(f"--enable-unified-memory implies --enable-page-major-kv-layout: {problem}",
                   about="enable_unified_memory")
    algo, topk = ctx.algorithm, ctx.given.get("speculative_eagle_topk")
    pd = (ctx.get("disaggregation_mode") or "null") != "null"
    if pd and (ctx.get("pp_size", 1) or 1) != 1:
        return Hit("--enable-unified-memory with PD disaggregation does not support pipeline parallelism",
                   about="pp_size")
    if pd and algo is not None and (ctx.get("disaggregation_transfer_backend") or "mooncake") == "mooncake":
        return Hit("--enable-unified-memory with PD disaggregation does not support speculative decoding over the "
                   "Mooncake transfer backend", about="enable_unified_memory")
    if algo not in (None, "DSPARK", "DFLASH", "EAGLE", "EAGLE3"):
        return Hit(f"--enable-unified-memory supports speculative algorithms DSPARK, DFLASH, EAGLE and EAGLE3, not "
                   f"{algo}", about="enable_unified_memory")
    if algo is not None and topk not in (None, 1):
        return Hit("--enable-unified-memory supports a linear draft chain only (--speculative-eagle-topk 1)",
                   about="speculative_eagle_topk", edits={"speculative_eagle_topk": 1})
    if algo in ("EAGLE", "EAGLE3"):
        raw = ctx.model.raw or {}
        text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
        swa = bool(text.get("sliding_window") or text.get("layer_types") and "sliding_attention"
                   in text.get("layer_types", ()))
        if not ctx.is_hybrid and not swa:
            return Hit(f"--enable-unified-memory + {algo} needs a unified target (a Mamba or sliding-window hybrid), "
                       f"not {ctx.model.architecture}", about="enable_unified_memory")
        if ctx.get("enable_hierarchical_cache"):
            return Hit(f"--enable-unified-memory + {algo} does not support --enable-hierarchical-cache",
                       about="enable_hierarchical_cache")
    res = resolve(ctx)
    if algo == "DFLASH" and res is not None and not set(res.pair) <= set(_SPEC_MHA_AUDITED):
        return Hit(f"--enable-unified-memory + DFLASH verifies on {'/'.join(_SPEC_MHA_AUDITED)} only, got "
                   f"{'/'.join(sorted(map(str, set(res.pair))))}", about="attention_backend")
    for dest, what in (("enable_two_batch_overlap", "--enable-two-batch-overlap"),
                       ("enable_lmcache", "--enable-lmcache"),
                       ("enable_unified_cache_external_linker", "--enable-unified-cache-external-linker")):
        if ctx.get(dest):
            return Hit(f"--enable-unified-memory does not support {what}", about=dest)


@rule("DDT941", "attention DP groups divide tp and exclude DP replicas", reads=("attn_dp_size", "dp_size", "tp_size"),
      applies=lambda ctx: ctx.is_set("attn_dp_size") or bool(ctx.get("enable_dp_attention")),
      reference=f"{AG}parallel_hook.py:39-61 handle_deprecated_dp_attention; parallel_hook.py:285-323 "
                "handle_data_parallelism")
def attention_dp(ctx: Context):
    """Attention DP (`--attn-dp-size N`, or the deprecated `--dp-size N --enable-dp-attention`) needs a positive
    group count that divides `--tp-size`, and no data-parallel replicas (`--dp-size > 1`) next to an explicit
    `--attn-dp-size > 1`."""
    given = ctx.given.get("attn_dp_size")
    if isinstance(given, int) and given < 1:
        return Hit(f"--attn-dp-size must be positive, got {given}", about="attn_dp_size")
    dp_attn, tp = attn_dp_size(ctx), ctx.get("tp_size", 1) or 1
    replicas = ctx.get("dp_size", 1) or 1
    if ctx.get("enable_dp_attention") and (given or 1) == 1:
        replicas = 1  # the deprecated spelling moves --dp-size into attn_dp_size
    if dp_attn > 1 and replicas > 1:
        return Hit(f"--dp-size {replicas} (replicas) with --attn-dp-size {dp_attn} is not supported",
                   about="dp_size")
    if dp_attn > 1 and tp % dp_attn:
        return Hit(f"--tp-size ({tp}) must be divisible by the attention-DP size ({dp_attn})", about="attn_dp_size",
                   fix=f"set tp-size to a multiple of {dp_attn}")


# ---------------------------------------------------------------- overrides of values the launch sets (info)

# choices.py:103-111 DRAFT_ATTENTION_BACKEND_CHOICES
DRAFT_ATTENTION_BACKENDS = ("flashinfer", "fa3", "fa4", "triton", "ascend", "trtllm_mha", "intel_xpu")


def _dflash_draft_backend(ctx: Context, res: Resolution) -> str | None:
    """speculative_hook.py:886-986 _resolve_dflash_draft_attention_backend (CUDA)."""
    backend = ctx.get("speculative_draft_attention_backend")
    if backend is None:
        backend = res.pair[0]
    if backend is None:
        return "flashinfer"
    if backend not in DRAFT_ATTENTION_BACKENDS:
        return "flashinfer"
    if backend == "trtllm_mha":
        raw = (ctx.draft.raw if ctx.draft is not None else None) or {}
        text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
        layers = (raw.get("dflash_config") or {}).get("layer_types") or text.get("layer_types") or ()
        all_sliding = layers and len(layers) == text.get("num_hidden_layers") and set(layers) == {"sliding_attention"}
        if not (all_sliding or text.get("is_causal") is True):
            return "fa4" if ctx.gpu.sm in (100, 103) else "flashinfer"
    return backend


def predicted_overrides(ctx: Context) -> list[tuple[str, object, object, str]]:
    """(dest, the launch's value, SGLang's, where) for values this launch sets that SGLang's resolver replaces, as
    far as ddtctl models them (the rest: `ddtctl dry-run` lists SGLang's own overrides). Rules that report their
    own override (DDT115, DDT208, DDT307, DDT507, DDT605, DDT806, DDT904) are not repeated here."""
    out: list[tuple[str, object, object, str]] = []
    raw_algo = ctx.given.get("speculative_algorithm")
    algo = ctx.algorithm
    if raw_algo is not None and algo is not None and str(raw_algo) != algo and algo != "DDTREE":
        out.append(("speculative_algorithm", raw_algo, algo, "speculative_hook.py:162 (NEXTN is EAGLE; names are "
                                                             "upper-cased)"))
    if ctx.get("speculative_adaptive") and ctx.given.get("speculative_adaptive") and not _adaptive_effective(ctx):
        out.append(("speculative_adaptive", True, False, "speculative_hook.py:261-264, 1369-1389 "
                                                         "_maybe_disable_adaptive (EAGLE/EAGLE3 with topk 1 only)"))
    topk = ctx.given.get("speculative_eagle_topk")
    if algo == "NGRAM" and topk is not None:
        breadth = ctx.get("speculative_ngram_max_bfs_breadth") or 10
        if topk != breadth:
            out.append(("speculative_eagle_topk", topk, breadth, "speculative_hook.py:1309-1313 _handle_ngram (topk is "
                                                                 "the max BFS breadth)"))
    if algo == "DSPARK":
        for dest in ("speculative_num_steps", "speculative_eagle_topk"):
            if ctx.given.get(dest) not in (None, 1):
                out.append((dest, ctx.given.get(dest), 1, "speculative_hook.py:760-790 _handle_dspark"))
    if ctx.get("moe_runner_backend") == "megamoe":
        out.append(("moe_runner_backend", "megamoe", "auto", "mega_moe_hook.py:259-276 (an alias for "
                                                             "--moe-a2a-backend megamoe)"))
    a2a_given = ctx.given.get("moe_a2a_backend")
    a2a = _a2a(ctx)
    if a2a_given is not None and a2a != a2a_given:
        out.append(("moe_a2a_backend", a2a_given, a2a, "moe_hook.py:459-468 (ascend_tp), overrides.py:1596-1607 "
                                                       "(Waterfill), mega_moe_hook.py:259-276"))
    ep_given = ctx.given.get("ep_size")
    if ep_given is not None and _a2a(ctx) in _EP_SPANNING and ep_given != (ctx.get("tp_size", 1) or 1):
        out.append(("ep_size", ep_given, ctx.get("tp_size", 1) or 1, "overrides.py:1610-1620 _a2a_ep_size"))
    if is_deterministic(ctx) and ctx.given.get("sampling_backend") not in (None, "pytorch", "ascend"):
        out.append(("sampling_backend", ctx.given.get("sampling_backend"), "pytorch",
                    "overrides.py:1029-1036 _deterministic_sampling_backend"))
    if ctx.get("enable_dp_attention") and (ctx.given.get("attn_dp_size") or 1) == 1 and \
            (ctx.given.get("dp_size") or 1) > 1:
        out.append(("dp_size", ctx.given.get("dp_size"), 1, "parallel_hook.py:39-61 handle_deprecated_dp_attention "
                                                           f"(the deprecated spelling of --attn-dp-size "
                                                           f"{ctx.given.get('dp_size')})"))
    res = resolve(ctx)
    if res is None:
        return out
    if res.radix_disabled and not ctx.get("disable_radix_cache") and not ctx.given.get("enable_hierarchical_cache"):
        why = ("deterministic inference on attention backend " + repr(res.attention) +
               " (attention_hook.py:656-662)" if res.deterministic and res.attention not in RADIX_DETERMINISTIC_BACKENDS
               else "a PD decode server (pd_disaggregation_hook.py:98-129)"
               if ctx.get("disaggregation_mode") == "decode" else "--enable-mis (attention_hook.py:556-562)")
        out.append(("disable_radix_cache", False, True, f"no prefix caching: {why}"))
    mem = ctx.given.get("mem_fraction_static")
    context = ctx.given.get("context_length") or derived_context_length(ctx.model.raw or {}) or 0
    if res.attention == "aiter" and isinstance(mem, (int, float)) and context > 8192:
        out.append(("mem_fraction_static", mem, round(mem * 0.85, 6), "attention_hook.py:244-268 (aiter with a "
                                                                      "context above 8192 keeps 15% for workspace)"))
    for dest, value in (("attention_backend", res.final_attention), ("prefill_attention_backend", res.prefill),
                        ("decode_attention_backend", res.decode)):
        given = ctx.given.get(dest)
        if given is not None and value is not None and value != given:
            out.append((dest, given, value, "serving_hook.py:304-333 (deprecated spellings), kv_cache_hook.py:34-92 "
                                            "(NVFP4), overrides.py:1126-1266 (default fill, fa3 + fp8_e5m2)"))
    given_kv = ctx.given.get("kv_cache_dtype")
    if given_kv is not None and res.kv_cache_dtype != given_kv:
        out.append(("kv_cache_dtype", given_kv, res.kv_cache_dtype, "serving_hook.py:324-329 (tokenspeed_mla "
                                                                    "implies fp8_e4m3)"))
    page = ctx.given.get("page_size")
    if page is not None and res.final_page != page:
        out.append(("page_size", page, res.final_page, "model_overrides/qwen3_5.py:24-48, overrides.py:1142-1337 (the "
                                                 "attention backend's page sizes)"))
    if algo == "DFLASH" and ctx.given.get("speculative_draft_attention_backend") is not None:
        draft = _dflash_draft_backend(ctx, res)
        if draft != ctx.given.get("speculative_draft_attention_backend"):
            out.append(("speculative_draft_attention_backend", ctx.given.get("speculative_draft_attention_backend"),
                        draft, "speculative_hook.py:886-986 _resolve_dflash_draft_attention_backend"))
    return out


def _adaptive_effective(ctx: Context) -> bool:
    from ddtctl.rules.speculative import adaptive_effective

    return adaptive_effective(ctx)


@rule("DDT950", "SGLang overrides a value this launch sets", severity=INFO, reads=(),
      applies=lambda ctx: bool(predicted_overrides(ctx)),
      reference=f"{AG} declare_resolution / register_post_process overrides (inventory: ddtctl/rules/overrides.yaml)")
def overridden(ctx: Context):
    """SGLang accepts the launch but runs with a different value than the one given: a deprecated or lower-case
    spelling, a backend or page size the attention backend or the model needs, an all-to-all backend's EP size,
    adaptive speculation where it cannot run, NGRAM's topk. Reported so the launch can say what runs."""
    for dest, given, value, where in predicted_overrides(ctx):
        flag = dest.replace("_", "-")
        yield Hit(f"SGLang runs --{flag} {value} instead of {given} ({where})", about=dest, severity=INFO,
                  fix=f"set {flag}: {value}", edits={dest: value})
