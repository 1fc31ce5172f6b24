"""The pre-commit hook through the real `pre-commit` tool, on a throwaway git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "profiles" / "qwen36-27b-ddtree.yaml"
PRE_COMMIT = shutil.which("pre-commit") or str(Path(sys.executable).with_name("pre-commit"))

pytestmark = pytest.mark.skipif(not Path(PRE_COMMIT).exists(), reason="pre-commit is installed by `make test`")


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def hook_env(tmp_path_factory):
    """One PRE_COMMIT_HOME per run: the hook's virtualenv is built once (pip installs ddtctl into it)."""
    home = tmp_path_factory.mktemp("pre-commit-home")
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    env.pop("VIRTUAL_ENV", None)
    return env


@pytest.fixture
def user_repo(tmp_path, hook_env):
    repo = tmp_path / "deployments"
    (repo / "profiles").mkdir(parents=True)
    git(repo, "init", "-q")
    return repo


def broken_seed() -> str:
    return "".join(line for line in SEED.read_text().splitlines(keepends=True) if "mamba" not in line)


def try_repo(repo, env, *files):
    return subprocess.run([PRE_COMMIT, "try-repo", str(REPO), "ddtctl-validate", "--files", *files],
                          cwd=repo, capture_output=True, text=True, env=env, timeout=900)


def test_try_repo_blocks_bad_and_passes_good(user_repo, hook_env):
    (user_repo / "profiles" / "good.yaml").write_text(SEED.read_text())
    (user_repo / "profiles" / "bad.yaml").write_text(broken_seed())
    git(user_repo, "add", ".")
    good = try_repo(user_repo, hook_env, "profiles/good.yaml")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = try_repo(user_repo, hook_env, "profiles/bad.yaml")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "DDT111" in bad.stdout and "mamba-full-memory-ratio" in bad.stdout


def test_installed_hook_blocks_the_commit(user_repo, hook_env):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    if not head:
        pytest.skip("ddtctl checkout has no commit to pin the hook to")
    (user_repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {REPO}\n  rev: {head}\n  hooks:\n  - id: ddtctl-validate\n")
    subprocess.run([PRE_COMMIT, "install"], cwd=user_repo, env=hook_env, check=True, capture_output=True)
    (user_repo / "profiles" / "seed.yaml").write_text(broken_seed())
    git(user_repo, "add", ".")
    blocked = subprocess.run(["git", "commit", "-qm", "bad profile"], cwd=user_repo, env=hook_env,
                             capture_output=True, text=True, timeout=900)
    assert blocked.returncode != 0, blocked.stdout + blocked.stderr
    assert "DDT111" in blocked.stdout + blocked.stderr
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=user_repo, capture_output=True).returncode != 0
    (user_repo / "profiles" / "seed.yaml").write_text(SEED.read_text())
    git(user_repo, "add", ".")
    ok = subprocess.run(["git", "commit", "-qm", "good profile"], cwd=user_repo, env=hook_env,
                        capture_output=True, text=True, timeout=900)
    assert ok.returncode == 0, ok.stdout + ok.stderr
