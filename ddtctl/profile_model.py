"""The profile model (pydantic): the keys a launch profile has and what each takes. `server:` holds SGLang
flags by name; they are checked against the release's flag catalog by `ddtctl.validate`, not here.

The ground floor under ddtctl.profile (the loader) and ddtctl.profile_overrides (`--set` names its keys).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ddtctl import PINNED_SGLANG
from ddtctl.errors import DdtctlError
from ddtctl.schema.gpus import resolve_gpu


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Hardware(_Strict):
    gpu: str = Field(description="GPU product (H200, B200, RTX_PRO_6000_BLACKWELL, ...) or generation (sm90)")
    count: int = Field(default=1, ge=1, le=1024, description="GPUs per host")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        try:
            resolve_gpu(value)
        except DdtctlError as err:
            raise ValueError(err.one_line()) from None
        return value


class ModelSpec(_Strict):
    path: str = Field(min_length=1, description="Model directory on the target host (or a hub id)")
    architecture: str | None = Field(
        default=None,
        description="config.json architectures[0]; optional when config.json is readable locally",
    )


class Launch(_Strict):
    health_timeout_s: int = Field(
        default=1800, ge=10, le=86400, description="Seconds to wait until /health is ok"
    )
    launcher: list[str] | None = Field(
        default=None, description="Command that starts the server (default: python -m sglang.launch_server)"
    )


class IgnoreEntry(_Strict):
    """A finding the profile suppresses on purpose: `{rule: DDT114, reason: "why"}` (`ddtctl validate` counts
    it and lists it in JSON; errors SGLang itself rejects cannot be ignored)."""

    rule: str = Field(min_length=1, max_length=16, description="Rule id to ignore, e.g. DDT114")
    reason: str = Field(
        min_length=1, max_length=500, description="Why this finding does not apply (required)"
    )

    @model_validator(mode="before")
    @classmethod
    def _not_bare(cls, data: Any) -> Any:
        if isinstance(data, str):
            raise ValueError(
                f"a bare rule id ({data[:16]!r}) is not an ignore entry: write "
                f'{{rule: {data[:16]}, reason: "why it does not apply"}}'
            )
        return data

    @field_validator("reason")
    @classmethod
    def _reason_says_something(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("reason must say why the rule does not apply")
        return value


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class Profile(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Profile name (letters, digits, . _ -)")
    description: str | None = None
    sglang: str = Field(
        default=PINNED_SGLANG, pattern=r"^\d+\.\d+\.\d+$", description="SGLang release targeted"
    )
    host: str | None = Field(default=None, description="Inventory host name (hosts.yaml) used by deploy")
    hosts: list[str] | None = Field(
        default=None, min_length=1, description="Several hosts: one multi-node server"
    )
    hardware: Hardware | None = None
    model: ModelSpec
    server: dict[str, Any] = Field(
        default_factory=dict, description="SGLang flags by name (dashed or underscored)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the server process")
    launch: Launch = Field(default_factory=Launch)
    ignore: list[IgnoreEntry] = Field(
        default_factory=list,
        description="Findings suppressed on purpose, each with its reason: [{rule: DDT114, reason: ...}]",
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"invalid environment variable name {key!r}")
        return value
