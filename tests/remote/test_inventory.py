"""Inventory + ~/.ssh/config, multi-node rendering, plan/identity helpers, and the agent's path safety (no SSH)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ddtctl.argv import parse_launch_argv
from ddtctl.deploy import DeploySpec, expected_identity, mask_env
from ddtctl.errors import UsageError
from ddtctl.remote.inventory import load_inventory, resolve_host
from ddtctl.server_argv import read_launch

AGENT = Path(__file__).resolve().parents[2] / "ddtctl" / "remote" / "agent.py"


def _inv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "hosts.yaml"
    p.write_text(text)
    return p


def test_inventory_defaults_and_ssh_config(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu1\n  HostName 10.1.2.3\n  User ubuntu\n  Port 2222\n  IdentityFile ~/.ssh/gpu_key\n")
    inv = load_inventory(_inv(tmp_path, f"""
ssh_config: {cfg}
defaults: {{python: /opt/venv/bin/python, work_dir: /srv/ddtctl}}
hosts:
  ct200: {{address: gpu1, profile: p.yaml, env: {{CUDA_VISIBLE_DEVICES: "0,1"}}}}
  plain: {{address: 10.9.9.9, user: root, port: 22, launcher: python -m sglang.launch_server}}
"""))
    h = inv.get("ct200")
    assert (h.address, h.user, h.port) == ("10.1.2.3", "ubuntu", 2222)
    assert h.key_files == (str(Path("~/.ssh/gpu_key").expanduser()),)
    assert h.python == "/opt/venv/bin/python" and h.work_dir == "/srv/ddtctl"
    assert h.known_hosts_key == "[10.1.2.3]:2222" and h.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    p = inv.get("plain")
    assert p.known_hosts_key == "10.9.9.9"
    assert p.launcher_argv() == ["/opt/venv/bin/python", "-m", "sglang.launch_server"]
    # an ssh-config alias that is not in the inventory still resolves
    alias = resolve_host("gpu1", inv, ssh_config=str(cfg))
    assert (alias.address, alias.port) == ("10.1.2.3", 2222)


def test_inventory_refuses_passwords_and_unknown_keys(tmp_path):
    with pytest.raises(UsageError, match="passwords are not accepted"):
        load_inventory(_inv(tmp_path, "hosts:\n  a: {address: x, password: hunter2}\n"))
    with pytest.raises(UsageError, match="did you mean 'work_dir'"):
        load_inventory(_inv(tmp_path, "hosts:\n  a: {address: x, workdir: /tmp}\n"))
    inv = load_inventory(_inv(tmp_path, "hosts:\n  ct200: {address: x}\n"))
    with pytest.raises(UsageError, match="did you mean ct200"):
        inv.get("ct20")
    with pytest.raises(UsageError, match="inventory file not found"):
        load_inventory(tmp_path / "missing.yaml")


def _spec(argv):
    return DeploySpec(name="p", source="p.yaml", profile_hash="0", sglang="0.5.23", gpu="H200", gpu_count=8,
                      launch=read_launch(argv, "0.5.23", {"NCCL_P2P_LEVEL": "SYS"}), health_timeout_s=60, launcher=None,
                      host_names=["a", "b"], model_paths=["/m"])


def test_multinode_rendering_per_host(tmp_path):
    inv = load_inventory(_inv(tmp_path, """
hosts:
  a: {address: 10.0.0.1, python: /py, dist_init_port: 5000}
  b: {address: 10.0.0.2, python: /py2, env: {NCCL_SOCKET_IFNAME: eth0}}
"""))
    spec = _spec(["--model-path", "/m", "--tp-size", "16", "--port", "30001"])
    t0, t1 = spec.targets([inv.get("a"), inv.get("b")])
    assert t0.argv[-6:] == ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000"]
    assert t1.argv[-6:] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000"]
    assert t1.launch_argv[:3] == ["/py2", "-m", "sglang.launch_server"]
    assert t1.env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_P2P_LEVEL": "SYS"} and t0.port == 30001
    with pytest.raises(UsageError, match="deploy renders it per host"):
        _spec(["--model-path", "/m", "--nnodes", "2"]).targets([inv.get("a"), inv.get("b")])
    single = _spec(["--model-path", "/m"]).targets([inv.get("a")])[0]
    assert "--nnodes" not in single.argv and single.port == 30000


def test_identity_and_masking():
    argv = ["--model-path", "/m", "--speculative-algorithm", "DDTREE", "--tp-size", "8",
            "--speculative-ddtree-budget", "64", "--enable-x"]
    assert parse_launch_argv(argv, config=False).flags()["enable-x"] is True  # unknown: kept by its spelling
    ident = expected_identity(read_launch(argv), {"tp_size": 8, "speculative_algorithm": "DDTREE"})
    assert ident == {"speculative_algorithm": "DDTREE", "tp_size": 8, "speculative_ddtree_budget": 64}
    # read as SGLang reads it: a prefix and an alias name the same flags
    ident = expected_identity(read_launch(["--model", "/m", "--speculative-algo", "DDTREE", "--tp", "4"]), None)
    assert ident == {"speculative_algorithm": "DDTREE", "tp_size": 4}
    assert mask_env({"HF_TOKEN": "x", "NCCL_P2P_LEVEL": "SYS"}) == {"HF_TOKEN": "***", "NCCL_P2P_LEVEL": "SYS"}


@pytest.fixture
def agent(tmp_path):
    spec = importlib.util.spec_from_file_location("ddtctl_agent_under_test", AGENT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.W = str(tmp_path / "w")
    return mod


def hold_lock(agent, token: str) -> int:
    """Take the deploy lock as the lock agent does (the flock on W/lock, and lock.json naming this process by pid and
    start time); the returned descriptor holds it until closed."""
    import fcntl
    import os

    Path(agent.W).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(agent.W) / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    start = agent._proc_starttime(os.getpid())[0]
    (Path(agent.W) / "lock.json").write_text(json.dumps({"token": token, "pid": os.getpid(), "starttime": start}))
    return fd


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../b", "a//b", "./a", "a\\b", ""])
def test_agent_refuses_paths_escaping_the_release(agent, bad):
    with pytest.raises(agent.AgentError, match="unsafe path"):
        agent._safe_rel(bad)


def test_agent_materialize_refuses_escape_and_needs_lock(agent, tmp_path):
    rel = {"id": "r1", "payload": {"files": {"../../evil": {"sha256": "0" * 64}}}}
    with pytest.raises(agent.AgentError, match="lock is not held"):
        agent.op_materialize({"release": rel})
    fd = hold_lock(agent, "t")
    with pytest.raises(agent.AgentError, match="unsafe path"):
        agent.op_materialize({"release": rel, "lock_token": "t"})
    assert not (tmp_path / "evil").exists()
    with pytest.raises(agent.AgentError, match="bad release id"):
        agent.op_materialize({"release": {"id": "../x"}, "lock_token": "t"})
    __import__("os").close(fd)


def test_agent_commit_verifies_sha256(agent):
    import hashlib

    agent.op_missing({"hashes": []})
    inc = Path(agent.W) / "incoming"
    good, bad = b"good", b"tampered"
    (inc / "a.1").write_bytes(good)
    (inc / "b.1").write_bytes(bad)
    res = agent.op_commit({"files": {"a.1": hashlib.sha256(good).hexdigest(), "b.1": hashlib.sha256(b"x").hexdigest()}})
    assert res["stored"] == [hashlib.sha256(good).hexdigest()]
    assert res["bad"][0]["name"] == "b.1" and not (inc / "b.1").exists()
    assert (Path(agent.W) / "store" / hashlib.sha256(good).hexdigest()).read_bytes() == good


def test_warmup_default_is_the_payloads_kernel_selftest(tmp_path):
    from ddtctl.deploy import KERNEL_SELFTEST, warmup_argv
    from ddtctl.remote.ship import FileEntry, Manifest

    inv = load_inventory(_inv(tmp_path, """
hosts:
  auto: {address: a, python: /py}
  nowarm: {address: b, warmup: none}
  custom: {address: c, python: /py, warmup: python -m my.warm --fast}
"""))
    spec = _spec(["--model-path", "/m"])
    spec.payload = Manifest(None, {KERNEL_SELFTEST: FileEntry("0" * 64, 1)})
    auto = warmup_argv(spec, spec.targets([inv.get("auto")])[0])
    assert auto[:2] == ["/py", "-c"] and 'selftest(device="cuda")' in auto[2]
    assert warmup_argv(spec, spec.targets([inv.get("nowarm")])[0]) is None
    assert warmup_argv(spec, spec.targets([inv.get("custom")])[0]) == ["/py", "-m", "my.warm", "--fast"]
    spec.payload = Manifest(None, {})  # a payload without kernels: nothing to warm
    assert warmup_argv(spec, spec.targets([inv.get("auto")])[0]) is None


def test_hosts_yaml_is_found_in_the_nearest_parent_directory(tmp_path, monkeypatch):
    """As git finds .git: a command run in a subdirectory of the deployment repo still finds its hosts.yaml."""
    monkeypatch.delenv("DDTCTL_INVENTORY", raising=False)
    (tmp_path / "hosts.yaml").write_text("hosts:\n  ct200: {address: 10.0.0.2, user: root}\n")
    deep = tmp_path / "profiles" / "team"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    inv = load_inventory(ssh_config=str(tmp_path / "no-ssh-config"))
    assert inv.path == tmp_path / "hosts.yaml" and inv.hosts["ct200"].address == "10.0.0.2"
    (deep / "hosts.yaml").write_text("hosts:\n  near: {address: 10.0.0.9, user: root}\n")
    assert set(load_inventory(ssh_config=str(tmp_path / "no-ssh-config")).hosts) == {"near"}  # the nearest wins


def test_no_inventory_anywhere_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("DDTCTL_INVENTORY", raising=False)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    inv = load_inventory(ssh_config=str(tmp_path / "no-ssh-config"))
    assert inv.path is None and inv.searched[0] == str(deep / "hosts.yaml")
    assert len(inv.searched) == len(deep.parents) + 1
    with pytest.raises(UsageError) as err:
        resolve_host("ct200", inv, ssh_config=str(tmp_path / "no-ssh-config"))
    msg = str(err.value)
    assert f"searched {deep / 'hosts.yaml'} and its {len(deep.parents)} parent directories" in msg
    assert "$DDTCTL_INVENTORY is unset" in msg and "hosts.example.yaml" in err.value.fix
    assert "known hosts: none" not in msg


# -- one bad ~/.ssh/config entry fails only its own host (issue #33 item 5) ----------------------------------------
# Each breaks the `Host bad` block (line 4 on) of a config whose `Host good` block is fine: (the lines, what
# resolving bad says, the line it names).
BROKEN_BLOCKS = {
    "include": ('Include "unclosed\n', "bad Include line: No closing quotation", 5),
    "unparsable": ("HostName 10.0.0.9\n  Port\n", "cannot parse ssh config line 'Port'", 6),
    "port": ("HostName 10.0.0.9\n  Port 99999\n", "port must be between 1 and 65535, got '99999'", 6),
    "hostname": ("HostName a;b\n", "invalid ssh_config HostName 'a;b'", 5),
    "keyword": ("HostName 10.0.0.9\n  FooBar yes\n", "ssh_config keyword FooBar (host bad) is unknown", 6),
}


def _broken_setup(tmp_path: Path, block: str) -> tuple[Path, Path]:
    """HOME/.ssh/config with a good and a broken block, and an inventory listing both hosts."""
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    cfg = ssh / "config"
    cfg.write_text(f"Host good\n  HostName 127.0.0.1\n  User deploy\nHost bad\n  {block}")
    inv = _inv(tmp_path, "hosts:\n  good: {profile: p.yaml}\n  bad: {}\n")
    return cfg, inv


@pytest.mark.parametrize("case", sorted(BROKEN_BLOCKS))
def test_a_broken_ssh_config_block_fails_only_its_host(tmp_path, monkeypatch, case):
    block, needle, line = BROKEN_BLOCKS[case]
    cfg, inv_path = _broken_setup(tmp_path, block)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    inv = load_inventory(inv_path)  # reads no ssh_config: every host is resolved when it is asked for
    good = resolve_host("good", inv)
    assert (good.address, good.user) == ("127.0.0.1", "deploy")
    assert inv.default_profile(good) == "p.yaml"  # no such file beside the inventory: as written
    (tmp_path / "p.yaml").write_text("")
    assert inv.default_profile(good) == str(tmp_path / "p.yaml")
    for loaded in (inv, load_inventory(inv_path)):  # resolved later, or first
        with pytest.raises(UsageError) as err:
            resolve_host("bad", loaded)
        assert err.value.where == f"{cfg}:{line}" and needle in err.value.message, str(err.value)
    assert "\n" not in str(err.value)


def test_commands_that_need_no_host_read_no_ssh_config(tmp_path, monkeypatch):
    from ddtctl.remote.inventory import ssh_config
    from tests.remote.labkit import ddtctl_main

    _, inv_path = _broken_setup(tmp_path, BROKEN_BLOCKS["include"][0])
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DDTCTL_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    prof = tmp_path / "p.yaml"
    prof.write_text("name: p\nsglang: '0.5.23'\nhost: good\nhardware: {gpu: H200, count: 1}\n"
                    "model: {path: /m, architecture: Qwen3ForCausalLM}\nserver: {}\n")
    read = []
    real = ssh_config.read_regular
    monkeypatch.setattr(ssh_config, "read_regular", lambda p, *a, **k: read.append(str(p)) or real(p, *a, **k))
    for args in (("validate", inv_path), ("validate", prof), ("render", prof), ("rules",)):
        ran = ddtctl_main(*args)
        assert ran.exit_code == 0, (args, ran.output)
    assert read == []
    ran = ddtctl_main("render", prof, "--host", "good", "-i", inv_path)  # only good's block matters
    assert ran.exit_code == 0 and "127.0.0.1" not in ran.stderr, ran.output
    assert read and set(read) == {str(tmp_path / "home" / ".ssh" / "config")}


def test_a_broken_line_outside_any_host_block_fails_every_host(tmp_path):
    """As OpenSSH: a line that applies to every host and cannot be read fails every host (when resolved)."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Port\nHost good\n  HostName 127.0.0.1\n")
    inv = load_inventory(_inv(tmp_path, f"ssh_config: {cfg}\nhosts:\n  good: {{}}\n"))
    with pytest.raises(UsageError, match=r"cannot parse ssh config line 'Port'") as err:
        resolve_host("good", inv)
    assert err.value.where == f"{cfg}:1"


@pytest.mark.parametrize("command", ["deploy", "tune"])
def test_a_host_without_a_default_profile_is_one_line(tmp_path, command):
    from tests.remote.labkit import ddtctl_main

    inv = _inv(tmp_path, f"ssh_config: {tmp_path / 'none'}\nhosts:\n  gpu1: {{address: 10.0.0.1}}\n")
    ran = ddtctl_main(command, "gpu1", "-i", inv)
    assert ran.exit_code == 2 and "host gpu1 has no default profile" in ran.stderr, ran.output


def test_status_without_a_host_lists_every_host_and_names_the_one_that_does_not_resolve(tmp_path, monkeypatch):
    """`ddtctl status` (the inventory's table, no connection): a broken ssh_config block is that host's row and its
    one-line error, not the end of the table; the exit code is that error's."""
    import json

    from tests.remote.labkit import ddtctl_main

    cfg, inv_path = _broken_setup(tmp_path, BROKEN_BLOCKS["port"][0])
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ran = ddtctl_main("status", "-i", inv_path)
    assert ran.exit_code == 2, ran.output
    lines = ran.stdout.splitlines()
    assert any(ln.split()[:2] == ["good", "127.0.0.1"] for ln in lines), ran.stdout
    assert any(ln.split()[:2] == ["bad", "(unresolved)"] for ln in lines), ran.stdout
    assert f"{cfg}:6" in ran.stdout and "port must be between 1 and 65535" in ran.stdout
    ran = ddtctl_main("status", "-i", inv_path, "--format", "json")
    hosts = {h["host"]: h for h in json.loads(ran.stdout)["results"]["hosts"]}
    assert ran.exit_code == 2 and hosts["good"]["address"] == "127.0.0.1" and hosts["good"]["error"] is None
    assert hosts["bad"]["address"] is None and "port must be between" in hosts["bad"]["error"]["message"]
