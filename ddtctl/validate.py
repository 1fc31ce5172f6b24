"""`ddtctl validate`: a profile (or a raw argv) checked against the flag catalog and the constraint graph.

Never imports torch, sglang or paramiko: this is the fast path pre-commit runs on every commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtctl import PINNED_SGLANG
from ddtctl.errors import DdtctlError, UsageError
from ddtctl.flags import FlagValues, flags_from_argv, flags_from_server
from ddtctl.model_facts import ModelFacts, facts_from_architecture, read_model_facts
from ddtctl.profile import Profile, ProfileDocument, build_profile, discover_profiles, read_profile_document
from ddtctl.rules.engine import ERROR, INFO, SEVERITY_ORDER, WARNING, Context, Finding, run_rules
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

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "valid": self.valid,
                               "findings": [f.as_json() for f in self.findings]}
        if self.error:
            out["error"] = self.error
        if self.fix_refused:
            out["fix_refused"] = self.fix_refused
        return out

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]


def _finish(source: str, findings: list[Finding], skipped: dict[str, str], **kw: Any) -> ValidationResult:
    if skipped:
        reasons = sorted(set(skipped.values()))
        findings.append(Finding(
            rule="DDT000", severity=WARNING,
            message=f"cannot check {', '.join(sorted(skipped))}: {'; '.join(reasons)}",
            fix="see `ddtctl explain DDT000`"))
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.line or 0, f.rule))
    valid = not any(f.severity == ERROR for f in findings)
    return ValidationResult(source=source, valid=valid, findings=findings, skipped=skipped, **kw)


def _model_facts(profile_model_path: str | None, architecture: str | None, host: str | None) -> ModelFacts | None:
    facts = read_model_facts(profile_model_path) or _cached_facts(host, profile_model_path)
    if facts is None and architecture:
        return facts_from_architecture(architecture)
    return facts


def _cached_facts(host: str | None, path: str | None) -> ModelFacts | None:
    """config.json fetched from the host by `ddtctl facts` / `deploy` (see ddtctl.remote)."""
    if not host or not path:
        return None
    from ddtctl.paths import model_config_cache_dir

    return read_model_facts(model_config_cache_dir(host, path))


def check_flags(flags: FlagValues, *, source: str, model: ModelFacts | None, draft: ModelFacts | None,
                gpu: GpuSpec | None, gpu_count: int | None, catalog, extra: list[Finding] | None = None,
                anchor_line: int | None = None, **kw: Any) -> ValidationResult:
    ctx = Context(given=flags.given, defaults={s.dest: s.default for s in catalog.flags}, lines=flags.lines,
                  keys=flags.keys, model=model, draft=draft, gpu=gpu, gpu_count=gpu_count,
                  anchor_line=flags.lines.get("speculative_algorithm") or anchor_line)
    findings = list(extra or []) + list(flags.findings)
    rule_findings, skipped = run_rules(ctx)
    findings.extend(rule_findings)
    return _finish(source, findings, skipped, flags=flags, model=model, draft=draft, **kw)


def validate_document(doc: ProfileDocument, *, gpu: str | None = None) -> ValidationResult:
    from ddtctl.schema.extensions import extended_catalog

    profile, schema_errors = build_profile(doc)
    if profile is None:
        findings = [Finding(rule="DDT007", severity=ERROR, message=f"{loc}: {msg}", line=line,
                            fix=_schema_fix(loc, msg)) for loc, msg, line in schema_errors]
        return _finish(doc.source, findings, {})
    catalog = extended_catalog(profile.sglang)
    flags = flags_from_server(profile.server, doc.lines, catalog)
    extra: list[Finding] = []
    model = _model_facts(profile.model.path, profile.model.architecture, profile.host)
    if model is not None and model.source != "profile" and profile.model.architecture and \
            model.architecture != profile.model.architecture:
        extra.append(Finding(rule="DDT010", severity=ERROR, line=doc.lines.get("model.architecture"),
                             message=f"model.architecture {profile.model.architecture} differs from config.json's "
                                     f"{model.architecture}", fix=f"set model.architecture: {model.architecture}",
                             key="model.architecture"))
    draft_path = flags.given.get("speculative_draft_model_path")
    draft = read_model_facts(draft_path) or _cached_facts(profile.host, draft_path)
    gpu_spec = resolve_gpu(gpu) if gpu else (resolve_gpu(profile.hardware.gpu) if profile.hardware else None)
    if profile.hosts and len(profile.hosts) > 1 and "nnodes" not in flags.given:
        flags.given["nnodes"] = len(profile.hosts)
    return check_flags(flags, source=doc.source, model=model, draft=draft, gpu=gpu_spec,
                       gpu_count=profile.hardware.count if profile.hardware else None, catalog=catalog,
                       extra=extra, profile=profile, anchor_line=doc.lines.get("server"))


def _schema_fix(loc: str, msg: str) -> str | None:
    if loc == "model" and "missing" in msg:
        return "add model: {path: /path/to/model}"
    if loc == "name" and "missing" in msg:
        return "add name: my-profile"
    return None


def validate_path(path: str | Path, *, gpu: str | None = None) -> ValidationResult:
    try:
        doc = read_profile_document(path)
    except DdtctlError as err:
        return ValidationResult(source=str(path), valid=False, error=err.one_line())
    try:
        result = validate_document(doc, gpu=gpu)
    except UsageError as err:  # e.g. a profile targeting an sglang release without a catalog
        return ValidationResult(source=str(path), valid=False, error=err.one_line())
    result.text, result.raw = doc.text, doc.raw
    return result


def validate_paths(paths: list[str], *, gpu: str | None = None) -> list[ValidationResult]:
    return [validate_path(p, gpu=gpu) for p in discover_profiles(paths)]


def validate_argv(argv: list[str], *, gpu: str | None = None, sglang: str = PINNED_SGLANG,
                  source: str = "argv") -> ValidationResult:
    from ddtctl.schema.extensions import extended_catalog
    from ddtctl.sglang_config import expand_config_argv

    catalog = extended_catalog(sglang)
    argv = expand_config_argv(list(argv), catalog)  # SGLang's own --config FILE, expanded as SGLang does
    flags = flags_from_argv(list(argv), catalog)
    flags.findings = [f for f in flags.findings if f.rule != "DDT008"]  # a raw argv carries --model-path itself
    model_path = _option_value(argv, catalog.get("model-path"))
    extra = [] if model_path else [Finding(rule="DDT008", severity=ERROR, message="argv: --model-path is required",
                                           fix="add --model-path /path/to/model")]
    model = read_model_facts(model_path)
    draft = read_model_facts(flags.given.get("speculative_draft_model_path"))
    gpu_spec = resolve_gpu(gpu) if gpu else None
    return check_flags(flags, source=source, model=model, draft=draft, gpu=gpu_spec, gpu_count=None,
                       catalog=catalog, extra=extra)


def _option_value(argv: list[str], spec) -> str | None:
    """The value given to a store option in argv (`--opt v` or `--opt=v`; the last one wins, as in argparse)."""
    value = None
    options = spec.option_strings if spec else ()
    for i, token in enumerate(argv):
        name, eq, inline = token.partition("=")
        if name in options:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


__all__ = ["ValidationResult", "validate_argv", "validate_document", "validate_path", "validate_paths",
           "ERROR", "WARNING", "INFO"]
