"""`ddtctl tune`'s search space: the default space per algorithm, a `--space` YAML (flag -> list of
values, `env.NAME` keys for the profile's `env:`), the points and the baseline it makes, and each point's
profile variant: a profile object in memory (its document and its loaded profile), never a file.

Light on purpose (no paramiko, no deploy): `ddtctl validate` reads a search-space file with it.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from ddtctl.argv import is_secret_env
from ddtctl.errors import ProfileError, UsageError
from ddtctl.model_facts import read_model_facts
from ddtctl.profile import LoadedProfile, canonical_flag_key, loaded_from_document, parse_profile_text
from ddtctl.profile_yaml import ProfileDocument
from ddtctl.safeio import load_yaml

BASELINES = ("auto", "dflash", "none", "off")

# Defaults per algorithm (dashed flag -> values; None = leave the flag unset, SGLang's default).
DDTREE_SPACE: dict[str, list[Any]] = {
    # up to 128: the fastest budget at batch 1 on the 8B target (1.22 x DFLASH, notes/step-cost-h200.md);
    # larger batches favour smaller ones, and a budget whose scratch does not fit is skipped (validated first)
    "speculative-ddtree-budget": [16, 32, 64, 128],
    "speculative-ddtree-topk-cap": [None],
}
EAGLE_SPACE: dict[str, list[Any]] = {
    "speculative-num-steps": [3, 5],
    "speculative-eagle-topk": [1, 4],
    "speculative-num-draft-tokens": [4, 8],
}
DFLASH_BLOCKS = (4, 8, 16)
DDTREE_ONLY = re.compile(r"^speculative-ddtree-")
SPECULATIVE = re.compile(r"^speculative-")
# `env.NAME` keys of a search space set (None: remove) a variable of the profile's `env:`, not a flag
ENV_PREFIX = "env."
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class PointSpec:
    label: str
    kind: str  # baseline | point
    flags: dict[str, Any]  # dashed flag or env.NAME -> value (None = remove the flag / the variable)


def load_space(path: str) -> dict[str, list[Any]]:
    """A `--space` YAML: a mapping flag -> list of values (a scalar is a list of one; null = leave unset)."""

    # bounded, regular files only, no aliases, limited nesting (issue #31)
    return normalize_space(load_yaml(path, 1 << 20, what="search space"), path)


def normalize_space(data: Any, where: str = "space") -> dict[str, list[Any]]:
    """Flag keys canonicalised (dashed); `env.NAME` keys kept, their values as the strings the server gets."""

    if not isinstance(data, dict) or not data:
        raise UsageError(
            "the search space must be a mapping flag -> list of values",
            where=where,
            fix="e.g. speculative-ddtree-budget: [16, 32, 64]",
        )
    out: dict[str, list[Any]] = {}
    for key, values in data.items():
        values = values if isinstance(values, list) else [values]
        if not values or any(isinstance(v, (dict, list)) for v in values):
            raise UsageError(f"{key}: give a list of plain values", where=where)
        name = env_name(str(key))
        if name is None:
            out[canonical_flag_key(str(key))] = values
        else:
            _check_env_name(name, where)
            out[ENV_PREFIX + name] = [None if v is None else env_value(v) for v in values]
    return out


def env_name(key: str) -> str | None:
    """The environment variable a space key sets (`env.NAME`), None for a server flag."""
    return key[len(ENV_PREFIX) :] if key.startswith(ENV_PREFIX) else None


def env_value(value: Any) -> str:
    """A space value as the server's environment holds it (YAML's spelling of a boolean, not Python's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_env_name(name: str, where: str) -> None:

    if not ENV_NAME.fullmatch(name):
        raise UsageError(
            f"{ENV_PREFIX}{name}: {name!r} is not an environment variable name",
            where=where,
            fix="letters, digits and _ after `env.`, not starting with a digit, e.g. env.DDTREE_CONV_TREE",
        )
    if is_secret_env(name):  # the space's values go into the results file and the report as they are
        raise UsageError(
            f"{ENV_PREFIX}{name}: a secret is not something to tune (its values would be shown)",
            where=where,
            fix=f"set {name} in the profile's env: instead",
        )


def default_space(algorithm: str | None, server: dict[str, Any]) -> dict[str, list[Any]]:
    algo = (algorithm or "").upper()
    if algo == "DDTREE":
        return {k: list(v) for k, v in DDTREE_SPACE.items()}
    if algo in ("EAGLE", "EAGLE3", "NEXTN"):
        return {k: list(v) for k, v in EAGLE_SPACE.items()}
    if algo == "DFLASH":
        facts = read_model_facts(server.get("speculative-draft-model-path"))
        top = (facts.block_size if facts and facts.block_size else None) or server.get(
            "speculative-dflash-block-size"
        )
        if not top:
            raise UsageError(
                "the drafter's block size is unknown here",
                fix="pass --space with speculative-dflash-block-size values",
            )
        return {"speculative-dflash-block-size": [b for b in DFLASH_BLOCKS if b < int(top)] + [int(top)]}
    raise UsageError(
        f"no default search space for speculative-algorithm {algorithm or '(none)'}",
        fix="pass --space SPACE.yaml (flag -> list of values)",
    )


def points_of(space: dict[str, list[Any]]) -> list[PointSpec]:
    keys = list(space)
    out = []
    for combo in itertools.product(*(space[k] for k in keys)):
        flags = dict(zip(keys, combo, strict=True))
        label = " ".join(f"{_short(k)}={'-' if v is None else v}" for k, v in flags.items())
        out.append(PointSpec(label, "point", flags))
    return out


def _short(flag: str) -> str:
    name = env_name(flag)
    if name is not None:
        return name
    return re.sub(r"^speculative-(ddtree-|dflash-|eagle-)?", "", flag)


def baseline_point(kind: str, algorithm: str | None, server: dict[str, Any]) -> PointSpec | None:
    """The reference point: the profile with DFLASH (no DDTREE flags), or without speculative decoding."""
    algo = (algorithm or "").upper()
    if kind == "off":
        return None
    if kind == "auto":
        kind = "dflash" if algo == "DDTREE" else "none"
    if kind == "dflash":
        flags: dict[str, Any] = {k: None for k in server if DDTREE_ONLY.match(k)}
        flags["speculative-algorithm"] = "DFLASH"
        return PointSpec("baseline DFLASH", "baseline", flags)
    if kind == "none":
        return PointSpec("baseline no-spec", "baseline", {k: None for k in server if SPECULATIVE.match(k)})
    raise UsageError(f"unknown baseline {kind!r}", fix=f"one of: {', '.join(BASELINES)}")


# ----------------------------------------------------------------------------------------------- variants
def variant_data(data: dict[str, Any], flags: dict[str, Any], label: str) -> dict[str, Any]:
    """The profile document (parsed) with `flags` set (None: removed) and a name saying which point it is;
    `env.NAME` keys set (None: remove) NAME in the document's `env:`."""

    out = json.loads(json.dumps(data))
    server = dict(out.get("server") or {})
    env = dict(out.get("env") or {})
    for name, text in point_env(flags).items():
        env.pop(name, None)
        if text is not None:
            env[name] = text
    for key, value in flags.items():
        if env_name(key) is not None:
            continue
        canon = canonical_flag_key(key)
        for k in [k for k in server if canonical_flag_key(k) == canon]:
            del server[k]
        if value is not None:
            server[canon] = value
    out["server"] = server
    if env or "env" in out:
        out["env"] = env
    suffix = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")
    out["name"] = f"{out.get('name', 'profile')}.tune-{suffix}"[:128]
    return out


@dataclass
class Variant:
    """One point's profile, in memory: its data, the document (the text it dumps to, parsed as a profile file
    is: what validate reads) and the loaded profile (what render and deploy read), or the schema's refusal
    (`error`, the ProfileError load_profile raises for such a file)."""

    label: str
    data: dict[str, Any]
    document: ProfileDocument
    loaded: LoadedProfile | None
    error: ProfileError | None = None


def variant_profile(data: dict[str, Any], flags: dict[str, Any], label: str, profile: str) -> Variant:
    """The point's profile object: variant_data() as the YAML text a profile file would hold (its sha256 is
    the release's profile hash), parsed and schema-checked in memory. Its source, `PROFILE#LABEL`, names the
    point and keeps the profile's directory (relative paths in it, e.g. `server: {config: FILE}`, are taken
    from there)."""
    vdata = variant_data(data, flags, label)
    doc = parse_profile_text(yaml.safe_dump(vdata, sort_keys=False), f"{profile}#{label}")
    try:
        return Variant(label, vdata, doc, loaded_from_document(doc))
    except ProfileError as err:
        return Variant(label, vdata, doc, None, err)


def point_env(flags: dict[str, Any]) -> dict[str, str | None]:
    """The environment a point's space sets (None: removed), without the profile's own."""
    out: dict[str, str | None] = {}
    for key, value in flags.items():
        name = env_name(key)
        if name is not None:
            out[name] = None if value is None else env_value(value)
    return out
