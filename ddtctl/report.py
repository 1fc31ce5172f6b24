"""The one JSON document every `--format json` command prints, and GitHub annotations for `--format github`.

    {"version": 1, "command": "validate", "ok": false, "results": {...},
     "error": null | {"message": ..., "where": ..., "fix": ..., "exit_code": 2}}

`ok` is true exactly when the exit code is 0. `results` is always an object, shaped by the command. A failure
that stops the command (bad usage, I/O, SSH) is `error`, with the exit code the process exits with
(ddtctl.errors.ExitCode); `results` is then null. A finding (a rule hit, an SGLang warning, a preflight check)
has the same keys in every command: FINDING_KEYS. Bump ENVELOPE_VERSION when a key is renamed or removed
(adding one is compatible).

Light on purpose (json and dataclasses only): the start-up fast path of `ddtctl validate` prints through it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

ENVELOPE_VERSION = 1

# Sub-applications of the CLI: their commands are named "group command" ("overlay build").
COMMAND_GROUPS = ("env", "kernels", "overlay")

SEVERITIES = ("error", "warning", "info")
FINDING_KEYS = ("id", "severity", "message", "file", "line", "column", "key", "fix", "fixable", "fix_safety")

_NULLABLE_STRING = {"type": ["string", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"], "minimum": 1}

FINDING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": list(FINDING_KEYS),
    "properties": {
        "id": {
            "type": ["string", "null"],
            "description": "rule id (DDT111); null for a warning SGLang logged without one",
        },
        "severity": {"enum": list(SEVERITIES)},
        "message": {"type": "string"},
        "file": _NULLABLE_STRING,
        "line": _NULLABLE_INT,
        "column": _NULLABLE_INT,
        "key": _NULLABLE_STRING,
        "fix": _NULLABLE_STRING,
        "fixable": {"type": "boolean", "description": "`validate --fix` can apply the fix"},
        "fix_safety": {
            "enum": ["safe", "unsafe", None],
            "description": "unsafe: applied only with --unsafe-fixes",
        },
    },
}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["message", "where", "fix", "exit_code"],
    "properties": {
        "message": {"type": "string"},
        "where": _NULLABLE_STRING,
        "fix": _NULLABLE_STRING,
        "exit_code": {"type": "integer", "minimum": 1},
    },
}

ENVELOPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ddtctl --format json output",
    "type": "object",
    "required": ["version", "command", "ok", "results", "error"],
    "additionalProperties": False,
    "properties": {
        "version": {"const": ENVELOPE_VERSION},
        "command": {"type": "string"},
        "ok": {"type": "boolean", "description": "true exactly when the exit code is 0"},
        "results": {"type": ["object", "null"]},
        "error": {"oneOf": [{"type": "null"}, ERROR_SCHEMA]},
    },
    "$defs": {"finding": FINDING_SCHEMA, "error": ERROR_SCHEMA},
}


@dataclass
class ErrorInfo:
    """What stopped a command, as the one-line error of text mode says it (what, where, how to fix)."""

    message: str
    exit_code: int
    where: str | None = None
    fix: str | None = None

    @classmethod
    def from_exception(cls, err: Any) -> "ErrorInfo":
        """From a DdtctlError (message, where, fix, exit_code)."""
        return cls(message=err.message, exit_code=err.exit_code, where=err.where, fix=err.fix)

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "where": self.where, "fix": self.fix, "exit_code": self.exit_code}


@dataclass
class Envelope:
    command: str
    ok: bool
    results: dict[str, Any] | None
    error: ErrorInfo | None = None
    version: int = field(default=ENVELOPE_VERSION)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "command": self.command,
            "ok": self.ok,
            "results": self.results,
            "error": self.error.to_json() if self.error else None,
        }


@dataclass
class FindingRecord:
    """One finding as every command reports it (FINDING_KEYS, in this order)."""

    id: str | None
    severity: str
    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    key: str | None = None
    fix: str | None = None
    fixable: bool = False
    fix_safety: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def line_first_columns(key_columns: dict[str, tuple[int, int]]) -> dict[int, int]:
    """Line -> the column of that line's first key, from a document's key columns."""
    firsts: dict[int, int] = {}
    for line, column in key_columns.values():
        if column < firsts.get(line, column + 1):
            firsts[line] = column
    return firsts


def finding_record(
    finding: Any,
    *,
    file: str | None,
    key_columns: dict[str, tuple[int, int]] | None = None,
    first_columns: dict[int, int] | None = None,
) -> FindingRecord:
    """A rule-engine Finding (ddtctl.rules.engine) as a record. `key_columns` ("server.tp-size" -> (line,
    column)) places its column: the finding's own key's when that key is on the finding's line (two keys of a
    one-line flow map each get their own), else the line's first key's. Callers that turn many findings of one
    document into records pass `line_first_columns(key_columns)` as `first_columns`: O(1) a record, not
    O(keys)."""
    line = finding.line
    known = key_columns or {}
    firsts = first_columns if first_columns is not None else line_first_columns(known)
    column = firsts.get(line) if line else None
    for path in (f"server.{finding.key}", str(finding.key)) if finding.key and line else ():
        if path in known and known[path][0] == line:
            column = known[path][1]
            break
    return FindingRecord(
        id=finding.rule,
        severity=finding.severity,
        message=finding.message,
        file=file,
        line=line,
        column=column,
        key=finding.key,
        fix=finding.fix,
        fixable=bool(finding.fixable),
        fix_safety=finding.fixable,
    )


_RULE_TAG = re.compile(r"\[(DDT\d{3})\]")


def warning_record(message: str, *, file: str | None) -> FindingRecord:
    """A warning SGLang (or the DDTREE payload) logged; its rule id when the text has one (`[DDT115] ...`)."""
    tag = _RULE_TAG.search(message)
    return FindingRecord(id=tag.group(1) if tag else None, severity="warning", message=message, file=file)


# -- printing ------------------------------------------------------------------------------------------------
class _State:
    emitted = False  # one document per process: an error after the results were printed stays on stderr


def emit(
    command: str, results: dict[str, Any] | None, *, exit_code: int, error: ErrorInfo | None = None
) -> None:
    """Print the envelope of `command` on stdout (ok: exit code 0 and no error)."""
    envelope = Envelope(command=command, ok=exit_code == 0 and error is None, results=results, error=error)
    sys.stdout.write(json.dumps(envelope.to_json(), indent=2, default=str) + "\n")
    sys.stdout.flush()
    _State.emitted = True


def start_run() -> None:
    """A new command in this process (the CLI's main() may run several times in one test process)."""
    _State.emitted = False


def emit_error(command: str, error: ErrorInfo) -> bool:
    """The envelope of a command that failed; False when this process already printed its document."""
    if _State.emitted:
        return False
    emit(command, None, exit_code=error.exit_code, error=error)
    return True


def _format_and_command(args: list[str]) -> tuple[str | None, str]:
    """(the `--format` value, the command name such as "validate" or "overlay build"), read before parsing."""
    words: list[str] = []
    fmt = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg == "--format" and i + 1 < len(args):
            fmt = args[i + 1]
            i += 2
            continue
        if arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif not arg.startswith("-") and len(words) < 2 and (not words or words[0] in COMMAND_GROUPS):
            words.append(arg)
        i += 1
    return fmt, " ".join(words) or "ddtctl"


def json_command(args: list[str]) -> str | None:
    """The command name ("validate", "overlay build") when `args` ask for `--format json`, else None. Read
    before parsing so that an error raised anywhere (option parsing included) still goes into the envelope."""
    fmt, command = _format_and_command(args)
    return command if fmt == "json" else None


def github_command(args: list[str]) -> str | None:
    """The command name when `args` ask for `--format github` (whole-command errors are annotations too)."""
    fmt, command = _format_and_command(args)
    return command if fmt == "github" else None


# -- GitHub Actions workflow commands ------------------------------------------------------------------------
_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotation(record: FindingRecord) -> str:
    """`::error file=F,line=L,col=C,title=DDT123::message` (escaped as @actions/core escapes it); the fix, if
    any, on a second line of the message."""
    props = (("file", record.file), ("line", record.line), ("col", record.column), ("title", record.id))
    head = ",".join(f"{name}={_escape_property(str(value))}" for name, value in props if value is not None)
    message = record.message + (f"\nfix: {record.fix}" if record.fix else "")
    level = _GITHUB_LEVEL.get(record.severity, "error")
    return f"::{level}{' ' + head if head else ''}::{_escape_data(message)}"


def github_error(command: str, error: ErrorInfo) -> str:
    """A whole-command error (not a finding) as one workflow command (`::error title=ddtctl validate::...`),
    with `file=` when the error is about a profile file and the fix on a second line."""
    where = error.where or ""
    is_file = where.endswith((".yaml", ".yml")) or os.path.isfile(where)
    message = error.message if is_file or not where else f"{where}: {error.message}"
    return github_annotation(
        FindingRecord(
            id=f"ddtctl {command}",
            severity="error",
            message=message,
            file=where if is_file else None,
            fix=error.fix,
        )
    )
