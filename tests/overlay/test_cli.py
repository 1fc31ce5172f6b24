"""`ddtctl overlay ...` as a user runs it: text and JSON output, one-line errors, exit codes (4 = overlay failure)."""

from __future__ import annotations

import os
import subprocess
import sys

from json_envelope import results
from overlay_fixtures import snapshot, write


def ddtctl(*args, env_extra=None):
    env = dict(os.environ, COLUMNS="200", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


def test_build_install_status_uninstall_cycle(fake_site, fake_payload, tmp_path):
    py, state = sys.executable, tmp_path / "state"
    pristine = snapshot(fake_site)
    out = ddtctl("overlay", "build", "--payload", fake_payload, "--sglang-root", fake_site, "--python", py,
                 "--out", tmp_path / "b", "--format", "json")
    assert out.returncode == 0, out.stderr
    built = results(out.stdout, "overlay build")
    assert {f["kind"] for f in built["files"]} == {"patched", "added"}

    text = ddtctl("overlay", "build", "--payload", fake_payload, "--sglang-root", fake_site, "--python", py,
                  "--out", tmp_path / "b")
    assert "patched  sglang/srt/a.py" in text.stdout and "view:" in text.stdout

    out = ddtctl("overlay", "install", "--sglang-root", fake_site, "--payload", tmp_path / "b" / "payload",
                 "--python", py, "--state-dir", state)
    assert out.returncode == 0 and "installed payload" in out.stdout, out.stderr
    st = ddtctl("overlay", "status", "--sglang-root", fake_site, "--python", py, "--state-dir", state,
                "--format", "json")
    assert results(st.stdout, "overlay status")["installed"] is True
    again = ddtctl("overlay", "install", "--sglang-root", fake_site, "--payload", tmp_path / "b" / "payload",
                   "--python", py, "--state-dir", state)
    assert again.returncode == 0 and "nothing to do: this payload is already installed" in again.stdout
    out = ddtctl("overlay", "uninstall", "--sglang-root", fake_site, "--python", py, "--state-dir", state)
    assert out.returncode == 0 and "uninstalled" in out.stdout
    assert snapshot(fake_site) == pristine


def test_install_builds_a_payload_source_against_the_target(fake_site, fake_payload, tmp_path):
    out = ddtctl("overlay", "install", "--sglang-root", fake_site, "--payload", fake_payload, "--python",
                 sys.executable, "--state-dir", tmp_path / "state", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert results(out.stdout, "overlay install")["action"] == "installed"
    assert (fake_site / "fake_ddtree" / "plugin.py").is_file()


def test_hash_refusal_is_one_line_with_exit_4(fake_site, fake_payload, tmp_path):
    b = fake_site / "sglang/srt/sub/b.py"
    write(b, b.read_text() + "# edited by hand\n")
    out = ddtctl("overlay", "build", "--payload", fake_payload, "--sglang-root", fake_site, "--python",
                 sys.executable, "--out", tmp_path / "b")
    assert out.returncode == 4
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddtctl: error: sglang/srt/sub/b.py: sha256 ")
    assert "not the pristine file of sglang 0.5.23" in lines[0] and "Traceback" not in out.stderr


def test_install_refusal_exit_4_and_nothing_changed(fake_site, fake_payload, tmp_path):
    write(fake_site / "fake_ddtree" / "plugin.py", "not ours\n")
    before = snapshot(fake_site)
    out = ddtctl("overlay", "install", "--sglang-root", fake_site, "--payload", fake_payload, "--python",
                 sys.executable, "--state-dir", tmp_path / "state")
    assert out.returncode == 4 and "fake_ddtree/plugin.py already exists" in out.stderr
    assert "refusing to overwrite" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert snapshot(fake_site) == before


def test_import_and_manifest_commands(fake_site, tmp_path):
    src = tmp_path / "hand"
    write(src / "sglang/srt/sub/b.py", (fake_site / "sglang/srt/sub/b.py").read_text().replace(
        '"DFLASH")', '"DFLASH", "DDTREE")'))
    out = ddtctl("overlay", "import", src, "--out", tmp_path / "imp", "--sglang-root", fake_site, "--python",
                 sys.executable)
    assert out.returncode == 0 and "patched sglang/srt/sub/b.py (2 lines)" in out.stdout, out.stderr
    assert "next: ddtctl overlay build --payload" in out.stdout
    ok = ddtctl("overlay", "manifest", "--payload", tmp_path / "imp", "--sglang-root", fake_site, "--python",
                sys.executable)
    assert ok.returncode == 0 and "up to date" in ok.stdout
    patch = next((tmp_path / "imp" / "patches").iterdir())
    patch.write_text(patch.read_text().replace('"DDTREE")', '"DDTREE", "X")'))
    stale = ddtctl("overlay", "manifest", "--payload", tmp_path / "imp", "--sglang-root", fake_site, "--python",
                   sys.executable)
    assert stale.returncode == 4 and "stale sglang/srt/sub/b.py" in stale.stdout
    fixed = ddtctl("overlay", "manifest", "--payload", tmp_path / "imp", "--sglang-root", fake_site, "--python",
                   sys.executable, "--update")
    assert fixed.returncode == 0 and "updated sglang/srt/sub/b.py" in fixed.stdout


def test_overlay_cli_module_import_stays_light():
    code = ("import sys; import ddtctl.cli.overlay; heavy = {'torch', 'sglang', 'paramiko', 'ddtctl.overlay.build'};"
            "print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
