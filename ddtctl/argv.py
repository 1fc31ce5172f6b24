"""Reading and masking an SGLang server argv (`--flag value`, `--flag=value`, `--switch`), in one place.

Which occurrence counts: SGLang parses its argv with argparse, where a store option given twice keeps the LAST
value. `flag_value` and `argv_to_flags` follow argparse, so ddtctl reads what the server will run with (deploy
read the first occurrence until issue #19; a rendered profile never repeats a flag, DDT009 refuses that, so
only a hand-written argv could tell the difference). `flag_occurrences` and `flag_values` return every
occurrence, for callers that rewrite each one (dry-run's model paths) or must notice any of them (the DDTREE
overlay).

These helpers know nothing of the flag catalog (nargs, switches); ddtctl.flags and ddtctl.diffflags parse an
argv against the catalog where that matters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

MASK = "***"
# Environment names that hold secrets (HF_TOKEN, OPENAI_API_KEY, ...).
SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL)", re.I)
# A flag is secret by its words (dash-separated), not by substrings: `--api-key`, `--admin-api-key`,
# `--hf-token`, `--ssl-keyfile-password`, `--watermark-key-b` are; `--max-total-tokens`,
# `--skip-tokenizer-init` and `--speculative-token-map` (a path) are not.
SECRET_WORDS = frozenset({"key", "apikey", "secret", "password", "passwd", "credential", "credentials"})
# Secret values shorter than this are not masked inside free text (a 1-3 character "secret" would mask half a
# log).
MIN_SECRET_LEN = 4


@dataclass(frozen=True)
class FlagOccurrence:
    """One occurrence of a flag that carries a value: where the value sits and how it was written."""

    value_index: (
        int  # index in argv of the token holding the value (the `--flag=value` token itself if inline)
    )
    flag: str
    inline: bool  # `--flag=value` (True) or `--flag value` (False)

    def value(self, argv: Sequence[str]) -> str:
        token = argv[self.value_index]
        return token.split("=", 1)[1] if self.inline else token


def flag_occurrences(argv: Sequence[str], flags: Iterable[str]) -> list[FlagOccurrence]:
    """Every occurrence of any of `flags` that has a value, in argv order (a trailing bare flag has none)."""
    names = tuple(flags)
    out = []
    for i, token in enumerate(argv):
        for flag in names:
            if token == flag and i + 1 < len(argv):
                out.append(FlagOccurrence(i + 1, flag, False))
            elif token.startswith(flag + "="):
                out.append(FlagOccurrence(i, flag, True))
    return out


def flag_values(argv: Sequence[str], *flags: str) -> list[str]:
    """The values of every occurrence of any of `flags` (aliases of one option), in argv order."""
    return [occ.value(argv) for occ in flag_occurrences(argv, flags)]


def flag_value(argv: Sequence[str], *flags: str) -> str | None:
    """The value argparse would keep for an option spelled as any of `flags`: the last occurrence wins. A last
    occurrence with no value (a bare flag at the end) gives None, as argparse would refuse it."""
    value = None
    for i, token in enumerate(argv):
        name, eq, inline = token.partition("=")
        if name in flags:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


def has_flag(argv: Sequence[str], flag: str) -> bool:
    """Whether `flag` appears at all (`--flag`, `--flag value` or `--flag=value`)."""
    return any(token == flag or token.startswith(flag + "=") for token in argv)


def argv_to_flags(argv: Sequence[str]) -> dict[str, str | bool]:
    """`--a 1 --b --c x` -> {"a": "1", "b": True, "c": "x"} (first-seen key order; a repeated flag keeps its
    last value, as argparse does). A token after `--x` that does not start with `--` is its value; positionals
    are skipped."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            i += 1
            continue
        key, eq, inline = token[2:].partition("=")
        if eq:
            out[key] = inline
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[key] = argv[i + 1]
            i += 2
        else:
            out[key] = True
            i += 1
    return out


# ----------------------------------------------------------------------------------------------- secrets
def is_secret_flag(flag: str) -> bool:
    """`--api-key`, `hf_token`, `--ssl-keyfile-password=x`: a flag (or flag key) whose value must not be
    shown."""
    words = flag.lstrip("-").split("=", 1)[0].replace("_", "-").lower().split("-")
    return bool(SECRET_WORDS & set(words)) or words[-1] == "token"


def is_secret_env(name: str) -> bool:
    return bool(SECRET_ENV.search(name))


def _secret_value_positions(argv: Sequence[str]) -> Iterable[tuple[int, bool]]:
    """(index, inline) of each secret flag's value; a secret flag followed by another flag is a switch."""
    for i, token in enumerate(argv):
        if not (token.startswith("--") and is_secret_flag(token)):
            continue
        if "=" in token:
            yield i, True
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            yield i + 1, False


def mask_argv(argv: Sequence[str]) -> list[str]:
    """`--api-key X` -> `--api-key ***` (also `--x-token=X`): secrets never reach a terminal or a report."""
    out = list(argv)
    for i, inline in _secret_value_positions(argv):
        out[i] = out[i].split("=", 1)[0] + "=" + MASK if inline else MASK
    return out


def mask_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_env(k) else v) for k, v in env.items()}


def secret_values(argv: Sequence[str], env: dict[str, str] | None = None) -> set[str]:
    """The secret values of an argv (and an environment), to mask wherever they appear in logs or errors."""
    values = {v for k, v in (env or {}).items() if is_secret_env(k)}
    for i, inline in _secret_value_positions(argv):
        values.add(argv[i].split("=", 1)[1] if inline else argv[i])
    return {v for v in values if len(v) >= MIN_SECRET_LEN}


def mask_text(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text
