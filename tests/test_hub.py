"""Hugging Face hub ids as a profile's model and draft model (ddtctl/hub.py): only config.json is fetched, with
huggingface_hub's hf_hub_download, from a stand-in of the hub's file endpoint on 127.0.0.1 (tests/hub_standin.py)
or from a hub cache laid out by hand under HF_HOME with HF_HUB_OFFLINE=1. Never the network: every run gets
HF_ENDPOINT (the stand-in, or a closed port) and its own HF_HOME.

ddtctl runs in a subprocess each time, as a user runs it: huggingface_hub reads HF_ENDPOINT, HF_HOME and
HF_HUB_OFFLINE once, when it is imported."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hub_standin import HubStandin
from json_envelope import results

from ddtctl.errors import ExitCode

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "fidelity" / "models"
TARGET, DRAFT, NO_BLOCK = "Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash", "z-lab/Qwen3-8B-DFlash-noblock"
MAMBA = {"mamba-radix-cache-strategy": "extra_buffer", "mamba-full-memory-ratio": 0.5}


def _config(model: str) -> bytes:
    return (MODELS / model / "config.json").read_bytes()


@pytest.fixture(scope="module")
def hub():
    standin = HubStandin({
        TARGET: {"config.json": _config("qwen3.6-27b"), "model.safetensors": b"weights never fetched"},
        DRAFT: {"config.json": _config("qwen3.6-27b-dflash-b16")},
        NO_BLOCK: {"config.json": _config("qwen3-8b-dflash-noblock")},
        "Org/Empty": {},
    })
    server = standin.serve()
    yield standin
    server.shutdown()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once it is closed


def _ddtctl(args, *, endpoint: str, hf_home: Path, offline: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(hf_home), NO_COLOR="1")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "ddtctl", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60)


def _profile(path: Path, model: str, server: dict) -> Path:
    path.write_text(json.dumps({"name": path.stem, "hardware": {"gpu": "H200"}, "model": {"path": model},
                                "server": server}))
    return path


def _ddtree(draft: str = DRAFT, **extra) -> dict:
    return {"speculative-algorithm": "DDTREE", "speculative-draft-model-path": draft,
            "speculative-ddtree-budget": 16, **extra}


def _findings(doc: dict) -> list[set[str]]:
    return [{f["id"] for f in p["findings"]} for p in doc["profiles"]]


def test_validate_reads_the_hub_configs_of_model_and_draft_and_only_them(hub, tmp_path):
    """The target's config.json says hybrid (no model.architecture in the profile): DDT111 wants the mamba
    flags, and is satisfied by them. The draft's config.json has no block_size: DFLASH warns (DDT209)."""
    bare = _profile(tmp_path / "bare.yaml", TARGET, _ddtree())
    fixed = _profile(tmp_path / "fixed.yaml", TARGET, _ddtree(**MAMBA))
    dflash = _profile(tmp_path / "dflash.yaml", TARGET, {"speculative-algorithm": "DFLASH",
                                                         "speculative-draft-model-path": NO_BLOCK, **MAMBA})
    proc = _ddtctl(["validate", bare, fixed, dflash, "--format", "json"], endpoint=hub.url, hf_home=tmp_path / "hf")
    assert proc.returncode == ExitCode.INVALID, proc.stderr
    doc = results(proc.stdout, "validate")
    assert [p["ok"] for p in doc["profiles"]] == [False, True, True]
    bare_ids, fixed_ids, dflash_ids = _findings(doc)
    assert "DDT111" in bare_ids and "DDT111" not in fixed_ids and "DDT000" not in fixed_ids
    assert "DDT209" in dflash_ids
    fetched = {path.rsplit("/", 1)[-1] for _, path in hub.requests if "/resolve/" in path}
    assert fetched == {"config.json"}  # never the weights
    snapshot = tmp_path / "hf" / "hub" / "models--Qwen--Qwen3.6-27B" / "snapshots" / hub.commit(TARGET)
    assert (snapshot / "config.json").read_bytes() == _config("qwen3.6-27b")  # huggingface_hub's own cache


def test_an_unreachable_hub_is_one_line_and_exit_8(tmp_path):
    p = _profile(tmp_path / "p.yaml", TARGET, _ddtree(**MAMBA))
    proc = _ddtctl(["validate", p], endpoint=_closed_port(), hf_home=tmp_path / "hf")
    assert proc.returncode == ExitCode.HUB == 8 and proc.stdout == ""
    assert proc.stderr == (f"ddtctl: error: model {TARGET}: config.json not reachable on the hub (offline?) "
                           "(fix: set HF_HUB_OFFLINE=1 to use the cache, or give a local model directory)\n")


@pytest.mark.parametrize(("model", "server", "message"), [
    ("Org/Missing", {}, "model Org/Missing: no such repository on the hub (or a private one)"),
    ("Org/Empty", {}, "model Org/Empty: the repository on the hub has no config.json"),
    (TARGET, _ddtree(**MAMBA, **{"speculative-draft-model-revision": "v2"}),
     f"draft model {DRAFT}@v2: the hub has no revision v2"),
])
def test_a_missing_repo_file_or_revision_is_exit_8_naming_it(hub, tmp_path, model, server, message):
    proc = _ddtctl(["validate", _profile(tmp_path / "p.yaml", model, server), "--format", "json"],
                   endpoint=hub.url, hf_home=tmp_path / "hf")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 8 and doc["error"]["exit_code"] == 8 and doc["results"] is None
    assert doc["error"]["message"] == message


def _cache(hf_home: Path, repo: str, config: bytes, commit: str = "a" * 40) -> None:
    """huggingface_hub's cache layout: refs/main names the commit, snapshots/<commit>/config.json the file."""
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    (root / "snapshots" / commit).mkdir(parents=True)
    (root / "snapshots" / commit / "config.json").write_bytes(config)


def test_offline_reads_the_hub_cache_only(hub, tmp_path):
    """HF_HUB_OFFLINE=1: the cached config is used; one not cached is "not readable here" (DDT000), as a path
    on another host is, and the hub is never asked."""
    _cache(tmp_path / "hf", TARGET, _config("qwen3.6-27b"))
    cached = _profile(tmp_path / "cached.yaml", TARGET, _ddtree())
    absent = _profile(tmp_path / "absent.yaml", "Other/Model", _ddtree())
    before = len(hub.requests)
    proc = _ddtctl(["validate", cached, absent, "--format", "json"], endpoint=hub.url, hf_home=tmp_path / "hf",
                   offline=True)
    assert proc.returncode == ExitCode.INVALID, proc.stderr
    cached_ids, absent_ids = _findings(results(proc.stdout, "validate"))
    assert "DDT111" in cached_ids and "DDT111" not in absent_ids and "DDT000" in absent_ids
    assert len(hub.requests) == before


_IMPORT_PROBE = """
import sys
from ddtctl.cli import main
try:
    main({args!r})
except SystemExit:
    pass
sys.stderr.write("\\nHUB " + str("huggingface_hub" in sys.modules) + "\\n")
"""


def test_validate_imports_huggingface_hub_only_for_a_hub_id(tmp_path):
    def imports_hub(profile: Path) -> bool:
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=_closed_port())
        res = subprocess.run([sys.executable, "-c", _IMPORT_PROBE.format(args=["validate", str(profile)])],
                             capture_output=True, text=True, timeout=60, env=env)
        return res.stderr.strip().splitlines()[-1] == "HUB True"

    assert not imports_hub(REPO / "profiles" / "qwen36-27b-ddtree.yaml")
    assert imports_hub(_profile(tmp_path / "p.yaml", TARGET, {}))


def test_dry_run_of_a_hub_id_not_cached_offline_says_so_without_starting_sglang(tmp_path):
    p = _profile(tmp_path / "p.yaml", TARGET, {})
    proc = _ddtctl(["dry-run", p, "--format", "json"], endpoint=_closed_port(), hf_home=tmp_path / "hf",
                   offline=True)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    (result,) = results(proc.stdout, "dry-run")["profiles"]
    assert result["error"]["type"] == "ModelConfigMissing"
    assert result["error"]["message"].startswith(
        f"--model-path {TARGET}: a Hugging Face hub id whose config.json is not in the hub cache (HF_HUB_OFFLINE=1)")


def test_dry_run_of_an_unreachable_hub_id_is_exit_8(tmp_path):
    proc = _ddtctl(["dry-run", "--argv", "--gpu", "H200", "--", "--model-path", TARGET],
                   endpoint=_closed_port(), hf_home=tmp_path / "hf")
    assert proc.returncode == 8 and f"model {TARGET}: config.json not reachable on the hub" in proc.stderr


def test_hub_ids_and_what_is_not_one(tmp_path, monkeypatch):
    from ddtctl.hub import is_hub_id

    monkeypatch.chdir(tmp_path)
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "model").mkdir()
    assert is_hub_id("Qwen/Qwen3-8B") and is_hub_id("z-lab/Qwen3.6-27B-DFlash")
    for path in ("local/model", "/abs/path", "./Org/Name", "~/Org/Name", "gpt2", "a/b/c", "Org/Na--me",
                 "Org/..", "-x/y", "", None):
        assert not is_hub_id(path), path


def test_without_huggingface_hub_a_hub_id_says_how_to_install_it(tmp_path):
    probe = ("import sys; sys.modules['huggingface_hub'] = None\n"  # as if it were not installed
             f"from ddtctl.cli import main; main(['validate', {str(_profile(tmp_path / 'p.yaml', TARGET, {}))!r}])")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf")))
    assert proc.returncode == ExitCode.USAGE and proc.stderr == (
        f"ddtctl: error: model {TARGET} is a Hugging Face hub id; reading its config.json needs huggingface_hub, "
        "which is not installed here (fix: pip install 'ddtctl[hub]', or give a local model directory)\n")


_PREFLIGHT = """
import json, sys
sys.path.insert(0, {deploy_tests!r})
from deploy_data import facts, spec, target
from ddtctl.deploy import preflight_checks
s = spec(["--model-path", {model!r}, "--attention-backend", "fa3"])
checks = preflight_checks(s, target(s), facts(gpu="NVIDIA B200", sm=(10, 0)), remote_dry_run=True)
print(json.dumps({{c.name: [c.ok, c.severity, c.message] for c in checks}}))
"""


def test_deploy_preflight_of_a_hub_id_the_hub_cannot_give_warns_and_still_checks(tmp_path):
    """The GPU host may reach the hub where this machine cannot: deploy's static rules run without the config
    (as for a model directory not cached here) and say why; the host's own dry-run reads it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=_closed_port(), HF_HOME=str(tmp_path / "hf"))
    script = _PREFLIGHT.format(deploy_tests=str(REPO / "tests" / "deploy"), model=TARGET)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    checks = json.loads(proc.stdout)
    assert checks["validate:hub"] == [False, "warning", f"model {TARGET}: config.json not reachable on the hub "
                                      "(offline?) (fix: set HF_HUB_OFFLINE=1 to use the cache, or give a local "
                                      "model directory)"]
    assert checks["validate:DDT701"][0] is False  # fa3 on a B200: the static rules still ran
