"""Checks of SGLang 0.5.23's resolution hooks (arg_groups/*): parallel layouts, KV-cache dtypes x GPU
generation x attention backend, LoRA, MoE all-to-all, mutually exclusive features, the speculative
algorithms. Each SGLang check has one home: the module named after its hook file (a hook file too large
for one module is split by its sections, speculative_<section>.py); DDTREE's own rules are in
ddtctl/rules/ddtree/.

Each rule was derived from a raise / assert site of the pinned wheel (found by tools/raise_sites.py, mapped in
ddtctl/rules/coverage.yaml) and cites its file:line. `resolve` models what SGLang's pipeline makes of the
attention backends, the page size and the radix cache before its checks read them (deprecated spellings, model
overrides, deterministic inference, NVFP4, default fill, page snaps; arg_groups/pipeline.py order). Checked
against SGLang's own resolved values over fuzzed launches: identical attention / prefill / decode backend and
page size on all 1287 and 1261 accepted cases of seeds 2026 and 7 (N=2000 each).

One module per SGLang arg group (sglang/srt/arg_groups/*_hook.py); importing the package registers the rules:

    common       helpers every module reads (attention-DP groups, MLA, the reference prefix)
    resolution   `resolve`: the attention backends, page size and radix cache SGLang settles on
    memory       memory_hook.py defaults (chunked prefill, CUDA-graph batch size)   DDT944
    parallel     parallel_hook.py, layernorm_sp_hook.py          DDT901 DDT903 DDT904 DDT906-DDT909 DDT941
                                                                 DDT965
    moe          moe_hook.py, mega_moe_hook.py                   DDT902 DDT905 DDT930-DDT932
    kv_cache     kv_cache_hook.py                                DDT910 DDT911 DDT915 DDT927 DDT928 DDT940
    attention    attention_hook.py                               DDT912-DDT914 DDT933 DDT937
    model        model_hook.py, hisparse_hook.py                 DDT919 DDT926 DDT929 DDT934 DDT963
    speculative  speculative_hook.py (UNO, DSPARK, IQuest)        DDT918 DDT920-DDT922 DDT956 DDT964
                                                                 DDT967 DDT974
    speculative_common  speculative_hook.py, every algorithm     DDT800-DDT805
    speculative_dflash  speculative_hook.py _handle_dflash       DDT201-DDT209
    speculative_eagle   speculative_hook.py _handle_eagle_family DDT301-DDT308
    speculative_ngram   speculative_hook.py _handle_ngram        DDT401-DDT404
    serving      serving_hook.py, lora_hook.py, validation_hook  DDT916 DDT917 DDT924 DDT925 DDT935 DDT936
                                                                 DDT939
    validation   validation_hook.py, serving_hook.py (argv only) DDT806 DDT945-DDT948 DDT951
    lora         lora_hook.py (limits, MoE runners, speculation) DDT952-DDT954
    hicache      hicache_hook.py (host memory, unified linker)   DDT955
    features     feature switches that need their mode           DDT938
    elastic      parallel_hook.py handle_elastic_ep (scale-up)    DDT957
    dsa          DeepSeek Sparse Attention (overrides.py, hisparse) DDT958 DDT959
    kv_shard     kv_shard_hook.py (KV-cache sharding)             DDT960
    moe_a2a      moe_hook.py all-to-all dispatch, MoE runners     DDT961 DDT962
    unified_memory kv_cache_hook.py unified memory pool           DDT966
    pd           pd_disaggregation_hook.py                        DDT968
    caches       HiCache DCP / host receive, cache combinations   DDT969 DDT970
    publishing   load publisher, serving env, mm transports, PP spec DDT971 DDT972
    graphs       the CUDA-graph backends SGLang settles on         DDT973
    overrides    values SGLang replaces (info)                   DDT950
"""

from __future__ import annotations

from ddtctl.rules.hooks import (  # noqa: F401  (importing them registers their rules)
    mamba,
    speculative_common,
    speculative_dflash,
    speculative_eagle,
    speculative_ngram,
    validation_parallel,
)
from ddtctl.rules.hooks.attention import (
    deterministic,
    flex_spec,
    linear_attn,
    mla_backends,
    trtllm_mha_generation,
)
from ddtctl.rules.hooks.caches import cache_combinations, hicache_layouts
from ddtctl.rules.hooks.common import AG, MLA_ARCHITECTURES, attn_dp_size, is_mla
from ddtctl.rules.hooks.dsa import dsa_features, dsa_kv_and_backends
from ddtctl.rules.hooks.elastic import elastic_scale_up
from ddtctl.rules.hooks.features import feature_modes
from ddtctl.rules.hooks.graphs import cuda_graph_config
from ddtctl.rules.hooks.hicache import hicache_options
from ddtctl.rules.hooks.kv_cache import (
    hicache,
    kv4_backend,
    kv_dtype_generation,
    lmcache,
    nvfp4_backends,
    unified_memory,
)
from ddtctl.rules.hooks.kv_shard import kv_sharding
from ddtctl.rules.hooks.lora import lora_limits, lora_moe_runner, lora_speculative
from ddtctl.rules.hooks.memory import chunked_prefill, default_chunked_prefill, default_decode_graph_bs
from ddtctl.rules.hooks.model import (
    ENCODER_DISAGGREGATION_ARCHITECTURES,
    LANGUAGE_MODEL_ONLY_ARCHITECTURES,
    architecture_backends,
    context_length,
    derived_context_length,
    language_model_only,
    model_gated,
    sparse_attention_features,
)
from ddtctl.rules.hooks.moe import a2a_backends, a2a_needs_dp, eplb_dwdp, moe_runner_quant, two_batch_overlap
from ddtctl.rules.hooks.moe_a2a import a2a_dispatch, moe_runner_layout
from ddtctl.rules.hooks.overrides import DRAFT_ATTENTION_BACKENDS, overridden, predicted_overrides
from ddtctl.rules.hooks.parallel import (
    attention_dp,
    attn_cp_divides,
    context_parallel_layouts,
    dcp,
    dp_lm_head,
    elastic_ep,
    layernorm_sp,
    moe_dense_tp,
    pp_micro_batch,
)
from ddtctl.rules.hooks.pd import pd_disaggregation
from ddtctl.rules.hooks.publishing import pp_spec_relay, serving_transports
from ddtctl.rules.hooks.resolution import (
    BACKEND_ALIASES,
    DEEPSEEK_FAMILY,
    DETERMINISTIC_BACKENDS,
    DETERMINISTIC_DEEPSEEK,
    QWEN35_HYBRID_OVERRIDE,
    RADIX_DETERMINISTIC_BACKENDS,
    Resolution,
    backends,
    is_deterministic,
    resolve,
    resolved_attention,
    resolved_page,
)
from ddtctl.rules.hooks.serving import (
    companions,
    lora,
    nvidia_megakernel,
    overlap_disabled,
    pdmux,
    prefill_complete,
    ranges,
    sampling_backend,
)
from ddtctl.rules.hooks.speculative import (
    aux_hidden,
    dspark,
    dspark_layout,
    iquest_mtp,
    uno,
    uno_settings,
    watermark,
    zero_speculative_counts,
)
from ddtctl.rules.hooks.unified_memory import unified_memory_layouts
from ddtctl.rules.hooks.validation import (
    aux_layer_ids,
    bucket_rules,
    native_grpc,
    serving_options,
    watermark_settings,
)

__all__ = [
    "zero_speculative_counts",
    "cuda_graph_config",
    "pp_spec_relay",
    "serving_transports",
    "cache_combinations",
    "hicache_layouts",
    "pd_disaggregation",
    "dspark_layout",
    "unified_memory_layouts",
    "context_parallel_layouts",
    "architecture_backends",
    "iquest_mtp",
    "a2a_dispatch",
    "moe_runner_layout",
    "kv_sharding",
    "dsa_features",
    "dsa_kv_and_backends",
    "elastic_scale_up",
    "hicache_options",
    "lora_speculative",
    "lora_moe_runner",
    "lora_limits",
    "watermark_settings",
    "serving_options",
    "native_grpc",
    "bucket_rules",
    "aux_layer_ids",
    "a2a_backends",
    "a2a_needs_dp",
    "AG",
    "attention_dp",
    "attn_cp_divides",
    "attn_dp_size",
    "aux_hidden",
    "BACKEND_ALIASES",
    "backends",
    "chunked_prefill",
    "companions",
    "context_length",
    "dcp",
    "DEEPSEEK_FAMILY",
    "default_chunked_prefill",
    "default_decode_graph_bs",
    "derived_context_length",
    "deterministic",
    "DETERMINISTIC_BACKENDS",
    "DETERMINISTIC_DEEPSEEK",
    "dp_lm_head",
    "DRAFT_ATTENTION_BACKENDS",
    "dspark",
    "elastic_ep",
    "ENCODER_DISAGGREGATION_ARCHITECTURES",
    "eplb_dwdp",
    "feature_modes",
    "flex_spec",
    "hicache",
    "is_deterministic",
    "is_mla",
    "kv4_backend",
    "kv_dtype_generation",
    "language_model_only",
    "LANGUAGE_MODEL_ONLY_ARCHITECTURES",
    "layernorm_sp",
    "linear_attn",
    "lmcache",
    "lora",
    "MLA_ARCHITECTURES",
    "mla_backends",
    "model_gated",
    "moe_dense_tp",
    "moe_runner_quant",
    "nvfp4_backends",
    "nvidia_megakernel",
    "overlap_disabled",
    "overridden",
    "pdmux",
    "pp_micro_batch",
    "predicted_overrides",
    "prefill_complete",
    "QWEN35_HYBRID_OVERRIDE",
    "RADIX_DETERMINISTIC_BACKENDS",
    "ranges",
    "Resolution",
    "resolve",
    "resolved_attention",
    "resolved_page",
    "sampling_backend",
    "sparse_attention_features",
    "trtllm_mha_generation",
    "two_batch_overlap",
    "unified_memory",
    "uno",
    "uno_settings",
    "watermark",
]
