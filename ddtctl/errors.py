"""One error hierarchy; exit codes are decided here and nowhere else."""

from __future__ import annotations

import re

# C0 controls but tab, DEL and C1 controls: a newline would break the one-line contract, an ESC lets a profile
# key or a file name repaint the user's terminal (issue #14 corpus: `"\x1b[31mred": 1` under `server:`).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    """`text` with control characters written as escapes (\\n, \\x1b), safe to print on one terminal line."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


class ExitCode:
    OK = 0
    INVALID = 1  # a profile is invalid / rejected by SGLang / a check failed
    USAGE = 2  # bad input, I/O error, missing environment
    REMOTE = 3  # SSH / remote host failure
    OVERLAY = 4  # payload build / verify / install failure
    DEPLOY = 5  # deploy failed (and was rolled back)
    INCONCLUSIVE = 6  # a measurement cannot back the action asked (tune --write: winner within the noise)
    CONFIG = 7  # the repository configuration ([tool.ddtctl] in pyproject.toml, .ddtctl.toml) is invalid
    HUB = 8  # the Hugging Face hub could not give a model's config.json (unreachable, repo/file gone, gated)
    INTERNAL = 70  # a ddtctl bug (EX_SOFTWARE): an exception nothing maps to a user error
    INTERRUPTED = 130


class DdtctlError(Exception):
    """Base of every error ddtctl reports to a user as one line."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix

    def one_line(self) -> str:
        parts = []
        if self.where:
            parts.append(f"{self.where}: ")
        parts.append(self.message)
        if self.fix:
            parts.append(f" (fix: {self.fix})")
        return printable("".join(parts))

    def __str__(self) -> str:
        return self.one_line()


class UsageError(DdtctlError):
    exit_code = ExitCode.USAGE


class ProfileError(DdtctlError):
    """A profile file cannot be read or parsed (I/O, YAML, structure)."""

    exit_code = ExitCode.USAGE


class ConfigError(DdtctlError):
    """The repository configuration (ddtctl.repo_config) cannot be read or holds a bad key: `where` names the
    file, the message the key."""

    exit_code = ExitCode.CONFIG


class EnvironmentMissing(DdtctlError):
    """The managed SGLang environment (or another prerequisite) is absent or broken."""

    exit_code = ExitCode.USAGE


class RuleViolation(DdtctlError):
    exit_code = ExitCode.INVALID


class RemoteError(DdtctlError):
    exit_code = ExitCode.REMOTE


class OverlayError(DdtctlError):
    exit_code = ExitCode.OVERLAY


class DeployError(DdtctlError):
    exit_code = ExitCode.DEPLOY


class HubError(DdtctlError):
    """A model named by its Hugging Face hub id whose config.json the hub could not give (ddtctl.hub)."""

    exit_code = ExitCode.HUB


class Inconclusive(DdtctlError):
    """The figures measured do not show what the action needs (e.g. a tune winner within the run-to-run spread
    of the baseline)."""

    exit_code = ExitCode.INCONCLUSIVE
