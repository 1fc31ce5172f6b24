"""Hugging Face hub model ids (`Org/Name`) as a launch's model or draft model: only their `config.json` is
fetched, with huggingface_hub's own `hf_hub_download` into its own cache, so the model-aware rules
(ddtctl.model_facts) and SGLang's resolver (ddtctl.dryrun) read it as they read a local model directory.

huggingface_hub is optional (the `hub` extra: `pip install 'ddtctl[hub]'`) and imported only when a hub id is
met, so a `validate` of local paths never pays for it. Its environment is honoured as SGLang's own download
would honour it, read when the config is fetched: `HF_ENDPOINT` (a mirror), `HF_HUB_CACHE` / `HF_HOME` (the
cache), `HF_TOKEN` (private and gated repos) and `HF_HUB_OFFLINE=1` (the cache only: a config not cached there
is then "not readable here", as a remote path is, never a network call).

A hub that cannot give the config (unreachable, the repo, revision or file missing, a gated repo) is a
HubError: one line, exit 8 (ddtctl.errors.ExitCode.HUB)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from ddtctl.errors import EnvironmentMissing, HubError

# `namespace/name` as the hub spells repo ids (huggingface_hub.utils.validate_repo_id): letters, digits, `-`,
# `_`, `.`; at most 96 characters a part; no `--` or `..`. A single name (the legacy `gpt2`) is not taken for
# one: it reads as a relative directory.
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
HUB_ID = re.compile(rf"^{_PART}/{_PART}$")
ETAG_TIMEOUT_S = 10.0  # huggingface_hub's own default for the metadata request
_TRUE = {"1", "ON", "YES", "TRUE"}
_fetched: dict[tuple[Any, ...], Path | None] = {}  # one fetch per repo and revision a run


def is_hub_id(path: Any) -> bool:
    """Whether `path` names a hub repo rather than a directory here: `Org/Name`, and no such path exists."""
    if not isinstance(path, str) or not HUB_ID.match(path) or "--" in path or ".." in path:
        return False
    try:
        return not Path(path).exists()
    except (OSError, ValueError):
        return False


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set: the hub cache only, as huggingface_hub reads them."""
    return any(
        os.environ.get(name, "").strip().upper() in _TRUE
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _cache_dir() -> str | None:
    """huggingface_hub's cache as its environment names it now (the library reads it once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    return None


def _import(name: str) -> ModuleType:
    try:
        import huggingface_hub
    except ImportError:
        raise EnvironmentMissing(
            f"{name} is a Hugging Face hub id; reading its config.json needs huggingface_hub, which is not "
            "installed here",
            fix="pip install 'ddtctl[hub]', or give a local model directory",
        ) from None
    try:  # a config.json needs neither a progress bar nor the library's warnings on stderr
        from huggingface_hub.utils import disable_progress_bars, logging

        disable_progress_bars()
        logging.set_verbosity_error()
    except (ImportError, AttributeError):  # pragma: no cover - older releases
        pass
    return huggingface_hub


def config_dir(repo_id: str, revision: str | None = None, *, what: str = "model") -> Path | None:
    """A local directory holding hub repo `repo_id`'s config.json at `revision` (the hub cache's snapshot
    directory), fetching that one file. Offline (HF_HUB_OFFLINE=1): the cache only, None when it lacks it.
    HubError when the hub cannot give it; EnvironmentMissing without huggingface_hub."""
    endpoint = (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None
    key = (repo_id, revision, offline(), endpoint, _cache_dir())
    if key not in _fetched:
        name = f"{what} {repo_id}" + (f"@{revision}" if revision else "")
        hf = _import(name)
        cached = hf.try_to_load_from_cache(repo_id, "config.json", cache_dir=key[4], revision=revision)
        cached_dir = Path(cached).parent if isinstance(cached, str) else None
        if key[2]:
            _fetched[key] = cached_dir
        else:
            _fetched[key] = _download(hf, repo_id, revision, name, endpoint, key[4], probe=cached_dir is None)
    return _fetched[key]


def _download(
    hf: ModuleType,
    repo_id: str,
    revision: str | None,
    name: str,
    endpoint: str | None,
    cache_dir: str | None,
    *,
    probe: bool,
) -> Path:
    """hf_hub_download of config.json (the hub's current one; its cached copy when the hub cannot be reached).
    With nothing cached, one metadata request first: hf_hub_download would retry a hub it cannot reach for
    ~25 s (exponential backoff) before saying so, and `validate` answers at once."""
    where = {"endpoint": endpoint} if endpoint else {}
    try:
        if probe:
            url = hf.hf_hub_url(repo_id, "config.json", revision=revision, **where)
            hf.get_hf_file_metadata(url, timeout=ETAG_TIMEOUT_S)
        path = hf.hf_hub_download(
            repo_id,
            "config.json",
            revision=revision,
            cache_dir=cache_dir,
            etag_timeout=ETAG_TIMEOUT_S,
            **where,
        )
    except Exception as err:  # noqa: BLE001 - huggingface_hub's errors and its HTTP client's, mapped here
        raise hub_error(err, name, revision) from None
    return Path(path).parent


def unreachable(name: str) -> HubError:
    return HubError(
        f"{name}: config.json not reachable on the hub (offline?)",
        fix="set HF_HUB_OFFLINE=1 to use the cache, or give a local model directory",
    )


def _errors() -> ModuleType | None:
    """huggingface_hub's error classes (huggingface_hub.errors; before 0.24 they lived in .utils)."""
    import importlib

    for name in ("huggingface_hub.errors", "huggingface_hub.utils"):
        try:
            return importlib.import_module(name)
        except ImportError:  # pragma: no cover - an older or broken huggingface_hub
            continue
    return None


def _is(err: Exception, errors: ModuleType | None, *names: str) -> bool:
    kinds = tuple(k for k in (getattr(errors, n, None) for n in names) if isinstance(k, type))
    return bool(kinds) and isinstance(err, kinds)


def hub_error(err: Exception, name: str, revision: str | None) -> HubError:
    """The one-line HubError for what huggingface_hub raised (its own errors; anything else, its HTTP client's
    connection errors included, is the hub not reachable)."""
    errors = _errors()
    login = "`hf auth login` (or set HF_TOKEN)"
    if _is(err, errors, "GatedRepoError"):
        return HubError(
            f"{name}: a gated repository on the hub", fix=f"accept its terms on the hub, then {login}"
        )
    if _is(err, errors, "RepositoryNotFoundError"):
        return HubError(
            f"{name}: no such repository on the hub (or a private one)",
            fix=f"check the id, {login} for a private repository, or give a local model directory",
        )
    if _is(err, errors, "RevisionNotFoundError"):
        return HubError(f"{name}: the hub has no revision {revision or 'main'}", fix="check the revision")
    if _is(err, errors, "LocalEntryNotFoundError", "OfflineModeIsEnabled"):  # hf_hub_download's "unreachable"
        return unreachable(name)
    if _is(err, errors, "EntryNotFoundError"):
        return HubError(
            f"{name}: the repository on the hub has no config.json", fix="is it a model repository?"
        )
    if _is(err, errors, "HfHubHTTPError"):
        status = getattr(getattr(err, "response", None), "status_code", None)
        return HubError(
            f"{name}: the hub answered HTTP {status or '?'} for config.json",
            fix="try again later, or set HF_HUB_OFFLINE=1 to use the cache",
        )
    if isinstance(err, ValueError):  # huggingface_hub's HFValidationError
        return HubError(
            f"{name}: not a hub repository id ({str(err)[:80]})", fix="give a local model directory"
        )
    return unreachable(name)
