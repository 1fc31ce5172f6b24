"""Defaults of sglang 0.5.23 srt/arg_groups/memory_hook.py that other checks read (chunked prefill, CUDA-graph
bs) and the offload compatibility rule (DDT944)."""

from __future__ import annotations

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size
from ddtctl.schema.gpus import REPRESENTATIVE_BY_SM, resolve_gpu


def default_chunked_prefill(ctx: Context) -> int | None:
    """memory_hook.py:89-178 handle_gpu_memory_settings: the chunked prefill size by GPU memory (a
    generation-only GPU counts as the product `ddtctl dry-run` declares for it)."""
    if ctx.gpu is None:
        return None
    memory = ctx.gpu.memory_gb
    if not memory:
        name = REPRESENTATIVE_BY_SM.get(ctx.gpu.sm)
        memory = resolve_gpu(name).memory_gb if name else 0
    if not memory:
        return None
    mb = memory * 1024
    for limit, size in ((20, 2048), (35, 4096), (60, 4096), (90, 8192), (160, 8192)):
        if mb < limit * 1024:
            return size
    return 16384


def chunked_prefill(ctx: Context) -> int | None:
    """chunked_prefill_size as the checks after handle_data_parallelism read it: the given or default size,
    divided by the attention-DP groups (parallel_hook.py:314-331)."""
    size = ctx.given.get("chunked_prefill_size")
    if size is None:
        size = -1 if ctx.get("enable_mis") else default_chunked_prefill(ctx)
    dp = attn_dp_size(ctx)
    if size is not None and dp > 1:
        size = size // dp
    return size


def default_decode_graph_bs(ctx: Context) -> int | None:
    """memory_hook.py:89-181: the decode CUDA-graph max batch size by GPU memory and tp."""
    chunk = default_chunked_prefill(ctx)
    if chunk is None:  # also when the GPU is unknown
        return None
    tp = ctx.get("tp_size", 1) or 1
    memory = ctx.known_gpu.memory_gb or {8192: 141, 16384: 180, 4096: 48, 2048: 16}.get(chunk, 0)
    if memory < 20:
        return 8
    if memory < 35:
        return 48 if tp < 4 else 160
    if memory < 60:
        return 32 if tp < 4 else 160
    if memory < 160:
        return 256 if tp < 4 else 512
    return 512


def _qwen4_exp(ctx: Context) -> bool:
    return ctx.model is not None and str(ctx.model.architecture or "").startswith("Qwen4Exp")


def ple_offload_embedding(ctx: Context) -> bool | None:
    """--ple-offload-embedding as handle_offload_compatibility's re-run sees it: the given value, else for
    Qwen4-Exp the model override's default (on when CUDA serves it in bfloat16), else unset (None)."""
    if ctx.is_set("ple_offload_embedding"):
        return bool(ctx.get("ple_offload_embedding"))
    if not _qwen4_exp(ctx) or ctx.model is None:
        return None
    dtype = ctx.get("dtype") or "auto"
    if dtype == "auto":
        dtype = ctx.model.raw.get("torch_dtype") or ctx.model.raw.get("dtype")
    on_cuda = ctx.gpu is not None and ctx.get("device") in (None, "cuda")
    return on_cuda and dtype in ("bfloat16", "bf16")


@rule(
    "DDT944",
    "Qwen4 PLE embedding offload excludes layer offload; the file backend needs it",
    reads=("ple_offload_embedding", "ple_offload_backend", "cpu_offload_gb", "offload_group_size"),
    applies=lambda ctx: (
        ctx.is_set("ple_offload_embedding") or ctx.get("ple_offload_backend") == "file" or _qwen4_exp(ctx)
    ),
    reference=f"{AG}memory_hook.py:28-44 handle_offload_compatibility; model_overrides/qwen4_exp.py:42-47",
)
def ple_offload(ctx: Context):
    """With the PLE embedding offloaded (`--ple-offload-embedding`, on by default for bf16 Qwen4-Exp on CUDA),
    `--cpu-offload-gb` / `--offload-group-size` would stage the pinned table back to the device, so SGLang
    refuses them; `--ple-offload-backend file` is the offloaded table's storage, so it refuses it with the
    offload turned off."""
    embedding = ple_offload_embedding(ctx)
    if embedding and ((ctx.get("cpu_offload_gb") or 0) > 0 or (ctx.get("offload_group_size") or 0) > 0):
        flag = "cpu-offload-gb" if (ctx.get("cpu_offload_gb") or 0) > 0 else "offload-group-size"
        default = "" if ctx.is_set("ple_offload_embedding") else " (on by default for bf16 Qwen4-Exp on CUDA)"
        return Hit(
            f"--ple-offload-embedding{default} cannot be combined with --{flag}: generic layer offload would "
            "stage the pinned PLE embedding back to the device",
            about=flag.replace("-", "_"),
            fix=f"remove {flag} (or set ple-offload-embedding: false)",
            edits={flag.replace("-", "_"): None},
        )
    if ctx.get("ple_offload_backend") == "file" and embedding is False:
        return Hit(
            "--ple-offload-backend file requires --ple-offload-embedding: the file-backed table is the "
            "offloaded table",
            about="ple_offload_backend",
            fix="set ple-offload-embedding: true (or ple-offload-backend: pinned)",
            edits={"ple_offload_backend": None},
        )
    return None
