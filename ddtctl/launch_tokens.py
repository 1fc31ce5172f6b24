"""A flag's value as `python -m sglang.launch_server` argv tokens that SGLang's argparse reads back.

SGLang parses its command line with a stock `argparse.ArgumentParser` (Python 3.11: prefix "-", abbreviations
allowed, `-h/--help` added). Argparse decides for every token whether it is an option or a value *before* it
knows which option wants a value (`ArgumentParser._parse_optional`), so a value written as its own token that
looks like an option is read as one: `--allowed-media-domains example.com --trust-remote-code` turns
`--trust-remote-code` on (issue #31). `reads_as_value` models that decision exactly; `flag_tokens` then writes

  * a single value (nargs None or "?") as `--flag value` when it does not start with "-" or is a negative
    number argparse reads as a value, else as `--flag=value` (argparse splits at the first "=" of a known
    option and takes the rest whole);
  * the items of a list flag (nargs "+", "*", N) as separate tokens only: argparse takes one item after
    "=", so an item that starts with "-" (but a negative number) cannot be passed safely and is refused
    (UnsafeValue, DDT011);
  * nothing that no command line can carry: a NUL byte, or the token "--" (argparse drops it from the values).

Negative numbers are values to argparse when they match its `_negative_number_matcher` and no option of the
parser looks like a negative number; floats are written so that they do (`-1e-05` -> `-0.00001`).
"""

from __future__ import annotations

import functools
import json
import re
from decimal import Decimal
from typing import Any

from ddtctl.argv import is_secret_flag
from ddtctl.flag_typing import YamlTypingError, coerce
from ddtctl.schema.catalog import Catalog, FlagSpec

# argparse 3.11 ArgumentParser._negative_number_matcher (later Pythons accept more, never less)
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_HELP = ("-h", "--help")  # add_help=True: argparse adds them to every parser


class UnsafeValue(ValueError):
    """A value SGLang's parser would not read back as that value from any command line ddtctl can write."""


@functools.lru_cache(maxsize=16)
def _parser_options(catalog: Catalog) -> tuple[frozenset[str], bool]:
    """SGLang's parser's option strings for this catalog, and whether any looks like a negative number."""
    options = frozenset({o for spec in catalog.flags for o in spec.option_strings} | set(_HELP))
    return options, any(NEGATIVE_NUMBER.match(o) for o in options)


def _prefix_matches(token: str, options: frozenset[str]) -> bool:
    """argparse 3.11 `_get_option_tuples`: an abbreviation of an option (or, for `-x...`, a short option
    followed by its value) matches; one match is that option, several are an "ambiguous option" error."""
    if token[1] == "-":
        prefix = token.split("=", 1)[0]
        return any(o.startswith(prefix) for o in options)
    short = token[:2]
    return any(o == short or o.startswith(token) for o in options)


def reads_as_value(token: str, catalog: Catalog) -> bool:
    """Whether SGLang's argparse reads `token`, given as its own argument, as a value and not as an option
    (`ArgumentParser._parse_optional` returning None)."""
    if not token or token[0] != "-":
        return True
    options, negative_options = _parser_options(catalog)
    if token in options:
        return False
    if len(token) == 1:
        return True
    if "=" in token and token.split("=", 1)[0] in options:
        return False
    if _prefix_matches(token, options):
        return False
    if NEGATIVE_NUMBER.match(token):
        return not negative_options
    return " " in token


def safe_alone(token: str, catalog: Catalog) -> bool:
    """Whether ddtctl writes `token` as its own argument: it does not start with '-', or it is '-' or a
    negative number argparse reads as a value. (Argparse also reads `-x y`, with a space, as a value; ddtctl
    does not lean on that: a single value is written `--flag=-x y`, a list item refused.)"""
    if not token or token[0] != "-" or token == "-":
        return True
    return bool(NEGATIVE_NUMBER.match(token)) and reads_as_value(token, catalog)


def carry_problem(text: str) -> str | None:
    """Why no command line can carry `text` as a value, or None."""
    if "\x00" in text:
        return "holds a NUL byte, which no command line can carry"
    if text == "--":
        return "is '--', which argparse drops from an option's values"
    return None


def float_text(value: float) -> str:
    """A float as a token that argparse reads as a value and float() reads back exactly: `-1e-05` is an option
    to argparse, `-0.00001` a negative number."""
    text = repr(value)
    if (
        text.startswith("-")
        and not NEGATIVE_NUMBER.match(text)
        and value == value
        and abs(value) != float("inf")
    ):
        plain = format(Decimal(text), "f")
        if float(plain) == value:
            return plain
    return text


def value_text(spec: FlagSpec, typed: Any, raw: Any) -> str:
    """One typed value (ddtctl.flag_typing.coerce) as the text its argparse type converts back into it."""
    if isinstance(typed, bool):
        return "true" if typed else "false"
    if isinstance(typed, float):
        if isinstance(raw, int) and not isinstance(raw, bool) and float(raw) == typed:
            return str(raw)  # `mem-fraction-static: 1` stays "1"
        return float_text(typed)
    if isinstance(typed, (dict, list)):
        return json.dumps(typed, separators=(",", ":"))
    return str(typed)


def _raw_text(value: Any) -> str:
    """A value the flag's type refused, written as before typing existed (what `diff-flags` shows)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _shown(text: str, secret: bool) -> str:
    return "the value" if secret else repr(text[:40])


def single_tokens(option: str, text: str, catalog: Catalog, *, secret: bool = False) -> list[str]:
    """`--flag value`, or `--flag=value` when argparse would read `value` alone as an option. `secret`: the
    value is never shown in an error."""
    problem = carry_problem(text)
    if problem:
        raise UnsafeValue(f"{_shown(text, secret)} {problem}")
    return [option, text] if safe_alone(text, catalog) else [f"{option}={text}"]


def list_tokens(option: str, items: list[str], catalog: Catalog, *, secret: bool = False) -> list[str]:
    for item in items:
        problem = carry_problem(item)
        if problem:
            raise UnsafeValue(f"item {_shown(item, secret)} {problem}")
        if not safe_alone(item, catalog):
            raise UnsafeValue(
                f"item {_shown(item, secret)} starts with '-': SGLang's parser would read it as an option, "
                f"and a list flag's items cannot be written --{option.lstrip('-')}=ITEM"
            )
    return [option, *items]


def flag_tokens(spec: FlagSpec, value: Any, catalog: Catalog, *, strict: bool = True) -> list[str]:
    """A profile value of one flag as argv tokens (none for a switch that is off). Raises UnsafeValue for a
    value no command line carries; with `strict`, ValueError / LookupError as flag_typing.coerce does for
    a value the flag's type refuses (without it such a value is written as its text, still never as an option:
    `diff-flags` compares invalid profiles too)."""
    option, secret = spec.option, is_secret_flag(spec.name)
    if Catalog.is_boolean_switch(spec):
        if spec.action == "boolean_optional" and value is False:
            return [f"--no-{spec.name}"]
        return [option] if value else []
    if spec.nargs == "?" and value is None:
        return [option]
    try:
        typed = coerce(spec, value)
    except (ValueError, LookupError) as err:
        if strict or isinstance(err, YamlTypingError):
            raise
        if isinstance(value, list):
            return list_tokens(option, [_raw_text(v) for v in value], catalog, secret=secret)
        return single_tokens(option, _raw_text(value), catalog, secret=secret)
    if isinstance(typed, list):
        raws = value if isinstance(value, list) else [value]
        items = [value_text(spec, t, r) for t, r in zip(typed, raws, strict=True)]
        return list_tokens(option, items, catalog, secret=secret)
    return single_tokens(option, value_text(spec, typed, value), catalog, secret=secret)


def is_inline(tokens: list[str]) -> bool:
    """Whether flag_tokens wrote the value inline (`--flag=value`), which SGLang's --config cannot do."""
    return len(tokens) == 1 and tokens[0].startswith("--") and "=" in tokens[0]
