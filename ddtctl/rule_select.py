"""Which rules `ddtctl validate` reports: `--select` / `--ignore` and the repository configuration's
`select` / `ignore` (ddtctl.repo_config), resolved as ruff resolves its own.

A selector is a rule id (`DDT805`), a prefix of ids (`DDT9`: every DDT9xx rule; `DDT`) or `ALL`. The sources
are layers, the configuration first, then the command line: a layer that has a `select` starts from it (a
rule it does not match is not reported), then its `ignore` removes rules. Within one layer, of a select and an
ignore that both match a rule the more specific (longer) one wins, the ignore on a tie: `select = ["DDT9"]`
with `ignore = ["DDT91"]` reports DDT9xx but DDT91x, and `--select DDT914 --ignore DDT9` reports DDT914.

The outcome is {rule id: reason} of the rules not to report, which ddtctl.validate.apply_ignores applies to
each finding: an error SGLang itself rejects is reported whatever is selected or ignored. An exact id of such
a rule in an ignore is refused (a usage or configuration error, as `--ignore` always did); a prefix leaves
them reported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from ddtctl.errors import DdtctlError, UsageError
from ddtctl.rules import all_rules
from ddtctl.rules.engine import ERROR, RULES
from ddtctl.validate import BUILTIN_CHECKS, BUILTIN_DOCS, ignore_refusal

ALL = "ALL"
_FULL_ID = re.compile(r"DDT\d{3}")
CLI_IGNORE_REASON = "--ignore on the command line"

# Titles of the checks that are not rules of the graph (ddtctl.validate.BUILTIN_CHECKS) and have no
# BUILTIN_DOCS entry: `--statistics` and SARIF's rule descriptions name them.
_BUILTIN_TITLES = {
    "DDT000": "rules that could not run",
    "DDT001": "unknown flag",
    "DDT002": "wrong type or out of range",
    "DDT003": "not one of the flag's choices",
    "DDT004": "deprecated flag",
    "DDT007": "profile schema",
    "DDT008": "reserved flag in server:",
    "DDT009": "flag given twice",
    "DDT010": "model.architecture differs from config.json",
}


def known_ids() -> list[str]:
    """Every rule id validate can report: the graph's rules and the built-in checks."""
    all_rules()
    return sorted(set(RULES) | set(BUILTIN_CHECKS))


def rule_meta(rule_id: str) -> tuple[str, str, bool, str | None]:
    """(title, severity, whether SGLang rejects it itself, documentation or None) of a rule or a built-in
    check."""
    all_rules()
    r = RULES.get(rule_id)
    if r is not None:
        return r.title, r.severity, r.sglang_enforces, r.doc
    severity, enforced = BUILTIN_CHECKS.get(rule_id, (ERROR, True))
    title, doc = BUILTIN_DOCS.get(rule_id, (_BUILTIN_TITLES.get(rule_id, rule_id), None))
    return title, severity, enforced, doc


@dataclass(frozen=True)
class Layer:
    """One source of selectors: the configuration file, or the command line."""

    select: tuple[str, ...] | None  # None: this layer does not select (the previous layers' rules stay)
    ignore: tuple[str, ...] = ()
    select_reason: str = "not selected"
    ignore_reason: str = CLI_IGNORE_REASON


Fail = Callable[[str, str], DdtctlError]  # (the selector as written, why) -> the error to raise


def cli_fail(option: str) -> Fail:
    def fail(code: str, why: str) -> DdtctlError:
        return UsageError(f"{option} {code}: {why}")

    return fail


def parse_selectors(values: Sequence[str] | None, fail: Fail, *, is_ignore: bool) -> tuple[str, ...]:
    """`["DDT805,DDT9", "ddt1"]` -> ("DDT805", "DDT9", "DDT1"): each an id, a prefix of ids, or ALL. An
    unknown selector fails; so does the exact id, in an ignore, of a rule that cannot be ignored."""
    ids = known_ids()
    out: list[str] = []
    for value in values or ():
        for part in str(value).split(","):
            code = part.strip().upper()
            if not code:
                continue
            if code != ALL and not any(i.startswith(code) for i in ids):
                if _FULL_ID.fullmatch(code):
                    raise fail(part.strip(), f"unknown rule {code!r} (`ddtctl rules` lists them)")
                raise fail(
                    part.strip(), "matches no rule (`ddtctl rules` lists them; ALL selects every rule)"
                )
            if is_ignore and code in ids:
                refusal = ignore_refusal(code)
                if refusal:
                    raise fail(part.strip(), refusal)
            out.append(code)
    return tuple(out)


def _specificity(code: str) -> int:
    return 0 if code == ALL else len(code)


def _best(codes: tuple[str, ...], rule_id: str) -> int:
    """The specificity of the most specific selector of `codes` matching `rule_id`; -1 when none does."""
    return max((_specificity(c) for c in codes if c == ALL or rule_id.startswith(c)), default=-1)


def resolve(layers: Sequence[Layer]) -> dict[str, str]:
    """{rule id: why it is not reported} over every known rule, the layers applied in order."""
    off: dict[str, str] = {}
    for rule_id in known_ids():
        reason: str | None = None
        for layer in layers:
            ignored = _best(layer.ignore, rule_id)
            selected = _best(layer.select, rule_id) if layer.select is not None else -1
            if ignored >= 0 and ignored >= selected:
                reason = layer.ignore_reason
            elif selected >= 0:
                reason = None
            elif layer.select is not None:
                reason = layer.select_reason
        if reason is not None:
            off[rule_id] = reason
    return off


def cli_layer(select: Sequence[str] | None, ignore: Sequence[str] | None) -> Layer:
    """The command line's `--select` / `--ignore` (a UsageError names the option and the selector)."""
    chosen = parse_selectors(select, cli_fail("--select"), is_ignore=False) if select else None
    shown = ",".join(chosen) if chosen else ""
    return Layer(
        select=chosen,
        ignore=parse_selectors(ignore, cli_fail("--ignore"), is_ignore=True),
        select_reason=f"not selected (--select {shown})",
    )


def shown_path(path: str | os.PathLike[str]) -> str:
    """A configuration file as messages name it: relative to the current directory when under it."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel
