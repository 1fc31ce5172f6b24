"""Dump the real argparse surface of an installed SGLang as a flag catalog (JSON).

Stdlib only and importable without ddtctl: it is run as a script *inside the interpreter that has sglang*
(a throwaway venv, the managed env, a remote host's python), never inside the ddtctl process:

    /path/to/python ddtctl/schema/argparse_dump.py --out catalog.json

`tools/gen_catalog.py` wraps it to regenerate the shipped catalogs; `ddtctl diff-flags --installed` runs it in
a subprocess. `dump_parser()` works on any argparse parser, so the mapping is testable without sglang.
"""

from __future__ import annotations

import argparse
import enum
import json
import math
import os
import sys
from typing import Any

GENERATOR = "tools/gen_catalog.py"

# argparse `type=` callables -> catalog type names. Anything not listed is reported by name in "converter" and
# typed "str" (argparse hands it a string; only the converter knows more).
_TYPE_BY_NAME = {
    "int": "int",
    "float": "float",
    "str": "str",
    "bool": "bool",
    "loads": "json",  # json.loads
    "json_list_type": "json",
    "human_readable_int": "int",  # accepts "4K", "1M" too; see "converter"
    "nullable_str": "str",
}
# Converters whose name alone says exactly what they accept: no "converter" entry needed.
_PLAIN_CONVERTERS = {"int", "float", "str", "bool"}

_ACTION_NAMES = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "BooleanOptionalAction": "boolean_optional",
    "_ExtendAction": "extend",
}


def _jsonable(value: Any) -> Any:
    """A JSON value for an argparse default/choice (sets sorted, enums by value, odd objects by repr)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _choices(choices: Any) -> list[Any] | None:
    if choices is None:
        return None
    if isinstance(choices, (set, frozenset)):
        return _jsonable(choices)  # sorted: a set has no order worth recording
    return [_jsonable(c) for c in choices]


def _type_info(type_fn: Any) -> tuple[str | None, str | None]:
    """(catalog type, converter name or None) for an argparse `type=` callable."""
    if type_fn is None:
        return None, None
    name = getattr(type_fn, "__name__", None) or type(type_fn).__name__
    module = getattr(type_fn, "__module__", None) or ""
    if name == "loads" and module != "json":
        name = f"{module}.loads"
    mapped = _TYPE_BY_NAME.get(name) or ("json" if name.endswith(".loads") else None)  # orjson.loads & co
    qual = name if not module or module == "builtins" else f"{module.rsplit('.', 1)[-1]}.{name}"
    if mapped is None:
        return "str", qual
    if name in _PLAIN_CONVERTERS and module == "builtins":
        return mapped, None
    return mapped, qual


def _action_name(action: argparse.Action) -> str:
    cls = type(action).__name__
    if cls in _ACTION_NAMES:
        return _ACTION_NAMES[cls]
    if cls == "DeprecatedAliasStoreAction":
        return "deprecated_alias"
    if cls.startswith("Deprecated"):
        # DeprecatedStoreTrueAction -> deprecated_store_true, DeprecatedAction -> deprecated
        rest = cls[len("Deprecated") :].removesuffix("Action")
        out = "deprecated"
        for ch in rest:
            out += ("_" + ch.lower()) if ch.isupper() else ch
        return out
    # custom action classes keep their own name (e.g. LoRAPathAction -> custom:LoRAPathAction)
    return f"custom:{cls}"


def _primary(option_strings: list[str]) -> str:
    for opt in option_strings:
        if opt.startswith("--"):
            return opt[2:]
    return option_strings[0].lstrip("-")


def _is_deprecated(action: argparse.Action) -> bool:
    if type(action).__name__.startswith("Deprecated"):
        return True
    help_text = (action.help or "").lstrip("( ").lower()
    return help_text.startswith("deprecated")


def _nargs(action: argparse.Action) -> Any:
    nargs = action.nargs
    if nargs is None or isinstance(nargs, int):
        # store_true and friends have nargs=0: a switch, taking no value.
        return nargs
    if nargs == argparse.SUPPRESS:
        return None
    return str(nargs)


def dump_parser(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every optional action of `parser` (except -h/--help) as a catalog flag entry, in parser order."""
    flags: list[dict[str, Any]] = []
    for action in parser._actions:  # argparse has no public accessor; _actions is stable since 2.7
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or not action.option_strings:
            continue
        type_name, converter = _type_info(action.type)
        action_name = _action_name(action)
        if type_name is None and action_name in (
            "store_true",
            "store_false",
            "deprecated_store_true",
            "boolean_optional",
        ):
            type_name = "bool"
        elif type_name is None and action.nargs != 0:
            type_name = "str"  # argparse hands over the raw string
        default = action.default
        if default == argparse.SUPPRESS:
            default = None
        help_text = action.help
        if help_text == argparse.SUPPRESS:
            help_text = ""
        elif help_text is not None and "%(" in help_text:
            try:
                help_text = help_text % {**vars(action), "prog": parser.prog}
            except (KeyError, TypeError, ValueError):
                pass
        entry: dict[str, Any] = {
            "name": _primary(list(action.option_strings)),
            "option_strings": list(action.option_strings),
            "dest": action.dest,
            "action": action_name,
            "type": type_name,
            "nargs": _nargs(action),
            "default": _jsonable(default),
            "choices": _choices(action.choices),
            "required": bool(action.required),
            "help": " ".join((help_text or "").split()),
            "deprecated": _is_deprecated(action),
            "alias_of": None,
        }
        if converter:
            entry["converter"] = converter
        new_flag = getattr(action, "new_flag", None)
        if new_flag:
            entry["replacement"] = str(new_flag)
        const = getattr(action, "const_value", None)
        if const is None and (action_name in ("store_const", "append_const") or action.nargs == "?"):
            # a `--flag` given without its optional value stores the const (e.g. --model-checksum: "")
            const = action.const
        if const is not None:
            entry["const"] = _jsonable(const)
        flags.append(entry)
    _link_aliases(flags)
    return flags


def _link_aliases(flags: list[dict[str, Any]]) -> None:
    """Point deprecated flags at the live flag they alias: the `new_flag`
    they name, else the one sharing dest."""
    by_option = {opt: f for f in flags for opt in f["option_strings"]}
    for flag in flags:
        if not flag["deprecated"]:
            continue
        target = None
        repl = (flag.get("replacement") or "").strip()
        # Only a replacement that is exactly another flag of the same shape (valued/switch) makes an alias:
        # "--attn-dp-size <dp-size>" or "--x=disabled" describe a different way of saying it, not a rename.
        cand = by_option.get(repl)
        if cand is not None and cand is not flag and (cand["nargs"] == 0) == (flag["nargs"] == 0):
            target = cand
        if target is None and flag["action"] == "deprecated_alias":
            same_dest = [
                f for f in flags if f["dest"] == flag["dest"] and f is not flag and not f["deprecated"]
            ]
            if len(same_dest) == 1:
                target = same_dest[0]
        if target is not None and not target["deprecated"]:
            flag["alias_of"] = target["name"]


def sglang_version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # noqa: BLE001 - a source checkout without metadata
        import sglang

        return str(getattr(sglang, "__version__", "unknown"))


def _tolerate_cuda_torchvision() -> None:
    """Let a CUDA torchvision wheel import beside CPU torch (older
    sglang imports torchvision.io at import time).

    PyPI's torchvision is a CUDA build; beside CPU torch its import fails with
    `operator torchvision::nms does not exist`. Declaring the two op schemas first lets it import. Only done
    when that exact failure happens, so a working torchvision is left alone.
    """
    try:
        import torchvision  # noqa: F401 - imported only to see whether it loads

        return
    except ImportError:
        return  # not installed: whatever needs it will say so
    except RuntimeError as err:
        if "torchvision::nms" not in str(err):
            raise
    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[mod]
    import torch

    lib = torch.library.Library("torchvision", "DEF")  # noqa: F841 - kept alive for the process lifetime
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(lib)


_KEEP: list[Any] = []


def build_sglang_parser() -> argparse.ArgumentParser:
    """The parser `sglang serve` builds (prepare_server_args): ArgumentParser + ServerArgs.add_cli_args."""
    _tolerate_cuda_torchvision()
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def dump_catalog(*, keep_env: bool = False) -> dict[str, Any]:
    """The catalog document of the sglang importable in this interpreter."""
    if not keep_env:
        # A few choices depend on SGLANG_* switches (e.g. token_oracle
        # sampling); catalogs describe the release.
        for key in [k for k in os.environ if k.startswith("SGLANG_") or k.startswith("SGL_")]:
            del os.environ[key]
    version = sglang_version()
    parser = build_sglang_parser()
    return {"sglang": version, "generator": GENERATOR, "flags": dump_parser(parser)}


def to_json(doc: dict[str, Any]) -> str:
    """Stable text form: one flag per line (small, diffable)."""
    lines = [
        "{",
        f'"sglang": {json.dumps(doc["sglang"])},',
        f'"generator": {json.dumps(doc["generator"])},',
        '"flags": [',
    ]
    flags = doc["flags"]
    for i, flag in enumerate(flags):
        lines.append(
            json.dumps(flag, ensure_ascii=False, separators=(",", ":")) + ("," if i < len(flags) - 1 else "")
        )
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Dump the installed sglang's argparse surface as a ddtctl flag catalog."
    )
    ap.add_argument("--out", help="write the catalog here (default: stdout)")
    ap.add_argument(
        "--keep-env", action="store_true", help="keep SGLANG_* environment variables while importing"
    )
    args = ap.parse_args(argv)
    # sglang may log to stdout on import; keep stdout for the document only.
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        doc = dump_catalog(keep_env=args.keep_env)
    finally:
        sys.stdout = real_stdout
    text = to_json(doc)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # interpreter teardown after importing sglang/torch costs ~2 s
