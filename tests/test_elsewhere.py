"""ddtctl/elsewhere.py is the one list of code that runs outside the ddtctl process: each entry imports only what
its interpreter has, every standard-library file imports under `python -I -S` (no site-packages, no ddtctl), the
string programs parse and import within their bounds, and the README and the size tool follow the list."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from ddtctl import elsewhere

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ddtctl"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _top_imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." if node.level else (node.module or "").split(".")[0])
    return found


@pytest.mark.parametrize("entry", elsewhere.FILES, ids=lambda e: e.path)
def test_each_file_imports_only_what_its_interpreter_has(entry):
    extra = _top_imports(ast.parse((PKG / entry.path).read_text())) - STDLIB - set(entry.may_import)
    assert not extra, f"ddtctl/{entry.path} runs {entry.runs}; it may not import {sorted(extra)}"


@pytest.mark.parametrize("entry", [e for e in elsewhere.FILES if not e.may_import], ids=lambda e: e.path)
def test_standard_library_files_import_in_an_isolated_interpreter(entry):
    """-I: no PYTHONPATH, no user site, no cwd on the path; -S: no site-packages. Imported under another module
    name, so a file's `if __name__ == "__main__"` block does not run."""
    code = ("import importlib.util,sys; s=importlib.util.spec_from_file_location('probe', sys.argv[1]); "
            "m=importlib.util.module_from_spec(s); sys.modules['probe']=m; s.loader.exec_module(m); print('ok')")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(PKG / entry.path)], capture_output=True,
                          text=True, timeout=60, cwd="/")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("program", elsewhere.PROGRAMS, ids=lambda p: f"{p.path}:{p.constant}")
def test_string_programs_parse_and_import_within_bounds(program):
    module = importlib.import_module("ddtctl." + program.path.removesuffix(".py").replace("/", "."))
    text = getattr(module, program.constant)
    extra = _top_imports(ast.parse(text)) - STDLIB - set(program.may_import)
    assert not extra, f"{program.constant} runs {program.runs}; it may not import {sorted(extra)}"


def test_nothing_else_under_ddtctl_is_a_program_for_another_interpreter():
    """A module-level string constant that parses as Python with imports is a program run elsewhere: it belongs
    in elsewhere.PROGRAMS (docstrings and one-word constants do not parse as such)."""
    listed = {(p.path, p.constant) for p in elsewhere.PROGRAMS}
    found = set()
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("payload/"):
            continue
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, str) and "import " in value:
                try:
                    if _top_imports(ast.parse(value)):
                        found.add((rel, node.targets[0].id))
                except SyntaxError:
                    continue
    assert found <= listed, f"programs run elsewhere but not in ddtctl/elsewhere.py: {sorted(found - listed)}"


def test_every_listed_path_exists_and_the_readme_table_lists_each_file():
    readme = (ROOT / "README.md").read_text()
    for entry in elsewhere.FILES + elsewhere.TREES:
        assert (PKG / entry.path).exists(), entry.path
    for entry in elsewhere.FILES:
        assert f"| `ddtctl/{entry.path}` |" in readme, f"README's table of code that runs elsewhere lacks {entry.path}"
    for program in elsewhere.PROGRAMS:
        assert f"`{program.constant}`" in readme, f"README does not name the string program {program.constant}"


def test_the_size_tool_reads_the_list():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        size_limits = importlib.import_module("size_limits")
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert size_limits.run_elsewhere() == elsewhere.size_exempt()
