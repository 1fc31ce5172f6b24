"""Reading `--format json` output in tests: one envelope (ddtctl/report.py), checked against its schema."""

from __future__ import annotations

import json
from typing import Any

from ddtctl.report import ENVELOPE_SCHEMA, ENVELOPE_VERSION, ERROR_SCHEMA, FINDING_KEYS, SEVERITIES

# Lists of findings inside results, by key: every entry has exactly the finding keys (+ these extras). Other
# lists of findings (migrate's `removed`, deploy's `checks`) are checked by their commands' tests.
FINDING_LISTS = {"findings": set(), "warnings": {"blocking"}, "ignored": {"reason"}}


def check_envelope(doc: Any) -> None:
    """The envelope's keys and types (ENVELOPE_SCHEMA), and the shape of every finding in its results."""
    assert isinstance(doc, dict) and list(doc) == ENVELOPE_SCHEMA["required"], doc
    assert doc["version"] == ENVELOPE_VERSION and isinstance(doc["command"], str)
    assert isinstance(doc["ok"], bool)
    if doc["error"] is None:
        assert isinstance(doc["results"], dict), doc
    else:
        assert set(doc["error"]) == set(ERROR_SCHEMA["required"]) and isinstance(doc["error"]["message"], str)
        assert isinstance(doc["error"]["exit_code"], int) and doc["error"]["exit_code"] > 0
        assert doc["ok"] is False and doc["results"] is None
    _check_findings(doc["results"])


def _check_findings(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in FINDING_LISTS and isinstance(value, list) and value and isinstance(value[0], dict):
                for finding in value:
                    assert set(finding) - FINDING_LISTS[key] == set(FINDING_KEYS), (key, finding)
                    assert finding["severity"] in SEVERITIES and isinstance(finding["fixable"], bool), finding
            _check_findings(value)
    elif isinstance(node, list):
        for item in node:
            _check_findings(item)


def envelope(stdout: str, command: str) -> dict[str, Any]:
    """The whole envelope of `command` (stdout holds exactly one JSON document)."""
    doc = json.loads(stdout)
    check_envelope(doc)
    assert doc["command"] == command, doc["command"]
    return doc


def results(stdout: str, command: str) -> Any:
    """The results of a command that did not fail (`error` is null)."""
    doc = envelope(stdout, command)
    assert doc["error"] is None, doc["error"]
    return doc["results"]


def error(stdout: str, command: str, exit_code: int) -> dict[str, Any]:
    """The error of a command that failed with `exit_code`."""
    doc = envelope(stdout, command)
    assert doc["error"] is not None and doc["error"]["exit_code"] == exit_code, doc
    return doc["error"]
