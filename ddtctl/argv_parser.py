"""SGLang's server parser rebuilt from a flag catalog: argparse with the release's actions, converters and
option strings (ddtctl.argv.parse_server_argv is the reader built on it).

`prepare_server_args` makes `argparse.ArgumentParser(prog="sglang serve")` (allow_abbrev on, -h/--help added)
and fills it with `ServerArgs.add_cli_args`; the catalog is a dump of exactly those actions
(schema/argparse_dump.py). Prefixes (`--tp` -> --tp-size), aliases (`--model`), `--no-` forms, nargs, choices,
the type converters and "the last occurrence wins" are then argparse's own, not a re-implementation.

Deliberate differences: nothing is printed and nothing exits (errors are collected as one-line messages);
`--help` is recorded, not printed; a value argparse's type or choices refuse is recorded and parsing goes on,
so one run reports every bad value (SGLang stops at the first: the verdict is the same). SGLang's deprecation
log lines are not printed. Converters are SGLang's, copied (stdlib only: no sglang import on this path).
tests/fidelity/test_argv_parse.py compares the result with SGLang's own parser.
"""

from __future__ import annotations

import argparse
import json
import re
from decimal import Decimal
from typing import Any, Callable

from ddtctl.schema.catalog import Catalog, FlagSpec


class _Bad:
    """A value argparse's type or choices refused (kept so the parse can go on)."""

    def __repr__(self) -> str:
        return "<refused>"


BAD = _Bad()


# -------------------------------------------------------------------------- type converters of the catalog
def human_readable_int(value: str) -> int:
    """sglang.srt.utils.common.human_readable_int: 4096, 4k (SI, decimals allowed), 4Ki (IEC)."""
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
            "(1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list."
        ) from None


def nullable_str(val: str) -> str | None:
    return None if not val or val == "None" else val


def parse_cuda_graph_backend_arg(raw: str) -> str:
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


def parse_cuda_graph_config_arg(raw: str) -> dict[str, Any]:
    """The shape check of SGLang's --cuda-graph-config (a JSON object of per-phase objects); the phase and key
    names are SGLang's to check (dry-run)."""
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise argparse.ArgumentTypeError("--cuda-graph-config must be a JSON object of JSON objects")
    for settings in parsed.values():
        if "backend" in settings:
            parse_cuda_graph_backend_arg(settings["backend"])
    return {str(k): dict(v) for k, v in parsed.items()}


def loads(value: str) -> Any:  # json.loads under the name argparse shows ("invalid loads value")
    return json.loads(value)


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "common.human_readable_int": human_readable_int,
    "common.json_list_type": json_list_type,
    "common.nullable_str": nullable_str,
    "cuda_graph_config.parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "cuda_graph_config.parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
    "json.loads": loads,
}
_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "json": loads,
}


def _type_of(spec: FlagSpec) -> Callable[[str], Any] | None:
    if spec.converter:
        return _CONVERTERS.get(spec.converter, str)  # a converter this ddtctl does not know: the raw text
    return _TYPES.get(spec.type or "") if spec.type != "str" else None


# ------------------------------------------------------------------------------------------ the parser
class Failure(Exception):
    """argparse gave up (ambiguous prefix, missing value, ...): its one-line message."""


class Parser(argparse.ArgumentParser):
    """argparse, with errors raised (not printed and exited) and refused values recorded, not fatal."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.state: dict[str, Any] = {}

    def error(self, message: str):
        raise Failure(message)

    def _get_formatter(self) -> argparse.HelpFormatter:
        """One formatter (argparse makes one per add_argument to check nargs, asking the terminal its size
        each time: most of the build's cost). Help is never printed from this parser."""
        formatter = self.__dict__.get("_formatter")
        if formatter is None:
            formatter = self.__dict__["_formatter"] = argparse.HelpFormatter(self.prog, width=100)
        return formatter

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        """argparse's own conversion (type, choices); a refusal is recorded and the parse goes on."""
        self.state["raw"] = tuple(arg_strings)
        try:
            return super()._get_values(action, arg_strings)
        except argparse.ArgumentError as err:
            self.state["errors"].append(str(err))
            self.state["refused"] = str(err)
            return BAD


class _Recording(argparse.Action):
    """Mixed in before an action class: records (option as written, action, raw strings, argparse's refusal
    or None) in order."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        state = parser.state
        refused = state.pop("refused", None)
        state["occurrences"].append((option_string, self, state.pop("raw", ()), refused))
        if values is BAD:
            setattr(namespace, self.dest, BAD)
            return
        super().__call__(parser, namespace, values, option_string)


class DeprecatedStoreTrue(argparse.Action):
    """SGLang's DeprecatedStoreTrueAction, without its log line."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, True)


class DeprecatedStoreConst(argparse.Action):
    """SGLang's DeprecatedStoreConstAction: stores `const_value` (nargs 0, or one value of its choices)."""

    def __init__(self, option_strings: list[str], dest: str, const_value: Any = None, **kwargs: Any):
        self.const_value = const_value
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, self.const_value)


class StoreValues(argparse.Action):
    """DeprecatedAliasStoreAction, and custom actions this ddtctl does not know: the values, stored."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)


class Deprecated(argparse.Action):
    """SGLang's DeprecatedAction (the catalog has no error message): a no-op."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        return None


class LoRAPaths(argparse.Action):
    """sglang.srt.arg_groups.argparse_actions.LoRAPathAction: JSON-looking items become mappings."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        out: list[Any] = []
        for path in values or []:
            path = path.strip()
            out.append(json.loads(path) if path.startswith("{") and path.endswith("}") else path)
        setattr(namespace, self.dest, out)


class Help(argparse.Action):
    """-h/--help: recorded (SGLang prints its help and exits)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        parser.state["help"] = True


_BASES: dict[str, type[argparse.Action]] = {
    "store": argparse._StoreAction,
    "store_true": argparse._StoreTrueAction,
    "store_false": argparse._StoreFalseAction,
    "store_const": argparse._StoreConstAction,
    "append": argparse._AppendAction,
    "append_const": argparse._AppendConstAction,
    "count": argparse._CountAction,
    "extend": argparse._ExtendAction,
    "boolean_optional": argparse.BooleanOptionalAction,
    "deprecated_store_true": DeprecatedStoreTrue,
    "deprecated_store_const": DeprecatedStoreConst,
    "deprecated_alias": StoreValues,
    "deprecated": Deprecated,
    "custom:LoRAPathAction": LoRAPaths,
    "help": Help,
}
_ACTIONS: dict[str, type[argparse.Action]] = {
    name: type(f"Recording{base.__name__}", (_Recording, base), {}) for name, base in _BASES.items()
}
_CUSTOM = _ACTIONS["deprecated_alias"]


def _add_flag(parser: Parser, spec: FlagSpec) -> None:
    action = spec.action
    kwargs: dict[str, Any] = {
        "dest": spec.dest,
        "default": spec.default,
        "action": _ACTIONS.get(action, _CUSTOM),
    }
    options = list(spec.option_strings)
    if action in ("store_const", "append_const"):
        kwargs["const"] = spec.const
    elif action == "boolean_optional":  # argparse adds the `--no-` spellings itself
        options = [o for o in options if not (o.startswith("--no-") and "--" + o[5:] in options)]
    elif action == "deprecated_store_true":
        kwargs["nargs"] = 0
    elif action == "deprecated_store_const":
        kwargs.update(nargs=spec.nargs, const_value=spec.const, choices=spec.choices, type=_type_of(spec))
    elif action == "deprecated":
        kwargs["nargs"] = spec.nargs if spec.nargs is not None else 0
    elif action not in ("store_true", "store_false", "count"):  # store, append, aliases, custom: values
        kwargs.update(nargs=spec.nargs, choices=spec.choices, type=_type_of(spec))
        if spec.nargs == "?":
            kwargs["const"] = spec.const
    parser.add_argument(*options, **kwargs)


_PARSERS: dict[int, tuple[Catalog, Parser]] = {}


def server_parser(catalog: Catalog) -> Parser:
    """SGLang's server parser for this catalog, built once per catalog and process."""
    hit = _PARSERS.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    parser = Parser(prog="sglang serve", add_help=False, exit_on_error=False)
    parser.add_argument("-h", "--help", action=_ACTIONS["help"], nargs=0, default=argparse.SUPPRESS)
    for spec in catalog.flags:
        _add_flag(parser, spec)
    _PARSERS[id(catalog)] = (catalog, parser)
    return parser


def run(parser: Parser, tokens: list[str]) -> tuple[dict[str, Any], argparse.Namespace, list[str]]:
    """One argparse run: (state with the recorded occurrences, errors and help, the namespace, the tokens
    argparse did not take)."""
    state: dict[str, Any] = {"errors": [], "occurrences": []}
    parser.state = state
    namespace = argparse.Namespace()
    extras: list[str] = []
    try:
        _, extras = parser.parse_known_args(tokens, namespace)
    except Failure as err:
        state["errors"].append(str(err))
    except argparse.ArgumentError as err:  # a structural problem (exit_on_error=False hands it over)
        state["errors"].append(str(err))
    finally:
        parser.state = {}
    return state, namespace, extras
