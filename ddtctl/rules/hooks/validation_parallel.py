"""Checks of sglang 0.5.23 srt/arg_groups/validation_hook.py check_server_args about the parallel layout and
the chunked-prefill page: nodes and tp (DDT603), DP across nodes (DDT604), pipeline parallelism (DDT605), the
chunked-prefill size per resolved page (DDT606), torch.compile padding (DDT607), the served model name
(DDT608). The rest of validation_hook.py's checks are in validation.py."""

from __future__ import annotations

from ddtctl.rules.engine import (
    INFO,
    Context,
    Hit,
    rule,
)
from ddtctl.rules.hooks.resolution import resolved_page

VALIDATION = "sglang 0.5.23 srt/arg_groups/validation_hook.py check_server_args"


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
