"""`ddtctl validate`: a profile (or a raw argv) checked against the flag catalog and the constraint graph.

Never imports torch, sglang or paramiko: this is the fast path pre-commit runs on every commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ddtctl import PINNED_SGLANG
from ddtctl.argv import ParsedArgv, parse_server_argv
from ddtctl.errors import DdtctlError, ExitCode, ProfileError, UsageError, printable
from ddtctl.flags import FlagValues, flags_from_parsed, flags_from_server, launch_value_findings
from ddtctl.model_facts import ModelFacts, facts_from_architecture, read_model_facts
from ddtctl.profile import Profile, ProfileDocument, build_profile, discover_profiles, read_profile_document
from ddtctl.profile_overrides import Override, apply_overrides
from ddtctl.report import finding_record, line_first_columns
from ddtctl.rules import all_rules
from ddtctl.rules.engine import ERROR, INFO, RULES, SEVERITY_ORDER, WARNING, Context, Finding, run_rules
from ddtctl.schema.catalog import Catalog
from ddtctl.schema.extensions import extended_catalog
from ddtctl.schema.gpus import GpuSpec, resolve_gpu


@dataclass
class ValidationResult:
    source: str
    valid: bool
    findings: list[Finding] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # rule id -> why it could not run
    error: str | None = None  # the file could not be read/parsed at all (one line)
    profile: Profile | None = None
    flags: FlagValues | None = None
    model: ModelFacts | None = None
    draft: ModelFacts | None = None
    text: str | None = None  # the profile text validated, and the file's bytes it came from (for --fix)
    raw: bytes | None = None
    fix_refused: str | None = None  # why --fix could not apply this profile's fixes safely (file unchanged)
    ignored: list[tuple[Finding, str]] = field(default_factory=list)  # suppressed findings, with the reason
    diff: str | None = None  # --fix --diff: the edit the file would get (unified diff; "" = none)
    unapplied: list[str] = field(default_factory=list)  # --fix: rules whose unsafe fixes were left out
    path: str | None = None  # the profile file (None: a raw argv)
    key_columns: dict[str, tuple[int, int]] = field(default_factory=dict)  # key path -> (line, column)
    failure: DdtctlError | None = None  # why `error` (where, fix, exit code)
    fixed: list[str] = field(default_factory=list)  # --fix: the rules whose fixes were written to the file
    # what the file is: a profile, or (validate DIR meets them) an inventory or a tune search space, checked
    # by its own reader and skipped with `note` (ddtctl.validate_kinds)
    kind: str = "profile"
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        """One profile's part of `validate --format json` (ddtctl.report: findings have one shape)."""

        firsts = line_first_columns(self.key_columns)

        def record(f: Finding) -> dict[str, Any]:
            rec = finding_record(f, file=self.path, key_columns=self.key_columns, first_columns=firsts)
            return rec.to_json()

        return {
            "source": self.source,
            "ok": self.valid and not self.error,
            "findings": [record(f) for f in self.findings],
            "ignored": [dict(record(f), reason=reason) for f, reason in self.ignored],
            "error": self._error_json(),
            "fix_refused": self.fix_refused,
            "fixed": self.fixed,
            "unapplied_unsafe_fixes": self.unapplied,
            "diff": self.diff,
            "kind": self.kind,
            "note": self.note,
        }

    def _error_json(self) -> dict[str, Any] | None:
        if not self.error:
            return None
        err = self.failure
        return {
            "message": err.message if err else self.error,
            "where": err.where if err else self.source,
            "fix": err.fix if err else None,
            "exit_code": err.exit_code if err else ExitCode.USAGE,
        }

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]


def _finish(source: str, findings: list[Finding], skipped: dict[str, str], **kw: Any) -> ValidationResult:
    if skipped:
        reasons = sorted(set(skipped.values()))
        findings.append(
            Finding(
                rule="DDT000",
                severity=WARNING,
                message=f"cannot check {', '.join(sorted(skipped))}: {'; '.join(reasons)}",
                fix="see `ddtctl explain DDT000`",
            )
        )
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.line or 0, f.rule))
    valid = not any(f.severity == ERROR for f in findings)
    return ValidationResult(source=source, valid=valid, findings=findings, skipped=skipped, **kw)


def _model_facts(
    profile_model_path: str | None, architecture: str | None, host: str | None, revision: str | None = None
) -> ModelFacts | None:
    facts = read_model_facts(profile_model_path, revision=revision) or _cached_facts(host, profile_model_path)
    if facts is None and architecture:
        return facts_from_architecture(architecture)
    return facts


def _cached_facts(host: str | None, path: str | None) -> ModelFacts | None:
    """config.json fetched from the host by `ddtctl facts` / `deploy` (see ddtctl.remote)."""
    if not host or not path:
        return None
    from ddtctl.paths import model_config_cache_dir

    return read_model_facts(model_config_cache_dir(host, path))


def _revision(flags: FlagValues, dest: str) -> str | None:
    """--revision / --speculative-draft-model-revision: the hub revision a hub id's config.json is read at."""
    value = flags.given.get(dest)
    return value if isinstance(value, str) and value else None


def check_flags(
    flags: FlagValues,
    *,
    source: str,
    model: ModelFacts | None,
    draft: ModelFacts | None,
    gpu: GpuSpec | None,
    gpu_count: int | None,
    catalog,
    extra: list[Finding] | None = None,
    anchor_line: int | None = None,
    env: dict[str, str] | None = None,
    env_lines: dict[str, int] | None = None,
    **kw: Any,
) -> ValidationResult:
    """`env`: the server process's environment (a profile's `env:`), `env_lines` its keys' lines
    ("env.NAME")."""
    env_keys = {f"env.{name}": f"env.{name}" for name in env or {}}
    ctx = Context(
        given=flags.given,
        defaults={s.dest: s.default for s in catalog.flags},
        lines={**flags.lines, **{key: (env_lines or {}).get(key) for key in env_keys}},
        keys={**flags.keys, **env_keys},
        model=model,
        draft=draft,
        gpu=gpu,
        gpu_count=gpu_count,
        anchor_line=flags.lines.get("speculative_algorithm") or anchor_line,
        env=dict(env or {}),
    )
    findings = list(extra or []) + list(flags.findings)
    rule_findings, skipped = run_rules(ctx, all_rules())
    findings.extend(rule_findings)
    _mark_fixable(findings, catalog)
    return _finish(source, findings, skipped, flags=flags, model=model, draft=draft, **kw)


def _mark_fixable(findings: list[Finding], catalog) -> None:
    """`fixable` of each finding whose edits `validate --fix` applies (errors): safe or unsafe (fix.py)."""
    from ddtctl.fix_safety import edit_safety

    for f in findings:
        if f.severity == ERROR and f.edits:
            f.fixable = edit_safety(f.edits, catalog, unsafe=f.unsafe)


# Findings that do not come from a rule of the graph (flag catalog and profile checks): id -> (severity,
# whether SGLang itself rejects it). Those SGLang (or the profile schema) rejects cannot be ignored, like
# enforced rules.
BUILTIN_CHECKS: dict[str, tuple[str, bool]] = {
    "DDT000": (WARNING, False),  # rules that could not run
    "DDT001": (ERROR, True),  # unknown flag
    "DDT002": (ERROR, True),  # wrong type / out of range
    "DDT003": (ERROR, True),  # not a choice
    "DDT004": (WARNING, True),  # deprecated flag
    "DDT007": (ERROR, True),  # profile schema
    "DDT008": (ERROR, True),  # reserved flag in server:
    "DDT009": (ERROR, True),  # flag given twice
    "DDT010": (ERROR, False),  # model.architecture differs from config.json
    "DDT011": (ERROR, False),  # a value no SGLang command line carries as a value (ddtctl.launch_tokens)
    "DDT012": (ERROR, False),  # a YAML 1.1 number SGLang's parser would read otherwise from its text
    "DDT013": (WARNING, False),  # a number outside a range SGLang does not enforce (schema/flag_models.py)
}

# `ddtctl rules` / `ddtctl explain` documentation of the built-in checks that have one: id -> (title, doc).
BUILTIN_DOCS: dict[str, tuple[str, str]] = {
    "DDT011": (
        "a value SGLang's parser would read as an option",
        "SGLang parses its command line with argparse, which decides whether a token is an option "
        "or a value before it knows which option wants a value: a list item such as "
        "`--trust-remote-code` in `allowed-media-domains: [example.com, --trust-remote-code]` would "
        "turn that switch on. ddtctl writes a single value that starts with '-' as `--flag=value`, "
        "which argparse takes whole; a list flag's items cannot be written that way, so an item that "
        "starts with '-' (other than a negative number) is refused, as is a value holding a NUL byte "
        "or the token '--'. `ddtctl render`, `dry-run`, `deploy` and `tune` refuse such a profile "
        "too.\nFix: remove the value, or correct it.",
    ),
    "DDT012": (
        "a YAML 1.1 number SGLang's parser would read otherwise",
        "Profiles are YAML 1.1: `0123` is octal 83, `0x1F` is 31, `1:20` (base 60) is 80, but "
        "SGLang's parser, given the text, reads 123 or refuses it. ddtctl launches neither reading "
        "silently: a numeric flag whose text YAML and argparse read differently is an error. String "
        "flags get the text as written (`revision: 0123` launches `--revision 0123`, "
        "`served-model-name: no` launches `no`).\nFix: write the number in plain decimal.",
    ),
    "DDT013": (
        "a number outside its flag's range that SGLang does not check",
        "ddtctl knows ranges argparse does not express (ports 1-65535, group sizes >= 1, fractions in "
        "(0, 1], ...; ddtctl/schema/flag_models.py). Where SGLang 0.5.23 rejects a value outside one "
        "itself (its resolver raises, or its start-up is shown to fail), that value is an error, DDT002. "
        "Where SGLang launches it anyway (tests/fidelity/range_probe.py measures which), it is this "
        "warning: a static error would block a launch SGLang takes, and the value rarely means what was "
        "meant (`--port 0` binds a random port, `--stream-interval 0` streams every step).\nFix: use a "
        "value inside the range, or keep it and ignore DDT013 where it is meant.",
    ),
}


def ignore_refusal(rule_id: str) -> str | None:
    """Why `rule_id` cannot be ignored (unknown, or an error SGLang 0.5.23 rejects itself); None if it can."""

    all_rules()
    r = RULES.get(rule_id)
    if r is not None:
        severity, enforced = r.severity, r.sglang_enforces
    elif rule_id in BUILTIN_CHECKS:
        severity, enforced = BUILTIN_CHECKS[rule_id]
    else:
        return f"unknown rule {rule_id!r} (`ddtctl rules` lists them)"
    if severity == ERROR and enforced:
        return (
            f"{rule_id} cannot be ignored: SGLang {PINNED_SGLANG} rejects this launch itself "
            f"(only warnings, info and ddtctl-stricter errors can be ignored)"
        )
    return None


def parse_ignore_option(values: list[str] | None) -> dict[str, str]:
    """`--ignore DDT114 --ignore DDT805,DDT120` -> {rule id: reason}; else a UsageError naming the id."""
    out: dict[str, str] = {}
    for value in values or []:
        for part in value.split(","):
            rule_id = part.strip().upper()
            if not rule_id:
                continue
            refusal = ignore_refusal(rule_id)
            if refusal:
                raise UsageError(f"--ignore {part.strip()}: {refusal}")
            out[rule_id] = "--ignore on the command line"
    return out


def apply_ignores(result: ValidationResult, ignores: dict[str, str]) -> ValidationResult:
    """Move the findings of ignored rules to `result.ignored` (errors SGLang rejects itself stay reported)."""
    if not ignores or not result.findings:
        return result

    kept: list[Finding] = []
    for f in result.findings:
        rule_obj = RULES.get(f.rule)
        enforced = rule_obj.sglang_enforces if rule_obj else BUILTIN_CHECKS.get(f.rule, (ERROR, True))[1]
        if f.rule in ignores and not (f.severity == ERROR and enforced):
            result.ignored.append((f, ignores[f.rule]))
        else:
            kept.append(f)
    result.findings = kept
    result.valid = not any(f.severity == ERROR for f in kept)
    return result


def _profile_ignores(profile: Profile, lines: dict[str, int]) -> tuple[dict[str, str], list[Finding]]:
    """The profile's `ignore:` entries as {rule id: reason}, and an error finding for each that cannot be."""
    out: dict[str, str] = {}
    bad: list[Finding] = []
    for i, entry in enumerate(profile.ignore):
        rule_id = entry.rule.strip().upper()
        refusal = ignore_refusal(rule_id)
        if refusal:
            bad.append(
                Finding(
                    rule="DDT007",
                    severity=ERROR,
                    message=f"ignore[{i}].rule: {refusal}",
                    line=lines.get(f"ignore[{i}].rule") or lines.get("ignore"),
                    fix="remove this ignore entry",
                    key="ignore",
                )
            )
        else:
            out[rule_id] = entry.reason
    return out, bad


def validate_document(
    doc: ProfileDocument, *, gpu: str | None = None, ignore: dict[str, str] | None = None
) -> ValidationResult:
    """`ignore`: rule id -> reason (from --ignore), added to the profile's own `ignore:` entries."""
    result = _validate_document(doc, gpu=gpu)
    result.path, result.key_columns = doc.source, doc.key_columns
    if result.profile is None:
        return apply_ignores(result, dict(ignore or {}))
    own, bad = _profile_ignores(result.profile, doc.lines)
    if bad:
        result.findings = bad + result.findings
        result.valid = False
    return apply_ignores(result, {**(ignore or {}), **own})  # the profile's reason wins


def _validate_document(doc: ProfileDocument, *, gpu: str | None = None) -> ValidationResult:

    profile, schema_errors = build_profile(doc)
    if profile is None:
        findings = [
            Finding(
                rule="DDT007", severity=ERROR, message=f"{loc}: {msg}", line=line, fix=_schema_fix(loc, msg)
            )
            for loc, msg, line in schema_errors
        ]
        return _finish(doc.source, findings, {})
    catalog = extended_catalog(profile.sglang)
    flags = flags_from_server(profile.server, doc.lines, catalog)
    if "config" in flags.given:
        _merge_sglang_config(flags, doc, catalog)
    extra: list[Finding] = launch_value_findings(profile, doc.lines, catalog)
    model = _model_facts(
        profile.model.path, profile.model.architecture, profile.host, _revision(flags, "revision")
    )
    if (
        model is not None
        and model.source != "profile"
        and profile.model.architecture
        and model.architecture != profile.model.architecture
    ):
        extra.append(
            Finding(
                rule="DDT010",
                severity=ERROR,
                line=doc.lines.get("model.architecture"),
                message=f"model.architecture {profile.model.architecture} differs from config.json's "
                f"{model.architecture}",
                fix=f"set model.architecture: {model.architecture}",
                key="model.architecture",
            )
        )
    draft_path = flags.given.get("speculative_draft_model_path")
    draft_revision = _revision(flags, "speculative_draft_model_revision")
    draft = read_model_facts(draft_path, revision=draft_revision, what="draft model") or _cached_facts(
        profile.host, draft_path
    )
    gpu_spec = resolve_gpu(gpu) if gpu else (resolve_gpu(profile.hardware.gpu) if profile.hardware else None)
    if profile.hosts and len(profile.hosts) > 1 and "nnodes" not in flags.given:
        flags.given["nnodes"] = len(profile.hosts)
    return check_flags(
        flags,
        source=doc.source,
        model=model,
        draft=draft,
        gpu=gpu_spec,
        gpu_count=profile.hardware.count if profile.hardware else None,
        catalog=catalog,
        extra=extra,
        profile=profile,
        anchor_line=doc.lines.get("server"),
        env=dict(profile.env),
        env_lines={key: line for key, line in doc.lines.items() if key.startswith("env.")},
    )


def _merge_sglang_config(flags: FlagValues, doc: ProfileDocument, catalog: Any) -> None:
    """A profile's `server: {config: FILE}`: SGLang reads the file's flags first and the rendered command line
    over them, so the file is read by the same reader (`validate --argv -- --config FILE`) and its values fill
    in what `server:` does not set. A relative path is taken from the profile's directory."""
    path = Path(str(flags.given["config"]))
    if not path.is_absolute():
        path = Path(doc.source).parent / path
    line = doc.lines.get("server.config")
    try:
        parsed = parse_server_argv(["--config", str(path)], catalog)
    except DdtctlError as err:
        flags.findings.append(
            Finding(
                rule="DDT002",
                severity=ERROR,
                message=f"server.config: {err.message}",
                line=line,
                fix=err.fix,
                key="config",
            )  # fmt: skip
        )
        return
    from_file = flags_from_parsed(parsed, catalog)
    flags.findings += [f for f in from_file.findings if f.rule != "DDT008"]  # model.path overrides it
    for dest, value in from_file.given.items():
        if dest not in flags.given and dest != "model_path":
            flags.given[dest] = value
            flags.specs[dest] = from_file.specs[dest]
            flags.keys[dest] = from_file.keys[dest]
            flags.lines[dest] = line


def _schema_fix(loc: str, msg: str) -> str | None:
    if loc == "model" and "missing" in msg:
        return "add model: {path: /path/to/model}"
    if loc == "name" and "missing" in msg:
        return "add name: my-profile"
    return None


def validate_path(
    path: str | Path,
    *,
    gpu: str | None = None,
    ignore: dict[str, str] | None = None,
    overrides: Sequence[Override] = (),
) -> ValidationResult:
    """`overrides`: `--set KEY=VALUE` (ddtctl.profile_overrides), applied to the document before the schema;
    a KEY the profile cannot take stops the command (UsageError), as a bad option does."""
    try:
        doc = read_profile_document(path)
    except DdtctlError as err:
        return _unreadable(path, err)
    from ddtctl.validate_kinds import PROFILE, check_document, document_kind

    kind = document_kind(doc.data)
    if kind != PROFILE:  # hosts.yaml, a tune search space: checked as what they are, not failed as profiles
        try:
            note = check_document(str(path), kind)
        except DdtctlError as err:  # its line names the file already: not twice
            text = err.one_line().removeprefix(f"{printable(str(path))}: ")
            return ValidationResult(str(path), False, error=text, failure=err, path=str(path), kind=kind)
        return ValidationResult(str(path), True, path=str(path), kind=kind, note=note)
    if overrides:
        if _is_sglang_config(doc):
            raise UsageError(
                f"--set {overrides[0]}: {path} is an SGLang --config file, not a profile",
                fix="edit the file, or validate --argv -- --config FILE --flag VALUE",
            )
        apply_overrides(doc, overrides)
    try:
        if _is_sglang_config(doc):  # SGLang's own --config file (`render --as sglang-config` writes one)
            result = validate_argv(["--config", str(path)], gpu=gpu, ignore=ignore, source=str(path))
        else:
            result = validate_document(doc, gpu=gpu, ignore=ignore)
    except UsageError as err:  # e.g. a profile targeting an sglang release without a catalog
        return _unreadable(path, err)
    except ProfileError as err:  # an SGLang config SGLang could not read either
        return _unreadable(path, err)
    result.text, result.raw = doc.text, doc.raw
    return result


def _is_sglang_config(doc: ProfileDocument) -> bool:
    from ddtctl.sglang_config import is_sglang_config

    return is_sglang_config(doc.data, extended_catalog(PINNED_SGLANG), set(Profile.model_fields))


def _unreadable(path: str | Path, err: DdtctlError) -> ValidationResult:
    text = err.one_line()
    if err.where == str(path):  # the result names its source already: "f: f: is a FIFO" -> "f: is a FIFO"
        text = text.removeprefix(f"{printable(str(path))}: ")
    return ValidationResult(source=str(path), valid=False, error=text, failure=err, path=str(path))


def validate_paths(
    paths: list[str],
    *,
    gpu: str | None = None,
    ignore: dict[str, str] | None = None,
    overrides: Sequence[Override] = (),
) -> list[ValidationResult]:
    return [validate_path(p, gpu=gpu, ignore=ignore, overrides=overrides) for p in discover_profiles(paths)]


def validate_argv(
    argv: list[str],
    *,
    gpu: str | None = None,
    sglang: str = PINNED_SGLANG,
    source: str = "argv",
    ignore: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    use_hub: bool = True,
) -> ValidationResult:
    """`env`: the server process's environment where the caller knows it (deploy: the inventory's and the
    profile's `env:` merged, as the launch gets them). `use_hub=False`: a Hugging Face hub id's config.json
    is not fetched (deploy's preflight, when the hub cannot be reached from here)."""

    catalog = extended_catalog(sglang)
    # SGLang's parser: launcher and env prefix split off, SGLang's --config FILE expanded (command line wins)
    parsed = parse_server_argv(list(argv), catalog)
    return validate_parsed(parsed, catalog, gpu=gpu, source=source, ignore=ignore, env=env, use_hub=use_hub)


def validate_parsed(
    parsed: ParsedArgv,
    catalog: Catalog,
    *,
    gpu: str | None = None,
    source: str = "argv",
    ignore: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    use_hub: bool = True,
) -> ValidationResult:
    """validate_argv of an argv SGLang's parser has read already (deploy's typed launch: the render's own
    parse-back)."""
    flags = flags_from_parsed(parsed, catalog)
    flags.findings = [
        f for f in flags.findings if f.rule != "DDT008"
    ]  # a raw argv carries --model-path itself
    env = {**parsed.env, **(env or {})} if parsed.env else env
    model_path = parsed.get("model_path")
    extra = (
        []
        if model_path or not parsed.missing_model_path
        else [
            Finding(
                rule="DDT008",
                severity=ERROR,
                message="argv: --model-path is required",
                fix="add --model-path /path/to/model",
            )
        ]
    )
    model = read_model_facts(model_path, revision=_revision(flags, "revision"), use_hub=use_hub)
    draft = read_model_facts(
        flags.given.get("speculative_draft_model_path"),
        revision=_revision(flags, "speculative_draft_model_revision"),
        what="draft model",
        use_hub=use_hub,
    )
    gpu_spec = resolve_gpu(gpu) if gpu else None
    return apply_ignores(
        check_flags(
            flags,
            source=source,
            model=model,
            draft=draft,
            gpu=gpu_spec,
            gpu_count=None,
            catalog=catalog,
            extra=extra,
            env=env,
        ),
        dict(ignore or {}),
    )


__all__ = [
    "ValidationResult",
    "apply_ignores",
    "ignore_refusal",
    "parse_ignore_option",
    "validate_argv",
    "validate_parsed",
    "validate_document",
    "validate_path",
    "validate_paths",
    "ERROR",
    "WARNING",
    "INFO",
]
