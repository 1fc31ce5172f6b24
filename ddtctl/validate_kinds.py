"""YAML files `ddtctl validate DIR` meets that are not profiles, recognised by their shape: the inventory
(`hosts.yaml`: a `hosts:` mapping) and tune's search spaces (flag -> list of values, `env.NAME` keys). Each is
checked by its own reader (ddtctl.remote.inventory.check, ddtctl.tune.space) and reported with a note, not
failed as a broken profile. Light: no paramiko, and the inventory's reader only for an inventory."""

from __future__ import annotations

from typing import Any

from ddtctl import PINNED_SGLANG
from ddtctl.errors import UsageError
from ddtctl.profile import Profile
from ddtctl.schema.extensions import extended_catalog

INVENTORY, SPACE, PROFILE = "inventory", "search space", "profile"
_PROFILE_CORE = ("name", "sglang", "model", "server")  # keys only a profile has
_SGLANG_CONFIG = ("model-path", "model_path")  # SGLang's --config file names the model; a search space never


def document_kind(data: Any) -> str:
    """`inventory`, `search space`, or `profile` (anything else, an SGLang --config file included: the profile
    path judges it)."""

    if not isinstance(data, dict) or not data or any(k in data for k in _PROFILE_CORE + _SGLANG_CONFIG):
        return PROFILE
    if isinstance(data.get("hosts"), dict):  # a profile's `hosts:` is a list of names
        return INVENTORY
    if any(isinstance(k, str) and k in Profile.model_fields for k in data):
        return PROFILE
    if any(isinstance(k, str) and k.startswith("env.") for k in data):
        return SPACE
    catalog = extended_catalog(PINNED_SGLANG)
    for key, value in data.items():
        spec = catalog.get(str(key))
        # a list for a flag that takes one value (or for no flag at all): the values to sweep
        if isinstance(value, list) and (spec is None or spec.nargs in (None, "?", 0)):
            return SPACE
    return PROFILE


def check_document(path: str, kind: str) -> str:
    """The file checked as what it is: the note that says so, or (DdtctlError) its first error."""
    return _check_inventory(path) if kind == INVENTORY else _check_space(path)


def _check_inventory(path: str) -> str:
    from ddtctl.remote.inventory.check import check_inventory

    check = check_inventory(path)
    if check.errors:
        more = (
            f" (+{len(check.errors) - 1} more: ddtctl validate --inventory {path})"
            if len(check.errors) > 1
            else ""
        )
        err = check.errors[0]
        raise type(err)(err.message + more, where=err.where, fix=err.fix)
    return f"not a profile: an inventory of {len(check.hosts)} host(s), checked as one"


def _check_space(path: str) -> str:
    from ddtctl.tune.space import env_name, load_space, points_of

    space = load_space(path)
    catalog = extended_catalog(PINNED_SGLANG)
    for key in space:
        if env_name(key) is None and catalog.get(key) is None:
            import difflib

            close = difflib.get_close_matches(key, catalog.names(), n=1)
            raise UsageError(
                f"{key}: unknown SGLang {PINNED_SGLANG} flag in a search space",
                where=path,
                fix=f"did you mean {close[0]}?" if close else "see `ddtctl diff-flags` or the SGLang docs",
            )
    return f"not a profile: a tune search space of {len(points_of(space))} point(s), checked as one"
