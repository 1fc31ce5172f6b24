"""The resolver bridge against the real pinned SGLang: one warm worker, errors with their hook, silent overrides,
timeouts and crashes isolated to one item, extra sys.path. All tests need the managed env (marked sglang)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ddtctl.bridge.client import ResolverClient
from ddtctl.dryrun import dry_run_argvs

pytestmark = pytest.mark.sglang

MODELS = Path(__file__).resolve().parents[1] / "fidelity" / "models"
QWEN = str(MODELS / "qwen3-8b")
DRAFT = str(MODELS / "qwen3-8b-dflash-b16")
DFLASH = ["--model-path", QWEN, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DRAFT]
H200 = {"sm": 90, "capability": [9, 0], "memory_gb": 141}
B200 = {"sm": 100, "capability": [10, 0], "memory_gb": 180}


@pytest.fixture(scope="module")
def client(managed_python):
    c = ResolverClient(managed_python)
    c.start()
    yield c
    c.close()


def _resolve(client, argv, platform=H200, timeout_s=60):
    return client.resolve(argv + ["--device", "cuda"], platform=platform, timeout_s=timeout_s)


def test_many_resolves_share_one_process(client):
    pid = client.info["pid"]
    starts = client.starts
    for _ in range(5):
        assert _resolve(client, ["--model-path", QWEN])["accepted"] is True
    assert client.info["pid"] == pid and client.starts == starts
    assert client.info["versions"]["sglang"] == "0.5.23"


def test_rejection_carries_full_message_and_hook(client):
    msg = _resolve(client, DFLASH + ["--speculative-draft-window-size", "8"])
    assert msg["accepted"] is False
    assert msg["error"] == {
        "type": "ValueError",
        "message": "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
                   "window_size=8, block_size=16.",
        "hook": "speculative_hook.handle_speculative_decoding",
    }
    assert msg["error_at"].startswith("sglang/srt/arg_groups/speculative_hook.py:")
    assert msg["error_at"].endswith("in _handle_dflash")


def test_long_messages_are_not_truncated(client):
    msg = _resolve(client, ["--model-path", QWEN, "--enable-torch-compile", "--disable-cuda-graph-padding"])
    assert msg["error"]["hook"] == "validation_hook.check_server_args"
    assert len(msg["error"]["message"]) > 300
    assert msg["error"]["message"].endswith("Remove --disable-cuda-graph-padding or --enable-torch-compile.")


def test_argparse_errors_are_reported_not_exit(client):
    msg = _resolve(client, ["--model-path", QWEN, "--tp-size", "two"])
    assert msg["error"] == {"type": "ArgumentError", "hook": "argparse",
                            "message": "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'"}
    assert _resolve(client, ["--model-path", QWEN])["accepted"] is True  # still alive


def test_messageless_assertion_gets_its_source_line(client):
    msg = _resolve(client, ["--model-path", str(MODELS / "qwen3-next-80b-a3b"), "--page-size", "64",
                            "--mamba-track-interval", "100"])
    assert msg["error"]["type"] == "AssertionError"
    assert "mamba_track_interval % view.page_size == 0" in msg["error"]["message"]
    assert msg["error"]["hook"] == "model_hook.handle_model_specific_adjustments"


def test_silent_overrides_name_the_hook(client):
    msg = _resolve(client, DFLASH + ["--speculative-eagle-topk", "4"])
    assert msg["accepted"] is True
    by_field = {o["field"]: o for o in msg["overrides"]}
    assert by_field["speculative_eagle_topk"] == {"field": "speculative_eagle_topk", "raw": 4, "resolved": 1,
                                                  "hook": "speculative_hook.handle_speculative_decoding"}
    assert by_field["speculative_num_draft_tokens"]["raw"] is None
    assert msg["resolved"]["speculative_num_draft_tokens"] == 16  # from the drafter's block_size
    assert msg["resolved"]["max_running_requests"] == 48
    assert any("Max running requests is reset to 48" in w for w in msg["warnings"])


def test_declared_gpu_generation_changes_the_resolution(client):
    h200 = _resolve(client, DFLASH, H200)["resolved"]
    b200 = _resolve(client, DFLASH, B200)["resolved"]
    assert (h200["attention_backend"], h200["page_size"]) == ("fa3", 1)
    assert (b200["attention_backend"], b200["page_size"]) == ("trtllm_mha", 64)


def test_hybrid_model_overlap_and_mamba_strategy(client):
    res = _resolve(client, ["--model-path", str(MODELS / "qwen3-next-80b-a3b"), "--tp-size", "4"])["resolved"]
    assert res["mamba_radix_cache_strategy"] == "extra_buffer" and res["disable_overlap_schedule"] is False
    # extra_buffer needs the triton linear-attention backend: auto falls back to no_buffer and SGLang turns
    # overlap scheduling off without an error -- the silent override users miss.
    msg = _resolve(client, ["--model-path", str(MODELS / "qwen3-next-80b-a3b"), "--tp-size", "4",
                            "--linear-attn-backend", "flashinfer"])
    assert msg["accepted"] is True
    assert msg["resolved"]["mamba_radix_cache_strategy"] == "no_buffer"
    assert msg["resolved"]["disable_overlap_schedule"] is True
    ov = {o["field"]: o for o in msg["overrides"]}
    assert ov["disable_overlap_schedule"] == {"field": "disable_overlap_schedule", "raw": False, "resolved": True,
                                              "hook": "model_hook.handle_model_specific_adjustments"}
    assert ov["mamba_radix_cache_strategy"]["raw"] == "auto"


def _fifo(tmp_path) -> str:
    path = tmp_path / "config.yaml"
    os.mkfifo(path)
    return str(path)


def test_hang_times_out_and_the_worker_is_replaced(managed_python, tmp_path):
    """`--config FIFO` really blocks inside SGLang's config merger (no writer): the item times out, the rest run."""
    fifo = _fifo(tmp_path)
    items = [
        ("ok-1", ["--model-path", QWEN], "H200"),
        ("hangs", ["--model-path", QWEN, "--config", fifo], "H200"),
        ("ok-2", DFLASH, "B200"),
    ]
    client = ResolverClient(managed_python)
    try:
        results = dry_run_argvs(items, client=client, timeout_s=4)
    finally:
        client.close()
    by = {r.source: r for r in results}
    assert by["ok-1"].accepted and by["ok-2"].accepted
    assert by["hangs"].setup_error and by["hangs"].error["type"] == "ResolverTimeout"
    assert "within 4 s" in by["hangs"].error["message"]
    assert client.starts == 2


def test_crash_is_reported_for_that_item_and_the_rest_continue(managed_python, tmp_path):
    fifo = _fifo(tmp_path)
    client = ResolverClient(managed_python)
    client.start()
    victim = client.info["pid"]

    def kill_soon():
        time.sleep(1.5)
        os.kill(victim, 9)

    threading.Thread(target=kill_soon, daemon=True).start()
    try:
        results = dry_run_argvs(
            [("dies", ["--model-path", QWEN, "--config", fifo], "H200"), ("after", DFLASH, "sm120")],
            client=client, timeout_s=60,
        )
    finally:
        client.close()
    assert results[0].setup_error and results[0].error["type"] == "ResolverCrashed"
    assert "killed by SIGKILL" in results[0].error["message"]
    assert client.starts == 2
    assert results[1].accepted and results[1].resolved["attention_backend"] == "flashinfer"


def test_extra_sys_path_can_replace_modules_sglang_imports(managed_python, tmp_path):
    """A staged tree shadows what is installed (how the overlay payload is dry-run before it is installed)."""
    staged = tmp_path / "staging"
    (staged / "partial_json_parser").mkdir(parents=True)
    (staged / "partial_json_parser" / "__init__.py").write_text("STAGED = True\n")
    # A general plugin found on the staged path is loaded at boot, as SGLang's launcher does.
    # Its register() wraps a pipeline step through SGLang's plugin API, so a resolve proves it ran.
    (staged / "ddtctl_probe_plugin.py").write_text(
        "def register():\n"
        "    from sglang.srt.arg_groups.resolution_hooks import register_resolution_hook\n"
        "    @register_resolution_hook('handle_load_balance_method')\n"
        "    def probe(server_args, previous):\n"
        "        if '--served-model-name' in (server_args.launch_command or ''):\n"
        "            raise ValueError('probe plugin ran')\n"
        "        previous(server_args)\n")
    dist = staged / "ddtctl_probe_plugin-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ddtctl-probe-plugin\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[sglang.srt.plugins]\nddtctl_probe = ddtctl_probe_plugin:register\n")
    with ResolverClient(managed_python, extra_sys_path=[staged]) as client:
        assert "ddtctl_probe" in client.info["plugins"]
        msg = client.resolve(["--model-path", QWEN, "--device", "cuda"], platform=H200, timeout_s=60)
        assert msg["accepted"] is True
        msg = client.resolve(["--model-path", QWEN, "--device", "cuda", "--served-model-name", "x"], platform=H200,
                             timeout_s=60)
        assert msg["error"] == {"type": "ValueError", "message": "probe plugin ran",
                                "hook": "serving_hook.handle_load_balance_method"}
        info = client.request({"op": "info"}, timeout_s=10)
    assert info["sys_path"][0] == str(staged)
    assert info["sglang_file"] and str(staged) not in info["sglang_file"]
