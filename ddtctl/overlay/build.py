"""`ddtctl overlay build`: pristine SGLang files + payload patches +
added modules -> a staged payload and a view.

The build directory (default ~/.cache/ddtctl/overlay/<name>-<sglang>/) holds:
    payload/   what gets installed or shipped: ddtree-manifest.json (every file with its sha256, the pristine
               base hash of each patched file, the payload id), files/<path in site-packages>,
               installer.py, smoke.py
    view/      the target's site-packages as seen with the payload applied (real directories only along the
               payload's paths, symlinks to the untouched originals elsewhere); dry-runs put it first on
               sys.path, so the managed environment's site-packages is never modified
    build.json what this build was made from (source fingerprint, SGLang root, interpreter, payload id)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddtctl.errors import EnvironmentMissing, OverlayError
from ddtctl.overlay import installer
from ddtctl.overlay.source import (
    FORMAT,
    SourceManifest,
    load_built_manifest,
    load_source_manifest,
    payload_id,
    read_file,
    read_file_text,
    rewrite_imports,
    sha256_bytes,
    sha256_file,
)
from ddtctl.overlay.udiff import PatchError, apply_patch
from ddtctl.paths import overlay_root
from ddtctl.procs import python_output
from ddtctl.safeio import load_json, owned_dir_state, write_bytes_new, write_new

TOOLS = ("installer.py", "smoke.py")
_HERE = Path(__file__).resolve().parent


@dataclass
class Target:
    """The SGLang install a payload is built for / verified in / installed into."""

    sglang_root: Path  # the site-packages directory holding sglang/
    python: Path  # its interpreter
    sglang_version: str | None = None


@dataclass
class BuildResult:
    name: str
    version: str
    sglang: str
    payload_id: str
    build_dir: Path
    payload_dir: Path
    view_dir: Path
    sglang_root: Path
    python: Path
    files: list[dict[str, Any]] = field(default_factory=list)
    reused: bool = False
    skipped_optional: list[str] = field(default_factory=list)
    stale_pins: list[str] = field(default_factory=list)  # added files whose manifest sha256 is not the file's

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("build_dir", "payload_dir", "view_dir", "sglang_root", "python"):
            d[k] = str(d[k])
        return d


def cache_root() -> Path:

    return overlay_root()


def default_build_dir(m: SourceManifest) -> Path:
    return cache_root() / f"{m.name}-{m.sglang}"


def _guess_python(sglang_root: Path) -> Path | None:
    # <prefix>/lib/pythonX.Y/site-packages -> <prefix>/bin/python
    parts = sglang_root.resolve().parts
    if len(parts) >= 3 and parts[-1] == "site-packages" and parts[-2].startswith("python"):
        for name in ("python", parts[-2]):
            cand = Path(*parts[:-3]) / "bin" / name
            if cand.exists():
                return cand
    return None


def _site_of(python: Path) -> Path:
    code = (
        "import importlib.util,os;s=importlib.util.find_spec('sglang');"
        "print(os.path.dirname(list(s.submodule_search_locations)[0]) if s else '')"
    )
    out = python_output(python, code, timeout_s=60, limit=1 << 20, what=str(python))
    root = out.stdout.strip()
    if out.returncode != 0 or not root:
        raise EnvironmentMissing(
            f"{python} has no sglang installed", fix="run `ddtctl env create` or pass --sglang-root"
        )
    return Path(root)


def managed_python(version: str) -> Path:
    try:
        from ddtctl import envs  # the dry-run helper's module
    except ImportError:
        raise EnvironmentMissing(
            "no managed SGLang environment support in this ddtctl", fix="pass --sglang-root"
        ) from None
    env = envs.managed_env(version)
    if getattr(env, "exists", False):
        return Path(env.python)
    raise EnvironmentMissing(
        f"the managed SGLang {version} environment does not exist ({getattr(env, 'root', '?')})",
        fix="create it (`make test` / `ddtctl env create`) or pass --sglang-root and --python",
    )


def sglang_version_at(root: Path) -> str | None:
    return installer.sglang_version_at(str(root))


def resolve_target(
    sglang: str, sglang_root: str | Path | None = None, python: str | Path | None = None
) -> Target:
    if sglang_root is not None:
        root = Path(sglang_root).expanduser()
        if not (root / "sglang").is_dir():
            raise OverlayError(
                f"{root} has no sglang/ package", fix="pass the site-packages directory that holds sglang/"
            )
        py = Path(python) if python else (_guess_python(root) or Path(sys.executable))
    else:
        py = Path(python) if python else managed_python(sglang)
        root = _site_of(py)
    return Target(sglang_root=root.resolve(), python=py, sglang_version=sglang_version_at(root))


def _describe_mismatch(rel: str, have: str, base: str, result: str, sglang: str) -> str:
    if have == result:
        how = (
            "it already holds this payload's patched version (the payload is installed there; build from a "
            "pristine SGLang or uninstall first)"
        )
    else:
        how = f"it is not the pristine file of sglang {sglang} (a different release, or locally modified)"
    return f"{rel}: sha256 {have[:16]}... differs from the pristine base {base[:16]}...: {how}"


def stage(m: SourceManifest, target: Target, out: Path) -> tuple[dict[str, Any], list[str]]:
    """Write the staged payload into `out` (must not exist). Returns (built manifest, skipped optional
    sources). The built manifest lists `stale_pins`: added files whose pinned sha256 in the source manifest is
    not the file's (they are staged as they are, hashed in the built manifest;
    `ddtctl overlay manifest --update` re-pins)."""
    if target.sglang_version and target.sglang_version != m.sglang:
        raise OverlayError(
            f"{target.sglang_root} has sglang {target.sglang_version}; "
            f"payload {m.name} is for sglang {m.sglang}",
            fix="build against the pinned release (the managed env) or a matching --sglang-root",
        )
    files_dir = out / "files"
    entries: list[dict[str, Any]] = []
    for p in m.patched:
        base_path = target.sglang_root / p.path
        if not base_path.is_file():
            raise OverlayError(
                f"{p.path} does not exist in {target.sglang_root}", fix="is this an SGLang install?"
            )
        base = read_file(base_path)
        have = sha256_bytes(base)
        if have != p.base_sha256:
            raise OverlayError(_describe_mismatch(p.path, have, p.base_sha256, p.result_sha256, m.sglang))
        patch_file = m.patch_path(p)
        try:
            patch_text = read_file_text(patch_file)
            result = apply_patch(base.decode("utf-8"), patch_text, label=p.path).encode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise OverlayError(f"cannot read {p.patch}: {exc}", where=str(m.path)) from None
        except PatchError as exc:
            raise OverlayError(f"patch does not apply: {exc}", where=str(patch_file)) from None
        got = sha256_bytes(result)
        if got != p.result_sha256:
            raise OverlayError(
                f"{p.path}: the patched result has sha256 {got[:16]}..., the manifest expects "
                f"{p.result_sha256[:16]}...",
                where=str(m.path),
                fix="regenerate the patch (ddtctl overlay import) or fix result_sha256",
            )
        dst = files_dir / p.path
        dst.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_new(dst, result)
        entries.append(
            {"path": p.path, "kind": "patched", "sha256": got, "base_sha256": p.base_sha256, "patch": p.patch}
        )
    skipped = [a.source for a in m.added if a.optional and not m.source_path(a).exists()]
    stale: list[str] = []
    for rel, src, a in m.expand_added():
        data = read_file(src)
        if a.sha256 and not a.tree and sha256_bytes(data) != a.sha256:
            stale.append(rel)
        if (target.sglang_root / rel).exists():
            raise OverlayError(
                f"added file {rel} already exists in {target.sglang_root}; refusing to overwrite a "
                "file the payload does not own",
                fix="list it under `patched` if it is SGLang's, or remove the stray file",
            )
        if a.rewrite and rel.endswith(".py"):
            data = rewrite_imports(data.decode("utf-8"), a.rewrite).encode("utf-8")
        dst = files_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_new(dst, data)
        shutil.copystat(src, dst)
        entries.append({"path": rel, "kind": "added", "sha256": sha256_bytes(data), "source": a.source})
    for tool in TOOLS:
        shutil.copy2(_HERE / tool, out / tool)
    built = {
        "format": FORMAT,
        "name": m.name,
        "version": m.version,
        "sglang": m.sglang,
        "summary": m.summary,
        "payload_id": payload_id(m.name, m.version, m.sglang, entries),
        "files": entries,
        "tools": {t: sha256_file(out / t) for t in TOOLS},
        "smoke": m.smoke,
        "stale_pins": stale,
    }
    write_new(out / installer.MANIFEST_NAME, json.dumps(built, indent=1, sort_keys=True) + "\n")
    return built, skipped


def byte_compile(python: Path, pairs: list[tuple[Path, Path]]) -> None:
    """Compile each source to its cfile with the target interpreter; OverlayError naming the first failure."""
    if not pairs:
        return
    code = (
        "import json,py_compile,sys\n"
        "for src,dst in json.load(sys.stdin):\n"
        "    try:\n"
        "        py_compile.compile(src, cfile=dst, doraise=True)\n"
        "    except py_compile.PyCompileError as e:\n"
        "        print(e.msg.strip().splitlines()[-1] + ' in ' + src); sys.exit(1)\n"
    )
    payload = json.dumps([[str(s), str(d)] for s, d in pairs])
    out = python_output(
        python,
        code,
        input=payload,
        timeout_s=300,
        limit=8 << 20,
        what=f"the target interpreter {python} (byte-compiling)",
        error=OverlayError,
        start_error=EnvironmentMissing,
    )
    if out.returncode != 0:
        msg = ((out.stdout.strip() or out.stderr.strip()).splitlines() or ["failed"])[-1]
        raise OverlayError(f"byte-compiling with {python} failed: {msg}")


def _build_info_path(build_dir: Path) -> Path:
    return build_dir / "build.json"


def read_build(build_dir: Path) -> dict[str, Any] | None:
    try:
        info = load_json(_build_info_path(build_dir), 1 << 20, what="build record", error=OverlayError)
    except OverlayError:
        return None
    return info if isinstance(info, dict) else None


def build(
    payload_dir: str | Path | None = None,
    *,
    sglang_root: str | Path | None = None,
    python: str | Path | None = None,
    out_dir: str | Path | None = None,
    reuse: bool = False,
) -> BuildResult:
    m = load_source_manifest(payload_dir)
    target = resolve_target(m.sglang, sglang_root, python)
    build_dir = Path(out_dir).expanduser() if out_dir else default_build_dir(m)
    _check_build_dir(build_dir)
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(build_dir):  # concurrent dry-runs / deploys building the same payload take turns
        _check_build_dir(build_dir)
        return _build_locked(m, target, build_dir, reuse)


BUILD_MARKER = ".ddtctl-build"  # in every build dir ddtctl makes: the only kind a rebuild replaces


def _legacy_build(path: Path) -> bool:
    """A build dir made before BUILD_MARKER existed: build.json as
    ddtctl writes it, with payload/ and view/."""
    info = read_build(path)
    if not info:
        return False
    return (
        {"payload_id", "fingerprint", "sglang_root"} <= set(info)
        and (path / "payload").is_dir()
        and (path / "view").is_dir()
    )


def _check_build_dir(build_dir: Path) -> None:
    """A build replaces its directory: only an empty one or one ddtctl built may be replaced (issue #14:
    `overlay build --out DIR` wiped whatever DIR held)."""

    if owned_dir_state(build_dir, BUILD_MARKER, legacy=_legacy_build) == "foreign":
        raise OverlayError(
            f"{build_dir} is not empty and is not a ddtctl build directory; refusing to replace it",
            fix="choose a new or empty --out (a build replaces its directory)",
        )


@contextlib.contextmanager
def _build_lock(build_dir: Path):
    import fcntl

    with open(build_dir.with_name(f".{build_dir.name}.lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _build_locked(m: SourceManifest, target: Target, build_dir: Path, reuse: bool) -> BuildResult:
    fingerprint = m.fingerprint()
    if reuse:
        info = read_build(build_dir)
        if (
            info
            and info.get("fingerprint") == fingerprint
            and info.get("sglang_root") == str(target.sglang_root)
            and info.get("python") == str(target.python)
            and all(
                (target.sglang_root / p.path).is_file()
                and sha256_file(target.sglang_root / p.path) == p.base_sha256
                for p in m.patched
            )
            and (build_dir / "view").is_dir()
        ):
            return _result(m, target, build_dir, info, reused=True)

    tmp = Path(tempfile.mkdtemp(prefix=f".{build_dir.name}.", dir=build_dir.parent))
    try:
        built, skipped = stage(m, target, tmp / "payload")
        installer.build_view(str(target.sglang_root), str(tmp / "payload"), str(tmp / "view"))
        pairs = []
        for e in built["files"]:
            if e["path"].endswith(".py"):
                src = tmp / "view" / e["path"]
                pairs.append((src, tmp / "view" / installer.pyc_paths(e["path"])[0]))
        # The interpreter's own cache tag decides the .pyc names; ask it rather than assuming ours.
        byte_compile(target.python, _retag(target.python, pairs))
        info = {
            "payload_id": built["payload_id"],
            "fingerprint": fingerprint,
            "sglang_root": str(target.sglang_root),
            "python": str(target.python),
            "sglang_version": target.sglang_version,
            "payload_source": str(m.root),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "skipped_optional": skipped,
        }
        write_new(_build_info_path(tmp), json.dumps(info, indent=1) + "\n")
        write_new(tmp / BUILD_MARKER, "made by `ddtctl overlay build`\n")
        _swap_in(tmp, build_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _result(m, target, build_dir, info, reused=False)


def _retag(python: Path, pairs: list[tuple[Path, Path]]) -> list[tuple[Path, Path]]:
    if Path(python).resolve() == Path(sys.executable).resolve():
        return pairs
    tag = python_output(
        python,
        "import sys;print(sys.implementation.cache_tag)",
        timeout_s=60,
        limit=1 << 20,
        what=f"the target interpreter {python}",
    ).stdout.strip()
    ours = sys.implementation.cache_tag
    if not tag or tag == ours:
        return pairs
    return [(s, d.with_name(d.name.replace(f".{ours}.", f".{tag}."))) for s, d in pairs]


def _swap_in(tmp: Path, build_dir: Path) -> None:
    old = None
    if build_dir.exists():
        old = build_dir.with_name(f".{build_dir.name}.old-{os.getpid()}")
        os.replace(build_dir, old)
    os.replace(tmp, build_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _result(m: SourceManifest, target: Target, build_dir: Path, info: dict, *, reused: bool) -> BuildResult:
    built = load_built_manifest(build_dir / "payload" / installer.MANIFEST_NAME)
    return BuildResult(
        name=m.name,
        version=m.version,
        sglang=m.sglang,
        payload_id=built["payload_id"],
        build_dir=build_dir,
        payload_dir=build_dir / "payload",
        view_dir=build_dir / "view",
        sglang_root=target.sglang_root,
        python=target.python,
        files=[{k: e.get(k) for k in ("path", "kind", "sha256", "base_sha256")} for e in built["files"]],
        reused=reused,
        skipped_optional=list(info.get("skipped_optional") or []),
        stale_pins=list(built.get("stale_pins") or []),
    )
