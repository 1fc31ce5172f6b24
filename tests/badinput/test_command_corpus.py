"""The command corpus (tests/badinput/commands/*.yaml): bad input to any ddtctl command, beyond the profile reader.

Each file holds a list of cases; a case runs one ddtctl command line in its own process (a time and memory limit,
HOME and the cache in the case's temporary directory) and keeps the contract of test_badinput.check_answer: the
expected exit code and a message fragment, no traceback, stderr at most one line, no raw control characters, and
every input file left as it was (unless `changes: true`).

    - id: inventory-port-zero            # unique across the corpus
      argv: [status, -i, "{tmp}/hosts.yaml", ct200]
      files: {hosts.yaml: "hosts: {ct200: {address: 127.0.0.1, port: 0}}\\n"}   # written under {tmp}
      make: {key: fifo}                   # special inputs under {tmp}: fifo, devzero, devurandom, loop, dir,
                                          # huge (20 MB), deep-json, deep-yaml, alias-bomb
      env: {DDTCTL_INVENTORY: "{tmp}/hosts.yaml"}
      expect: [2, "port must be"]
      timeout: 30                         # seconds (default 30)

Placeholders in argv, files and env: {tmp} (the case's directory), {repo} (the checkout), {python} (this Python).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_badinput import REPO, _limits, _tree, check_answer

HERE = Path(__file__).resolve().parent


def _load() -> list[dict]:
    cases: list[dict] = []
    for path in sorted((HERE / "commands").glob("*.yaml")):
        for case in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            case["_file"] = path.name
            cases.append(case)
    ids = [c["id"] for c in cases]
    dups = {i for i in ids if ids.count(i) > 1}
    assert not dups, f"command corpus ids used twice: {sorted(dups)}"
    return cases


CASES = _load()


def _fill(text: str, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{repo}", str(REPO)).replace("{python}", sys.executable)


def _make(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind == "devurandom":
        path.symlink_to("/dev/urandom")
    elif kind == "loop":
        other = path.with_name(path.name + ".other")
        path.symlink_to(other)
        other.symlink_to(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "huge":
        with path.open("w") as out:
            out.write("# " + "x" * 78 + "\n")
            for _ in range(20 * 1024 * 1024 // 81):
                out.write("#" * 80 + "\n")
    elif kind == "deep-json":
        path.write_text("[" * 10000 + "]" * 10000)
    elif kind == "deep-yaml":
        path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "alias-bomb":
        lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
        lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
        path.write_text("\n".join(lines) + "\n")
    else:  # pragma: no cover - a typo in a corpus file
        raise AssertionError(f"unknown make kind {kind!r}")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_command_corpus(case, tmp_path):
    work = tmp_path / "case"
    work.mkdir()
    for name, text in (case.get("files") or {}).items():
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_fill(text, work))
    for name, kind in (case.get("make") or {}).items():
        _make(kind, work / name)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDTCTL_", "SSH_"))}
    env.update(HOME=str(home), XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")),
               COLUMNS="200", NO_COLOR="1")
    env.update({k: _fill(str(v), work) for k, v in (case.get("env") or {}).items()})
    before = _tree(work)
    argv = [_fill(str(a), work) for a in case["argv"]]
    run = subprocess.run([sys.executable, "-m", "ddtctl", *argv], capture_output=True, text=True, errors="replace",
                         timeout=case.get("timeout", 30), cwd=work, env=env, preexec_fn=_limits,
                         stdin=subprocess.DEVNULL)
    code, fragment = case["expect"]
    check_answer(run, code, fragment, f"{case['id']} ({case['_file']})")
    if not case.get("changes"):
        assert _tree(work) == before, f"{case['id']}: the command changed its inputs"
