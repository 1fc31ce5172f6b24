"""Reading an SGLang server argv as SGLang does, and masking its secrets, in one place.

`parse_server_argv` is the one reader of an argv: one from outside (`validate --argv` / `--argv-file`,
`dry-run --argv`, a host's recorded release in deploy's plan and rollback, tune's benchmark key) and the
render's one parse-back, which becomes the profile's typed launch (ddtctl.server_argv.TypedLaunch: what
deploy, dry-run and diff-flags read, never its argv again). It is SGLang's own
argparse parser rebuilt from the release's flag catalog (ddtctl/argv_parser.py): prefixes (`--tp 8`), aliases
(`--model`), `--no-` forms, nargs and choices behave as in SGLang, a flag given twice keeps its last value,
`--config FILE` is expanded first so the command line overrides it (ddtctl/sglang_config.py), and a pasted
launch line's `sglang serve` / `python3 -m sglang.launch_server` and `ENV=x` prefix are split off.

`flag_occurrences` finds every occurrence of exact flag spellings, for the one caller that rewrites each
value in place (dry-run's model paths); it reads nothing back. The secret helpers mask by flag words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ddtctl import PINNED_SGLANG
from ddtctl.argv_parser import BAD, run, server_parser
from ddtctl.errors import UsageError
from ddtctl.safeio import read_regular
from ddtctl.schema.catalog import Catalog, FlagSpec
from ddtctl.schema.extensions import extended_catalog

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


# ----------------------------------------------------------------------------------------------- secrets
def is_secret_flag(flag: str) -> bool:
    """`--api-key`, `hf_token`, `--ssl-keyfile-password=x`: a flag (or flag key) whose value must not be
    shown."""
    words = flag.lstrip("-").split("=", 1)[0].replace("_", "-").lower().split("-")
    return bool(SECRET_WORDS & set(words)) or words[-1] == "token"


def is_secret_env(name: str) -> bool:
    return bool(SECRET_ENV.search(name))


_LONG_OPTIONS: list[str] = []


def _abbreviates_secret(token: str) -> bool:
    """`--api-ke`: SGLang's argparse takes a prefix of a flag, so a prefix of a secret flag is secret too (any
    flag it could complete to being secret is enough: over-masking is harmless)."""
    name = token.split("=", 1)[0]
    if len(name) < 4:
        return False
    if not _LONG_OPTIONS:
        _LONG_OPTIONS.extend(o for s in extended_catalog(PINNED_SGLANG) for o in s.option_strings)
    if name in _LONG_OPTIONS:
        return False
    return any(o.startswith(name) and is_secret_flag(o) for o in _LONG_OPTIONS)


def _secret_value_positions(argv: Sequence[str]) -> Iterable[tuple[int, bool]]:
    """(index, inline) of each secret flag's value; a secret flag followed by another flag is a switch."""
    for i, token in enumerate(argv):
        if not (token.startswith("--") and (is_secret_flag(token) or _abbreviates_secret(token))):
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


# ------------------------------------------------------------------------------------------ the argv reader
# One reader for every SGLang argv ddtctl reads (validate/dry-run --argv, a recorded release, render's
# parse-back): `parse_server_argv`, on SGLang's parser rebuilt from the catalog (ddtctl/argv_parser.py).


MULTI_NODE_FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr")  # set per node: deploy, render --as


def refuse_multi_node_flags(given: dict, source: str, why: str) -> None:
    """The multi-node flags are ddtctl's to set per node (deploy's hosts, render's engines), not the
    profile's."""
    for flag in MULTI_NODE_FLAGS:
        if flag[2:].replace("-", "_") in given:
            raise UsageError(
                f"{flag} is set in the profile; {why}", where=source, fix=f"remove {flag} from server:"
            )


LAUNCHERS = ("python -m sglang.launch_server", "python3 -m sglang.launch_server", "sglang serve")
ARGV_FILE_LIMIT = 1 << 20  # a pasted launch line, not a data file
_ENV_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_PY_SWITCHES = frozenset({"-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-P"})
_SHELL_OPERATORS = frozenset({"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", "&>"})


@dataclass(frozen=True)
class Occurrence:
    """One option as argparse matched it: how it was written, the flag it resolved to, the strings it took."""

    option: str  # the spelling argparse matched (an alias stays itself; a prefix `--tp` is `--tp-size`)
    spec: FlagSpec
    raw: tuple[str, ...]  # the value strings argparse consumed (empty for a switch)
    from_config: bool  # from SGLang's `--config FILE`, not the command line
    error: str | None = None  # argparse's refusal of the value (type, choices), as SGLang would print it

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def negated(self) -> bool:
        """`--no-x` of a BooleanOptionalAction."""
        return self.option.startswith("--no-") and self.spec.action == "boolean_optional"


@dataclass
class Launch:
    """A launch line split into its parts: `FOO=1 sglang serve --tp 8` -> env, launcher, SGLang argv."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    launcher: str | None = None  # one of LAUNCHERS (spelled as given: /usr/bin/python3.11 ...), or None


@dataclass
class ParsedArgv:
    """What SGLang's parser makes of an argv, keyed by dest."""

    argv: list[str]  # what the parser read: launcher stripped, `--config FILE` expanded (config part first)
    namespace: dict[str, Any]  # every dest, defaults included, typed as argparse types them
    occurrences: list[Occurrence]
    unknown: list[str] = field(default_factory=list)  # options argparse did not recognise
    unknown_tokens: list[str] = field(default_factory=list)  # every token argparse left (options and values)
    positional: list[str] = field(default_factory=list)  # stray non-option tokens
    errors: list[str] = field(default_factory=list)  # argparse's own messages, first = what SGLang prints
    missing: list[FlagSpec] = field(default_factory=list)  # required flags not given (--model-path)
    env: dict[str, str] = field(default_factory=dict)  # the launch line's env prefix
    launcher: str | None = None
    config: str | None = None  # SGLang --config file, when one was expanded
    n_config: int = 0  # argv[:n_config] came from the config file
    help: bool = False  # -h/--help was given (SGLang prints help and exits)

    @property
    def ok(self) -> bool:
        """SGLang's parser would accept it (argparse level: not yet ServerArgs' own checks)."""
        return not (self.errors or self.unknown or self.positional or self.missing)

    @property
    def given(self) -> dict[str, Any]:
        """dest -> value for the flags the argv sets (last occurrence wins), refused values left out."""
        out = {}
        for occ in self.occurrences:
            value = self.namespace.get(occ.spec.dest, BAD)
            if value is not BAD and not (isinstance(value, list) and BAD in value):
                out[occ.spec.dest] = value
        return out

    @property
    def missing_model_path(self) -> bool:
        """--model-path is required and missing (not known when the parse broke off)."""
        return any(s.dest == "model_path" for s in self.missing)

    def get(self, name: str, default: Any = None) -> Any:
        """The value SGLang runs with for a dest or flag name (`port`, `--tp-size`, `tp_size`)."""
        dest = name.lstrip("-").replace("-", "_")
        value = self.namespace.get(dest, default)
        return default if value is BAD else value

    def flags(self) -> dict[str, Any]:
        """Flag name -> value as written, argparse's last occurrence deciding (`--tp 8` -> {"tp-size": "8"}; a
        switch true, its `--no-` form false; several values space-joined); then the options argparse did not
        know, by their spelling (with the token after them, or true)."""
        out: dict[str, Any] = {}
        for occ in self.occurrences:
            key = occ.spec.name
            out.pop(key, None)  # the deciding occurrence's place in the order
            out[key] = " ".join(occ.raw) if occ.raw else not occ.negated
        extras = self.unknown_tokens
        for i, token in enumerate(extras):
            if not _is_option(token):
                continue
            key, eq, inline = token.lstrip("-").partition("=")
            following = extras[i + 1] if i + 1 < len(extras) and not _is_option(extras[i + 1]) else None
            out[key] = inline if eq else (following if following is not None else True)
        return out

    def last(self, dest: str) -> Occurrence | None:
        """The occurrence that decided `dest` (argparse: the last)."""
        for occ in reversed(self.occurrences):
            if occ.spec.dest == dest:
                return occ
        return None

    def first_error(self) -> str | None:
        """The one line SGLang's parser would fail with, or None."""
        if self.errors:
            return self.errors[0]
        if self.missing:
            return "the following arguments are required: " + ", ".join(
                "/".join(s.option_strings) for s in self.missing
            )
        return f"unrecognized arguments: {' '.join(self.unknown_tokens)}" if self.unknown_tokens else None


def parse_launch_argv(argv: Sequence[str], sglang: str | None = None, *, config: bool = True) -> ParsedArgv:
    """`parse_server_argv` with the flag catalog of SGLang `sglang` (default: the pinned release) plus the
    DDTREE payload's flags: how an argv from outside is read (a recorded release, `dry-run --argv`)."""

    return parse_server_argv(argv, launch_catalog(sglang), config=config)


def launch_catalog(sglang: str | None = None) -> Catalog:
    """The flag catalog of SGLang `sglang` (default: the pinned release) plus the DDTREE payload's flags; a
    release without a catalog (validate refuses it) is read with the pinned one."""
    try:
        return extended_catalog(sglang or PINNED_SGLANG)
    except UsageError:
        return extended_catalog(PINNED_SGLANG)


def parse_server_argv(argv: Sequence[str], catalog: Catalog, *, config: bool = True) -> ParsedArgv:
    """Read an SGLang server argv as `prepare_server_args` does: the launcher prefix (`sglang serve`,
    `python -m sglang.launch_server`, env assignments) split off, `--config FILE` expanded (the file's flags
    first, so the command line overrides them), then SGLang's argparse parser. Never raises for bad flags or
    values (they are in `errors`/`unknown`/...); a bad launcher, or a `--config` SGLang cannot read, is a
    UsageError/ProfileError."""
    launch = split_launcher(argv)
    tokens, config_path, n_config = launch.argv, None, 0
    if config:
        from ddtctl.sglang_config import expand_config

        tokens, config_path, n_config = expand_config(launch.argv, catalog)
    parsed = _parse(tokens, catalog, n_config)
    parsed.env, parsed.launcher, parsed.config = launch.env, launch.launcher, config_path
    return parsed


_AMBIGUOUS = re.compile(r"ambiguous option: (\S+?)(?:=\S*)? could match ")
MAX_RECOVERIES = 25  # ambiguous prefixes taken out and the rest read again, per argv


def _without(tokens: list[str], option: str) -> list[str]:
    """tokens without `option` / `option=...` and the values that follow it."""
    out: list[str] = []
    skipping = False
    for token in tokens:
        if token == option or token.startswith(option + "="):
            skipping = True
        elif skipping and not (token.startswith("-") and len(token) > 1):
            continue
        else:
            skipping = False
            out.append(token)
    return out


def _run_recovering(parser: Any, tokens: list[str]) -> tuple[dict[str, Any], Any, list[str], bool]:
    """argparse reads the options' spellings before any value, so one ambiguous prefix loses the whole parse:
    it is reported, taken out, and the rest read again. (state, namespace, extras, whether a structural
    error remains after the ambiguous ones)."""
    errors: list[str] = []
    for _ in range(MAX_RECOVERIES):
        state, namespace, extras = run(parser, tokens)
        refused = {occ[3] for occ in state["occurrences"] if occ[3]}
        structural = [e for e in state["errors"] if e not in refused]
        match = _AMBIGUOUS.match(structural[0]) if structural else None
        if match is None:
            state["errors"] = errors + state["errors"]
            return state, namespace, extras, bool(structural)
        errors.append(structural[0])
        tokens = _without(tokens, match.group(1))
    state["errors"] = errors + state["errors"]
    return state, namespace, extras, True


def _parse(tokens: list[str], catalog: Catalog, n_config: int) -> ParsedArgv:

    parser = server_parser(catalog)
    state, namespace, extras, broken = _run_recovering(parser, tokens)
    # the config part comes first and is read on its own the same way: its occurrences lead the list
    from_config = len(run(parser, tokens[:n_config])[0]["occurrences"]) if n_config else 0
    occurrences, seen = [], set()
    for n, (option, action, raw, error) in enumerate(state["occurrences"]):
        seen.add(id(action))
        spec = None if action.dest == "help" else _spec_of(catalog, action)
        if spec is not None:
            occurrences.append(Occurrence(option, spec, tuple(raw), n < from_config, error))
    unknown, positional = _split_extras(extras)
    # argparse checks required flags only once the parse went through
    missing = [] if broken else [s for s in catalog.flags if s.required and not _seen(parser, s, seen)]
    return ParsedArgv(
        argv=list(tokens),
        namespace={k: v for k, v in vars(namespace).items() if k != "help"},
        occurrences=occurrences,
        unknown=unknown,
        unknown_tokens=list(extras),
        positional=positional,
        errors=state["errors"],
        missing=missing,
        n_config=n_config,
        help=bool(state.get("help")),
    )


def _spec_of(catalog: Catalog, action: Any) -> FlagSpec | None:
    for option in action.option_strings:
        spec = catalog.get_option(option)
        if spec is not None and spec.dest == action.dest:
            return spec
    return None


def _seen(parser: Any, spec: FlagSpec, seen: set[int]) -> bool:
    return any(id(parser._option_string_actions.get(o)) in seen for o in spec.option_strings)


def _split_extras(extras: list[str]) -> tuple[list[str], list[str]]:
    """Tokens argparse did not take: unknown options (with the values that followed them), and the rest."""
    unknown: list[str] = []
    positional: list[str] = []
    after_option = False
    for token in extras:
        if _is_option(token):
            unknown.append(token)
            after_option = True
        elif not after_option:
            positional.append(token)
    return unknown, positional


_NUMBER = re.compile(r"-\d+$|-\d*\.\d+$")


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NUMBER.fullmatch(token)


# ------------------------------------------------------------------------------------------ launch lines
def split_launcher(tokens: Sequence[str]) -> Launch:
    """`[env] [FOO=1 ...] python3 -m sglang.launch_server ARGS` / `sglang serve [MODEL] ARGS` / bare ARGS."""

    tokens = [str(t) for t in tokens]
    env: dict[str, str] = {}
    i = 1 if tokens[:1] == ["env"] else 0
    while i < len(tokens) and not tokens[i].startswith("-") and _ENV_ASSIGN.fullmatch(tokens[i]):
        name, _, value = tokens[i].partition("=")
        env[name] = value
        i += 1
    rest = tokens[i:]
    head = rest[0].rsplit("/", 1)[-1] if rest else ""
    if _PYTHON.fullmatch(head):
        j = 1
        while j < len(rest) and rest[j] in _PY_SWITCHES:
            j += 1
        if rest[j : j + 2] != ["-m", "sglang.launch_server"]:
            raise UsageError(
                f"argv: {' '.join(rest[: j + 2])!r} is not an SGLang launch",
                fix="paste `python3 -m sglang.launch_server ARGS`, `sglang serve ARGS` or the bare ARGS",
            )
        return Launch(rest[j + 2 :], env, f"{rest[0]} -m sglang.launch_server")
    if head == "sglang":
        if rest[1:2] != ["serve"]:
            raise UsageError(
                f"argv: `sglang {' '.join(rest[1:2])}` is not an SGLang server launch",
                fix="use `sglang serve ARGS`",
            )
        return Launch(_serve_argv(rest[2:]), env, f"{rest[0]} serve")
    if tokens[:1] == ["env"] or (env and rest and not rest[0].startswith("-")):
        raise UsageError(
            f"argv: {rest[0] if rest else 'nothing'!r} after the environment is not an SGLang launch",
            fix="paste `FOO=1 sglang serve ARGS` or `FOO=1 python3 -m sglang.launch_server ARGS`",
        )
    return Launch(rest, env, None)


def _serve_argv(argv: list[str]) -> list[str]:
    """`sglang serve`'s own handling before prepare_server_args: `--model-type X` is taken out (it picks the
    backend) and a leading positional is the model path (sglang/cli/serve.py)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--model-type":
            i += 2
            continue
        if not argv[i].startswith("--model-type="):
            out.append(argv[i])
        i += 1
    if out and not out[0].startswith("-"):
        out = ["--model-path", *out]
    return out


def read_argv_file(path: str) -> list[str]:
    """A pasted shell launch line (backslash-newline continuations, `#` comments, quotes) as shlex tokens."""
    import shlex

    data = read_regular(path, ARGV_FILE_LIMIT, what="argv file", fix="give a text file with one launch line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("not UTF-8 text", where=path, fix="save the launch line as UTF-8 text") from None
    text = re.sub(r"\\\r?\n", " ", text)
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as err:
        raise UsageError(f"not a shell command line: {err}", where=path, fix="close the quote") from None
    ops = [t for t in tokens if t in _SHELL_OPERATORS]
    if ops:
        raise UsageError(
            f"holds more than one command (shell operator {ops[0]!r})",
            where=path,
            fix="keep only the SGLang launch line in the file",
        )
    if not tokens:
        raise UsageError("holds no command", where=path, fix="paste the SGLang launch line into the file")
    return tokens
