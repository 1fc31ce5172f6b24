"""A finding and its severities: what every check of a launch returns (the rules, the flag values' own checks
in flags.py, validate's reader). The ground floor under rules/engine.py, so that flags.py does not import the
rule engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass
class Finding:
    rule: str
    severity: str
    message: str
    line: int | None = None
    fix: str | None = None
    key: str | None = None  # the profile key / option the finding is about
    edits: dict[str, Any] = field(
        default_factory=dict
    )  # profile key (dashed flag) -> new value (None = remove)
    unsafe: bool | None = (
        None  # the rule's own verdict on its edits (None: decided from the edits, ddtctl.fix)
    )
    fixable: str | None = (
        None  # "safe" | "unsafe" | None: what `validate --fix` can do (set by ddtctl.validate)
    )

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "line": self.line,
            "fix": self.fix,
            "fixable": self.fixable,
        }
