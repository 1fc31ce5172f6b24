"""Failing / passing launches for the rules that turned SGLang 0.5.23 raise sites "deferred to dry-run" into static
checks (DDT957 on). test_rules.py runs them statically; tests/fidelity/test_fuzz.py resolves every pair with SGLang
(the failing one must be rejected, the passing one accepted), the env pairs with their server environment.

CASES: rule -> (argv that trips it, argv that does not, gpu); EXTRA: (rule, bad, good, gpu);
ENV: (rule, bad argv, bad env, good argv, good env, gpu) for rules that read SGLANG_* variables; ENV_ONLY: the rules
that only an environment trips (their test_rules.py case is their first ENV pair).
"""

from __future__ import annotations

from pathlib import Path

MODELS = Path(__file__).resolve().parents[1] / "fidelity" / "models"
M = {p.name: str(p) for p in MODELS.iterdir() if p.is_dir()}

DENSE = ["--model-path", M["qwen3-8b"]]
MOE = ["--model-path", M["qwen3-30b-a3b"]]
MLA = ["--model-path", M["deepseek-v3-nextn"]]
HYBRID = ["--model-path", M["qwen3.6-27b"]]
EAGLE3 = DENSE + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"]]

CASES: dict[str, tuple[list[str], list[str], str | None]] = {}
EXTRA: list[tuple[str, list[str], list[str], str]] = []
ENV: list[tuple[str, list[str], dict[str, str], list[str], dict[str, str], str]] = []

# ---- DDT957 elastic EP (parallel_hook.py handle_elastic_ep) ----
ELASTIC = ["--elastic-ep-backend", "mooncake", "--tp-size", "2", "--ep-size", "2"]
SCALE = MOE + ["--elastic-ep-backend", "mooncake", "--max-ep-size", "4", "--tp-size", "2", "--attn-dp-size", "2",
               "--enable-dp-lm-head", "--moe-a2a-backend", "nixl"]
JOIN = SCALE + ["--elastic-ep-join-mode", "scale", "--node-rank", "1", "--nnodes", "2",
                "--elastic-ep-join-rank-offset"]
WIDE = SCALE + ["--tp-size", "4", "--max-ep-size", "8", "--attn-dp-size", "2", "--moe-dense-tp-size", "1"]
CASES["DDT957"] = (MOE + ELASTIC + ["--enable-eplb", "--eplb-algorithm", "deepseek"],
                   MOE + ELASTIC + ["--enable-eplb", "--eplb-algorithm", "elasticity_aware"], "H200")
EXTRA += [
    ("DDT957", MOE + ELASTIC + ["--pp-size", "2"], MOE + ELASTIC, "H200"),
    ("DDT957", SCALE + ["--tp-size", "4", "--max-ep-size", "5", "--moe-dense-tp-size", "1"], WIDE, "H200"),
    ("DDT957", SCALE + ["--tp-size", "4", "--max-ep-size", "8"], WIDE, "H200"),
    ("DDT957", SCALE + ["--elastic-ep-scale-timeout", "0"], SCALE, "H200"),
    ("DDT957", SCALE + ["--tokenizer-worker-num", "2"], SCALE, "H200"),
    ("DDT957", SCALE + ["--use-ray"], SCALE, "H200"),
    ("DDT957", SCALE + ["--enable-elastic-expert-backup"], SCALE, "H200"),
    ("DDT957", JOIN + ["2", "--elastic-ep-initial-size", "4"], JOIN + ["2", "--elastic-ep-initial-size", "2"], "H200"),
    ("DDT957", JOIN + ["4", "--elastic-ep-initial-size", "2"], JOIN + ["2", "--elastic-ep-initial-size", "2"], "H200"),
    ("DDT957", JOIN + ["2", "--elastic-ep-initial-size", "0"], JOIN + ["2", "--elastic-ep-initial-size", "2"], "H200"),
    ("DDT957", SCALE + ["--elastic-ep-initial-size", "4"], SCALE + ["--elastic-ep-initial-size", "2"], "H200"),
    ("DDT957", SCALE + ["--load-balance-method", "total_requests"], SCALE + ["--load-balance-method", "round_robin"],
     "H200"),
    ("DDT957", [a if a != "mooncake" else "nixl" for a in SCALE], SCALE, "H200"),
    ("DDT957", WIDE + ["--dcp-size", "4"], WIDE, "H200"),
    ("DDT957", SCALE + ["--cuda-graph-backend-decode", "breakable"], SCALE + ["--cuda-graph-backend-decode", "full"],
     "H200"),
    ("DDT957", SCALE + ["--cuda-graph-backend-prefill", "breakable"], SCALE, "H200"),
    ("DDT957", SCALE + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"]],
     SCALE + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"],
              "--disable-cuda-graph"], "H200"),
    ("DDT957", SCALE + ["--is-embedding"], SCALE + ["--is-embedding", "--disable-decode-cuda-graph"], "H200"),
    ("DDT957", SCALE + ["--forward-hooks", '[{"name": "x", "target_modules": ["a"], "hook_factory": "m:f"}]'],
     SCALE, "H200"),
    ("DDT957", SCALE[:-5] + ["--moe-a2a-backend", "nixl", "--moe-dense-tp-size", "1"], SCALE, "H200"),
    ("DDT957", [a for a in SCALE if a != "--enable-dp-lm-head"], SCALE, "H200"),
    ("DDT957", WIDE + ["--attn-dp-size", "1", "--attn-cp-size", "2"], WIDE, "H200"),
    ("DDT957", SCALE[:-2] + ["--disable-prefill-cuda-graph"], SCALE, "H200"),
]

# ---- DDT958 / DDT959 DeepSeek Sparse Attention (overrides.py DSA passes, hisparse_hook.py, model_hook.py) ----
DSA = ["--model-path", M["deepseek-v32"]]
SINK = ["--model-path", M["deepseek-v32-sink"]]  # learnable attention sinks, index top-k shared every other layer
TILELANG = DSA + ["--kv-cache-dtype", "fp8_e4m3", "--dsa-prefill-backend", "tilelang", "--dsa-decode-backend",
                  "tilelang"]
HISPARSE = DSA + ["--enable-hisparse", "--disable-radix-cache"]
PCP = ["--tp-size", "2", "--attn-cp-size", "2", "--enable-prefill-cp", "--cp-strategy"]
SPLIT = DSA + ["--enable-dsa-cache-layer-split", "--disaggregation-mode", "prefill"] + PCP + ["interleave"]
CASES["DDT958"] = (DSA + ["--kv-cache-dtype", "fp8_e5m2"], DSA + ["--kv-cache-dtype", "fp8_e4m3"], "H200")
EXTRA += [
    ("DDT958", SINK + ["--kv-cache-dtype", "fp8_e4m3"], SINK, "B200"),
    ("DDT958", SINK + ["--dsa-prefill-backend", "fa3"], SINK + ["--dsa-prefill-backend", "flashmla_sparse"], "B200"),
    ("DDT958", DSA + ["--dsa-decode-backend", "triton"], DSA + ["--dsa-decode-backend", "fa3"], "H200"),
    ("DDT958", TILELANG[:-2], TILELANG, "H200"),
    ("DDT958", TILELANG + ["--dcp-size", "2", "--tp-size", "2"], TILELANG + ["--tp-size", "2"], "H200"),
    ("DDT958", TILELANG + ["--enable-hisparse", "--disable-radix-cache"], TILELANG, "H200"),
]
CASES["DDT959"] = (DSA + ["--enable-hisparse"], HISPARSE, "H200")
EXTRA += [
    ("DDT959", HISPARSE + ["--enable-mixed-chunk"], HISPARSE, "H200"),
    ("DDT959", HISPARSE + ["--speculative-algorithm", "EAGLE", "--speculative-adaptive"],
     HISPARSE + ["--speculative-algorithm", "EAGLE"], "H200"),
    ("DDT959", HISPARSE + ["--dsa-decode-backend", "fa3"], HISPARSE + ["--dsa-decode-backend", "flashmla_sparse"],
     "H200"),
    ("DDT959", HISPARSE + ["--kv-cache-dtype", "fp8_e4m3", "--dsa-decode-backend", "flashmla_sparse"],
     HISPARSE + ["--kv-cache-dtype", "fp8_e4m3", "--dsa-decode-backend", "flashmla_kv"], "H200"),
    ("DDT959", DSA + PCP + ["interleave", "--disaggregation-mode", "decode"],
     DSA + PCP + ["interleave", "--disaggregation-mode", "prefill"], "H200"),
    ("DDT959", DSA + PCP + ["zigzag"], DSA + PCP + ["interleave"], "H200"),
    ("DDT959", DSA + ["--enable-dsa-cache-layer-split", "--disaggregation-mode", "decode"], SPLIT, "H200"),
    ("DDT959", DSA + ["--enable-dsa-cache-layer-split"], SPLIT, "H200"),
    ("DDT959", DSA + ["--enable-dsa-cache-layer-split", "--disaggregation-mode", "prefill"], SPLIT, "H200"),
    ("DDT959", SPLIT + ["--disaggregation-transfer-backend", "nixl"], SPLIT, "H200"),
    ("DDT959", SPLIT + ["--pp-size", "2"], SPLIT, "H200"),
    ("DDT959", SINK + ["--enable-two-batch-overlap", "--tp-size", "2", "--attn-dp-size", "2", "--moe-a2a-backend",
                       "deepep"],
     DSA + ["--enable-two-batch-overlap", "--tp-size", "2", "--attn-dp-size", "2", "--moe-a2a-backend", "deepep"],
     "B200"),
]

# ---- DDT960 KV-cache sharding (kv_shard_hook.py) ----
SHARD = DENSE + ["--enable-kv-cache-sharding", "--disaggregation-mode", "prefill", "--tp-size", "2", "--attn-cp-size",
                 "2", "--enable-prefill-cp", "--cp-strategy", "zigzag", "--page-size", "64", "--attention-backend",
                 "fa3"]
SHARD_MLA = MLA + ["--enable-kv-cache-sharding", "--disaggregation-mode", "prefill", "--tp-size", "2"]
SHARD_DSA = DSA + ["--enable-kv-cache-sharding", "--disaggregation-mode", "prefill", "--tp-size", "2",
                   "--attn-cp-size", "2", "--enable-prefill-cp", "--cp-strategy", "interleave"]
CASES["DDT960"] = (SHARD[:-4] + ["--attention-backend", "fa3"], SHARD, "H200")
EXTRA += [
    ("DDT960", SHARD + ["--chunked-prefill-size", "-1"], SHARD + ["--chunked-prefill-size", "1000"], "H200"),
    ("DDT960", SHARD + ["--chunked-prefill-size", "5000", "--page-size", "1000000"],
     SHARD + ["--chunked-prefill-size", "5000"], "H200"),
    ("DDT960", SHARD[:-2], SHARD, "B200"),
    ("DDT960", SHARD_MLA + ["--tp-size", "1"], SHARD_MLA, "B200"),
    ("DDT960", SHARD_MLA + ["--attn-dp-size", "2"], SHARD_MLA, "B200"),
    ("DDT960", SHARD_MLA + ["--disable-chunked-prefix-cache"], SHARD_MLA, "B200"),
    ("DDT960", SHARD_MLA + ["--attn-cp-size", "2", "--attention-backend", "trtllm_mla"], SHARD_MLA, "B200"),
    ("DDT960", SHARD[:-2] + ["--attention-backend", "trtllm_mla"], SHARD, "B200"),
    ("DDT960", SHARD_MLA + ["--dcp-size", "2"], SHARD_MLA, "B200"),
    ("DDT960", DENSE + ["--enable-kv-cache-sharding", "--disaggregation-mode", "prefill", "--page-size", "64"], SHARD,
     "H200"),
    ("DDT960", SHARD + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                        M["qwen3-8b-eagle3"]], SHARD, "H200"),
    ("DDT960", SHARD + ["--disaggregation-transfer-backend", "mori"],
     SHARD + ["--disaggregation-transfer-backend", "nixl"], "H200"),
    ("DDT960", SHARD + ["--enable-hierarchical-cache", "--hicache-storage-backend", "file"],
     SHARD + ["--enable-hierarchical-cache"], "H200"),
    ("DDT960", SHARD + ["--enable-dynamic-chunking", "--pp-size", "2"], SHARD + ["--enable-dynamic-chunking"],
     "H200"),
    ("DDT960", SHARD + ["--dllm-algorithm", "LowConfidence"], SHARD, "H200"),
    ("DDT960", SHARD + ["--radix-cache-backend", "x"], SHARD, "H200"),
    ("DDT960", SHARD + ["--enable-unified-cache-external-linker"], SHARD, "H200"),
    ("DDT960", SHARD + ["--enable-streaming-session"], SHARD, "H200"),
    ("DDT960", SHARD + ["--enable-session-radix-cache"], SHARD, "H200"),
    ("DDT960", SHARD + ["--enable-flexkv"], SHARD, "H200"),
    ("DDT960", SHARD + ["--enable-unified-memory"], SHARD, "H200"),
    ("DDT960", SHARD + ["--enable-lmcache"], SHARD, "H200"),
    ("DDT960", SHARD_DSA[:-7], SHARD_DSA, "B200"),
    ("DDT960", SHARD_DSA + ["--kv-cache-dtype", "bfloat16"], SHARD_DSA, "B200"),
    ("DDT960", SHARD_DSA + ["--disaggregation-transfer-backend", "nixl"], SHARD_DSA, "B200"),
    ("DDT960", SHARD_DSA + ["--attention-backend", "fa3"], SHARD_DSA, "B200"),
    ("DDT960", SHARD_DSA + ["--enable-hierarchical-cache", "--hicache-mem-layout", "page_first_direct",
                            "--hicache-io-backend", "direct"], SHARD_DSA + ["--enable-hierarchical-cache"], "B200"),
]
ENV += [
    ("DDT960", SHARD, {"SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "rust"},
     SHARD + ["--disable-radix-cache"], {"SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "rust"}, "H200"),
    ("DDT960", SHARD, {"SGLANG_DISAGG_STAGING_BUFFER": "1"}, SHARD, {}, "H200"),
]

# ---- DDT961 / DDT962 MoE all-to-all dispatch and runners (moe_hook.py, overrides.py) ----
FI_A2A = MOE + ["--moe-a2a-backend", "flashinfer", "--tp-size", "2", "--attn-dp-size", "2"]
FI_CUT = FI_A2A + ["--moe-runner-backend", "flashinfer_cutlass"]
FI_CUTE = FI_A2A + ["--moe-runner-backend", "flashinfer_cutedsl", "--quantization", "modelopt_fp4"]
W4A16 = {"SGLANG_FLASHINFER_CUTEDSL_NVFP4_W4A16": "1"}
MEGA = MOE + ["--moe-a2a-backend", "flashinfer_megamoe", "--tp-size", "2", "--attn-dp-size", "2", "--quantization",
              "mxfp8"]
DEEPEP2 = MOE + ["--moe-a2a-backend", "deepep_v2", "--tp-size", "2", "--cuda-graph-max-bs-decode", "64"]
DEEPEP2_ENV = {"SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "4096"}
PPLX = MOE + ["--moe-a2a-backend", "pplx", "--tp-size", "2", "--attn-dp-size", "2"]
PPLX_ENV = {"SGLANG_PPLX_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "8192"}
DRAFT3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"],
          "--speculative-num-draft-tokens", "4", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
CASES["DDT961"] = (FI_A2A, FI_CUT, "B200")
EXTRA += [
    ("DDT961", FI_A2A + ["--moe-runner-backend", "flashinfer_trtllm", "--flashinfer-a2a-dispatch-type", "mxfp8"],
     FI_A2A + ["--moe-runner-backend", "flashinfer_trtllm", "--flashinfer-a2a-dispatch-type", "mxfp8",
               "--quantization", "mxfp8"], "B200"),
    ("DDT961", FI_A2A + ["--moe-runner-backend", "cutlass", "--quantization", "mxfp8",
                         "--flashinfer-a2a-dispatch-type", "mxfp8"],
     FI_CUT + ["--quantization", "mxfp8", "--flashinfer-a2a-dispatch-type", "mxfp8"], "B200"),
    ("DDT961", FI_CUT + ["--flashinfer-a2a-dispatch-type", "nvfp4"], FI_CUT + ["--flashinfer-a2a-dispatch-type",
                                                                              "bf16"], "B200"),
    ("DDT961", FI_CUT + ["--chunked-prefill-size", "-1"], FI_CUT + ["--chunked-prefill-size", "2048"], "B200"),
    ("DDT961", MEGA, MOE + ["--tp-size", "2", "--attn-dp-size", "2", "--quantization", "mxfp8"], "H200"),  # SM100
    ("DDT961", MEGA[:-6] + ["--quantization", "mxfp8"], MEGA, "B200"),
    ("DDT961", MEGA[:-2] + ["--quantization", "modelopt_fp4", "--moe-runner-backend", "triton"],
     MEGA[:-2] + ["--quantization", "modelopt_fp4"], "B200"),
    ("DDT961", MOE + ["--moe-a2a-backend", "deepep", "--moe-runner-backend", "flashinfer_cutedsl", "--quantization",
                      "modelopt_fp4", "--deepep-mode", "normal", "--tp-size", "2"],
     MOE + ["--moe-a2a-backend", "deepep", "--moe-runner-backend", "flashinfer_cutedsl", "--quantization",
            "modelopt_fp4", "--tp-size", "2"], "B200"),
    ("DDT961", DEEPEP2, DEEPEP2[:-2] + ["--chunked-prefill-size", "256", "--disable-cuda-graph"], "H200"),
    ("DDT961", PPLX, PPLX + ["--chunked-prefill-size", "256"], "H200"),
]
ENV += [
    ("DDT961", FI_CUT + ["--flashinfer-a2a-dispatch-type", "bf16"], {"SGLANG_MOE_NVFP4_DISPATCH": "0"},
     FI_CUT + ["--flashinfer-a2a-dispatch-type", "bf16"], {}, "B200"),
    ("DDT961", FI_CUT, {"SGLANG_FLASHINFER_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "1024"},
     FI_CUT + ["--chunked-prefill-size", "2048", "--cuda-graph-max-bs-decode", "64"],
     {"SGLANG_FLASHINFER_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "1024"}, "B200"),
    ("DDT961", FI_CUTE + ["--flashinfer-a2a-dispatch-type", "nvfp4"], W4A16,
     FI_CUTE + ["--flashinfer-a2a-dispatch-type", "bf16"], W4A16, "B200"),
    ("DDT961", FI_CUTE, {**W4A16, "SGLANG_MOE_NVFP4_DISPATCH": "1"}, FI_CUTE, W4A16, "B200"),
    ("DDT961", MEGA, {"SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE": "fp16"},
     MEGA, {"SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE": "mxfp8"}, "B200"),
    ("DDT961", MEGA, {"SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE": "mxfp8", **W4A16}, MEGA, W4A16, "B200"),
    ("DDT961", MEGA, {"SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE": "mxfp8",
                      "SGLANG_FLASHINFER_MEGAMOE_IN_KERNEL_FC2_REDUCE": "1"},
     MEGA, {"SGLANG_FLASHINFER_MEGAMOE_IN_KERNEL_FC2_REDUCE": "1"}, "B200"),
    ("DDT961", MEGA + ["--dtype", "float16"], W4A16, MEGA + ["--dtype", "bfloat16"], W4A16, "B200"),
    ("DDT961", DEEPEP2[:-2] + ["--chunked-prefill-size", "256"],
     {"SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "200"}, DEEPEP2, DEEPEP2_ENV, "H200"),
    ("DDT961", DEEPEP2 + ["--moe-runner-backend", "triton"], DEEPEP2_ENV,
     DEEPEP2 + ["--moe-runner-backend", "deep_gemm"], DEEPEP2_ENV, "H200"),
    ("DDT961", DEEPEP2 + ["--enable-two-batch-overlap", "--attn-dp-size", "2"], DEEPEP2_ENV,
     DEEPEP2 + ["--attn-dp-size", "2"], DEEPEP2_ENV, "H200"),
    ("DDT961", DEEPEP2 + ["--enforce-shared-experts-fusion"], DEEPEP2_ENV, DEEPEP2, DEEPEP2_ENV, "H200"),
    ("DDT961", DEEPEP2 + ["--deepep-v2-mode", "direct", "--nnodes", "2", "--tp-size", "4", "--dist-init-addr",
                          "127.0.0.1:5000"], DEEPEP2_ENV,
     DEEPEP2 + ["--deepep-v2-mode", "hybrid", "--nnodes", "2", "--tp-size", "4", "--dist-init-addr",
                "127.0.0.1:5000"], DEEPEP2_ENV, "H200"),
    ("DDT961", DEEPEP2 + DRAFT3, DEEPEP2_ENV, DEEPEP2 + DRAFT3 + ["--speculative-moe-a2a-backend", "none"],
     DEEPEP2_ENV, "H200"),
    ("DDT961", PPLX + ["--deepep-mode", "normal"], PPLX_ENV, PPLX + ["--deepep-mode", "low_latency"], PPLX_ENV,
     "H200"),
    ("DDT961", PPLX + ["--moe-runner-backend", "triton"], PPLX_ENV, PPLX + ["--moe-runner-backend", "deep_gemm"],
     PPLX_ENV, "H200"),
]
CASES["DDT962"] = (MOE + ["--moe-runner-backend", "cutlass", "--quantization", "fp8", "--tp-size", "2", "--ep-size",
                          "2"],
                   MOE + ["--moe-runner-backend", "cutlass", "--quantization", "fp8", "--tp-size", "2"], "H200")
EXTRA += [
    ("DDT962", MOE + ["--quantization", "nvfp4_online"], MOE + ["--quantization", "mxfp8"], "H200"),
    ("DDT962", MOE + ["--quantization", "nvfp4_online", "--moe-runner-backend", "triton"],
     MOE + ["--quantization", "nvfp4_online"], "B200"),
    ("DDT931", DENSE + ["--moe-a2a-backend", "deepep_v2", "--tp-size", "2", "--chunked-prefill-size", "256",
                        "--disable-cuda-graph"],
     MOE + ["--moe-a2a-backend", "deepep_v2", "--tp-size", "2", "--chunked-prefill-size", "256",
            "--disable-cuda-graph"], "H200"),
]
ENV += [
    ("DDT962", MOE + ["--moe-a2a-backend", "deepep", "--moe-runner-backend", "flashinfer_cutedsl", "--quantization",
                      "modelopt_fp4", "--tp-size", "2"], {"SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION": "1"},
     MOE + ["--moe-a2a-backend", "flashinfer", "--moe-runner-backend", "flashinfer_cutedsl", "--quantization",
            "modelopt_fp4", "--tp-size", "2", "--attn-dp-size", "2"],
     {"SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION": "1"}, "B200"),
]

# ---- DDT963 architectures' attention allow-lists (model_hook.py), DDT964 IQuest Q1 MTP (speculative_hook.py) ----
def _model(name: str) -> list[str]:
    return ["--model-path", M[name]]


CASES["DDT963"] = (_model("llama4-scout") + ["--attention-backend", "flashinfer"],
                   _model("llama4-scout") + ["--attention-backend", "fa3"], "H200")
EXTRA += [
    ("DDT963", _model("gpt-oss") + ["--prefill-attention-backend", "flashinfer"],
     _model("gpt-oss") + ["--attention-backend", "triton"], "H200"),
    ("DDT963", _model("gpt-oss") + ["--moe-runner-backend", "triton_kernel", "--tp-size", "2", "--ep-size", "2"],
     _model("gpt-oss") + ["--moe-runner-backend", "triton_kernel", "--tp-size", "2"], "H200"),
    ("DDT963", _model("olmo2") + ["--attention-backend", "flashinfer"], _model("olmo2") + ["--attention-backend",
                                                                                           "triton"], "H200"),
    ("DDT963", _model("lfm2") + ["--attention-backend", "triton"], _model("lfm2") + ["--attention-backend", "fa3"],
     "H200"),
    ("DDT963", _model("exaone4") + ["--attention-backend", "flashinfer"],
     _model("exaone4") + ["--attention-backend", "triton"], "H200"),
]
IQUEST = _model("iquest-q1") + ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path"]
CASES["DDT964"] = (IQUEST + [M["iquest-q1"]], IQUEST + [M["iquest-q1-mtp"]], "H200")
EXTRA += [
    ("DDT964", IQUEST + [M["qwen3-8b-eagle3"]], IQUEST + [M["iquest-q1-mtp"]], "H200"),
    ("DDT964", IQUEST + [M["iquest-q1-mtp-l40"]], IQUEST + [M["iquest-q1-mtp"]], "H200"),
    ("DDT964", IQUEST + [M["iquest-q1-mtp"], "--speculative-token-map", "/x.pt"], IQUEST + [M["iquest-q1-mtp"]],
     "H200"),
    ("DDT964", IQUEST + [M["iquest-q1-mtp"], "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "5"],
     IQUEST + [M["iquest-q1-mtp"], "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4"], "H200"),
]

# ---- sites an older rule already checks (mapped to it, checked here against SGLang's raise site) ----
EXTRA += [
    ("DDT002", DENSE + ["--dcp-size", "0"], DENSE + ["--dcp-size", "1"], "H200"),
    ("DDT002", DENSE + ["--grpc-port", "70000"], DENSE + ["--grpc-port", "30001"], "H200"),
    ("DDT002", DENSE + ["--hicache-host-memory-fraction", "1.5"], DENSE + ["--hicache-host-memory-fraction", "0.5"],
     "H200"),
    ("DDT501", DENSE + ["--mamba-radix-cache-strategy", "extra_buffer"],
     HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer"], "H200"),
    ("DDT935", MOE + ["--tp-size", "4", "--moe-dp-size", "2", "--ep-size", "2", "--pp-size", "2",
                      "--disable-overlap-schedule"],
     MOE + ["--tp-size", "4", "--moe-dp-size", "2", "--ep-size", "2", "--attn-cp-size", "2"], "H200"),
]

# ---- DDT965 context parallelism layouts, DDT908 layernorm SP (parallel_hook.py, layernorm_sp_hook.py) ----
NEMOTRON = ["--model-path", M["nemotron-h-8b"]]
CASES["DDT965"] = (NEMOTRON + ["--tp-size", "2", "--attn-cp-size", "2"], NEMOTRON + ["--tp-size", "2"], "H200")
EXTRA += [
    ("DDT965", DENSE + ["--tp-size", "2", "--attn-cp-size", "2", "--enable-aiter-allreduce-fusion"],
     DENSE + ["--tp-size", "2", "--attn-cp-size", "2"], "H200"),
    ("DDT965", MLA + ["--tp-size", "2", "--dcp-size", "2", "--attn-cp-size", "2", "--enable-prefill-cp",
                      "--cp-strategy", "interleave"], MLA + ["--tp-size", "2", "--dcp-size", "2"], "H200"),
    ("DDT908", MOE + ["--enable-layernorm-sp", "--tp-size", "2"], DENSE + ["--enable-layernorm-sp", "--tp-size", "2"],
     "H200"),
    ("DDT908", DENSE + ["--enable-layernorm-sp", "--tp-size", "2", "--attn-dp-size", "2"],
     DENSE + ["--enable-layernorm-sp", "--tp-size", "2"], "H200"),
    ("DDT908", DENSE + ["--enable-layernorm-sp", "--tp-size", "2", "--pp-size", "2", "--disable-overlap-schedule"],
     DENSE + ["--enable-layernorm-sp", "--tp-size", "2"], "H200"),
]

# ---- DDT966 unified memory pool (kv_cache_hook.py handle_unified_memory_pool) ----
UNIFIED = ["--enable-unified-memory"]
UM_DECODE = UNIFIED + ["--disaggregation-mode", "decode"]
OFFLOAD = UM_DECODE + ["--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "file"]
HYBRID_EAGLE3 = HYBRID + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"],
                          "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                          "--speculative-num-draft-tokens", "4"] + UNIFIED
CASES["DDT966"] = (DENSE + UM_DECODE + ["--disaggregation-transfer-backend", "nixl"], DENSE + UM_DECODE, "H200")
EXTRA += [
    ("DDT966", DENSE + OFFLOAD[:-1] + ["mooncake"], DENSE + OFFLOAD, "H200"),
    ("DDT966", MLA + OFFLOAD, DENSE + OFFLOAD, "H200"),
    ("DDT966", HYBRID + OFFLOAD, DENSE + OFFLOAD, "H200"),
    ("DDT966", _model("gpt-oss") + OFFLOAD, DENSE + OFFLOAD, "H200"),
    ("DDT966", HYBRID + UM_DECODE + ["--disaggregation-decode-retraction-backup", "host_pool"],
     DENSE + UM_DECODE + ["--disaggregation-decode-retraction-backup", "host_pool"], "H200"),
    ("DDT966", HYBRID_EAGLE3 + ["--attention-backend", "fa4"], HYBRID_EAGLE3 + ["--attention-backend", "trtllm_mha"],
     "B200"),
    ("DDT966", HYBRID_EAGLE3 + ["--speculative-draft-attention-backend", "fa4"],
     HYBRID_EAGLE3 + ["--speculative-draft-attention-backend", "triton"], "B200"),
    ("DDT966", DENSE + UNIFIED + ["--tp-size", "2", "--dcp-size", "2"], MLA + UNIFIED + ["--tp-size", "2", "--dcp-size",
                                                                                       "2"], "B200"),
    ("DDT966", MLA + UNIFIED + ["--tp-size", "2", "--dcp-size", "2", "--disaggregation-mode", "decode"],
     MLA + UNIFIED + ["--tp-size", "2", "--dcp-size", "2"], "B200"),
    ("DDT966", MLA + UNIFIED + ["--tp-size", "2", "--dcp-size", "2"], MLA + UNIFIED + ["--tp-size", "2"], "H200"),
    ("DDT966", DENSE + UNIFIED + ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path",
                                  M["qwen3-8b-dflash-b16"], "--attention-backend", "trtllm_mha"],
     DENSE + UNIFIED + ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path",
                        M["qwen3-8b-dflash-b16"], "--attention-backend", "triton"], "B200"),
    ("DDT940", HYBRID_EAGLE3 + ["--enable-hierarchical-cache"], HYBRID_EAGLE3, "H200"),
    ("DDT940", HYBRID_EAGLE3 + ["--disaggregation-mode", "decode"], HYBRID_EAGLE3, "H200"),
]
ENV += [
    ("DDT966", DENSE + UM_DECODE, {"SGLANG_DISABLE_LAZY_COMPACTION": "1"}, DENSE + UM_DECODE, {}, "H200"),
]

# ---- DDT967 DSpark layouts, DP spec/prefill coordination, ragged verify (speculative_hook.py, attention_hook.py) --
DSPARK = DENSE + ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", M["qwen3-8b-dflash-b16"]]
DSPARK_MOE = MOE + ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path",
                    M["qwen3-30b-a3b-dflash-b16"]]
ADP = ["--tp-size", "2", "--attn-dp-size", "2", "--enable-dp-lm-head"]
COORD = {"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"}
REPLAY = HYBRID + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", M["qwen3.6-27b-dflash-b16"],
                   "--enable-linear-replayssm-spec"]
CASES["DDT967"] = (DSPARK + ADP[:-1], DSPARK + ADP, "H200")
EXTRA += [
    ("DDT967", DSPARK_MOE + ADP + ["--moe-a2a-backend", "deepep"], DSPARK_MOE + ADP, "H200"),
    ("DDT967", DSPARK + ["--tp-size", "4", "--attn-dp-size", "2", "--attn-cp-size", "2", "--enable-dp-lm-head"],
     DSPARK + ADP, "H200"),
    ("DDT967", DSPARK + ADP + ["--speculative-moe-a2a-backend", "deepep"], DSPARK + ADP, "H200"),
    ("DDT967", DSPARK + ["--pp-size", "2", "--disable-overlap-schedule"], DSPARK, "H200"),
    ("DDT967", DSPARK + ["--speculative-dspark-block-size", "0"], DSPARK + ["--speculative-dspark-block-size", "8"],
     "H200"),
    ("DDT967", DENSE + ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path",
                        M["qwen3-8b-dflash-noblock"], "--speculative-num-draft-tokens", "1"],
     DENSE + ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", M["qwen3-8b-dflash-noblock"],
              "--speculative-num-draft-tokens", "4"], "H200"),
]
ENV += [
    ("DDT967", DENSE, COORD, EAGLE3, COORD, "H200"),
    ("DDT967", DSPARK_MOE + ADP + ["--moe-a2a-backend", "mori", "--chunked-prefill-size", "4096"],
     {"SGLANG_RAGGED_VERIFY_MODE": "compact"}, DSPARK_MOE + ADP + ["--moe-a2a-backend", "mori",
                                                                   "--chunked-prefill-size", "4096"], {}, "H200"),
    ("DDT967", DSPARK + ADP, {**COORD, "SGLANG_RAGGED_VERIFY_MODE": "compact"}, DSPARK + ADP, COORD, "H200"),
    ("DDT967", REPLAY, {"SGLANG_RAGGED_VERIFY_MODE": "cap-accept"}, REPLAY + ["--linear-attn-verify-backend", "triton"],
     {"SGLANG_RAGGED_VERIFY_MODE": "cap-accept"}, "H200"),
]

# ---- DDT968 PD disaggregation (pd_disaggregation_hook.py) ----
PD_DECODE = DENSE + ["--disaggregation-mode", "decode"]
PD_PREFILL = DENSE + ["--disaggregation-mode", "prefill"]
HOST_RECEIVE = ["--disaggregation-decode-host-receive-threshold", "0.5"]
RUST = {"SGLANG_RUST_SERVER": "1"}
CASES["DDT968"] = (PD_DECODE + HOST_RECEIVE + ["--enable-pd-role-switch"], PD_DECODE + HOST_RECEIVE, "H200")
EXTRA += [
    ("DDT968", PD_DECODE + HOST_RECEIVE + ["--disaggregation-decode-retraction-backup", "cpu_tensor"],
     PD_DECODE + HOST_RECEIVE + ["--disaggregation-decode-retraction-backup", "host_pool"], "H200"),
    ("DDT968", PD_DECODE + ["--disaggregation-decode-enable-radix-cache", "--disaggregation-transfer-backend", "fake"],
     PD_DECODE + ["--disaggregation-decode-enable-radix-cache"], "H200"),
    ("DDT968", PD_PREFILL + ["--disaggregation-transfer-backend", "fake"],
     PD_DECODE + ["--disaggregation-transfer-backend", "fake"], "H200"),
    ("DDT968", PD_PREFILL + ["--enable-pd-role-switch", "--pp-size", "2", "--disable-overlap-schedule"],
     PD_PREFILL + ["--enable-pd-role-switch"], "H200"),
    ("DDT968", EAGLE3 + ["--disaggregation-mode", "prefill", "--enable-pd-role-switch"],
     EAGLE3 + ["--disaggregation-mode", "prefill"], "H200"),
    ("DDT968", PD_PREFILL + ["--disaggregation-ib-device", " "], PD_PREFILL, "H200"),
]
ENV += [
    ("DDT968", PD_PREFILL + ["--disaggregation-transfer-backend", "mori"], {"SGLANG_DISAGG_STAGING_BUFFER": "1"},
     PD_PREFILL + ["--disaggregation-transfer-backend", "nixl"], {"SGLANG_DISAGG_STAGING_BUFFER": "1"}, "H200"),
    ("DDT968", PD_PREFILL + ["--disaggregation-bootstrap-port", "9000", "--disaggregation-transfer-backend", "nixl"],
     RUST, PD_PREFILL + ["--disaggregation-bootstrap-port", "30000", "--disaggregation-transfer-backend", "nixl"],
     RUST, "H200"),
]

# ---- DDT969 HiCache DCP / host receive (hicache_hook.py), DDT970 cache combinations (kv_cache, mamba hooks) ----
HICACHE_DCP = ["--enable-hierarchical-cache", "--tp-size", "2", "--dcp-size", "2"]
HOST_RECEIVE_DECODE = PD_DECODE + HOST_RECEIVE
KVLESS = DENSE + ["--is-embedding", "--prefill-only-disable-kv-cache", "--chunked-prefill-size", "-1",
                  "--disable-radix-cache"]
EXTRA_BUFFER = HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer"]
CASES["DDT969"] = (DENSE + HICACHE_DCP, MLA + HICACHE_DCP, "H200")
EXTRA += [
    ("DDT969", MLA + HICACHE_DCP + ["--hicache-storage-backend", "file", "--hicache-host-memory-mode", "buffer_only"],
     MLA + HICACHE_DCP + ["--hicache-storage-backend", "file"], "H200"),
    ("DDT969", MLA + HICACHE_DCP + ["--speculative-algorithm", "EAGLE"], MLA + HICACHE_DCP, "H200"),
    ("DDT969", HOST_RECEIVE_DECODE + ["--hicache-storage-backend", "mooncake"],
     HOST_RECEIVE_DECODE + ["--hicache-storage-backend", "file"], "H200"),
]
CASES["DDT970"] = (PD_DECODE + ["--disaggregation-decode-enable-offload-kvcache"],
                   PD_DECODE + ["--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "file"],
                   "H200")
EXTRA += [
    ("DDT970", PD_DECODE + ["--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "file",
                            "--disaggregation-decode-retraction-backup", "host_pool"],
     PD_DECODE + ["--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "file"], "H200"),
    ("DDT970", KVLESS + ["--attention-backend", "flashinfer"], KVLESS, "H200"),
    ("DDT970", KVLESS, KVLESS + ["--attention-backend", "fa4"], "B200"),
    ("DDT970", HYBRID + ["--enable-int8-mamba-checkpoint", "--enable-hierarchical-cache"],
     HYBRID + ["--enable-int8-mamba-checkpoint"], "H200"),
    ("DDT970", HYBRID + ["--enable-int8-mamba-checkpoint", "--radix-cache-backend", "x"],
     HYBRID + ["--enable-int8-mamba-checkpoint"], "H200"),
    ("DDT970", EXTRA_BUFFER + ["--page-size", "96", "--mamba-track-interval", "192"],
     EXTRA_BUFFER + ["--page-size", "128", "--mamba-track-interval", "256"], "H200"),
]

# ---- DDT971 load publisher / serving env / mm transports, DDT972 PP speculative relay (validation_hook.py,
# serving_hook.py), DDT973 CUDA-graph config (cuda_graph_hook.py), DDT922 / DDT913 additions ----
KV_EVENTS = ["--kv-events-config", '{"publisher": "zmq", "endpoint": "tcp://*:5557"}']
PP_SPEC = {"SGLANG_ENABLE_PP_SPEC": "1"}
PP_NEXTN = MLA + ["--pp-size", "2", "--speculative-algorithm", "EAGLE", "--disable-overlap-schedule"]
CASES["DDT971"] = (DENSE + ["--load-publish-endpoint", "auto"], DENSE + ["--load-publish-endpoint", "auto"] + KV_EVENTS,
                   "H200")
EXTRA += [
    ("DDT971", DENSE + ["--load-publish-endpoint", "auto", "--kv-events-config", "{bad"],
     DENSE + ["--load-publish-endpoint", "auto"] + KV_EVENTS, "H200"),
    ("DDT971", DENSE + ["--load-publish-endpoint", "auto", "--kv-events-config", '{"publisher": "null"}'],
     DENSE + ["--load-publish-endpoint", "auto"] + KV_EVENTS, "H200"),
    ("DDT971", DENSE + ["--load-publish-endpoint", "auto", "--kv-events-config",
                        '{"publisher": "zmq", "endpoint": "tcp://10.0.0.1:5557"}'],
     DENSE + ["--load-publish-endpoint", "auto"] + KV_EVENTS, "H200"),
    ("DDT971", DENSE + ["--load-publish-endpoint", "tcp://*:5557"] + KV_EVENTS,
     DENSE + ["--load-publish-endpoint", "tcp://*:6000"] + KV_EVENTS, "H200"),
    ("DDT971", DENSE + ["--mm-feature-transport", "cuda_vmm", "--pp-size", "2", "--disable-overlap-schedule"],
     DENSE + ["--mm-feature-transport", "cuda_vmm"], "H200"),
    ("DDT971", DENSE + ["--mm-feature-transport", "cuda_ipc", "--nnodes", "2", "--tp-size", "2", "--dist-init-addr",
                        "127.0.0.1:5000"], DENSE + ["--mm-feature-transport", "cuda_ipc"], "H200"),
    ("DDT973", DENSE + ["--cuda-graph-config", '{"prefill": {"backend": "bogus"}}'],
     DENSE + ["--cuda-graph-config", '{"prefill": {"backend": "disabled"}}'], "H200"),
    ("DDT973", DENSE + ["--cuda-graph-prefill-max-context", "50000"],
     DENSE + ["--cuda-graph-prefill-max-context", "4096"], "H200"),
    ("DDT973", DENSE + ["--cuda-graph-prefill-max-context", "8000", "--context-length", "4096"],
     DENSE + ["--cuda-graph-prefill-max-context", "4000", "--context-length", "4096"], "H200"),
    ("DDT913", MLA + ["--enable-deterministic-inference", "--attention-backend", "fa4"],
     MLA + ["--enable-deterministic-inference", "--attention-backend", "fa3"], "H200"),
]
ENV += [
    ("DDT971", DENSE, {"SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS": "8"}, DENSE,
     {"SGLANG_ENABLE_DISAGG_SAMPLING_MASK": "1"}, "H200"),
    ("DDT971", DENSE + ["--grpc-port", "30001"], {"SGLANG_GRPC_WORKER_THREADS": "0"}, DENSE + ["--grpc-port", "30001"],
     {"SGLANG_GRPC_WORKER_THREADS": "2"}, "H200"),
    ("DDT972", PP_NEXTN + ["--speculative-adaptive"], PP_SPEC, PP_NEXTN, PP_SPEC, "H200"),
    ("DDT972", PP_NEXTN + ["--disaggregation-mode", "prefill"], PP_SPEC, PP_NEXTN, PP_SPEC, "H200"),
    ("DDT972", PP_NEXTN + ["--tp-size", "2", "--attn-dp-size", "2"], PP_SPEC, PP_NEXTN, PP_SPEC, "H200"),
    ("DDT972", DENSE + ["--pp-size", "2", "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path",
                        M["qwen3-8b-dflash-b16"], "--disaggregation-mode", "prefill", "--disable-overlap-schedule"],
     PP_SPEC, PP_NEXTN, PP_SPEC, "H200"),
    ("DDT922", EAGLE3 + ["--enable-watermark"], {"SGLANG_RUST_SERVER": "1"}, EAGLE3 + ["--enable-watermark"], {},
     "H200"),
]
CASES["DDT973"] = (DENSE + ["--cuda-graph-prefill-max-context", "50000"],
                   DENSE + ["--cuda-graph-prefill-max-context", "4096"], "H200")
ENV_ONLY = ("DDT972",)

# ---- launches SGLang 0.5.23 accepts that a warning / info rule reports (the override convention: never an error)
# (rule, argv, gpu): test_rules.py checks the rule reports it, below error severity; test_fuzz.py that SGLang
# accepts it.
UNO_LINEAR = DENSE + ["--speculative-algorithm", "UNO", "--uno-lora-path", "/x", "--speculative-num-draft-tokens",
                      "4", "--attention-backend", "fa3"]
ACCEPTED: list[tuple[str, list[str], str]] = [
    ("DDT956", UNO_LINEAR + ["--speculative-num-steps", "0"], "H200"),
    ("DDT974", EAGLE3 + ["--speculative-num-steps", "0", "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", "1"], "H200"),
    ("DDT974", EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "0",
                         "--speculative-num-draft-tokens", "4"], "H200"),
    ("DDT974", DENSE + ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "0"], "H200"),
    ("DDT974", DENSE + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                        M["qwen3-8b-dflash-b16"], "--speculative-num-draft-tokens", "0"], "H200"),
    ("DDT506", ["--model-path", M["qwen3-next-80b-a3b"], "--mamba-full-memory-ratio", "1.5"], "H200"),
]
STATIC_CASES = {
    "DDT974": (ACCEPTED[1][1], EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                         "--speculative-num-draft-tokens", "4"], "H200"),
}
ACCEPTED += [
    ("DDT930", MOE + ["--moe-runner-backend", "flashinfer_cutlass", "--quantization", "mxfp8"], "B200"),
]
