"""A profile as the argv of SGLang's server: `render_argv` is the one place a profile becomes SGLang argv
(render, dry-run, deploy, tune and diff-flags all call it, deploy's spec through this module, the rest mostly
through ddtctl.render). Each value is written by ddtctl.launch_tokens so that SGLang's argparse reads it back
as that value, and the argv is parsed back (ddtctl.flags.flags_from_parsed) and compared with the profile's
typed values: a difference is a ddtctl bug (RenderMismatch, exit 70), never a launch.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ddtctl.argv import parse_server_argv
from ddtctl.errors import ProfileError
from ddtctl.flag_typing import YamlTypingError, coerce
from ddtctl.flags import RESERVED, flags_from_parsed, out_of_range
from ddtctl.launch_tokens import UnsafeValue, flag_tokens, single_tokens
from ddtctl.profile import Profile
from ddtctl.schema.catalog import Catalog, FlagSpec
from ddtctl.schema.extensions import extended_catalog

MODEL_PATH = "--model-path"


class RenderMismatch(RuntimeError):
    """The rendered argv does not parse back into the profile's values: a ddtctl bug (exit 70)."""


_UNTYPED = object()  # a value the flag's type refuses (validate reports it; diff-flags still shows it)


@dataclass
class LaunchGroup:
    """One flag of the launch: its tokens, and the typed value SGLang must read back from them."""

    key: str  # the profile key ("server.tp-size", "model.path")
    spec: FlagSpec | None  # None: --model-path
    tokens: list[str]
    typed: Any = _UNTYPED


def launch_groups(profile: Profile, catalog: Catalog) -> list[LaunchGroup]:
    """`--model-path` first, then the server flags in profile order, each as its argv tokens."""
    try:
        groups = [LaunchGroup("model.path", None, single_tokens(MODEL_PATH, profile.model.path, catalog))]
    except UnsafeValue as err:
        raise ProfileError(f"model.path: {err}", fix="set model.path to the model directory") from None
    for name, value in profile.env.items():
        if "\x00" in value:
            raise ProfileError(
                f"env.{name}: the value holds a NUL byte", fix="run `ddtctl validate` (DDT011)"
            )
    for key, value in profile.server.items():
        spec = catalog.get(key)
        if spec is None:
            raise ProfileError(
                f"server.{key}: unknown SGLang {catalog.version} flag",
                fix="run `ddtctl validate` on the profile",
            )
        try:
            tokens = flag_tokens(spec, value, catalog, strict=False)
        except (UnsafeValue, YamlTypingError) as err:
            rule = "DDT011" if isinstance(err, UnsafeValue) else "DDT012"
            raise ProfileError(
                f"server.{key}: --{spec.name}: {err}", fix=f"run `ddtctl validate` on the profile ({rule})"
            ) from None
        group = LaunchGroup(f"server.{key}", spec, tokens)
        try:
            group.typed = coerce(spec, value)
        except (ValueError, LookupError):
            pass
        groups.append(group)
    return groups


def render_argv(profile: Profile, catalog: Catalog | None = None) -> list[str]:
    """`--model-path` first, then the server flags in profile order, with the options SGLang's parser knows;
    checked by parsing it back (RenderMismatch on any difference)."""
    if catalog is None:
        catalog = extended_catalog(profile.sglang)
    groups = launch_groups(profile, catalog)
    argv = [token for group in groups for token in group.tokens]
    check_round_trip(argv, groups, catalog, profile.model.path)
    return argv


def _same(a: Any, b: Any, spec: FlagSpec | None = None) -> bool:
    if spec is not None and spec.type == "json" and isinstance(a, str) and isinstance(b, str):
        try:
            return json.loads(a) == json.loads(b)  # the argv and --config forms space JSON differently
        except ValueError:
            return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def check_round_trip(
    argv: list[str], groups: list[LaunchGroup], catalog: Catalog, model_path: str, *, form: str = "argv"
) -> None:
    """Parse `argv` back as SGLang would and compare with the typed values it was rendered from: no option
    appears that was not rendered, no token is left unplaced, every value comes back equal and of its type."""
    read = parse_server_argv(list(argv), catalog, config=False)  # the one argv reader: SGLang's parser
    parsed = flags_from_parsed(read, catalog)
    problems = [f.message for f in parsed.findings if f.rule == "DDT001"]
    dests = Counter(g.spec.dest for g in groups if g.spec is not None and g.tokens)
    problems += [
        f"--{d.replace('_', '-')} appears, not rendered" for d in sorted(set(parsed.given) - set(dests))
    ]
    for g in groups:
        if g.spec is None or g.typed is _UNTYPED or not g.tokens or dests[g.spec.dest] != 1:
            continue
        if g.spec.dest in RESERVED or out_of_range(g.spec, g.typed):
            continue  # not read back by the parser's model (validate reports them)
        got = parsed.given.get(g.spec.dest, _UNTYPED)
        if not _same(got, g.typed, g.spec):
            problems.append(
                f"{g.key}: rendered {g.typed!r}, parsed back {'nothing' if got is _UNTYPED else repr(got)}"
            )
    if read.get("model_path") != model_path:
        problems.append(f"model.path: rendered {model_path!r}, parsed back {read.get('model_path')!r}")
    if problems:
        raise RenderMismatch(
            f"the rendered {form} does not parse back into the profile (a ddtctl bug): "
            + "; ".join(problems)[:300]
        )
