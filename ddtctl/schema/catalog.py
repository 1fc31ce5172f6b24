"""The flag catalog: every argparse flag of an SGLang release, read from the JSON shipped in catalogs/.

The JSON is generated from the release's real parser by tools/gen_catalog.py (see argparse_dump.py). This
module is on the `ddtctl validate` path: stdlib json + dataclasses only, loaded once per process and cached.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddtctl.errors import UsageError
from ddtctl.safeio import read_regular

CATALOG_DIR = Path(__file__).resolve().parent / "catalogs"
_PREFIX = "sglang-"
_VERSION = re.compile(r"\d{1,4}\.\d{1,4}\.\d{1,4}")
SUGGEST_MAX_KEY = 100  # longer than any SGLang flag name: no did-you-mean search
SUGGEST_PER_INPUT = 25  # unknown keys of one profile / argv / migration that get a did-you-mean search

# Actions that take no value on the command line (a bare `--flag`).
_SWITCH_ACTIONS = frozenset(
    {
        "store_true",
        "store_false",
        "store_const",
        "append_const",
        "count",
        "boolean_optional",
        "deprecated_store_true",
    }
)


@dataclass(frozen=True)
class FlagSpec:
    name: str  # primary long option without "--", e.g. "tp-size"
    option_strings: tuple[str, ...]  # ("--tp-size", "--tensor-parallel-size")
    dest: str
    action: str  # "store" | "store_true" | "store_false" | "append" | "deprecated_alias" | ...
    type: str | None  # "int" | "float" | "str" | "bool" | "json" | None
    nargs: Any  # None | "?" | "*" | "+" | int
    default: Any
    choices: tuple[Any, ...] | None
    required: bool
    help: str
    deprecated: bool
    alias_of: str | None  # name of the live flag a deprecated flag stands for
    # Extras (not in every entry): the argparse converter when it is more than int/float/str (e.g.
    # "common.human_readable_int"), the replacement a deprecated flag names, the value a const action stores.
    converter: str | None = None
    replacement: str | None = None
    const: Any = None

    def __hash__(self) -> int:  # defaults may be lists; identity of a flag is its options and dest
        return hash((self.option_strings, self.dest, self.action))

    @property
    def option(self) -> str:
        """The primary option as written on a command line, e.g. "--tp-size"."""
        has_long = any(o.startswith("--") for o in self.option_strings)
        return f"--{self.name}" if has_long else self.option_strings[0]

    @property
    def takes_value(self) -> bool:
        return self.nargs != 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FlagSpec:
        choices = d.get("choices")
        return cls(
            name=d["name"],
            option_strings=tuple(d["option_strings"]),
            dest=d["dest"],
            action=d["action"],
            type=d.get("type"),
            nargs=d.get("nargs"),
            default=d.get("default"),
            choices=None if choices is None else tuple(choices),
            required=bool(d.get("required", False)),
            help=d.get("help") or "",
            deprecated=bool(d.get("deprecated", False)),
            alias_of=d.get("alias_of"),
            converter=d.get("converter"),
            replacement=d.get("replacement"),
            const=d.get("const"),
        )


def _norm(key: str) -> str:
    """ "--tp_size" / "tp_size" / "tp-size" -> "tp-size"."""
    return key.strip().lstrip("-").replace("_", "-")


class Catalog:
    def __init__(
        self,
        version: str,
        flags: tuple[FlagSpec, ...],
        *,
        generator: str | None = None,
        source: str | None = None,
    ):
        self.version = version
        self.flags = flags
        self.generator = generator
        self.source = source
        by_option: dict[str, FlagSpec] = {}
        by_dest: dict[str, list[FlagSpec]] = {}
        for spec in flags:
            for opt in spec.option_strings:
                by_option.setdefault(_norm(opt), spec)
            by_dest.setdefault(spec.dest, []).append(spec)
        self._by_option = by_option
        self._by_dest = by_dest
        self._by_name = {spec.name: spec for spec in flags}

    def __repr__(self) -> str:
        return f"Catalog(sglang={self.version!r}, flags={len(self.flags)})"

    def __len__(self) -> int:
        return len(self.flags)

    def __iter__(self):
        return iter(self.flags)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def names(self) -> list[str]:
        return [spec.name for spec in self.flags]

    def get(self, key: str) -> FlagSpec | None:
        """The flag for "tp-size", "tp_size", "--tp-size" or any alias option ("--tensor-parallel-size").

        A deprecated alias returns its own entry (see `canonical` for the flag it stands for). A dest that no
        option spells (e.g. a field renamed by `dest=`) resolves to its live flag.
        """
        if not key:
            return None
        spec = self._by_option.get(_norm(key))
        if spec is not None:
            return spec
        specs = self._by_dest.get(key.strip().lstrip("-").replace("-", "_"))
        if specs:
            live = [s for s in specs if not s.deprecated]
            return (live or specs)[0]
        return None

    def get_option(self, key: str) -> FlagSpec | None:
        """Strict lookup: the flag whose option strings spell `key` (no dest fallback)."""
        return self._by_option.get(_norm(key)) if key else None

    def canonical(self, key: str) -> FlagSpec | None:
        """Like `get`, but a deprecated alias resolves to the live flag it aliases."""
        spec = self.get(key)
        if spec is not None and spec.alias_of:
            return self._by_name.get(spec.alias_of, spec)
        return spec

    def by_dest(self, dest: str) -> list[FlagSpec]:
        return list(self._by_dest.get(dest, ()))

    def suggest(self, key: str, n: int = 3) -> list[str]:
        """Close matches among flag names (difflib), e.g. "tp-sise" -> ["tp-size", ...].

        A key longer than any flag name gets none (difflib's work grows with its length); callers that meet
        many unknown keys ask for the first SUGGEST_PER_INPUT only (issue #14: 33k unknown keys took 97 s)."""
        import difflib

        word = _norm(key)
        if not word or len(word) > SUGGEST_MAX_KEY:
            return []
        pool = list(self._by_name)
        out = difflib.get_close_matches(word, pool, n=n, cutoff=0.6)
        if len(out) < n:  # an alias spelling can be closer than any primary name
            for opt in difflib.get_close_matches(word, list(self._by_option), n=n, cutoff=0.75):
                name = self._by_option[opt].name
                if name not in out:
                    out.append(name)
        return out[:n]

    @staticmethod
    def is_boolean_switch(spec: FlagSpec) -> bool:
        """True for flags given bare (`--enable-foo`), taking no value: store_true/false/const and kin."""
        return spec.nargs == 0 or (spec.action in _SWITCH_ACTIONS and spec.nargs is None)


def _catalog_path(version: str) -> Path:
    return CATALOG_DIR / f"{_PREFIX}{version}.json"


def available_versions() -> list[str]:
    """Releases with a shipped catalog, oldest first."""
    versions = [p.name[len(_PREFIX) : -len(".json")] for p in CATALOG_DIR.glob(f"{_PREFIX}*.json")]

    def key(v: str):
        return tuple(int(x) if x.isdigit() else -1 for x in v.split("."))

    return sorted(versions, key=key)


def catalog_from_dict(doc: dict[str, Any], *, source: str | None = None) -> Catalog:
    flags = tuple(FlagSpec.from_json(d) for d in doc["flags"])
    return Catalog(str(doc["sglang"]), flags, generator=doc.get("generator"), source=source)


@functools.lru_cache(maxsize=None)
def load_catalog(version: str) -> Catalog:
    """The shipped catalog of an SGLang release ("0.5.23"); UsageError naming the known releases if absent."""
    v = str(version).strip()
    v = v[1:] if v[:1] in ("v", "V") else v
    path = _catalog_path(v)
    try:
        if not _VERSION.fullmatch(v):  # a release number, never a path (NUL bytes, slashes, "..")
            raise FileNotFoundError(v)

        if not path.is_file():
            raise FileNotFoundError(path)
        raw = read_regular(path, 64 << 20, what="flag catalog")
    except (FileNotFoundError, NotADirectoryError):
        known = ", ".join(available_versions()) or "none"
        shown = repr(version) if len(str(version)) <= 40 else repr(str(version)[:40]) + "..."
        raise UsageError(
            f"no flag catalog for sglang {shown} (known: {known})",
            fix="use one of the known releases, or generate one with tools/gen_catalog.py",
        ) from None
    return catalog_from_dict(json.loads(raw), source=str(path))
