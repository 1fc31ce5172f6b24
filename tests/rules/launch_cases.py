"""A failing and a passing launch for each launch-time rule (ddtctl/rules/launch/), merged into test_rules.CASES.

Model dirs: the fidelity suite's config.json fixtures (tests/fidelity/models) and, for shapes none of them has,
tests/rules/launch_models (each derived from a fidelity fixture or a published config, config.json only; one
adds a safetensors index that gives the checkpoint's size). SGLang's resolver accepts every failing case here
(tests/fidelity/test_launch_rules.py): the launch dies later, building the runner, pools or draft worker.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
_FIDELITY = _HERE.parent / "fidelity" / "models"
_LAUNCH = _HERE / "launch_models"


def m(name: str) -> str:
    """A model dir by name: a fidelity fixture, else one of launch_models."""
    path = _FIDELITY / name
    return str(path if path.is_dir() else _LAUNCH / name)


DENSE = ["--model-path", m("qwen3-8b")]
MLA = ["--model-path", m("deepseek-v3-nextn")]
HYBRID = ["--model-path", m("qwen3.6-27b")]
NEMOTRON = ["--model-path", m("nemotron-h-8b")]
DSA = ["--model-path", m("deepseek-v32-dsa")]
EAGLE3_ON_MLA = MLA + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", m("qwen3-8b-eagle3"),
                       "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                       "--speculative-num-draft-tokens", "4"]
EAGLE_CHAIN = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
               "--speculative-num-draft-tokens", "4"]


def dflash(target: str, draft: str) -> list[str]:
    return ["--model-path", m(target), "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", m(draft)]


QWEN_DFLASH = dflash("qwen3-8b", "qwen3-8b-dflash-b16")

# rule -> (argv that trips it, argv that does not, gpu)
LAUNCH_CASES: dict[str, tuple[list[str], list[str], str | None]] = {
    # attention_registry.py
    "DDT710": (DENSE + ["--attention-backend", "trtllm_mla"], MLA + ["--attention-backend", "trtllm_mla"], "B200"),
    "DDT711": (MLA + ["--attention-backend", "trtllm_mha"], DENSE + ["--attention-backend", "trtllm_mha"], "B200"),
    "DDT712": (MLA + ["--attention-backend", "trtllm_mla", "--tp-size", "8", "--dcp-size", "2"] + EAGLE_CHAIN,
               MLA + ["--attention-backend", "trtllm_mla", "--tp-size", "8", "--dcp-size", "2"], "B200"),
    "DDT713": (["--model-path", m("llama-3.2-11b-vision"), "--attention-backend", "triton"],
               ["--model-path", m("llama-3.2-11b-vision"), "--attention-backend", "flashinfer"], "H200"),
    "DDT714": (DENSE + ["--attention-backend", "hpc_ops", "--kv-cache-dtype", "fp8_e5m2"],
               DENSE + ["--attention-backend", "hpc_ops"], "H200"),
    "DDT715": (DENSE + ["--attention-backend", "hpc_ops", "--kv-cache-dtype", "fp8_e4m3"],
               DENSE + ["--attention-backend", "hpc_ops"], "H200"),
    "DDT716": (HYBRID + ["--attention-backend", "torch_native"], HYBRID + ["--attention-backend", "triton"], "B200"),
    "DDT717": (["--model-path", m("llama-2-7b"), "--attention-backend", "trtllm_mha", "--page-size", "128"],
               DENSE + ["--attention-backend", "trtllm_mha", "--page-size", "128"], "B200"),
    # its env (LAUNCH_ENV_OF) sets the splits to 0, then 2
    "DDT718": (DENSE + ["--attention-backend", "trtllm_mha"], DENSE + ["--attention-backend", "trtllm_mha"], "B200"),
    "DDT719": (["--model-path", m("llama-4-scout"), "--attention-backend", "fa3", "--enable-unified-memory"],
               ["--model-path", m("llama-4-scout"), "--attention-backend", "fa3"], "H200"),
    "DDT720": (DSA + ["--dsa-prefill-backend", "flashmla_sparse_q8", "--enable-mixed-chunk"],
               DSA + ["--dsa-prefill-backend", "flashmla_sparse_q8"], "H200"),
    "DDT721": (NEMOTRON + ["--enable-mis", "--attention-backend", "flashinfer"],
               HYBRID + ["--enable-mis", "--attention-backend", "flashinfer"], "H200"),
    "DDT722": (NEMOTRON + ["--mamba-radix-cache-strategy", "extra_buffer", "--mamba-track-interval", "64"],
               NEMOTRON + ["--mamba-radix-cache-strategy", "extra_buffer", "--mamba-track-interval", "256"], "H200"),
    "DDT723": (DENSE + ["--attention-backend", "dsa"], DSA + ["--attention-backend", "dsa"], "H200"),
    # memory_pool.py
    "DDT730": (["--model-path", m("qwen3-8b-weights"), "--mem-fraction-static", "0.4"],
               ["--model-path", m("qwen3-8b-weights"), "--mem-fraction-static", "0.4", "--tp-size", "2"],
               "RTX_5090"),
    "DDT731": (HYBRID + ["--max-mamba-cache-size", "2"], HYBRID + ["--max-mamba-cache-size", "64"], "H200"),
    "DDT732": (HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer_lazy", "--disable-overlap-schedule"],
               HYBRID + ["--mamba-radix-cache-strategy", "extra_buffer_lazy"], "H200"),
    "DDT733": (DENSE + ["--enable-unified-memory"], HYBRID + ["--enable-unified-memory"], "H200"),
    "DDT734": (dflash("qwen3.6-27b", "qwen3.6-27b-dflash-b16") + ["--enable-linear-replayssm-spec"],
               dflash("qwen3.6-27b", "qwen3.6-27b-dflash-b16"), "H200"),
    "DDT735": (DENSE + ["--context-length", "1"], DENSE + ["--context-length", "4096"], "H200"),
    # model_runner.py
    "DDT740": (DENSE + ["--ple-offload-embedding"], DENSE, "H200"),
    "DDT741": (["--model-path", m("qwen3-30b-a3b-fp8"), "--tp-size", "8"],
               ["--model-path", m("qwen3-30b-a3b-fp8"), "--tp-size", "2"], "H200"),
    "DDT742": (DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states",
                        "--return-aux-hidden-state-layer-ids", "1", "17", "36"],
               DENSE + ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states",
                        "--return-aux-hidden-state-layer-ids", "1", "17", "35"], "H200"),
    "DDT743": (dflash("qwen3-8b", "qwen3-30b-a3b-dflash-b16"), QWEN_DFLASH, "H200"),
    "DDT744": (["--model-path", m("qwen3-8b-ngram-embedding"), "--chunked-prefill-size", "-1"],
               ["--model-path", m("qwen3-8b-ngram-embedding"), "--chunked-prefill-size", "4096"], "H200"),
    # draft_workers.py
    "DDT750": (DENSE + ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", m("qwen3.6-27b")],
               DENSE + ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                        m("qwen3-30b-a3b")], "H200"),
    "DDT751": (DENSE + EAGLE_CHAIN + ["--speculative-draft-model-path", m("qwen3-8b-eagle3"),
                                      "--speculative-use-rejection-sampling", "--speculative-token-map", "/m/hot.pt"],
               DENSE + EAGLE_CHAIN + ["--speculative-draft-model-path", m("qwen3-8b-eagle3"),
                                      "--speculative-use-rejection-sampling"], "H200"),
    "DDT752": (MLA + ["--speculative-algorithm", "EAGLE", "--enable-multi-layer-eagle", "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"],
               MLA + ["--speculative-algorithm", "EAGLE", "--enable-multi-layer-eagle", "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], "H200"),
    "DDT753": (dflash("qwen3-8b", "qwen3-8b-dflash-badconv"), QWEN_DFLASH, "H200"),
    "DDT754": (dflash("qwen3-8b", "qwen3.6-27b-dflash-b16"), QWEN_DFLASH, "H200"),
    "DDT755": (dflash("qwen3-8b", "qwen3-8b-dflash-nomask") + ["--skip-tokenizer-init"],
               QWEN_DFLASH + ["--skip-tokenizer-init"], "H200"),
    "DDT756": (dflash("qwen3-8b", "qwen3-8b-dflash-domino-nogru"), dflash("qwen3-8b", "qwen3-8b-dflash-domino"),
               "H200"),
}

# Rules that read the profile's `env:`: rule id -> (the failing case's env, the passing case's env)
LAUNCH_ENV_OF: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "DDT718": ({"SGLANG_TRTLLM_MHA_DECODE_SEQ_LEN_SPLITS": "0"}, {"SGLANG_TRTLLM_MHA_DECODE_SEQ_LEN_SPLITS": "2"}),
}
# Rules whose verdict also turns on the GPU: (rule, argv, the GPU it fails on, the GPU it passes on)
LAUNCH_GPU_PAIRS = [
    ("DDT714", DENSE + ["--attention-backend", "hpc_ops"], "B200", "H200"),
    ("DDT720", DSA + ["--dsa-prefill-backend", "flashmla_sparse_q8"], "B200", "H200"),
]
