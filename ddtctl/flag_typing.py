"""A profile value typed as SGLang's parser types it: `coerce` gives the dest value argparse would hold
after reading the value's text (the catalog's type, nargs, choices), and refuses a value it would not read
back as that.

The ground floor of the flag readers: ddtctl.flags (profile and argv values into typed values and findings)
and ddtctl.launch_tokens (typed values written back as argv tokens) both stand on it.
"""

from __future__ import annotations

import json
from typing import Any

from ddtctl.schema.catalog import Catalog, FlagSpec


def _int_value(spec: FlagSpec, value: Any) -> int | str:
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        raise ValueError(f"expected an integer, got {value!r} (write {int(value)})")
    if isinstance(value, str):
        text = value.strip()
        if spec.converter == "common.human_readable_int" and text[-1:].lower() in ("k", "m", "g"):
            return text  # SGLang converts "4k" itself
        try:
            return int(text)
        except ValueError:
            pass
    raise ValueError(f"expected an integer, got {value!r}")


def _float_value(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ValueError(f"expected a number, got {value!r}")


def _json_value(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError as err:
            raise ValueError(f"expected JSON, got {value!r} ({err})") from None
        return value
    raise ValueError(f"expected a JSON mapping or list, got {value!r}")


class YamlTypingError(ValueError):
    """A YAML 1.1 scalar whose YAML reading differs from what SGLang's parser makes of the text (DDT012)."""


class YamlNumberText(str):
    """The text of a plain YAML number that YAML 1.1 reads otherwise than SGLang's parser reads the text
    (`0123` is octal 83 to YAML, 123 to argparse's int; `0x1F`, `1:20` are numbers to YAML only). The profile
    reader puts it in place of the number under a numeric flag, so every reader of the value refuses it
    (DDT012) instead of launching either reading."""

    yaml_value: Any = None

    def __new__(cls, text: str, yaml_value: Any) -> YamlNumberText:
        obj = super().__new__(cls, text)
        obj.yaml_value = yaml_value
        return obj


def _ambiguous_number(spec: FlagSpec, value: YamlNumberText) -> YamlTypingError:
    convert = float if spec.type == "float" else int
    try:
        reading = f"{convert(str(value).strip())!r} to SGLang's parser"
    except ValueError:
        reading = f"not {'a number' if convert is float else 'an integer'} to SGLang's parser"
    return YamlTypingError(f"{str(value)[:40]!r} is {value.yaml_value!r} to YAML 1.1 but {reading}")


def _scalar(spec: FlagSpec, value: Any) -> Any:
    """One value typed as the flag's argparse type would produce; ValueError with the reason otherwise."""
    kind = spec.type
    if isinstance(value, YamlNumberText):
        raise _ambiguous_number(spec, value)
    if isinstance(value, (dict, list)) and kind != "json":
        got = "mapping" if isinstance(value, dict) else "list"
        raise ValueError(f"expected a single {kind or 'value'}, got a {got}")
    if kind == "int":
        return _int_value(spec, value)
    if kind == "float":
        return _float_value(value)
    if kind == "json":
        return _json_value(value)
    if value is None:
        raise ValueError("expected a value, got null (remove the key to use the default)")
    if isinstance(value, bool):
        return "true" if value else "false"  # YAML turns on/off/yes/no into booleans; argparse sees strings
    return str(value)


def coerce(spec: FlagSpec, value: Any) -> Any:
    """The dest value SGLang would hold after parsing this profile value."""
    if Catalog.is_boolean_switch(spec):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        if spec.action == "store_false":
            return not value
        if spec.action in ("store_const", "deprecated_store_const"):
            return spec.const if value else spec.default
        return value
    if (
        spec.nargs in ("+", "*")
        or isinstance(spec.nargs, int)
        or spec.action in ("append",)
        or spec.action.startswith("custom:")
        and spec.nargs == "*"
    ):
        items = value if isinstance(value, list) else [value]
        if spec.nargs == "+" and not items:
            raise ValueError("expected at least one value")
        if isinstance(spec.nargs, int) and len(items) != spec.nargs:
            raise ValueError(f"expected {spec.nargs} values, got {len(items)}")
        out = [_scalar(spec, item) for item in items]
        _check_choices(spec, out)
        return out
    if spec.nargs == "?" and value is None:
        return spec.const
    typed = _scalar(spec, value)
    _check_choices(spec, [typed])
    return typed


def _check_choices(spec: FlagSpec, values: list[Any]) -> None:
    if spec.choices is None:
        return
    for v in values:
        if v not in spec.choices:
            raise LookupError(v)
