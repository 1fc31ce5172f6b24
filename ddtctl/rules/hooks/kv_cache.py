"""KV-cache checks of sglang 0.5.23 srt/arg_groups/kv_cache_hook.py: FP4 / MXFP8 caches x GPU x attention
backend, the hierarchical cache, LMCache and the unified memory pool.
"""

from __future__ import annotations

from typing import Any

from ddtctl.rules.engine import FACT_GPU, FACT_MODEL, Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size, is_mla, is_speculative
from ddtctl.rules.hooks.resolution import RADIX_DETERMINISTIC_BACKENDS, known_resolution, resolve


@rule(
    "DDT910",
    "FP4 / MXFP8 KV caches need Blackwell",
    reads=("kv_cache_dtype",),
    needs=(FACT_GPU,),
    applies=lambda ctx: ctx.get("kv_cache_dtype") in ("mxfp8", "nvfp4"),
    reference=f"{AG}kv_cache_hook.py:105-109 handle_mxfp8_kv_cache_compatibility; "
    f"kv_cache_hook.py:125-131 handle_kv4_compatibility",
)
def kv_dtype_generation(ctx: Context):
    """`--kv-cache-dtype mxfp8` needs an SM100+ (Blackwell) GPU; `nvfp4` needs SM100 or SM120."""
    gpu = ctx.known_gpu
    dtype, sm = ctx.get("kv_cache_dtype"), gpu.sm
    if dtype == "mxfp8" and sm < 100:
        return Hit(
            f"--kv-cache-dtype mxfp8 requires a Blackwell (SM100+) GPU, not {gpu.name} (sm{sm})",
            fix="use kv-cache-dtype: fp8_e4m3",
            edits={"kv_cache_dtype": "fp8_e4m3"},
        )
    if dtype == "nvfp4" and sm not in (100, 120):
        return Hit(
            f"--kv-cache-dtype nvfp4 requires SM100 or SM120, not {gpu.name} (sm{sm})",
            fix="use kv-cache-dtype: fp4_mx_block16",
            edits={"kv_cache_dtype": "fp4_mx_block16"},
        )


_KV4_MHA = ("triton", "torch_native", "flex_attention", "trtllm_mha")
_KV4_MLA = ("flashinfer", "trtllm_mla")
_KV4_FA4_MHA = ("triton", "torch_native", "flex_attention")
_NATIVE_NVFP4_SPEC = ("EAGLE", "EAGLE3", "NGRAM")  # kv_cache_hook.py:159-164 (NEXTN is EAGLE)


@rule(
    "DDT911",
    "FP4 KV cache runs on the FP4-capable attention backends",
    reads=("kv_cache_dtype", "attention_backend"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: ctx.get("kv_cache_dtype") in ("nvfp4", "fp4_mx_block16"),
    reference=f"{AG}kv_cache_hook.py:112-320 handle_kv4_compatibility",
)
def kv4_backend(ctx: Context):
    """FP4 KV caches (nvfp4, fp4_mx_block16), with the backends SGLang resolves (an nvfp4 cache picks its own:
    flashinfer prefill + trtllm_mha decode, or trtllm_mha for both on SM100). One backend for prefill and
    decode (not FA4 prefill) must be triton, torch_native, flex_attention or trtllm_mha (MHA models),
    flashinfer or trtllm_mla (MLA models); FA4 prefill needs a matching decode backend. Native NVFP4 on SM100
    trtllm_mha supports EAGLE/EAGLE3/NEXTN and breadth-1 NGRAM only, with a trtllm_mha draft backend, and no
    PD disaggregation, hierarchical cache or LMCache. No FP4 KV cache runs with --enable-unified-memory."""
    res, sm = known_resolution(ctx), ctx.known_gpu.sm
    dtype = res.kv_cache_dtype
    if dtype == "nvfp4" and sm not in (100, 103, 120):
        return None  # DDT910
    if any(kind == "nvfp4" for kind, _, _ in res.errors):
        return None  # DDT927
    if ctx.get("enable_unified_memory"):
        return Hit(
            "FP4 KV caches do not support --enable-unified-memory",
            about="enable_unified_memory",
            fix="remove enable-unified-memory",
            edits={"enable_unified_memory": None},
        )
    prefill, decode = res.pair
    native = dtype == "nvfp4" and sm in (100, 103) and "trtllm_mha" in (prefill, decode)
    algo = ctx.algorithm
    if native and algo is not None:
        if algo not in _NATIVE_NVFP4_SPEC:
            return Hit(
                f"native NVFP4 KV (trtllm_mha on SM100) supports speculative algorithms EAGLE, EAGLE3, NEXTN "
                f"and breadth-1 NGRAM, not {algo}",
                about="speculative_algorithm",
            )
        if algo == "NGRAM" and (ctx.get("speculative_ngram_max_bfs_breadth") or 10) != 1:
            return Hit(
                "native NVFP4 KV with NGRAM needs --speculative-ngram-max-bfs-breadth 1 (trtllm_mha verifies "
                "linear chains only)",
                about="speculative_ngram_max_bfs_breadth",
                fix="set speculative-ngram-max-bfs-breadth: 1",
                edits={"speculative_ngram_max_bfs_breadth": 1},
            )
        if algo != "NGRAM" and res.draft not in (None, "trtllm_mha"):
            return Hit(
                "native NVFP4 KV speculative decoding needs --speculative-draft-attention-backend "
                f"trtllm_mha, not {res.draft!r}",
                about="speculative_draft_attention_backend",
                fix="remove speculative-draft-attention-backend",
                edits={"speculative_draft_attention_backend": None},
            )
    if native and (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit(
            "native NVFP4 KV (trtllm_mha on SM100) does not support PD disaggregation",
            about="disaggregation_mode",
        )
    if native and (ctx.get("enable_hierarchical_cache") or ctx.get("enable_lmcache")):
        return Hit(
            "native NVFP4 KV (trtllm_mha on SM100) does not support the hierarchical cache or LMCache",
            about="enable_hierarchical_cache" if ctx.get("enable_hierarchical_cache") else "enable_lmcache",
        )
    if prefill != decode and prefill != "fa4":
        return None  # a split pair only warns (kv_cache_hook.py:264-272)
    chosen = "" if ctx.is_set("attention_backend") else " (chosen by SGLang for this model and GPU)"
    allowed: tuple[str, ...]
    if prefill == "fa4":
        allowed = _KV4_MLA if is_mla(ctx) else _KV4_FA4_MHA
        if decode not in allowed:
            return Hit(
                f"--kv-cache-dtype {dtype} with FA4 prefill needs decode backend {' / '.join(allowed)}, "
                f"got {decode!r}",
                about="decode_attention_backend",
                fix=f"set decode-attention-backend: {allowed[0]}",
                edits={"decode_attention_backend": allowed[0]},
            )
        return None
    allowed = _KV4_MLA if is_mla(ctx) else _KV4_MHA
    if res.attention not in allowed:
        return Hit(
            f"--kv-cache-dtype {dtype} needs attention backend {' / '.join(allowed)}, "
            f"got {res.attention!r}{chosen}",
            about="kv_cache_dtype",
            fix=f"set attention-backend: {allowed[0]}",
            edits={"attention_backend": allowed[0]},
        )


@rule(
    "DDT927",
    "NVFP4 KV cache picks its own prefill and decode backends",
    reads=("kv_cache_dtype", "prefill_kv_cache_dequant_dtype"),
    needs=(FACT_GPU, FACT_MODEL),
    applies=lambda ctx: (
        ctx.get("kv_cache_dtype") == "nvfp4"
        or (ctx.get("prefill_kv_cache_dequant_dtype") or "auto") != "auto"
    ),
    reference=f"{AG}kv_cache_hook.py:34-92 handle_nvfp4_prefill_kv_dequant_dtype",
)
def nvfp4_backends(ctx: Context):
    """`--prefill-kv-cache-dequant-dtype` applies only to `--kv-cache-dtype nvfp4`. With nvfp4, SGLang chooses
    the prefill backend from the dequant dtype (fp8_e4m3 -> flashinfer; nvfp4 -> trtllm_mha, SM100 only) and
    decodes on trtllm_mha: an explicit attention / prefill backend other than flashinfer or trtllm_mha, a
    prefill backend that contradicts the dequant dtype, or a decode backend other than trtllm_mha is
    refused."""
    if ctx.get("kv_cache_dtype") != "nvfp4":
        return Hit(
            "--prefill-kv-cache-dequant-dtype applies only with --kv-cache-dtype nvfp4",
            about="prefill_kv_cache_dequant_dtype",
            fix="remove prefill-kv-cache-dequant-dtype",
            edits={"prefill_kv_cache_dequant_dtype": None},
        )
    if ctx.known_gpu.sm not in (100, 103, 120):
        return None  # DDT910
    for kind, where, message in known_resolution(ctx).errors:
        if kind == "nvfp4":
            return Hit(
                f"{message} ({where})",
                about="kv_cache_dtype",
                fix="remove the attention backend flags (nvfp4 selects its own)",
                edits={
                    d: None
                    for d in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
                    if ctx.is_set(d)
                },
            )


@rule(
    "DDT915",
    "hierarchical cache and KV offload need the radix cache / decode side",
    reads=("enable_hierarchical_cache", "disaggregation_decode_enable_offload_kvcache"),
    applies=lambda ctx: (
        bool(ctx.get("enable_hierarchical_cache"))
        or bool(ctx.get("disaggregation_decode_enable_offload_kvcache"))
        or ctx.get("disaggregation_decode_retraction_backup") == "host_pool"
    ),
    reference=f"{AG}kv_cache_hook.py:353-374, 393-403 handle_cache_compatibility; attention_hook.py:656-662; "
    f"pd_disaggregation_hook.py:98-129; attention_hook.py:556-562",
)
def hicache(ctx: Context):
    """`--enable-hierarchical-cache` needs the radix cache: not with `--disable-radix-cache`, nor where SGLang
    turns it off itself (deterministic inference on a backend other than ascend/fa3/fa4/triton, a PD decode
    server without `--disaggregation-decode-enable-radix-cache`, `--enable-mis`).
    `--disaggregation-decode-enable-offload-kvcache` is only for `--disaggregation-mode decode`, as is
    `--disaggregation-decode-retraction-backup host_pool` (no --dcp-size > 1; with priority scheduling it
    needs --disable-priority-preemption)."""
    if ctx.get("disaggregation_decode_retraction_backup") == "host_pool":
        if ctx.get("disaggregation_mode") != "decode":
            return Hit(
                "--disaggregation-decode-retraction-backup host_pool is only supported on a PD decode server",
                about="disaggregation_decode_retraction_backup",
                edits={"disaggregation_decode_retraction_backup": None},
            )
        if (ctx.get("dcp_size", 1) or 1) > 1:
            return Hit(
                "--disaggregation-decode-retraction-backup host_pool does not support --dcp-size > 1",
                about="disaggregation_decode_retraction_backup",
            )
        if ctx.get("enable_priority_scheduling") and not ctx.get("disable_priority_preemption"):
            return Hit(
                "--disaggregation-decode-retraction-backup host_pool with priority scheduling needs "
                "--disable-priority-preemption",
                about="disaggregation_decode_retraction_backup",
            )
    res = resolve(ctx)
    radix_off = res.radix_disabled if res is not None else bool(ctx.get("disable_radix_cache"))
    if ctx.get("enable_hierarchical_cache") and radix_off:
        if ctx.get("disable_radix_cache"):
            return Hit(
                "--enable-hierarchical-cache and --disable-radix-cache are mutually exclusive",
                about="disable_radix_cache",
                fix="remove disable-radix-cache",
            )
        why = (
            "deterministic inference on attention backend " + repr(res.attention)
            if res is not None and res.deterministic and res.attention not in RADIX_DETERMINISTIC_BACKENDS
            else "a PD decode server"
            if ctx.get("disaggregation_mode") == "decode"
            else "--enable-mis"
        )
        return Hit(
            f"--enable-hierarchical-cache needs the radix cache, which SGLang turns off for {why}",
            about="enable_hierarchical_cache",
            fix="remove enable-hierarchical-cache",
            edits={"enable_hierarchical_cache": None},
        )
    if ctx.get("disaggregation_decode_enable_offload_kvcache") and ctx.get("disaggregation_mode") != "decode":
        return Hit(
            "--disaggregation-decode-enable-offload-kvcache is only supported with "
            "--disaggregation-mode decode",
            about="disaggregation_decode_enable_offload_kvcache",
        )


@rule(
    "DDT928",
    "LMCache runs alone: radix cache on, no speculative decoding, no DP attention",
    reads=("enable_lmcache",),
    applies=lambda ctx: bool(ctx.get("enable_lmcache")),
    reference=f"{AG}kv_cache_hook.py:433-473 handle_cache_compatibility",
)
def lmcache(ctx: Context):
    """`--enable-lmcache` excludes `--enable-hierarchical-cache` and the unified-cache external linker, needs
    the radix cache (also when SGLang turns it off itself, e.g. a PD decode server or deterministic inference
    on a non-radix backend), and does not support speculative decoding, attention DP, `--dcp-size > 1`,
    streaming sessions, `--hicache-host-memory-mode buffer_only` or PD disaggregation."""
    res = resolve(ctx)
    radix_off = res.radix_disabled if res is not None else bool(ctx.get("disable_radix_cache"))
    if ctx.get("enable_hierarchical_cache"):
        return Hit(
            "--enable-lmcache and --enable-hierarchical-cache are mutually exclusive",
            about="enable_hierarchical_cache",
            fix="remove enable-hierarchical-cache",
            edits={"enable_hierarchical_cache": None},
        )
    if ctx.get("enable_unified_cache_external_linker"):
        return Hit(
            "--enable-lmcache and --enable-unified-cache-external-linker are mutually exclusive",
            about="enable_unified_cache_external_linker",
        )
    if radix_off:
        return Hit(
            "--enable-lmcache requires the radix cache"
            + ("" if ctx.get("disable_radix_cache") else " (SGLang turns it off for this launch)"),
            about="disable_radix_cache" if ctx.get("disable_radix_cache") else "enable_lmcache",
        )
    if is_speculative(ctx):
        return Hit(
            "--enable-lmcache does not support speculative decoding (LMCacheUnifiedRadixCache)",
            about="enable_lmcache",
            fix="remove enable-lmcache",
            edits={"enable_lmcache": None},
        )
    if attn_dp_size(ctx) > 1:
        return Hit("--enable-lmcache does not support DP attention", about="enable_lmcache")
    if (ctx.get("dcp_size", 1) or 1) > 1:
        return Hit("--enable-lmcache does not support --dcp-size > 1", about="enable_lmcache")
    if ctx.get("enable_streaming_session"):
        return Hit("--enable-lmcache does not support streaming sessions", about="enable_streaming_session")
    if ctx.get("hicache_host_memory_mode") == "buffer_only":
        return Hit(
            "--hicache-host-memory-mode buffer_only is a HiCache-only mode", about="hicache_host_memory_mode"
        )
    if (ctx.get("disaggregation_mode") or "null") != "null":
        return Hit(
            "--enable-lmcache supports colocated prefill/decode only, not PD disaggregation",
            about="disaggregation_mode",
        )


def _page_major_problem(ctx: Context) -> str | None:
    """kv_cache_hook.py:790-862 handle_page_major_kv_layout: the backends that read the page-major (strided)
    KV and state layout."""
    res = resolve(ctx)
    if res is not None:
        mla = is_mla(ctx)
        allowed = (
            {"triton", "fa3", "trtllm_mla", "flashinfer", "cutedsl_mla", "flashmla"}
            if mla
            else {"triton", "fa3", "fa4", "flashinfer", "trtllm_mha"}
        )
        used = {b for b in res.pair if b is not None}
        if not used <= allowed and not (not mla and (ctx.known_model.raw or {}).get("v_head_dim")):
            return (
                f"the resolved attention backends {'/'.join(sorted(used))} are not among "
                f"{', '.join(sorted(allowed))}"
            )
    mla = is_mla(ctx) if ctx.model is not None and ctx.model.known else False
    decode_ok = {"triton", "flashinfer"} | ({"cutedsl", "helion"} if mla else set())
    prefill_ok = {"triton", "flashkda", "flashinfer"} | ({"cutedsl", "helion"} if mla else set())
    decode = ctx.get("linear_attn_decode_backend") or ctx.get("linear_attn_backend")
    prefill = ctx.get("linear_attn_prefill_backend") or ctx.get("linear_attn_backend")
    if decode not in decode_ok | {None}:
        return (
            f"the linear-attention decode backend must be one of {', '.join(sorted(decode_ok))}, not {decode}"
        )
    if prefill not in prefill_ok | {None}:
        return (
            f"the linear-attention prefill backend must be one of {', '.join(sorted(prefill_ok))}, "
            f"not {prefill}"
        )
    if ctx.get("mamba_backend") not in (None, "triton"):
        return f"it needs --mamba-backend triton, not {ctx.get('mamba_backend')}"
    return None


_SPEC_VERIFY_AUDITED = (
    "triton",
    "trtllm_mla",
    "cutedsl_mla",
    "flashmla",
    "flashinfer",
    "fa3",
)  # kv_cache_hook.py:475
_SPEC_MHA_AUDITED = ("triton", "flashinfer", "fa3", "trtllm_mha")  # kv_cache_hook.py:490


@rule(
    "DDT940",
    "the unified memory pool's audited combinations",
    reads=("enable_unified_memory",),
    needs=(FACT_MODEL,),
    applies=lambda ctx: bool(ctx.get("enable_unified_memory")),
    reference=f"{AG}kv_cache_hook.py:528-640 handle_unified_memory_pool (assert); kv_cache_hook.py:496-525 "
    "_assert_spec_verify_backends; kv_cache_hook.py:770-862 handle_page_major_kv_layout",
)
def unified_memory(ctx: Context):
    """`--enable-unified-memory` implies the page-major KV layout (its attention, linear-attention and mamba
    backend allow-lists, kv_cache_hook.py:770-862). It is audited for speculative algorithms DSPARK, DFLASH,
    EAGLE and EAGLE3 with a linear draft chain (topk 1) only; EAGLE/EAGLE3 need a unified target (a Mamba or
    sliding-window hybrid) and no hierarchical cache; DFLASH verifies on triton/flashinfer/fa3/trtllm_mha; no
    two-batch overlap, LMCache or unified-cache external linker; with PD disaggregation no pipeline
    parallelism and no speculative decoding over Mooncake."""
    problem = _page_major_problem(ctx)
    if problem:
        return Hit(
            f"--enable-unified-memory implies --enable-page-major-kv-layout: {problem}",
            about="enable_unified_memory",
        )
    algo, topk = ctx.algorithm, ctx.given.get("speculative_eagle_topk")
    pd = (ctx.get("disaggregation_mode") or "null") != "null"
    if pd and (ctx.get("pp_size", 1) or 1) != 1:
        return Hit(
            "--enable-unified-memory with PD disaggregation does not support pipeline parallelism",
            about="pp_size",
        )
    if pd and algo is not None and (ctx.get("disaggregation_transfer_backend") or "mooncake") == "mooncake":
        return Hit(
            "--enable-unified-memory with PD disaggregation does not support speculative decoding over the "
            "Mooncake transfer backend",
            about="enable_unified_memory",
        )
    if algo not in (None, "DSPARK", "DFLASH", "EAGLE", "EAGLE3"):
        return Hit(
            f"--enable-unified-memory supports speculative algorithms DSPARK, DFLASH, EAGLE and EAGLE3, not "
            f"{algo}",
            about="enable_unified_memory",
        )
    if algo is not None and topk not in (None, 1):
        return Hit(
            "--enable-unified-memory supports a linear draft chain only (--speculative-eagle-topk 1)",
            about="speculative_eagle_topk",
            edits={"speculative_eagle_topk": 1},
        )
    if algo in ("EAGLE", "EAGLE3"):
        model = ctx.known_model
        raw = model.raw or {}
        text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
        swa = bool(
            text.get("sliding_window")
            or text.get("layer_types")
            and "sliding_attention" in text.get("layer_types", ())
        )
        if not ctx.is_hybrid and not swa:
            return Hit(
                f"--enable-unified-memory + {algo} needs a unified target "
                f"(a Mamba or sliding-window hybrid), not {model.architecture}",
                about="enable_unified_memory",
            )
        if ctx.get("enable_hierarchical_cache"):
            return Hit(
                f"--enable-unified-memory + {algo} does not support --enable-hierarchical-cache",
                about="enable_hierarchical_cache",
            )
    res = resolve(ctx)
    if algo == "DFLASH" and res is not None and not set(res.pair) <= set(_SPEC_MHA_AUDITED):
        return Hit(
            f"--enable-unified-memory + DFLASH verifies on {'/'.join(_SPEC_MHA_AUDITED)} only, got "
            f"{'/'.join(sorted(map(str, set(res.pair))))}",
            about="attention_backend",
        )
    for dest, what in (
        ("enable_two_batch_overlap", "--enable-two-batch-overlap"),
        ("enable_lmcache", "--enable-lmcache"),
        ("enable_unified_cache_external_linker", "--enable-unified-cache-external-linker"),
    ):
        if ctx.get(dest):
            return Hit(f"--enable-unified-memory does not support {what}", about=dest)
