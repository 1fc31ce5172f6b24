"""installer.py: atomic install, exact uninstall, refusals, and a real SIGKILL in the middle of an install.

The installer runs as its own process (`python -I installer.py ...`, from a copy outside the repo, as deploy runs it
remotely); the interruption tests stop it at a pause point (test hook DDTCTL_INSTALLER_PAUSE_AT), SIGKILL it, and check
that the next installer command leaves the tree exactly old or exactly new.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtctl.overlay import installer
from ddtctl.overlay.build import build

from overlay_fixtures import make_payload, snapshot, write

INSTALLER = Path(installer.__file__)


@pytest.fixture
def tool(tmp_path) -> Path:
    """installer.py copied away from the repo: it must run with the standard library alone."""
    d = tmp_path / "remote-tools"
    d.mkdir()
    shutil.copy2(INSTALLER, d / "installer.py")
    return d / "installer.py"


@pytest.fixture
def staged(fake_site, fake_payload, tmp_path) -> Path:
    return build(fake_payload, sglang_root=fake_site, python=sys.executable, out_dir=tmp_path / "build").payload_dir


def run(tool: Path, command: str, site: Path, state: Path, payload: Path | None = None, env=None):
    cmd = [sys.executable, "-I", str(tool), command, "--sglang-root", str(site), "--state-dir", str(state)]
    if payload is not None:
        cmd += ["--payload", str(payload)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tool.parent, timeout=120)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_installer_imports_only_the_standard_library():
    tree = ast.parse(INSTALLER.read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods.add(node.module.split(".")[0])
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)


def test_install_then_uninstall_restores_exactly(tool, fake_site, staged, tmp_path):
    state = tmp_path / "state"
    pristine = snapshot(fake_site)
    rc, out = run(tool, "install", fake_site, state, staged)
    assert rc == 0 and out["ok"] and out["action"] == "installed"
    tag = sys.implementation.cache_tag
    assert "def ddtree()" in (fake_site / "sglang/srt/a.py").read_text()
    assert (fake_site / "fake_ddtree/plugin.py").is_file()
    assert (fake_site / f"fake_ddtree/__pycache__/plugin.{tag}.pyc").is_file()  # compiled by the target python
    # bytecode of a patched module is the patched module's (compiled anew, not pip's old one)
    imp = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                          "import sglang.srt.a as a; print(a.ddtree(), a.__cached__)", str(fake_site)],
                         capture_output=True, text=True)
    assert imp.stdout.startswith("tree "), imp.stderr
    installed = snapshot(fake_site)
    assert installed != pristine

    rc, st = run(tool, "status", fake_site, state)
    assert st["installed"] and st["drift"] == [] and "sglang/srt/a.py" in st["files"]
    rc, again = run(tool, "install", fake_site, state, staged)
    assert rc == 0 and again["action"] == "none"  # idempotent: same payload, nothing changes
    assert snapshot(fake_site) == installed

    rc, out = run(tool, "uninstall", fake_site, state)
    assert rc == 0 and out["action"] == "uninstalled"
    assert snapshot(fake_site) == pristine  # bytes, modes, mtimes, pip's .pyc files, no leftover directories
    rc, st = run(tool, "status", fake_site, state)
    assert not st["installed"]


def test_refusals_change_nothing(tool, fake_site, staged, tmp_path):
    state = tmp_path / "state"
    before = snapshot(fake_site)
    # 1. a locally modified base
    b = fake_site / "sglang/srt/sub/b.py"
    original = b.read_bytes()
    b.write_bytes(original + b"# local\n")
    rc, out = run(tool, "install", fake_site, state, staged)
    assert rc == 1 and not out["ok"] and "sglang/srt/sub/b.py" in out["error"] and "differs" in out["error"]
    b.write_bytes(original)
    os.utime(b, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    # 2. an added path that exists and is not ours
    write(fake_site / "fake_ddtree/plugin.py", "mine\n")
    rc, out = run(tool, "install", fake_site, state, staged)
    assert rc == 1 and "already exists" in out["error"]
    shutil.rmtree(fake_site / "fake_ddtree")
    assert snapshot(fake_site) == before
    # 3. a tampered payload
    p = staged / "files/fake_ddtree/plugin.py"
    p.write_text(p.read_text() + "# tampered\n")
    rc, out = run(tool, "install", fake_site, state, staged)
    assert rc == 1 and "modified after it was built" in out["error"]
    assert snapshot(fake_site) == before


def test_drift_is_reported_and_blocks_uninstall(tool, fake_site, staged, tmp_path):
    state = tmp_path / "state"
    run(tool, "install", fake_site, state, staged)
    a = fake_site / "sglang/srt/a.py"
    a.write_text(a.read_text() + "# hotfix\n")
    rc, st = run(tool, "status", fake_site, state)
    assert st["drift"] == ["sglang/srt/a.py"]
    rc, out = run(tool, "uninstall", fake_site, state)
    assert rc == 1 and "sglang/srt/a.py was changed after the payload was installed" in out["error"]


def test_upgrade_to_another_payload_then_uninstall(tool, fake_site, tmp_path):
    state = tmp_path / "state"
    pristine = snapshot(fake_site)
    v1 = build(make_payload(tmp_path, fake_site, version="0.1.0", extra_module="old_only"), sglang_root=fake_site,
               python=sys.executable, out_dir=tmp_path / "b1").payload_dir
    v2 = build(make_payload(tmp_path, fake_site, version="0.2.0", b_tag="DDTREE2", with_b=True),
               sglang_root=fake_site, python=sys.executable, out_dir=tmp_path / "b2").payload_dir
    assert run(tool, "install", fake_site, state, v1)[1]["action"] == "installed"
    assert (fake_site / "fake_ddtree/old_only.py").exists()
    rc, out = run(tool, "install", fake_site, state, v2)
    assert rc == 0 and out["action"] == "replaced"
    assert not (fake_site / "fake_ddtree/old_only.py").exists()
    assert not (fake_site / "fake_ddtree-0.1.0.dist-info").exists()
    assert "DDTREE2" in (fake_site / "sglang/srt/sub/b.py").read_text()
    assert run(tool, "uninstall", fake_site, state)[1]["action"] == "uninstalled"
    assert snapshot(fake_site) == pristine


def test_view_of_a_root_where_the_payload_is_installed(tool, fake_site, staged, tmp_path):
    """deploy builds a view on the host before every release, also when a payload is installed there already."""
    state = tmp_path / "state"
    run(tool, "install", fake_site, state, staged)
    proc = subprocess.run([sys.executable, "-I", str(tool), "view", "--sglang-root", str(fake_site), "--payload",
                           str(staged), "--out", str(tmp_path / "v")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    assert (tmp_path / "v/sglang/srt/a.py").read_bytes() == (staged / "files/sglang/srt/a.py").read_bytes()
    # another version installed: accepted with the install's state dir (its saved pristine copies match the base)
    a = fake_site / "sglang/srt/a.py"
    a_installed = a.read_bytes()
    a.write_bytes(a_installed + b"# an older payload's version\n")
    args = [sys.executable, "-I", str(tool), "view", "--sglang-root", str(fake_site), "--payload", str(staged),
            "--out", str(tmp_path / "v2")]
    assert subprocess.run(args, capture_output=True, text=True).returncode == 1
    assert subprocess.run(args + ["--state-dir", str(state)], capture_output=True, text=True).returncode == 0
    a.write_bytes(a_installed)


def test_view_command_refuses_a_non_pristine_root(tool, fake_site, staged, tmp_path):
    b = fake_site / "sglang/srt/sub/b.py"
    b.write_text(b.read_text() + "# x\n")
    proc = subprocess.run([sys.executable, "-I", str(tool), "view", "--sglang-root", str(fake_site), "--payload",
                           str(staged), "--out", str(tmp_path / "v")], capture_output=True, text=True)
    assert proc.returncode == 1 and "does not hold the pristine base" in proc.stdout


# --------------------------------------------------------------------------------------------- interruption
def _start_paused(tool, command, site, state, payload, point, marker):
    env = dict(os.environ, DDTCTL_INSTALLER_PAUSE_AT=point, DDTCTL_INSTALLER_PAUSE_FILE=str(marker))
    cmd = [sys.executable, "-I", str(tool), command, "--sglang-root", str(site), "--state-dir", str(state)]
    if payload is not None:
        cmd += ["--payload", str(payload)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tool.parent)
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"installer exited before the pause point {point}: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"pause point {point} never reached")
        time.sleep(0.02)
    return proc


def _kill9(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _ops_in_journal(state: Path) -> int:
    return len(json.loads((state / "journal.json").read_text())["ops"])


def test_sigkill_during_install_rolls_back_to_exactly_old(tool, fake_site, staged, tmp_path):
    state = tmp_path / "state"
    old = snapshot(fake_site)
    marker = tmp_path / "paused"
    # first find out how many atomic steps an install has
    proc = _start_paused(tool, "install", fake_site, state, staged, "apply:1", marker)
    n_ops = _ops_in_journal(state)
    _kill9(proc)
    points = sorted({1, n_ops // 2, n_ops})
    assert n_ops >= 10
    for i, n in enumerate(points):
        if i:  # the first run above is the n=1 case
            marker.unlink()
            proc = _start_paused(tool, "install", fake_site, state, staged, f"apply:{n}", marker)
            _kill9(proc)
        mid = snapshot(fake_site)
        assert mid != old, f"apply:{n}: the kill should have left a half-changed tree behind"
        # the next installer run (any command) recovers before doing anything else
        rc, st = run(tool, "status", fake_site, state)
        assert rc == 0 and st["recovered"].startswith("rolled back interrupted install"), st
        assert not st["installed"]
        assert snapshot(fake_site) == old, f"apply:{n}: not exactly the old tree after recovery"
        assert not (state / "journal.json").exists()
    # and a normal install still works afterwards
    assert run(tool, "install", fake_site, state, staged)[1]["action"] == "installed"


def test_sigkill_after_commit_completes_to_exactly_new(tool, fake_site, staged, tmp_path):
    state = tmp_path / "state"
    marker = tmp_path / "paused"
    ref_site = tmp_path / "ref" / "site-packages"
    shutil.copytree(fake_site, ref_site, symlinks=True)
    run(tool, "install", ref_site, tmp_path / "ref-state", staged)
    new = snapshot(ref_site)

    proc = _start_paused(tool, "install", fake_site, state, staged, "commit", marker)
    _kill9(proc)
    rc, st = run(tool, "status", fake_site, state)
    assert st["recovered"].startswith("completed interrupted install"), st
    assert st["installed"] and st["drift"] == []
    got = snapshot(fake_site)
    # the same tree as an uninterrupted install; .pyc bytes embed the source's absolute path, so for them: same
    # set of files, each valid for its source (the header's mtime and size are the source's)
    def comparable(snap):
        return {k: (v[:1] if k.endswith(".pyc") else v[:3]) for k, v in snap.items()}

    assert comparable(got) == comparable(new)
    for pyc in fake_site.rglob("*.pyc"):
        src = pyc.parent.parent / (pyc.name.split(".")[0] + ".py")
        header = pyc.read_bytes()[8:16]
        st = src.stat()
        assert int.from_bytes(header[:4], "little") == int(st.st_mtime) & 0xFFFFFFFF, pyc
        assert int.from_bytes(header[4:], "little") == st.st_size & 0xFFFFFFFF, pyc


def test_sigkill_during_uninstall_rolls_back_to_installed(tool, fake_site, staged, tmp_path):
    state = tmp_path / "state"
    pristine = snapshot(fake_site)
    run(tool, "install", fake_site, state, staged)
    installed = snapshot(fake_site)
    marker = tmp_path / "paused"
    proc = _start_paused(tool, "uninstall", fake_site, state, None, "apply:2", marker)
    _kill9(proc)
    assert snapshot(fake_site) not in (installed, pristine)
    rc, st = run(tool, "status", fake_site, state)
    assert st["recovered"].startswith("rolled back interrupted uninstall") and st["installed"]
    assert snapshot(fake_site) == installed
    assert run(tool, "uninstall", fake_site, state)[1]["action"] == "uninstalled"
    assert snapshot(fake_site) == pristine


def test_entry_point_is_the_last_file_in_and_the_first_out(tool, fake_site, staged, tmp_path):
    """Until recovery has run, a half-applied tree must never expose the plugin's entry point."""
    state = tmp_path / "state"
    marker = tmp_path / "paused"
    proc = _start_paused(tool, "install", fake_site, state, staged, "apply:1", marker)
    ops = [o["path"] for o in json.loads((state / "journal.json").read_text())["ops"]]
    _kill9(proc)
    run(tool, "status", fake_site, state)
    entry = [i for i, p in enumerate(ops) if ".dist-info/" in p]
    assert entry and min(entry) > max(i for i, p in enumerate(ops) if ".dist-info/" not in p)

    run(tool, "install", fake_site, state, staged)
    marker.unlink()
    proc = _start_paused(tool, "uninstall", fake_site, state, None, "apply:1", marker)
    ops = [o["path"] for o in json.loads((state / "journal.json").read_text())["ops"]]
    _kill9(proc)
    assert ".dist-info/" in ops[0]
    run(tool, "status", fake_site, state)


def test_concurrent_installers_do_not_interleave(tool, fake_site, staged, tmp_path):
    state = tmp_path / "state"
    marker = tmp_path / "paused"
    proc = _start_paused(tool, "install", fake_site, state, staged, "apply:1", marker)
    try:
        env = dict(os.environ)
        cmd = [sys.executable, "-I", str(tool), "status", "--sglang-root", str(fake_site), "--state-dir", str(state)]
        # the lock holder is paused forever: the second one gives up with a clear refusal (shortened timeout)
        code = ("import runpy,sys; sys.argv=" + repr([str(tool)] + cmd[3:]) + ";"
                "import importlib.util as u; s=u.spec_from_file_location('inst', " + repr(str(tool)) + ");"
                "m=u.module_from_spec(s); s.loader.exec_module(m);"
                "orig=m._locked; m._locked=lambda d, timeout_s=60.0: orig(d, 0.5); sys.exit(m.main(sys.argv[1:]))")
        out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 1 and "another installer holds the lock" in out.stdout
    finally:
        _kill9(proc)
    run(tool, "status", fake_site, state)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_root_is_a_clean_refusal(tool, fake_site, staged, tmp_path):
    before = snapshot(fake_site)
    (fake_site / "sglang" / "srt").chmod(0o555)
    try:
        rc, out = run(tool, "install", fake_site, tmp_path / "state", staged)
    finally:
        (fake_site / "sglang" / "srt").chmod(0o755)
    assert rc == 1 and "PermissionError" in out["error"] and "nothing was changed" in out["error"]
    assert snapshot(fake_site) == before


def test_failure_mid_apply_rolls_back_in_process(tool, fake_site, staged, tmp_path):
    """An error after some files moved in (here: a byte-compile failure injected into the staged payload) is rolled
    back by the same process, leaving exactly the old tree."""
    before = snapshot(fake_site)
    m = json.loads((staged / installer.MANIFEST_NAME).read_text())
    bad = staged / "files" / "fake_ddtree" / "plugin.py"
    bad.write_text("def broken(:\n")
    for e in m["files"]:
        if e["path"] == "fake_ddtree/plugin.py":
            e["sha256"] = installer.sha256_file(str(bad))
    (staged / installer.MANIFEST_NAME).write_text(json.dumps(m))
    rc, out = run(tool, "install", fake_site, tmp_path / "state", staged)
    assert rc == 1 and "byte-compiling the payload failed" in out["error"] and "rolled back" in out["error"]
    assert snapshot(fake_site) == before
    assert not (tmp_path / "state" / "journal.json").exists()
