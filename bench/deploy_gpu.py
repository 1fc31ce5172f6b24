#!/usr/bin/env python3
"""`ddtctl deploy` to a real GPU host, in one device call (issue #16): a real sshd on 127.0.0.1 of the lent H200, real
SGLang 0.5.23, the payload's real Triton warm-up, rollback; a transcript and a table of stage timings.

On the GPU machine, from the repo root (python3 = the image's torch 2.11 / triton 3.6; nothing else installed):

    python3 bench/deploy_gpu.py            # device call: carry .carry/deploy and .carry/flashinfer_include.tar.gz

(tools/fetch_deploy_carry.sh fetches both.) The CPU rehearsal runs the same phases on this machine against a local
sshd, with tests/remote's stand-in server instead of SGLang and the managed SGLang env as the host's SGLang:

    .venv/bin/python bench/deploy_gpu.py --cpu-rehearsal

Phases (each with its own time limit, inside --budget-s; a failed phase skips the ones that need it; the transcript,
the phase table and the stage-timings table are printed and written to $OUT whatever happens):
  setup      GPU: unpack the carried wheels (one xz stream) -- SGLang's set into a site dir with bench/
             sglang_e2e_gpu.py's own setup (flashinfer headers, tests/gpu_standins for SGLang's compiled extensions),
             ddtctl's deps (paramiko, cryptography, ...) into a controller site; unpack the Debian openssh packages
             into the work dir, carried libraries only for sonames the image lacks. Both modes: the host's "SGLang
             python" -- a venv-like interpreter whose site holds a hard-link copy of the pristine sglang (the deploy
             installs the payload there, never into the pristine one), then the pristine site and the base
             interpreter's; tiny models as config.json only (the e2e script's dense Qwen3 target and DFlash draft).
  payload    `ddtctl overlay build` against the pristine sglang files (what `deploy --payload` ships).
  plain      (background) the reference: a plain greedy server outside ddtctl, on the pristine site (GPU: SGLang
             with the e2e script's informative test weights, float32; CPU: the stand-in); its outputs become the
             oracle drafter's file (GPU, --drafter oracle).
  sshd       the carried sshd (CPU: the carried one when fetched, else the system's) on 127.0.0.1 with fresh host and
             client keys, SetEnv passing the machine's CUDA environment (PATH, LD_LIBRARY_PATH, CUDA_*, NCCL_*) to
             sessions; hosts.yaml and known_hosts written; one `ssh` call checks login and the environment.
  facts      `ddtctl facts h200` (the GPU, CUDA, python, SGLang version and root, models, as the host reports them).
  deploy     `ddtctl deploy h200 --profile P --payload B --yes --format json`: DDTREE (budget 15, CUDA graphs on,
             float32) through facts -> preflight -> plan -> ship -> SGLang's resolver on the host -> kernel warm-up
             on the GPU -> install -> launch -> health -> served-args check -> record.
  requests   the same prompts to the deployed server; its outputs must equal the plain server's (greedy).
  redeploy   the same profile again: status `unchanged`, 0 files shipped, the same server pid still serving.
  broken     a variant whose server refuses to start (GPU: DDTREE_WORKER=0 in the profile's env, the payload's
             off switch; CPU: the stand-in's STANDIN_EXIT); deploy must fail health and roll back (exit 5) to the
             first release, which must be current, running and healthy again.
  requests2  the prompts again: still the plain server's outputs.
  tune       (only with --tune; issue #15) `ddtctl tune h200` on the deployed host: a profile like the deployed one
             but with a tokenizer (the tiny model gets a generated word-level one: id N <-> word tN) and without
             prefill CUDA graphs; the baseline (DFLASH) and --tune-budgets (8,16) at --tune-concurrency (1,4), 8
             prompts of 32 new tokens, SGLang's own benchmark on the host (offline: the plain server's prompts as a
             --prompts file, so the oracle drafter knows their continuation, else SGLang's random-ids; a `datasets`
             stand-in when the host lacks Hugging Face datasets, which the benchmark imports). Then the same command
             --format json reads every point back from the results file. --tune-repeats N (default 1) runs the
             benchmark N times per point and level (`ddtctl tune --repeats`): the table then shows each median
             with its spread and says whether the winner is ahead beyond it. Checked: every point measured at
             every level (N times) or its reason recorded, a winner, and the host back on the deploy phase's
             release, serving it.
  ops        `ddtctl status`, `logs`, `releases`, `stop`, then `status` again (exit 5: not running).
Output ($OUT): transcript.txt, timings.txt (both tables), deploy_gpu.json (everything), logs.tar.gz (server, warm-up,
sshd and plain-server logs); with --tune also tune.txt (the table as printed, and the terminal plot when plotext is
there), tune.json (the JSON envelope), tune.jsonl (the results file), tune.png when matplotlib is there (else, on
this machine: `python bench/deploy_gpu.py --replot tune.json --plot tune.png`).

The tune call (issue #15; one `nvidia-h200` device call, carry [".carry/deploy", ".carry/flashinfer_include.tar.gz"]):

    timeout 575 python3 bench/deploy_gpu.py --budget-s 560 --tune --tune-skip-dry-run \
        --skip redeploy,broken,requests2,ops

Expected on the H200 (from the 2026-12-01 deploy run, prefill CUDA graphs off): setup ~7 s, payload ~1 s, plain
~76 s in the background, sshd <1 s, facts ~3 s, deploy ~90 s, requests ~1 s, tune ~320 s (3 points of ~85 s: stop,
launch, ~50 s to healthy, 2 benchmark runs of ~12 s each, mostly importing SGLang; then the restore of the first
release ~60 s; the JSON re-read ~5 s); ~430 s in all. Without --tune-skip-dry-run each point also runs SGLang's
resolver on the host (~10-18 s): ~470 s. CPU rehearsal of the same: add --cpu-rehearsal (tests/bench/
test_deploy_rehearsal.py::test_cpu_rehearsal_of_the_tune_call).

`--flagship-tp N` (issue #18, bench/flagship_tp8.sh) deploys the flagship instead of the tiny model: a
Qwen3.6-27B-shaped GDN hybrid (bench/spec_throughput_gpu.py's qwen36-27b config, bf16, SGLang's dummy weights) with the
seed's DDTREE flags at --tp-size N (budget 64, topk-cap 64, shadow-linear, extra_buffer 0.5). The plain reference
runs at tp N too. An extra phase, throughput, times the deployed server against a DFLASH server of the same model
and tp at --batches (random, oracle or calibrated drafter).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
T0 = time.monotonic()
HOST = "h200"
SGLANG = "0.5.23"
PLAIN_PORT = 31401
DEPLOY_PORT = 31500
BUDGET = 15
RESERVE_S = 20.0  # kept back from --budget-s for cleanup and the report
TRANSCRIPT: list[str] = []
REMOTE_TESTS = REPO / "tests" / "remote"
STANDIN_SERVER = REMOTE_TESTS / "standins" / "standin_sglang_server.py"
STANDIN_SMI = REMOTE_TESTS / "standins" / "standin_nvidia_smi.py"
STANDIN_SELFTEST = REMOTE_TESTS / "standins" / "standin_kernel_selftest.py"
# ddtctl's controller needs these from the SGLang wheel set too (one version of each on the machine)
CTL_FROM_SGLANG_SET = ("pydantic-", "pydantic_core-", "annotated_types-", "typing_inspection-", "typing_extensions-",
                       "cffi-", "pycparser-")
# the machine's environment that sshd hands to sessions (a real host's login environment has its own)
PASS_ENV = ("PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "CUDA_HOME", "CUDA_PATH", "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE")
PASS_PREFIX = ("CUDA_", "NVIDIA_", "NCCL_", "NVSHMEM_", "TORCH_")
SECRET = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL)", re.I)
EVENT = re.compile(r"^\s*(\d+\.\d+)s (\S) ([a-z-]+)\s")


def say(msg: str) -> None:
    line = f"[{time.monotonic() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    TRANSCRIPT.append(line)


def left(until: float) -> float:
    return max(1.0, until - time.monotonic())


def sh(argv, *, env=None, timeout=120.0, cwd=None, check=True, quiet=False) -> subprocess.CompletedProcess:
    if not quiet:
        say("$ " + " ".join(shlex.quote(str(a)) for a in argv))
    p = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{Path(str(argv[0])).name} exited {p.returncode}: {(p.stderr or p.stdout).strip()[-800:]}")
    return p


# ------------------------------------------------------------------------------------------------------- phases
@dataclass
class Phase:
    name: str
    limit_s: float
    what: str
    status: str = "not run"  # ok | FAIL | skipped | not run
    elapsed_s: float | None = None
    detail: str = ""


class Runner:
    def __init__(self, budget_s: float, stop_after: str | None = None, skip: frozenset[str] = frozenset(),
                 limit_scale: float = 1.0):
        self.deadline = T0 + budget_s
        self.limit_scale = limit_scale  # --limit-scale: every phase's limit times this
        self.stop_after = stop_after
        self.skip = skip
        self.phases: list[Phase] = []
        self.background: dict[str, tuple[Phase, threading.Thread, dict]] = {}

    def ok(self, name: str) -> bool:
        return any(p.name == name and p.status == "ok" for p in self.phases)

    def _admit(self, p: Phase, needs) -> float | None:
        p.limit_s *= self.limit_scale
        self.phases.append(p)
        missing = [n for n in needs if not self.ok(n)]
        if self.stop_after and any(q.name == self.stop_after for q in self.phases[:-1]):
            p.status, p.detail = "skipped", f"--stop-after {self.stop_after}"
            say(f"=== {p.name}: skipped ({p.detail})")
            return None
        if p.name in self.skip:
            p.status, p.detail = "skipped", "--skip"
            say(f"=== {p.name}: skipped ({p.detail})")
            return None
        if missing:
            p.status, p.detail = "skipped", f"needs {', '.join(missing)}"
            say(f"=== {p.name}: skipped ({p.detail})")
            return None
        room = self.deadline - RESERVE_S - time.monotonic()
        if room < 5:
            p.status, p.detail = "skipped", "no time left in --budget-s"
            say(f"=== {p.name}: skipped ({p.detail})")
            return None
        return min(p.limit_s, room)

    def run(self, name: str, limit_s: float, what: str, fn: Callable[[float], str | None], needs=()) -> bool:
        p = Phase(name, limit_s, what)
        limit = self._admit(p, needs)
        if limit is None:
            return False
        say(f"=== {name} (limit {limit:.0f}s): {what}")
        t = time.monotonic()
        try:
            p.detail = fn(t + limit) or ""
            p.status = "ok"
        except Exception as exc:  # noqa: BLE001
            p.status, p.detail = "FAIL", f"{type(exc).__name__}: {exc}"
        p.elapsed_s = time.monotonic() - t
        if p.status == "ok" and p.elapsed_s > limit + 2:
            p.status, p.detail = "FAIL", f"over its {limit:.0f}s limit; {p.detail}"
        say(f"=== {name}: {p.status} in {p.elapsed_s:.1f}s{' -- ' + p.detail if p.detail else ''}")
        return p.status == "ok"

    def start(self, name: str, limit_s: float, what: str, fn: Callable[[float], str | None], needs=()) -> None:
        """A phase that runs in the background until join(name)."""
        p = Phase(name, limit_s, what)
        limit = self._admit(p, needs)
        if limit is None:
            return
        say(f"=== {name} (background, limit {limit:.0f}s): {what}")
        box: dict = {"t": time.monotonic()}

        def body():
            try:
                box["detail"] = fn(box["t"] + limit) or ""
                box["ok"] = True
            except Exception as exc:  # noqa: BLE001
                box["detail"], box["ok"] = f"{type(exc).__name__}: {exc}", False
            box["end"] = time.monotonic()

        th = threading.Thread(target=body, daemon=True)
        th.start()
        p.status = "running"
        self.background[name] = (p, th, box)

    def join(self, name: str, until: float) -> bool:
        if name not in self.background:  # a phase that ran in the foreground
            return self.ok(name)
        p, th, box = self.background[name]
        if p.status != "running":
            return p.status == "ok"
        th.join(timeout=max(0.0, min(until, box["t"] + p.limit_s) - time.monotonic()))
        if th.is_alive():
            p.status, p.detail = "FAIL", "still running at its limit"
            p.elapsed_s = time.monotonic() - box["t"]
        else:
            p.status = "ok" if box.get("ok") else "FAIL"
            p.detail = box.get("detail", "")
            p.elapsed_s = box["end"] - box["t"]
        say(f"=== {name}: {p.status} in {p.elapsed_s:.1f}s{' -- ' + p.detail if p.detail else ''}")
        return p.status == "ok"


# ------------------------------------------------------------------------------------------------------- ddtctl
@dataclass
class Cmd:
    label: str
    args: list[str]
    rc: int | None
    stdout: str
    events: list[tuple[float, str]]
    wall_s: float

    def json(self) -> dict:
        """The command's results from its --format json envelope (ddtctl/report.py)."""
        try:
            doc = json.loads(self.stdout)
        except ValueError:
            raise RuntimeError(f"{self.label}: no JSON on stdout (exit {self.rc}): {self.stdout[-300:]!r}") from None
        if doc.get("error"):
            raise RuntimeError(f"{self.label}: exit {self.rc}: {doc['error']}")
        return doc["results"]

    def to_json(self) -> dict:
        return {"label": self.label, "argv": ["ddtctl", *self.args], "rc": self.rc, "wall_s": round(self.wall_s, 2),
                "stages": stage_times(self.events, self.wall_s) if self.label.startswith("deploy") else None}


def _error_text(result: dict) -> str | None:
    """The message of a result's `error` (an object in ddtctl's JSON envelope: message, where, fix, exit_code)."""
    err = result.get("error")
    return err.get("message") if isinstance(err, dict) else err


def stage_times(events: list[tuple[float, str]], wall_s: float | None = None) -> list[tuple[str, float]]:
    """Seconds per deploy stage from ddtctl's own event clock: the time up to each event is the stage's that reports
    it (ship reports when its files are verified, health when /health answers, ...). After the first `rollback`
    event, the restart and health wait of the old release count as rollback."""
    totals: dict[str, float] = {}
    prev = 0.0
    rolling = False
    for _, line in events:
        m = EVENT.match(line)
        if not m:
            continue
        t, stage = float(m[1]), m[3]
        if stage == "rollback":
            rolling = True
        elif rolling and stage in ("health", "launch", "install", "log"):
            stage = "rollback"
        totals[stage] = totals.get(stage, 0.0) + max(0.0, t - prev)
        prev = max(prev, t)
    out = list(totals.items())
    if wall_s is not None:
        out.append(("(cli start + exit)", max(0.0, wall_s - prev)))
    return out


class World(SimpleNamespace):
    """Everything the phases share."""


def ddtctl(w: World, label: str, args: list[str], until: float) -> Cmd:
    """One ddtctl command as a user types it; its stderr (the timed stage events) goes into the transcript live."""
    args = [str(a) for a in args]
    say("$ ddtctl " + " ".join(shlex.quote(a) for a in args))
    t = time.monotonic()
    proc = subprocess.Popen([w.ctl_python, "-m", "ddtctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=w.ctl_env, cwd=w.work, start_new_session=True)
    events: list[tuple[float, str]] = []
    out: list[str] = []

    def pump_err():
        for line in proc.stderr:
            line = line.rstrip("\n")
            events.append((time.monotonic() - t, line))
            print("    " + line, flush=True)
            TRANSCRIPT.append("    " + line)

    threads = [threading.Thread(target=pump_err, daemon=True),
               threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)]
    for th in threads:
        th.start()
    try:
        rc = proc.wait(timeout=left(until))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    for th in threads:
        th.join(5)
    cmd = Cmd(label, args, rc, "".join(out), events, time.monotonic() - t)
    if "--format" not in args:
        for line in cmd.stdout.rstrip("\n").splitlines():
            TRANSCRIPT.append("    " + line)
            print("    " + line, flush=True)
    else:
        TRANSCRIPT.append(f"    (JSON on stdout, {len(cmd.stdout)} bytes: in deploy_gpu.json)")
    say(f"  -> exit {rc if rc is not None else 'KILLED at the phase limit'} in {cmd.wall_s:.1f}s")
    w.commands.append(cmd)
    return cmd


# ------------------------------------------------------------------------------------------------------- setup
def load_e2e(work: Path):
    """bench/sglang_e2e_gpu.py as a module (its setup, models, prompts, servers and verdict), working in `work`."""
    os.environ["DDTREE_E2E_WORK"] = str(work)
    spec = importlib.util.spec_from_file_location("sglang_e2e_gpu", REPO / "bench" / "sglang_e2e_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def load_bench_module(name: str):
    """Another bench script as a module, sharing this run's bench/sglang_e2e_gpu.py module (one set of globals)."""
    e2e = sys.modules.get("sglang_e2e_gpu")
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    if e2e is not None:
        sys.modules["sglang_e2e_gpu"] = e2e
        mod.e2e = e2e
    return mod


def unpack_deb(deb: Path, dest: Path) -> list[str]:
    """`dpkg -x` in Python (an ar archive holding data.tar.*): regular files, directories and relative symlinks that
    stay inside dest. Returns the paths written."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise RuntimeError(f"{deb.name} is not a .deb")
    pos, member = 8, None
    while pos + 60 <= len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        if name.startswith("data.tar"):
            member = data[pos + 60:pos + 60 + size]
            break
        pos += 60 + size + (size & 1)
    if member is None:
        raise RuntimeError(f"{deb.name}: no data.tar member")
    import io

    written = []
    with tarfile.open(fileobj=io.BytesIO(member), mode="r:*") as tf:
        for m in tf.getmembers():
            name = m.name
            while name.startswith("./"):
                name = name[2:]
            rel = os.path.normpath(name or ".")
            if rel == "." or rel == ".." or rel.startswith("../") or os.path.isabs(rel):
                continue
            target = dest / rel
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif m.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tf.extractfile(m).read())
                os.chmod(target, m.mode & 0o755)
                written.append(rel)
            elif m.issym() and not os.path.isabs(m.linkname):
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.is_symlink() or target.exists():
                    target.unlink()
                os.symlink(m.linkname, target)
                written.append(rel)
    return written


def unpack_openssh(debs: Path, dest: Path, work: Path) -> dict:
    """The carried Debian openssh (+ libraries) into dest; a library dir holding only the carried sonames that this
    machine lacks (ldd, repeated until nothing is missing)."""
    shutil.rmtree(dest, ignore_errors=True)
    for deb in sorted(debs.glob("*.deb")):
        unpack_deb(deb, dest)
    bins = {"sshd": dest / "usr/sbin/sshd", "ssh": dest / "usr/bin/ssh", "ssh-keygen": dest / "usr/bin/ssh-keygen",
            "sftp-server": dest / "usr/lib/openssh/sftp-server"}
    for name, p in bins.items():
        if not p.is_file():
            raise RuntimeError(f"the carried debs lack {name} ({p})")
    carried = {}
    for d in (dest / "lib/x86_64-linux-gnu", dest / "usr/lib/x86_64-linux-gnu"):
        if d.is_dir():
            carried.update({p.name: p for p in d.iterdir() if ".so" in p.name})
    libdir = work / "ssh-libs"
    shutil.rmtree(libdir, ignore_errors=True)
    libdir.mkdir(parents=True)
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(libdir),
                                                                         os.environ.get("LD_LIBRARY_PATH")])))
    used: list[str] = []
    for _ in range(12):
        missing = set()
        for b in [*bins.values(), *(libdir / n for n in used)]:
            p = subprocess.run(["ldd", str(b)], capture_output=True, text=True, env=env, timeout=30)
            missing |= set(re.findall(r"^\s*(\S+) => not found", p.stdout, re.M))
        new = sorted(missing - set(used))
        if not new:
            break
        for n in new:
            if n not in carried:
                raise RuntimeError(f"{n} is needed by the carried openssh, absent here and not carried")
            shutil.copyfile(carried[n].resolve(), libdir / n)
            used.append(n)
    return {"bins": {k: str(v) for k, v in bins.items()}, "env": env, "carried_libs_used": used}


def describe_python(py: str) -> dict:
    code = ("import json, sys, sysconfig; print(json.dumps({'base': getattr(sys, '_base_executable', sys.executable), "
            "'version': sys.version.split()[0], 'xy': sysconfig.get_python_version(), "
            "'sites': [p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))]}))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return json.loads(sh([py, "-c", code], env=env, quiet=True).stdout)


STANDIN_HOOK = '''\
"""Test-only (bench/deploy_gpu.py): this host interpreter "has" sgl_kernel, flashinfer and cutlass the way the e2e
script's servers do (tests/gpu_standins), also in processes that ignore PYTHONPATH (python -I: SGLang's resolver on
the host). The stand-ins load only when one of those is imported."""
import importlib.abc
import os
import sys

STANDINS = %(standins)r
FLASHINFER_DIR = %(fi)r


class _LazyStandins(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in ("sgl_kernel", "flashinfer", "cutlass"):
            return None
        if STANDINS not in sys.path:
            sys.path.append(STANDINS)
        os.environ.setdefault("DDTREE_STANDIN_FLASHINFER_DIR", FLASHINFER_DIR)
        import standin_extensions

        return standin_extensions._Finder().find_spec(fullname, path, target)


sys.meta_path.append(_LazyStandins())
'''


CPU_TORCHVISION_HOOK = '''\
"""Test-only (bench/deploy_gpu.py --cpu-rehearsal): PyPI's torchvision is a CUDA build that cannot register its ops
beside the managed env's CPU torch, and `import sglang` imports it (through transformers); declaring the two op
schemas first lets it load, as ddtctl's resolver does for itself. Runs only when torchvision is imported."""
import importlib.abc
import sys


class _DeclareTorchvisionOps(importlib.abc.MetaPathFinder):
    done = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision" or self.done:
            return None
        self.done = True
        import torch

        for qualname, schema in (("torchvision::nms", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"),
                                 ("torchvision::qnms", "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")):
            try:
                torch.library.define(qualname, schema)
            except Exception:
                pass
        return None


sys.meta_path.insert(0, _DeclareTorchvisionOps())
'''


def make_host_python(source_python: str, pristine: Path, root: Path, hook: str | None) -> dict:
    """A venv-like interpreter for the host: bin/python -> the source interpreter's base, a site-packages whose .pth
    puts (1) host-site: hard links of the pristine sglang, where the deploy installs the payload, (2) the pristine
    site, (3) the source interpreter's own sites on sys.path -- also for `python -I` (the remote resolver)."""
    info = describe_python(source_python)
    shutil.rmtree(root, ignore_errors=True)
    host_site = root / "host-site"
    host_site.mkdir(parents=True)
    for p in [pristine / "sglang", *pristine.glob("sglang-*.dist-info")]:
        if sh(["cp", "-al", p, host_site / p.name], quiet=True, check=False).returncode != 0:
            shutil.rmtree(host_site / p.name, ignore_errors=True)  # another file system: copy
            sh(["cp", "-a", p, host_site / p.name], quiet=True, timeout=300)
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    base = os.path.realpath(info["base"])
    for name in ("python", "python3"):
        os.symlink(base, venv / "bin" / name)
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n"
                                     f"version = {info['version']}\n")
    sp = venv / "lib" / f"python{info['xy']}" / "site-packages"
    sp.mkdir(parents=True)
    sites = [str(host_site)] + ([str(pristine)] if str(pristine) not in info["sites"] else []) + info["sites"]
    lines = ["import site; " + "; ".join(f"site.addsitedir({s!r})" for s in sites)]
    if hook:
        (sp / "ddtctl_gpu_standin_hook.py").write_text(hook)
        lines.append("import ddtctl_gpu_standin_hook")
    (sp / "00-ddtctl-host.pth").write_text("\n".join(lines) + "\n")
    py = venv / "bin" / "python"
    check = sh([py, "-I", "-c", "import importlib.metadata as m, importlib.util as u; print(m.version('sglang'), "
                                "list(u.find_spec('sglang').submodule_search_locations)[0])"],
               quiet=True, timeout=120).stdout.split()  # (as the agent's facts look: without importing sglang)
    if check[0] != SGLANG or not check[1].startswith(str(host_site)):
        raise RuntimeError(f"host python sees sglang {check}, expected {SGLANG} in {host_site}")
    return {"python": str(py), "host_site": str(host_site), "base": base, "sites": sites, "site_packages": str(sp)}


def setup(w: World, until: float) -> str:
    w.work.mkdir(parents=True, exist_ok=True)
    kill_deployed_server(w)  # a machine kept warm may still run the last call's
    for sub in ("host", "host-work", "sshd", "xdg", "profiles", "payload-build", "out-logs"):
        shutil.rmtree(w.work / sub, ignore_errors=True)
    w.e2e = load_e2e(w.work)
    notes = []
    if w.gpu:
        carry = Path(w.args.carry)
        wheels = w.work / "wheels"
        t = time.monotonic()
        if not (wheels / "whl").is_dir():
            tmp = w.work / "wheels.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            with tarfile.open(carry / "wheels.tar.xz", "r:xz") as tf:
                tf.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            tmp.rename(wheels)
        notes.append(f"wheels unpacked {time.monotonic() - t:.0f}s")
        t = time.monotonic()
        site, env = w.e2e.setup(SimpleNamespace(wheels=str(wheels / "whl"),
                                                flashinfer_include=str(w.args.flashinfer_include)))
        notes.append(f"sglang site {time.monotonic() - t:.0f}s")
        ctl = w.work / "ctl-site"
        if not (ctl / "paramiko").is_dir():
            whl = sorted(str(p) for p in (wheels / "ctl").glob("*.whl"))
            whl += sorted(str(p) for p in (wheels / "whl").glob("*.whl") if p.name.startswith(CTL_FROM_SGLANG_SET))
            sh([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                "--no-cache-dir", "--target", ctl, *whl], timeout=left(until))
        w.ctl_env["PYTHONPATH"] = os.pathsep.join([str(ctl), str(REPO)])
        w.pristine = site
        w.server_env = env  # the e2e script's environment for servers started outside ddtctl (the plain one)
        w.server_env["DDTREE_TEST_WEIGHTS"] = "informative"
        w.server_env["DDTREE_TEST_DRAFT_DTYPE_GUARD"] = "1"
        w.flashinfer_dir = str(w.work / "flashinfer_pkg" / "flashinfer")
        hook = STANDIN_HOOK % {"standins": str(REPO / "tests" / "gpu_standins"), "fi": w.flashinfer_dir}
        source_python = sys.executable
        w.nvidia_smi = w.args.nvidia_smi or shutil.which("nvidia-smi") or "nvidia-smi"
    else:
        from ddtctl import envs

        env = envs.managed_env(SGLANG)
        if not env.exists or getattr(env, "status", "ready") != "ready":
            raise RuntimeError("the managed SGLang env is not built (`make sglang-env`): the rehearsal uses it as the "
                               "host's SGLang")
        source_python = str(env.python)
        w.pristine = Path(describe_python(source_python)["sites"][0])
        hook = CPU_TORCHVISION_HOOK
        smi = w.work / "host" / "nvidia-smi"
        smi.parent.mkdir(parents=True, exist_ok=True)
        smi.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN_SMI} --gpus {w.flagship or 1} --name 'NVIDIA H200' "
                       f"\"$@\"\n")
        smi.chmod(0o755)
        w.nvidia_smi = str(smi)
    if w.args.tune:  # the tune's tokenizer and benchmark read local files only: never wait on the Hub (no network)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # ddtctl itself must import in the controller's environment
    p = sh([w.ctl_python, "-c", "import paramiko, cryptography, ddtctl.cli, ddtctl.deploy; print(paramiko.__version__, "
                               "cryptography.__version__)"], env=w.ctl_env, quiet=True)
    notes.append("paramiko/cryptography " + p.stdout.strip().replace(" ", "/"))
    # openssh: carried Debian binaries (GPU always; CPU when fetched)
    debs = Path(w.args.carry) / "debs"
    if w.gpu or (debs.is_dir() and any(debs.glob("openssh-server_*.deb"))):
        w.openssh = unpack_openssh(debs, w.work / "openssh", w.work)
        notes.append("carried openssh" + (f" + libs {','.join(w.openssh['carried_libs_used'])}"
                                          if w.openssh["carried_libs_used"] else ", no carried lib needed"))
    else:
        w.openssh = None
        notes.append("system openssh (no .carry/deploy/debs)")
    h = make_host_python(source_python, w.pristine, w.work / "host" / "py", hook)
    w.host_python, w.host_site, w.host_site_packages = h["python"], h["host_site"], h["site_packages"]
    w.meta["host_python"] = h
    if w.flagship:  # issue #18: the Qwen3.6-27B-shaped GDN hybrid, bf16, dummy weights, at tp N
        w.e2e.TARGET[0], w.e2e.TP[0], w.e2e.DTYPE[0] = "hybrid", w.flagship, "bfloat16"
        w.server_env.pop("DDTREE_TEST_WEIGHTS", None) if w.gpu else None
        w.st = load_bench_module("spec_throughput_gpu")
        w.st.WORK = w.work
        w.target, w.draft = w.st.make_models("qwen36-27b")
        notes.append(f"flagship: Qwen3.6-27B-shaped hybrid at tp {w.flagship}")
    else:
        w.e2e.DTYPE[0] = "float32"
        w.target, w.draft = w.e2e.make_models("informative")
    w.reqs = w.e2e.prompts()
    return "; ".join(notes)


# ------------------------------------------------------------------------------------------------------- payload
def payload(w: World, until: float) -> str:
    c = ddtctl(w, "overlay build", ["overlay", "build", "--sglang-root", w.pristine, "--python", w.host_python, "--out",
                                    w.work / "payload-build", "--format", "json"], until)
    if c.rc != 0:
        raise RuntimeError(f"overlay build exited {c.rc}")
    res = c.json()
    w.payload_dir = res["payload_dir"]
    w.meta["payload"] = {k: res.get(k) for k in ("payload_id", "sglang", "payload_dir")}
    return f"payload {res.get('payload_id')} ({len(res.get('files') or [])} files) for sglang {res.get('sglang')}"


# ------------------------------------------------------------------------------------------------------- plain
def plain(w: World, until: float) -> str:
    e2e = w.e2e
    s = e2e.Server("plain-ref", "plain", False, port=PLAIN_PORT)
    if w.flagship:  # 27B-shaped weights take ~0.2 of each GPU at tp 2: the e2e default 0.15 leaves no KV cache
        s.extra_args = ["--mem-fraction-static", str(FLAGSHIP_MEM["plain"])]
    w.plain = s
    if w.gpu:
        e2e.start(s, w.target, w.draft, w.server_env, w.oracle)
    else:
        e2e.LOGS.mkdir(parents=True, exist_ok=True)
        s.argv = [sys.executable, str(STANDIN_SERVER), "--model-path", str(w.target), "--host", "127.0.0.1",
                  "--port", str(PLAIN_PORT)]
        s.proc = subprocess.Popen(s.argv, stdout=open(s.log_path, "w"), stderr=subprocess.STDOUT,
                                  start_new_session=True)
        s._t_start = time.monotonic()
    try:
        if not e2e.wait_healthy(s, until):
            raise RuntimeError(f"plain server {s.status}: {s.error}")
        e2e.generate_all(s, w.reqs)
        seqs = {",".join(map(str, ids)): ids + out for (ids, _), out in zip(w.reqs, s.outputs)}
        w.oracle.write_text(json.dumps({"sequences": seqs}))
    finally:
        e2e.stop(s)
    return f"healthy after {s.startup_s:.0f}s; {len(s.outputs)} greedy outputs (oracle written)"


# ------------------------------------------------------------------------------------------------ sshd + inventory
def setenv_line(env: dict) -> str:
    """One SetEnv directive (sshd keeps only its first SetEnv line) with the machine's CUDA-related environment."""
    keep = {k: v for k, v in env.items() if (k in PASS_ENV or k.startswith(PASS_PREFIX)) and v
            and not SECRET.search(k) and not any(c in v for c in '"\\\n')}
    return ("SetEnv " + " ".join(f'"{k}={v}"' for k, v in sorted(keep.items())) + "\n") if keep else ""


def ensure_root_can_log_in(notes: list[str]) -> None:
    """sshd as root needs its privilege-separation user, and (UsePAM no) refuses a locked account ('!' password).
    Only on a throwaway machine (the GPU call) and only when missing."""
    import pwd

    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam("sshd")
    except KeyError:
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/run/sshd", "--shell",
                            "/usr/sbin/nologin", "sshd"], capture_output=True, text=True)
        if r.returncode != 0:
            with open("/etc/passwd", "a") as f:
                f.write("sshd:x:%d:65534::/run/sshd:/usr/sbin/nologin\n" % (60000 + os.getpid() % 5000))
        notes.append("created the privilege-separation user sshd")
    try:
        shadow = Path("/etc/shadow").read_text().splitlines()
    except OSError:
        return
    entry = next((ln for ln in shadow if ln.startswith("root:")), "")
    if entry.split(":")[1:2] and entry.split(":")[1].startswith("!"):
        subprocess.run(["usermod", "-p", "*", "root"], check=False)
        notes.append("root's password was locked ('!'): set to '*' (no password, key login allowed)")


def start_sshd_phase(w: World, until: float) -> str:
    sys.path.insert(0, str(REMOTE_TESTS))
    from sshd import start_sshd  # tests/remote's helper: keys, config, free port, waits for the banner

    notes: list[str] = []
    if w.gpu:
        ensure_root_can_log_in(notes)
    extra = setenv_line(os.environ)
    kw: dict = {"extra_config": extra}
    if w.openssh:
        b = w.openssh["bins"]
        kw.update(sshd=b["sshd"], sftp=b["sftp-server"], keygen=b["ssh-keygen"], env=w.openssh["env"])
    w.sshd = start_sshd(w.work / "sshd", **kw)
    kh = w.work / "sshd" / "known_hosts"
    w.sshd.write_known_hosts(kh)
    w.known_hosts = kh
    write_profiles(w)
    write_inventory(w)
    # one plain `ssh` login: the key works, and sessions see the machine's environment
    ssh = (w.openssh or {}).get("bins", {}).get("ssh") or shutil.which("ssh")
    if ssh:
        p = sh([ssh, "-F", "/dev/null", "-i", w.sshd.client_key, "-p", w.sshd.port, "-o", f"UserKnownHostsFile={kh}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{w.sshd.user}@127.0.0.1",
                "printenv PATH; echo login-ok"], env=(w.openssh or {}).get("env"), timeout=left(until), check=False)
        lines = p.stdout.strip().splitlines()
        if p.returncode != 0 or lines[-1:] != ["login-ok"]:
            raise RuntimeError(f"ssh login failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")
        lost = [d for d in os.environ.get("PATH", "").split(":") if d and d not in lines[0].split(":")]
        if extra and lost:  # (the login shell's rc files may add more in front)
            raise RuntimeError(f"the session's PATH {lines[0]!r} lacks {lost} (SetEnv not applied)")
        notes.append("ssh login ok, the session's PATH holds this machine's")
    return f"sshd {'carried' if w.openssh else 'system'} on 127.0.0.1:{w.sshd.port}; " + "; ".join(notes)


# Memory fractions of the flagship's servers, one at a time, at tp 2: weights take ~0.2 of each GPU, and the DDTREE
# server's intermediate SSM states grow with the verify width (65 at budget 64): 0.5 left nothing for them on
# 2026-12-01 (SGLang's "Raise --mem-fraction-static above 0.195" is its message for any rest <= 0).
FLAGSHIP_MEM = {"plain": 0.4, "ddtree": 0.75, "dflash": 0.75}


def flagship_server(w: World) -> dict:
    """The seed's DDTREE flags on the 27B-shaped hybrid at tp N (issue #18), sized to share the GPUs with one
    reference server at a time."""
    return {
        "host": "127.0.0.1", "port": DEPLOY_PORT, "tp-size": w.flagship, "load-format": "dummy",
        "dtype": "bfloat16", "attention-backend": "triton", "sampling-backend": "pytorch", "grammar-backend": "none",
        "disable-radix-cache": True, "disable-custom-all-reduce": True, "mem-fraction-static": FLAGSHIP_MEM["ddtree"],
        "max-running-requests": max(w.args.batches), "cuda-graph-max-bs-decode": max(w.args.batches),
        "disable-prefill-cuda-graph": True, "random-seed": 0, "log-level": "info",
        "speculative-algorithm": "DDTREE", "speculative-draft-model-path": str(w.draft),
        "speculative-dflash-block-size": 16, "speculative-ddtree-budget": w.budget,
        "speculative-ddtree-topk-cap": w.budget, "speculative-ddtree-shadow-linear": True,
        "mamba-radix-cache-strategy": "extra_buffer", "mamba-full-memory-ratio": 0.5,
        "linear-attn-backend": "triton", "linear-attn-prefill-backend": "triton", "mamba-ssm-dtype": "float32",
        "skip-tokenizer-init": True}


def profile_doc(w: World, name: str, env: dict) -> dict:
    if w.flagship:
        return {"name": name, "sglang": SGLANG, "host": HOST, "hardware": {"gpu": "H200", "count": w.flagship},
                "model": {"path": str(w.target), "architecture": "Qwen3_5ForCausalLM"},
                "server": flagship_server(w), "env": env, "launch": {"health_timeout_s": w.args.health_timeout}}
    return {
        "name": name,
        "sglang": SGLANG,
        "host": HOST,
        "hardware": {"gpu": "H200", "count": 1},
        "model": {"path": str(w.target), "architecture": "Qwen3ForCausalLM"},
        # the e2e script's ddtree-b15-g1 server (notes/sglang-e2e-h200.md): float32, CUDA graphs on. Not its
        # --max-total-tokens (one server here, the fraction bounds the pool), and --skip-tokenizer-init last: deploy
        # masks the value after any flag naming "token" as a secret (the flag after a boolean one, a bare number
        # that may also appear elsewhere in its JSON report)
        "server": {
            "host": "127.0.0.1", "port": DEPLOY_PORT, "load-format": "dummy", "attention-backend": "triton",
            "sampling-backend": "pytorch", "grammar-backend": "none", "disable-radix-cache": True,
            "mem-fraction-static": 0.15, "random-seed": 0, "log-level": "info", "cuda-graph-max-bs-decode": 4,
            "dtype": "float32", "enable-fp32-lm-head": True, "speculative-algorithm": "DDTREE",
            "speculative-draft-model-path": str(w.draft), "speculative-ddtree-budget": w.budget,
            "max-running-requests": 8,
            # with --tune, every server of the call starts without SGLang's prefill CUDA graphs: capturing them
            # took 26.5 s of the 78.7 s health wait on the H200, paid again by each tune point and the restore
            **({"disable-prefill-cuda-graph": True} if w.args.tune else {}),
            "skip-tokenizer-init": True},
        "env": env,
        "launch": {"health_timeout_s": w.args.health_timeout},
    }


def write_profiles(w: World) -> None:
    import yaml

    d = w.work / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    w.profile = d / "tiny-qwen3-ddtree.yaml"
    w.profile.write_text(yaml.safe_dump(profile_doc(w, "tiny-qwen3-ddtree", {"DDTREE_LOG_INTERVAL": "20"}),
                                        sort_keys=False))
    # the broken variant: a server that refuses to start. GPU: the payload's own off switch; CPU: the stand-in's knob
    broken_env = {"DDTREE_LOG_INTERVAL": "20", **({"DDTREE_WORKER": "0"} if w.gpu else {"STANDIN_EXIT": "3"})}
    w.broken_profile = d / "tiny-qwen3-ddtree-broken.yaml"
    w.broken_profile.write_text(yaml.safe_dump(profile_doc(w, "tiny-qwen3-ddtree-broken", broken_env),
                                               sort_keys=False))


def write_inventory(w: World) -> None:
    import yaml

    if w.gpu:
        env = {"PYTHONPATH": str(REPO / "tests" / "gpu_standins"), "DDTREE_GPU_STANDINS": "1",
               "DDTREE_STANDIN_FLASHINFER_DIR": w.flashinfer_dir, "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1",
               "DDTREE_TEST_WEIGHTS": "informative", "DDTREE_TEST_DRAFT_DTYPE_GUARD": "1", "NCCL_NVLS_ENABLE": "0"}
        if w.flagship:
            env.pop("DDTREE_TEST_WEIGHTS")  # SGLang's dummy weights at 27B
        if w.args.drafter in ("oracle", "calibrated"):
            env.update(oracle_env(w))
        extra: dict = {}
    else:
        env = {}
        extra = {"launcher": [sys.executable, str(STANDIN_SERVER)],  # no GPU here: the stand-in server
                 "warmup": ["python", str(STANDIN_SELFTEST)]}  # (`python` = the host's python below)
    env.update(dict(getattr(w.args, "server_env", None) or []))
    host = {
        "address": "127.0.0.1", "port": w.sshd.port, "user": w.sshd.user, "key": str(w.sshd.client_key),
        "known_hosts": str(w.known_hosts), "python": w.host_python, "work_dir": str(w.work / "host-work"),
        "nvidia_smi": w.nvidia_smi, "profile": str(w.profile), "connect_timeout_s": 10, "command_timeout_s": 300,
        "env": env, **extra,
    }
    w.inventory = w.work / "hosts.yaml"
    w.inventory.write_text(yaml.safe_dump({"ssh_config": str(w.work / "no-ssh-config"), "hosts": {HOST: host}},
                                          sort_keys=False))
    TRANSCRIPT.append("hosts.yaml:\n" + "\n".join("    " + ln for ln in w.inventory.read_text().splitlines()))
    TRANSCRIPT.append(f"{w.profile.name}:\n" + "\n".join("    " + ln for ln in w.profile.read_text().splitlines()))


# ------------------------------------------------------------------------------------------------------- facts
def facts(w: World, until: float) -> str:
    c = ddtctl(w, "facts", ["facts", HOST, "-i", w.inventory], until)
    if c.rc != 0:
        raise RuntimeError(f"ddtctl facts exited {c.rc}")
    f = ddtctl(w, "facts --format json", ["facts", HOST, "-i", w.inventory, "--format", "json"], until).json()
    w.facts = f
    problems = []
    if f.get("sglang_version") != SGLANG:
        problems.append(f"sglang {f.get('sglang_version')}")
    if f.get("sglang_root") != w.host_site:
        problems.append(f"sglang root {f.get('sglang_root')} (expected {w.host_site})")
    gpus = f.get("gpus") or []
    if not gpus or (w.gpu and "H200" not in gpus[0]["name"]):
        problems.append(f"GPUs {gpus or f.get('gpu_error')}")
    for path in (str(w.target), str(w.draft)):
        if not (f.get("models") or {}).get(path, {}).get("architectures"):
            problems.append(f"model {path}: {(f.get('models') or {}).get(path)}")
    if problems:
        raise RuntimeError("facts: " + "; ".join(problems))
    g = gpus[0]
    return (f"{len(gpus)}x {g['name']} (sm{g['sm']}), CUDA {f.get('cuda')}, driver {f.get('driver')}, python "
            f"{f.get('python_version')}, sglang {f.get('sglang_version')}")


# ------------------------------------------------------------------------------------------------------- deploys
def _deploy(w: World, label: str, profile: Path, until: float) -> tuple[Cmd, dict]:
    c = ddtctl(w, label, ["deploy", HOST, "--profile", profile, "--payload", w.payload_dir, "-i", w.inventory,
                          "--yes", "--format", "json"], until)
    res = c.json()
    w.deploys[label] = res
    line = (f"    result: {res.get('status')}, release {res.get('release')}, {res.get('elapsed_s')}s"
            + (f"; {_error_text(res)}" if res.get("error") else "")
            + (f"; rolled back to {res.get('rolled_back_to')}" if res.get("rolled_back_to") else ""))
    TRANSCRIPT.append(line)
    print(line, flush=True)
    return c, res


def _status(w: World, until: float) -> dict:
    c = ddtctl(w, "status --format json", ["status", HOST, "-i", w.inventory, "--format", "json"], until)
    st = c.json()
    st["_rc"] = c.rc
    return st


def deploy_first(w: World, until: float) -> str:
    c, r = _deploy(w, "deploy", w.profile, until)
    if c.rc != 0 or r["status"] != "deployed":
        raise RuntimeError(f"exit {c.rc}, status {r['status']}: {_error_text(r)}")
    w.release1 = r["release"][HOST]
    problems = []
    shipped = (r.get("shipped") or {}).get(HOST) or {}
    # every file sent, except content the host already had (the same sha256 twice, e.g. two empty __init__.py)
    if not shipped.get("files_sent") or shipped["files_sent"] + shipped.get("skipped", 0) != shipped.get("files_total"):
        problems.append(f"shipped {shipped}")
    dr = r.get("dry_run") or {}
    if not dr.get("ok") or (dr.get("resolved") or {}).get("speculative_algorithm") != "DDTREE":
        problems.append(f"remote dry-run {dr.get('ok')} {_error_text(dr)}")
    warm = [re.search(r"done in [\d.]+s", ln)[0] for _, ln in c.events
            if EVENT.match(ln) and " warmup " in ln and re.search(r"done in [\d.]+s", ln)]
    if not warm:
        problems.append("no kernel warm-up event")
    health = r.get("health") or {}
    info = health.get("server_info") or {}
    if not health.get("ok") or str(info.get("speculative_algorithm")).upper() != "DDTREE" \
            or int(info.get("speculative_ddtree_budget") or 0) != w.budget:
        problems.append(f"health {health.get('message')}: served {info.get('speculative_algorithm')} "
                        f"budget {info.get('speculative_ddtree_budget')}")
    warnings = [f"{ch['id']}" for ch in r.get("checks") or [] if not ch["ok"]]  # checks are findings: id
    if problems:
        raise RuntimeError("; ".join(problems))
    return (f"release {w.release1}: {shipped['files_sent']}/{shipped['files_total']} files shipped, SGLang's resolver "
            f"accepted "
            f"({len(dr.get('overrides') or [])} overrides), kernel warm-up {warm[0]}, "
            f"{health.get('message')}" + (f"; preflight warnings: {', '.join(warnings)}" if warnings else ""))


def _compare(w: World, label: str, until: float) -> str:
    e2e = w.e2e
    if not w.runner.join("plain", until):
        raise RuntimeError("no plain reference outputs")
    s = e2e.Server(label, "DDTREE", True, w.budget, port=DEPLOY_PORT)
    e2e.generate_all(s, w.reqs)
    ok, verdict = e2e.verdict(s.outputs, w.plain.outputs, w.plain.top2_gaps)
    acc = [a for a in (s.accept_lengths or []) if a is not None]
    m = e2e.ddtree_metrics(s.server_info) or {}
    w.compare[label] = {"outputs": s.outputs, "verdict": verdict, "ok": ok, "accept_lengths": s.accept_lengths,
                        "ddtree_metrics": m, "served": e2e.served(s.server_info)}
    if not ok:
        raise RuntimeError(f"deployed server's outputs vs plain greedy: {verdict}")
    return (f"{len(s.outputs)} requests == plain greedy ({verdict})"
            + (f"; mean accepted length {sum(acc) / len(acc):.2f}" if acc else "")
            + (f"; DDTREE branch nodes {m.get('accepted_branch_nodes')}" if m.get("accepted_branch_nodes")
               is not None else ""))


def oracle_env(w: World) -> dict:
    env = {"DDTREE_TEST_DRAFT_HOOK": "oracle_drafter:override", "DDTREE_TEST_ORACLE": str(w.oracle),
           "DDTREE_TEST_ORACLE_DEVICE": "1"}
    if w.args.drafter == "calibrated":
        env.update(DDTREE_TEST_ORACLE_CALIBRATED="1", DDTREE_TEST_ORACLE_RANK_P=w.st.CALIBRATED_RANK_P)
    return env


def throughput(w: World, until: float) -> str:
    """Issue #18: tokens/s of the deployed DDTREE server (random drafter or the oracle, batches --batches). Its DFLASH
    counterpart runs after `ddtctl stop` (phase dflash): at tp 2 the two 27B-shaped servers do not fit side by side
    with the tree's intermediate SSM states (65 verify tokens x 8 requests x ~75 MB per GPU)."""
    st = w.st
    w.ddtree_bench = st.Bench("ddtree-deployed", "DDTREE", w.budget, w.args.drafter, DEPLOY_PORT)
    w.tput_reqs = st.prompts(max(w.args.batches), 150000)
    st.measure(w.ddtree_bench, w.tput_reqs, w.args.batches, w.args.new_tokens)
    b = min(w.args.batches)
    m = w.ddtree_bench.results.get(b) or {}
    w.throughput = [{"algo": "DDTREE", "batch": bs, **r} for bs, r in sorted(w.ddtree_bench.results.items())]
    return (f"batch {b}: DDTREE {m.get('tokens_per_s', 0):.1f} tok/s, {m.get('ms_per_step') or 0:.2f} ms/step, "
            f"accepted length {m.get('mean_accept_len') or 0:.2f}")


def dflash(w: World, until: float) -> str:
    """A DFLASH server of the same model and tp, started outside ddtctl once the deployed one is stopped, and the
    ratio table."""
    st = w.st
    kill_deployed_server(w)
    # checked free now, not at start-up: a rehearsal's ports are ephemeral ones, which the run's own outgoing
    # connections can take meanwhile (a fresh-clone CI run lost the phase so: "Address already in use")
    dflash = st.Bench("dflash", "DFLASH", None, w.args.drafter, w.e2e.free_port(DEPLOY_PORT + 1))
    if w.gpu:
        for gpu in range(w.flagship):  # the stopped server's processes gone from every card it used
            st.wait_gpu_idle(str(gpu), timeout=max(1.0, min(60.0, until - time.monotonic() - 120)))
        dflash.argv = st.server_argv(dflash, w.target, w.draft, True, max(w.args.batches), False)
        dflash.argv += ["--tp-size", str(w.flagship), "--disable-custom-all-reduce", "--disable-prefill-cuda-graph",
                        "--mem-fraction-static", str(FLAGSHIP_MEM["dflash"])]  # (argparse: the last one wins)
        env = dict(w.server_env)
        if w.args.drafter in ("oracle", "calibrated"):
            env.update(oracle_env(w))
    else:
        dflash.argv = [sys.executable, str(STANDIN_SERVER), "--model-path", str(w.target), "--host", "127.0.0.1",
                       "--port", str(dflash.port)]
        env = dict(os.environ)
    dflash.log_path.parent.mkdir(parents=True, exist_ok=True)
    dflash.proc = subprocess.Popen(dflash.argv, env=env, stdout=open(dflash.log_path, "w"), stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=w.work)
    dflash._t_start = time.monotonic()  # type: ignore[attr-defined]
    try:
        if not w.e2e.wait_healthy(dflash, until):
            raise RuntimeError(f"DFLASH server {dflash.status}: {dflash.error}")
        st.measure(dflash, w.tput_reqs, w.args.batches, w.args.new_tokens)
    finally:
        w.e2e.stop(dflash)
    w.throughput = st.ratios([dflash, w.ddtree_bench])
    w.throughput_table = st.table(w.throughput, {"date": w.meta["date"], "nvidia_smi": w.meta.get("device"),
                                                 "target": f"qwen36-27b tp {w.flagship}"})
    TRANSCRIPT.append(w.throughput_table)
    row = next((r for r in w.throughput if r["algo"] == "DDTREE" and r["batch"] == min(w.args.batches)), {})
    return (f"DFLASH healthy after {dflash.startup_s:.0f}s; batch {min(w.args.batches)}: DDTREE "
            f"{row.get('tokens_per_s', 0):.1f} tok/s, {row.get('speed_vs_dflash') or 0:.3f} x DFLASH")


def redeploy(w: World, until: float) -> str:
    before = _status(w, until)
    c, r = _deploy(w, "redeploy", w.profile, until)
    after = _status(w, until)
    hp = ((r.get("plan") or {}).get("hosts") or [{}])[0]
    problems = []
    if c.rc != 0 or r["status"] != "unchanged":
        problems.append(f"exit {c.rc}, status {r['status']} ({_error_text(r)})")
    if hp.get("files_to_ship") or r.get("shipped"):
        problems.append(f"files to ship {hp.get('files_to_ship')}, shipped {r.get('shipped')}")
    pid0, pid1 = (before.get("server") or {}).get("pid"), (after.get("server") or {}).get("pid")
    if not pid0 or pid0 != pid1 or after.get("current") != w.release1 or after.get("_rc") != 0:
        problems.append(f"server pid {pid0} -> {pid1}, current {after.get('current')}, status exit {after.get('_rc')}")
    if problems:
        raise RuntimeError("; ".join(problems))
    return f"unchanged: 0/{hp.get('files_total')} files shipped, server pid {pid1} left running, in {c.wall_s:.1f}s"


def broken(w: World, until: float) -> str:
    c, r = _deploy(w, "broken", w.broken_profile, until)
    st = _status(w, until)
    problems = []
    if c.rc != 5 or r["status"] != "rolled_back":
        problems.append(f"exit {c.rc}, status {r['status']} (expected 5, rolled_back): {_error_text(r)}")
    if (r.get("rolled_back_to") or {}).get(HOST) != w.release1:
        problems.append(f"rolled back to {r.get('rolled_back_to')}, expected {w.release1}")
    srv = st.get("server") or {}
    if st.get("current") != w.release1 or srv.get("release") != w.release1 or not srv.get("running") \
            or st.get("health") != 200:
        problems.append(f"after rollback: current {st.get('current')}, server {srv.get('release')} running "
                        f"{srv.get('running')}, /health {st.get('health')}")
    if problems:
        raise RuntimeError("; ".join(problems))
    return f"{_error_text(r)}; rolled back to {w.release1}: current, running, /health 200"


def ops(w: World, until: float) -> str:
    notes = []
    c = ddtctl(w, "status", ["status", HOST, "-i", w.inventory], until)
    if c.rc != 0:
        raise RuntimeError(f"status exited {c.rc} (expected 0: healthy)")
    c = ddtctl(w, "logs", ["logs", HOST, "-i", w.inventory, "-n", "15"], until)
    if c.rc != 0 or not c.stdout.strip():
        raise RuntimeError(f"logs exited {c.rc} with {len(c.stdout)} bytes")
    notes.append(f"logs: {len(c.stdout.splitlines())} lines")
    ddtctl(w, "releases", ["releases", HOST, "-i", w.inventory], until)
    rel = ddtctl(w, "releases --format json", ["releases", HOST, "-i", w.inventory, "--format", "json"], until).json()
    statuses = {x["id"]: x["status"] for x in rel["releases"]}
    broken_ran = w.runner.ok("broken")  # its failed release is listed (not when --skip broken)
    # the tune's points are releases too; one that failed to start is listed as failed
    tune_failed = {p.get("release") for p in [(w.tune or {}).get("baseline") or {}, *(w.tune or {}).get("points", [])]
                   if p.get("status") == "failed"}
    failed = {k for k, v in statuses.items() if v == "failed"}
    if (rel["current"] != w.release1 or statuses.get(w.release1) != "ok"
            or bool(failed - tune_failed) != broken_ran):
        raise RuntimeError(f"releases: current {rel['current']}, {statuses}")
    notes.append("releases: " + ", ".join(f"{k} {v}" for k, v in statuses.items()))
    c = ddtctl(w, "stop", ["stop", HOST, "-i", w.inventory], until)
    if c.rc != 0 or "stopped release" not in c.stdout:
        raise RuntimeError(f"stop exited {c.rc}: {c.stdout.strip()}")
    c = ddtctl(w, "status (stopped)", ["status", HOST, "-i", w.inventory], until)
    if c.rc != 5 or "not running" not in c.stdout:
        raise RuntimeError(f"status after stop exited {c.rc} (expected 5, not running)")
    notes.append("stopped; status then exits 5 (not running)")
    return "; ".join(notes)


# ------------------------------------------------------------------------------------------------------- tune
# Runs on the host's python: a word-level tokenizer for the tiny model (token id N <-> the word tN, the model's whole
# vocabulary), so that the tune's servers can start with a tokenizer and SGLang's benchmark can load one; then
# loads it back as the benchmark does (AutoTokenizer) and checks the round trip.
TOKENIZER_SCRIPT = """\
import json, os, sys
from tokenizers import Tokenizer, models, pre_tokenizers
d, vocab, special = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
tok = Tokenizer(models.WordLevel({"t%d" % i: i for i in range(vocab)}, unk_token="t%d" % special["unk_token"]))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save(os.path.join(d, "tokenizer.json"))
names = {k: "t%d" % v for k, v in special.items()}
cfg = dict(names, tokenizer_class="PreTrainedTokenizerFast", model_max_length=4096, clean_up_tokenization_spaces=False)
with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
    json.dump(cfg, f)
with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
    json.dump(names, f)
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(d, trust_remote_code=True)
ids = [5, vocab - 1, special["eos_token"]]
back = t.encode(" ".join("t%d" % i for i in ids))
assert t.vocab_size == vocab and back == ids, (t.vocab_size, back)
print(json.dumps({"class": type(t).__name__, "vocab_size": t.vocab_size, "round_trip": back}))
"""

# SGLang's benchmark imports Hugging Face `datasets` at import time (for its mmmu dataset, never used here); a host
# without it gets this stand-in (no dist-info, so transformers still sees `datasets` as absent).
DATASETS_STANDIN = (
    '"""Test-only (bench/deploy_gpu.py --tune): this host has no Hugging Face `datasets`. SGLang\'s benchmark\n'
    'imports load_dataset at import time for datasets that `ddtctl tune` does not use."""\n\n\n'
    "def load_dataset(*args, **kwargs):\n"
    '    raise RuntimeError("Hugging Face datasets is not installed on this host (bench/deploy_gpu.py\'s stand-in)")\n'
)


def _host_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def prepare_tune_host(w: World, until: float) -> list[str]:
    """The tiny target gets a tokenizer; the host's python gets the `datasets` stand-in when it lacks the package."""
    notes = []
    cfg = json.loads((w.target / "config.json").read_text())
    special = {"bos_token": cfg["bos_token_id"], "eos_token": cfg["eos_token_id"], "unk_token": 0,
               "pad_token": cfg["bos_token_id"]}
    p = sh([w.host_python, "-c", TOKENIZER_SCRIPT, w.target, cfg["vocab_size"], json.dumps(special)],
           env=_host_env(), timeout=left(until), quiet=True)
    tok = json.loads(p.stdout.strip().splitlines()[-1])
    notes.append(f"tokenizer {tok['class']} ({tok['vocab_size']} words t0..t{tok['vocab_size'] - 1})")
    probe = "import importlib.util as u; print(u.find_spec('datasets') is not None)"
    if sh([w.host_python, "-c", probe], env=_host_env(), quiet=True, timeout=left(until)).stdout.strip() != "True":
        pkg = Path(w.host_site_packages) / "datasets"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text(DATASETS_STANDIN)
        notes.append("no Hugging Face datasets on the host: stand-in module")
    return notes


def tune_files(w: World) -> tuple[Path, Path, Path | None]:
    """The tune's profile (the deployed one with a tokenizer), its search space and its prompt file (the plain
    server's prompts, as words of the tokenizer, when they are there: the oracle drafter knows their continuation,
    so the DDTREE budget matters on the GPU; else SGLang's random token ids)."""
    import yaml

    a = w.args
    env = {"DDTREE_LOG_INTERVAL": "20", **({} if w.gpu else {"STANDIN_STEP_MS": "20"})}
    doc = profile_doc(w, "tiny-qwen3-tune", env)
    if not a.tune_skip_tokenizer_init:
        doc["server"].pop("skip-tokenizer-init")
    d = w.work / "profiles"
    profile = d / "tiny-qwen3-tune.yaml"
    profile.write_text(yaml.safe_dump(doc, sort_keys=False))
    space = d / "tune-space.yaml"
    space.write_text(yaml.safe_dump({"speculative-ddtree-budget": a.tune_budgets}))
    TRANSCRIPT.append(f"{profile.name}:\n" + "\n".join("    " + ln for ln in profile.read_text().splitlines()))
    TRANSCRIPT.append(f"{space.name}: {space.read_text().strip()}")
    prompts = None
    plain_outputs = getattr(getattr(w, "plain", None), "outputs", None)
    if a.tune_prompts == "oracle" and not a.tune_skip_tokenizer_init and plain_outputs:
        keep = [ids for ids, new in w.reqs if new >= a.tune_output_len] or [ids for ids, _ in w.reqs]
        lines = [json.dumps({"prompt": " ".join(f"t{t}" for t in ids)}) for ids in keep]
        prompts = d / "tune-prompts.jsonl"
        prompts.write_text("\n".join((lines * a.tune_num_prompts)[:a.tune_num_prompts]) + "\n")
    return profile, space, prompts


def _importable(w: World, module: str) -> bool:
    return sh([w.ctl_python, "-c", f"import {module}"], env=w.ctl_env, quiet=True, check=False).returncode == 0


def tune_argv(w: World, profile: Path, space: Path, prompts: Path | None, results: Path) -> list:
    a = w.args
    argv = ["tune", HOST, "--profile", profile, "--space", space, "--concurrency",
            ",".join(map(str, a.tune_concurrency)), "--num-prompts", a.tune_num_prompts, "--input-len",
            a.tune_input_len, "--output-len", a.tune_output_len, "--results", results, "--payload", w.payload_dir,
            "--health-timeout", a.tune_health_timeout, "-i", w.inventory, "--repeats", a.tune_repeats,
            "--yes"]  # the host serves the deploy's release: tune restarts it (and asks, on a terminal)
    if prompts:
        argv += ["--prompts", prompts]
    if a.tune_skip_dry_run:
        argv.append("--skip-remote-dry-run")
    return argv


def tune(w: World, until: float) -> str:
    """`ddtctl tune` on the deployed host: the baseline (DFLASH) and --tune-budgets at --tune-concurrency, the table
    and plots as a user sees them; then the same command again, --format json, every point read back from the
    results file (nothing redeployed). The host must be back on the first release, serving it."""
    if w.runner.background.get("plain"):
        w.runner.join("plain", until)  # its outputs make the prompt file
    notes = prepare_tune_host(w, until)
    profile, space, prompts = tune_files(w)
    w.out.mkdir(parents=True, exist_ok=True)
    results = w.out / "tune.jsonl"
    results.unlink(missing_ok=True)  # a fresh sweep (a warm machine's $OUT, the rehearsal's default out dir)
    argv = tune_argv(w, profile, space, prompts, results)
    plots: list = []
    if _importable(w, "matplotlib"):
        plots += ["--plot", w.out / "tune.png"]
    if _importable(w, "plotext"):
        plots.append("--plot-terminal")
    notes.append(("prompts: the plain server's" if prompts else "prompts: SGLang's random ids") + "; plots: "
                 + (", ".join(["png"] * ("--plot" in plots) + ["terminal"] * ("--plot-terminal" in plots)) or "none")
                 + ("" if "--plot" in plots else " (no matplotlib here: bench/deploy_gpu.py --replot tune.json)"))
    c = ddtctl(w, "tune", argv + plots, until - 40)
    (w.out / "tune.txt").write_text(c.stdout)
    n_points = 1 + len(w.args.tune_budgets)
    done = len(results.read_text().splitlines()) if results.exists() else 0
    if c.rc not in (0, 1) or done != n_points:
        raise RuntimeError(f"ddtctl tune exited {c.rc}, {done}/{n_points} points in {results.name}; "
                           + "; ".join(notes))
    j = ddtctl(w, "tune --format json", argv + ["--format", "json"], until)
    (w.out / "tune.json").write_text(j.stdout)
    w.tune = json.loads(j.stdout).get("results") or {}
    return check_tune(w, c.rc, j.rc, until, notes)


def _tune_problems(w: World, rc: int | None, rc_json: int | None) -> list[str]:
    r = w.tune
    problems = []
    if rc != 0 or rc_json != 0 or not r.get("winner"):
        problems.append(f"exit {rc} then {rc_json}: no winner")
    runs = len(w.args.tune_concurrency) * w.args.tune_repeats
    for p in ([r["baseline"]] if r.get("baseline") else []) + list(r.get("points") or []):
        measured = p["status"] == "ok" and len(p["runs"]) == runs and all(x.get("ok") for x in p["runs"])
        if not measured and not (p["status"] != "ok" and (p.get("error") or p.get("rules"))):
            problems.append(f"{p['label']}: status {p['status']} without figures or a reason")
    if not all(p.get("resumed") for p in r.get("points") or []):
        problems.append("the --format json run redeployed points instead of reading them back")
    if not (r.get("restored") and r.get("restore_error") is None
            and r.get("start_release") == r.get("end_release") == w.release1):
        problems.append(f"restore: start {r.get('start_release')} end {r.get('end_release')}, restored "
                        f"{r.get('restored')}, {r.get('restore_error')}")
    return problems


def check_tune(w: World, rc: int | None, rc_json: int | None, until: float, notes: list[str]) -> str:
    """Every point measured or with its reason, a winner, the host back on the first release and serving it."""
    problems = _tune_problems(w, rc, rc_json)
    st = _status(w, until)
    srv = st.get("server") or {}
    served = int((st.get("server_info") or {}).get("speculative_ddtree_budget") or 0)
    if st.get("current") != w.release1 or srv.get("release") != w.release1 or not srv.get("running") \
            or st.get("health") != 200 or served != w.budget:
        problems.append(f"after the tune: current {st.get('current')}, server {srv.get('release')} running "
                        f"{srv.get('running')}, /health {st.get('health')}, serving budget {served}")
    if problems:
        raise RuntimeError("; ".join(problems + notes))
    r = w.tune
    c = r["concurrency"]

    def fig(p: dict) -> str:  # the median of the --tune-repeats runs, and ± half their min..max range
        s = (p.get("stats") or {}).get(str(c))
        if not s:
            return f"{p['label']} {p['status']}"
        return f"{p['label']} {s['median']:.1f}" + (f" ±{100 * s['half_range']:.1f}%" if s["n"] > 1 else "")

    ratio = f" ({r['winner_ratio']:.2f}x the baseline)" if r.get("winner_ratio") else ""
    pts = ([r["baseline"]] if r.get("baseline") else []) + list(r.get("points") or [])
    verdict = (r.get("verdict") or {}).get("message")
    return (f"tok/s at concurrency {c}: " + ", ".join(fig(p) for p in pts) + f"; winner {r['winner']['label']}{ratio}; "
            + (f"{verdict}; " if verdict else "") + f"back on {w.release1}, serving budget {served}; "
            + "; ".join(notes))


def replot(envelope: str, png: str) -> int:
    """`--replot tune.json [--plot tune.png]`: the PNG of a tune run's JSON envelope, drawn here (the GPU image may
    lack matplotlib)."""
    sys.path.insert(0, str(REPO))
    from ddtctl.tune import PointResult, TuneResult
    from ddtctl.tune.plot import plot_png

    r = json.loads(Path(envelope).read_text())
    r = r.get("results", r)
    points = [PointResult.from_json(p) for p in r["points"]]
    winner = next((p for p in points if r.get("winner") and p.key == r["winner"]["key"]), None)
    result = TuneResult(r["host"], r["profile"], r["algorithm"], r["concurrency"], r["concurrencies"],
                        PointResult.from_json(r["baseline"]) if r.get("baseline") else None, points, winner,
                        r["results_path"], r["start_release"])
    print(plot_png(result, png))
    return 0


# ------------------------------------------------------------------------------------------------------- report
def kill_deployed_server(w: World) -> None:
    """The server the agent started (its pid file), if ddtctl stop did not end it."""
    pidfile = w.work / "host-work" / "run" / "server.json"
    try:
        info = json.loads(pidfile.read_text())
        os.killpg(int(info.get("pgid") or info["pid"]), signal.SIGKILL)
        say(f"cleanup: killed the deployed server's process group {info.get('pgid')}")
    except (OSError, ValueError, KeyError):
        pass


def cleanup(w: World) -> None:
    plain_srv = getattr(w, "plain", None)
    if plain_srv is not None:
        w.e2e.stop(plain_srv)
    kill_deployed_server(w)
    if getattr(w, "sshd", None) is not None:
        w.sshd.stop()


def tables(w: World) -> str:
    lines = [f"{'phase':<10} {'limit_s':>7} {'took_s':>7} {'result':<7} detail", "-" * 100]
    for p in w.runner.phases:
        took = f"{p.elapsed_s:.1f}" if p.elapsed_s is not None else "-"
        lines.append(f"{p.name:<10} {p.limit_s:>7.0f} {took:>7} {p.status:<7} {p.detail[:300]}")
    deploys = [c for c in w.commands if c.label in ("deploy", "redeploy", "broken")]
    if deploys:
        per = {c.label: dict(stage_times(c.events, c.wall_s)) for c in deploys}
        order: list[str] = []
        for c in deploys:
            order += [s for s, _ in stage_times(c.events) if s not in order]
        order.append("(cli start + exit)")
        lines += ["", "deploy stages, seconds (ddtctl's own event clock: the time up to each event is the stage's that "
                      "reports it; rollback = restart + health of the old release)",
                  f"{'stage':<20}" + "".join(f"{c.label:>10}" for c in deploys), "-" * (20 + 10 * len(deploys))]
        for s in order:
            lines.append(f"{s:<20}" + "".join(f"{per[c.label][s]:>10.2f}" if s in per[c.label] else f"{'-':>10}"
                                               for c in deploys))
        lines.append(f"{'wall (exit code)':<20}" + "".join(f"{c.wall_s:>6.1f} ({c.rc})" for c in deploys))
    if getattr(w, "throughput_table", None):
        lines += ["", w.throughput_table]
    other = [c for c in w.commands if c.label not in ("deploy", "redeploy", "broken")]
    if other:
        lines += ["", "other commands: " + "; ".join(f"{c.label} {c.wall_s:.1f}s (exit {c.rc})" for c in other)]
    return "\n".join(lines)


def write_out(w: World, ok: bool) -> None:
    out = w.out
    out.mkdir(parents=True, exist_ok=True)
    table = tables(w)
    head = (f"bench/deploy_gpu.py {'(CPU rehearsal) ' if not w.gpu else ''}{w.meta['date']} on {w.meta['device']}\n"
            f"command: {' '.join(w.meta['argv'])}\n")
    (out / "transcript.txt").write_text(head + "\n".join(TRANSCRIPT) + "\n")
    (out / "timings.txt").write_text(head + "\n" + table + "\n")
    result = {"ok": ok, "meta": w.meta, "phases": [p.__dict__ for p in w.runner.phases],
              "commands": [c.to_json() for c in w.commands], "facts": getattr(w, "facts", None),
              "deploys": w.deploys, "compare": w.compare, "throughput": getattr(w, "throughput", None),
              "tune": w.tune,
              "plain": {"outputs": getattr(getattr(w, "plain", None), "outputs", None)}}
    (out / "deploy_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    try:
        with tarfile.open(out / "logs.tar.gz", "w:gz") as tf:
            for src, arc in ((w.work / "host-work" / "logs", "host-logs"), (w.work / "logs", "plain-logs"),
                             (w.work / "sshd" / "sshd.log", "sshd.log")):
                if src.exists():
                    tf.add(src, arcname=arc)
    except Exception as exc:  # noqa: BLE001
        say(f"could not pack logs: {exc}")
    print("\n" + head + "\n" + table, flush=True)


def free_port_pair() -> int:
    """A port p with p and p + 1 free on 127.0.0.1 right now (the deployed server and its DFLASH neighbour)."""
    import socket

    for _ in range(200):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


def _ints(text: str) -> list[int]:
    return [int(x) for x in str(text).split(",") if x]


def _env_pair(text: str) -> tuple[str, str]:
    """KEY=VALUE for --server-env."""
    key, sep, value = str(text).partition("=")
    if not sep or not key or not key.replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. DDTREE_GDN_TREE=compact")
    return key, value


def add_tune_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("tune (issue #15): `ddtctl tune` on the deployed host, before ops")
    g.add_argument("--tune", action="store_true", help="add the tune phase: the baseline (DFLASH) and --tune-budgets, "
                   "SGLang's benchmark on the host at --tune-concurrency; the host must end on the first release")
    g.add_argument("--tune-budgets", type=_ints, default=[8, 16], help="DDTREE budgets to sweep (default 8,16)")
    g.add_argument("--tune-concurrency", type=_ints, default=[1, 4], help="benchmark concurrency levels (default 1,4; "
                   "the profile's CUDA graphs cover batch 4)")
    g.add_argument("--tune-num-prompts", type=int, default=8, help="prompts per benchmark run (default 8)")
    g.add_argument("--tune-repeats", type=int, default=1, help="benchmark runs per point and level, passed as `ddtctl "
                   "tune --repeats` (default 1: the call's time stays; each repeat adds ~12 s a level a point)")
    g.add_argument("--tune-input-len", type=int, default=64, help="random prompts' length (default 64)")
    g.add_argument("--tune-output-len", type=int, default=32, help="tokens per request (default 32)")
    g.add_argument("--tune-prompts", choices=("oracle", "random"), default="oracle", help="oracle (default): the plain "
                   "server's prompts as text, whose greedy continuation the oracle drafter knows (random ids when "
                   "the plain phase did not run); random: SGLang's random token ids")
    g.add_argument("--tune-health-timeout", type=int, default=None, help="seconds per point to get healthy (default 120 "
                   "GPU: ~50 s expected without prefill CUDA graphs; 20 CPU)")
    g.add_argument("--tune-skip-dry-run", action="store_true", help="no SGLang resolver on the host before each point "
                   "(~10-18 s a point on the H200; the deploy phase runs it)")
    g.add_argument("--tune-skip-tokenizer-init", action="store_true", help="tune's servers keep --skip-tokenizer-init "
                   "(then the benchmark sees no text: TTFT and ITL read 0, tokens/s stays right)")
    g.add_argument("--replot", default=None, metavar="TUNE_JSON", help="only draw the PNG of a tune.json (--plot PNG)")
    g.add_argument("--plot", default=None, help="with --replot: the PNG to write (default: next to TUNE_JSON)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-rehearsal", action="store_true",
                    help="this machine: local sshd, stand-in server, the managed SGLang env as the host's SGLang")
    ap.add_argument("--carry", default=str(REPO / ".carry" / "deploy"), help="tools/fetch_deploy_carry.sh's output")
    ap.add_argument("--flashinfer-include", default=str(REPO / ".carry" / "flashinfer_include.tar.gz"))
    ap.add_argument("--work", default=None, help="work dir (default /tmp/ddtctl-deploy-gpu, or a fresh temp dir in "
                                                 "the rehearsal)")
    ap.add_argument("--budget-s", type=float, default=None, help="all phases (default 570 GPU, 240 rehearsal)")
    ap.add_argument("--limit-scale", type=float, default=1.0, help="every phase's time limit times this (default 1; "
                    "tests/bench runs rehearsals beside the rest of the suite on two cores, where they take longer)")
    ap.add_argument("--health-timeout", type=int, default=None, help="the profile's launch.health_timeout_s")
    ap.add_argument("--drafter", choices=("oracle", "calibrated", "random"), default="oracle",
                    help="GPU: the deployed DDTREE server's drafter (oracle: tests/gpu_standins/oracle_drafter.py fed "
                         "by the plain server's outputs, so trees accept deeply; calibrated: the same oracle stating "
                         "its accuracy, bench/spec_throughput_gpu.py's; random: dummy weights' drafter)")
    ap.add_argument("--flagship-tp", type=int, default=0, help="issue #18: deploy the Qwen3.6-27B-shaped hybrid with "
                    "the seed's DDTREE flags (budget 64, topk-cap 64, shadow-linear, extra_buffer 0.5) at this "
                    "--tp-size instead of the tiny model, and time it against DFLASH (phase throughput)")
    ap.add_argument("--batches", default="1,8", help="flagship: concurrent requests per throughput measurement")
    ap.add_argument("--new-tokens", type=int, default=128, help="flagship: tokens per request when timing")
    ap.add_argument("--stop-after", default=None, help="(debugging) skip the phases after this one")
    ap.add_argument("--skip", default="", help="phases not to run, comma-separated (e.g. redeploy,broken,requests2 "
                    "when another call proved them and the budget is short); the result counts them as skipped")
    ap.add_argument("--nvidia-smi", default=None, help="(debugging) the host's nvidia-smi (default: the one on PATH)")
    ap.add_argument("--server-env", type=_env_pair, action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable of every deployed server (the inventory's env), e.g. "
                    "DDTREE_GDN_TREE=compact; repeatable")
    add_tune_args(ap)
    args = ap.parse_args(argv)
    if args.replot:
        return replot(args.replot, args.plot or str(Path(args.replot).with_suffix(".png")))
    if args.tune and args.flagship_tp:
        ap.error("--tune runs on the tiny model: leave out --flagship-tp")
    if args.tune_repeats < 1:
        ap.error(f"--tune-repeats {args.tune_repeats}: give at least 1")
    args.batches = [int(x) for x in str(args.batches).split(",") if x]
    gpu = not args.cpu_rehearsal
    if not gpu:  # rehearsals may run side by side on one machine (CI clones); the device call owns its ports
        global PLAIN_PORT, DEPLOY_PORT
        PLAIN_PORT, DEPLOY_PORT = free_port_pair(), free_port_pair()
    if args.work:
        work = Path(args.work)
    elif gpu:
        work = Path("/tmp/ddtctl-deploy-gpu")
    else:
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="ddtctl-deploy-rehearsal-"))
    args.health_timeout = args.health_timeout or (300 if gpu else 20)
    args.tune_health_timeout = args.tune_health_timeout or (120 if gpu else 20)
    budget = args.budget_s or (570.0 if gpu else 240.0)
    lim = (lambda g, c: g if gpu else c)
    w = World(args=args, gpu=gpu, work=work, out=Path(os.environ.get("OUT") or "/tmp/deploy-gpu-out"),
              runner=Runner(budget, args.stop_after, frozenset(filter(None, args.skip.split(","))), args.limit_scale),
              commands=[], deploys={}, compare={}, oracle=work / "oracle.json",
              ctl_python=sys.executable, openssh=None, sshd=None, release1=None, tune=None,
              flagship=args.flagship_tp, budget=64 if args.flagship_tp else BUDGET,
              ctl_env={**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(work / "xdg"),
                       "COLUMNS": "240", "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"},
              meta={"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "argv": sys.argv,
                    "mode": "gpu" if gpu else "cpu-rehearsal", "work": str(work), "budget_s": budget})
    w.meta["device"] = device_name(gpu)
    say(f"bench/deploy_gpu.py ({w.meta['mode']}) on {w.meta['device']}; work dir {work}; budget {budget:.0f}s")
    r = w.runner
    try:
        r.run("setup", lim(240, 90), "carried wheels/openssh, host SGLang python, tiny models", lambda u: setup(w, u))
        r.run("payload", lim(120, 60), "ddtctl overlay build against the pristine sglang", lambda u: payload(w, u),
              needs=("setup",))
        # The flagship's plain server loads first, alone: SGLang's check of the memory fraction counts what a
        # neighbour allocates while this server loads its weights, and two 27B-shaped servers loading together fail
        # it (x2 run of 2026-12-01: "Raise --mem-fraction-static above 0.195" at 0.45). The tiny one overlaps.
        (r.run if w.flagship else r.start)("plain", lim(300, 60), "the plain greedy reference server (outside ddtctl)",
                                           lambda u: plain(w, u), needs=("setup",))
        r.run("sshd", lim(40, 30), "sshd on 127.0.0.1, keys, hosts.yaml, known_hosts",
              lambda u: start_sshd_phase(w, u), needs=("setup",))
        r.run("facts", lim(60, 30), "ddtctl facts", lambda u: facts(w, u), needs=("sshd",))
        r.run("deploy", lim(400, 90), "ddtctl deploy (DDTREE, all stages)", lambda u: deploy_first(w, u),
              needs=("payload", "facts"))
        r.run("requests", lim(200, 60), "deployed outputs vs the plain server's", lambda u: _compare(w, "requests", u),
              needs=("deploy",))
        if w.flagship:
            r.run("throughput", lim(200, 60), "tokens/s of the deployed DDTREE server",
                  lambda u: throughput(w, u), needs=("deploy",))
        r.run("redeploy", lim(90, 40), "the same profile again: 0 files, server left running",
              lambda u: redeploy(w, u), needs=("deploy",))
        r.run("broken", lim(360, 90), "a variant that fails health: rollback to the first release",
              lambda u: broken(w, u), needs=("deploy",))
        r.run("requests2", lim(90, 30), "after the rollback: still the plain server's outputs",
              lambda u: _compare(w, "requests2", u), needs=("broken",))
        if args.tune:  # each repeat past the first is one more benchmark run per point and level (~13 s here)
            extra_runs = (args.tune_repeats - 1) * (1 + len(args.tune_budgets)) * len(args.tune_concurrency)
            r.run("tune", lim(440, 200) + 20 * extra_runs, "ddtctl tune: the baseline and the DDTREE budgets, back to the first release",
                  lambda u: tune(w, u), needs=("deploy",))
        r.run("ops", lim(120, 60), "ddtctl status, logs, releases, stop", lambda u: ops(w, u), needs=("deploy",))
        if w.flagship:
            r.run("dflash", lim(240, 60), "tokens/s of a DFLASH server of the same model and tp, alone (after stop)",
                  lambda u: dflash(w, u), needs=("throughput",))
    except KeyboardInterrupt:
        say("interrupted")
    finally:
        if "plain" in r.background:
            r.join("plain", time.monotonic() + 1)
        cleanup(w)
    phases = (13 if w.flagship else 11) + bool(args.tune)
    ok = all(p.status == "ok" or p.detail == "--skip" for p in r.phases) and len(r.phases) == phases
    write_out(w, ok)
    print(f"\nRESULT: {'PASS' if ok else 'FAIL'} ({sum(p.status == 'ok' for p in r.phases)}/{phases} phases ok; "
          f"{w.out}/transcript.txt, timings.txt, deploy_gpu.json, logs.tar.gz"
          f"{', tune.txt, tune.json, tune.jsonl' if args.tune else ''})", flush=True)
    return 0 if ok else 1


def device_name(gpu: bool) -> str:
    if gpu:
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip().replace("\n", "; ")
        except (OSError, subprocess.TimeoutExpired) as exc:
            smi = f"nvidia-smi: {exc}"
        return f"{socket.gethostname()}: {smi}"
    return f"{socket.gethostname()} (CPU, no GPU: stand-in server and nvidia-smi)"


if __name__ == "__main__":
    sys.exit(main())
