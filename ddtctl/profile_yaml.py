"""A profile file read safely as YAML with line numbers (before any schema check): a regular file of bounded
size, UTF-8, no tags, anchors, aliases or merge keys, bounded nesting, and the text of every plain scalar that
YAML 1.1 typed (ProfileDocument.plain), so that string values keep what was written.

The ground floor under ddtctl.profile (the loader) and ddtctl.profile_overrides (`--set` values are read as
the file's would be).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from ddtctl.errors import ProfileError
from ddtctl.safeio import read_regular

MAX_PROFILE_BYTES = 1024 * 1024
MAX_NESTING = 32  # profiles nest 3-4 levels; deeper input is refused before Python's recursion limit is near

_Loader: type[yaml.CSafeLoader] | type[yaml.SafeLoader]
try:  # libyaml when present: 5-10x faster
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


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
