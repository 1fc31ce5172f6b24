"""SGLang flag values: from a profile's `server:` mapping or a raw argv
to typed values by dest, and back to argv.

Typing follows the catalog (the release's real argparse actions), so a
value that passes here parses in SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddtctl import PINNED_SGLANG
from ddtctl.argv import Occurrence, ParsedArgv, parse_server_argv
from ddtctl.findings import ERROR, WARNING, Finding
from ddtctl.flag_typing import YamlTypingError, coerce
from ddtctl.launch_tokens import UnsafeValue, flag_tokens, single_tokens
from ddtctl.schema.catalog import (
    SUGGEST_MAX_KEY,
    SUGGEST_PER_INPUT,
    Catalog,
    FlagSpec,
    available_versions,
    load_catalog,
)

SWITCH_TRUE_ACTIONS = (
    "store_true",
    "deprecated_store_true",
    "boolean_optional",
    "store_const",
    "deprecated_store_const",
)
RESERVED = {"model_path": "model.path"}  # flags a profile sets outside `server:`


@dataclass
class FlagValues:
    given: dict[str, Any] = field(default_factory=dict)  # dest -> typed value
    specs: dict[str, FlagSpec] = field(default_factory=dict)  # dest -> spec the user wrote
    lines: dict[str, int | None] = field(default_factory=dict)  # dest -> profile line
    keys: dict[str, str] = field(default_factory=dict)  # dest -> key as written in the profile / argv option
    findings: list[Finding] = field(default_factory=list)
    unknown: int = 0  # unknown flags met so far (only the first SUGGEST_PER_INPUT get a did-you-mean search)


def _finding(
    rule: str,
    message: str,
    line: int | None,
    key: str,
    fix: str | None = None,
    severity: str = ERROR,
    edits: dict[str, Any] | None = None,
) -> Finding:
    return Finding(
        rule=rule, severity=severity, message=message, line=line, fix=fix, key=key, edits=edits or {}
    )


def out_of_range(spec: FlagSpec, value: Any) -> str | None:
    """The flag's value domain (schema/flag_models.py: finite numbers, RANGES, ports), checked without
    building the typed model; a list is checked item by item."""
    enforced, unenforced = _domain_problems(spec, value)
    return enforced or unenforced


def _domain_problems(spec: FlagSpec, value: Any) -> tuple[str | None, str | None]:
    """In one pass, item by item: the first domain problem that stops SGLang (a non-finite or over-wide
    number, or a range side its resolver or start-up enforces: DDT002), and the first one it launches anyway
    (DDT013)."""
    from ddtctl.schema.flag_models import domain_problem, range_enforced  # pydantic: loaded by validate only

    unenforced = None
    for item in value if isinstance(value, list) else [value]:
        problem = domain_problem(spec, item)
        if problem and range_enforced(spec, item):
            return problem, unenforced
        unenforced = unenforced or problem
    return None, unenforced


def _range_warning(spec: FlagSpec, problem: str, line: int | None, key: str, where: str) -> Finding:
    """DDT013: a number outside a range side SGLang 0.5.23 does not enforce (its resolver accepts it, and no
    start-up failure is on record): a warning, and the value stands."""
    need = problem.rpartition("must be ")[2]
    return _finding(
        "DDT013",
        f"{where}: --{spec.name}: {problem} (SGLang {PINNED_SGLANG}'s resolver accepts it; the range is "
        f"what the flag means, not what SGLang checks)",
        line,
        key,
        fix=f"set {spec.name} to a value {need}",
        severity=WARNING,
    )


def _unknown_flag(
    catalog: Catalog, key: str, line: int | None, where: str, out: FlagValues | None = None
) -> Finding:
    name = key.lstrip("-").replace("_", "-")
    if out is not None:
        out.unknown += 1
        if out.unknown > SUGGEST_PER_INPUT or len(name) > SUGGEST_MAX_KEY:  # bounded work for hostile input
            shown = name if len(name) <= 80 else name[:77] + "..."
            return _finding(
                "DDT001",
                f"{where}: unknown SGLang {catalog.version} flag --{shown}",
                line,
                key,
                fix="see `ddtctl diff-flags` or the SGLang docs",
            )
    for version in reversed(available_versions()):
        if version == catalog.version:
            continue
        other = load_catalog(version).get(name)
        if other is not None:
            target = other.alias_of or (other.replacement or "").lstrip("-") or None
            live = catalog.get(target) if target else None
            if live is not None:
                return _finding(
                    "DDT001",
                    f"{where}: --{name} does not exist in sglang {catalog.version} (in "
                    f"{version} it {'is a deprecated alias of' if other.deprecated else 'maps to'} "
                    f"--{live.name})",
                    line,
                    key,
                    fix=f"rename it to {live.name} (ddtctl migrate does this)",
                )
            return _finding(
                "DDT001",
                f"{where}: --{name} does not exist in sglang {catalog.version} (it exists in {version})",
                line,
                key,
                fix=f"remove it, or target sglang {version}",
            )
    close = catalog.suggest(name)
    hint = f"did you mean {', '.join(close)}?" if close else "see `ddtctl diff-flags` or the SGLang docs"
    return _finding("DDT001", f"{where}: unknown SGLang {catalog.version} flag --{name}", line, key, fix=hint)


def _not_a_choice(spec: FlagSpec, given: Any, line: int | None, key: str, where: str) -> Finding:
    """DDT003, with the closest choice as the fix (and its edit) when there is one."""
    import difflib

    choices = ", ".join(map(str, spec.choices or ()))
    close = difflib.get_close_matches(str(given), [str(c) for c in spec.choices or ()], n=1)
    return _finding(
        "DDT003",
        f"{where}: {given!r} is not a choice of --{spec.name} ({choices})",
        line,
        key,
        fix=f"use {close[0]}" if close else f"use one of {choices}",
        edits={spec.name: close[0]} if close else None,
    )


def _yaml_typing(spec: FlagSpec, err: YamlTypingError, line: int | None, key: str, where: str) -> Finding:
    return _finding(
        "DDT012",
        f"{where}: --{spec.name}: {err}",
        line,
        key,
        fix="write the number in plain decimal (no leading 0, 0x, 0o, 0b, or ':')",
    )


def _accept(
    out: FlagValues,
    catalog: Catalog,
    key: str,
    spec: FlagSpec,
    value: Any,
    line: int | None,
    where: str,
    *,
    launch: bool = False,
) -> None:
    """`launch`: a profile's value, which ddtctl writes into the launch argv (DDT011 when it cannot)."""
    if spec.dest in RESERVED:
        out.findings.append(
            _finding(
                "DDT008",
                f"{where}: --{spec.name} belongs in {RESERVED[spec.dest]}, not in server",
                line,
                key,
                fix=f"move the value to {RESERVED[spec.dest]}",
            )
        )
        return
    if spec.deprecated:
        live = spec.alias_of or (spec.replacement or "").lstrip("-") or None
        out.findings.append(
            _finding(
                "DDT004",
                f"{where}: --{spec.name} is deprecated in sglang {catalog.version}"
                + (f" (use --{live})" if live else ""),
                line,
                key,
                fix=f"rename it to {live}" if live else "remove it",
                severity=WARNING,
            )
        )
    if spec.dest in out.given:
        out.findings.append(
            _finding(
                "DDT009",
                f"{where}: --{spec.name} is given twice (also as {out.keys[spec.dest]})",
                line,
                key,
                fix="keep one of them",
            )
        )
        return
    try:
        typed = coerce(spec, value)
    except LookupError as err:
        out.findings.append(_not_a_choice(spec, err.args[0], line, key, where))
        return
    except YamlTypingError as err:
        out.findings.append(_yaml_typing(spec, err, line, key, where))
        return
    except ValueError as err:
        out.findings.append(
            _finding(
                "DDT002",
                f"{where}: --{spec.name}: {err}",
                line,
                key,
                fix=f"give --{spec.name} a {spec.type or 'value'}" if spec.type else None,
            )
        )
        return
    problem, unenforced = _domain_problems(spec, typed)
    if problem:
        need = problem.rpartition("must be ")[2]
        out.findings.append(
            _finding(
                "DDT002",
                f"{where}: --{spec.name}: {problem}",
                line,
                key,
                fix=f"set {spec.name} to {need}"
                if need.startswith("a ")
                else f"set {spec.name} to a value {need}",
            )
        )
        return
    if launch and _unlaunchable(out, catalog, key, spec, value, line, where):
        return
    if unenforced:
        out.findings.append(_range_warning(spec, unenforced, line, key, where))
    out.given[spec.dest] = typed
    out.specs[spec.dest] = spec
    out.lines[spec.dest] = line
    out.keys[spec.dest] = key


def _unlaunchable(
    out: FlagValues, catalog: Catalog, key: str, spec: FlagSpec, value: Any, line: int | None, where: str
) -> bool:
    """DDT011 when the value cannot be written into SGLang's argv so that its parser reads it back
    (ddtctl.launch_tokens: a list item that starts with '-', a NUL byte)."""
    try:
        flag_tokens(spec, value, catalog)
    except UnsafeValue as err:
        out.findings.append(
            _finding(
                "DDT011",
                f"{where}: --{spec.name}: {err}",
                line,
                key,
                fix=f"remove that value from {spec.name} (SGLang would read it as a flag, not a value)",
            )
        )
        return True
    except (ValueError, LookupError):  # already reported by coerce's caller
        return False
    return False


def flags_from_server(server: dict[str, Any], lines: dict[str, int], catalog: Catalog) -> FlagValues:
    out = FlagValues()
    for key, value in server.items():
        line = lines.get(f"server.{key}")
        spec = catalog.get(key)
        where = f"server.{key}"
        if spec is None:
            out.findings.append(_unknown_flag(catalog, key, line, where, out))
            continue
        _accept(out, catalog, key, spec, value, line, where, launch=True)
    return out


def flags_from_argv(argv: list[str], catalog: Catalog) -> FlagValues:
    """A bare SGLang argv (no launcher, no --config) read by SGLang's parser (ddtctl.argv), into typed
    values and findings."""
    return flags_from_parsed(parse_server_argv(argv, catalog, config=False), catalog)


def flags_from_parsed(parsed: ParsedArgv, catalog: Catalog) -> FlagValues:
    """What SGLang's parser made of an argv, as typed values by dest and findings: what argparse refused
    (unknown options, ambiguous prefixes, missing values, bad values), each value checked as a profile's is
    (types, choices, ranges, deprecation), and a flag the command line repeats (a warning: SGLang keeps the
    last). A flag the command line sets over SGLang's `--config` file is no finding: that is how the file is
    meant to be used."""
    out = FlagValues()
    refusals = {occ.error for occ in parsed.occurrences if occ.error}
    for message in parsed.errors:
        if message not in refusals:
            out.findings.append(_argparse_finding(message))
    if parsed.help:
        out.findings.append(
            _finding(
                "DDT002", "argv: --help prints SGLang's help and exits; it launches nothing", None, "--help"
            )
        )
    for token in parsed.unknown:
        where = parsed.config if parsed.config and token in parsed.argv[: parsed.n_config] else "argv"
        out.findings.append(_unknown_flag(catalog, token.partition("=")[0], None, where or "argv", out))
    for token in parsed.positional:
        out.findings.append(
            _finding(
                "DDT001",
                f"argv: unexpected positional argument {token!r}",
                None,
                token,
                fix="SGLang takes only --flags",
            )
        )
    by_dest: dict[str, list[Occurrence]] = {}
    for occ in parsed.occurrences:
        by_dest.setdefault(occ.spec.dest, []).append(occ)
    for occs in by_dest.values():
        _accept_occurrences(out, catalog, parsed, occs)
    return out


def _argparse_finding(message: str) -> Finding:
    """argparse's own one-line refusal: an ambiguous prefix is an unknown flag (DDT001), the rest DDT002."""
    if message.startswith("ambiguous option:"):
        head, _, matches = message.partition(" could match ")
        names = matches.split(", ")
        shown = ", ".join(names[:6]) + (f" (and {len(names) - 6} more)" if len(names) > 6 else "")
        option = head.rpartition(" ")[2].split("=", 1)[0]
        return _finding(
            "DDT001",
            f"argv: {head} could match {shown}",
            None,
            option,
            fix="write the flag in full (SGLang's argparse accepts a prefix only when it names one flag)",
        )
    return _finding("DDT002", f"argv: {message}", None, message.split(":", 1)[0], fix=None)


def _occurrence_value(parsed: ParsedArgv, occs: list[Occurrence]) -> Any:
    """The profile-style value the deciding occurrence stands for (a switch: true / false)."""
    occ = occs[-1]
    spec = occ.spec
    if Catalog.is_boolean_switch(spec):
        return not occ.negated
    if spec.action in ("append", "extend"):
        return [item for o in occs for item in o.raw]
    if occ.ok and spec.converter == "common.human_readable_int":
        return parsed.get(spec.dest)  # "4Ki" -> 4096, as SGLang's converter reads it
    if spec.nargs in ("+", "*") or isinstance(spec.nargs, int):
        return list(occ.raw)
    return occ.raw[0] if occ.raw else None


def _accept_occurrences(
    out: FlagValues, catalog: Catalog, parsed: ParsedArgv, occs: list[Occurrence]
) -> None:
    last = occs[-1]
    where = (parsed.config or "argv") if last.from_config else "argv"
    for occ in occs[:-1]:  # an earlier value argparse refused stops SGLang too
        if occ.error:
            out.findings.append(_finding("DDT002", f"argv: {occ.error}", None, occ.option))
    on_cmdline = [o for o in occs if not o.from_config]
    if len(on_cmdline) > 1 and last.spec.action not in ("append", "extend"):
        shown = " ".join(last.raw) if last.raw else ("false" if last.negated else "true")
        out.findings.append(
            _finding(
                "DDT009",
                f"argv: --{last.spec.name} is given {len(on_cmdline)} times (as "
                f"{', '.join(o.option for o in on_cmdline)}); SGLang keeps the last: {shown}",
                None,
                last.option,
                fix="keep one of them",
                severity=WARNING,
            )
        )
    before = len(out.findings)
    _accept(out, catalog, last.option, last.spec, _occurrence_value(parsed, occs), None, where)
    if last.error and len(out.findings) == before:  # argparse refused what ddtctl's typing let through
        out.given.pop(last.spec.dest, None)
        out.findings.append(_finding("DDT002", f"{where}: {last.error}", None, last.option))


def launch_value_findings(profile: Any, lines: dict[str, int], catalog: Catalog) -> list[Finding]:
    """DDT011 for the launch values outside `server:`: a model path no command line carries (a NUL byte,
    '--'), an environment value with a NUL byte (no process environment holds one)."""
    out = []
    try:
        single_tokens("--model-path", profile.model.path, catalog)
    except UnsafeValue as err:
        out.append(
            _finding(
                "DDT011", f"model.path: {err}", lines.get("model.path"), "model.path", fix="fix model.path"
            )
        )
    for name, value in profile.env.items():
        if "\x00" in value:
            out.append(
                _finding(
                    "DDT011",
                    f"env.{name}: the value holds a NUL byte, which no process environment can carry",
                    lines.get(f"env.{name}"),
                    f"env.{name}",
                    fix=f"remove the NUL byte from env.{name}",
                )
            )
    return out
