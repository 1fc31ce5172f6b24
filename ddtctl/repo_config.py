"""The repository configuration of `ddtctl validate`, found as ruff finds its own.

From the current directory upward, the first directory holding a `.ddtctl.toml`, or a `pyproject.toml` with a
`[tool.ddtctl]` table, gives it; in one directory `.ddtctl.toml` wins (as ruff.toml beats pyproject.toml), and
a pyproject.toml without the table is passed over. Its keys (top level in `.ddtctl.toml`):

    select  = ["DDT9", "DDT111"]   # rule ids or prefixes to report (default: all; ddtctl.rule_select)
    ignore  = ["DDT805"]           # rule ids or prefixes not to report
    include = ["profiles/**"]      # `validate DIR`: only the files found there that match
    exclude = ["drafts", "old/*.yaml"]  # `validate DIR`: skip the files found there that match
    gpu     = "H200"               # the --gpu default

Command-line flags override it (`--select` replaces `select` and `ignore`, `--ignore` adds to `ignore`,
`--gpu` replaces `gpu`). Globs are taken from the configuration file's directory: a pattern without `/`
matches any one name in a file's path (`drafts`, `*.draft.yaml`), one with `/` the path itself or a directory
above the file (`**` crosses directories). They filter only the files found inside a directory given on the
command line; a file named there (or matched by a glob there) is always checked, as ruff does without
--force-exclude.

A file that is not valid TOML, an unknown key or a value of the wrong kind is a ConfigError naming the file
and the key (exit code 7). tomllib is imported only when a candidate file mentions ddtctl.
"""

from __future__ import annotations

import difflib
import glob
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from ddtctl.errors import ConfigError, DdtctlError
from ddtctl.profile import discover_profiles
from ddtctl.rule_select import parse_selectors
from ddtctl.safeio import glob_paths, read_text
from ddtctl.schema.gpus import resolve_gpu

CONFIG_NAME = ".ddtctl.toml"
PYPROJECT = "pyproject.toml"
_LIST_KEYS = ("select", "ignore", "include", "exclude")
KEYS = (*_LIST_KEYS, "gpu")
# `[tool.ddtctl]`, `tool.ddtctl.select = ...`, or a bare `[tool]` table that might hold `ddtctl = {...}`
_MENTIONS_TABLE = re.compile(r"""tool\s*\.\s*["']?ddtctl\b|^\s*\[\s*tool\s*\]""", re.MULTILINE)


@dataclass(frozen=True)
class RepoConfig:
    path: Path  # the file it was read from
    table: str  # how messages name its keys: "" in .ddtctl.toml, "[tool.ddtctl] " in pyproject.toml
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    gpu: str | None = None

    @property
    def root(self) -> Path:
        return self.path.parent

    def error(self, key: str, message: str, fix: str | None = None) -> ConfigError:
        return ConfigError(f"{self.table}{key}: {message}", where=str(self.path), fix=fix)

    def wants(self, path: Path) -> bool:
        """Whether a profile found inside a directory passes `include` and `exclude`."""
        parts = _parts_under(path, self.root)
        if any(_matches(pattern, parts) for pattern in self.exclude):
            return False
        return self.include is None or any(_matches(pattern, parts) for pattern in self.include)


def find_config(start: Path | None = None) -> RepoConfig | None:
    """The configuration of the nearest directory from `start` (the current directory) upward, or None."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        for name in (CONFIG_NAME, PYPROJECT):
            candidate = folder / name
            if candidate.is_file():
                config = load_config(candidate)
                if config is not None:
                    return config
    return None


def load_config(path: Path) -> RepoConfig | None:
    """The configuration in `path`; None for a pyproject.toml without `[tool.ddtctl]`."""
    pyproject = path.name == PYPROJECT
    text = read_text(path, 1 << 20, error=ConfigError, what="configuration")
    if pyproject and not _MENTIONS_TABLE.search(text):  # the common case: no TOML parse at start-up
        return None
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"not valid TOML: {err}", where=str(path)) from None
    if pyproject:
        data = data.get("tool", {}).get("ddtctl")
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ConfigError("[tool.ddtctl] must be a table", where=str(path))
    return _build(path, "[tool.ddtctl] " if pyproject else "", data)


def _build(path: Path, table: str, data: dict[str, Any]) -> RepoConfig:
    config = RepoConfig(path=path, table=table)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            raise config.error(
                key,
                "unknown key",
                fix=f"did you mean {close[0]}?" if close else f"the keys: {', '.join(KEYS)}",
            )
        if key == "gpu":
            values[key] = _gpu(config, value)
        else:
            values[key] = _strings(config, key, value)
    config = RepoConfig(path=path, table=table, **values)
    _check_selectors(config)
    return config


def _strings(config: RepoConfig, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise config.error(
            key, f"expected a list of strings, got {value!r}", fix=f'{key} = ["..."]'
        )  # fmt: skip
    return tuple(value)


def _gpu(config: RepoConfig, value: Any) -> str:

    if not isinstance(value, str):
        raise config.error("gpu", f"expected a GPU name, got {value!r}", fix='gpu = "H200"')
    try:
        resolve_gpu(value)
    except DdtctlError as err:
        raise config.error("gpu", err.message, fix=err.fix) from None
    return value


def _check_selectors(config: RepoConfig) -> None:

    for key in ("select", "ignore"):

        def fail(code: str, why: str, key: str = key) -> DdtctlError:
            return config.error(key, why if code.upper() in why else f"{code!r} {why}")

        parse_selectors(getattr(config, key), fail, is_ignore=key == "ignore")


# -- include / exclude ---------------------------------------------------------------------------------------
def _parts_under(path: Path, root: Path) -> tuple[str, ...]:
    """`path`'s names below `root` (all of them when it is elsewhere)."""
    absolute = path.absolute()
    try:
        return absolute.relative_to(root.absolute()).parts
    except ValueError:
        return absolute.parts[1:]


def _matches(pattern: str, parts: tuple[str, ...]) -> bool:
    pattern = pattern.strip("/")
    if "/" not in pattern:
        return any(fnmatchcase(part, pattern) for part in parts)
    regex = _glob_regex(pattern)
    return any(regex.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1))


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A path glob: `**` any number of directories, `*` and `?` within one name, `[...]` a class."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def discover(paths: list[str], config: RepoConfig | None) -> list[Path]:
    """The profiles `validate PATH...` checks: ddtctl.profile.discover_profiles, less the files found inside a
    directory that the configuration's `include` / `exclude` leave out."""

    if config is None or (config.include is None and not config.exclude):
        return discover_profiles(paths)

    kept: list[str] = []
    for raw in paths:
        named = set(glob_paths(raw)) if glob.has_magic(raw) else {raw}
        kept += [str(p) for p in discover_profiles([raw]) if str(p) in named or config.wants(p)]
    return discover_profiles(kept) if kept else []
