"""A profile as SGLang's server launch: `typed_launch` is the one place a profile becomes a launch, a
TypedLaunch (the profile, its dest-keyed values typed as SGLang's argparse types them, its env and catalog)
that deploy carries from its spec through preflight, plan and health; `render_argv` is that launch's argv,
what goes on the wire (render, dry-run, tune and diff-flags call it, mostly through ddtctl.render). Each value
is written by ddtctl.launch_tokens so that SGLang's argparse reads it back as that value, and the argv is
parsed back once (ddtctl.flags.flags_from_parsed) and compared with the profile's typed values: a difference
is a ddtctl bug (RenderMismatch, exit 70), never a launch. That parse-back is the launch's typed values: no
caller reads the argv again. An argv from outside (a recorded release) becomes a launch through `read_launch`,
the one catalog-aware reader (ddtctl.argv).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ddtctl.argv import Occurrence, ParsedArgv, launch_catalog, parse_server_argv
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


@dataclass(frozen=True, eq=False)
class TypedLaunch:
    """One SGLang server launch, typed: what the launch sets by dest (`values`, typed as SGLang's argparse
    types them), every value it runs with (`get`, SGLang's defaults included), its env and its catalog. The
    argv (`argv()`) is for the wire only: the resolver's request, the agent's Start, `ddtctl render`."""

    parsed: ParsedArgv  # SGLang's parser's reading of the rendered argv: the render's own parse-back
    catalog: Catalog
    env: dict[str, str]
    profile: Profile | None = None  # None: read from outside (a recorded release)

    @property
    def sglang(self) -> str:
        return self.catalog.version

    @property
    def values(self) -> dict[str, Any]:
        """dest -> typed value for the flags the launch sets (model_path included)."""
        return self.parsed.given

    def get(self, name: str, default: Any = None) -> Any:
        """The value SGLang runs with for a dest or flag name (`port`, `--tp-size`, `tp_size`)."""
        return self.parsed.get(name, default)

    def sets(self, name: str) -> bool:
        return name.lstrip("-").replace("-", "_") in self.values

    def flags(self) -> dict[str, Any]:
        """Flag name -> value as written (ParsedArgv.flags): plan's diff compares it with a recorded argv."""
        return self.parsed.flags()

    def argv(self) -> list[str]:
        """The launch as SGLang argv, for the wire."""
        return list(self.parsed.argv)

    def with_values(self, changes: dict[str, str | int]) -> TypedLaunch:
        """The launch with these scalar flags set (deploy's per-node flags, preflight's local model
        directories): each written as render writes it, in place of the launch's own occurrence (else at the
        end), and typed by its flag, without reading an argv again."""
        argv, occs = self.argv(), list(self.parsed.occurrences)
        namespace = dict(self.parsed.namespace)
        for name, value in changes.items():
            spec = self.catalog.get(name)
            if spec is None:
                raise LookupError(f"{name}: not a flag of SGLang {self.sglang}")
            text = str(value)
            tokens = single_tokens(spec.option, text, self.catalog)
            at = [i for i, o in enumerate(occs) if o.spec.dest == spec.dest]
            if len(at) > 1:
                raise ValueError(f"--{spec.name} is given {len(at)} times; set it once")
            new = Occurrence(spec.option, spec, (text,), False)
            if at:
                start = _value_start(argv, occs[at[0]])
                argv[start : start + (1 if "=" in argv[start] else 2)] = tokens
                occs[at[0]] = new
            else:
                argv += tokens
                occs.append(new)
            namespace[spec.dest] = coerce(spec, value)
        return replace(self, parsed=replace(self.parsed, argv=argv, namespace=namespace, occurrences=occs))


def _value_start(argv: list[str], occ: Occurrence) -> int:
    """Where an occurrence of a rendered argv starts (`--flag value` or `--flag=value`)."""
    value = occ.raw[0] if occ.raw else None
    for i, token in enumerate(argv):
        if token == occ.option and i + 1 < len(argv) and argv[i + 1] == value:
            return i
        if token == f"{occ.option}={value}":
            return i
    raise ValueError(f"{occ.option}: not found in the launch's argv")


def typed_launch(profile: Profile, catalog: Catalog | None = None) -> TypedLaunch:
    """The profile as a launch: rendered (`--model-path` first, then the server flags in profile order, with
    the options SGLang's parser knows), parsed back once and compared (RenderMismatch on any difference)."""
    if catalog is None:
        catalog = extended_catalog(profile.sglang)
    groups = launch_groups(profile, catalog)
    argv = [token for group in groups for token in group.tokens]
    parsed = check_round_trip(argv, groups, catalog, profile.model.path)
    return TypedLaunch(parsed, catalog, dict(profile.env), profile)


def render_argv(profile: Profile, catalog: Catalog | None = None) -> list[str]:
    """The profile's launch as SGLang argv (typed_launch, checked by its parse-back)."""
    return typed_launch(profile, catalog).argv()


def read_launch(
    argv: Sequence[str], sglang: str | None = None, env: dict[str, str] | None = None
) -> TypedLaunch:
    """An argv from outside (a recorded release's) as a launch, read by the one catalog-aware reader
    (ddtctl.argv.parse_server_argv with the release's catalog plus the DDTREE payload's flags)."""
    catalog = launch_catalog(sglang)
    return TypedLaunch(parse_server_argv(list(argv), catalog, config=False), catalog, dict(env or {}))


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
) -> ParsedArgv:
    """Parse `argv` back as SGLang would and compare with the typed values it was rendered from: no option
    appears that was not rendered, no token is left unplaced, every value comes back equal and of its type.
    Returns the parse (the launch's typed values)."""
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
    return read
