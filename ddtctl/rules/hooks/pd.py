"""DDT968: PD disaggregation (sglang 0.5.23 srt/arg_groups/pd_disaggregation_hook.py
handle_pd_disaggregation): decode host receive, decode DCP and radix cache, the fake and staging transfers,
role switching, the Rust server's bootstrap port and the IB device list."""

from __future__ import annotations

from typing import Iterator

from ddtctl.rules.engine import Context, Hit, rule
from ddtctl.rules.hooks.common import AG, attn_dp_size, env_flag
from ddtctl.rules.hooks.moe import resolved_a2a, resolved_ep


def _decode(ctx: Context, transfer: str) -> Iterator[Hit]:
    """pd_disaggregation_hook.py:60-107: host receive and the decode radix cache."""
    threshold = ctx.get("disaggregation_decode_host_receive_threshold")
    if isinstance(threshold, (int, float)) and threshold < 1:
        if ctx.get("enable_hisparse") or ctx.get("enable_pd_role_switch"):
            yield Hit(
                "decode host receive (--disaggregation-decode-host-receive-threshold < 1) does not support "
                "HiSparse or PD role switching",
                about="disaggregation_decode_host_receive_threshold",
            )
        if ctx.get("disaggregation_decode_retraction_backup") == "cpu_tensor":
            yield Hit(
                "decode host KV buffering needs host-pool retraction, not "
                "--disaggregation-decode-retraction-backup cpu_tensor",
                about="disaggregation_decode_retraction_backup",
            )
    if ctx.get("disaggregation_mode") != "decode":
        return
    if ctx.get("disaggregation_decode_enable_radix_cache"):
        if ctx.get("enable_hisparse"):
            yield Hit(
                "--disaggregation-decode-enable-radix-cache excludes --enable-hisparse",
                about="enable_hisparse",
            )
        if transfer == "fake":
            yield Hit(
                "--disaggregation-decode-enable-radix-cache excludes --disaggregation-transfer-backend fake",
                about="disaggregation_transfer_backend",
            )


def _role_switch(ctx: Context) -> Iterator[Hit]:
    """pd_disaggregation_hook.py:161-194: what a PD role flip does not rebuild."""
    unsupported = []
    if resolved_ep(ctx) > 1:
        unsupported.append("expert parallelism")
    if resolved_a2a(ctx) != "none":
        unsupported.append("a MoE all-to-all")
    if (ctx.get("pp_size", 1) or 1) > 1:
        unsupported.append("pipeline parallelism")
    if attn_dp_size(ctx) > 1 and ctx.get("enable_dp_attention_local_control_broadcast"):
        unsupported.append("DP attention local control broadcast")
    if (ctx.get("dcp_size", 1) or 1) > 1:
        unsupported.append("decode context parallelism")
    if ctx.algorithm is not None:
        unsupported.append("speculative decoding")
    if unsupported:
        yield Hit(
            f"--enable-pd-role-switch does not rebuild the state of {', '.join(unsupported)}",
            about="enable_pd_role_switch",
        )


@rule(
    "DDT968",
    "PD disaggregation: host receive, decode radix cache, transfers, role switch, bootstrap port",
    reads=(
        "disaggregation_mode",
        "disaggregation_transfer_backend",
        "disaggregation_decode_host_receive_threshold",
        "disaggregation_decode_enable_radix_cache",
        "enable_pd_role_switch",
        "disaggregation_bootstrap_port",
        "disaggregation_ib_device",
    ),
    applies=lambda ctx: (
        (ctx.get("disaggregation_mode") or "null") != "null"
        or (ctx.get("disaggregation_decode_host_receive_threshold") or 1) < 1
    ),
    reference=f"{AG}pd_disaggregation_hook.py:60-194 handle_pd_disaggregation, 250-285 "
    "_alias_bootstrap_port_to_api_port, 322-331; validation_hook.py:530-533 validate_ib_devices",
)
def pd_disaggregation(ctx: Context) -> Iterator[Hit]:
    """Decode host receive (threshold < 1) excludes HiSparse, role switching and cpu_tensor retraction; a
    decode server's radix cache excludes HiSparse and the fake
    transfer; a prefill server cannot use the fake transfer; SGLANG_DISAGG_STAGING_BUFFER needs Mooncake or
    NIXL; `--enable-pd-role-switch` excludes EP, MoE all-to-all, PP, DCP, local control broadcast and
    speculative decoding; under SGLANG_RUST_SERVER a prefill server's Mooncake / NIXL bootstrap port is its
    API port; a Mooncake IB device list is not blank."""
    mode, transfer = ctx.get("disaggregation_mode") or "null", str(ctx.get("disaggregation_transfer_backend"))
    yield from _decode(ctx, transfer)
    if mode == "prefill" and transfer == "fake":
        yield Hit(
            "a prefill server does not support the fake transfer backend",
            about="disaggregation_transfer_backend",
        )
    if mode == "null":
        return
    if env_flag(ctx, "SGLANG_DISAGG_STAGING_BUFFER") and transfer not in ("mooncake", "nixl"):
        yield Hit(
            f"SGLANG_DISAGG_STAGING_BUFFER requires the mooncake or nixl transfer backend, not {transfer}",
            about="env.SGLANG_DISAGG_STAGING_BUFFER",
        )
    if ctx.get("enable_pd_role_switch"):
        yield from _role_switch(ctx)
    port, bootstrap = ctx.get("port"), ctx.given.get("disaggregation_bootstrap_port")
    if (
        mode == "prefill"
        and env_flag(ctx, "SGLANG_RUST_SERVER")
        and transfer in ("mooncake", "nixl")  # backends on CommonKVBootstrapServer (disagg_service.py:54-66)
        and bootstrap not in (None, 8998, port)
    ):
        yield Hit(
            "SGLANG_RUST_SERVER serves the KV bootstrap registry on the API port: "
            f"--disaggregation-bootstrap-port {bootstrap} conflicts with --port {port}",
            about="disaggregation_bootstrap_port",
            edits={"disaggregation_bootstrap_port": None},
        )
    device = ctx.given.get("disaggregation_ib_device")
    if transfer == "mooncake" and isinstance(device, str) and not device.strip():
        yield Hit("--disaggregation-ib-device names no IB device", about="disaggregation_ib_device")
