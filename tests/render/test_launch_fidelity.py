"""What ddtctl renders, read by SGLang 0.5.23 itself: each argv through the real `prepare_server_args` (+ resolve and
check, as `ddtctl dry-run` runs them, in the managed env's resolver worker). A value that starts with '-' comes back
as that value, and no switch it spells is turned on (issue #31's `--trust-remote-code`)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from ddtctl.errors import ProfileError
from ddtctl.profile import load_profile
from ddtctl.render import render_argv, render_profile

REPO = Path(__file__).resolve().parents[2]
QWEN = REPO / "tests" / "fidelity" / "models" / "qwen3-8b"
WORKER = REPO / "ddtctl" / "bridge" / "resolver_worker.py"
FIELDS = ("trust_remote_code", "enable_metrics", "served_model_name", "api_key", "revision", "allowed_media_domains",
          "chat_template", "random_seed")

DRIVER = textwrap.dedent("""
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("resolver_worker", sys.argv[1])
    rw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rw)
    rw.REPORTED_FIELDS = rw.REPORTED_FIELDS + tuple(json.loads(sys.argv[2]))
    worker = rw.Worker(sys.stdout)
    worker.boot()
    out = {}
    for name, argv in json.loads(sys.argv[3]).items():
        # "--device cuda" as dry-run adds it when it declares the GPU
        platform = {"sm": 90, "capability": [9, 0], "memory_gb": 141}
        r = worker.resolve({"argv": argv + ["--device", "cuda"], "platform": platform})
        out[name] = {"accepted": r["accepted"], "error": r["error"], "resolved": r["resolved"]}
    print("RESULT " + json.dumps(out))
""")


def _sglang_reads(python: Path, argvs: dict[str, list[str]]) -> dict:
    proc = subprocess.run([str(python), "-c", DRIVER, str(WORKER), json.dumps(FIELDS), json.dumps(argvs)],
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _profile(tmp_path: Path, name: str, server: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f'name: {name}\nsglang: "0.5.23"\nmodel: {{path: {QWEN}}}\nserver:\n{server}')
    return path


@pytest.mark.sglang
def test_sglang_reads_each_dash_led_value_back_and_no_switch_turns_on(managed_python, tmp_path):
    single = _profile(tmp_path, "single", "  served-model-name: --trust-remote-code\n  api-key: --enable-metrics\n"
                                          "  revision: 0123\n  chat-template: '-'\n  random-seed: -3\n")
    injected = _profile(tmp_path, "injected", "  allowed-media-domains: [example.com, --trust-remote-code]\n")
    with pytest.raises(ProfileError, match="DDT011"):  # refused, never rendered
        render_argv(load_profile(injected).profile)
    argvs = {
        "single": render_argv(load_profile(single).profile),
        # what ddtctl rendered before issue #31 for the refused profile: the harness sees the switch turn on
        "old-injection": ["--model-path", str(QWEN), "--allowed-media-domains", "example.com", "--trust-remote-code"],
    }
    config = tmp_path / "server.yaml"
    config.write_text(render_profile(str(_profile(tmp_path, "cfg", "  revision: 0123\n  served-model-name: no\n"
                                                              "  random-seed: -3\n")),
                                     "sglang-config", show_secrets=True).text)
    argvs["sglang-config"] = ["--config", str(config)]
    got = _sglang_reads(managed_python, argvs)

    old = got["old-injection"]["resolved"]
    assert old["trust_remote_code"] is True and old["allowed_media_domains"] == ["example.com"]

    one = got["single"]
    assert one["accepted"], one["error"]
    r = one["resolved"]
    assert r["trust_remote_code"] is False and r["enable_metrics"] is False
    assert (r["served_model_name"], r["api_key"], r["revision"]) == ("--trust-remote-code", "--enable-metrics", "0123")
    assert (r["chat_template"], r["random_seed"]) == ("-", -3)

    cfg = got["sglang-config"]
    assert cfg["accepted"], cfg["error"]
    assert (cfg["resolved"]["revision"], cfg["resolved"]["served_model_name"], cfg["resolved"]["random_seed"]) == \
        ("0123", "no", -3)
