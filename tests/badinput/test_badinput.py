"""The bad-input corpus (cases.yaml): every case through its commands as a user runs them, with the expected exit
code and message fragment, and the contract every answer keeps: no traceback, no internal error, stderr at most one
line, no raw control character on the terminal, a time and memory limit, and the input left as it was."""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hostile_profiles import unknown_keys_profile

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES = yaml.safe_load((HERE / "cases.yaml").read_text(encoding="utf-8"))
GOOD_PROFILE = REPO / "profiles" / "qwen3-8b-ddtree.yaml"
PROFILE_COMMANDS = ("validate", "fix", "migrate", "diff-flags")
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # what may not reach a terminal (newlines separate lines)
# A stand-in SGLang site-packages for `overlay import` (tests/badinput/overlay/* are edits of it).
SITE = {"sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.23"\n', "sglang/srt/__init__.py": "",
        "sglang/srt/a.py": "A = 1\n"}


def _limits() -> None:
    os.umask(0o022)
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a runaway read dies of MemoryError, not the machine


def ddtctl(*args, timeout: float = 30, cwd=None):
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          errors="replace", timeout=timeout, cwd=cwd or REPO, preexec_fn=_limits)


def _tree(root: Path) -> dict:
    """What makes a file tree the same: each entry's kind, and a file's bytes and mode."""
    out = {}
    if not root.exists() and not root.is_symlink():
        return out
    if not root.is_dir() or root.is_symlink():
        return {".": _entry(root)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = _entry(p)
    return out


def _entry(p: Path):
    st = p.lstat()
    if p.is_symlink():
        return ("link", os.readlink(p))
    if p.is_file():
        return ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode & 0o7777)
    return ("dir" if p.is_dir() else "special", st.st_mode & 0o7777)


def check_answer(run, code: int, fragment: str, what: str) -> None:
    out = run.stdout + run.stderr
    assert run.returncode == code, f"{what}: exit {run.returncode}, expected {code}\n{out[-2000:]}"
    assert fragment in out, f"{what}: {fragment!r} not in the output\n{out[-2000:]}"
    assert "Traceback" not in out and "internal error" not in out, f"{what}: crashed\n{out[-2000:]}"
    assert len(run.stderr.strip().splitlines()) <= 1, f"{what}: stderr is more than one line\n{run.stderr[-2000:]}"
    assert not RAW_CONTROL.search(out.replace("\r\n", "\n")), f"{what}: raw control characters in the output"


# -- profiles ---------------------------------------------------------------------------------------------------------
def _make_profile(case: dict, tmp: Path) -> Path:
    kind, name = case.get("make"), case["id"] + ".yaml"
    path = tmp / name
    if case.get("file"):
        shutil.copyfile(HERE / case["file"], path)
    if kind is None:
        return path
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind == "loop":
        path.symlink_to(tmp / "other.yaml")
        (tmp / "other.yaml").symlink_to(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        path.write_text("name: big\nmodel: {path: /m}\n" + "#" * (1024 * 1024) + "\n")
    elif kind == "deep":
        path.write_text('name: t\nsglang: "0.5.23"\nmodel: {path: /m}\nserver:\n  cuda-graph-bs-decode: '
                        + "[" * 900 + "]" * 900 + "\n")
    elif kind == "unknown-keys":
        unknown_keys_profile(path, ("name: t", 'sglang: "0.5.23"', "model: {path: /m}"))
    elif kind == "ctrl-name":
        path = tmp / "bad\n\x1b[31m.yaml"
        path.write_text('name: bad\nsglang: "0.5.23"\nmodel: {path: /m}\nserver:\n  port: -1\n')
    elif kind == "read-only":
        path.chmod(0o444)
    else:  # pragma: no cover - a typo in cases.yaml
        raise AssertionError(f"unknown make kind {kind!r}")
    return path


def _profile_args(command: str, path: Path) -> list:
    return {"validate": ["validate", path], "fix": ["validate", "--fix", path],
            "migrate": ["migrate", path, "--to", "0.5.23"], "diff-flags": ["diff-flags", path, GOOD_PROFILE]}[command]


PROFILE_CASES = [pytest.param(case, command, id=f"{case['id']}-{command}")
                 for case in CASES["profile"] for command in PROFILE_COMMANDS]


# Inputs that could hang or exhaust memory if a fix regressed run in their own process, under a time and memory
# limit; the rest run through the same entry point (ddtctl.cli.main) in this process, which is ~20x faster.
OWN_PROCESS = {"fifo", "devzero", "loop", "huge", "deep", "unknown-keys"}


class InProcess:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def ddtctl_here(*args) -> InProcess:
    """`ddtctl ARGS` through ddtctl.cli.main in this process: its exit code and what it wrote."""
    import contextlib
    import io

    from ddtctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return InProcess(code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("case, command", PROFILE_CASES)
def test_profile_corpus(case, command, tmp_path, monkeypatch):
    expect = case["expect"]
    code, fragment = expect.get(command) or expect["all"]
    path = _make_profile(case, tmp_path)
    before = _tree(tmp_path)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "200")
    if case.get("make") in OWN_PROCESS:
        run = ddtctl(*_profile_args(command, path), timeout=case.get("timeout", 30))
    else:
        run = ddtctl_here(*_profile_args(command, path))
    check_answer(run, code, fragment, f"{case['id']} through {command}")
    if command in case.get("changes", ()):
        data = path.read_bytes()
        assert data != (HERE / case["file"]).read_bytes()
        if case.get("keeps_crlf"):
            assert data.count(b"\n") == data.count(b"\r\n")
        assert ddtctl("validate", path).returncode == 0
        assert {p.name for p in tmp_path.iterdir()} == {path.name}  # no temporary left behind
    else:
        assert _tree(tmp_path) == before, f"{case['id']} through {command} changed its input"


# -- logits -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES["logits"], ids=[c["id"] for c in CASES["logits"]])
def test_logits_corpus(case, tmp_path):
    path = tmp_path / (case["id"] + ".npy")
    kind = case.get("make")
    if case.get("file"):
        shutil.copyfile(HERE / case["file"], path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind != "missing":  # pragma: no cover
        raise AssertionError(f"unknown make kind {kind!r}")
    before = _tree(tmp_path)
    code, fragment = case["expect"]
    run = (ddtctl if kind in OWN_PROCESS else ddtctl_here)("kernels", "tree", "--logits", path, "--budget", 2)
    check_answer(run, code, fragment, case["id"])
    if code == 0:
        assert "nan" not in run.stdout.lower() and "inf" not in run.stdout.lower()
    assert _tree(tmp_path) == before


# -- overlay import ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site") / "site-packages"
    for rel, text in SITE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _make_src(case: dict, tmp: Path) -> tuple[Path, Path, list[str], Path]:
    """(src, out, extra args, the tree that must not change)."""
    work = tmp / "work"
    work.mkdir()
    (work / "notes.txt").write_text("other work beside the source\n")
    src, out, extra = work / "src", tmp / "out", []
    if case.get("src"):
        shutil.copytree(HERE / case["src"], src)
    kind = case.get("make")
    names = {"name-backslash": "back\\slash.py", "name-newline": "new\nline.py", "name-escape": "\x1b[2J.py"}
    if kind in names:
        (src / "srt" / names[kind]).write_text("X = 1\n")
    elif kind == "symlink":
        (src / "srt" / "link.py").symlink_to(src / "srt" / "a.py")
    elif kind == "fifo":
        os.mkfifo(src / "srt" / "pipe.py")
    elif kind == "src-file":
        src.write_text("not a directory\n")
    elif kind == "out-is-src":
        out, extra = src, ["--force"]
    elif kind == "out-is-parent":
        out, extra = work, ["--force"]
    elif kind in ("out-foreign", "out-not-empty"):
        out.mkdir()
        (out / "thesis.tex").write_text("months of work\n")
        extra = ["--force"] if kind == "out-foreign" else []
    elif kind is not None:  # pragma: no cover
        raise AssertionError(f"unknown make kind {kind!r}")
    return src, out, extra, tmp


@pytest.mark.parametrize("case", CASES["overlay"], ids=[c["id"] for c in CASES["overlay"]])
def test_overlay_import_corpus(case, tmp_path, site):
    src, out, extra, watch = _make_src(case, tmp_path)
    before = {k: v for k, v in _tree(watch).items() if not k.startswith("out")}
    code, fragment = case["expect"]
    run = (ddtctl if case.get("make") in OWN_PROCESS else ddtctl_here)(
        "overlay", "import", src, "--out", out, *extra, "--sglang-root", site, "--python", sys.executable)
    check_answer(run, code, fragment, case["id"])
    after = {k: v for k, v in _tree(watch).items() if not k.startswith("out")}
    assert after == before, f"{case['id']}: the source (or what is around it) changed"
    if code != 0 and out != src and out != src.parent:
        if (case.get("make") or "").startswith("out-"):
            assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]
        else:
            assert not out.exists()  # a refused import writes nothing
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging dir left behind
