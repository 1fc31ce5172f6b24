"""Typed pydantic models of the speculative, mamba, DFLASH and DDTree flags of an SGLang release.

Built from the release's flag catalog (real argparse types, defaults and choices) plus the value ranges argparse
does not express. Used to check those flags' values and to type `server:` in the profile's JSON Schema.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from ddtctl.schema.catalog import Catalog, FlagSpec

TYPED_PREFIXES = ("speculative_", "mamba_", "enable_mamba_")
TYPED_EXTRA = {"max_mamba_cache_size", "linear_attn_backend", "enable_multi_layer_eagle", "enable_dp_lm_head"}
# Ranges SGLang expects but argparse does not check. Fields whose range a rule reports (block size, DDTree budget)
# are left to the rule, so each mistake is reported once, with the rule's fix.
RANGES: dict[str, dict[str, Any]] = {
    "speculative_num_steps": {"ge": 1},
    "speculative_eagle_topk": {"ge": 1},
    "speculative_num_draft_tokens": {"ge": 1},
    "speculative_accept_threshold_single": {"ge": 0, "le": 1},
    "speculative_accept_threshold_acc": {"ge": 0, "le": 1},
    "speculative_ngram_min_bfs_breadth": {"ge": 1},
    "speculative_ngram_max_bfs_breadth": {"ge": 1},
    "mamba_track_interval": {"ge": 1},
    "max_mamba_cache_size": {"ge": 1},
}
_PY = {"int": int, "float": float, "str": str, "bool": bool, "json": str}


def is_typed_flag(spec: FlagSpec) -> bool:
    return spec.dest.startswith(TYPED_PREFIXES) or spec.dest in TYPED_EXTRA or "dflash" in spec.dest


def _annotation(spec: FlagSpec) -> Any:
    if Catalog.is_boolean_switch(spec):
        return Optional[bool]
    base: Any = _PY.get(spec.type or "str", str)
    if spec.converter == "common.human_readable_int":
        base = int | str
    if spec.choices:
        base = Literal[tuple(spec.choices)]  # type: ignore[misc]
    if spec.nargs in ("+", "*") or isinstance(spec.nargs, int):
        base = list[base]  # type: ignore[valid-type]
    return Optional[base]


@functools.lru_cache(maxsize=None)
def typed_flag_model(catalog: Catalog) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for spec in catalog.flags:
        if not is_typed_flag(spec) or spec.deprecated or spec.dest in fields:
            continue
        default = spec.default if isinstance(spec.default, (int, float, str, bool, type(None))) else None
        fields[spec.dest] = (_annotation(spec), Field(default=default, alias=spec.name, description=spec.help or None,
                                                      **RANGES.get(spec.dest, {})))
    return create_model(  # type: ignore[call-overload]
        f"SpeculativeFlags_{catalog.version.replace('.', '_')}",
        __config__=ConfigDict(extra="ignore", populate_by_name=True, strict=False),
        **fields,
    )
