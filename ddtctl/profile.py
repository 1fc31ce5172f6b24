"""Launch profiles: reading YAML safely with line numbers, and the profile model.

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

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ddtctl import PINNED_SGLANG
from ddtctl.errors import ProfileError

MAX_PROFILE_BYTES = 1024 * 1024
MAX_NESTING = 32  # profiles nest 3-4 levels; deeper input is refused before Python's recursion limit is near
PROFILE_SUFFIXES = (".yaml", ".yml")

_Loader: type[yaml.CSafeLoader] | type[yaml.SafeLoader]
try:  # libyaml when present: 5-10x faster
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Hardware(_Strict):
    gpu: str = Field(description="GPU product (H200, B200, RTX_PRO_6000_BLACKWELL, ...) or generation (sm90)")
    count: int = Field(default=1, ge=1, le=1024, description="GPUs per host")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        from ddtctl.errors import DdtctlError
        from ddtctl.schema.gpus import resolve_gpu

        try:
            resolve_gpu(value)
        except DdtctlError as err:
            raise ValueError(err.one_line()) from None
        return value


class ModelSpec(_Strict):
    path: str = Field(min_length=1, description="Model directory on the target host (or a hub id)")
    architecture: str | None = Field(
        default=None,
        description="config.json architectures[0]; optional when config.json is readable locally",
    )


class Launch(_Strict):
    health_timeout_s: int = Field(
        default=1800, ge=10, le=86400, description="Seconds to wait until /health is ok"
    )
    launcher: list[str] | None = Field(
        default=None, description="Command that starts the server (default: python -m sglang.launch_server)"
    )


class IgnoreEntry(_Strict):
    """A finding the profile suppresses on purpose: `{rule: DDT114, reason: "why"}` (`ddtctl validate` counts
    it and lists it in JSON; errors SGLang itself rejects cannot be ignored)."""

    rule: str = Field(min_length=1, max_length=16, description="Rule id to ignore, e.g. DDT114")
    reason: str = Field(
        min_length=1, max_length=500, description="Why this finding does not apply (required)"
    )

    @model_validator(mode="before")
    @classmethod
    def _not_bare(cls, data: Any) -> Any:
        if isinstance(data, str):
            raise ValueError(
                f"a bare rule id ({data[:16]!r}) is not an ignore entry: write "
                f'{{rule: {data[:16]}, reason: "why it does not apply"}}'
            )
        return data

    @field_validator("reason")
    @classmethod
    def _reason_says_something(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("reason must say why the rule does not apply")
        return value


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class Profile(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Profile name (letters, digits, . _ -)")
    description: str | None = None
    sglang: str = Field(
        default=PINNED_SGLANG, pattern=r"^\d+\.\d+\.\d+$", description="SGLang release targeted"
    )
    host: str | None = Field(default=None, description="Inventory host name (hosts.yaml) used by deploy")
    hosts: list[str] | None = Field(
        default=None, min_length=1, description="Several hosts: one multi-node server"
    )
    hardware: Hardware | None = None
    model: ModelSpec
    server: dict[str, Any] = Field(
        default_factory=dict, description="SGLang flags by name (dashed or underscored)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the server process")
    launch: Launch = Field(default_factory=Launch)
    ignore: list[IgnoreEntry] = Field(
        default_factory=list,
        description="Findings suppressed on purpose, each with its reason: [{rule: DDT114, reason: ...}]",
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"invalid environment variable name {key!r}")
        return value


@dataclass
class ProfileDocument:
    """A profile file read and parsed as YAML, before schema checks."""

    source: str
    data: dict[str, Any]
    lines: dict[str, int]
    text: str
    raw: bytes | None = (
        None  # the file's bytes as read (what `--fix` / `migrate --write` must still find there)
    )
    # key path ("server.tp-size") -> (line, 1-based column) of that key (findings point at their key's column)
    key_columns: dict[str, tuple[int, int]] = field(default_factory=dict)
    # path -> (container, key, text) of each plain scalar YAML 1.1 typed as a bool, number or date: its text
    # as written, for the string-typed values that must get it (`revision: 0123` is "0123", not 83)
    plain: dict[str, tuple[Any, Any, str]] = field(default_factory=dict)


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


def canonical_flag_key(key: str) -> str:
    """`--tp_size`, `tp_size`, `TP-Size` -> `tp-size`."""
    return key.strip().lstrip("-").replace("_", "-").lower()


_STR_TAG = "tag:yaml.org,2002:str"  # a plain scalar's style is None (PyYAML) or "" (libyaml)
_COLLECTION_TAGS: dict[type, str] = {
    yaml.MappingNode: "tag:yaml.org,2002:map",
    yaml.SequenceNode: "tag:yaml.org,2002:seq",
}


def _refuse_tag(node: yaml.Node, loader: Any, source: str) -> None:
    """An explicit YAML tag (`!!binary`, `!!python/...`, `!!float 1`, `!custom`) is refused: a profile holds
    plain text, numbers, booleans, lists and mappings; `!!str` (as quoting) is the one tag allowed."""
    if isinstance(node, yaml.ScalarNode):
        implicit = loader.resolve(yaml.ScalarNode, node.value, (True, False)) if not node.style else _STR_TAG
        if node.tag in (implicit, _STR_TAG):
            return
    elif node.tag == _COLLECTION_TAGS.get(type(node)):
        return
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    raise ProfileError(
        f"YAML tag {tag[:60]} is not allowed in profiles",
        where=f"{source}:{node.start_mark.line + 1}",
        fix="remove the tag and write the value as plain text (quote it to keep it a string)",
    )


def _note_plain(plain: dict | None, path: str, container: Any, key: Any, node: yaml.Node, value: Any) -> None:
    """Remember a plain scalar's text where YAML 1.1 typed it (a bool, number or date; not null)."""
    if (
        plain is not None
        and isinstance(node, yaml.ScalarNode)
        and not node.style
        and value is not None
        and not isinstance(value, str)
    ):
        plain[path] = (container, key, node.value)


def _build(
    node: yaml.Node,
    path: str,
    loader: Any,
    lines: dict[str, int],
    source: str,
    depth: int = 0,
    key_columns: dict[str, tuple[int, int]] | None = None,
    plain: dict[str, tuple[Any, Any, str]] | None = None,
) -> Any:
    if depth > MAX_NESTING:
        raise ProfileError(
            f"nested more than {MAX_NESTING} levels deep",
            where=f"{source}:{node.start_mark.line + 1}",
            fix="profiles need only a few levels (server: flag: value)",
        )
    if node.tag != _STR_TAG:
        _refuse_tag(node, loader, source)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ProfileError(
                    "YAML merge keys (<<) are not supported in profiles",
                    where=f"{source}:{key_node.start_mark.line + 1}",
                    fix="write the keys out",
                )
            if not isinstance(key_node, yaml.ScalarNode):
                raise ProfileError(
                    "mapping keys must be plain names", where=f"{source}:{key_node.start_mark.line + 1}"
                )
            if key_node.tag != _STR_TAG:
                _refuse_tag(key_node, loader, source)
            key = str(_construct(loader, key_node, source))
            norm = canonical_flag_key(key) if path == "server" else key
            child = f"{path}.{norm}" if path else norm
            if norm in out:
                raise ProfileError(
                    f"duplicate key {key!r} (first at line {lines.get(child, '?')})",
                    where=f"{source}:{key_node.start_mark.line + 1}",
                    fix="keep one of them",
                )
            lines[child] = key_node.start_mark.line + 1
            if key_columns is not None:
                key_columns[child] = (lines[child], key_node.start_mark.column + 1)
            out[norm] = _build(value_node, child, loader, lines, source, depth + 1, key_columns, plain)
            _note_plain(plain, child, out, norm, value_node, out[norm])
        return out
    if isinstance(node, yaml.SequenceNode):
        items: list[Any] = []
        for i, item in enumerate(node.value):
            lines[f"{path}[{i}]"] = item.start_mark.line + 1
            items.append(_build(item, f"{path}[{i}]", loader, lines, source, depth + 1, key_columns, plain))
            _note_plain(plain, f"{path}[{i}]", items, i, item, items[i])
        return items
    return _construct(loader, node, source)


MAX_INT_DIGITS = 64  # no flag takes a number this long; Python refuses to convert 4300+ digits at all


def _construct(loader: Any, node: yaml.Node, source: str) -> Any:
    """A scalar's value; a number too long to be one (5000 digits) is a one-line error, not a ValueError."""
    if node.tag == "tag:yaml.org,2002:int" and isinstance(node.value, str):
        digits = sum(ch.isdigit() for ch in node.value)
        if digits > MAX_INT_DIGITS:
            raise ProfileError(
                f"integer with {digits} digits is out of range",
                where=f"{source}:{node.start_mark.line + 1}",
                fix="write a real value",
            )
    try:
        return loader.construct_object(node)
    except (ValueError, OverflowError) as err:
        raise ProfileError(
            f"invalid value: {str(err)[:120]}", where=f"{source}:{node.start_mark.line + 1}"
        ) from None


def _refuse_aliases(text: str, source: str) -> None:
    """Anchors and aliases are how YAML bombs expand; profiles never need them."""
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            line = event.start_mark.line + 1 if event.start_mark else "?"  # the parser marks every event
            raise ProfileError(
                "YAML anchors/aliases (&, *) are not allowed in profiles",
                where=f"{source}:{line}",
                fix="write the values out",
            )


def parse_profile_text(text: str, source: str) -> ProfileDocument:
    if "&" in text or "*" in text:
        _refuse_aliases(text, source)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ProfileError("the file is empty", where=source, fix="start from a profile in profiles/")
        if not isinstance(node, yaml.MappingNode):
            raise ProfileError(
                "a profile must be a YAML mapping (name:, model:, server: ...)",
                where=f"{source}:{node.start_mark.line + 1}",
            )
        lines: dict[str, int] = {}
        key_columns: dict[str, tuple[int, int]] = {}
        plain: dict[str, tuple[Any, Any, str]] = {}
        data = _build(node, "", loader, lines, source, key_columns=key_columns, plain=plain)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ProfileError(f"invalid YAML: {err.problem or err.context}", where=where) from None
    except yaml.YAMLError as err:
        raise ProfileError(f"invalid YAML: {err}", where=source) from None
    finally:
        loader.dispose()
    return ProfileDocument(
        source=source, data=data, lines=lines, text=text, key_columns=key_columns, plain=plain
    )


def read_profile_document(path: str | os.PathLike[str]) -> ProfileDocument:
    """Read and parse a profile file: a regular file of at most MAX_PROFILE_BYTES (a FIFO or /dev/zero is
    refused, never read), UTF-8, YAML; ProfileError (one line, file:line) otherwise."""
    from ddtctl.safeio import read_regular

    source = str(path)
    raw = read_regular(path, MAX_PROFILE_BYTES, error=ProfileError, what="profile")
    doc = parse_profile_text(decode_profile(raw, source), source)
    doc.raw = raw
    return doc


def decode_profile(raw: bytes, source: str) -> str:
    """A profile file's bytes as text: UTF-8, or a ProfileError naming the line of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ProfileError(
            f"not UTF-8 (byte 0x{raw[err.start]:02x})", where=f"{source}:{line}", fix="save the file as UTF-8"
        ) from None


# Values that are text whatever YAML 1.1 makes of them: the profile's own string fields and the environment.
_STRING_FIELDS = re.compile(
    r"^(name|description|sglang|host|hosts\[\d+\]|hardware\.gpu|model\.(path|architecture)|env\.[^.\[]+"
    r"|launch\.launcher\[\d+\]|ignore\[\d+\]\.(rule|reason))$"
)
_SERVER_VALUE = re.compile(r"^server\.([^.\[]+)(\[\d+\])?$")  # a flag's value, or an item of its list


def _server_catalog(data: dict[str, Any]) -> Any:
    from ddtctl.schema.extensions import extended_catalog

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
    from ddtctl.flags import YamlNumberText
    from ddtctl.schema.catalog import Catalog

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
        from ddtctl.profile_overrides import apply_overrides

        apply_overrides(doc, overrides)
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
        from ddtctl.safeio import glob_paths

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
