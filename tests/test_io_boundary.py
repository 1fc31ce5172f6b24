"""The I/O boundary (issue #31, "Enforcement"): code under ddtctl/ opens files, parses YAML/JSON streams and
starts subprocesses only through the bounded helpers.

- files: ddtctl/safeio.py (read_regular, load_json / load_yaml, write_new / rewrite / write_bytes_new /
  append_text, glob_paths);
- subprocesses: ddtctl/procs.py (run_bounded, spawn, kill_group).

An AST scan of every module under ddtctl/ flags: the builtin open(), io.open / codecs.open / os.open /
os.fdopen, Path.read_text / read_bytes / write_text / write_bytes, a `.open(...)` with a file mode, json.load
(of a stream), yaml.load / safe_load / full_load / unsafe_load / *_all, a recursive glob.glob / glob.iglob, and
subprocess.* / os.popen / os.system / os.spawn* / os.exec* / pty.spawn / asyncio.create_subprocess_*.

What may do it anyway is listed below with the reason, per file (code that runs elsewhere, with its own
limits) or per (file, function). A new entry needs a reason a reviewer accepts; a stale entry fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ddtctl"

# Whole files: the helpers themselves, and code that does not run in the ddtctl process (standard library only,
# on the GPU host or under the target interpreter, where ddtctl's modules are not importable).
FILES = {
    "ddtctl/safeio.py": "the file helpers",
    "ddtctl/procs.py": "the subprocess helpers",
    "ddtctl/remote/agent.py": "runs on the GPU host (stdlib only; its own limits, issue #31 remote side)",
    "ddtctl/overlay/installer.py": "runs on the GPU host / under the target interpreter (stdlib only)",
    "ddtctl/overlay/smoke.py": "runs under the target SGLang interpreter (stdlib + sglang only)",
    "ddtctl/bridge/resolver_worker.py": "runs under the managed env's interpreter (stdlib + sglang only)",
    "ddtctl/schema/argparse_dump.py": "runs under the interpreter being dumped (stdlib + sglang only)",
}
FILES_UNDER = {
    "ddtctl/payload/": "the DDTREE payload: runs inside SGLang on the GPU host",
}
# (file, function): each a reviewed exception.
FUNCTIONS = {
    ("ddtctl/envs.py", "__enter__"): "the env-build lock file (flock) in ddtctl's own cache directory",
    ("ddtctl/envs.py", "create_env"): "the env-build log pip's output is copied to, in ddtctl's own cache",
    ("ddtctl/overlay/build.py", "_build_lock"): "the overlay build lock file (flock) in ddtctl's own cache",
    ("ddtctl/yamledit.py", "_plain_reads_back"): "parses a one-line scalar ddtctl rendered itself, not a file",
    # The remote side (issue #31's hosts helper owns these; listed so that a new site is still caught):
    ("ddtctl/remote/inventory/files.py", "read_inventory_data"): "parses bytes read_regular bounded (its own loader)",
    ("ddtctl/remote/proxy.py", "__init__"): "a ProxyCommand: a byte stream SSH speaks over, not read to its end",
    ("ddtctl/remote/ship.py", "_send"): "streams a payload file ddtctl built to the host, in bounded chunks",
    ("ddtctl/remote/ship.py", "__init__"): "an SFTP file on the host (paramiko), not a local file",
    ("ddtctl/render.py", "_sglang_config"): "reads back the YAML the render re-check dumped in memory, not a file",
}


def _qualname_map(tree: ast.AST) -> dict[ast.AST, str]:
    out: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            out[child] = here
            visit(child, here)

    visit(tree, "<module>")
    return out


_MODE = {"r", "rb", "w", "wb", "a", "ab", "r+", "rb+", "r+b", "w+", "wb+", "a+", "x", "xb", "rt", "wt"}
_PATH_IO = {"read_text", "read_bytes", "write_text", "write_bytes"}
_YAML = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "full_load_all"}
_SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _violation(call: ast.Call) -> str | None:
    func = call.func
    name = _dotted(func)
    if isinstance(func, ast.Name):
        if func.id == "open":
            return "open()"
        if func.id == "Popen":
            return "Popen()"
        return None
    if not isinstance(func, ast.Attribute):
        return None
    attr = func.attr
    base = _dotted(func.value)
    if name in ("io.open", "codecs.open", "os.open", "os.fdopen"):
        return name + "()"
    if attr in _PATH_IO:
        return f".{attr}()"
    if attr == "open" and any(
        isinstance(a, ast.Constant) and a.value in _MODE for a in [*call.args, *(k.value for k in call.keywords)]
    ):
        return ".open(<mode>)"
    if name == "json.load":
        return "json.load()"
    if base == "yaml" and attr in _YAML:
        return f"yaml.{attr}()"
    if name in ("glob.glob", "glob.iglob") and any(
        k.arg == "recursive" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
        for k in call.keywords
    ):
        return f"{name}(recursive=True)"
    if base == "subprocess" and attr in _SUBPROCESS:
        return f"subprocess.{attr}()"
    if name in ("os.popen", "os.system", "pty.spawn") or (
        base == "os" and (attr.startswith("spawn") or attr.startswith("exec"))
    ):
        return name + "()"
    if base == "asyncio" and attr.startswith("create_subprocess"):
        return name + "()"
    return None


def scan() -> list[tuple[str, str, int, str]]:
    """(file, function, line, what) of every I/O outside the helpers and the allowlist."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in FILES or any(rel.startswith(d) for d in FILES_UNDER):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        where = _qualname_map(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (what := _violation(node)):
                found.append((rel, where.get(node, "<module>"), node.lineno, what))
    return found


def test_no_file_or_subprocess_io_outside_the_helpers():
    bad = [f for f in scan() if (f[0], f[1]) not in FUNCTIONS]
    assert not bad, "I/O outside ddtctl/safeio.py and ddtctl/procs.py (use their helpers):\n" + "\n".join(
        f"  {file}:{line} in {func}(): {what}" for file, func, line, what in bad
    )


def test_the_allowlist_is_not_stale():
    used = {(f[0], f[1]) for f in scan()}
    stale = sorted(set(FUNCTIONS) - used)
    assert not stale, f"allowlist entries that no longer do I/O (remove them): {stale}"
    missing = [f for f in [*FILES, *FILES_UNDER] if not (ROOT / f).exists()]
    assert not missing, f"allowlisted paths that do not exist: {missing}"


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("open('x')", True),
        ("Path('x').read_text()", True),
        ("p.write_bytes(b'')", True),
        ("p.open('rb')", True),
        ("conn.open()", False),
        ("json.load(f)", True),
        ("json.loads(s)", False),
        ("yaml.safe_load(s)", True),
        ("glob.glob(p, recursive=True)", True),
        ("glob.glob(p)", False),
        ("subprocess.run(['x'])", True),
        ("subprocess.Popen(['x'])", True),
        ("os.popen('x')", True),
        ("os.system('x')", True),
        ("os.execv('x', [])", True),
        ("os.fdopen(3)", True),
    ],
)
def test_the_scan_sees(source, flagged):
    call = ast.parse(source).body[0].value
    assert (_violation(call) is not None) is flagged
