"""Comment-preserving profile edits through ruamel.yaml's round-trip mode: `validate --fix`, `migrate`,
`tune --write`. ruamel.yaml is imported here only, inside the functions, so `validate` never loads it.

ruamel decides what an edit looks like (a value set, a key renamed, added or removed, flow or block style),
but its dump also normalises what nobody asked it to touch: indentation it guessed differently, spacing inside
flow collections, a multi-line flow value. So the file is not written as ruamel dumps it: ruamel's dump of the
unedited document (`baseline`) against its dump of the edited one gives the edit as line hunks, and those are
laid onto the original text where the baseline agrees with it. Every line outside the edited keys stays
byte-identical; an edit that would land on a line ruamel reformats is refused, and so is one that would drop a
comment line.
"""

from __future__ import annotations

import difflib
import io
from typing import Any

# Plain scalars that YAML 1.1 (PyYAML reads profiles) takes for a non-string; ruamel follows YAML 1.2.
_YAML11_RESERVED = {"true", "false", "yes", "no", "null", "on", "off", "y", "n", "~"}
GAP = 2  # spaces between an edited value and its end-of-line comment (`validate --fix`)


class EditRefused(Exception):
    """The edit cannot be made without touching what it should not; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RoundTrip:
    """A YAML text loaded for editing: change `data` (a ruamel CommentedMap) with the helpers below, then take
    `result()`. The text is edited with "\\n" line breaks."""

    def __init__(self, text: str, source: str = "profile") -> None:
        from ruamel.yaml import YAML
        from ruamel.yaml.error import YAMLError

        self.text = text if text.endswith("\n") else text + "\n"
        self._final_newline = text.endswith("\n")
        self.yaml = YAML(typ="rt")
        self.yaml.preserve_quotes = True
        self.yaml.width = 1 << 30  # never fold a long line
        try:
            self.data = self.yaml.load(self.text)
        except YAMLError as err:
            raise EditRefused(f"ruamel.yaml cannot read {source} for editing ({_first_line(err)})") from err
        if not _is_mapping(self.data):
            raise EditRefused(f"{source} is not a YAML mapping")
        self._set_indent()
        self.baseline = self._dump()
        self._lines = self.text.splitlines(keepends=True)

    def _set_indent(self) -> None:
        """ruamel has one indentation for the whole file: take the `server:` block's, the part edited."""
        from ruamel.yaml.util import load_yaml_guess_indent

        indent, seq_offset = 2, 0
        try:
            _, guessed, guessed_offset = load_yaml_guess_indent(self.text)
            indent, seq_offset = guessed or indent, guessed_offset or seq_offset
        except Exception:  # noqa: BLE001 - a guess only; the baseline comparison catches a wrong one
            pass
        server = self.data.get("server")
        if _is_mapping(server) and not server.fa.flow_style() and len(server):
            indent = server.lc.key(next(iter(server)))[1]
        self.yaml.indent(mapping=indent, sequence=indent + seq_offset, offset=seq_offset)

    def _dump(self) -> str:
        out = io.StringIO()
        self.yaml.dump(self.data, out)
        return out.getvalue()

    def original_line(self, index: int) -> str:
        return self._lines[index] if 0 <= index < len(self._lines) else ""

    def rendered(self, value: Any) -> str:
        """How ruamel writes `value` as a mapping value (one line)."""
        out = io.StringIO()
        self.yaml.dump({"k": value}, out)
        return out.getvalue().split("\n", 1)[0][len("k: ") :]

    def result(self) -> str:
        """The original text with the edits made to `data`, and nothing else changed."""
        edited = _splice(self.text, self.baseline, self._dump())
        missing = _lost_comments(self.text, edited)
        if missing:
            raise EditRefused(f"the edit would drop the comment {missing!r}")
        return edited if self._final_newline else edited[:-1]


def _first_line(err: Exception) -> str:
    return " ".join(str(err).split())[:160]


def _is_mapping(node: Any) -> bool:
    from ruamel.yaml.comments import CommentedMap

    return isinstance(node, CommentedMap)


def _splice(original: str, baseline: str, edited: str) -> str:
    """Lay the hunks baseline -> edited onto `original` where the baseline agrees with it."""
    ours, base, theirs = (s.splitlines(keepends=True) for s in (original, baseline, edited))
    agreeing = difflib.SequenceMatcher(None, base, ours, autojunk=False).get_opcodes()
    agree = [op for op in agreeing if op[0] == "equal"]

    def in_original(pos: int) -> int | None:
        if pos == 0:
            return 0
        if pos == len(base):
            return len(ours)
        return next((j1 + pos - i1 for _, i1, i2, j1, _ in agree if i1 <= pos <= i2), None)

    out = list(ours)
    hunks = difflib.SequenceMatcher(None, base, theirs, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in reversed(hunks):
        if tag == "equal":
            continue
        start, end = in_original(i1), in_original(i2)
        # a hunk whose ends both sit where the baseline agrees with the original replaces what lies between,
        # reformatted or not (a multi-line flow value set to a scalar); one that ends inside a reformatted
        # stretch would splice ruamel's formatting into lines nobody edits
        if start is None or end is None or end < start:
            near = (start if start is not None else end or 0) + 1
            raise EditRefused(f"ruamel.yaml would reformat the lines around line {near}")
        out[start:end] = theirs[j1:j2]
    return "".join(out)


def _comment_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


def _lost_comments(before: str, after: str) -> str | None:
    """A full-line comment of `before` that `after` no longer has (end-of-line comments go with their key)."""
    remaining = _comment_lines(after)
    for line in _comment_lines(before):
        if line in remaining:
            remaining.remove(line)
        else:
            return line
    return None


# -- scalars -------------------------------------------------------------------------------------------------
def scalar(value: Any, like: Any = None) -> Any:
    """`value` as ruamel should write it: a string keeps the quote style of the value it replaces (`like`),
    and is quoted when PyYAML would not read it back plain as the same string; a list is a flow list
    (`[8, 16]`) unless it replaces a block one."""
    from ruamel.yaml.comments import CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

    if isinstance(value, list):
        seq = CommentedSeq(scalar(item) for item in value)
        block = isinstance(like, CommentedSeq) and not like.fa.flow_style()
        seq.fa.set_block_style() if block else seq.fa.set_flow_style()
        return seq
    if not isinstance(value, str):
        return value
    if isinstance(like, (SingleQuotedScalarString, DoubleQuotedScalarString)):
        return type(like)(value)
    return value if _plain_reads_back(value) else DoubleQuotedScalarString(value)


def _plain_reads_back(text: str) -> bool:
    import yaml

    if text.lower() in _YAML11_RESERVED:
        return False
    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


# -- mapping edits -------------------------------------------------------------------------------------------
def _eol_token(mapping: Any, key: Any) -> Any:
    """The comment token after `key`'s value: its end-of-line comment, then the comment and blank lines that
    follow it (ruamel keeps them together)."""
    entry = mapping.ca.items.get(key)
    return entry[2] if entry and len(entry) > 2 else None


def _take_following(mapping: Any, key: Any) -> str:
    """Remove and return the comment/blank lines that follow `key`'s line (its end-of-line comment stays)."""
    token = _eol_token(mapping, key)
    if token is None or "\n" not in token.value:
        return ""
    eol, following = token.value.split("\n", 1)
    if not following:
        return ""
    if eol:
        token.value = eol + "\n"
    else:
        mapping.ca.items[key][2] = None
    return following


def _give_following(mapping: Any, key: Any, following: str) -> None:
    """Put comment/blank lines after `key`'s line."""
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    if not following:
        return
    token = _eol_token(mapping, key)
    if token is not None:
        token.value = token.value + following
        return
    entry = mapping.ca.items.setdefault(key, [None, None, None, None])
    entry[2] = CommentToken("\n" + following, CommentMark(0), None)


def find_key(mapping: Any, canonical: str, canon: Any) -> Any:
    """The key of `mapping` whose canon(key) is `canonical` (None when absent)."""
    return next((k for k in mapping if isinstance(k, str) and canon(k) == canonical), None)


def set_value(doc: RoundTrip, mapping: Any, key: Any, value: Any, *, gap: int | None = GAP) -> None:
    """Set an existing key's value; its end-of-line comment follows `gap` spaces after the new value
    (None: the gap the user left)."""
    old = mapping[key]
    mapping[key] = scalar(value, like=old)
    token = _eol_token(mapping, key)
    if token is None or token.value.startswith("\n") or key not in mapping.lc.data:
        return
    line, col = mapping.lc.value(key)
    if gap is None:
        old_text = doc.original_line(line)[col : token.column].rstrip()
        gap = max(1, token.column - col - len(old_text))
    token.column = col + len(doc.rendered(mapping[key])) + gap


def rename_key(mapping: Any, old: Any, new: str) -> None:
    """Rename a key in place: same position, same value, its comments kept (the end-of-line one keeps its
    gap)."""
    position = list(mapping).index(old)
    comments = mapping.ca.items.pop(old, None)
    value = mapping.pop(old)
    mapping.insert(position, new, value)
    if comments is not None:
        mapping.ca.items[new] = comments
    if old in mapping.lc.data:
        kline, kcol, vline, vcol = mapping.lc.data.pop(old)
        shift = len(new) - len(old)
        mapping.lc.data[new] = [kline, kcol, vline, vcol + shift]
        token = _eol_token(mapping, new)
        if token is not None and not token.value.startswith("\n"):
            token.column = token.column + shift


def add_key(mapping: Any, key: str, value: Any) -> None:
    """Append a key right after the mapping's last entry (the comment lines that closed the mapping stay
    below it)."""
    last = next(reversed(mapping), None) if len(mapping) else None
    following = _take_following(mapping, last) if last is not None else ""
    mapping[key] = scalar(value)
    _give_following(mapping, key, following)


def delete_key(mapping: Any, key: Any) -> None:
    """Remove a key with its value and end-of-line comment; the comment lines below it stay where they
    were."""
    keys = list(mapping)
    position = keys.index(key)
    following = _take_following(mapping, key)
    mapping.ca.items.pop(key, None)
    del mapping[key]
    if following and position > 0:
        _give_following(mapping, keys[position - 1], following)
    elif following:
        _give_before_first(mapping, following)


def _give_before_first(mapping: Any, following: str) -> None:
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    comment = mapping.ca.comment
    if comment and comment[0] is not None:
        comment[0].value = comment[0].value + following
    else:
        mapping.ca.comment = [CommentToken("\n" + following, CommentMark(0), None), None]
