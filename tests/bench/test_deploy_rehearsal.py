"""bench/deploy_gpu.py (issue #16's one-call `ddtctl deploy` on the H200) on the CPU: its helpers, and the whole
CPU rehearsal -- every phase against a real local sshd, the managed SGLang env as the host's SGLang (real payload
build, SGLang's resolver on the host, the overlay installer), tests/remote's stand-in server instead of SGLang."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dg():
    yield from load_bench("deploy_gpu")


def _events(*lines):
    return [(0.0, ln) for ln in lines]


def test_stage_times_attribute_each_interval_to_the_stage_that_reports_it(dg):
    ev = _events("  0.01s · facts     [h200] connecting", "  0.40s · facts     [h200] vm: 1x H200",
                 "  0.42s ✓ preflight [h200] gpus ok", "  1.00s · plan      [h200] first deploy",
                 "  3.00s ✓ ship      [h200] 28 file(s) sent", "  3.00s · dry-run   [h200] resolver",
                 "        [h200] | a server log line 99.00s · facts",
                 " 20.00s ✓ dry-run   [h200] accepted", " 30.00s ✗ health    [h200] the server process exited",
                 " 31.00s ! rollback  [h200] restoring release r1", " 90.00s · health    [h200] /health 200",
                 " 91.00s ✓ rollback  [h200] release r1: healthy")
    t = dict(dg.stage_times(ev, wall_s=92.5))
    assert t["facts"] == pytest.approx(0.40) and t["ship"] == pytest.approx(2.0)
    assert t["dry-run"] == pytest.approx(17.0) and t["health"] == pytest.approx(10.0)
    assert t["rollback"] == pytest.approx(61.0)  # the old release's restart and health wait
    assert t["(cli start + exit)"] == pytest.approx(1.5)
    assert sum(t.values()) == pytest.approx(92.5)


def test_setenv_is_one_directive_with_the_cuda_environment_only(dg):
    line = dg.setenv_line({"PATH": "/usr/local/cuda/bin:/usr/bin", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
                           "NCCL_NVLS_ENABLE": "0", "HF_TOKEN": "x", "CUDA_API_KEY": "y", "HOME": "/root",
                           "CUDA_ODD": 'has "quotes"'})
    assert line.count("SetEnv") == 1 and line.endswith("\n")  # sshd keeps only its first SetEnv line
    assert '"PATH=/usr/local/cuda/bin:/usr/bin"' in line and '"NCCL_NVLS_ENABLE=0"' in line
    assert "TOKEN" not in line and "API_KEY" not in line and "HOME" not in line and "ODD" not in line
    assert dg.setenv_line({"HOME": "/root"}) == ""


def _ar(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members.items():
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data
        out += b"\n" if len(data) % 2 else b""
    return out


def test_unpack_deb_writes_files_and_relative_links_inside_the_destination(dg, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tf:
        def add(name, data=b"", kind=tarfile.REGTYPE, link=""):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size, info.mode = kind, link, len(data), 0o755
            tf.addfile(info, io.BytesIO(data) if data else None)
        add("./usr/sbin", kind=tarfile.DIRTYPE)
        add("./usr/sbin/sshd", b"\x7fELF fake")
        add("./usr/bin/slogin", kind=tarfile.SYMTYPE, link="ssh")
        add("./usr/lib/evil", kind=tarfile.SYMTYPE, link="/etc/passwd")
        add("../outside", b"no")
    deb = tmp_path / "x.deb"
    deb.write_bytes(_ar({"debian-binary": b"2.0\n", "control.tar.xz": b"", "data.tar.xz": buf.getvalue()}))
    dest = tmp_path / "root"
    written = dg.unpack_deb(deb, dest)
    assert (dest / "usr/sbin/sshd").read_bytes() == b"\x7fELF fake" and os.access(dest / "usr/sbin/sshd", os.X_OK)
    assert os.readlink(dest / "usr/bin/slogin") == "ssh"
    assert not (dest / "usr/lib/evil").exists() and not (tmp_path / "outside").exists()
    assert sorted(written) == ["usr/bin/slogin", "usr/sbin/sshd"]


def _rehearse(tmp_path: Path, *extra: str, budget_s: int = 600) -> tuple[subprocess.CompletedProcess, Path]:
    """bench/deploy_gpu.py --cpu-rehearsal in tmp_path (skipped without the managed env or sshd); (process, OUT).
    The budget and the phase limits (3x the device call's) are ceilings against a hang, not speed claims: a rehearsal
    takes ~40-170 s alone, and `make test` runs it beside the rest of the suite on two cores, where the device call's
    limits failed its deploy phase (SGLang's resolver on the host) or skipped its last phases."""
    from ddtctl import envs

    sys.path.insert(0, str(REPO / "tests" / "remote"))
    from sshd import find_sshd

    env = envs.managed_env("0.5.23")
    if not env.exists or getattr(env, "status", "ready") != "ready":
        pytest.skip("managed SGLang 0.5.23 env not built (make sglang-env)")
    if not find_sshd():
        pytest.skip("sshd not installed (make system-deps)")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "deploy_gpu.py"), "--cpu-rehearsal", *extra, "--limit-scale", "3", "--work",
                        str(tmp_path / "work"), "--budget-s", str(budget_s)], env={**os.environ, "OUT": str(out)},
                       capture_output=True, text=True, timeout=budget_s + 90, cwd=REPO)
    return p, out


@pytest.mark.ssh
@pytest.mark.sglang
def test_cpu_rehearsal_runs_every_phase(tmp_path):
    p, out = _rehearse(tmp_path)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    res = json.loads((out / "deploy_gpu.json").read_text())
    assert res["ok"] and [ph["status"] for ph in res["phases"]] == ["ok"] * 11
    assert res["deploys"]["deploy"]["status"] == "deployed"
    assert res["deploys"]["redeploy"]["status"] == "unchanged"
    assert res["deploys"]["broken"]["status"] == "rolled_back"
    timings = (out / "timings.txt").read_text()
    for stage in ("ship", "dry-run", "warmup", "health", "rollback"):
        assert f"\n{stage} " in timings
    transcript = (out / "transcript.txt").read_text()
    assert "hosts.yaml:" in transcript and "$ ddtctl stop h200" in transcript and "stopped release" in transcript
    # the payload went into the host-site copy only: the managed env's SGLang files are still pristine
    manifest = json.loads((tmp_path / "work" / "payload-build" / "payload" / "ddtree-manifest.json").read_text())
    site = Path(res["meta"]["host_python"]["sites"][1])
    patched = [e for e in manifest["files"] if e.get("base_sha256")]
    assert patched
    for e in patched:
        assert hashlib.sha256((site / e["path"]).read_bytes()).hexdigest() == e["base_sha256"], e["path"]
    assert not (site / "ddtree_sglang").exists()


@pytest.mark.ssh
@pytest.mark.sglang
def test_cpu_rehearsal_of_the_flagship_at_tp_8_with_phases_skipped(tmp_path):
    """Issue #18's device call on the CPU: the seed's DDTREE flags on the 27B-shaped hybrid at tp 8 go through every
    deploy stage (preflight sees 8 stand-in GPUs, SGLang's resolver on the host accepts the launch), then the
    throughput phase times the deployed server, and once it is stopped, a DFLASH server of the same model and tp.
    As the tp 2 flagship call does, it skips what the tiny-model rehearsal proves (redeploy, rollback: see
    test_cpu_rehearsal_runs_every_phase): those phases are reported as skipped and the run still passes."""
    p, out = _rehearse(tmp_path, "--flagship-tp", "8", "--skip", "redeploy,broken,requests2")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    res = json.loads((out / "deploy_gpu.json").read_text())
    status = {ph["name"]: (ph["status"], ph["detail"]) for ph in res["phases"]}
    assert {n for n, (s, d) in status.items() if s == "ok"} == {
        "setup", "payload", "plain", "sshd", "facts", "deploy", "requests", "throughput", "ops", "dflash"}
    assert {n for n, (s, d) in status.items() if s == "skipped"} == {"redeploy", "broken", "requests2"}
    assert all(d == "--skip" for s, d in status.values() if s == "skipped")
    assert res["ok"] and len(res["phases"]) == 13
    served = res["compare"]["requests"]["served"]
    assert res["deploys"]["deploy"]["status"] == "deployed" and served.get("speculative_algorithm") == "DDTREE"
    resolved = res["deploys"]["deploy"]["dry_run"]["resolved"]
    assert resolved["tp_size"] == 8 and resolved["speculative_ddtree_budget"] == 64
    assert resolved["speculative_ddtree_shadow_linear"] is True
    rows = {(r["algo"], r["batch"]) for r in res["throughput"]}
    assert rows == {("DFLASH", 1), ("DFLASH", 8), ("DDTREE", 1), ("DDTREE", 8)}
    assert "target=qwen36-27b tp 8" in (out / "timings.txt").read_text()


@pytest.mark.ssh
@pytest.mark.sglang
@pytest.mark.skipif(os.environ.get("DDTCTL_TUNE_REHEARSAL") != "1",
                    reason="~3 minutes: `make rehearse-tune` (before a device call of bench/deploy_gpu.py --tune); "
                    "tests/remote/test_tune.py proves ddtctl tune itself in make test")
def test_cpu_rehearsal_of_the_tune_call(tmp_path):
    """Issue #15's device call on the CPU, the same command line less the GPU: deploy, then `ddtctl tune` on that host
    with SGLang's own benchmark (the managed env's, for real: offline random-ids or the prompt file, the tiny model's
    generated tokenizer) against the stand-in server, paced per DDTREE budget. The table has every point at both
    concurrencies, budget 16 beats budget 8, and the host ends on the deployed release, serving budget 15."""
    p, out = _rehearse(tmp_path, "--tune", "--tune-skip-dry-run", "--skip", "redeploy,broken,requests2,ops",
                       budget_s=900)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    res = json.loads((out / "deploy_gpu.json").read_text())
    status = {ph["name"]: ph["status"] for ph in res["phases"]}
    assert status["tune"] == "ok" and res["ok"] and len(res["phases"]) == 12, status
    tune = res["tune"]
    rows = [tune["baseline"], *tune["points"]]
    assert [r["label"] for r in rows] == ["baseline DFLASH", "budget=8", "budget=16"]
    for r in rows:  # SGLang's benchmark measured every point at both levels, all 8 prompts
        assert r["status"] == "ok" and [(x["concurrency"], x["ok"], x["completed"]) for x in r["runs"]] == [
            (1, True, 8), (4, True, 8)]
        assert all(x["output_tps"] > 0 and x["itl_p50_ms"] > 0 and x["ttft_ms"] > 0 for x in r["runs"])
    assert tune["winner"]["label"] == "budget=16" and tune["concurrencies"] == [1, 4]
    assert tune["points"][1]["runs"][0]["accept_length"] == pytest.approx(1 + 3 * (1 - math.exp(-1)), abs=1e-3)
    release1 = res["deploys"]["deploy"]["release"]["h200"]
    assert tune["restored"] and tune["start_release"] == tune["end_release"] == release1
    text = (out / "tune.txt").read_text()
    assert "baseline DFLASH" in text and "budget=16 *" in text and f"back on release {release1}" in text
    assert (out / "tune.png").read_bytes()[:4] == b"\x89PNG" and len((out / "tune.jsonl").read_text().splitlines()) == 3
    detail = next(ph["detail"] for ph in res["phases"] if ph["name"] == "tune")
    assert "prompts: the plain server's" in detail and "serving budget 15" in detail
    # a GPU image without matplotlib: the PNG is drawn here from the JSON envelope
    png = tmp_path / "again.png"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "deploy_gpu.py"), "--replot", str(out / "tune.json"),
                        "--plot", str(png)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0 and png.read_bytes()[:4] == b"\x89PNG", r.stderr[-2000:]


def test_tune_repeats_reach_ddtctl_tune_and_the_check_counts_every_run(dg):
    """--tune-repeats N (default 1, the device call's time unchanged) becomes `ddtctl tune --repeats N`, and the
    tune check wants N runs per point and level."""
    import argparse

    from types import SimpleNamespace

    ap = argparse.ArgumentParser()
    dg.add_tune_args(ap)
    w = SimpleNamespace(args=ap.parse_args([]), payload_dir="/payload", inventory="/hosts.yaml", release1="r1")
    argv = dg.tune_argv(w, Path("p.yaml"), Path("space.yaml"), None, Path("tune.jsonl"))
    assert argv[argv.index("--repeats") + 1] == 1
    assert "--yes" in argv  # the host serves the deploy's release: no terminal there to confirm its restart
    w.args = ap.parse_args(["--tune-repeats", "3", "--tune-concurrency", "1,4"])
    argv = dg.tune_argv(w, Path("p.yaml"), Path("space.yaml"), None, Path("tune.jsonl"))
    assert argv[argv.index("--repeats") + 1] == 3

    def point(label, repeats):
        runs = [{"concurrency": c, "ok": True, "repeat": i} for c in (1, 4) for i in range(repeats)]
        return {"label": label, "status": "ok", "runs": runs, "resumed": True}

    def tune_result(repeats):
        return {"winner": {"label": "budget=8"}, "baseline": point("baseline DFLASH", repeats),
                "points": [point("budget=8", repeats)], "restored": True, "restore_error": None,
                "start_release": "r1", "end_release": "r1"}

    w.tune = tune_result(3)
    assert dg._tune_problems(w, 0, 0) == []
    w.tune = tune_result(1)  # one run per level where three were asked
    assert dg._tune_problems(w, 0, 0) == ["baseline DFLASH: status ok without figures or a reason",
                                          "budget=8: status ok without figures or a reason"]
    with pytest.raises(SystemExit) as exited:
        dg.main(["--tune-repeats", "0"])
    assert exited.value.code == 2


def test_server_env_reaches_the_inventory_and_bad_pairs_are_refused(dg, tmp_path):
    """--server-env KEY=VALUE (bench/flagship_tp8.sh's SERVER_ENV) lands in the deployed host's env."""
    import argparse

    from types import SimpleNamespace

    import yaml

    profile = tmp_path / "p.yaml"
    profile.write_text("name: p\n")
    w = SimpleNamespace(gpu=False, work=tmp_path, profile=profile, known_hosts=tmp_path / "kh", host_python="python3",
                        nvidia_smi="nvidia-smi", sshd=SimpleNamespace(port=2222, user="u", client_key=tmp_path / "k"),
                        args=SimpleNamespace(server_env=[("DDTREE_GDN_TREE", "compact")]))
    dg.write_inventory(w)
    assert yaml.safe_load(w.inventory.read_text())["hosts"][dg.HOST]["env"] == {"DDTREE_GDN_TREE": "compact"}
    assert dg._env_pair("DDTREE_GDN_TREE=compact") == ("DDTREE_GDN_TREE", "compact")
    assert dg._env_pair("A=") == ("A", "")
    for bad in ("novalue", "=x", "A B=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            dg._env_pair(bad)
