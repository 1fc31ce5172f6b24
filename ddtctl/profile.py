"""Launch profiles loaded: the file read (ddtctl/profile_yaml.py), `--set` applied
(ddtctl/profile_overrides.py), string values given their text as written, and the result checked against the
model (ddtctl/profile_model.py).

A profile describes one SGLang server launch. `server:` holds SGLang flags by name (dashed or underscored);
they are checked against the flag catalog of the profile's SGLang release by `ddtctl.validate`, not here.
"""

from __future__ import annotations

import glob
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

from ddtctl import PINNED_SGLANG
from ddtctl.errors import ProfileError
from ddtctl.flag_typing import YamlNumberText
from ddtctl.profile_model import Hardware, IgnoreEntry, Launch, ModelSpec, Profile
from ddtctl.profile_overrides import apply_overrides
from ddtctl.profile_yaml import MAX_PROFILE_BYTES as MAX_PROFILE_BYTES
from ddtctl.profile_yaml import ProfileDocument, read_profile_document
from ddtctl.profile_yaml import canonical_flag_key as canonical_flag_key
from ddtctl.profile_yaml import decode_profile as decode_profile
from ddtctl.profile_yaml import parse_profile_text as parse_profile_text
from ddtctl.safeio import glob_paths
from ddtctl.schema.catalog import Catalog
from ddtctl.schema.extensions import extended_catalog

PROFILE_SUFFIXES = (".yaml", ".yml")


@dataclass
class LoadedProfile:
    source: str
    profile: Profile
    lines: dict[str, int] = field(default_factory=dict)
    text: str = ""

    def line_of(self, *keys: str) -> int | None:
        return line_of(self.lines, *keys)


def line_of(lines: dict[str, int], *keys: str) -> int | None:
    for key in keys:
        if key in lines:
            return lines[key]
    return None


# Values that are text whatever YAML 1.1 makes of them: the profile's own string fields and the environment.
_STRING_FIELDS = re.compile(
    r"^(name|description|sglang|host|hosts\[\d+\]|hardware\.gpu|model\.(path|architecture)|env\.[^.\[]+"
    r"|launch\.launcher\[\d+\]|ignore\[\d+\]\.(rule|reason))$"
)
_SERVER_VALUE = re.compile(r"^server\.([^.\[]+)(\[\d+\])?$")  # a flag's value, or an item of its list


def _server_catalog(data: dict[str, Any]) -> Any:
    version = data.get("sglang", PINNED_SGLANG)
    try:
        return extended_catalog(version) if isinstance(version, str) else None
    except Exception:  # noqa: BLE001 - an unknown release is reported by validate itself
        return None


def _numbers_differ(kind: str, text: str, value: Any) -> bool:
    """Whether argparse's int / float reads `text` otherwise than YAML 1.1 read it as `value` (`0123`: 123
    against 83; `0x1F`, `1:20`, `0b11`: no number at all to argparse)."""
    if isinstance(value, bool) or not isinstance(value, int if kind == "int" else (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False  # .inf / .nan: the flag's domain refuses them
    try:
        return (int if kind == "int" else float)(text.strip()) != value
    except ValueError:
        return True


def _as_written(doc: ProfileDocument) -> None:
    """Give every string-typed value the text written in the file, not YAML 1.1's reading of it: the
    profile's string fields, `env:`, and the flags whose argparse type is str (the release's catalog);
    a numeric flag whose text argparse reads otherwise than YAML gets a YamlNumberText (DDT012)."""
    catalog = _server_catalog(doc.data) if any(p.startswith("server.") for p in doc.plain) else None
    for path, (container, key, text) in doc.plain.items():
        if _STRING_FIELDS.match(path):
            container[key] = text
            continue
        match = _SERVER_VALUE.match(path)
        spec = catalog.get(match.group(1)) if match and catalog is not None else None
        if spec is None or Catalog.is_boolean_switch(spec):
            continue
        value = container[key]
        if spec.type == "str":
            container[key] = text
        elif spec.type in ("int", "float") and _numbers_differ(spec.type, text, value):
            container[key] = YamlNumberText(text, value)


def _duplicate_hosts(profile: Profile, lines: dict[str, int]) -> list[tuple[str, str, int | None]]:
    seen: dict[str, int] = {}
    errors = []
    for i, host in enumerate(profile.hosts or []):
        if host in seen:
            errors.append(
                (
                    f"hosts[{i}]",
                    f"host {host!r} is listed twice (first as hosts[{seen[host]}])",
                    lines.get(f"hosts[{i}]"),
                )
            )
        seen.setdefault(host, i)
    return errors


def build_profile(doc: ProfileDocument) -> tuple[Profile | None, list[tuple[str, str, int | None]]]:
    """The profile model, or the schema errors as (location, message, line)."""
    _as_written(doc)
    try:
        profile = Profile.model_validate(doc.data)
    except ValidationError as err:
        errors = []
        for item in err.errors(include_url=False):
            loc = ".".join(str(p) for p in item["loc"])
            line = _nearest_line(doc.lines, loc)
            msg = item["msg"]
            if item["type"] == "extra_forbidden":
                msg = "unknown key" + _suggest_top_level(loc)
            elif item["type"] == "missing":
                msg = "required key is missing"
            elif item["type"] == "value_error":
                msg = msg.removeprefix("Value error, ")
            errors.append((loc, msg, line))
        return None, errors
    duplicates = _duplicate_hosts(profile, doc.lines)
    return (None, duplicates) if duplicates else (profile, [])


def _suggest_top_level(loc: str) -> str:
    import difflib

    parent, _, key = loc.rpartition(".")
    sections: dict[str, type[BaseModel]] = {
        "": Profile,
        "hardware": Hardware,
        "model": ModelSpec,
        "launch": Launch,
    }
    fields = sections.get(parent)
    if fields is None and parent.startswith("ignore."):
        fields = IgnoreEntry
    if fields is None:
        return ""
    close = difflib.get_close_matches(key, list(fields.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(fields.model_fields)})"


def _nearest_line(lines: dict[str, int], loc: str) -> int | None:
    loc = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", loc)  # pydantic's `hosts.0` is `hosts[0]` in the line map
    while loc:
        if loc in lines:
            return lines[loc]
        if loc.endswith("]"):  # a list item: the line of its first key, if it is a mapping
            inside = [line for key, line in lines.items() if key.startswith(loc + ".")]
            if inside:
                return min(inside)
        parent = loc.rpartition(".")[0] if "." in loc else re.sub(r"\[\d+\]$", "", loc)
        if parent == loc:
            break
        loc = parent
    return None


def load_profile(path: str | os.PathLike[str], overrides: Sequence[Any] = ()) -> LoadedProfile:
    """Read and schema-check a profile; ProfileError (one line, file:line) on any problem. `overrides`: the
    `--set KEY=VALUE` options (ddtctl.profile_overrides), applied before the schema."""
    doc = read_profile_document(path)
    if overrides:
        apply_overrides(doc, overrides)
    return loaded_from_document(doc)


def loaded_from_document(doc: ProfileDocument) -> LoadedProfile:
    """A profile document already in memory (parsed from text, as `ddtctl tune` builds each point's),
    schema-checked as load_profile checks a file; ProfileError on any problem."""
    profile, errors = build_profile(doc)
    if profile is None:
        loc, msg, line = errors[0]
        where = f"{doc.source}:{line}" if line else doc.source
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ProfileError(f"{loc}: {msg}{more}", where=where, fix=f"run `ddtctl validate {doc.source}`")
    return LoadedProfile(source=doc.source, profile=profile, lines=doc.lines, text=doc.text)


def is_profile_file(path: Path) -> bool:
    return path.suffix in PROFILE_SUFFIXES and not path.name.startswith(".")


def discover_profiles(paths: list[str]) -> list[Path]:
    """Files, directories (recursively, *.yaml / *.yml) and globs -> profile files, in a stable order."""
    found: list[Path] = []
    for raw in paths:
        matches = glob_paths(raw) if glob.has_magic(raw) else [raw]  # never follows a symlink loop
        if not matches:
            raise ProfileError("no file matches this pattern", where=raw)
        for item in matches:
            p = Path(item)
            if p.is_dir():
                inside = sorted(
                    q
                    for q in p.rglob("*")
                    if q.is_file()
                    and is_profile_file(q)
                    and not any(part.startswith(".") for part in q.relative_to(p).parts)
                )
                if not inside:
                    raise ProfileError("directory holds no profiles (*.yaml, *.yml)", where=str(p))
                found.extend(inside)
            elif p.exists() or p.is_symlink():  # a dangling or looping link: reading it says which
                found.append(p)
            else:
                raise ProfileError("no such file", where=str(p))
    seen: set[Path] = set()
    unique = []
    for p in found:
        try:
            key = p.resolve()
        except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
            key = p.absolute()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique
