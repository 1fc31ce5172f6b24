"""`ddtctl validate --format sarif`: one SARIF 2.1.0 log (OASIS), as code-scanning services read it.

One run: `tool.driver` names ddtctl and describes each rule the results refer to (`ruleIndex` points into
`rules`); each finding is a result with its `ruleId`, `level` (error, warning, note for info), `message` (the
fix on a second line) and a `physicalLocation` (the file relative to `%SRCROOT%`, the current directory, and
the region's `startLine` / `startColumn` where known). A profile that could not be read is a
`toolExecutionNotification` of the run's invocation, whose `exitCode` is the process's. tests/cli check the
log against the official schema.

Light on purpose (json, pathlib, urllib): the start-up fast path of `ddtctl validate` prints through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from ddtctl.rule_select import rule_meta

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _artifact(file: str) -> dict[str, Any]:
    path = Path(file)
    if path.is_absolute():
        return {"uri": path.as_uri()}
    return {"uri": quote(path.as_posix()), "uriBaseId": SRCROOT}


def _location(record: Any) -> list[dict[str, Any]]:
    if not record.file:
        return []
    physical: dict[str, Any] = {"artifactLocation": _artifact(record.file)}
    if record.line:
        physical["region"] = {"startLine": record.line, "startColumn": record.column or 1}
    return [{"physicalLocation": physical}]


def _message(record: Any) -> dict[str, str]:
    return {"text": record.message + (f"\nfix: {record.fix}" if record.fix else "")}


def _rule(rule_id: str) -> dict[str, Any]:

    title, severity, enforced, doc = rule_meta(rule_id)
    rule: dict[str, Any] = {
        "id": rule_id,
        "shortDescription": {"text": title},
        "defaultConfiguration": {"level": _LEVEL.get(severity, "error")},
        "help": {"text": f"`ddtctl explain {rule_id}`"},
        "properties": {"sglang_enforces": enforced},
    }
    if doc:
        rule["fullDescription"] = {"text": doc}
    return rule


def _result(record: Any, index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {"level": _LEVEL.get(record.severity, "error"), "message": _message(record)}
    if record.id:
        result["ruleId"] = record.id
        result["ruleIndex"] = index[record.id]
    locations = _location(record)
    if locations:
        result["locations"] = locations
    properties = {"key": record.key, "fixable": record.fixable, "fix_safety": record.fix_safety}
    result["properties"] = {name: value for name, value in properties.items() if value is not None}
    return result


def sarif_log(findings: list[Any], failures: list[Any], *, exit_code: int, version: str) -> dict[str, Any]:
    """The log of `findings` (ddtctl.report.FindingRecord) and `failures` (records of the profiles that could
    not be read); `exit_code` the process's, `version` ddtctl's."""
    rule_ids = sorted({f.id for f in findings if f.id})
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}
    notifications = [
        dict(
            {"level": "error", "message": _message(f)},
            **({"locations": loc} if (loc := _location(f)) else {}),
        )
        for f in failures
    ]
    invocation: dict[str, Any] = {"executionSuccessful": exit_code in (0, 1), "exitCode": exit_code}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run = {
        "tool": {"driver": {"name": "ddtctl", "version": version, "rules": [_rule(i) for i in rule_ids]}},
        "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().absolute().as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",
        "invocations": [invocation],
        "results": [_result(f, index) for f in findings],
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
