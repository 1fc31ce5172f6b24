"""Builders for the SSH suite (imported by its conftest, tests and bench/deploy_speed.py): a real OpenSSH sshd on 127.0.0.1, an inventory pointing at it, stand-ins for the GPU
(nvidia-smi) and the SGLang server, a small SGLang site-packages to install a payload into, and profiles.

The "remote" host is this machine reached through sshd; its python is sys.executable (the managed SGLang env's python
for the remote dry-run test). Everything except the GPU and the SGLang server process is real.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sshd import Sshd, find_sshd, free_port, start_sshd  # noqa: E402  (re-exported for conftest and bench)

__all__ = ["Lab", "Sshd", "find_sshd", "start_sshd", "build_lab_payload", "write_inventory", "free_port"]

STANDINS = HERE / "standins"
STANDIN_SERVER = STANDINS / "standin_sglang_server.py"
STANDIN_SMI = STANDINS / "standin_nvidia_smi.py"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Lab:
    """One test's remote world: inventory, known_hosts, a work dir, models, an SGLang root, a payload."""

    root: Path
    sshd: Sshd
    inventory: Path
    known_hosts: Path
    models: Path
    sglang_root: Path
    payload: Path
    port: int

    def host(self, name: str = "lo"):
        from ddtctl.remote.inventory import load_inventory

        return load_inventory(self.inventory).get(name)

    def work(self, name: str = "lo") -> Path:
        return self.root / f"work-{name}"

    def profile(self, name: str = "lab", *, server: dict | None = None, env: dict | None = None,
                hosts: list[str] | None = None, health_timeout_s: int = 20, algorithm: str | None = "DDTREE",
                extra_server: dict | None = None) -> Path:
        srv = {"port": self.port, "host": "127.0.0.1", "tp-size": 1}
        if algorithm == "DDTREE":
            srv.update({"speculative-algorithm": "DDTREE",
                        "speculative-draft-model-path": str(self.models / "draft"),
                        "speculative-dflash-block-size": 16,
                        "speculative-ddtree-budget": 32,
                        "disable-overlap-schedule": True})
        srv.update(server or {})
        srv.update(extra_server or {})
        doc = {
            "name": name,
            "sglang": "0.5.23",
            "hardware": {"gpu": "H200", "count": 1},
            "model": {"path": str(self.models / "target"), "architecture": "Qwen3ForCausalLM"},
            "server": srv,
            "env": env or {},
            "launch": {"health_timeout_s": health_timeout_s},
        }
        if hosts:
            doc["hosts"] = hosts
        else:
            doc["host"] = "lo"
        p = self.root / f"{name}.yaml"
        import yaml

        p.write_text(yaml.safe_dump(doc, sort_keys=False))
        return p

    def trust(self) -> None:
        self.sshd.write_known_hosts(self.known_hosts)


def _write_models(models: Path) -> None:
    target = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
              "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "intermediate_size": 512, "vocab_size": 151936, "tie_word_embeddings": True,
              "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    draft = dict(target, architectures=["DFlashDraftModel"], num_hidden_layers=1, block_size=16,
                 dflash_config={"mask_token_id": 151669, "target_layer_ids": [0, 1, 2]}, num_target_layers=4)
    for name, cfg in (("target", target), ("draft", draft)):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps(cfg, indent=1))


SPEC_INFO = "# stand-in for sglang/srt/speculative/spec_info.py (pristine)\nALGORITHMS = ['EAGLE', 'DFLASH']\n"


def _write_sglang_root(root: Path) -> None:
    """A small SGLang site-packages: the files the lab payload patches, with their pristine bytes."""
    (root / "sglang" / "srt" / "speculative").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "version.py").write_text('__version__ = "0.5.23"\n')
    (root / "sglang" / "srt" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "speculative" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "speculative" / "spec_info.py").write_text(SPEC_INFO)


def build_lab_payload(dest: Path, *, version: str = "1", extra_files: int = 0, new_files: dict | None = None) -> Path:
    """A built payload in the overlay installer's format (ddtree-manifest.json + files/): one patched SGLang file,
    one new package, and its entry-point dist-info (plus `new_files`: relative path -> text)."""
    files = {
        "sglang/srt/speculative/spec_info.py": ("patched", SPEC_INFO.replace("'DFLASH']", "'DFLASH', 'DDTREE']")
                                                + f"# payload {version}\n", _sha(SPEC_INFO.encode())),
        "ddtree_sglang/__init__.py": ("new", f'"""DDTREE lab payload."""\nVERSION = "{version}"\n', None),
        "ddtree_sglang-0.1.dist-info/entry_points.txt": ("new", "[sglang.srt.plugins]\nddtree = ddtree_sglang\n", None),
    }
    for rel, text in (new_files or {}).items():
        files[rel] = ("new", text, None)
    for i in range(extra_files):
        files[f"ddtree_sglang/kernels/k{i:03d}.py"] = ("new", f"# kernel {i} v{version}\n" + "x = 1\n" * 200, None)
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    entries = []
    for rel, (kind, text, base) in files.items():
        p = dest / "files" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        e = {"path": rel, "kind": kind, "sha256": _sha(text.encode())}
        if base:
            e["base_sha256"] = base
        entries.append(e)
    manifest = {"format": 1, "name": "ddtree-lab", "version": version, "sglang": "0.5.23",
                "payload_id": _sha(json.dumps(entries, sort_keys=True).encode())[:16], "files": entries}
    (dest / "ddtree-manifest.json").write_text(json.dumps(manifest, indent=1))
    return dest


def write_inventory(path: Path, sshd: Sshd, root: Path, known_hosts: Path, sglang_root: Path, *,
                    hosts: tuple[str, ...] = ("lo",), gpus: int = 1, extra: dict | None = None) -> Path:
    smi = root / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN_SMI} --gpus {gpus} --name 'NVIDIA H200' \"$@\"\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    import yaml

    doc = {
        "defaults": {
            "address": "127.0.0.1", "port": sshd.port, "user": sshd.user, "key": str(sshd.client_key),
            "python": sys.executable, "launcher": [sys.executable, str(STANDIN_SERVER)],
            "nvidia_smi": str(smi), "sglang_root": str(sglang_root), "known_hosts": str(known_hosts),
            "connect_timeout_s": 5, "command_timeout_s": 60,
            "warmup": "none",  # no GPU here: the kernel self-test cannot run (a stand-in covers warm-up)
        },
        "ssh_config": str(root / "no-ssh-config"),
        "hosts": {h: {"work_dir": str(root / f"work-{h}"), **(extra or {})} for h in hosts},
    }
    # every host but the first gets its own SGLang root (separate machines in real life)
    for h in hosts[1:]:
        own = root / f"site-packages-{h}"
        if not own.exists():
            _write_sglang_root(own)
        doc["hosts"][h]["sglang_root"] = str(own)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Ran:
    """What `ddtctl ARGS` did in this process (ddtctl_main)."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def ddtctl_main(*args: str) -> Ran:
    """`ddtctl ARGS` through ddtctl.cli.main in this process (its one-line errors, JSON envelopes and exit codes,
    which typer's CliRunner does not give), with a stdin that is not a terminal."""
    import contextlib
    import io

    from ddtctl.cli import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    stdin, sys.stdin = sys.stdin, io.StringIO("")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([str(a) for a in args])
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.stdin = stdin
    return Ran(code, out.getvalue(), err.getvalue())


def _kill_lab_servers(root: Path) -> None:
    """Stop any stand-in server a test left running (by the pid files the agent wrote)."""
    import signal

    for pidfile in root.glob("work-*/run/server.json"):
        try:
            info = json.loads(pidfile.read_text())
            os.killpg(int(info["pgid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
