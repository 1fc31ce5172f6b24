"""The JSON Schema of a profile, for editors (`# yaml-language-server: $schema=...`)."""

from __future__ import annotations

from typing import Any

from ddtctl.profile import Profile
from ddtctl.schema.catalog import Catalog
from ddtctl.schema.extensions import extended_catalog
from ddtctl.schema.flag_models import typed_flag_model


def _catalog_property(spec) -> dict[str, Any]:
    if Catalog.is_boolean_switch(spec):
        prop: dict[str, Any] = {"type": "boolean"}
    else:
        kinds = {"int": "integer", "float": "number", "json": ["object", "array", "string"]}
        kind = kinds.get(spec.type or "", "string")
        item: dict[str, Any] = {"type": kind}
        if spec.choices:
            item["enum"] = list(spec.choices)
        multi = spec.nargs in ("+", "*") or isinstance(spec.nargs, int)
        prop = {"anyOf": [item, {"type": "array", "items": item}]} if multi else item
    if spec.help:
        prop["description"] = spec.help
    if spec.default is not None and not isinstance(spec.default, (list, dict)):
        prop["default"] = spec.default
    if spec.deprecated:
        prop["deprecated"] = True
    return prop


def profile_json_schema(version: str) -> dict[str, Any]:

    catalog = extended_catalog(version)
    schema = Profile.model_json_schema()
    typed = typed_flag_model(catalog).model_json_schema(by_alias=True)
    properties: dict[str, Any] = {}
    for spec in catalog.flags:
        if spec.dest == "model_path" or spec.name in properties:
            continue
        prop = typed["properties"].get(spec.name) or _catalog_property(spec)
        prop.pop("title", None)
        properties[spec.name] = prop
    schema["properties"]["server"] = {
        "type": "object",
        "description": f"SGLang {catalog.version} flags by name (dashed; underscored names are accepted too)",
        "properties": properties,
        "additionalProperties": True,
    }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"ddtctl launch profile (SGLang {catalog.version})"
    if "$defs" in typed:
        schema.setdefault("$defs", {}).update(typed["$defs"])
    return schema
