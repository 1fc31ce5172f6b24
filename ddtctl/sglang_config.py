"""SGLang's own `--config FILE` (a YAML mapping of flags), both ways, as sglang 0.5.23 reads it.

`expand_config_argv` is `prepare_server_args`' expansion (`sglang/srt/utils/server_args_config_parser.py`,
`ConfigArgumentMerger`) rebuilt on the flag catalog, so `validate --argv -- --config x.yaml` checks what
SGLang would launch without importing it:
  * only the exact token `--config` triggers it (SGLang tests `"--config" in argv`), at most once, followed by
    a path ending in .yaml / .yml that exists; the root must be a mapping;
  * the config's flags come first, then the command line's (so the command line wins, argparse's last value);
  * a key names a flag by any long spelling, `-` or `_`; it is emitted as `--<key>` as written;
  * true / false: a store_true flag is given bare or left out; any other flag gets `--key true|false`;
  * a list gives `--key v1 v2 ...` (nothing when empty), a mapping its JSON, anything else `str(value)`;
  * keys of flags taking no value that are not store_true (`--no-x` pairs, deprecated switches) are refused.
`profile_to_config` is the other way: the mapping that, given to SGLang as `--config`, launches the profile.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddtctl.errors import ProfileError
from ddtctl.safeio import load_yaml
from ddtctl.schema.catalog import Catalog, FlagSpec


def _keys(spec: FlagSpec) -> set[str]:
    return {spec.dest} | {o[2:].replace("-", "_") for o in spec.option_strings if o.startswith("--")}


def _supported(spec: FlagSpec) -> bool:
    """SGLang: a _StoreTrueAction, a _StoreAction (any nargs), or any action with nargs None."""
    return spec.action in ("store_true", "store") or spec.nargs is None


class ConfigKeys:
    """The catalog's flags as SGLang's ConfigArgumentMerger classifies them."""

    def __init__(self, catalog: Catalog):
        specs = list(catalog.flags)
        self.store_true: set[str] = set()
        supported: set[str] = set()
        self.by_key: dict[str, FlagSpec] = {}
        for spec in specs:
            for key in _keys(spec):
                self.by_key.setdefault(key, spec)
            if spec.action == "store_true":
                self.store_true |= _keys(spec)
            if _supported(spec):
                supported |= _keys(spec)
        self.unsupported: dict[str, FlagSpec] = {}
        for spec in specs:
            if _supported(spec) or "--config" in spec.option_strings or "--help" in spec.option_strings:
                continue
            for key in _keys(spec) - supported:
                self.unsupported[key] = spec


def _config_path(argv: list[str]) -> tuple[int, str] | None:
    at = [i for i, token in enumerate(argv) if token == "--config"]
    if not at:
        return None
    if len(at) > 1:
        raise ProfileError(
            'argv: --config is given more than once (SGLang: "Multiple config files specified! Only '
            'one allowed.")',
            fix="merge the config files into one",
        )
    if at[0] == len(argv) - 1:
        raise ProfileError("argv: --config has no file after it", fix="write --config path/to/server.yaml")
    return at[0], argv[at[0] + 1]


def load_config(path: str) -> dict[str, Any]:
    """The mapping SGLang's `--config FILE` reads, from a bounded regular file (safeio.load_yaml)."""

    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise ProfileError(
            f"{path}: SGLang's --config must be YAML (.yaml / .yml), got {p.suffix or 'no suffix'!r}",
            fix="rename the file with a .yaml suffix",
        )
    if not p.exists():
        raise ProfileError(f"{path}: config file not found", fix="check the path given to --config")
    # bounded, regular files only, no aliases, limited nesting (issue #31): a FIFO or a bomb is one line
    data = load_yaml(p, 1024 * 1024, what="SGLang --config", error=ProfileError)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProfileError(
            f"{path}: SGLang's --config must hold a mapping of flags at its root",
            fix="write `flag-name: value` lines",
        )
    return data


def config_to_argv(config: dict[str, Any], catalog: Catalog, *, where: str = "config") -> list[str]:
    keys = ConfigKeys(catalog)
    out: list[str] = []
    for key, value in config.items():
        key = str(key)
        norm = key.replace("-", "_")
        if norm in keys.unsupported:
            spec = keys.unsupported[norm]
            raise ProfileError(
                f"{where}: {key}: SGLang's --config cannot set {spec.option} (a flag without a value "
                "that is not a plain switch; SGLang refuses it)",
                fix=f"pass {spec.option} on the command line instead",
            )
        if isinstance(value, bool):
            if norm in keys.store_true:
                out += [f"--{key}"] if value else []
            else:
                out += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            out += [f"--{key}", *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            out += [f"--{key}", json.dumps(value)]
        else:
            out += [f"--{key}", str(value)]
    return out


def expand_config(argv: list[str], catalog: Catalog) -> tuple[list[str], str | None, int]:
    """(argv with SGLang's `--config FILE` expanded, the file, how many leading tokens came from it).
    Unchanged argv, None, 0 without one."""
    found = _config_path(argv)
    if found is None:
        return list(argv), None, 0
    at, path = found
    config_args = config_to_argv(load_config(path), catalog, where=path)
    return config_args + argv[:at] + argv[at + 2 :], path, len(config_args)


def expand_config_argv(argv: list[str], catalog: Catalog) -> list[str]:
    """argv with SGLang's `--config FILE` expanded (argv unchanged without one)."""
    return expand_config(argv, catalog)[0]


def is_sglang_config(data: Any, catalog: Catalog, profile_keys: frozenset[str] | set[str]) -> bool:
    """Whether a YAML mapping is an SGLang `--config` file (flag keys, as `render --as sglang-config` writes)
    rather than a ddtctl profile: no profile key (`model` only as a mapping: SGLang's `--model` is a path) and
    a flag key first (`model-path` in what render writes; an unknown key later is an error to report)."""
    if not isinstance(data, dict) or not data:
        return False
    keys = [k for k in data if isinstance(k, str)]
    if len(keys) != len(data) or isinstance(data.get("model"), dict):
        return False
    if any(k in profile_keys and k != "model" for k in keys):
        return False
    return catalog.get_option("--" + keys[0]) is not None


def profile_to_config(model_path: str, server: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    """The --config mapping for a profile's launch: `model-path` first, then the server
    flags in profile order. Switches become true (false ones are left out); flags SGLang's
    --config cannot carry are refused by name."""
    keys = ConfigKeys(catalog)
    out: dict[str, Any] = {"model-path": model_path}
    for name, value in server.items():
        spec = catalog.get(name)
        if spec is None:
            raise ProfileError(
                f"server.{name}: unknown SGLang {catalog.version} flag",
                fix="run `ddtctl validate` on the profile",
            )
        norm = spec.name.replace("-", "_")
        if norm in keys.unsupported:
            raise ProfileError(
                f"server.{name}: SGLang's --config cannot carry {spec.option} (it refuses flags "
                "without a value that are not plain switches)",
                fix="render --as argv or --as shell instead",
            )
        if Catalog.is_boolean_switch(spec):
            if value:
                out[spec.name] = True
            continue
        out[spec.name] = value
    return out
