"""The inventory's JSON Schema never drifts from what the inventory reader accepts."""

from __future__ import annotations

from pathlib import Path

import yaml

from ddtctl.remote import inventory
from ddtctl.schema import hosts

REPO = Path(__file__).resolve().parents[2]


def test_schema_fields_are_the_keys_the_reader_accepts():
    assert set(hosts.HOST_FIELDS) == inventory._HOST_KEYS


def test_shipped_schema_is_the_generated_one():
    assert hosts.SCHEMA_PATH.read_text() == hosts.render(), "run: python -m ddtctl.schema.hosts --write"


def _check(value, schema) -> list[str]:
    """The subset of JSON Schema the inventory schema uses (type, properties, additionalProperties, oneOf)."""
    if "oneOf" in schema:
        return [] if any(not _check(value, s) for s in schema["oneOf"]) else [f"{value!r}: no oneOf branch"]
    kinds = schema.get("type")
    types = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list,
             "null": type(None)}
    if kinds is not None:
        allowed = tuple(t for k in ([kinds] if isinstance(kinds, str) else kinds) for t in
                        (types[k] if isinstance(types[k], tuple) else (types[k],)))
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            return [f"{value!r} is not {kinds}"]
    errors: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                errors += _check(v, props[k])
            elif schema.get("additionalProperties") is False:
                errors.append(f"unknown key {k!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += _check(v, schema["additionalProperties"])
    if isinstance(value, list) and "items" in schema:
        for v in value:
            errors += _check(v, schema["items"])
    return errors


def test_the_example_inventory_satisfies_the_schema_and_a_typo_does_not():
    example = yaml.safe_load((REPO / "hosts.example.yaml").read_text())
    schema = hosts.hosts_schema()
    assert _check(example, schema) == []
    host = schema["properties"]["defaults"]
    assert _check({"adress": "x"}, host) == ["unknown key 'adress'"]
    assert _check({"port": "22"}, host) == ["'22' is not integer"]
    assert _check({"hosts": {"h": {"adress": "x"}}}, schema) != []  # through the hosts mapping too
    assert _check({"hosts": {"h": None}}, schema) == []  # a bare `h:` entry (an ~/.ssh/config alias)
