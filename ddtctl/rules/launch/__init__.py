"""Launch-time rules: what SGLang 0.5.23 checks AFTER its resolver, while the scheduler builds the model
runner, the memory pools, the attention backends and the speculative draft worker. A launch these rules reject
passes `ddtctl dry-run` (SGLang's own resolver) and dies on the GPU host minutes later, after the weights are
loaded. Each rule mirrors raise / assert sites of the pinned wheel that a profile, the two config.json files
and the GPU (generation, memory) predict, and cites their file:line; `sites.py` finds every such site on the
start path and coverage.yaml maps each to a rule or exempts it with a category and reason (`ddtctl rules
--coverage`, the second inventory).

One module per SGLang source mirrored; importing the package registers the rules:

    attention_registry  layers/attention/attention_registry.py + the backends'     DDT710-DDT723
                        constructors (hpc_ops, trtllm_mha, flashattention, dsa,
                        hybrid_linear_attn)
    memory_pool         mem_cache/kv_cache_configurator.py, memory_pool.py,
                        managers/tp_worker.py alloc_memory_pool                   DDT730-DDT735
    model_runner        model_executor/model_runner.py + model_runner_components  DDT740-DDT744
    draft_workers       speculative/*worker_v2.py, dflash_utils.py                DDT750-DDT756

DDT701 (FlashAttention-3 per GPU generation) predates the package; it is in attention_registry.py too.
"""

from __future__ import annotations

from ddtctl.rules.launch import attention_registry, draft_workers, memory_pool, model_runner

__all__ = ["attention_registry", "draft_workers", "memory_pool", "model_runner"]
