"""Which payload view a dry-run puts first on the resolver's sys.path
(`ddtctl dry-run --overlay auto|none|PATH`).

auto  the bundled DDTREE payload, built (or reused) against the resolver's SGLang, when something asks
      for DDTREE
none  plain SGLang
PATH  a payload source (manifest.json), a built payload (ddtree-manifest.json) or a build directory
      (payload/ + view/)
The managed environment's site-packages is never modified: the view shadows only the files the payload
touches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from ddtctl.argv import parse_launch_argv
from ddtctl.errors import DdtctlError, UsageError
from ddtctl.overlay import installer
from ddtctl.overlay.build import build, cache_root, resolve_target
from ddtctl.overlay.source import load_built_manifest
from ddtctl.profile import discover_profiles, load_profile

ALGORITHM = "DDTREE"


def argv_uses_ddtree(argv: Sequence[str]) -> bool:
    """Whether any occurrence asks for DDTREE (not only the last, which argparse keeps): staging the payload
    view for an argv that ends up not using it costs nothing, missing it would fail the dry-run."""
    try:
        occurrences = parse_launch_argv([str(a) for a in argv]).occurrences  # its --config file included
    except DdtctlError:  # an unreadable --config or launcher: the dry-run itself reports it
        return False
    return any(
        occ.spec.dest == "speculative_algorithm" and any(v.upper() == ALGORITHM for v in occ.raw)
        for occ in occurrences
    )


def profiles_use_ddtree(paths: Sequence[str], overrides: Sequence[Any] = ()) -> bool:
    """`overrides`: dry-run's `--set KEY=VALUE` (ddtctl.profile_overrides), as the profiles are resolved."""

    for path in discover_profiles(list(paths)):
        server = load_profile(path, overrides).profile.server or {}
        for key in ("speculative-algorithm", "speculative_algorithm"):
            if str(server.get(key) or "").upper() == ALGORITHM:
                return True
    return False


def view_for(spec: str | Path, *, python: str | Path | None = None) -> Path:
    """The view directory for an explicit --overlay PATH."""

    p = Path(spec).expanduser()
    if (p / "view").is_dir() and (p / "payload" / installer.MANIFEST_NAME).is_file():
        return p / "view"
    if (p / "manifest.json").is_file():
        return build(p, python=python, reuse=True).view_dir
    if (p / installer.MANIFEST_NAME).is_file():
        import hashlib

        built = load_built_manifest(p / installer.MANIFEST_NAME)
        target = resolve_target(built["sglang"], None, python)
        out = (
            cache_root()
            / "views"
            / hashlib.sha256(f"{p.resolve()}|{target.sglang_root}".encode()).hexdigest()[:16]
        )
        installer.build_view(str(target.sglang_root), str(p), str(out))
        return out
    raise UsageError(
        f"--overlay {spec}: not a payload (no manifest.json or ddtree-manifest.json there)",
        fix="pass auto, none, a payload source directory or a built payload",
    )


def overlay_sys_path(
    mode: str | None,
    *,
    argvs: Iterable[Sequence[str]] | None = None,
    profiles: Sequence[str] | None = None,
    python: str | Path | None = None,
    overrides: Sequence[Any] = (),
) -> list[str]:
    mode = (mode or "auto").strip()
    if mode == "none":
        return []
    if mode == "auto":
        needed = any(argv_uses_ddtree(a) for a in (argvs or [])) or bool(
            profiles and profiles_use_ddtree(profiles, overrides)
        )
        if not needed:
            return []

        return [str(build(None, python=python, reuse=True).view_dir)]
    return [str(view_for(mode, python=python))]
