"""`--set KEY=VALUE` (validate, dry-run, render): a profile tried as if its file said otherwise, without
editing it: `--set hardware.gpu=H200 --set server.tp-size=2`. KEY is a dotted path into the profile
mapping; VALUE is read as the YAML of that key in the file would be (the profile reader's own rules: `0123`
stays text where a flag takes text, a YAML 1.1 number SGLang reads otherwise is DDT012). The overrides are
applied in order, to the parsed document, before the profile schema, so every check sees them as it sees the
file.

A KEY that names nothing a profile has (a misspelt section, field or SGLang flag) is a one-line usage error
naming it, with the closest name."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddtctl import PINNED_SGLANG
from ddtctl.errors import DdtctlError, UsageError
from ddtctl.profile_model import Hardware, Launch, ModelSpec, Profile
from ddtctl.profile_yaml import parse_profile_text
from ddtctl.schema.extensions import extended_catalog

_SECTIONS = ("hardware", "model", "launch")  # mappings of named fields (ddtctl.profile's models)
_MAPPINGS = ("server", "env")  # mappings of free names: SGLang flags, environment variables
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FLAG_NAME = re.compile(r"^-{0,2}[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Override:
    key: str  # as given ("server.tp_size")
    path: tuple[str, ...]  # ("server", "tp_size")
    text: str  # the value's YAML text

    def __str__(self) -> str:
        return f"{self.key}={self.text}"


def _fields() -> dict[str, list[str]]:
    return {
        "": list(Profile.model_fields),
        "hardware": list(Hardware.model_fields),
        "model": list(ModelSpec.model_fields),
        "launch": list(Launch.model_fields),
    }


def _unknown(key: str, name: str, known: Sequence[str], what: str, listing: str | None = None) -> UsageError:
    """`--set KEY: no WHAT NAME (fix: did you mean ...?)`, else the names it could be (or `listing`)."""
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"did you mean {close[0]!r}?" if close else (listing or f"one of {', '.join(known)}")
    return UsageError(f"--set {key}: no {what} {name!r}", fix=hint)


def _check_path(key: str, path: tuple[str, ...]) -> None:
    """The shape of KEY, without the profile: a profile field, a section's field, a flag or env name."""
    fields = _fields()
    if not all(path):
        raise UsageError(f"--set {key}: an empty part in the key", fix="e.g. --set server.tp-size=2")
    top = path[0]
    if top not in fields[""]:
        if len(path) == 1 and _is_flag(top):  # `--set tp-size=2`: a flag belongs under server.
            raise UsageError(f"--set {key}: no profile key {top!r}", fix=f"did you mean 'server.{top}'?")
        raise _unknown(key, top, fields[""], "profile key")
    if len(path) == 1:
        return
    if top not in _SECTIONS + _MAPPINGS:
        raise UsageError(f"--set {key}: {top} takes a value, not keys", fix=f"--set {top}=VALUE")
    if len(path) > 2:
        raise UsageError(
            f"--set {key}: {'.'.join(path[:2])} takes a value, not keys",
            fix=f"--set {'.'.join(path[:2])}=VALUE (a YAML flow list or mapping for several)",
        )
    name = path[1]
    if top in _SECTIONS and name not in fields[top]:
        raise _unknown(key, name, fields[top], f"{top} key")
    if top == "env" and not _ENV_NAME.match(name):
        raise UsageError(f"--set {key}: {name!r} is not an environment variable name")
    if top == "server" and not _FLAG_NAME.match(name):
        raise UsageError(
            f"--set {key}: {name!r} is not an SGLang flag name", fix="e.g. --set server.tp-size=2"
        )


def _is_flag(name: str) -> bool:
    return bool(_FLAG_NAME.match(name)) and extended_catalog(PINNED_SGLANG).get(name) is not None


def parse_sets(values: Sequence[str] | None) -> list[Override]:
    """`--set KEY=VALUE` options, in order; a UsageError (one line) for one that is not KEY=VALUE or whose
    KEY names no profile key (a flag name is checked against the profile's release when applied)."""
    out = []
    for raw in values or ():
        key, eq, text = raw.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"--set {raw}: expected KEY=VALUE", fix="e.g. --set server.tp-size=2")
        if "\n" in text or "\r" in text:
            raise UsageError(f"--set {key}: the value is one line of YAML")
        path = tuple(key.split("."))
        if path[0] == "server" and len(path) == 2:
            path = ("server", path[1].lstrip("-").replace("_", "-").lower())  # as the reader keys it
        _check_path(key, path)
        out.append(Override(key, path, text))
    return out


def refuse_sets(overrides: Sequence[Override], why: str, fix: str) -> None:
    """A UsageError when --set was given where it cannot apply (a raw argv, --fix)."""
    if overrides:
        raise UsageError(f"--set {overrides[0]}: {why}", fix=fix)


def _server_key(override: Override, data: dict[str, Any]) -> Override:
    """A server flag checked against the profile's SGLang release (with the DDTREE payload's flags); the key
    of the same flag in the file when it spells it otherwise (`tensor-parallel-size` for `tp-size`), so the
    value is replaced, not given twice."""
    version = data.get("sglang", PINNED_SGLANG)
    try:
        catalog = extended_catalog(version if isinstance(version, str) else PINNED_SGLANG)
    except DdtctlError:  # a release without a catalog: validate says so itself
        return override
    spec = catalog.get(override.path[1])
    if spec is None:
        names = [s.name for s in catalog.flags]
        raise _unknown(
            override.key,
            override.path[1],
            names,
            f"SGLang {catalog.version} flag",
            listing=f"`sglang serve --help` lists SGLang {catalog.version}'s flags",
        )
    server = data.get("server")
    for key in server if isinstance(server, dict) else ():
        other = catalog.get(key)
        if other is not None and other.dest == spec.dest:
            return Override(override.key, ("server", key), override.text)
    return override


def _parsed_value(override: Override) -> tuple[Any, dict[str, tuple[Any, Any, str]]]:
    """The value as the profile reader reads it at that key (so its typing rules apply), and the reader's
    record of its plain scalars' texts (ProfileDocument.plain)."""
    indent = ""
    lines = []
    for part in override.path[:-1]:
        lines.append(f"{indent}{part}:")
        indent += "  "
    lines.append(f"{indent}{override.path[-1]}: {override.text}")
    try:
        doc = parse_profile_text("\n".join(lines) + "\n", f"--set {override.key}")
    except DdtctlError as err:
        raise UsageError(f"--set {override.key}: {err.message}", fix="quote the value") from None
    value: Any = doc.data
    for part in override.path:
        if not isinstance(value, dict) or part not in value:  # a `#` comment ate the value, or a YAML oddity
            raise UsageError(f"--set {override.key}: no value read", fix="quote the value")
        value = value[part]
    return value, doc.plain


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((prefix + ".", prefix + "["))


def apply_overrides(doc: Any, overrides: Sequence[Override]) -> None:
    """Apply `overrides` to a ProfileDocument in place (its data, and the reader's records: a key the file has
    keeps its line, where a finding about it points; what the file had under it goes)."""
    for override in overrides:
        if override.path[0] == "server" and len(override.path) == 2:
            override = _server_key(override, doc.data)
        value, plain = _parsed_value(override)
        container = doc.data
        for i, part in enumerate(override.path[:-1]):
            if container.get(part) is None:
                container[part] = {}
            if not isinstance(container[part], dict):
                where = ".".join(override.path[: i + 1])
                raise UsageError(f"--set {override.key}: {where} is not a mapping in {doc.source}")
            container = container[part]
        leaf = override.path[-1]
        container[leaf] = value
        prefix = ".".join(override.path)
        for record in (doc.lines, doc.key_columns, doc.plain):  # the key keeps its line, its old value goes
            for path in [p for p in record if _under(p, prefix) and (record is doc.plain or p != prefix)]:
                del record[path]
        for path, (owner, key, text) in plain.items():
            doc.plain[path] = (container, leaf, text) if path == prefix else (owner, key, text)
