"""Preflight from plain data: a spec, a target and the host's facts in, checks out (no SSH, no host)."""

from __future__ import annotations

from deploy_data import HOST, facts, spec, target

from ddtctl.deploy import preflight_checks
from ddtctl.deploy.preflight import Check, check_gpus, check_port, gpus_needed


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def _blocking(checks: list[Check]) -> list[str]:
    return [c.name for c in checks if c.blocks]


def test_a_host_that_fits_passes_every_check():
    s = spec()
    checks = preflight_checks(s, target(s), facts(), remote_dry_run=True)
    assert _blocking(checks) == []
    names = _by_name(checks)
    assert {"gpus", "gpu-generation", "sglang", "port", "disk", "model", "validate"} <= set(names)
    assert names["gpus"].message == "1 GPU(s) needed here (tp 1 x pp 1 x dp 1), 1 visible (NVIDIA H200)"


def test_gpus_needed_counts_tp_pp_dp_and_shares_them_over_the_nodes():
    s = spec(["--model-path", "/m", "--tp-size", "4", "--pp-size", "2", "--dp-size", "2"])
    assert gpus_needed(target(s)) == (16, "tp 4 x pp 2 x dp 2")
    dp_attention = spec(["--model-path", "/m", "--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"])
    assert gpus_needed(target(dp_attention))[0] == 4  # dp attention shares the tp GPUs
    two_nodes = spec(["--model-path", "/m", "--tp-size", "16"])
    second = HOST.__class__(name="gpu2", address="10.0.0.2", user="ubuntu")
    assert gpus_needed(two_nodes.targets([HOST, second])[1]) == (8, "tp 16 x pp 1 x dp 1 over 2 nodes")


def test_too_few_visible_gpus_blocks_and_cuda_visible_devices_counts():
    s = spec(["--model-path", "/m", "--tp-size", "2"])
    assert check_gpus(target(s), facts(gpus=1)).blocks
    assert not check_gpus(target(s), facts(gpus=2)).blocks
    masked = spec(["--model-path", "/m", "--tp-size", "2"], env={"CUDA_VISIBLE_DEVICES": "3"})
    assert check_gpus(target(masked), facts(gpus=8)).message.endswith("1 visible (NVIDIA H200)")
    no_smi = check_gpus(target(s), facts(gpus=0, gpu_error="nvidia-smi not found"))
    assert no_smi.blocks and no_smi.message == "no GPU information: nvidia-smi not found"


def test_another_gpu_generation_or_sglang_release_blocks():
    s = spec()
    checks = _by_name(
        preflight_checks(s, target(s), facts(gpu="NVIDIA B200", sm=(10, 0)), remote_dry_run=True)
    )
    assert (
        checks["gpu-generation"].blocks and "host has NVIDIA B200 (sm100)" in checks["gpu-generation"].message
    )
    other = _by_name(preflight_checks(s, target(s), facts(sglang="0.5.22"), remote_dry_run=True))
    assert (
        other["sglang"].blocks
        and other["sglang"].fix == "install sglang==0.5.23 on the host or change the profile's `sglang:`"
    )


def test_missing_sglang_only_warns_without_the_remote_dry_run():
    s = spec()
    with_dry_run = _by_name(preflight_checks(s, target(s), facts(sglang=None), remote_dry_run=True))
    assert with_dry_run["sglang"].blocks
    without = _by_name(preflight_checks(s, target(s), facts(sglang=None), remote_dry_run=False))
    assert (
        not without["sglang"].ok and without["sglang"].severity == "warning" and not without["sglang"].blocks
    )


def test_port_disk_and_model_checks():
    s = spec()
    t = target(s)
    assert check_port(t, facts(ports=[30000])).blocks
    ours = check_port(t, facts(ports=[30000], server={"running": True, "port": 30000, "release": "r1"}))
    assert ours.ok and ours.message == "port 30000 is used by our server"
    checks = _by_name(
        preflight_checks(
            s, t, facts(disk_gib=0.5, models={"/m": {"error": "no config.json at /m"}}), remote_dry_run=True
        )
    )
    assert (
        checks["disk"].blocks
        and checks["model"].blocks
        and checks["model"].message == "/m: no config.json at /m"
    )


def test_static_validation_uses_the_hosts_gpu():
    fa3 = spec(["--model-path", "/m", "--attention-backend", "fa3"], gpu=None)
    on_h200 = preflight_checks(fa3, target(fa3), facts(), remote_dry_run=True)
    assert "validate:DDT701" not in _blocking(on_h200)
    on_b200 = preflight_checks(fa3, target(fa3), facts(gpu="NVIDIA B200", sm=(10, 0)), remote_dry_run=True)
    assert "validate:DDT701" in _blocking(on_b200)


def test_static_validation_checks_carry_their_rule_id_as_data():
    """`ddtctl tune` records a rejected point's rule ids from each check's `rule`, not from its name; the checks
    that are no rule's (the GPUs, the port, the summary `validate`) have none."""
    fa3 = spec(["--model-path", "/m", "--attention-backend", "fa3"], gpu=None, ignore={"DDT999": "y"})
    checks = preflight_checks(fa3, target(fa3), facts(gpu="NVIDIA B200", sm=(10, 0)), remote_dry_run=True)
    assert sorted((c.name, c.rule) for c in checks if c.blocks) == [
        ("validate:DDT007", "DDT007"),
        ("validate:DDT701", "DDT701"),
    ]
    assert {c.rule for c in checks if not c.name.startswith("validate:")} == {None}


def test_static_validation_sees_the_servers_environment():
    """The launch gets the inventory's env and the profile's `env:` merged; a typo in a DDTREE kernel switch
    there blocks before anything is shipped (DDT116), not at the server's start."""
    argv = ["--model-path", "/m", "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/d"]
    typo = spec(argv, env={"DDTREE_GDN_TREE": "compcat"})
    assert "validate:DDT116" in _blocking(preflight_checks(typo, target(typo), facts(), remote_dry_run=True))
    known = spec(argv, env={"DDTREE_GDN_TREE": "sglang"})
    assert "validate:DDT116" not in _blocking(preflight_checks(known, target(known), facts(), remote_dry_run=True))
