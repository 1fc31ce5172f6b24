"""Parallelism and hardware rules: what sglang 0.5.23 checks (validation_hook.py) and misses at launch."""

from __future__ import annotations

from ddtctl.rules.engine import FACT_GPU, FACT_MODEL_CONFIG, INFO, Context, Hit, rule
from ddtctl.rules.hooks.common import is_mla
from ddtctl.rules.hooks.resolution import backends, resolved_page

VALIDATION = "sglang 0.5.23 srt/arg_groups/validation_hook.py check_server_args"


@rule(
    "DDT601",
    "GPUs requested fit the host",
    reads=("tp_size", "pp_size"),
    applies=lambda ctx: ctx.gpu_count is not None,
    reference="runtime: NCCL init fails",
    sglang_enforces=False,
    evidence="the scheduler processes bind GPUs base-gpu-id + rank x gpu-id-step: a rank past the host's "
    "GPUs "
    "has no device to set (torch.cuda.set_device raises), before NCCL can initialise",
)
def world_size(ctx: Context):
    """tp x pp x (dp without DP attention) GPUs per node must be available: hardware.count GPUs per host."""
    tp, pp, dp = ctx.get("tp_size", 1), ctx.get("pp_size", 1), ctx.get("dp_size", 1)
    nnodes = ctx.get("nnodes", 1) or 1
    per_node_tp = tp * pp // nnodes if (tp * pp) % nnodes == 0 else tp * pp
    needed = per_node_tp * (1 if ctx.dp_attention else dp)
    if needed > ctx.gpu_count:
        return Hit(
            f"this launch needs {needed} GPUs per host (tp {tp} x pp {pp}"
            + ("" if ctx.dp_attention else f" x dp {dp}")
            + f" / {nnodes} node(s)) but hardware.count is {ctx.gpu_count}",
            fix=f"set tp-size so that tp x pp fits {ctx.gpu_count} GPUs",
        )


@rule(
    "DDT602",
    "tensor parallel size divides the attention heads",
    reads=("tp_size",),
    needs=(FACT_MODEL_CONFIG,),
    applies=lambda ctx: (ctx.get("tp_size", 1) or 1) > 1,
    reference="runtime: model load asserts head divisibility",
    sglang_enforces=False,
    evidence="model load: QKVParallelLinear splits the heads with sglang/srt/distributed/utils.py:75 divide, "
    "whose ensure_divisibility asserts (layers/linear.py:1139)",
)
def heads_divisible(ctx: Context):
    """Attention heads are split across TP ranks: `num_attention_heads % tp_size == 0`, and KV heads either
    divide by tp or tp by them (replication). SGLang only finds out while loading weights."""
    tp = ctx.get("tp_size")
    attn_tp = tp // (ctx.get("dp_size", 1) if ctx.dp_attention else 1) or 1
    heads, kv = ctx.known_model.num_attention_heads, ctx.known_model.num_key_value_heads
    if heads and heads % attn_tp:
        yield Hit(
            f"--tp-size {tp} does not divide the model's {heads} attention heads",
            fix=f"use a tp-size that divides {heads}",
        )
    if kv and kv % attn_tp and attn_tp % kv:
        yield Hit(
            f"--tp-size {tp} and the model's {kv} KV heads do not divide each other",
            fix=f"use a tp-size that divides {kv} or is a multiple of it",
        )


@rule(
    "DDT603",
    "tp x pp divides across nodes",
    reads=("tp_size", "nnodes"),
    applies=lambda ctx: (ctx.get("nnodes", 1) or 1) > 1 and ctx.get("ep_join_mode") != "scale",
    reference=VALIDATION,
)
def nodes_divide(ctx: Context):
    """`(tp_size * pp_size) % nnodes == 0` (not checked for an elastic-EP `--ep-join-mode scale` node)."""
    tp, pp, nnodes = ctx.get("tp_size", 1), ctx.get("pp_size", 1), ctx.get("nnodes", 1)
    if (tp * pp) % nnodes:
        return Hit(
            f"tp x pp ({tp * pp}) is not divisible by --nnodes {nnodes}",
            fix="make tp-size a multiple of nnodes",
        )


@rule(
    "DDT604",
    "data-parallel replicas are single-node",
    reads=("dp_size", "nnodes"),
    applies=lambda ctx: (ctx.get("dp_size", 1) or 1) > 1 and (ctx.get("nnodes", 1) or 1) != 1,
    reference=VALIDATION,
)
def dp_single_node(ctx: Context):
    """Multi-node data-parallel replicas are not supported; use attention DP."""
    return Hit(
        "multi-node data-parallel replicas (--dp-size > 1 with --nnodes > 1) are not supported",
        fix="use enable-dp-attention, or one server per node",
    )


@rule(
    "DDT605",
    "pipeline parallelism runs without overlap scheduling and with EAGLE-only speculation",
    reads=("pp_size",),
    applies=lambda ctx: (ctx.get("pp_size", 1) or 1) > 1,
    reference=f"{VALIDATION} check_pipeline_parallel_compat; overrides.py _pipeline_parallel_overlap_disable",
)
def pipeline(ctx: Context):
    """With `--pp-size > 1`: overlap scheduling is incompatible, so SGLang turns it off itself (an override
    with a warning, reported here as info; check_server_args then finds it off), and speculative decoding is
    limited to (non-multi-layer) EAGLE, or DSPARK, on prefill nodes of a PD-disaggregated deployment;
    `--min-free-slots-delay` is refused. (With SGLANG_ENABLE_PP_SPEC, EAGLE runs on aggregated servers:
    `ddtctl dry-run` judges that.)"""
    if not ctx.get("disable_overlap_schedule"):
        yield Hit(
            "pipeline parallelism is incompatible with overlap scheduling: SGLang sets "
            "disable_overlap_schedule=True",
            about="disable_overlap_schedule",
            severity=INFO,
            fix="nothing to do; set disable-overlap-schedule: true to say so in the launch",
        )
    algo = ctx.algorithm
    if algo == "DSPARK":
        if ctx.get("disaggregation_mode") != "prefill":
            yield Hit(
                "Pipeline parallel DSPARK requires disaggregation-mode=prefill",
                about="pp_size",
                fix="set pp-size: 1",
            )
    elif algo is not None and algo not in ("DFLASH", "DDTREE"):  # those have their own pp rule
        if algo != "EAGLE" or ctx.get("enable_multi_layer_eagle"):
            yield Hit(
                "pipeline parallelism supports only EAGLE (non-multi-layer) speculative decoding, "
                f"not {algo}",
                about="speculative_algorithm",
                fix="set pp-size: 1",
            )
        elif ctx.get("disaggregation_mode") != "prefill":
            yield Hit(
                "PP + speculative decoding is only supported on prefill nodes (disaggregation-mode prefill)",
                about="pp_size",
                fix="set pp-size: 1",
            )
    if ctx.given.get("min_free_slots_delay") is not None:
        yield Hit(
            "--min-free-slots-delay is not supported with pipeline parallelism: allocatable slots per "
            "microbatch are bounded by pp-max-micro-batch-size, so the threshold may never be reached",
            about="min_free_slots_delay",
            edits={"min_free_slots_delay": None},
        )


@rule(
    "DDT606",
    "chunked prefill size is a multiple of the page size",
    reads=("chunked_prefill_size", "page_size"),
    applies=lambda ctx: ctx.is_set("chunked_prefill_size"),
    reference=f"{VALIDATION}:240-246 check_server_args (assert); the page size as resolved "
    "(ddtctl/rules/hooks/resolution.py resolve)",
)
def chunked_page(ctx: Context):
    """`chunked_prefill_size % page_size == 0` when chunked prefill is on (size > 0), except on decode nodes.
    The page size is SGLang's resolved one: attention backends snap it (trtllm_mha / trtllm_mla to 64, fa4 on
    SM100 to 128, ...), and hybrid Qwen3.5/3.6 targets get 1 or 64 from their model override on SM100."""

    size, page = ctx.get("chunked_prefill_size"), resolved_page(ctx)
    if size > 0 and page and size % page and ctx.get("disaggregation_mode") != "decode":
        given = ctx.given.get("page_size")
        what = f"--page-size ({page})" if given == page else f"the page size SGLang resolves here ({page})"
        return Hit(
            f"--chunked-prefill-size ({size}) must be divisible by {what}",
            fix=f"set chunked-prefill-size to a multiple of {page}",
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


@rule(
    "DDT607",
    "torch.compile with CUDA-graph padding disabled",
    reads=("disable_cuda_graph_padding",),
    applies=lambda ctx: bool(ctx.get("disable_cuda_graph_padding")) and bool(ctx.get("enable_torch_compile")),
    reference=VALIDATION,
)
def compile_padding(ctx: Context):
    """`--disable-cuda-graph-padding` with `--enable-torch-compile` compiles once per batch size and stalls
    start-up; SGLang refuses the combination."""
    return Hit(
        "--disable-cuda-graph-padding is incompatible with --enable-torch-compile",
        fix="remove disable-cuda-graph-padding",
        edits={"disable_cuda_graph_padding": None},
    )


@rule(
    "DDT608",
    "served model name has no colon",
    reads=("served_model_name",),
    applies=lambda ctx: ":" in str(ctx.given.get("served_model_name") or ""),
    reference=VALIDATION,
)
def served_name(ctx: Context):
    """The colon is reserved for LoRA's `model:adapter` syntax."""
    name = ctx.given["served_model_name"]
    return Hit(
        f"--served-model-name {name!r} contains ':' (reserved for model:adapter LoRA syntax)",
        fix="use a name without ':'",
        edits={"served_model_name": name.replace(":", "-")},
    )
