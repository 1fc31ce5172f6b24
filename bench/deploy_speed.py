#!/usr/bin/env python3
"""Deploy shipping speed against a real loopback OpenSSH sshd: ddtctl's ship (SFTP, sha256 skip + remote verify)
on a first ship and on a no-change redeploy, versus `scp -r` of the same files; plus a whole no-change `deploy`.

    .venv/bin/python bench/deploy_speed.py [--repeat 5] [--big-mib 64]

Payloads: the DDTREE payload (built by ddtctl.overlay when the managed SGLang env exists), a synthetic tree of many
small files, and one with a large file. Each timing includes connecting (key exchange + auth). Medians of --repeat.
Goals (issue #5): no-change redeploy < 2 s with 0 payload bytes sent; first ship no slower than scp.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "remote"))

from sshd import start_sshd  # noqa: E402  (the test suite's loopback sshd)


def make_tree(root: Path, n: int, size: int, seed: int = 0) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        sub = root / f"pkg{i % 8}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:04d}.bin").write_bytes(os.urandom(size) if size > 4096 else (f"# {seed} {i}\n" * (size // 8 + 1)).encode()[:size])
    return root


def ddtree_payload() -> Path | None:
    try:
        from ddtctl.overlay.build import build

        return Path(build(None, reuse=True).payload_dir)
    except Exception as err:  # no managed env: skip that row
        print(f"(DDTREE payload unavailable: {err})", file=sys.stderr)
        return None


def run_scp(sshd, src: Path, known: Path, dest: str) -> float:
    t = time.perf_counter()
    subprocess.run(["scp", "-q", "-r", "-P", str(sshd.port), "-i", str(sshd.client_key),
                    "-o", f"UserKnownHostsFile={known}", "-o", "BatchMode=yes", str(src),
                    f"{sshd.user}@127.0.0.1:{dest}"], check=True)
    return time.perf_counter() - t


def run_ship(host, manifest) -> tuple[float, int, int]:
    from ddtctl.remote.ship import ship
    from ddtctl.remote.transport import Connection

    t = time.perf_counter()
    with Connection(host) as conn:
        res = ship(conn, [manifest])
    return time.perf_counter() - t, res.files_sent, res.bytes_sent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--big-mib", type=int, default=64)
    args = ap.parse_args()

    from ddtctl.remote.inventory import make_host
    from ddtctl.remote.ship import build_manifest

    tmp = Path(tempfile.mkdtemp(prefix="ddtctl-bench-"))
    sshd = start_sshd(tmp / "sshd")
    known = sshd.write_known_hosts(tmp / "known_hosts")
    try:
        payloads: list[tuple[str, Path]] = []
        dd = ddtree_payload()
        if dd is not None:
            payloads.append(("DDTREE payload", dd))
        payloads.append(("500 files x 8 KiB", make_tree(tmp / "small", 500, 8192)))
        payloads.append((f"1 file x {args.big_mib} MiB + 20 small", make_tree(tmp / "big", 20, 4096)))
        (tmp / "big" / "weights.bin").write_bytes(os.urandom(args.big_mib << 20))

        rows = []
        for label, src in payloads:
            manifest = build_manifest(src)
            nfiles, nbytes = len(manifest.files), manifest.total_bytes
            first, again, scp = [], [], []
            sent_first = sent_again = None
            for i in range(args.repeat):
                work = tmp / f"work-{label[:3]}-{i}"
                host = make_host("bench", {"address": "127.0.0.1", "port": sshd.port, "user": sshd.user,
                                           "key": str(sshd.client_key), "python": sys.executable,
                                           "work_dir": str(work), "known_hosts": str(known)},
                                 ssh_config=str(tmp / "none"))
                dt, n, b = run_ship(host, manifest)
                first.append(dt)
                sent_first = (n, b)
                dt, n, b = run_ship(host, manifest)
                again.append(dt)
                sent_again = (n, b)
                dest = tmp / f"scp-{label[:3]}-{i}"
                scp.append(run_scp(sshd, src, known, str(dest)))
                shutil.rmtree(work, ignore_errors=True)
                shutil.rmtree(dest, ignore_errors=True)
            rows.append((label, nfiles, nbytes, statistics.median(first), sent_first, statistics.median(again),
                         sent_again, statistics.median(scp)))

        redeploy = whole_deploy_no_change(tmp, sshd, known, args.repeat)

        print(f"\nddtctl ship vs scp -r over a loopback OpenSSH sshd ({os.cpu_count()} cores), median of {args.repeat}")
        print("| payload | files | MiB | ddtctl first ship (s) | scp -r (s) | first/scp | "
              "no-change reship (s) | files/bytes sent on no-change |")
        print("|---|---|---|---|---|---|---|---|")
        for label, nf, nb, f, sf, a, sa, s in rows:
            print(f"| {label} | {nf} | {nb / 2**20:.2f} | {f:.3f} | {s:.3f} | {f / s:.2f}x | {a:.3f} | "
                  f"{sa[0]} / {sa[1]} |")
        if redeploy:
            print(f"\nwhole `deploy` of an unchanged DDTREE-style profile (facts + preflight + lock + plan, server left "
                  f"running): median {statistics.median(redeploy):.3f} s, min {min(redeploy):.3f} s, "
                  f"max {max(redeploy):.3f} s over {len(redeploy)} runs; 0 files shipped each time")
    finally:
        sshd.stop()
        _kill_servers(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def whole_deploy_no_change(tmp: Path, sshd, known: Path, repeat: int) -> list[float]:
    import labkit as lab  # the SSH suite's builders (stand-in server, tiny models, SGLang root, payload)

    from ddtctl.deploy import DeployOptions, deploy, spec_from_profile
    from ddtctl.remote.inventory import load_inventory

    root = tmp / "deploy"
    root.mkdir()
    lab._write_models(root / "models")
    lab._write_sglang_root(root / "site-packages")
    inv = lab.write_inventory(root / "hosts.yaml", sshd, root, known, root / "site-packages")
    payload = lab.build_lab_payload(root / "payload")
    L = lab.Lab(root, sshd, inv, known, root / "models", root / "site-packages", payload, lab.free_port())
    prof = L.profile()
    host = load_inventory(inv).get("lo")
    opts = DeployOptions(remote_dry_run=False, health_interval_s=0.2)
    first = deploy(spec_from_profile(str(prof), payload_dir=str(payload)), [host], opts)
    assert first.status == "deployed", first.error
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = deploy(spec_from_profile(str(prof), payload_dir=str(payload)), [host], opts)
        times.append(time.perf_counter() - t)
        assert r.status == "unchanged" and not r.shipped, r.status
    return times


def _kill_servers(tmp: Path) -> None:
    import json
    import signal

    for pidfile in tmp.glob("**/run/server.json"):
        try:
            os.killpg(int(json.loads(pidfile.read_text())["pgid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


if __name__ == "__main__":
    sys.exit(main())
