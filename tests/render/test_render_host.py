"""`ddtctl render --host NODE`: what deploy would launch on that inventory node (its launcher and environment,
and on several hosts the multi-node flags with the node's rank), taken from deploy's own spec and targets
(ddtctl/deploy/spec.py, through ddtctl/render_host.py), never re-derived."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtctl.deploy.spec import spec_from_profile
from ddtctl.errors import DdtctlError, UsageError
from ddtctl.profile_overrides import parse_sets
from ddtctl.remote.inventory import load_inventory, resolve_host
from ddtctl.render import render_profile
from ddtctl.render_host import render_on_host

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = str(REPO / "profiles" / "qwen36-27b-ddtree.yaml")


@pytest.fixture
def site(tmp_path) -> tuple[Path, Path]:
    """An inventory of two nodes (no SSH config read) and a profile served by both."""
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(f"""ssh_config: {tmp_path / 'no-ssh-config'}
defaults: {{python: /opt/sglang/bin/python, launcher: python -m sglang.launch_server}}
hosts:
  node0: {{address: 10.0.5.10, dist_init_port: 50001, env: {{NCCL_SOCKET_IFNAME: eth0, HF_TOKEN: hf_secret}}}}
  node1: {{address: 10.0.5.11, env: {{NCCL_SOCKET_IFNAME: eth1}}}}
""")
    profile = tmp_path / "two.yaml"
    profile.write_text("""name: two-nodes
hosts: [node0, node1]
hardware: {gpu: H200, count: 4}
model: {path: /models/Qwen3-8B}
server: {tp-size: 8, api-key: s3cret}
env: {NCCL_P2P_LEVEL: SYS}
""")
    return inventory, profile


def test_each_node_gets_deploys_own_launch_and_rank(site):
    inventory, profile = site
    spec = spec_from_profile(str(profile))
    inv = load_inventory(inventory)
    targets = spec.targets([resolve_host(n, inv) for n in spec.host_names])
    for target in targets:
        shown = render_on_host(str(profile), "argv", host=target.name, inventory=str(inventory), show_secrets=True)
        assert shown.launcher + shown.argv == target.launch_argv and shown.env == target.env
        assert (shown.host, shown.node_rank, shown.nnodes) == (target.name, target.rank, 2)
    node1 = render_on_host(str(profile), "shell", host="node1", inventory=str(inventory))
    assert node1.text == (
        "env NCCL_SOCKET_IFNAME=eth1 NCCL_P2P_LEVEL=SYS /opt/sglang/bin/python -m sglang.launch_server \\\n"
        "    --model-path /models/Qwen3-8B \\\n    --tp-size 8 \\\n    --api-key '***' \\\n"
        "    --nnodes 2 \\\n    --node-rank 1 \\\n    --dist-init-addr 10.0.5.10:50001")
    node0 = render_on_host(str(profile), "argv", host="node0", inventory=str(inventory))
    assert node0.env["HF_TOKEN"] == "***" and "s3cret" not in json.dumps(node0.to_json())  # masked


def test_one_host_profile_gets_the_hosts_launcher_and_no_multi_node_flags(site):
    inventory, _ = site
    shown = render_on_host(FLAGSHIP, "argv", host="node1", inventory=str(inventory))
    assert shown.launcher == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
    assert shown.argv == render_profile(FLAGSHIP, "argv").argv and "--nnodes" not in shown.argv
    assert shown.env == {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_P2P_LEVEL": "SYS"}  # the profile's env wins
    assert (shown.node_rank, shown.nnodes) == (0, 1)


def test_set_reaches_the_node_launch(site):
    inventory, profile = site
    shown = render_on_host(str(profile), "argv", host="node1", inventory=str(inventory),
                           overrides=parse_sets(["server.tp-size=4"]))
    assert shown.argv[shown.argv.index("--tp-size") + 1] == "4" and "--node-rank" in shown.argv


@pytest.mark.parametrize(("host", "fmt", "message"), [
    ("node2", "argv", "host node2 is not one of the profile's hosts (node0, node1)"),
    ("node0", "sglang-config", "--host renders a command line, not --as sglang-config"),
])
def test_what_render_host_refuses(site, host, fmt, message):
    inventory, profile = site
    with pytest.raises(DdtctlError) as err:
        render_on_host(str(profile), fmt, host=host, inventory=str(inventory))
    assert err.value.message == message


def test_an_unknown_inventory_host_names_the_inventory(site):
    inventory, _ = site
    with pytest.raises(UsageError) as err:
        render_on_host(FLAGSHIP, "argv", host="nod1", inventory=str(inventory))
    assert err.value.message == "unknown host 'nod1'" and "did you mean node1" in err.value.fix


def test_render_host_cli(site, capsys):
    from ddtctl.cli import main

    inventory, profile = site
    with pytest.raises(SystemExit) as done:
        main(["render", str(profile), "--host", "node1", "-i", str(inventory), "--as", "argv"])
    assert done.value.code in (0, None)
    assert json.loads(capsys.readouterr().out)[-6:] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr",
                                                        "10.0.5.10:50001"]
    with pytest.raises(SystemExit) as refused:
        main(["render", str(profile), "--host", "node1", "--as", "k8s-lws"])
    assert refused.value.code == 2
    assert "--host renders a command line, not --as k8s-lws" in capsys.readouterr().err
