"""Checks of sglang 0.5.23 srt/arg_groups/validation_hook.py and serving_hook.py that read nothing but the
launch's own flags: watermark settings (DDT945), metrics bucket rules (DDT946), serving options SGLang
refuses as given (DDT947), aux hidden-state layer ids (DDT948), the native gRPC server /
sidecar (DDT951), and mixed chunked prefill per speculative algorithm (DDT806, check_server_args)."""

from __future__ import annotations

import json
from typing import Any, Iterator

from ddtctl.rules.engine import INFO, Context, Hit, rule
from ddtctl.rules.hooks.common import AG


def _inline_json(value: Any) -> dict | None:
    """An inline JSON object (a `--watermark-config` that starts with `{`); None for a file path or bad JSON
    (SGLang reads the file on the host, so those stay with `ddtctl dry-run`)."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value.lstrip().startswith("{"):
        return None
    try:
        loaded = json.loads(value)
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


_UNPARSED = object()


def _json_value(ctx: Context, dest: str) -> Any:
    """A JSON-typed flag as SGLang's argparse decodes it (the catalog keeps the text); None when absent,
    _UNPARSED when it is not JSON (argparse refuses that before any hook runs)."""
    value = ctx.given.get(dest)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return _UNPARSED


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _watermark_settings(config: dict) -> Iterator[str]:
    """validation_hook.py:50-73 on the values an inline --watermark-config resolves (defaults: context window
    4, mixing probability 0.5, max probability 1.0, no keys)."""
    key, key_b = config.get("key"), config.get("key_b")
    window = config.get("context_window", 4)
    mixing = config.get("mixing_probability", 0.5)
    maximum = config.get("max_probability", 1.0)
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= 64
    ):
        yield "watermark context_window must be an integer from 1 to 64"
    if key_b is not None and key is None:
        yield "watermark key_b requires a server key"
    if _number(mixing) and not 0 < mixing < 1:
        yield "watermark mixing_probability must be strictly between 0 and 1"
    elif _number(mixing) and key_b is None and mixing != 0.5:
        yield "watermark mixing_probability requires key_b"
    if _number(maximum) and not 0 < maximum <= 1:
        yield "watermark max_probability must be greater than 0 and at most 1"
    if (config.get("default_enabled") or config.get("enforce_all")) and key is None:
        yield "watermark default_enabled and enforce_all require a server key"


@rule(
    "DDT945",
    "watermarking needs CUDA, consistent settings and plain sampling",
    reads=("enable_watermark", "watermark_config"),
    applies=lambda ctx: bool(ctx.get("enable_watermark")) or ctx.is_set("watermark_config"),
    reference=f"{AG}validation_hook.py:34-104 check_watermark_server_args",
)
def watermark_settings(ctx: Context) -> Iterator[Hit]:
    """`--watermark-config` needs `--enable-watermark`; watermarking needs `--device cuda`, settings in range
    (an inline `--watermark-config` JSON is checked here; a file is read on the host), no custom logit
    processors, no diffusion LLM, no pipeline-parallel speculation and no rejection sampling."""
    if not ctx.get("enable_watermark"):
        yield Hit(
            "--watermark-config requires --enable-watermark",
            about="watermark_config",
            fix="set enable-watermark: true (or remove watermark-config)",
            edits={"enable_watermark": True},
        )
        return
    device = ctx.given.get("device")
    if device is not None and device != "cuda":
        yield Hit(f"--enable-watermark requires --device cuda, got {device!r}", about="device")
    config = _inline_json(ctx.given.get("watermark_config")) or {}
    for message in _watermark_settings(config):
        yield Hit(message, about="watermark_config")
    if ctx.get("enable_custom_logit_processor"):
        yield Hit(
            "--enable-watermark is incompatible with --enable-custom-logit-processor",
            about="enable_custom_logit_processor",
            edits={"enable_custom_logit_processor": None},
        )
    if ctx.is_set("dllm_algorithm"):
        yield Hit("--enable-watermark is not supported with diffusion LLM", about="dllm_algorithm")
    if (ctx.get("pp_size", 1) or 1) > 1 and ctx.algorithm is not None:
        yield Hit(
            "--enable-watermark is not supported with pipeline-parallel speculative decoding", about="pp_size"
        )
    if ctx.get("speculative_use_rejection_sampling"):
        yield Hit(
            "--enable-watermark is incompatible with --speculative-use-rejection-sampling",
            about="speculative_use_rejection_sampling",
            edits={"speculative_use_rejection_sampling": None},
        )


def _bucket_problems(name: str, buckets: list) -> Iterator[str]:
    """validation_hook.py:384-432 validate_buckets_rule, one message per failed assert (SGLang stops at the
    first)."""
    kind = buckets[0]
    if kind not in ("tse", "default", "custom"):
        yield f"Unsupported {name} rule type: '{kind}'. Must be one of: 'tse', 'default', 'custom'"
    elif kind == "tse":
        if len(buckets) != 4:
            yield (
                f"{name} TSE rule requires exactly 4 parameters: ['tse', middle, base, count], "
                f"got {len(buckets)}"
            )
            return
        try:
            middle, base, count = float(buckets[1]), float(buckets[2]), int(buckets[3])
        except ValueError:
            yield f"{name} TSE rule parameters must be: ['tse', <float:middle>, <float:base>, <int:count>]"
            return
        if base <= 1:
            yield f"{name} TSE base must be larger than 1, got: {base}"
        if count <= 0:
            yield f"{name} TSE count must be positive, got: {count}"
        if middle <= 0:
            yield f"{name} TSE middle must be positive, got: {middle}"
    elif kind == "default":
        if len(buckets) != 1:
            yield f"{name} default rule should only have one parameter: ['default'], got {len(buckets)}"
    elif len(buckets) < 2:
        yield f"{name} custom rule requires at least one bucket value: ['custom', value1, ...]"
    else:
        try:
            values = [float(x) for x in buckets[1:]]
        except ValueError:
            yield f"{name} custom rule bucket values must be numeric"
            return
        if len(set(values)) != len(values):
            yield f"{name} custom rule bucket values should not contain duplicates"
        if any(v < 0 for v in values):
            yield f"{name} custom rule bucket values should be non-negative"


_BUCKETS = ("prompt_tokens_buckets", "generation_tokens_buckets")


@rule(
    "DDT946",
    "metrics bucket rules are tse, default or custom with valid parameters",
    reads=_BUCKETS,
    applies=lambda ctx: any(ctx.given.get(d) for d in _BUCKETS),
    reference=f"{AG}validation_hook.py:277-278, 384-432 validate_buckets_rule",
)
def bucket_rules(ctx: Context) -> Iterator[Hit]:
    """`--prompt-tokens-buckets` / `--generation-tokens-buckets`: `tse MIDDLE BASE COUNT` (base > 1, count and
    middle positive), `default` alone, or `custom V1 ...` (numeric, distinct, non-negative)."""
    for dest in _BUCKETS:
        buckets = ctx.given.get(dest)
        if not buckets:
            continue
        name = "--" + dest.replace("_", "-")
        for message in _bucket_problems(name, [str(b) for b in buckets]):
            yield Hit(message, about=dest, fix=f"remove {name[2:]} (or fix its rule)")


def _grpc_and_ports(ctx: Context) -> Iterator[Hit]:
    port = ctx.get("port", 30000)
    legacy = ctx.get("smg_grpc_mode") or ctx.get("grpc_mode")
    if not legacy and ctx.is_set("grpc_port") and ctx.given.get("grpc_port") == port:
        yield Hit(f"--grpc-port ({port}) must differ from --port ({port})", about="grpc_port")
    gc = ctx.given.get("gc_threshold")
    if gc and not 1 <= len(gc) <= 3:
        yield Hit("When setting gc_threshold, it must contain 1 to 3 integers.", about="gc_threshold")


def _json_objects(ctx: Context) -> Iterator[Hit]:
    """The JSON options SGLang needs as objects (serving_hook.py:146-160, 498-501, 590-621)."""
    kwargs = _json_value(ctx, "default_chat_template_kwargs")
    if kwargs not in (None, _UNPARSED) and not isinstance(kwargs, dict):
        yield Hit(
            "--default-chat-template-kwargs must decode to a JSON object",
            about="default_chat_template_kwargs",
        )
    mm = _json_value(ctx, "mm_process_config")
    if mm not in (None, _UNPARSED) and not isinstance(mm, dict):
        yield Hit(f"mm_process_config must be a dict, but got {type(mm)}", about="mm_process_config")
    elif isinstance(mm, dict):
        for key in ("image", "video", "audio"):
            if key in mm and not isinstance(mm[key], dict):
                yield Hit(
                    f"mm_process_config['{key}'] must be a dict, but got {type(mm[key])}",
                    about="mm_process_config",
                )
    limits = _json_value(ctx, "limit_mm_data_per_request")
    if isinstance(limits, dict):
        for modality in limits:
            if modality not in ("image", "video", "audio"):
                yield Hit(
                    f"Invalid modality '{modality}' in --limit-mm-data-per-request "
                    "(allowed: image, video, audio)",
                    about="limit_mm_data_per_request",
                )
    preferred = _json_value(ctx, "preferred_sampling_params")
    if isinstance(preferred, dict) and "watermark" in preferred:
        yield Hit(
            "watermark is not supported in --preferred-sampling-params", about="preferred_sampling_params"
        )


# what DDT947 judges: the first seven are its `reads` (the rest are JSON / mapping options it parses)
SERVING_OPTIONS = (
    "enable_priority_scheduling",
    "tokenizer_metrics_allowed_custom_labels",
    "grpc_port",
    "gc_threshold",
    "enable_response_store",
    "enable_tokenizer_batch_encode",
    "disable_fast_image_processor",
    "default_chat_template_kwargs",
    "mm_process_config",
    "limit_mm_data_per_request",
    "preferred_sampling_params",
)


@rule(
    "DDT947",
    "serving options SGLang refuses as given",
    reads=SERVING_OPTIONS[:7],
    applies=lambda ctx: any(ctx.given.get(d) is not None for d in SERVING_OPTIONS),
    reference=f"{AG}validation_hook.py:280-287, 330-337, 359-372 check_server_args; "
    "validation_hook.py:109-116 validate_response_store; serving_hook.py:256-263 handle_deprecated_args, "
    "754-760 handle_tokenizer_batching, 146-160 handle_multimodal, 496-621 handle_other_validations",
)
def serving_options(ctx: Context) -> Iterator[Hit]:
    """Priority scheduling needs `--schedule-policy fcfs|lof`; allowed custom metric labels need the labels
    header; `--grpc-port` must differ from `--port`; `--gc-threshold` takes 1 to 3 integers; the response
    store is not for PD disaggregation; tokenizer batch encode and the dynamic batch tokenizer exclude each
    other; `--disable-fast-image-processor` only with the auto / pil image processor; JSON options that must
    be objects (chat template kwargs, mm process config), known modalities in `--limit-mm-data-per-request`,
    and no watermark in `--preferred-sampling-params`."""
    policy = ctx.get("schedule_policy") or "fcfs"
    if ctx.get("enable_priority_scheduling") and policy not in ("fcfs", "lof"):
        yield Hit(
            "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. "
            f"'{policy}' is not supported.",
            about="schedule_policy",
            fix="set schedule-policy: fcfs",
            edits={"schedule_policy": "fcfs"},
        )
    if ctx.given.get("tokenizer_metrics_allowed_custom_labels") and not ctx.get(
        "tokenizer_metrics_custom_labels_header"
    ):
        yield Hit(
            "Please set --tokenizer-metrics-custom-labels-header when setting "
            "--tokenizer-metrics-allowed-custom-labels.",
            about="tokenizer_metrics_custom_labels_header",
        )
    yield from _grpc_and_ports(ctx)
    if ctx.get("enable_response_store") and (ctx.get("disaggregation_mode") or "null") != "null":
        yield Hit(
            "--enable-response-store is not supported with --disaggregation-mode=prefill or decode",
            about="enable_response_store",
            edits={"enable_response_store": None},
        )
    if ctx.get("enable_tokenizer_batch_encode") and ctx.get("enable_dynamic_batch_tokenizer"):
        yield Hit(
            "Cannot enable both --enable-tokenizer-batch-encode and --enable-dynamic-batch-tokenizer",
            about="enable_dynamic_batch_tokenizer",
        )
    backend = ctx.get("image_processor_backend") or "auto"
    if ctx.get("disable_fast_image_processor") and backend not in ("auto", "pil"):
        yield Hit(
            f"--disable-fast-image-processor conflicts with --image-processor-backend={backend}",
            about="disable_fast_image_processor",
            edits={"disable_fast_image_processor": None},
        )
    yield from _json_objects(ctx)


@rule(
    "DDT948",
    "aux hidden-state layer ids: with the capture switch, non-negative and distinct",
    reads=("return_aux_hidden_state_layer_ids", "enable_return_aux_hidden_states"),
    applies=lambda ctx: ctx.given.get("return_aux_hidden_state_layer_ids") is not None,
    reference=f"{AG}validation_hook.py:704-747 handle_aux_hidden_state_capture",
)
def aux_layer_ids(ctx: Context) -> Iterator[Hit]:
    """`--return-aux-hidden-state-layer-ids` needs `--enable-return-aux-hidden-states`, and its ids must be
    non-negative and must not repeat."""
    ids = list(ctx.given.get("return_aux_hidden_state_layer_ids") or [])
    if not ctx.get("enable_return_aux_hidden_states"):
        yield Hit(
            "--return-aux-hidden-state-layer-ids requires --enable-return-aux-hidden-states.",
            about="return_aux_hidden_state_layer_ids",
            edits={"return_aux_hidden_state_layer_ids": None},
        )
        return
    if any(i < 0 for i in ids):
        yield Hit(f"--return-aux-hidden-state-layer-ids must be non-negative, got {ids}.")
    if len(set(ids)) != len(ids):
        yield Hit(f"--return-aux-hidden-state-layer-ids must not repeat a layer, got {ids}.")


@rule(
    "DDT951",
    "the native gRPC server and its sidecar",
    reads=("grpc_port", "sidecar", "sidecar_args"),
    applies=lambda ctx: (
        ctx.is_set("grpc_port")
        or ctx.is_set("sidecar")
        or ctx.is_set("sidecar_args")
        or "SGLANG_GRPC_PORT" in ctx.env
    ),
    reference=f"{AG}serving_hook.py:381-432 handle_deprecated_args",
)
def native_grpc(ctx: Context) -> Iterator[Hit]:
    """`--sidecar-args` needs `--sidecar` and is a JSON array of strings; a
    non-empty `--sidecar` needs the native gRPC server (`--grpc-port`, not `--smg-grpc-mode` / `--grpc-mode`);
    the native server is not for `--use-ray`, `--encoder-only`, `--tokenizer-worker-num > 1` or API keys.
    (`SGLANG_GRPC_PORT` in the profile's `env:` also sets the port; its range is the schema's, DDT002.)"""
    port = ctx.given.get("grpc_port")
    if port is None and ctx.env.get("SGLANG_GRPC_PORT", "").strip():
        port = ctx.env["SGLANG_GRPC_PORT"]
    legacy = ctx.get("smg_grpc_mode") or ctx.get("grpc_mode")
    args = _json_value(ctx, "sidecar_args")
    sidecar = ctx.given.get("sidecar")
    if args is not None:
        if sidecar is None:
            yield Hit("--sidecar-args requires --sidecar.", about="sidecar_args")
        elif args is not _UNPARSED and (
            not isinstance(args, list) or not all(isinstance(a, str) for a in args)
        ):
            yield Hit("--sidecar-args must be a JSON array of strings.", about="sidecar_args")
    if sidecar is not None:
        if not str(sidecar).strip():
            yield Hit("--sidecar must not be empty.", about="sidecar")
        elif legacy:
            yield Hit(
                "--sidecar requires SGLang's native gRPC server; it cannot be combined with "
                "--smg-grpc-mode/--grpc-mode.",
                about="sidecar",
            )
        elif port is None:
            yield Hit("--sidecar requires --grpc-port or SGLANG_GRPC_PORT.", about="sidecar")
    if port is None or legacy:
        return
    if ctx.get("use_ray"):
        yield Hit("--grpc-port is not supported with --use-ray", about="grpc_port")
    if ctx.get("encoder_only"):
        yield Hit("--grpc-port is not supported with --encoder-only", about="grpc_port")
    if (ctx.get("tokenizer_worker_num", 1) or 1) > 1:
        yield Hit(
            "Native gRPC does not yet support --tokenizer-worker-num > 1. Unset --grpc-port or set "
            "--tokenizer-worker-num 1.",
            about="tokenizer_worker_num",
        )
    if ctx.given.get("api_key") or ctx.given.get("admin_api_key"):
        yield Hit(
            "--grpc-port is incompatible with --api-key/--admin-api-key: the native gRPC listener bypasses "
            "HTTP auth middleware.",
            about="grpc_port",
        )


# speculative/spec_info.py SpeculativeAlgorithm.supports_mixed_chunk; custom (plugin) algorithms say no.
MIXED_CHUNK_OK = ("EAGLE", "EAGLE3", "DFLASH", "DSPARK")
# Their resolution hooks switch it off with a warning: speculative_hook.py:1108-1112 (_handle_eagle_family:
# STANDALONE), :1307 (_handle_ngram), :596-600 (_handle_uno), :1002-1006 (_handle_frozen_kv_mtp).
MIXED_CHUNK_TURNED_OFF = ("STANDALONE", "NGRAM", "UNO", "FROZEN_KV_MTP")


@rule(
    "DDT806",
    "mixed chunked prefill is supported by this speculative algorithm",
    reads=("enable_mixed_chunk",),
    applies=lambda ctx: ctx.algorithm is not None and bool(ctx.get("enable_mixed_chunk")),
    reference="sglang 0.5.23 srt/arg_groups/validation_hook.py check_server_args; speculative/spec_info.py",
)
def mixed_chunk(ctx: Context):
    """Only EAGLE, EAGLE3, DFLASH and DSPARK keep mixed chunked prefill; STANDALONE, NGRAM, UNO and
    FROZEN_KV_MTP turn it off with a warning (an override); plugin algorithms such as DDTREE fail
    `check_server_args` (validation_hook.py:229-237)."""
    if ctx.algorithm in MIXED_CHUNK_OK:
        return None
    if ctx.algorithm in MIXED_CHUNK_TURNED_OFF:
        return Hit(
            f"--enable-mixed-chunk is turned off by SGLang for {ctx.algorithm}",
            severity=INFO,
            fix="remove enable-mixed-chunk",
            edits={"enable_mixed_chunk": None},
        )
    return Hit(
        f"--enable-mixed-chunk is not supported with {ctx.algorithm}",
        fix="remove enable-mixed-chunk",
        edits={"enable_mixed_chunk": None},
    )
