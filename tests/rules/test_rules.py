"""Every rule of the constraint graph: a case that trips it and a nearby case that does not.

Cases are raw launch argv over the config.json-only model dirs of tests/fidelity/models (shared with the fidelity
suite). A rule registered without a case here fails `test_every_rule_has_cases`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_cases import LAUNCH_CASES, LAUNCH_ENV_OF

from ddtctl.rules import all_rules
from ddtctl.validate import validate_argv

MODELS = Path(__file__).resolve().parents[1] / "fidelity" / "models"
M = {name: str(MODELS / name) for name in (
    "qwen3-8b", "qwen3-8b-dflash-b16", "qwen3-8b-dflash-b8", "qwen3-8b-dflash-noblock", "qwen3-8b-eagle3",
    "qwen3.6-27b", "qwen3.6-27b-dflash-b16", "qwen3-next-80b-a3b", "deepseek-v3-nextn", "qwen3-30b-a3b")}

DENSE = ["--model-path", M["qwen3-8b"]]
HYBRID = ["--model-path", M["qwen3.6-27b"]]
DFLASH = DENSE + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", M["qwen3-8b-dflash-b16"]]
DDTREE = DENSE + ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", M["qwen3-8b-dflash-b16"],
                  "--disable-overlap-schedule"]
HDDTREE = HYBRID + ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path",
                    M["qwen3.6-27b-dflash-b16"], "--disable-overlap-schedule"]
HYBRID_OK = ["--mamba-radix-cache-strategy", "extra_buffer", "--mamba-full-memory-ratio", "0.5"]
EAGLE3 = DENSE + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"]]
NGRAM = DENSE + ["--speculative-algorithm", "NGRAM"]

# rule -> (argv that trips it, argv that does not, gpu)
CASES: dict[str, tuple[list[str], list[str], str | None]] = {
    "DDT000": (DDTREE[:0] + ["--model-path", "/nonexistent/model", "--tp-size", "2"], DENSE + ["--tp-size", "2"], None),
    "DDT001": (DENSE + ["--tp-sise", "2"], DENSE + ["--tp-size", "2"], None),
    "DDT002": (DENSE + ["--tp-size", "two"], DENSE + ["--tp-size", "2"], None),
    "DDT003": (DENSE + ["--grammar-backend", "xgramar"], DENSE + ["--grammar-backend", "xgrammar"], None),
    "DDT008": (["--tp-size", "2"], DENSE + ["--tp-size", "2"], None),
    "DDT009": (DENSE + ["--tp-size", "2", "--tensor-parallel-size", "4"], DENSE + ["--tp-size", "2"], None),
    "DDT800": (DENSE + ["--speculative-algorithm", "EAGLE4"], EAGLE3, None),
    "DDT801": (DFLASH + ["--speculative-draft-window-size", "0"], DFLASH + ["--speculative-draft-window-size", "64"], None),
    "DDT802": (DFLASH + ["--speculative-draft-sink-size", "4"],
               DFLASH + ["--speculative-draft-window-size", "64", "--speculative-draft-sink-size", "4"], None),
    "DDT803": (NGRAM + ["--speculative-use-block-verification"], DFLASH + ["--speculative-use-block-verification"], None),
    "DDT804": (DFLASH + ["--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"],
               EAGLE3 + ["--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"], None),
    "DDT805": (DENSE + ["--speculative-num-steps", "3"], EAGLE3 + ["--speculative-num-steps", "3",
                                                                  "--speculative-eagle-topk", "1"], None),
    "DDT806": (DDTREE + ["--enable-mixed-chunk"], DFLASH + ["--enable-mixed-chunk"], None),
    "DDT607": (DENSE + ["--enable-torch-compile", "--disable-cuda-graph-padding"], DENSE + ["--enable-torch-compile"],
               None),
    "DDT608": (DENSE + ["--served-model-name", "qwen:8b"], DENSE + ["--served-model-name", "qwen-8b"], None),
    "DDT201": (DENSE + ["--speculative-algorithm", "DFLASH"], DFLASH, None),
    "DDT202": (DFLASH + ["--speculative-dflash-block-size", "0"], DFLASH + ["--speculative-dflash-block-size", "16"], None),
    "DDT203": (DFLASH + ["--speculative-dflash-block-size", "16", "--speculative-num-draft-tokens", "8"],
               DFLASH + ["--speculative-dflash-block-size", "16", "--speculative-num-draft-tokens", "16"], None),
    "DDT204": (DFLASH + ["--speculative-draft-window-size", "8"], DFLASH + ["--speculative-draft-window-size", "16"], None),
    "DDT205": (DFLASH + ["--pp-size", "2", "--disable-overlap-schedule"], DFLASH + ["--pp-size", "1"], None),
    "DDT206": (DFLASH + ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"],
               DFLASH + ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--enable-dp-lm-head"], None),
    "DDT207": (DFLASH + ["--device", "cpu"], DFLASH + ["--device", "cuda"], None),
    "DDT208": (DFLASH + ["--speculative-num-steps", "3"], DFLASH + ["--speculative-num-steps", "1"], None),
    "DDT209": (DENSE + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                        M["qwen3-8b-dflash-noblock"]],
               DENSE + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                        M["qwen3-8b-dflash-noblock"], "--speculative-dflash-block-size", "16"], None),
    "DDT301": (EAGLE3 + ["--speculative-num-steps", "3"],
               EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                         "--speculative-num-draft-tokens", "8"], None),
    "DDT302": (DENSE + ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", M["qwen3-8b"],
                        "--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"],
               DENSE + ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", M["qwen3-8b"]], None),
    "DDT303": (EAGLE3 + ["--speculative-use-rejection-sampling", "--speculative-num-steps", "3",
                         "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
               EAGLE3 + ["--speculative-use-rejection-sampling", "--speculative-num-steps", "3",
                         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], None),
    "DDT304": (EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens",
                         "8", "--page-size", "16", "--attention-backend", "flashmla"],
               EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens",
                         "8", "--page-size", "16", "--attention-backend", "fa3"], "H200"),
    "DDT305": (EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens",
                         "8", "--attention-backend", "trtllm_mha"],
               EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
                         "4", "--attention-backend", "trtllm_mha"], "B200"),
    "DDT306": (DENSE + ["--speculative-algorithm", "EAGLE"],
               ["--model-path", M["deepseek-v3-nextn"], "--speculative-algorithm", "EAGLE"], None),
    "DDT307": (EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"],
               EAGLE3 + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
               None),
    "DDT401": (NGRAM + ["--device", "npu"], NGRAM + ["--device", "cuda"], None),
    "DDT402": (NGRAM + ["--page-size", "16", "--attention-backend", "triton"],
               NGRAM + ["--page-size", "16", "--attention-backend", "flashinfer"], None),
    "DDT403": (NGRAM + ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"], NGRAM + ["--tp-size", "2"], None),
    "DDT404": (NGRAM + ["--speculative-ngram-external-corpus-path", "/c.jsonl", "--speculative-ngram-external-sam-budget",
                        "20"],
               NGRAM + ["--speculative-ngram-external-corpus-path", "/c.jsonl", "--speculative-ngram-external-sam-budget",
                        "8"], None),
    "DDT501": (DENSE + ["--mamba-radix-cache-strategy", "extra_buffer"], HYBRID + ["--mamba-radix-cache-strategy",
                                                                                  "extra_buffer"], None),
    "DDT502": (HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer", "--linear-attn-backend", "flashinfer"],
               HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer", "--linear-attn-backend", "triton"], None),
    "DDT503": (HYBRID + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                         M["qwen3.6-27b-dflash-b16"], "--mamba-radix-cache-strategy", "extra_buffer",
                         "--speculative-num-draft-tokens", "16", "--mamba-track-interval", "8"],
               HYBRID + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                         M["qwen3.6-27b-dflash-b16"], "--mamba-radix-cache-strategy", "extra_buffer",
                         "--speculative-num-draft-tokens", "16", "--mamba-track-interval", "16"], None),
    # stricter than SGLang: the draft tokens come from the drafter's block size, after SGLang's own assert ran
    "DDT509": (HYBRID + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                         M["qwen3.6-27b-dflash-b16"], "--mamba-radix-cache-strategy", "extra_buffer",
                         "--mamba-track-interval", "8"],
               HYBRID + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                         M["qwen3.6-27b-dflash-b16"], "--mamba-radix-cache-strategy", "extra_buffer",
                         "--mamba-track-interval", "16"], None),
    # a warning: the plugin lives on the server host
    "DDT939": (DENSE + ["--enable-nvidia-megakernel"], DENSE, None),
    # info: SGLang upper-cases the algorithm (and runs NEXTN as EAGLE); every override it reports is checked against
    # SGLang by tests/fidelity/test_fuzz.py (override examples of ddtctl/rules/overrides.yaml, the sample's overrides)
    "DDT950": (DENSE + ["--speculative-algorithm", "eagle3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"]],
               EAGLE3, "H200"),
    "DDT504": (HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer", "--page-size", "64", "--mamba-track-interval",
                         "96"],
               HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer", "--page-size", "64", "--mamba-track-interval",
                         "128"], None),
    "DDT505": (HYBRID + ["--mamba-radix-cache-strategy", "no_buffer"],
               HYBRID + ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"], None),
    "DDT506": (HYBRID + ["--mamba-full-memory-ratio", "-1"], HYBRID + ["--mamba-full-memory-ratio", "0.5"], None),
    "DDT507": (HYBRID + ["--linear-attn-backend", "flashinfer"], HYBRID, None),
    "DDT508": (HYBRID + ["--mamba-max-states-per-path", "0"], HYBRID + ["--mamba-max-states-per-path", "4"], None),
    "DDT601": (DENSE + ["--tp-size", "4"], DENSE + ["--tp-size", "1"], None),
    "DDT602": (DENSE + ["--tp-size", "3"], DENSE + ["--tp-size", "4"], None),
    "DDT603": (DENSE + ["--tp-size", "3", "--nnodes", "2"], DENSE + ["--tp-size", "4", "--nnodes", "2"], None),
    "DDT604": (DENSE + ["--dp-size", "2", "--nnodes", "2", "--tp-size", "2"], DENSE + ["--dp-size", "2"], None),
    "DDT605": (DENSE + ["--pp-size", "2"], DENSE + ["--pp-size", "2", "--disable-overlap-schedule"], None),
    "DDT606": (DENSE + ["--chunked-prefill-size", "1000", "--page-size", "64"],
               DENSE + ["--chunked-prefill-size", "1024", "--page-size", "64"], None),
    "DDT701": (DENSE + ["--attention-backend", "fa3"], DENSE + ["--attention-backend", "trtllm_mha"], "B200"),
    "DDT101": (DENSE + ["--speculative-algorithm", "DDTREE", "--disable-overlap-schedule"], DDTREE, None),
    "DDT102": (DDTREE + ["--speculative-dflash-block-size", "0"], DDTREE + ["--speculative-dflash-block-size", "16"], None),
    "DDT103": (DDTREE + ["--speculative-dflash-block-size", "16", "--speculative-num-draft-tokens", "8"],
               DDTREE + ["--speculative-dflash-block-size", "16", "--speculative-num-draft-tokens", "16"], None),
    "DDT104": (DDTREE + ["--speculative-ddtree-budget", "0"], DDTREE + ["--speculative-ddtree-budget", "1"], None),
    "DDT105": (DDTREE + ["--speculative-ddtree-topk-cap", "0"], DDTREE + ["--speculative-ddtree-topk-cap", "1"], None),
    "DDT106": (DDTREE + ["--speculative-ddtree-budget", "5000"], DDTREE + ["--speculative-ddtree-budget", "4096"], None),
    "DDT107": (DDTREE + ["--speculative-ddtree-budget", "16", "--speculative-ddtree-topk-cap", "1"],
               DDTREE + ["--speculative-ddtree-budget", "15", "--speculative-ddtree-topk-cap", "1"], None),
    "DDT108": (DDTREE + ["--pp-size", "2"], DDTREE + ["--pp-size", "1"], None),
    "DDT109": (DDTREE + ["--grammar-backend", "xgrammar"], DDTREE + ["--grammar-backend", "none"], None),
    "DDT111": (HDDTREE + ["--speculative-ddtree-shadow-linear"], HDDTREE + HYBRID_OK + ["--speculative-ddtree-shadow-linear"],
               None),
    "DDT112": (HDDTREE + HYBRID_OK + ["--speculative-ddtree-shadow-linear", "--speculative-ddtree-allow-hybrid-unsafe"],
               HDDTREE + HYBRID_OK, None),
    "DDT113": (HDDTREE + HYBRID_OK + ["--speculative-ddtree-allow-hybrid-unsafe"],
               HDDTREE + HYBRID_OK + ["--speculative-ddtree-shadow-linear"], None),
    # the flagship's shape at tp 1, budget 128 (129 nodes: SGLang's GDN kernel, 928,002 MiB of full-state scratch)
    # does not fit one RTX PRO 6000; at budget 64 (65 nodes) the compact GDN verify's records (16,152 MiB) do
    "DDT114": (HDDTREE + HYBRID_OK + ["--tp-size", "1", "--speculative-ddtree-budget", "128"],
               HDDTREE + HYBRID_OK + ["--tp-size", "1", "--speculative-ddtree-budget", "64"], "RTX_PRO_6000_BLACKWELL"),
    "DDT115": (DDTREE, DDTREE + ["--attention-backend", "triton"], None),
    # a budget schedule whose batch sizes do not increase; then the example schedule
    "DDT117": (DDTREE + ["--speculative-ddtree-budget-schedule", "4:64,2:127,0"],
               DDTREE + ["--speculative-ddtree-budget-schedule", "2:127,4:64,8:16,0"], None),
    # the same launch; its env (ENV_OF) names an unknown GDN tree kernel, then the compact one
    "DDT116": (HDDTREE + HYBRID_OK, HDDTREE + HYBRID_OK, None),
    "DDT120": (DDTREE + ["--attention-backend", "triton", "--tp-size", "2", "--enable-dp-attention", "--dp-size", "2",
                         "--enable-dp-lm-head"],
               DDTREE + ["--attention-backend", "triton", "--tp-size", "8"], None),
}
# Rules reported when the profile names the hardware (validate_argv has no hardware.count): tested via profiles.
# Rules derived from SGLang's raise sites (ddtctl/rules/hooks/); every pair is also resolved by SGLang in
# tests/fidelity/test_fuzz.py::test_hook_rule_cases_agree_with_sglang.
MLA = ["--model-path", M["deepseek-v3-nextn"]]
MOE = ["--model-path", M["qwen3-30b-a3b"]]
HOOK_CASES: dict[str, tuple[list[str], list[str], str | None]] = {
    "DDT901": (MOE + ["--tp-size", "4", "--moe-dense-tp-size", "2"], MOE + ["--tp-size", "4", "--moe-dense-tp-size", "1"],
               "H200"),
    "DDT902": (DENSE + ["--enable-two-batch-overlap"],
               DENSE + ["--enable-two-batch-overlap", "--tp-size", "2", "--attn-dp-size", "2"], "H200"),
    "DDT903": (DENSE + ["--attn-cp-size", "2"], DENSE + ["--tp-size", "2", "--attn-cp-size", "2"], "H200"),
    "DDT904": (DENSE + ["--enable-dp-lm-head", "--dp-size", "2"],
               DENSE + ["--enable-dp-lm-head", "--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"], "H200"),
    "DDT905": (MOE + ["--moe-a2a-backend", "flashinfer", "--tp-size", "2"],
               MOE + ["--moe-a2a-backend", "flashinfer", "--tp-size", "2", "--attn-dp-size", "2",
                      "--moe-runner-backend", "flashinfer_cutlass"], "H200"),
    "DDT906": (DENSE + ["--dcp-replicate-q-proj"], DENSE, "H200"),
    "DDT907": (MOE + ["--max-ep-size", "4"], MOE, "H200"),
    "DDT908": (DENSE + ["--enable-layernorm-sp"], DENSE + ["--enable-layernorm-sp", "--tp-size", "2"], "H200"),
    "DDT909": (DENSE + ["--pp-max-micro-batch-size", "-1"], DENSE + ["--pp-max-micro-batch-size", "4"], "H200"),
    "DDT910": (DENSE + ["--kv-cache-dtype", "mxfp8"], DENSE + ["--kv-cache-dtype", "fp8_e4m3"], "H200"),
    "DDT911": (DENSE + ["--kv-cache-dtype", "fp4_mx_block16"],
               DENSE + ["--kv-cache-dtype", "fp4_mx_block16", "--attention-backend", "triton"], "H200"),
    "DDT912": (MLA + ["--attention-backend", "trtllm_mla"], MLA + ["--attention-backend", "flashinfer"], "H200"),
    "DDT913": (DENSE + ["--enable-deterministic-inference", "--attention-backend", "torch_native"],
               DENSE + ["--enable-deterministic-inference", "--attention-backend", "triton"], "H200"),
    "DDT914": (EAGLE3 + ["--attention-backend", "flex_attention"], DENSE + ["--attention-backend", "flex_attention"],
               "H200"),
    "DDT915": (DENSE + ["--enable-hierarchical-cache", "--disable-radix-cache"], DENSE + ["--enable-hierarchical-cache"],
               "H200"),
    "DDT916": (DENSE + ["--enable-lora"],
               DENSE + ["--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "q_proj"], "H200"),
    "DDT917": (DENSE + ["--sampling-backend", "intel_xpu"], DENSE + ["--sampling-backend", "pytorch"], "H200"),
    "DDT918": (EAGLE3 + ["--enable-return-aux-hidden-states"],
               DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states"], "H200"),
    "DDT919": (DENSE + ["--context-length", "1048576"], DENSE + ["--context-length", "32768"], "H200"),
    "DDT920": (DENSE + ["--speculative-algorithm", "UNO", "--speculative-draft-model-path", M["qwen3-8b"]],
               NGRAM, "H200"),
    "DDT921": (DENSE + ["--speculative-algorithm", "DSPARK"], DFLASH, "H200"),
    "DDT922": (DFLASH + ["--enable-watermark"], EAGLE3 + ["--enable-watermark"], "H200"),
    "DDT924": (DENSE + ["--enable-quant-communications"], DENSE, "H200"),
    "DDT926": (DENSE + ["--enable-dsa-cache-layer-split"], DENSE, "H200"),
    "DDT925": (DENSE + ["--disaggregation-decode-allocation-policy", "prefill_complete"],
               DENSE + ["--disaggregation-decode-allocation-policy", "early"], "H200"),
    "DDT308": (EAGLE3 + ["--speculative-adaptive", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", "3"],
               EAGLE3 + ["--speculative-adaptive", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", "4"], "H200"),
    "DDT927": (DENSE + ["--kv-cache-dtype", "nvfp4", "--attention-backend", "triton"],
               DENSE + ["--kv-cache-dtype", "nvfp4"], "B200"),
    "DDT928": (EAGLE3 + ["--enable-lmcache"], DENSE + ["--enable-lmcache"], "H200"),
    "DDT929": (DENSE + ["--language-model-only"], HYBRID + ["--enable-prefix-mm-cache", "--encoder-only"], "H200"),
    "DDT930": (DENSE + ["--moe-runner-backend", "flashinfer_cutedsl"],
               DENSE + ["--moe-runner-backend", "flashinfer_cutlass"], "H200"),
    "DDT931": (MOE + ["--moe-a2a-backend", "mori"],
               MOE + ["--moe-a2a-backend", "mori", "--chunked-prefill-size", "4096"], "H200"),
    "DDT932": (MOE + ["--enable-eplb"], MOE + ["--enable-eplb", "--tp-size", "2", "--ep-size", "2"], "H200"),
    "DDT933": (DENSE + ["--linear-attn-backend", "flashinfer"],
               DENSE + ["--linear-attn-backend", "flashinfer", "--mamba-ssm-dtype", "bfloat16"], "B200"),
    "DDT934": (DENSE + ["--shared-experts-tp-size", "1"], DENSE, "H200"),
    "DDT935": (DENSE + ["--prefill-decode-interval-min-bs", "-1"], DENSE + ["--prefill-decode-interval-min-bs", "0"],
               "H200"),
    "DDT936": (DENSE + ["--enable-pdmux", "--disable-overlap-schedule"],
               DENSE + ["--enable-pdmux", "--disable-overlap-schedule", "--chunked-prefill-size", "-1"], "H200"),
    "DDT937": (DENSE + ["--attention-backend", "trtllm_mha", "--kv-cache-dtype", "fp8_e4m3"],
               DENSE + ["--attention-backend", "trtllm_mha"], "RTX_PRO_6000_BLACKWELL"),
    "DDT940": (EAGLE3 + ["--enable-unified-memory"], DENSE + ["--enable-unified-memory"], "H200"),
    "DDT943": (DENSE + ["--export-metrics-to-file"],
               DENSE + ["--export-metrics-to-file", "--export-metrics-to-file-dir", "/tmp/m"], "H200"),
    "DDT944": (DENSE + ["--no-ple-offload-embedding", "--ple-offload-backend", "file"],
               DENSE + ["--ple-offload-backend", "file"], "H200"),
    "DDT942": (DENSE + ["--quantization", "gptq"], DENSE + ["--quantization", "fp8"], "H200"),
    "DDT941": (MOE + ["--attn-dp-size", "4"], MOE + ["--attn-dp-size", "4", "--tp-size", "4"], "H200"),
    "DDT938": (DENSE + ["--retraction-policy", "priority"],
               DENSE + ["--retraction-policy", "priority", "--enable-priority-scheduling"], "H200"),
}
HYBRID_DFLASH = HYBRID + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                          M["qwen3.6-27b-dflash-b16"]]
NEXT = ["--model-path", M["qwen3-next-80b-a3b"]]
# More (rule, argv SGLang rejects, argv it accepts, gpu) pairs for rules whose verdict depends on what SGLang
# resolves (attention backend, page size, radix cache): each found as a fuzz disagreement class, checked statically
# here and against SGLang in tests/fidelity/test_fuzz.py.
HOOK_EXTRA: list[tuple[str, list[str], list[str], str]] = [
    # raise sites the pairwise covering array found (tests/fidelity/cover.py), one pair each
    ("DDT944", DENSE + ["--ple-offload-embedding", "--cpu-offload-gb", "4"],
     DENSE + ["--no-ple-offload-embedding", "--cpu-offload-gb", "4"], "H200"),
    # serving_hook.py:692-701 resolves --quantization unquant to None before moe_hook.py:80's assert
    ("DDT930", DENSE + ["--moe-runner-backend", "flashinfer_cutlass", "--quantization", "fp8"],
     DENSE + ["--moe-runner-backend", "flashinfer_cutlass", "--quantization", "unquant"], "H200"),
    ("DDT943", DENSE + ["--speculative-algorithm", "NGRAM", "--weight-cache-mode", "daemon"],
     DENSE + ["--speculative-algorithm", "NGRAM"], "H200"),
    ("DDT935", DENSE + ["--asr-max-concurrent-sessions", "0"], DENSE + ["--asr-max-concurrent-sessions", "1"], "H200"),
    ("DDT935", DENSE + ["--grpc-response-timeout-secs", "0"], DENSE + ["--grpc-response-timeout-secs", "5"], "H200"),
    ("DDT935", DENSE + ["--mm-preprocess-cache-size-mb", "-1"], DENSE + ["--mm-preprocess-cache-size-mb", "0"],
     "H200"),
    ("DDT935", DENSE + ["--media-url-max-file-size-mb", "-1"], DENSE + ["--media-url-max-file-size-mb", "0"],
     "H200"),
    ("DDT935", DENSE + ["--swa-full-tokens-ratio", "0"], DENSE + ["--swa-full-tokens-ratio", "1.0"], "H200"),
    ("DDT935", DENSE + ["--swa-full-tokens-ratio", "1.5"], DENSE + ["--swa-full-tokens-ratio", "0.5"], "H200"),
    ("DDT935", DENSE + ["--disaggregation-decode-host-receive-threshold", "-0.5"],
     DENSE + ["--disaggregation-decode-host-receive-threshold", "1"], "H200"),
    # nvfp4 picks flashinfer prefill + trtllm_mha decode on SM120: accepted; fp4_mx_block16 keeps flashinfer
    ("DDT911", DENSE + ["--kv-cache-dtype", "fp4_mx_block16"], DENSE + ["--kv-cache-dtype", "nvfp4"],
     "RTX_PRO_6000_BLACKWELL"),
    # a plain --speculative-eagle-topk > 1 keeps trtllm_mha from being the SM100 default
    ("DDT911", DENSE + ["--kv-cache-dtype", "fp4_mx_block16", "--speculative-eagle-topk", "8"],
     DENSE + ["--kv-cache-dtype", "fp4_mx_block16"], "B200"),
    # Qwen3.6's model override picks trtllm_mha on SM100 before deterministic inference checks the backend
    ("DDT913", HYBRID_DFLASH + ["--enable-deterministic-inference"],
     HYBRID_DFLASH + ["--enable-deterministic-inference", "--attention-backend", "triton"], "B200"),
    # DeepSeek's override picks trtllm_mla on SM100; MLA models need a radix-capable deterministic backend
    ("DDT913", MLA + ["--enable-deterministic-inference"],
     MLA + ["--enable-deterministic-inference", "--attention-backend", "triton"], "B200"),
    ("DDT913", MLA + ["--rl-on-policy-target", "fsdp", "--attention-backend", "flashinfer"],
     MLA + ["--rl-on-policy-target", "fsdp", "--attention-backend", "fa3"], "H200"),
    # deterministic inference on flashinfer turns the radix cache off, which hierarchical caching needs
    ("DDT915", DENSE + ["--enable-deterministic-inference", "--enable-hierarchical-cache"],
     DENSE + ["--enable-deterministic-inference", "--enable-hierarchical-cache", "--attention-backend", "triton"],
     "B200"),
    # the model override sets page 64 (trtllm_mha) for a DFLASH hybrid on SM100, or page 1 (triton) without spec
    ("DDT504", HYBRID_DFLASH + ["--mamba-track-interval", "16"],
     NEXT + ["--mamba-track-interval", "8", "--page-size", "64"], "B200"),
    # tokenspeed_mla is cutedsl_mla (SM100 only); DeepSeek on SM100 gets trtllm_mla, which refuses fp8_e5m2
    ("DDT912", DENSE + ["--decode-attention-backend", "tokenspeed_mla"], DENSE + ["--decode-attention-backend",
                                                                                 "triton"], "RTX_PRO_6000_BLACKWELL"),
    ("DDT912", MLA + ["--kv-cache-dtype", "fp8_e5m2"], MLA + ["--kv-cache-dtype", "fp8_e4m3"], "B200"),
    # the page size the chunk must divide is SGLang's: trtllm_mha (the SM100 default) snaps it to 64
    ("DDT606", DENSE + ["--chunked-prefill-size", "1000"], DENSE + ["--chunked-prefill-size", "1024"], "B200"),
    # an extra-buffer strategy is inert without the radix cache
    ("DDT501", DENSE + ["--mamba-radix-cache-strategy", "extra_buffer"],
     DENSE + ["--mamba-radix-cache-strategy", "extra_buffer", "--disable-radix-cache"], "H200"),
    # a tokenspeed_mla prefill backend becomes trtllm_mla (serving_hook.py:320-322), not cutedsl_mla
    ("DDT912", DENSE + ["--decode-attention-backend", "tokenspeed_mla"],
     DENSE + ["--prefill-attention-backend", "tokenspeed_mla"], "H200"),
    ("DDT916", DENSE + ["--max-loras-per-batch", "0"], DENSE + ["--max-loras-per-batch", "1"], "H200"),
    ("DDT907", MOE + ["--elastic-ep-join-rank-offset", "256"], MOE, "H200"),
    ("DDT931", MOE + ["--flashinfer-a2a-dispatch-type", "bf16"], MOE + ["--flashinfer-a2a-dispatch-type", "auto"],
     "H200"),
    ("DDT503", HYBRID_DFLASH + ["--mamba-radix-cache-strategy", "extra_buffer", "--speculative-num-draft-tokens", "16",
                                "--mamba-track-interval", "8"],
     HYBRID_DFLASH + ["--mamba-radix-cache-strategy", "extra_buffer", "--mamba-track-interval", "8"], "H200"),
    # MegaMoE on Qwen3 MoE: SGLang's default chunked prefill on a B200 (16384) exceeds the 8192-token rank budget
    ("DDT931", MOE + ["--moe-a2a-backend", "megamoe"],
     MOE + ["--moe-a2a-backend", "megamoe", "--chunked-prefill-size", "8192"], "B200"),
    ("DDT915", DENSE + ["--disaggregation-decode-retraction-backup", "host_pool"], DENSE, "H200"),
    # the unified pool implies the page-major layout and its backend allow-list
    ("DDT940", NEXT + ["--enable-unified-memory", "--attention-backend", "trtllm_mla"],
     NEXT + ["--enable-unified-memory", "--attention-backend", "triton"], "B200"),
    # ascend_tp runs as none on CUDA (moe_hook.py:459-468): two-batch overlap then needs attention DP
    ("DDT902", DENSE + ["--enable-two-batch-overlap", "--moe-a2a-backend", "ascend_tp"],
     DENSE + ["--enable-two-batch-overlap", "--moe-a2a-backend", "ascend_tp", "--tp-size", "2", "--attn-dp-size", "2"],
     "H200"),
    ("DDT938", DENSE + ["--radix-eviction-policy", "tlru"],
     DENSE + ["--radix-eviction-policy", "tlru", "--radix-eviction-policy-config",
              '{"threshold": 8, "next_prompt_estimate": 2}'], "H200"),
    # flashinfer all-to-all needs attention DP even at tp 1
    ("DDT905", MOE + ["--moe-a2a-backend", "flashinfer"], MOE, "H200"),
    # adaptive fills steps and topk only where it runs (topk 1); topk 4 turns it off and the EAGLE assert fires
    ("DDT301", EAGLE3 + ["--speculative-adaptive", "--speculative-eagle-topk", "4"],
     EAGLE3 + ["--speculative-adaptive", "--speculative-eagle-topk", "1"], "H200"),
]
# Rules for sites that read only the launch's flags (ddtctl/rules/hooks/validation.py, lora.py; issue #32 item 2)
LORA = ["--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "q_proj"]
HOOK_CASES.update({
    "DDT945": (DENSE + ["--watermark-config", '{"key": "ab"}'],
               DENSE + ["--enable-watermark", "--watermark-config", '{"key": "ab"}'], "H200"),
    "DDT946": (DENSE + ["--prompt-tokens-buckets", "foo"],
               DENSE + ["--prompt-tokens-buckets", "default"], "H200"),
    "DDT947": (DENSE + ["--enable-priority-scheduling", "--schedule-policy", "lpm"],
               DENSE + ["--enable-priority-scheduling", "--schedule-policy", "lof"], "H200"),
    "DDT948": (DENSE + ["--return-aux-hidden-state-layer-ids", "1", "2"],
               DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states", "--return-aux-hidden-state-layer-ids", "1", "2"], "H200"),
    "DDT951": (DENSE + ["--sidecar-args", '["a"]'],
               DENSE + ["--sidecar", "x", "--grpc-port", "30001", "--sidecar-args", '["a"]'], "H200"),
    "DDT952": (DENSE + LORA + ["--lora-backend", "triton_v2", "--enable-pdmux", "--disable-overlap-schedule", "--chunked-prefill-size", "-1"],
               DENSE + LORA + ["--enable-pdmux", "--disable-overlap-schedule", "--chunked-prefill-size", "-1"], "H200"),
    "DDT953": (MOE + LORA + ["--moe-runner-backend", "lora_triton"],
               MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2"], "H200"),
    "DDT954": (DENSE + LORA + ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", M["qwen3-8b"]],
               DENSE + LORA + ["--speculative-algorithm", "NGRAM"], "H200"),
})
# one pair per further raise site these rules cover, each also resolved by SGLang (tests/fidelity/test_fuzz.py)
HOOK_EXTRA += [
    ("DDT945", DENSE + ["--enable-watermark", "--device", "cpu"],
     DENSE + ["--enable-watermark", "--device", "cuda"], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--watermark-config", '{"key_b": "ab"}'],
     DENSE + ["--enable-watermark", "--watermark-config", '{"key": "ab", "key_b": "cd"}'], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--watermark-config", '{"key": "ab", "key_b": "cd", "mixing_probability": 1.0}'],
     DENSE + ["--enable-watermark", "--watermark-config", '{"key": "ab", "key_b": "cd", "mixing_probability": 0.3}'], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--watermark-config", '{"mixing_probability": 0.3}'],
     DENSE + ["--enable-watermark", "--watermark-config", '{"mixing_probability": 0.5}'], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--watermark-config", '{"max_probability": 0}'],
     DENSE + ["--enable-watermark", "--watermark-config", '{"max_probability": 0.9}'], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--watermark-config", '{"enforce_all": true}'],
     DENSE + ["--enable-watermark", "--watermark-config", '{"enforce_all": true, "key": "ab"}'], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--enable-custom-logit-processor"],
     DENSE + ["--enable-custom-logit-processor"], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--dllm-algorithm", "LowConfidence"],
     DENSE + ["--enable-watermark"], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--speculative-algorithm", "NGRAM", "--speculative-use-rejection-sampling"],
     DENSE + ["--enable-watermark", "--speculative-algorithm", "NGRAM"], "H200"),
    ("DDT945", DENSE + ["--enable-watermark", "--watermark-config", '{"context_window": 65}'],
     DENSE + ["--enable-watermark", "--watermark-config", '{"context_window": 64}'], "H200"),
    ("DDT946", DENSE + ["--prompt-tokens-buckets", "tse", "1", "2"],
     DENSE + ["--prompt-tokens-buckets", "tse", "1", "2", "3"], "H200"),
    ("DDT946", DENSE + ["--prompt-tokens-buckets", "tse", "x", "2", "3"],
     DENSE + ["--prompt-tokens-buckets", "tse", "1", "2", "3"], "H200"),
    ("DDT946", DENSE + ["--generation-tokens-buckets", "tse", "1", "1", "3"],
     DENSE + ["--generation-tokens-buckets", "tse", "1", "1.5", "3"], "H200"),
    ("DDT946", DENSE + ["--generation-tokens-buckets", "tse", "1", "2", "0"],
     DENSE + ["--generation-tokens-buckets", "tse", "1", "2", "1"], "H200"),
    ("DDT946", DENSE + ["--generation-tokens-buckets", "tse", "0", "2", "3"],
     DENSE + ["--generation-tokens-buckets", "tse", "0.5", "2", "3"], "H200"),
    ("DDT946", DENSE + ["--prompt-tokens-buckets", "default", "1"],
     DENSE + ["--prompt-tokens-buckets", "default"], "H200"),
    ("DDT946", DENSE + ["--prompt-tokens-buckets", "custom"],
     DENSE + ["--prompt-tokens-buckets", "custom", "10"], "H200"),
    ("DDT946", DENSE + ["--prompt-tokens-buckets", "custom", "a"],
     DENSE + ["--prompt-tokens-buckets", "custom", "1"], "H200"),
    ("DDT946", DENSE + ["--prompt-tokens-buckets", "custom", "1", "1"],
     DENSE + ["--prompt-tokens-buckets", "custom", "1", "2"], "H200"),
    ("DDT946", DENSE + ["--prompt-tokens-buckets", "custom", "-1"],
     DENSE + ["--prompt-tokens-buckets", "custom", "0"], "H200"),
    ("DDT947", DENSE + ["--tokenizer-metrics-custom-labels-header", "", "--tokenizer-metrics-allowed-custom-labels", "a"],
     DENSE + ["--tokenizer-metrics-allowed-custom-labels", "a"], "H200"),
    ("DDT947", DENSE + ["--grpc-port", "30000"],
     DENSE + ["--grpc-port", "30001"], "H200"),
    ("DDT947", DENSE + ["--gc-threshold", "1", "2", "3", "4"],
     DENSE + ["--gc-threshold", "1", "2", "3"], "H200"),
    ("DDT947", DENSE + ["--enable-response-store", "--disaggregation-mode", "prefill"],
     DENSE + ["--enable-response-store"], "H200"),
    ("DDT947", DENSE + ["--enable-tokenizer-batch-encode", "--enable-dynamic-batch-tokenizer"],
     DENSE + ["--enable-dynamic-batch-tokenizer"], "H200"),
    ("DDT947", DENSE + ["--disable-fast-image-processor", "--image-processor-backend", "torchvision"],
     DENSE + ["--disable-fast-image-processor", "--image-processor-backend", "pil"], "H200"),
    ("DDT947", DENSE + ["--default-chat-template-kwargs", "[1]"],
     DENSE + ["--default-chat-template-kwargs", '{"enable_thinking": false}'], "H200"),
    ("DDT947", DENSE + ["--mm-process-config", "[1]"],
     DENSE + ["--mm-process-config", '{"image": {}}'], "H200"),
    ("DDT947", DENSE + ["--mm-process-config", '{"image": 1}'],
     DENSE + ["--mm-process-config", '{"image": {}}'], "H200"),
    ("DDT947", DENSE + ["--limit-mm-data-per-request", '{"text": 1}'],
     DENSE + ["--limit-mm-data-per-request", '{"image": 1}'], "H200"),
    ("DDT947", DENSE + ["--preferred-sampling-params", '{"watermark": true}'],
     DENSE + ["--preferred-sampling-params", '{"temperature": 0.5}'], "H200"),
    ("DDT948", DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states", "--return-aux-hidden-state-layer-ids", "-1", "2"],
     DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states", "--return-aux-hidden-state-layer-ids", "1", "2"], "H200"),
    ("DDT948", DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states", "--return-aux-hidden-state-layer-ids", "2", "2"],
     DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states", "--return-aux-hidden-state-layer-ids", "1", "2"], "H200"),
    ("DDT918", DENSE + ["--speculative-algorithm", "DFLASH", "--enable-return-aux-hidden-states"],
     DENSE + ["--speculative-algorithm", "DFLASH", "--enable-return-aux-hidden-states", "--return-aux-hidden-state-layer-ids", "1", "2"], "H200"),
    ("DDT951", DENSE + ["--sidecar", "x", "--grpc-port", "30001", "--sidecar-args", "[1]"],
     DENSE + ["--sidecar", "x", "--grpc-port", "30001", "--sidecar-args", '["a"]'], "H200"),
    ("DDT951", DENSE + ["--sidecar", " ", "--grpc-port", "30001"],
     DENSE + ["--sidecar", "x", "--grpc-port", "30001"], "H200"),
    ("DDT951", DENSE + ["--sidecar", "x", "--grpc-mode"],
     DENSE + ["--grpc-mode"], "H200"),
    ("DDT951", DENSE + ["--sidecar", "x"],
     DENSE + ["--sidecar", "x", "--grpc-port", "30001"], "H200"),
    ("DDT951", DENSE + ["--grpc-port", "30001", "--use-ray"],
     DENSE + ["--use-ray"], "H200"),
    ("DDT951", DENSE + ["--grpc-port", "30001", "--tokenizer-worker-num", "2"],
     DENSE + ["--tokenizer-worker-num", "2"], "H200"),
    ("DDT951", DENSE + ["--grpc-port", "30001", "--api-key", "k"],
     DENSE + ["--api-key", "k"], "H200"),
    ("DDT952", DENSE + LORA + ["--lora-backend", "triton_v2", "--tp-size", "2", "--attn-dp-size", "2"],
     DENSE + LORA + ["--tp-size", "2", "--attn-dp-size", "2"], "H200"),
    ("DDT952", DENSE + LORA + ["--enable-lora-overlap-loading"],
     DENSE + LORA + ["--enable-lora-overlap-loading", "--max-loaded-loras", "16"], "H200"),
    ("DDT952", DENSE + ["--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all", "q_proj"],
     DENSE + ["--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all"], "H200"),
    ("DDT952", DENSE + LORA + ["--max-loaded-loras", "4"],
     DENSE + LORA + ["--max-loaded-loras", "8"], "H200"),
    ("DDT952", DENSE + ["--lora-paths", "a=/x", "b=/y", "--max-loaded-loras", "1", "--max-loras-per-batch", "1"],
     DENSE + ["--lora-paths", "a=/x", "--max-loaded-loras", "1", "--max-loras-per-batch", "1"], "H200"),
    ("DDT952", DENSE + LORA + ["--lora-drain-wait-threshold", "-1"],
     DENSE + LORA + ["--lora-drain-wait-threshold", "0.5"], "H200"),
    ("DDT953", MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--enable-two-batch-overlap", "--tp-size", "2", "--attn-dp-size", "2"],
     MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--tp-size", "2"], "H200"),
    ("DDT953", MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--quantization", "awq"],
     MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--quantization", "fp8"], "H200"),
    ("DDT953", MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--quantization", "modelopt_fp4"],
     MOE + LORA + ["--moe-runner-backend", "lora_marlin", "--lora-backend", "triton_v2", "--quantization", "modelopt_fp4"], "H200"),
    ("DDT953", MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--moe-a2a-backend", "deepep", "--tp-size", "2", "--ep-size", "2"],
     MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--tp-size", "2", "--ep-size", "2"], "H200"),
    ("DDT953", MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--elastic-ep-join-mode", "recover"],
     MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2"], "H200"),
    ("DDT953", MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2", "--ep-num-redundant-experts", "2"],
     MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2"], "H200"),
    ("DDT916", MOE + ["--moe-runner-backend", "lora_triton"],
     MOE + LORA + ["--moe-runner-backend", "lora_triton", "--lora-backend", "triton_v2"], "H200"),
    ("DDT954", MOE + LORA + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"], "--moe-runner-backend", "experimental_sgl_trtllm"],
     MOE + LORA + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", M["qwen3-8b-eagle3"]], "B200"),
    ("DDT603", DENSE + ["--tp-size", "3", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:5000"],
     DENSE + ["--tp-size", "4", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:5000"], "H200"),
    ("DDT951", HYBRID + ["--grpc-port", "30001", "--encoder-only"],
     HYBRID + ["--encoder-only"], "H200"),
    ("DDT605", DENSE + ["--pp-size", "2", "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", M["qwen3-8b-dflash-b16"]],
     DENSE + ["--pp-size", "2", "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", M["qwen3-8b-dflash-b16"], "--disaggregation-mode", "prefill", "--disable-overlap-schedule"], "H200"),
    ("DDT605", DENSE + ["--pp-size", "2", "--min-free-slots-delay", "3"],
     DENSE + ["--pp-size", "2", "--disable-overlap-schedule"], "H200"),
    ("DDT605", DENSE + ["--pp-size", "2", "--speculative-algorithm", "NGRAM"],
     DENSE + ["--pp-size", "2", "--disable-overlap-schedule"], "H200"),
    ("DDT605", MLA + ["--pp-size", "2", "--speculative-algorithm", "NEXTN"],
     MLA + ["--pp-size", "2", "--speculative-algorithm", "NEXTN", "--disaggregation-mode", "prefill", "--disable-overlap-schedule"], "H200"),
]
HOOK_CASES["DDT955"] = (DENSE + ["--enable-unified-cache-external-linker", "--disable-radix-cache"],
                        DENSE + ["--enable-unified-cache-external-linker"], "H200")
HOOK_EXTRA += [
    ("DDT955", DENSE + ["--unified-cache-external-linker-config", "[1]"],
     DENSE + ["--unified-cache-external-linker-config", "{}"], "H200"),
    ("DDT955", DENSE + ["--enable-unified-cache-external-linker", "--enable-hierarchical-cache"],
     DENSE + ["--enable-unified-cache-external-linker"], "H200"),
    ("DDT955", DENSE + ["--enable-unified-cache-external-linker", "--hicache-storage-backend", "file"],
     DENSE + ["--enable-unified-cache-external-linker"], "H200"),
    ("DDT955", DENSE + ["--enable-hierarchical-cache", "--hicache-host-memory-mode", "buffer_only"],
     DENSE + ["--enable-hierarchical-cache", "--hicache-host-memory-mode", "buffer_only", "--hicache-storage-backend",
              "file"], "H200"),
    ("DDT955", DENSE + ["--disaggregation-mode", "decode", "--hicache-host-memory-mode", "buffer_only",
                        "--hicache-storage-backend", "file"],
     DENSE + ["--disaggregation-mode", "decode", "--hicache-storage-backend", "file"], "H200"),
]
UNO = DENSE + ["--speculative-algorithm", "UNO", "--uno-lora-path", "/x", "--speculative-num-draft-tokens", "4"]
UNO_TREE = UNO[:-2] + ["--speculative-eagle-topk", "2", "--attention-backend", "fa3", "--speculative-num-draft-tokens"]
HOOK_CASES["DDT956"] = (UNO[:-2], UNO, "H200")
HOOK_EXTRA += [
    ("DDT956", UNO + ["--enable-deterministic-inference"], UNO, "H200"),
    ("DDT956", UNO + ["--rl-on-policy-target", "fsdp"], UNO, "H200"),
    ("DDT956", UNO + ["--enable-strict-thinking"], UNO, "H200"),
    ("DDT956", UNO_TREE + ["4"], UNO_TREE + ["4", "--speculative-num-steps", "3"], "H200"),
    ("DDT956", UNO_TREE + ["2", "--speculative-num-steps", "3"], UNO_TREE + ["4", "--speculative-num-steps", "3"], "H200"),
    ("DDT956", UNO_TREE + ["200", "--speculative-num-steps", "3"], UNO_TREE + ["5", "--speculative-num-steps", "3"],
     "H200"),
    ("DDT956", UNO_TREE + ["6", "--speculative-num-steps", "2"], UNO_TREE + ["3", "--speculative-num-steps", "2"], "H200"),
    ("DDT956", UNO_TREE + ["4", "--speculative-num-steps", "3", "--enable-two-batch-overlap"],
     UNO_TREE + ["4", "--speculative-num-steps", "3"], "H200"),
    ("DDT956", UNO_TREE + ["4", "--speculative-num-steps", "3", "--speculative-accept-threshold-single", "0.5"],
     UNO + ["--speculative-accept-threshold-single", "0.5"], "H200"),
    ("DDT956", UNO + ["--pp-size", "2"], UNO, "H200"),
    ("DDT956", UNO + ["--tp-size", "2"], UNO, "H200"),
    ("DDT956", UNO + ["--lora-paths", "a=/x"], UNO, "H200"),
    ("DDT956", UNO + ["--speculative-use-rejection-sampling"], UNO, "H200"),
    ("DDT956", UNO + ["--prefill-attention-backend", "flashinfer"], UNO, "H200"),
    ("DDT956", UNO + ["--speculative-eagle-topk", "2", "--speculative-num-steps", "3"],
     UNO_TREE + ["4", "--speculative-num-steps", "3"], "H200"),
]
POD = DENSE + ["--is-embedding", "--prefill-only-disable-kv-cache"]
POD_OK = POD + ["--chunked-prefill-size", "-1", "--disable-radix-cache"]
HOOK_EXTRA += [
    ("DDT938", POD + ["--disable-radix-cache"], POD_OK, "H200"),
    ("DDT938", POD + ["--chunked-prefill-size", "-1"], POD_OK, "H200"),
    ("DDT938", POD_OK + ["--kv-cache-dtype", "mxfp8"], POD_OK, "H200"),
    ("DDT938", POD_OK + ["--attn-cp-size", "2", "--tp-size", "2"], POD_OK + ["--tp-size", "2"], "H200"),
    ("DDT938", POD_OK + ["--enable-prefill-cp"], POD_OK, "H200"),
    ("DDT938", POD_OK + ["--enable-hisparse"], POD_OK, "H200"),
]
# the rules of the raise sites that were "deferred to dry-run" (DDT957 on): tests/rules/deferred_pairs.py
from deferred_pairs import CASES as DEFERRED_CASES  # noqa: E402
from deferred_pairs import ENV as DEFERRED_ENV  # noqa: E402
from deferred_pairs import EXTRA as DEFERRED_EXTRA  # noqa: E402

from deferred_pairs import ACCEPTED, ENV_ONLY, STATIC_CASES  # noqa: E402

CASES.update(HOOK_CASES)
CASES.update(DEFERRED_CASES)
CASES.update(STATIC_CASES)
# DDT912's pair differs by GPU only: trtllm_mla on Hopper vs Blackwell (see test_mla_backend_needs_blackwell).
CASES.update(LAUNCH_CASES)  # ddtctl/rules/launch/: SGLang's resolver accepts each failing case (test_fuzz.py)

PROFILE_ONLY = {"DDT601": 1}
# Rules that read the profile's `env:` (a raw argv has none): rule id -> (the bad case's env, the good
# case's env)
ENV_OF: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "DDT116": ({"DDTREE_GDN_TREE": "fast"}, {"DDTREE_GDN_TREE": "compact"}),
    **LAUNCH_ENV_OF,
}
for _rid, _bad, _bad_env, _good, _good_env, _gpu in DEFERRED_ENV:
    if _rid in ENV_ONLY and _rid not in CASES:
        CASES[_rid] = (_bad, _good, _gpu)
        ENV_OF[_rid] = (_bad_env, _good_env)


def _rules_of(argv, gpu, *, count=None, env=None):
    if count is not None or env:
        from ddtctl.rules.engine import Context, run_rules
        from ddtctl.schema.extensions import extended_catalog
        from ddtctl.schema.gpus import resolve_gpu

        result = validate_argv(argv, gpu=gpu)
        flags = result.flags
        catalog = extended_catalog("0.5.23")
        ctx = Context(given=flags.given, defaults={s.dest: s.default for s in catalog.flags}, lines={}, keys={},
                      model=result.model, draft=result.draft, gpu=resolve_gpu(gpu) if gpu and env else None,
                      gpu_count=count, env=dict(env or {}))
        findings, _ = run_rules(ctx, all_rules())
        return {f.rule for f in findings} | {f.rule for f in result.findings}
    return {f.rule for f in validate_argv(argv, gpu=gpu).findings}


def test_every_rule_has_cases():
    missing = sorted(r.id for r in all_rules() if r.id not in CASES)
    assert not missing, f"rules without a failing/passing case: {missing}"


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_trips_on_bad_case(rule_id):
    bad, _, gpu = CASES[rule_id]
    env = ENV_OF.get(rule_id, ({}, {}))[0]
    assert rule_id in _rules_of(bad, gpu, count=PROFILE_ONLY.get(rule_id), env=env)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_quiet_on_good_case(rule_id):
    _, good, gpu = CASES[rule_id]
    env = ENV_OF.get(rule_id, ({}, {}))[1]
    assert rule_id not in _rules_of(good, gpu, count=PROFILE_ONLY.get(rule_id), env=env)


def test_seed_hybrid_ddtree_without_mamba_flags_is_one_finding_naming_both():
    result = validate_argv(HDDTREE + ["--speculative-ddtree-shadow-linear"])
    errors = [f for f in result.findings if f.severity == "error"]
    assert [f.rule for f in errors] == ["DDT111"]
    assert "--mamba-radix-cache-strategy extra_buffer" in errors[0].message
    assert "--mamba-full-memory-ratio" in errors[0].message
    assert errors[0].edits == {"mamba-radix-cache-strategy": "extra_buffer", "mamba-full-memory-ratio": 0.5}


def test_nextn_is_eagle_and_names_are_case_insensitive():
    argv = ["--model-path", M["deepseek-v3-nextn"], "--speculative-algorithm", "nextn",
            "--speculative-eagle-topk", "2"]
    assert "DDT301" in _rules_of(argv, None)  # an EAGLE rule fires for nextn
    assert "DDT800" not in _rules_of(argv, None)


def test_unknown_model_reports_rules_it_could_not_run():
    result = validate_argv(["--model-path", "/not/here", "--speculative-algorithm", "DDTREE",
                            "--speculative-draft-model-path", "/not/draft", "--disable-overlap-schedule"])
    warning = [f for f in result.findings if f.rule == "DDT000"]
    assert warning and "DDT111" in warning[0].message and "model facts unknown" in warning[0].message
    assert result.valid  # warnings do not invalidate


def test_removed_flag_points_at_its_replacement():
    result = validate_argv(HYBRID + ["--mamba-scheduler-strategy", "extra_buffer"])
    finding = next(f for f in result.findings if f.rule == "DDT001")
    assert "mamba-radix-cache-strategy" in finding.message


def test_auto_selected_mla_backend_counts_for_eagle_tree():
    argv = ["--model-path", M["deepseek-v3-nextn"], "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
    assert "DDT304" in _rules_of(argv, "B200")  # SGLang picks trtllm_mla + page 64 there
    assert "DDT304" not in _rules_of(argv, "H200")


def test_gpu_generation_changes_the_verdict():
    argv = DENSE + ["--attention-backend", "fa3"]
    assert "DDT701" not in _rules_of(argv, "H200")
    assert "DDT701" in _rules_of(argv, "RTX_PRO_6000_BLACKWELL")


def test_mla_backend_needs_blackwell():
    argv = ["--model-path", M["deepseek-v3-nextn"], "--attention-backend", "trtllm_mla"]
    assert "DDT912" in _rules_of(argv, "H200", count=None)
    assert "DDT912" not in _rules_of(argv, "B200", count=None)


@pytest.mark.parametrize("index", range(len(HOOK_EXTRA)))
def test_hook_extra_cases(index):
    rule_id, bad, good, gpu = HOOK_EXTRA[index]
    assert rule_id in _rules_of(bad, gpu)
    assert rule_id not in _rules_of(good, gpu)


@pytest.mark.parametrize("index", range(len(DEFERRED_EXTRA)))
def test_deferred_extra_cases(index):
    rule_id, bad, good, gpu = DEFERRED_EXTRA[index]
    assert rule_id in _rules_of(bad, gpu)
    assert rule_id not in _rules_of(good, gpu)


@pytest.mark.parametrize("index", range(len(ACCEPTED)))
def test_accepted_launches_are_not_errors(index):
    """SGLang accepts these launches (tests/fidelity/test_fuzz.py checks it): the rule reports them, as a warning
    or info, never as an error."""
    rule_id, argv, gpu = ACCEPTED[index]
    findings = validate_argv(argv, gpu=gpu).findings
    assert rule_id in {f.rule for f in findings}
    assert not [f for f in findings if f.severity == "error"], [(f.rule, f.message) for f in findings]


@pytest.mark.parametrize("index", range(len(DEFERRED_ENV)))
def test_deferred_env_cases(index):
    """Rules that read the server's SGLANG_* environment (the profile's `env:`): the bad launch trips them, the
    good one does not; tests/fidelity/test_fuzz.py resolves both with SGLang under the same environment."""
    rule_id, bad, bad_env, good, good_env, gpu = DEFERRED_ENV[index]
    assert rule_id in _env_rules(bad, gpu, bad_env)
    assert rule_id not in _env_rules(good, gpu, good_env)


def _env_rules(argv, gpu, env):
    """The rules the constraint graph reports for `argv` on `gpu` under the server environment `env` (only:
    validate_argv's own run has no environment, so a rule quiet under `env` may fire there)."""
    from ddtctl.rules.engine import Context, run_rules
    from ddtctl.schema.extensions import extended_catalog
    from ddtctl.schema.gpus import resolve_gpu

    result = validate_argv(argv, gpu=gpu)
    catalog = extended_catalog("0.5.23")
    ctx = Context(given=result.flags.given, defaults={s.dest: s.default for s in catalog.flags}, lines={}, keys={},
                  model=result.model, draft=result.draft, gpu=resolve_gpu(gpu), env=dict(env))
    return {f.rule for f in run_rules(ctx, all_rules())[0]}


def _core_violation_sites() -> dict[str, tuple[str, ...]]:
    """rule id -> the reads of each DdtreeViolation(...) the DDTREE core (ddtctl/rules/ddtree/core.py) can return."""
    import ast

    from ddtctl.rules.ddtree import core as ddtree_core

    tree = ast.parse(Path(ddtree_core.__file__).read_text(encoding="utf-8"))
    out: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "DdtreeViolation":
            reads = next(ast.literal_eval(k.value) for k in node.keywords if k.arg == "reads")
            out[ast.literal_eval(node.args[0])] = reads
    return out


def test_every_ddtree_core_violation_is_a_registered_rule_reading_its_flags():
    """A violation id of the shared core without its own check here would never reach a finding; each check declares
    the flags the core reads for it (so `ddtctl explain` and `ddtctl rules` show them)."""
    from ddtctl.rules.engine import RULES

    all_rules()
    sites = _core_violation_sites()
    assert len(sites) >= 13  # the walk found the core's violations at all
    for rule_id, reads in sites.items():
        r = RULES.get(rule_id)
        assert r is not None, f"{rule_id} is returned by ddtree_core but registered by no rule"
        assert r.reads == reads and r.title and r.doc and "ddtree/core.py" in r.reference, rule_id


def test_ddtree_findings_carry_the_core_verdict_verbatim():
    from ddtctl.rules.ddtree import core as ddtree_core

    argv = DDTREE + ["--pp-size", "2", "--grammar-backend", "xgrammar"]
    by_rule = {f.rule: f for f in validate_argv(argv, gpu="H200").findings}
    flags = {"speculative_algorithm": "DDTREE", "speculative_draft_model_path": "d", "pp_size": 2,
             "grammar_backend": "xgrammar", "attention_backend": "triton"}
    violations = ddtree_core.ddtree_violations(flags, {})
    assert {v.rule_id for v in violations} == {"DDT108", "DDT109"}
    for v in violations:
        assert (by_rule[v.rule_id].message, by_rule[v.rule_id].fix) == (v.message, v.fix)
        assert by_rule[v.rule_id].severity == v.severity


def test_context_length_with_unreadable_model_is_not_checked_and_does_not_crash(tmp_path):
    # DDT919 reads the model's config.json; with no model facts at all (a path not readable here, no
    # model.architecture) its `applies` used to read `ctx.model.source` off None and crash validate.
    result = validate_argv(["--model-path", str(tmp_path / "absent"), "--context-length", "4096"], gpu="H200")
    assert result.model is None
    assert "DDT919" not in {f.rule for f in result.findings}
