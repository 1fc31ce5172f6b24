"""The fidelity corpus: load cases.yaml, run every case through SGLang's own resolver (one warm worker) and through
ddtctl's static validator, and compare. Shared by test_fidelity.py, report.py (`make fidelity`) and record.py."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
CASES_FILE = HERE / "cases.yaml"
SGLANG = "0.5.23"


@dataclass
class Case:
    id: str
    gpu: str | None
    argv_text: str
    expected_sglang: str | None  # accepted | rejected
    sglang_error_type: str | None = None
    sglang_hook: str | None = None
    sglang_message: str | None = None
    expect_rules: list[str] = field(default_factory=list)
    # non-error static findings the case must show (e.g. DDT115: "SGLang overrides this"), and the values SGLang must
    # resolve in place of the user's for them (field -> value, checked against the live resolver)
    expect_findings: list[str] = field(default_factory=list)
    sglang_overrides: dict[str, Any] = field(default_factory=dict)
    stricter_by_design: str | None = None
    note: str | None = None
    overlay: str | None = None  # "ddtree": resolved with the DDTREE payload view first on sys.path

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.argv_text.replace("{models}", str(MODELS)))


def load_cases(path: Path = CASES_FILE) -> list[Case]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    cases = []
    seen = set()
    for raw in data["cases"]:
        if raw["id"] in seen:
            raise ValueError(f"duplicate case id {raw['id']}")
        seen.add(raw["id"])
        argv = raw["argv"]
        if isinstance(argv, list):
            argv = shlex.join(argv)
        cases.append(
            Case(
                id=raw["id"],
                gpu=raw.get("gpu"),
                argv_text=argv,
                expected_sglang=raw.get("expected_sglang"),
                sglang_error_type=raw.get("sglang_error_type"),
                sglang_hook=raw.get("sglang_hook"),
                sglang_message=raw.get("sglang_message"),
                expect_rules=list(raw.get("expect_rules") or []),
                expect_findings=list(raw.get("expect_findings") or []),
                sglang_overrides=dict(raw.get("sglang_overrides") or {}),
                stricter_by_design=raw.get("stricter_by_design"),
                note=raw.get("note"),
                overlay=raw.get("overlay"),
            )
        )
    return cases


def portable(text: Any) -> Any:
    """Messages with the checkout's model dir replaced by {models}, so recorded messages compare anywhere."""
    if isinstance(text, str):
        return text.replace(str(MODELS), "{models}")
    return text


def overlay_path(kind: str | None) -> list[str]:
    """sys.path entries for a case: [] for plain SGLang, the built DDTREE payload view for overlay: ddtree."""
    if not kind:
        return []
    if kind != "ddtree":
        raise ValueError(f"unknown overlay {kind!r}")
    from ddtctl.overlay.dryrun_support import overlay_sys_path

    return overlay_sys_path("auto", argvs=[["--speculative-algorithm", "DDTREE"]])


def new_client(case: Case, python: Any):
    from ddtctl.bridge.client import ResolverClient

    return ResolverClient(python, extra_sys_path=overlay_path(case.overlay))


def run_sglang(cases: list[Case], client: Any = None, overlay_client: Any = None, **kwargs) -> dict[str, Any]:
    """case id -> DryRunResult. Plain-SGLang cases all go through one warm resolver; the DDTREE cases through a
    second one whose sys.path starts with the payload view (as `ddtctl dry-run --overlay auto` does)."""
    from ddtctl.dryrun import dry_run_argvs

    out: dict[str, Any] = {}
    plain = [c for c in cases if not c.overlay]
    over = [c for c in cases if c.overlay]
    if plain:
        for r in dry_run_argvs([(c.id, c.argv, c.gpu) for c in plain], client=client, **kwargs):
            out[r.source] = r
    if over:
        extra = overlay_path(over[0].overlay)
        for r in dry_run_argvs([(c.id, c.argv, c.gpu) for c in over], client=overlay_client,
                               extra_sys_path=extra, **kwargs):
            out[r.source] = r
    return out


def run_static(cases: list[Case]) -> dict[str, Any]:
    from ddtctl.validate import validate_argv

    return {c.id: validate_argv(c.argv, gpu=c.gpu, sglang=SGLANG, source=c.id) for c in cases}


@dataclass
class Row:
    case: Case
    sglang_accepted: bool
    sglang_error: dict | None
    static_valid: bool
    static_errors: list[tuple[str, str]]  # (rule, message)
    outcome: str  # agree | stricter-by-design | disagree
    problem: str = ""  # why it is a disagreement


def compare(cases: list[Case], sglang: dict[str, Any], static: dict[str, Any]) -> list[Row]:
    rows = []
    for c in cases:
        s = sglang[c.id]
        v = static[c.id]
        errors = [(f.rule, f.message) for f in v.findings if f.severity == "error"]
        rules = {r for r, _ in errors}
        problem = ""
        if s.accepted and v.valid:
            outcome = "agree"
        elif not s.accepted and not v.valid:
            if c.expect_rules and not rules & set(c.expect_rules):
                outcome = "disagree"
                problem = f"static rejects, but not for SGLang's cause: expected {c.expect_rules}, got {sorted(rules)}"
            else:
                outcome = "agree"
        elif s.accepted and not v.valid:
            if c.stricter_by_design and (not c.expect_rules or rules & set(c.expect_rules)):
                outcome = "stricter-by-design"
            else:
                outcome = "disagree"
                problem = "static rejects what SGLang accepts" + (
                    f" (stricter_by_design expects {c.expect_rules}, got {sorted(rules)})" if c.stricter_by_design else ""
                )
        else:
            outcome = "disagree"
            problem = "static accepts what SGLang rejects" + (
                f" (expected {c.expect_rules})" if c.expect_rules else " (no static rule covers this cause yet)"
            )
        if c.stricter_by_design and outcome == "agree" and s.accepted:
            outcome = "disagree"
            problem = f"listed stricter-by-design, but static accepts (expected {c.expect_rules})"
        missing = sorted(set(c.expect_findings) - {f.rule for f in v.findings})
        if missing and outcome != "disagree":
            outcome = "disagree"
            problem = f"static does not report {missing}"
        rows.append(Row(c, s.accepted, s.error, v.valid, errors, outcome, problem))
    return rows


def recorded_mismatches(cases: list[Case], sglang: dict[str, Any]) -> list[str]:
    """Cases whose live SGLang verdict/error differs from the recorded one."""
    out = []
    for c in cases:
        r = sglang[c.id]
        live = "accepted" if r.accepted else "rejected"
        if r.setup_error:
            out.append(f"{c.id}: could not be resolved: {r.error}")
            continue
        if live != c.expected_sglang:
            msg = f" ({r.error['type']}: {portable(r.error['message'])})" if r.error else ""
            out.append(f"{c.id}: recorded {c.expected_sglang}, SGLang now says {live}{msg}")
            continue
        changed = {o["field"]: o["resolved"] for o in r.overrides}
        for name, want in c.sglang_overrides.items():
            if name not in changed or changed[name] != want:
                out.append(f"{c.id}: recorded that SGLang resolves {name}={want!r}, live "
                           + (f"{changed[name]!r}" if name in changed else "leaves it as given"))
        if not r.accepted:
            err = r.error or {}
            for key, want in (("type", c.sglang_error_type), ("hook", c.sglang_hook)):
                if want is not None and err.get(key) != want:
                    out.append(f"{c.id}: recorded error {key} {want!r}, live {err.get(key)!r}")
            live_msg = portable(err.get("message")) or ""
            if c.overlay:
                # The payload's messages come from ddtctl's own rules (ddtree_core, one source of truth): compare the
                # rule id SGLang-with-payload quotes, not the wording, which the rules' owner may improve.
                missing = [r for r in c.expect_rules if f"[{r}]" not in live_msg]
                if missing:
                    out.append(f"{c.id}: SGLang with the payload does not quote {missing}: {live_msg!r}")
            elif c.sglang_message is not None and live_msg != c.sglang_message:
                out.append(f"{c.id}: recorded message {c.sglang_message!r}, live {live_msg!r}")
    return out


def table(rows: list[Row]) -> str:
    n = len(rows)
    agree = sum(r.outcome == "agree" for r in rows)
    stricter = sum(r.outcome == "stricter-by-design" for r in rows)
    disagree = [r for r in rows if r.outcome == "disagree"]
    rejected = sum(not r.sglang_accepted for r in rows)
    lines = [
        f"fidelity: static `validate` vs SGLang {SGLANG}'s own resolver",
        "",
        "| cases | SGLang rejects | agree | stricter-by-design | disagree |",
        "|------:|---------------:|------:|-------------------:|---------:|",
        f"| {n} | {rejected} | {agree} | {stricter} | {len(disagree)} |",
    ]
    by_gpu: dict[str, list[Row]] = {}
    for r in rows:
        by_gpu.setdefault(_sm(r.case.gpu), []).append(r)
    lines += ["", "| GPU | cases | agree | stricter | disagree |", "|---|---:|---:|---:|---:|"]
    for gpu, rs in sorted(by_gpu.items()):
        lines.append(
            f"| {gpu} | {len(rs)} | {sum(r.outcome == 'agree' for r in rs)} | "
            f"{sum(r.outcome == 'stricter-by-design' for r in rs)} | {sum(r.outcome == 'disagree' for r in rs)} |"
        )
    if stricter:
        lines += ["", "stricter by design:"]
        for r in rows:
            if r.outcome == "stricter-by-design":
                lines.append(f"  {r.case.id}: {', '.join(sorted({x for x, _ in r.static_errors}))} — "
                             f"{r.case.stricter_by_design}")
    if disagree:
        lines += ["", "disagreements:"]
        for r in disagree:
            sg = "accepted" if r.sglang_accepted else (
                f"rejected: {r.sglang_error['type']} in {r.sglang_error['hook']}: {portable(r.sglang_error['message'])}"
            )
            st = "valid" if r.static_valid else "invalid: " + "; ".join(f"{a} {portable(b)}" for a, b in r.static_errors)
            lines.append(f"  {r.case.id} [{r.case.gpu}] — {r.problem}")
            lines.append(f"      argv:   {r.case.argv_text}")
            lines.append(f"      SGLang: {sg}")
            lines.append(f"      static: {st}")
    return "\n".join(lines)


def _sm(gpu: str | None) -> str:
    if gpu is None:
        return "none (--device cpu)"
    try:
        from ddtctl.schema.gpus import resolve_gpu

        return f"sm{resolve_gpu(gpu).sm}"
    except Exception:
        return str(gpu)


KNOWN_FILE = HERE / "known_disagreements.yaml"


def load_known_disagreements() -> dict[str, str]:
    """Disagreements the static rules still have, each with who/what fixes it. The fidelity test marks these
    xfail(strict): fixing the rule makes the test XPASS-fail until the entry is removed here."""
    if not KNOWN_FILE.exists():
        return {}
    data = yaml.safe_load(KNOWN_FILE.read_text(encoding="utf-8")) or {}
    return {str(k): str(v) for k, v in (data.get("known") or {}).items()}


def notes_markdown(rows: list[Row], known: dict[str, str]) -> str:
    lines = ["# Fidelity disagreements (static `validate` vs SGLang 0.5.23's resolver)", "",
             "Generated by `tests/fidelity/report.py --notes` (`make fidelity` prints the same table).", "",
             "```", table(rows), "```", ""]
    dis = [r for r in rows if r.outcome == "disagree"]
    if dis:
        lines += ["## Per disagreement", ""]
        for r in dis:
            lines.append(f"- **{r.case.id}** ({r.case.gpu}): {r.problem}")
            if r.case.note:
                lines.append(f"  - evidence: {r.case.note}")
            if r.case.id in known:
                lines.append(f"  - tracked: {known[r.case.id]}")
    return "\n".join(lines) + "\n"
