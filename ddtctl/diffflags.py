"""`ddtctl diff-flags`: how SGLang's flag surface differs between releases, between a catalog and an installed
SGLang, and how two profiles launch differently.

Library API (the CLI only parses and prints):
    diff_versions("0.5.12", "0.5.23") -> CatalogDiff    (shipped catalogs; releases in between are evidence)
    diff_catalogs(a, b, evidence=()) -> CatalogDiff
    live_catalog(python) -> Catalog                      (the real parser of the sglang `python` imports)
    diff_installed(python=None, sglang=None) -> InstalledDiff
    diff_profiles(path_a, path_b, resolved=False) -> ProfileDiff
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ddtctl import PINNED_SGLANG
from ddtctl.envs import require_env
from ddtctl.errors import EnvironmentMissing, UsageError
from ddtctl.procs import run_bounded
from ddtctl.profilediff import (  # noqa: F401 - two profiles' launches, importable from here as before
    RANDOM_WHEN_UNSET,
    ProfileDiff,
    ValueChange,
    argv_to_mapping,
    diff_profiles,
)
from ddtctl.safeio import load_json
from ddtctl.schema.catalog import Catalog, FlagSpec, available_versions, catalog_from_dict, load_catalog

# Fields compared for flags present on both sides (help text changes are noise for a launch).
COMPARED_FIELDS = ("type", "default", "choices", "action", "nargs", "required", "dest", "deprecated")

# A rename inferred from similarity needs at least this score and one strong signal (see _similarity).
RENAME_MIN_SCORE = 0.62


def version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in v.split("."))


# -- results -------------------------------------------------------------------------------------------------
@dataclass
class FieldChange:
    field: str
    old: Any
    new: Any


@dataclass
class FlagChange:
    flag: str
    changes: list[FieldChange]


@dataclass
class Rename:
    old: str  # flag name on the `from` side
    new: str  # flag name on the `to` side
    how: str  # "declared" (sglang's own deprecated-alias data) | "dest" (same dest) | "similar" (inferred)
    evidence: list[str]
    still_accepted: bool = False  # the old spelling still parses on the `to` side (as a deprecated alias)
    score: float | None = None
    changes: list[FieldChange] = field(default_factory=list)  # type/default/choices differences old -> new


@dataclass
class Removed:
    flag: str
    hint: str | None = None  # what sglang said to use instead, when it said so
    was_deprecated: bool = False


@dataclass
class Deprecated:
    flag: str
    alias_of: str | None
    replacement: str | None


@dataclass
class CatalogDiff:
    from_version: str
    to_version: str
    from_label: str
    to_label: str
    added: list[str] = field(default_factory=list)
    removed: list[Removed] = field(default_factory=list)
    renamed: list[Rename] = field(default_factory=list)
    deprecated: list[Deprecated] = field(default_factory=list)
    changed: list[FlagChange] = field(default_factory=list)
    evidence_versions: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.renamed or self.deprecated or self.changed)

    def rename_of(self, old: str) -> Rename | None:
        return next((r for r in self.renamed if r.old == old), None)

    def removed_entry(self, name: str) -> Removed | None:
        return next((r for r in self.removed if r.flag == name), None)

    def counts(self) -> dict[str, int]:
        return {
            "added": len(self.added),
            "removed": len(self.removed),
            "renamed": len(self.renamed),
            "deprecated": len(self.deprecated),
            "changed": len(self.changed),
        }

    def to_json(self) -> dict:
        return {
            "from": self.from_label,
            "to": self.to_label,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "identical": self.identical,
            "counts": self.counts(),
            "added": list(self.added),
            "removed": [asdict(r) for r in self.removed],
            "renamed": [asdict(r) for r in self.renamed],
            "deprecated": [asdict(d) for d in self.deprecated],
            "changed": [asdict(c) for c in self.changed],
            "evidence_versions": list(self.evidence_versions),
        }


# -- comparing two catalogs ----------------------------------------------------------------------------------
def _spec_value(spec: FlagSpec, name: str) -> Any:
    value = getattr(spec, name)
    return list(value) if isinstance(value, tuple) else value


def compare_specs(old: FlagSpec, new: FlagSpec, fields: Sequence[str] = COMPARED_FIELDS) -> list[FieldChange]:
    out = []
    for name in fields:
        a, b = _spec_value(old, name), _spec_value(new, name)
        if a != b:
            out.append(FieldChange(name, a, b))
    return out


def _live(cat: Catalog, name: str) -> FlagSpec | None:
    """The flag spelled `--name` in `cat` (strict: option strings only, no dest fallback)."""
    return cat.get_option(name)


def _known(cat: Catalog, name: str) -> FlagSpec:
    """The flag `name` that an earlier step found in `cat`: a miss here is a bug, not a user error."""
    spec = cat.get(name)
    if spec is None:
        raise LookupError(f"--{name} is not in the sglang {cat.version} catalog")
    return spec


def _alias_target(
    catalogs: Sequence[tuple[str, Catalog]], old: str, target: Catalog
) -> tuple[str, list[str]] | None:
    """Follow sglang's deprecated-alias declarations (in any catalog of the span) from `old` to a live flag of
    `target`. Declarations are read both ways, so a downgrade maps the new name back to the old one."""
    evidence: list[str] = []
    seen = {old}
    frontier = old
    for _ in range(4):  # alias chains are short; guard against cycles
        step = None
        for version, cat in catalogs:
            spec = _live(cat, frontier)
            if spec is not None and spec.deprecated and spec.alias_of and spec.alias_of not in seen:
                step = (
                    spec.alias_of,
                    f"sglang {version} declares --{frontier} a deprecated alias of --{spec.alias_of}",
                )
                break
            # reverse direction: some flag of this catalog aliases `frontier`
            for other in cat.flags:
                if other.deprecated and other.alias_of == frontier and other.name not in seen:
                    step = (
                        other.name,
                        f"sglang {version} declares --{other.name} a deprecated alias of --{frontier}",
                    )
                    break
            if step:
                break
        if step is None:
            return None
        frontier, note = step
        seen.add(frontier)
        evidence.append(note)
        spec = _live(target, frontier)
        if spec is not None and not (spec.deprecated and spec.alias_of):
            return frontier, evidence
    return None


def _words(text: str) -> set[str]:
    return {w for w in "".join(c.lower() if c.isalnum() else " " for c in text).split() if len(w) > 2}


def _similarity(old: FlagSpec, new: FlagSpec) -> tuple[float, list[str], bool]:
    """Score in [0, 1] that `new` is `old` renamed, the evidence, and whether a strong signal is among it."""
    evidence: list[str] = []
    strong = False
    parts: list[tuple[float, float]] = []  # (weight, value)
    name_ratio = difflib.SequenceMatcher(None, old.name, new.name).ratio()
    parts.append((0.25, name_ratio))
    if name_ratio >= 0.6:
        evidence.append(f"names {name_ratio:.0%} alike")
    if old.dest == new.dest:
        parts.append((0.4, 1.0))
        evidence.append(f"same dest {old.dest}")
        strong = True
    if old.help and new.help:
        help_ratio = difflib.SequenceMatcher(None, old.help.lower(), new.help.lower()).ratio()
        words_a, words_b = _words(old.help), _words(new.help)
        overlap = len(words_a & words_b) / max(1, len(words_a | words_b))
        value = max(help_ratio, overlap)
        parts.append((0.3, value))
        if value >= 0.6:
            evidence.append(f"help {value:.0%} alike")
            strong = strong or value >= 0.8
    if old.choices and new.choices:
        a, b = set(map(str, old.choices)), set(map(str, new.choices))
        jac = len(a & b) / len(a | b)
        parts.append((0.3, jac))
        if jac > 0:
            evidence.append(f"choices overlap {sorted(a & b)}")
            strong = strong or (jac >= 0.5 and len(a & b) >= 2)
    elif bool(old.choices) != bool(new.choices):
        parts.append((0.1, 0.0))
    same_kind = (old.type == new.type) and ((old.nargs == 0) == (new.nargs == 0))
    parts.append((0.15, 1.0 if same_kind else 0.0))
    if old.default == new.default and old.default not in (None, False):
        parts.append((0.1, 1.0))
        evidence.append(f"same default {old.default!r}")
    score = sum(w * v for w, v in parts) / sum(w for w, _ in parts)
    return score, evidence, strong and same_kind


class _RenameFinder:
    """Pairs flags gone from `a` with flags new in `b`, strongest evidence first, each flag once at most."""

    def __init__(self, a: Catalog, b: Catalog, span: list[tuple[str, Catalog]], out: CatalogDiff) -> None:
        self.a, self.b, self.span, self.out = a, b, span, out
        self.matched_new: set[str] = set()
        self.renamed_old: set[str] = set()

    def add(
        self,
        old: FlagSpec,
        new: FlagSpec,
        how: str,
        notes: list[str],
        *,
        accepted: bool = False,
        score: float | None = None,
    ) -> None:
        self.out.renamed.append(
            Rename(
                old.name,
                new.name,
                how,
                notes,
                accepted,
                None if score is None else round(score, 3),
                compare_specs(old, new, ("type", "default", "choices", "nargs")),
            )
        )
        self.matched_new.add(new.name)
        self.renamed_old.add(old.name)

    def accepted_as_alias(self) -> None:
        """Flags still accepted on the b side, but only as a deprecated alias of a flag new in b."""
        a, b = self.a, self.b
        for spec in a.flags:
            other = _live(b, spec.name)
            if other is None or not (other.deprecated and other.alias_of) or spec.deprecated:
                continue
            target = b.get(other.alias_of)
            if target is not None and _live(a, target.name) is None:
                self.add(
                    spec,
                    target,
                    "declared",
                    [f"sglang {b.version} declares --{spec.name} a deprecated alias of --{target.name}"],
                    accepted=True,
                )

    def declared_or_same_dest(self, gone: list[FlagSpec]) -> list[FlagSpec]:
        """Gone flags that sglang's own alias declarations (anywhere in the span), else the one live flag of b
        with the same dest, pair with a flag of b. Returns the others."""
        pending: list[FlagSpec] = []
        for spec in gone:
            hit = _alias_target(self.span, spec.name, self.b)
            if hit is not None:
                self.add(spec, _known(self.b, hit[0]), "declared", hit[1])
            else:
                pending.append(spec)
        still: list[FlagSpec] = []
        for spec in pending:
            same = [
                s
                for s in self.b.by_dest(spec.dest)
                if not s.deprecated and s.name not in self.matched_new and _live(self.a, s.name) is None
            ]
            if len(same) == 1 and (same[0].nargs == 0) == (spec.nargs == 0):
                self.add(spec, same[0], "dest", [f"same dest {spec.dest}"])
            else:
                still.append(spec)
        return still

    def similar(self, gone: list[FlagSpec], new_flags: list[FlagSpec]) -> None:
        """Gone flags paired with new ones by similarity, the best score first."""
        candidates = []
        for old in gone:
            if old.deprecated:
                continue  # a retired deprecated flag is a removal, not a rename
            for new in new_flags:
                if new.name in self.matched_new or new.deprecated:
                    continue
                score, notes, strong = _similarity(old, new)
                if strong and score >= RENAME_MIN_SCORE:
                    candidates.append((score, old.name, new.name, notes))
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        for score, old_name, new_name, notes in candidates:
            if old_name in self.renamed_old or new_name in self.matched_new:
                continue
            self.add(_known(self.a, old_name), _known(self.b, new_name), "similar", notes, score=score)


def _removal_hint(spec: FlagSpec, span: list[tuple[str, Catalog]], b: Catalog) -> str | None:
    """What the latest catalog of the span that names a replacement for a removed flag said to use instead."""
    hint = None
    for version, cat in span:
        s = _live(cat, spec.name)
        if s is not None and s.replacement:
            head = s.replacement.strip().split("=", 1)[0].split(" ", 1)[0]
            gone_too = head.startswith("--") and "{" not in head and _live(b, head) is None
            hint = f"sglang {version} said: use {s.replacement}" + (
                f", which sglang {b.version} lacks too" if gone_too else ""
            )
    return hint


def _kept_flag_changes(a: Catalog, b: Catalog, renamed_old: set[str], out: CatalogDiff) -> None:
    """Deprecations and field changes of the flags that both catalogs have (renamed ones aside)."""
    for spec in a.flags:
        other = _live(b, spec.name)
        if other is None or spec.name in renamed_old:
            continue
        if other.deprecated and not spec.deprecated:
            out.deprecated.append(Deprecated(spec.name, other.alias_of, other.replacement))
        changes = [c for c in compare_specs(spec, other) if c.field != "deprecated"]
        if other.name != spec.name:
            changes.insert(0, FieldChange("name", spec.name, other.name))
        if changes:
            out.changed.append(FlagChange(spec.name, changes))


def diff_catalogs(
    a: Catalog,
    b: Catalog,
    *,
    evidence: Iterable[tuple[str, Catalog]] = (),
    from_label: str | None = None,
    to_label: str | None = None,
) -> CatalogDiff:
    """What changed from catalog `a` to catalog `b`. `evidence`: other (version, catalog) pairs whose
    deprecated-alias declarations may prove a rename (e.g. 0.5.19 between 0.5.12 and 0.5.23)."""
    span = [(a.version, a), *list(evidence), (b.version, b)]
    out = CatalogDiff(
        a.version,
        b.version,
        from_label or f"sglang {a.version}",
        to_label or f"sglang {b.version}",
        evidence_versions=[v for v, _ in span[1:-1]],
    )

    only_a = [s for s in a.flags if _live(b, s.name) is None]
    only_b = [s for s in b.flags if _live(a, s.name) is None]
    renames = _RenameFinder(a, b, span, out)
    # 1. flags still accepted on the b side, but only as a deprecated alias of a flag new in b
    renames.accepted_as_alias()
    # 2. gone flags: sglang's own alias declarations anywhere in the span, then the same dest, then similarity
    renames.similar(renames.declared_or_same_dest(only_a), only_b)

    out.removed.extend(
        Removed(spec.name, _removal_hint(spec, span, b), spec.deprecated)
        for spec in only_a
        if spec.name not in renames.renamed_old
    )
    out.added = [s.name for s in only_b if s.name not in renames.matched_new]
    _kept_flag_changes(a, b, renames.renamed_old, out)
    out.renamed.sort(key=lambda r: r.old)
    return out


def diff_versions(from_version: str, to_version: str) -> CatalogDiff:
    """Diff two shipped catalogs; every shipped release between them serves as rename evidence."""
    a, b = load_catalog(from_version), load_catalog(to_version)
    lo, hi = sorted((version_key(a.version), version_key(b.version)))
    between = [v for v in available_versions() if lo < version_key(v) < hi]
    if version_key(a.version) > version_key(b.version):
        between.reverse()
    return diff_catalogs(a, b, evidence=[(v, load_catalog(v)) for v in between])


# -- an installed sglang -------------------------------------------------------------------------------------
DUMP_SCRIPT = Path(__file__).resolve().parent / "schema" / "argparse_dump.py"
LIVE_OUTPUT_LIMIT = 8 * 1024 * 1024  # what the dump may print: warnings of an import, not a catalog
LIVE_CATALOG_LIMIT = 32 * 1024 * 1024  # the dump itself (a shipped catalog is ~0.5 MB)


def live_catalog(
    python: str | os.PathLike[str], *, timeout_s: float = 300.0, keep_env: bool = False
) -> Catalog:
    """The argparse surface of the sglang importable by `python`, dumped
    in a subprocess (never imported here)."""
    py = Path(python)
    if not py.exists():
        raise UsageError(f"python {py} does not exist", fix="pass an existing interpreter to --python")
    with tempfile.TemporaryDirectory(prefix="ddtctl-live-catalog-") as tmp:
        out = Path(tmp) / "catalog.json"
        cmd = [str(py), str(DUMP_SCRIPT), "--out", str(out)] + (["--keep-env"] if keep_env else [])
        # stdout + stderr bounded, the process group killed at the deadline (a flood ran out of memory)
        proc = run_bounded(
            cmd,
            timeout_s=timeout_s,
            limit=LIVE_OUTPUT_LIMIT,
            what=f"{py} (dumping its sglang parser)",
            cwd=tmp,
        )
        if proc.returncode != 0 or not out.exists():
            lines = [ln for ln in (proc.stderr or proc.stdout or "").strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else f"exit {proc.returncode}"
            raise EnvironmentMissing(
                f"{py} cannot build the sglang parser: {last}",
                fix="check that sglang imports in that interpreter (`ddtctl env show`)",
            )
        doc = load_json(out, LIVE_CATALOG_LIMIT, what="parser dump", error=EnvironmentMissing)
    try:
        return catalog_from_dict(doc, source=f"{py} (live)")
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise EnvironmentMissing(
            f"{py} wrote a parser dump ddtctl cannot read ({type(err).__name__}: {str(err)[:100]})",
            fix="check that it is the interpreter of an SGLang install",
        ) from None


@dataclass
class InstalledDiff:
    python: str
    installed_version: str
    catalog_version: str
    diff: CatalogDiff

    @property
    def drift(self) -> bool:
        return self.installed_version != self.catalog_version or not self.diff.identical

    def to_json(self) -> dict:
        return {
            "python": self.python,
            "installed_version": self.installed_version,
            "catalog_version": self.catalog_version,
            "drift": self.drift,
            "diff": self.diff.to_json(),
        }


def default_python(version: str | None = None) -> Path:
    """The managed env's interpreter, or EnvironmentMissing saying how to get one."""

    return Path(require_env(version or PINNED_SGLANG).python)


def diff_installed(
    python: str | os.PathLike[str] | None = None, sglang: str | None = None, *, timeout_s: float = 300.0
) -> InstalledDiff:
    """Shipped catalog (of `sglang`, default: the installed release, or the pinned one when none is shipped)
    vs the live parser of the sglang `python` imports."""

    py = Path(python) if python else default_python(sglang)
    live = live_catalog(py, timeout_s=timeout_s)
    version = sglang or (live.version if live.version in available_versions() else PINNED_SGLANG)
    shipped = load_catalog(version)
    diff = diff_catalogs(
        shipped,
        live,
        from_label=f"catalog sglang-{shipped.version}.json",
        to_label=f"installed sglang {live.version} ({py})",
    )
    return InstalledDiff(str(py), live.version, shipped.version, diff)
