"""procs.python_output: the one helper that runs another Python interpreter locally (issue #33 item 5), and a
scan that keeps it the one (a sixth wrapper that builds its own `[python, "-I", "-c", ...]` fails here)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from ddtctl import elsewhere
from ddtctl.errors import EnvironmentMissing, OverlayError
from ddtctl.procs import python_argv, python_output
from tests.test_io_boundary import _qualname_map as _functions

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ddtctl"


def test_python_argv_is_isolated_unless_told():
    assert python_argv("/py", "pass") == ["/py", "-I", "-c", "pass"]
    assert python_argv("/py", ["s.py", "--x"], isolated=False) == ["/py", "s.py", "--x"]
    assert python_argv(Path("/py"), ["s.py"], unbuffered=True) == ["/py", "-I", "-u", "s.py"]


def test_python_output_applies_minus_I_and_passes_input(monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # -I ignores PYTHON* variables
    code = "import sys; print(sys.flags.isolated, sys.flags.dont_write_bytecode, sys.stdin.read())"
    out = python_output(sys.executable, code, input="fed", timeout_s=30, what="probe")
    assert (out.returncode, out.stdout.split()) == (0, ["1", "0", "fed"])
    out = python_output(sys.executable, ["-c", code], isolated=False, input="x", timeout_s=30)
    assert out.stdout.split() == ["0", "1", "x"]


def test_python_output_is_bounded_and_has_a_deadline():
    flood = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    with pytest.raises(OverlayError) as err:
        python_output(
            sys.executable, flood, timeout_s=30, limit=1 << 20, what="the flood", error=OverlayError
        )
    assert (err.value.message, err.value.where) == (
        "the flood printed more than 1 MiB (killed)",
        sys.executable,
    )
    with pytest.raises(EnvironmentMissing) as err:
        python_output(sys.executable, "import time; time.sleep(60)", timeout_s=0.3, what="the hang")
    assert err.value.message == "the hang did not finish within 0.3 s (killed)"


def test_python_output_cannot_start_is_the_start_error():
    with pytest.raises(EnvironmentMissing, match="cannot start the target interpreter"):
        python_output(
            "/nonexistent/python",
            "pass",
            timeout_s=5,
            what="the target interpreter",
            error=OverlayError,
            start_error=EnvironmentMissing,
        )


# Files whose argv lists are not local processes: each a command the GPU host runs over SSH.
REMOTE = {
    ("ddtctl/deploy/launch.py", "warmup_argv"): "the payload's kernel warm-up, run on the host",
    ("ddtctl/remote/transport.py", "agent_argv"): "the agent's boot line, run on the host over SSH",
    ("ddtctl/deploy/remote_dryrun.py", "remote_dry_run"): "the resolver worker, run on the host over SSH",
}
SKIP = {"ddtctl/procs.py"} | {f"ddtctl/{e.path}" for e in elsewhere.FILES}
SKIP_UNDER = tuple(f"ddtctl/{t.path}" for t in elsewhere.TREES)


def _starts_python(node: ast.AST) -> bool:
    """A list that reads as an interpreter's argv: a first word that is a value (python, venv_py, host.python,
    str(python); a shell's `"sh"` is a constant) followed by `-c` or `-I`, or sys.executable first."""
    if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
        return False
    elts = list(node.elts)
    if isinstance(elts[0], ast.Constant) and elts[0].value == "env":  # `env NAME=value ... python ...`
        while elts and isinstance(elts[0], (ast.Constant, ast.JoinedStr)):
            elts.pop(0)
    if not elts:
        return False
    if ast.unparse(elts[0]) == "sys.executable":
        return True
    words = {e.value for e in elts[1:] if isinstance(e, ast.Constant)}
    return isinstance(elts[0], (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and bool(
        words & {"-c", "-I"}
    )


def _scan() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in SKIP or rel.startswith(SKIP_UNDER):
            continue
        text = path.read_text(encoding="utf-8")
        if not any(w in text for w in ('"-c"', '"-I"', "sys.executable")):  # nothing to see: not parsed
            continue
        tree = ast.parse(text, filename=rel)
        where = _functions(tree)
        found += [(rel, where.get(n, "<module>"), n.lineno) for n in ast.walk(tree) if _starts_python(n)]
    return found


def test_no_other_local_python_wrapper():
    found = _scan()
    bad = [f for f in found if (f[0], f[1]) not in REMOTE]
    assert not bad, "another Python started by hand (use procs.python_output / spawn_python):\n" + "\n".join(
        f"  {file}:{line} in {func}()" for file, func, line in bad
    )
    stale = set(REMOTE) - {(f[0], f[1]) for f in found}
    assert not stale, f"REMOTE entries that no longer build a python argv (remove them): {sorted(stale)}"


@pytest.mark.parametrize(
    "source, flagged",
    [
        ('[str(python), "-I", "-c", code]', True),
        ('[venv_py, "-c", code]', True),
        ("[sys.executable, script]", True),
        ('[os.environ.get("SHELL") or "/bin/sh", "-c", cmd]', False),
        ('["sh", "-c", script]', False),
        ('["env", "X=1", host.python, "-I", "-u", worker]', True),
        ('["pip", "install", "x"]', False),
        ('{"-u", "-I"}', False),
    ],
)
def test_the_scan_sees(source, flagged):
    assert _starts_python(ast.parse(source).body[0].value) is flagged
