"""SGLang's attention-backend / page-size / radix-cache resolution, as far as ddtctl models it (`resolve`).

The checks of the other hook modules read the backends and page size SGLang settles on, not the flags as
given: deprecated spellings, model overrides, deterministic inference, NVFP4, the default fill and the page
snaps, in the order of sglang 0.5.23 srt/arg_groups/pipeline.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddtctl.rules.engine import Context
from ddtctl.rules.hooks.common import is_mla

# arg_groups/serving_hook.py:304 handle_deprecated_args: deprecated backend spellings.
BACKEND_ALIASES = {"compressed": "dsv4", "tokenspeed_mla": "cutedsl_mla"}
# model_overrides/qwen3_5.py:17-23 _qwen3_5_hybrid_overrides (Qwen3_5ForCausalLM is not registered there).
QWEN35_HYBRID_OVERRIDE = (
    "Qwen3NextForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration",
    "InternS2MobiusForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
)
# model_overrides/deepseek_v2.py:37-49 _deepseek_family_overrides.
DEEPSEEK_FAMILY = (
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "Glm5NextForConditionalGeneration",
)
# overrides.py:1039-1058 _deterministic_is_deepseek_model; attention_hook.py:626-635.
DETERMINISTIC_DEEPSEEK = (
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "Glm5NextForConditionalGeneration",
)
# choices.py:113-120, 249.
DETERMINISTIC_BACKENDS = ("ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton")
RADIX_DETERMINISTIC_BACKENDS = ("ascend", "fa3", "fa4", "triton")
_NVFP4_PREFILL = {"fp8_e4m3": "flashinfer", "nvfp4": "trtllm_mha"}  # kv_cache_hook.py:25-31


@dataclass
class Resolution:
    """SGLang's attention-related fields after its resolution pipeline (as far as ddtctl models it).
    `attention`, `prefill` and `decode` are the fields (prefill / decode None: `attention` serves)."""

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
    # what runs in the end: the DDTREE payload declares attention_backend=triton in the speculative hook when
    # no backend is set (DDT115), after the checks above read the GPU's default (whose page snap stays)
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
    """utils/common.py:3960 is_no_spec_infer_or_topk_one (reads the raw topk, algorithm or not)."""
    return topk is None or (topk == 1 and page in (1, None))


def _default_backend(ctx: Context, page, mla: bool) -> str:
    """model_override_base.py:277-351 get_default_attn_backend (CUDA)."""
    sm, topk = ctx.known_gpu.sm, ctx.given.get("speculative_eagle_topk")
    raw_algo = str(ctx.given.get("speculative_algorithm") or "").upper() or None
    if ctx.given.get("enable_return_aux_hidden_states"):
        raw_algo = None
    if mla:
        return {90: "fa3", 100: "flashinfer", 103: "flashinfer"}.get(sm, "triton")
    if sm == 90 and _no_spec_or_topk_one(topk, page):
        return "fa3"
    # DFLASH's topk is declared later (model_override_base.py:268 _forces_eagle_topk_one, by name: not DDTREE)
    if (
        sm in (100, 103)
        and _no_spec_or_topk_one(topk, page)
        and (raw_algo is None or topk is not None or raw_algo == "DFLASH")
    ):
        return "trtllm_mha"
    return "flashinfer"


def resolve(ctx: Context) -> Resolution | None:
    """SGLang's attention backends and page size for this launch, in its pipeline's order
    (arg_groups/pipeline.py): deprecated spellings (serving_hook.py:304-333), model overrides
    (model_hook.py:233; qwen3_5.py:24-48, deepseek_v2.py:179-185), the mamba cache pass (model_hook.py:737),
    deterministic inference (attention_hook.py:580-662, overrides.py:1093-1123), NVFP4 backends
    (kv_cache_hook.py:34-92), the default fill and page snaps (attention_hook.py:110-277;
    overrides.py:1127-1337). None: unknown (no GPU or model)."""
    if ctx.gpu is None or ctx.model is None or not ctx.model.known:
        return None
    errors: list = []
    raw = {
        d: ctx.get(d)
        for d in (
            "attention_backend",
            "prefill_attention_backend",
            "decode_attention_backend",
            "speculative_draft_attention_backend",
        )
    }
    att, pre, dec, draft, kv = _undeprecated(raw, ctx.get("kv_cache_dtype") or "auto")
    page = ctx.given.get("page_size")
    radix_off = bool(ctx.get("disable_radix_cache"))
    if ctx.get("disaggregation_mode") == "decode":
        # pd_disaggregation_hook.py:98-129: a decode server runs without the radix cache unless asked for it
        radix_off = not ctx.get("disaggregation_decode_enable_radix_cache")
    att, page = _model_override(ctx, att, pre, dec, page, radix_off)
    page_at_mamba, attention_at_mamba, radix_at_mamba = page, att, radix_off
    deterministic = is_deterministic(ctx)
    if deterministic:
        att, radix_off = _deterministic_backend(ctx, att, radix_off, errors)
    if kv == "nvfp4":
        pre, dec = _nvfp4_backends(ctx, att, pre, dec, errors)
    # default fill (overrides.py:1126-1140)
    if pre is not None and pre == dec:
        att = pre
    elif att is None:
        att = _default_backend(ctx, page, is_mla(ctx))
    att, pre, page_now = _page_snaps(ctx, att, pre, dec, draft, kv, page)
    if ctx.get("enable_mis"):
        radix_off = True  # attention_hook.py:556-562 handle_multi_item_scoring
    out = Resolution(
        att,
        pre,
        dec,
        draft,
        page_now or 1,
        page_at_mamba,
        attention_at_mamba,
        radix_at_mamba,
        kv,
        deterministic,
        radix_off,
        errors,
    )
    if ctx.algorithm == "DDTREE" and all(
        raw[d] is None for d in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    ):
        # ddtree/core.py DDT115 (the payload's resolution.py apply_findings, in the speculative hook): the
        # page size snapped earlier for the GPU's default backend (e.g. DeepSeek's trtllm_mla -> 64) stays
        out.final_attention = "triton"
    return out


def known_resolution(ctx: Context) -> Resolution:
    """`resolve` where it cannot be None: in a rule that needs FACT_GPU and FACT_MODEL (run_rules skips it
    while either is unknown)."""
    res = resolve(ctx)
    if res is None:
        raise RuntimeError("resolve() read without needs=(FACT_GPU, FACT_MODEL)")
    return res


def _undeprecated(
    raw: dict[str, str | None], kv: str
) -> tuple[str | None, str | None, str | None, str | None, str]:
    """(attention, prefill, decode, draft backend, kv-cache dtype) after serving_hook.py:304-333
    handle_deprecated_args rewrites the deprecated backend spellings."""
    att, pre, dec, draft = (None if v is None else BACKEND_ALIASES.get(v, v) for v in raw.values())
    if raw["prefill_attention_backend"] == "tokenspeed_mla":
        pre = "trtllm_mla"  # serving_hook.py:320-322: cutedsl_mla is decode-only
    if "tokenspeed_mla" in (raw["attention_backend"], raw["decode_attention_backend"]):
        kv = "fp8_e4m3"  # serving_hook.py:324-329
    return att, pre, dec, draft, kv


def _model_override(
    ctx: Context, att: str | None, pre: str | None, dec: str | None, page: int | None, radix_off: bool
) -> tuple[str | None, int | None]:
    """(attention backend, page size) after the model's own overrides (model_hook.py:233; qwen3_5.py:24-48,
    deepseek_v2.py:179-185)."""
    sm, arch = ctx.known_gpu.sm, ctx.known_model.architecture
    if arch in QWEN35_HYBRID_OVERRIDE and sm in (100, 103) and att is None:
        strategy = ctx.get("mamba_radix_cache_strategy") or "auto"
        extra = not radix_off and strategy in ("extra_buffer", "extra_buffer_lazy")
        default = _default_backend(ctx, page, False)
        att = (
            "trtllm_mha"
            if default == "trtllm_mha" and (extra or radix_off or ctx.algorithm is not None)
            else "triton"
        )
        page = 64 if att == "trtllm_mha" else 1
    elif (
        arch in DEEPSEEK_FAMILY
        and sm in (100, 103)
        and att is None
        and pre is None
        and dec is None
        and not is_dsa(ctx)
    ):
        att = "trtllm_mla"
    return att, page


def _deterministic_backend(
    ctx: Context, att: str | None, radix_off: bool, errors: list
) -> tuple[str | None, bool]:
    """(attention backend, radix cache off) under deterministic inference (attention_hook.py:580-662,
    overrides.py:1093-1123); its refusals are appended to `errors`."""
    sm, arch = ctx.known_gpu.sm, ctx.known_model.architecture
    if att is None:
        att = ("triton" if arch in DETERMINISTIC_DEEPSEEK else "flashinfer") if sm >= 100 else "fa3"
    elif att not in DETERMINISTIC_BACKENDS:
        errors.append(
            (
                "deterministic",
                "overrides.py:1116-1121 _deterministic_attention_backend",
                f"--enable-deterministic-inference supports attention backends "
                f"{', '.join(DETERMINISTIC_BACKENDS)}, not {att!r}",
            )
        )
    if att not in RADIX_DETERMINISTIC_BACKENDS:
        if arch in DETERMINISTIC_DEEPSEEK:
            errors.append(
                (
                    "deterministic",
                    "attention_hook.py:643-647 handle_deterministic_inference",
                    f"deterministic inference on {arch} needs attention backend "
                    f"{' / '.join(RADIX_DETERMINISTIC_BACKENDS)}, got {att!r}",
                )
            )
        radix_off = True  # attention_hook.py:656-662
    return att, radix_off


def _nvfp4_backends(
    ctx: Context, att: str | None, pre: str | None, dec: str | None, errors: list
) -> tuple[str | None, str | None]:
    """(prefill, decode) an NVFP4 KV cache picks (kv_cache_hook.py:34-92); refusals go to `errors`."""
    sm = ctx.known_gpu.sm
    requested = ctx.get("prefill_kv_cache_dequant_dtype") or "auto"
    if requested == "auto":
        explicit = pre or att
        if explicit in ("flashinfer", "trtllm_mha"):
            requested = "fp8_e4m3" if explicit == "flashinfer" else "nvfp4"
        elif explicit is not None:
            errors.append(
                (
                    "nvfp4",
                    "kv_cache_hook.py:48-55 handle_nvfp4_prefill_kv_dequant_dtype",
                    f"--kv-cache-dtype nvfp4 prefills from an FP8 E4M3 workspace (flashinfer) or native "
                    f"NVFP4 (trtllm_mha), but attention backend {explicit!r} provides neither",
                )
            )
            requested = None
        else:
            requested = "nvfp4" if sm in (100, 103) else "fp8_e4m3"
    if requested is None:
        return pre, dec
    if requested == "nvfp4" and sm not in (100, 103):
        errors.append(
            (
                "nvfp4",
                "kv_cache_hook.py:59-63 handle_nvfp4_prefill_kv_dequant_dtype",
                "native NVFP4 prefill needs SM100: use --prefill-kv-cache-dequant-dtype fp8_e4m3",
            )
        )
    target = _NVFP4_PREFILL.get(requested)
    if pre is not None and target is not None and pre != target:
        errors.append(
            (
                "nvfp4",
                "kv_cache_hook.py:66-76 handle_nvfp4_prefill_kv_dequant_dtype",
                f"NVFP4 prefill dequant {requested} needs prefill backend {target!r}, not {pre!r}",
            )
        )
    if dec not in (None, "trtllm_mha"):
        errors.append(
            (
                "nvfp4",
                "kv_cache_hook.py:78-84 handle_nvfp4_prefill_kv_dequant_dtype",
                f"NVFP4 decode needs --decode-attention-backend trtllm_mha, not {dec!r}",
            )
        )
    if not any(kind == "nvfp4" for kind, _, _ in errors):
        return target, "trtllm_mha"
    return pre, dec


def _page_snaps(
    ctx: Context, att: str, pre: str | None, dec: str | None, draft: str | None, kv: str, page: int | None
) -> tuple[str, str | None, int | None]:
    """(attention, prefill, page size) after the backends' page snaps and fills (overrides.py:1142-1337)."""
    sm, mla, topk = ctx.known_gpu.sm, is_mla(ctx), ctx.given.get("speculative_eagle_topk")
    both = (att, pre, dec)
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
    return att, pre, page_now


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
    if res is not None and res.final_page is not None:  # final_page: set by __post_init__
        return res.final_page
    return ctx.get("page_size") or 1


def effective_attention(ctx: Context) -> tuple[str | None, int]:
    """(attention backend, page size) as SGLang will run them, where ddtctl knows its auto-selection
    (resolved_attention / resolved_page)."""

    backend = resolved_attention(ctx)
    return backend, resolved_page(ctx, backend)


def backends(ctx: Context) -> tuple[str | None, str | None]:
    """(prefill, decode) backends as attention_backends_of (model_override_base.py:138) reads them."""
    res = resolve(ctx)
    if res is None:
        main = resolved_attention(ctx)
        return (ctx.get("prefill_attention_backend") or main, ctx.get("decode_attention_backend") or main)
    return res.pair


_DSA_ARCHITECTURES = (
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLMNextN",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "GlmMoeDsaForCausalLMNextN",
    "Glm5NextForConditionalGenerationNextN",
    "Glm5NextForConditionalGeneration",
    "LongcatFlashForCausalLM",
    "LongcatFlashForCausalLMNextN",
    "Dots3NoteForCausalLM",
    "Dots3NoteForCausalLMNextN",
    "HYV4ForCausalLM",
    "HYV4ForCausalLMNextN",
)


def is_dsa(ctx: Context) -> bool:
    """configs/model_config.py:191-212 is_deepseek_dsa: a DSA architecture whose config sets index_topk."""
    model = ctx.known_model
    raw = model.raw or {}
    config: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    return model.architecture in _DSA_ARCHITECTURES and config.get("index_topk") is not None
