"""DDT955: hierarchical-cache and unified-cache linker options sglang 0.5.23 srt/arg_groups/hicache_hook.py
refuses as given (the flags alone decide)."""

from __future__ import annotations

import json
from typing import Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG


def hicache_active(ctx: Context) -> bool:
    """hicache_hook.py:62-71: the host-pool checks run with the hierarchical cache, decode KV offload, or a
    decode server whose retraction backup is the host pool (the default)."""
    return bool(
        ctx.get("enable_hierarchical_cache")
        or ctx.get("disaggregation_decode_enable_offload_kvcache")
        or (
            ctx.get("disaggregation_mode") == "decode"
            and ctx.get("disaggregation_decode_retraction_backup") in (None, "host_pool")
        )
    )


def _linker(ctx: Context) -> Iterator[Hit]:
    """hicache_hook.py:26-59: the unified-cache external linker's config and exclusions."""
    config = ctx.given.get("unified_cache_external_linker_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None  # argparse refuses text that is not JSON
    if config is not None and not isinstance(config, dict):
        yield Hit(
            "--unified-cache-external-linker-config must be a JSON object.",
            about="unified_cache_external_linker_config",
        )
    if not ctx.get("enable_unified_cache_external_linker"):
        return
    if ctx.given.get("disable_radix_cache") or ctx.given.get("radix_cache_backend") is not None:
        yield Hit(
            "--enable-unified-cache-external-linker requires the default UnifiedRadixCache with radix "
            "caching enabled.",
            about="enable_unified_cache_external_linker",
        )
    if ctx.get("enable_hierarchical_cache"):
        yield Hit(
            "--enable-unified-cache-external-linker and --enable-hierarchical-cache are mutually exclusive.",
            about="enable_hierarchical_cache",
        )
    if ctx.given.get("hicache_storage_backend") is not None:
        yield Hit(
            "--enable-unified-cache-external-linker does not use --hicache-storage-backend.",
            about="hicache_storage_backend",
            edits={"hicache_storage_backend": None},
        )


@rule(
    "DDT955",
    "hierarchical-cache host memory and the unified-cache linker",
    reads=(
        "unified_cache_external_linker_config",
        "enable_unified_cache_external_linker",
        "hicache_host_memory_mode",
    ),
    applies=lambda ctx: (
        ctx.is_set("unified_cache_external_linker_config")
        or bool(ctx.get("enable_unified_cache_external_linker"))
        or ctx.get("hicache_host_memory_mode") == "buffer_only"
    ),
    reference=f"{AG}hicache_hook.py:18-59 handle_hicache, 247-296 validate_hicache_host_memory_mode",
)
def hicache_options(ctx: Context) -> Iterator[Hit]:
    """`--unified-cache-external-linker-config` is a JSON object; the linker needs the radix cache and
    excludes the hierarchical cache and `--hicache-storage-backend`; `--hicache-host-memory-mode buffer_only`
    (where the host pool is in use) needs a storage backend and is not for decode servers. (The range of
    `--hicache-host-memory-fraction` is the schema's, DDT002.)"""
    yield from _linker(ctx)
    if ctx.get("enable_unified_cache_external_linker") or not hicache_active(ctx):
        return
    if ctx.get("hicache_host_memory_mode") != "buffer_only":
        return
    if ctx.given.get("hicache_storage_backend") is None:
        yield Hit(
            "--hicache-host-memory-mode buffer_only requires a storage backend (--hicache-storage-backend): "
            "host memory is only a staging buffer and all cached data lives in storage.",
            about="hicache_host_memory_mode",
        )
    elif ctx.get("disaggregation_mode") == "decode":
        yield Hit(
            "--hicache-host-memory-mode buffer_only is not supported on decode instances",
            about="hicache_host_memory_mode",
        )
