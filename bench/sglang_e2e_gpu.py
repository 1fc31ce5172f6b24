#!/usr/bin/env python3
"""DDTREE on a real SGLang 0.5.23 server, end to end, in one GPU call (the lent H200; see notes/sglang-e2e-h200.md).

Run from the repo root on the GPU machine (python3 = the image's torch 2.11 / triton 3.6):

    python3 bench/sglang_e2e_gpu.py --wheels .carry/whl --flashinfer-include .carry/flashinfer_include.tar.gz

Phases (each with its own time limit; a table is printed whatever happens, logs and JSON go to $OUT):
  setup    install the carried cp312 wheels (sglang 0.5.23 + pure-python deps) into a target dir, unpack flashinfer's
           headers for SGLang's nvcc JIT, test-only stand-ins for sgl_kernel/flashinfer/cutlass (tests/gpu_standins)
  overlay  `python3 -m ddtctl overlay install --sglang-root <target>` (the installer deploy ships), then the
           payload's files are checked in place
  models   tiny Qwen3 target (4 layers) + DFlash draft (1 layer, block 16) as config.json only, loaded with
           `--load-format dummy` through the test-only informative initializer (tests/gpu_standins/
           informative_weights.py: SGLang's own dummy weights make every prompt decode a 2-cycle, so equality would
           prove nothing) in float32 (`--dtype`; in bf16, verify and decode round differently by ~0.1 nats)
  wave 1   the plain greedy server: reference outputs with its top-2 logprobs; they become the oracle for the
           test-only drafter override (tests/gpu_standins/oracle_drafter.py)
  wave 2   DFLASH and DDTREE (budgets 1/7/15/32/64), CUDA graphs off and on, with the oracle drafter (same drafter
           for DFLASH and DDTREE), plus DDTREE with the real (random) drafter, eager verify and host-reference
           preparation; every output must equal the plain greedy output token for token (a divergence counts as a
           rounding tie only where plain's own top-2 margin is below twice DFLASH's measured logprob noise);
           accepted lengths from the server's own meta_info and DDTREE's metrics from /get_server_info; on four
           servers also a return_logprob batch and a T=0.8 batch (EXTRAS).
Results of every run: notes/sglang-e2e-h200.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT") or "/tmp/ddtree-e2e-out")
WORK = Path(os.environ.get("DDTREE_E2E_WORK", "/tmp/ddtree-e2e"))
LOGS = WORK / "logs"
T0 = time.monotonic()

VOCAB = 151936
MASK_ID = 151669
EOS_IDS = (151643, 151645)
DTYPE = ["float32"]
TARGET = ["dense"]  # dense: tiny Qwen3; hybrid: tiny Qwen3.5 (Gated-DeltaNet) -- set from --target
TP = [1]
HYBRID_FLAGS = ["--linear-attn-backend", "triton", "--linear-attn-prefill-backend", "triton",
                "--mamba-ssm-dtype", "float32", "--mamba-radix-cache-strategy", "extra_buffer",
                "--mamba-full-memory-ratio", "0.5"]


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def run(cmd, *, env=None, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    p = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        log(f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


# ------------------------------------------------------------------------------------------------------- setup
def setup(args) -> tuple[Path, dict]:
    site = WORK / "site"
    fi = WORK / "flashinfer_pkg"
    if not (site / "sglang").is_dir():
        wheels = sorted(str(p) for p in Path(args.wheels).glob("*.whl"))
        p = run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                 "--no-cache-dir", "--target", site, *wheels], timeout=240)
        if p.returncode != 0:
            raise RuntimeError("wheel install failed")
    if not (fi / "flashinfer" / "data" / "include").is_dir():
        fi.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.flashinfer_include) as tf:
            tf.extractall(fi)
        for sub in ("data/csrc", "data/cutlass/include", "data/cutlass/tools/util/include", "data/spdlog/include"):
            (fi / "flashinfer" / sub).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "gpu_standins"), str(site), str(REPO)])
    env["DDTREE_GPU_STANDINS"] = "1"
    env["DDTREE_STANDIN_FLASHINFER_DIR"] = str(fi / "flashinfer")
    env["SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    return site, env


def overlay_install(site: Path, env: dict) -> dict:
    """Install the DDTREE payload with ddtctl's own overlay command (what deploy runs remotely). A machine kept warm
    from an earlier call still has it installed: take it out with ddtctl's uninstall first (install refuses to patch
    over its own patched files)."""
    if (site / "ddtree_sglang").is_dir():
        p = run([sys.executable, "-m", "ddtctl", "overlay", "uninstall", "--sglang-root", site, "--python",
                 sys.executable, "--format", "json"], env=env, timeout=120, cwd=REPO)
        if p.returncode != 0:
            raise RuntimeError(f"ddtctl overlay uninstall failed: {p.stderr[-500:]}")
    p = run([sys.executable, "-m", "ddtctl", "overlay", "install", "--sglang-root", site, "--python",
             sys.executable, "--format", "json"], env=env, timeout=240, cwd=REPO)
    out = {"rc": p.returncode, "stdout_tail": p.stdout[-2000:], "stderr_tail": p.stderr[-2000:]}
    if p.returncode != 0:
        raise RuntimeError(f"ddtctl overlay install failed: {p.stderr[-500:]}")
    for rel in ("ddtree_sglang/worker.py", "ddtree_sglang/tree_prep.py", "ddtree_sglang/kernels/triton_kernels.py"):
        if not (site / rel).is_file():
            raise RuntimeError(f"overlay install did not place {rel}")
    return out


def make_models(weights: str) -> tuple[Path, Path]:
    hybrid = TARGET[0] == "hybrid"
    target = WORK / "models" / ("tiny-qwen35-hybrid" if hybrid else "tiny-qwen3")
    draft = WORK / "models" / "tiny-dflash"
    common = {
        "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "intermediate_size": 512, "vocab_size": VOCAB, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": 1000000, "max_position_embeddings": 4096, "torch_dtype": DTYPE[0], "bos_token_id": 151643,
        "eos_token_id": 151645, "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
        "rope_scaling": None, "use_cache": True, "model_type": "qwen3",
    }
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    # informative weights need an untied head: tied, the residual stream's own token embedding wins the logits and
    # the model repeats its last token
    tcfg = {**common, "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 4,
            "tie_word_embeddings": weights == "dummy"}
    if hybrid:
        # the shape of Qwen3.6-27B in miniature: layers 1 and 3 full attention, 0 and 2 Gated-DeltaNet; without
        # rope_parameters start-up fails ("Unknown RoPE scaling type")
        tcfg.update({
            "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "full_attention_interval": 2,
            "linear_num_key_heads": 2, "linear_num_value_heads": 6, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "attn_output_gate": True,
            "partial_rotary_factor": 0.25, "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000, "partial_rotary_factor": 0.25}})
    (target / "config.json").write_text(json.dumps(tcfg))
    (draft / "config.json").write_text(json.dumps({
        **common, "architectures": ["DFlashDraftModel"], "num_hidden_layers": 1, "tie_word_embeddings": False,
        "block_size": 16, "num_target_layers": 4,
        "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": [0, 1, 2]}}))
    return target, draft


# ------------------------------------------------------------------------------------------------------- servers
@dataclass
class Server:
    name: str
    algo: str  # plain | DFLASH | DDTREE
    graphs: bool
    budget: int | None = None
    oracle: bool = False
    port: int = 0
    verify_graph: bool = True
    extras: bool = False  # after the greedy batch: a logprob batch and a T>0 batch (see run_extras)
    extra_env: dict = field(default_factory=dict)
    extra_args: list = field(default_factory=list)  # e.g. --disable-overlap-schedule (the synchronous scheduler)
    unsafe: bool = False  # DDTREE --speculative-ddtree-allow-hybrid-unsafe: a negative control that must diverge
    proc: subprocess.Popen | None = None
    argv: list[str] = field(default_factory=list)
    status: str = "not run"
    startup_s: float | None = None
    outputs: list | None = None
    accept_lengths: list | None = None
    verify_cts: list | None = None
    server_info: dict | None = None
    error: str | None = None
    logprob_outputs: list | None = None
    logprobs: list | None = None
    sampled_outputs: list | None = None
    extras_error: str | None = None
    top2_gaps: list | None = None  # plain only: top-1 minus top-2 logprob at every output position

    @property
    def log_path(self) -> Path:
        return LOGS / f"{self.name}.log"


def server_argv(s: Server, target: Path, draft: Path) -> list[str]:
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(target), "--load-format", "dummy",
            "--skip-tokenizer-init", "--attention-backend", "triton", "--sampling-backend", "pytorch",
            # 16 servers share one GPU and start together. SGLang requires pre_load_free * fraction to exceed
            # what was allocated while this server loaded -- its weights *and* its neighbours' -- so 0.03 left
            # 5 of them short (run 4: "minimum viable" 0.035). The KV pool is capped by --max-total-tokens, so a
            # larger fraction reserves nothing more: 0.15 is a margin, not memory.
            "--grammar-backend", "none", "--disable-radix-cache", "--mem-fraction-static", "0.15",
            "--max-total-tokens", "16384", "--port", str(s.port), "--random-seed", "0", "--log-level", "info"]
    argv += ["--cuda-graph-max-bs-decode", "4"] if s.graphs else ["--disable-cuda-graph"]
    argv += ["--dtype", DTYPE[0], "--enable-fp32-lm-head"]
    if s.algo != "plain":
        argv += ["--speculative-algorithm", s.algo, "--speculative-draft-model-path", str(draft),
                 "--max-running-requests", "8"]
    if s.algo == "DDTREE":
        # no --disable-overlap-schedule: DDTREE runs under the overlap scheduler (SGLang's default), as DFLASH does
        argv += ["--speculative-ddtree-budget", str(s.budget)]
        if TARGET[0] == "hybrid":
            argv += ["--speculative-ddtree-allow-hybrid-unsafe" if s.unsafe else "--speculative-ddtree-shadow-linear"]
    if TARGET[0] == "hybrid":
        argv += HYBRID_FLAGS
        if s.algo == "plain":  # bounds the mamba state pool (else sized from the memory fraction, GBs per server)
            argv += ["--max-running-requests", "8"]
    if TP[0] > 1:
        argv += ["--tp-size", str(TP[0]), "--disable-custom-all-reduce"]
    return argv + list(s.extra_args)


def http(method: str, url: str, body: dict | None = None, timeout: float = 30.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
        try:
            return r.status, (json.loads(raw) if raw else None)
        except ValueError:  # e.g. /start_profile answers plain text
            return r.status, raw.decode(errors="replace")


def free_port(preferred: int, tries: int = 200) -> int:
    """The first port from `preferred` up that nothing listens on or holds right now. A fixed plan of ports
    is not enough: ports from 32768 up lie in Linux's ephemeral range, where one server's outgoing connections can take the
    port the next server was planned on (call 2 of 2026-12-01: 'address already in use', then 120 s lost)."""
    import socket

    for port in range(preferred, preferred + tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {preferred}..{preferred + tries - 1}")


BIND_FAILURE = "error while attempting to bind on address"


def start(s: Server, target: Path, draft: Path, env: dict, oracle_path: Path) -> None:
    s.port = free_port(s.port)
    s.argv = server_argv(s, target, draft)
    e = dict(env)
    if s.algo == "DDTREE":
        e["DDTREE_WORKER"] = "1"
        e["DDTREE_LOG_INTERVAL"] = "20"
        e["DDTREE_VERIFY_GRAPH"] = "1" if s.verify_graph else "0"
    e.update(s.extra_env)
    if s.oracle:
        e["DDTREE_TEST_DRAFT_HOOK"] = "oracle_drafter:override"
        e["DDTREE_TEST_ORACLE"] = str(oracle_path)
    LOGS.mkdir(parents=True, exist_ok=True)
    f = open(s.log_path, "w")
    s.proc = subprocess.Popen(s.argv, env=e, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, cwd=WORK)
    s.status = "starting"
    s._t_start = time.monotonic()  # type: ignore[attr-defined]


def wait_healthy(s: Server, deadline: float) -> bool:
    base = f"http://127.0.0.1:{s.port}"
    while time.monotonic() < deadline:
        if s.proc.poll() is not None:
            s.status, s.error = "died", f"exit {s.proc.returncode}: " + tail(s.log_path, 6)
            return False
        if BIND_FAILURE in tail(s.log_path, 40):  # uvicorn gave up, the engine would wait out its warm-up
            stop(s)
            s.status, s.error = "died", f"port {s.port} taken: " + tail(s.log_path, 3)
            return False
        try:
            code, _ = http("GET", base + "/health", timeout=3)
            if code == 200:
                _, info = http("GET", base + "/get_server_info", timeout=10)
                s.server_info = info
                s.startup_s = time.monotonic() - s._t_start  # type: ignore[attr-defined]
                s.status = "healthy"
                return True
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(1.0)
    s.status, s.error = "timeout", "not healthy in time: " + tail(s.log_path, 4)
    return False


def stop(s: Server) -> None:
    if s.proc is None or s.proc.poll() is not None:
        return
    try:
        os.killpg(s.proc.pid, signal.SIGTERM)
        s.proc.wait(timeout=15)
    except Exception:
        try:
            os.killpg(s.proc.pid, signal.SIGKILL)
        except Exception:
            pass


def tail(path: Path, n: int) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    keep = [ln for ln in lines if "Error" in ln or "error" in ln or "Traceback" in ln or "Refused" in ln]
    return " | ".join((keep or lines)[-n:])[-1200:]


def prompts() -> list[tuple[list[int], int]]:
    rng = random.Random(1234)
    out = []
    for i, (length, new) in enumerate([(23, 48), (40, 48), (17, 48), (61, 7)]):
        out.append(([rng.randrange(1000, 150000) for _ in range(length)], new))
    return out


def generate_all(s: Server, reqs) -> None:
    base = f"http://127.0.0.1:{s.port}"

    def one(item):
        ids, new = item
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new, "temperature": 0}}
        if s.algo == "plain":  # the reference also records how close each greedy choice was (see verdict())
            body.update(return_logprob=True, top_logprobs_num=2)
        _, r = http("POST", base + "/generate", body, timeout=120)
        return r

    with ThreadPoolExecutor(len(reqs)) as ex:  # concurrent: the scheduler batches them (batch > 1)
        results = list(ex.map(one, reqs))
    s.outputs = [r.get("output_ids") for r in results]
    s.accept_lengths = [r.get("meta_info", {}).get("spec_accept_length") for r in results]
    s.verify_cts = [r.get("meta_info", {}).get("spec_verify_ct") for r in results]
    if s.algo == "plain":
        s.top2_gaps = [[(t[0][0] - t[1][0]) if t and len(t) > 1 else None
                        for t in (r.get("meta_info", {}).get("output_top_logprobs") or [])] for r in results]
    try:
        _, s.server_info = http("GET", base + "/get_server_info", timeout=10)
    except Exception:
        pass


def run_extras(s: Server, reqs) -> None:
    """The paths greedy equality does not reach: return_logprob (ids must still equal greedy; logprobs are compared
    with the plain server's in the report) and temperature sampling (T=0.8, top_p 0.95: must finish with a full
    answer of valid token ids; sampled tokens cannot be compared token for token across algorithms)."""
    base = f"http://127.0.0.1:{s.port}"

    def one(item, sp, **extra):
        ids, new = item
        _, r = http("POST", base + "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": new, **sp},
                                                 **extra}, timeout=120)
        return r

    try:
        with ThreadPoolExecutor(len(reqs)) as ex:
            lp = list(ex.map(lambda it: one(it, {"temperature": 0}, return_logprob=True), reqs))
        s.logprob_outputs = [r.get("output_ids") for r in lp]
        s.logprobs = [[t[0] for t in (r.get("meta_info", {}).get("output_token_logprobs") or [])] for r in lp]
        with ThreadPoolExecutor(len(reqs)) as ex:
            sm = list(ex.map(lambda it: one(it, {"temperature": 0.8, "top_p": 0.95, "sampling_seed": 7}), reqs))
        s.sampled_outputs = [r.get("output_ids") for r in sm]
    except Exception as exc:  # noqa: BLE001
        s.extras_error = f"{type(exc).__name__}: {exc} | " + tail(s.log_path, 4)


def run_all(servers: list[Server], target, draft, env, oracle_path, reqs, budget_s: float,
            max_starting: int = 5) -> list | None:
    """Start the plain reference alone, then the others, at most `max_starting` starting at a time (startup
    dominates: imports, JIT). The first plain server's outputs are the reference and become the oracle; servers
    with the oracle drafter send their requests only after that.

    Why bounded: on 2026-12-07 a suite's 11 other servers started 53 s after plain, all at once on 16 cores, and
    plain was still not healthy when the suite's 160 s ran out, so nothing was measured."""
    deadline = time.monotonic() + budget_s
    slots = threading.Semaphore(max_starting)
    holds_slot: set[str] = set()
    ref_holder: dict = {}
    oracle_ready = threading.Event()
    plains = [s for s in servers if s.algo == "plain"]
    plain_up = threading.Event()
    for s in plains:  # the reference first, alone: it warms the Triton/JIT caches the others share
        start(s, target, draft, env, oracle_path)

    def start_rest():
        # plain alone until it is up: nothing is measured without its reference, and servers importing beside it
        # only slow it down
        plain_up.wait(timeout=max(0.0, deadline - 90 - time.monotonic()))
        started = []
        for s in servers:
            if s.proc is None:
                if not slots.acquire(timeout=max(0.0, deadline - 60 - time.monotonic())):
                    break  # the rest would not come up in time: their life threads report "not run"
                holds_slot.add(s.name)
                start(s, target, draft, env, oracle_path)
                started.append(s.name)
        log(f"started {len(started)} servers after plain: {', '.join(started)}")

    starter = threading.Thread(target=start_rest, daemon=True)
    starter.start()

    def free_slot(s: Server) -> None:  # a server stops counting as starting once it is up, failed or gone
        if s.name in holds_slot:
            holds_slot.discard(s.name)
            slots.release()

    def life(s: Server):
        try:
            while s.proc is None and time.monotonic() < deadline - 15:
                time.sleep(0.5)
            if s.proc is None:
                s.status, s.error = "not run", "not started in time"
                return
            healthy = wait_healthy(s, deadline - 15)
            free_slot(s)
            if not healthy:
                return
            log(f"{s.name} healthy after {s.startup_s:.1f}s")
            if s.algo == "plain":
                plain_up.set()
            if s.oracle:
                oracle_ready.wait(timeout=max(0.0, deadline - 10 - time.monotonic()))
                if not oracle_ready.is_set():
                    s.status, s.error = "error", "no reference outputs in time (oracle not written)"
                    return
            generate_all(s, reqs)
            s.status = "done"
            log(f"{s.name} done")
            if s.algo == "plain" and "ref" not in ref_holder:
                ref_holder["ref"] = s.outputs
                seqs = {",".join(map(str, ids)): ids + out for (ids, _), out in zip(reqs, s.outputs)}
                oracle_path.write_text(json.dumps({"sequences": seqs}))
                oracle_ready.set()
                log("oracle written")
            if s.extras:
                run_extras(s, reqs)
                log(f"{s.name} extras done")
        except Exception as exc:  # noqa: BLE001
            s.status, s.error = "error", f"{type(exc).__name__}: {exc} | " + tail(s.log_path, 4)
        finally:
            free_slot(s)
            stop(s)
            if s.algo == "plain" and s.status != "done" and not any(p.status in ("starting", "healthy", "done")
                                                                      for p in plains if p is not s):
                plain_up.set()
                oracle_ready.set()  # no reference is coming: release the waiters

    threads = [threading.Thread(target=life, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic() + 20))
    for s in servers:
        stop(s)
    return ref_holder.get("ref")


# ------------------------------------------------------------------------------------------------------- report
def ddtree_metrics(info: dict | None) -> dict | None:
    if not info:
        return None
    for st in info.get("internal_states") or []:
        if isinstance(st, dict) and st.get("ddtree"):
            m = st["ddtree"]
            return m[0] if isinstance(m, list) and m else m
    return None


def metrics_from_log(path: Path) -> dict | None:
    """The last `DDTREE metrics: k=v ...` line the worker logged (when /get_server_info did not carry them)."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if "DDTREE metrics:" in ln]
    except OSError:
        return None
    if not lines:
        return None
    out: dict = {"source": "log"}
    for kv in lines[-1].split("DDTREE metrics:", 1)[1].split():
        k, _, v = kv.partition("=")
        try:
            out[k] = float(v) if "." in v else int(v)
        except ValueError:
            out[k] = v
    if "max_accepted" in out:
        out["max_accepted_drafts"] = out["max_accepted"]
    if "prep_ms" in out:
        out["mean_prep_ms"] = out["prep_ms"]
    return out


def served(info: dict | None) -> dict:
    if not info:
        return {}
    keys = ("speculative_algorithm", "speculative_num_draft_tokens", "speculative_ddtree_budget",
            "speculative_ddtree_topk_cap", "speculative_ddtree_verify_width", "disable_cuda_graph",
            "disable_overlap_schedule", "attention_backend")
    return {k: info.get(k) for k in keys if k in info}


TIE_FLOOR_NATS = 0.005


def tie_threshold(servers: list[Server], reference: list | None) -> tuple[float, str]:
    """How close two greedy candidates must be for a divergence to count as rounding, measured on SGLang's own
    DFLASH in the same run (chain speculative decoding: lossless by construction, so where it parts from plain it is
    rounding -- verify runs the target as an extend over several tokens, plain as one-token decodes):
      * twice the largest logprob difference DFLASH shows against plain where their outputs still agree, and
      * in bf16 (where DFLASH itself parts from plain, run 1 of the hybrid proof), 1.25 x the largest top-2 margin of
        plain at which DFLASH's output parted from plain's.
    Never below TIE_FLOOR_NATS."""
    noise = []
    parted = []
    plain = next((p for p in servers if p.algo == "plain" and p.logprobs), None)
    gaps = next((p.top2_gaps for p in servers if p.algo == "plain" and p.top2_gaps), None)
    for s in servers:
        if s.algo != "DFLASH" or not reference:
            continue
        if s.logprobs and plain:
            noise += _logprob_diffs(s, plain, reference)
        if s.outputs and gaps and DTYPE[0] != "float32":
            for i, (out, ref) in enumerate(zip(s.outputs, reference)):
                k = first_divergence(out, ref)
                if out != ref and i < len(gaps) and k < len(gaps[i]) and gaps[i][k] is not None:
                    parted.append(gaps[i][k])
    if not noise and not parted:
        return TIE_FLOOR_NATS, "floor (no DFLASH logprobs)"
    basis = [f"2 x DFLASH-vs-plain logprob noise {max(noise):.2e}"] if noise else []
    value = max(TIE_FLOOR_NATS, 2 * max(noise) if noise else 0.0)
    if parted:
        basis.append(f"1.25 x largest margin where DFLASH parted from plain {max(parted):.2e}")
        value = max(value, 1.25 * max(parted))
    return value, "; ".join(basis)


def _logprob_diffs(s: Server, plain: Server, reference: list) -> list[float]:
    diffs = []
    for x, y, out, ref in zip(s.logprobs or [], plain.logprobs, s.logprob_outputs or [], reference):
        same = first_divergence(out, ref)
        diffs += [abs(a - b) for a, b in zip(x[:same], y[:same]) if a is not None and b is not None]
    return diffs


def first_divergence(out: list, ref: list) -> int:
    """Index of the first token where two outputs differ (the shorter length when one is a prefix of the other)."""
    return next((j for j, (a, b) in enumerate(zip(out, ref)) if a != b), min(len(out), len(ref)))


def verdict(outputs: list | None, reference: list | None, gaps: list | None,
            tie_nats: float = TIE_FLOOR_NATS) -> tuple[bool | None, str]:
    """(ok, label): 'exact'; 'tie@k' when the first divergence of every diverging request sits where the plain
    server's own top-2 logprobs were within tie_nats (a rounding decision, not a decoding error); else 'DIFF@k'."""
    if outputs is None or reference is None:
        return None, "-"
    if len(outputs) != len(reference):
        return False, "DIFF:count"
    ties, worst = [], None
    for i, (out, ref) in enumerate(zip(outputs, reference)):
        if out == ref:
            continue
        k = first_divergence(out, ref)
        gap = gaps[i][k] if gaps and i < len(gaps) and k < len(gaps[i]) else None
        if gap is not None and gap < tie_nats:
            ties.append(f"{k}({gap:.3f})")
        else:
            worst = worst or f"DIFF@r{i}:{k}" + (f"(gap {gap:.2f})" if gap is not None else "")
    if worst:
        return False, worst
    return True, ("tie@" + ",".join(ties)) if ties else "exact"


LOGPROB_FLOOR_NATS = 0.1


def logprob_bound(servers: list[Server], reference: list | None) -> float:
    """How far a speculative server's returned logprobs may sit from plain's: 0.1 nats (float32: a wrong row moves
    them by units), or twice what SGLang's own DFLASH shows in the same run where that is more (bf16: DFLASH itself
    is 0.10-0.31 nats off plain on the hybrid target, x2 run 2)."""
    plain = next((p for p in servers if p.algo == "plain" and p.logprobs), None)
    noise = [d for s in servers if s.algo == "DFLASH" and s.logprobs and plain and reference
             for d in _logprob_diffs(s, plain, reference)]
    return max(LOGPROB_FLOOR_NATS, 2 * max(noise) if noise else 0.0)


def extras_verdict(s: Server, reference: list | None, plain: Server | None, reqs,
                   tie_nats: float = TIE_FLOOR_NATS,
                   lp_bound: float = LOGPROB_FLOOR_NATS) -> tuple[bool | None, str]:
    """None when the server ran no extras; else (ok, what was seen)."""
    if not s.extras:
        return None, ""
    if s.extras_error:
        return False, s.extras_error
    notes, ok = [], True
    if s.logprob_outputs is None or reference is None:
        return False, "no logprob outputs"
    lp_ok, lp_label = verdict(s.logprob_outputs, reference, plain.top2_gaps if plain else None, tie_nats)
    ok &= bool(lp_ok)
    notes.append(f"ids {lp_label}")
    lens_ok = all(len(lp) == len(o) for lp, o in zip(s.logprobs or [], s.logprob_outputs))
    ok &= lens_ok and bool(s.logprobs)
    notes.append(f"logprob lens {'ok' if lens_ok else 'WRONG'}")
    if plain is not None and plain is not s and plain.logprobs:
        diffs = _logprob_diffs(s, plain, reference)
        worst = max(diffs) if diffs else float("nan")
        notes.append(f"max|lp-plain| {worst:.2e}")
        # the same position through another batch shape (tree vs one token) moves by rounding; a wrong row by units
        ok &= bool(diffs) and worst < lp_bound
        notes.append(f"bound {lp_bound:.2e}")
    sampled = s.sampled_outputs or []
    full = all(isinstance(o, list) and 0 < len(o) <= new and all(0 <= t < VOCAB for t in o)
               and (len(o) == new or o[-1] in EOS_IDS) for o, (_, new) in zip(sampled, reqs)) \
        and len(sampled) == len(reqs)
    differs = any(o != r for o, r in zip(sampled, reference))
    ok &= full
    notes.append(f"T=0.8 {'full answers' if full else 'SHORT/INVALID'}{', differs from greedy' if differs else ''}")
    return ok, "; ".join(notes)


def report(servers: list[Server], reference: list | None, meta: dict, reqs=None) -> int:
    rows = []
    ok_all = True
    extras_ok = True
    plain = next((s for s in servers if s.algo == "plain" and s.logprobs), None)
    plain_gaps = next((s.top2_gaps for s in servers if s.algo == "plain" and s.top2_gaps), None)
    tie_nats, tie_basis = tie_threshold(servers, reference)
    lp_bound = logprob_bound(servers, reference)
    meta["logprob_bound"] = lp_bound
    meta["tie_nats"], meta["tie_basis"] = tie_nats, tie_basis
    dflash_out = {s.graphs: s.outputs for s in servers if s.algo == "DFLASH" and s.outputs is not None}
    for s in servers:
        match, match_label = verdict(s.outputs, reference, plain_gaps, tie_nats)
        acc = [a for a in (s.accept_lengths or []) if a is not None]
        mean_acc = sum(acc) / len(acc) if acc else None
        m = ddtree_metrics(s.server_info) or metrics_from_log(s.log_path)
        if s.unsafe:  # the sibling-sharing negative control must leave plain greedy (beyond rounding ties)
            ok = s.status == "done" and match is False
        else:
            ok = s.status == "done" and match is not False and (s.algo == "plain" or match)
        ok_all &= ok
        x_ok, x_notes = extras_verdict(s, reference, plain, reqs or [], tie_nats, lp_bound)
        if x_ok is not None:
            extras_ok &= x_ok
        rows.append({
            "server": s.name, "algo": s.algo, "graphs": s.graphs, "budget": s.budget, "oracle": s.oracle,
            "unsafe": s.unsafe, "ok": ok,
            "status": s.status, "startup_s": s.startup_s, "match_plain": match, "match": match_label, "outputs": s.outputs,
            "same_as_dflash": (s.outputs == dflash_out[s.graphs]) if s.algo == "DDTREE" and s.graphs in dflash_out
            else None, "mean_accept_len": mean_acc,
            "ddtree_metrics": m, "served": served(s.server_info), "error": s.error, "argv": s.argv,
            "verify_cts": s.verify_cts, "accept_lengths": s.accept_lengths,
            "extras_ok": x_ok, "extras": x_notes, "logprobs": s.logprobs, "sampled_outputs": s.sampled_outputs,
            "logprob_outputs": s.logprob_outputs, "top2_gaps": s.top2_gaps,
            "extra_env": dict(getattr(s, "extra_env", None) or {}),
        })
    ties = [f"{r['server']}: {r['match']}" for r in rows if r["match"].startswith("tie")]
    if ties:
        lines_ties = ["", f"near-ties (plain's top-2 logprobs within {tie_nats:.2e} nats where outputs part): "
                      + "; ".join(ties)]
    else:
        lines_ties = []
    if not servers or reference is None or meta.get("error"):
        ok_all = False  # nothing ran, or the setup failed: never a pass
    if not any(r["extras_ok"] is not None for r in rows):
        extras_ok = False
    claims = tree_claims(rows)
    claims_ok = bool(claims) and all(c["ok"] for c in claims)
    result = {"meta": meta, "rows": rows, "reference_outputs": reference, "ok": ok_all, "extras_ok": extras_ok,
              "claims": claims, "claims_ok": claims_ok}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "e2e_results.json").write_text(json.dumps(result, indent=1, default=str))
    hdr = f"{'server':<22} {'algo':<7} {'graphs':<6} {'B':>3} {'drafter':<7} {'status':<8} {'start_s':>7} " \
          f"{'==plain':<9} {'==dfl':<5} {'acc_len':>7} {'max_acc':>7} {'branch':>6} {'width':>5} {'prep_ms':>7} {'g_steps':>7}"
    lines = [hdr, "-" * len(hdr)]
    for r in rows:
        m = r["ddtree_metrics"] or {}
        start_s = f"{r['startup_s']:.0f}" if r["startup_s"] else "-"
        acc_s = f"{r['mean_accept_len']:.2f}" if r["mean_accept_len"] else "-"
        prep_s = f"{m['mean_prep_ms']:.3f}" if "mean_prep_ms" in m else "-"
        drafter = "oracle" if r["oracle"] else "random"
        lines.append(
            f"{r['server']:<22} {r['algo']:<7} {str(r['graphs']):<6} {r['budget'] or '-':>3} {drafter:<7} "
            f"{r['status']:<8} {start_s:>7} {r['match'][:9]:<9} {str(r['same_as_dflash'] if r['same_as_dflash'] is not None else '-')[:5]:<5} {acc_s:>7} "
            f"{m.get('max_accepted_drafts', '-'):>7} {m.get('accepted_branch_nodes', m.get('branch_nodes', '-')):>6} "
            f"{m.get('verify_width', '-'):>5} {prep_s:>7} "
            f"{m.get('verify_graph_steps', m.get('graph_steps', '-')):>7}")
        if r["error"]:
            lines.append(f"    ! {r['error'][:400]}")
    lines += lines_ties
    lines.append(f"tie threshold: {tie_nats:.2e} nats ({tie_basis}); dtype {meta.get('dtype')}, weights "
                 f"{meta.get('weights')}")
    lines.append("")
    lines.append("extras (return_logprob greedy batch; T=0.8 top_p=0.95 batch):")
    for r in rows:
        if r["extras_ok"] is not None:
            lines.append(f"  {r['server']:<26} {'ok  ' if r['extras_ok'] else 'FAIL'} {r['extras'][:300]}")
    lines.append("")
    lines.append("tree claims (same oracle drafter for DFLASH and DDTREE; DDTREE budgets >= 7, not the control):")
    for c in claims:
        lines.append(f"  {c['server']:<26} {'ok  ' if c['ok'] else 'FAIL'} {c['what']}")
    lines.append("")
    lines.append("served args (/get_server_info):")
    for r in rows:
        if r["served"]:
            lines.append(f"  {r['server']:<26} " + " ".join(f"{k}={v}" for k, v in r["served"].items()))
    table = "\n".join(lines)
    (OUT / "e2e_table.txt").write_text(table + "\n")
    print("\n" + table, flush=True)
    print(f"\nRESULT: {'PASS' if ok_all else 'FAIL'} (every server up; DDTREE/DFLASH == plain greedy)", flush=True)
    print(f"EXTRAS: {'PASS' if extras_ok else 'FAIL'} (logprobs, T>0)", flush=True)
    print(f"CLAIMS: {'PASS' if claims_ok else 'FAIL'} (branch nodes accepted > 0, mean accepted length > DFLASH's)",
          flush=True)
    return 0 if ok_all and extras_ok and claims_ok else 1


NOT_COMPARABLE = "no request with DFLASH's output: acceptance not comparable"
# Fewer DFLASH verify steps than this on the requests with identical outputs is no basis: one step moves the mean
# by up to a whole block, and a short request both servers verify in the same two full-block steps ties exactly
# (the hybrid suite of 2026-12-01 evening: one 7-token request, 2 steps each, 3.5 = 3.5)
MIN_COMPARABLE_STEPS = 8
TOO_FEW_STEPS = "too few steps to compare acceptance"
COMPACT_GDN_MAX_NODES = 128  # the payload's hybrid.py COMPACT_MAX_WIDTH


def wanted_kernels(env: dict, budget: int) -> tuple[str, str]:
    """The GDN tree verify and tree conv a hybrid DDTREE server should report (the payload's hybrid.py): the
    compact GDN verify unless DDTREE_GDN_TREE says otherwise or the tree has more nodes than it takes (float32
    SSM states, as every e2e model has); the compact conv too unless DDTREE_CONV_TREE names another kernel."""
    gdn = env.get("DDTREE_GDN_TREE", "compact") == "compact" and budget + 1 <= COMPACT_GDN_MAX_NODES
    conv = env.get("DDTREE_CONV_TREE", "compact") == "compact"
    return ("compact" if gdn else "sglang"), ("compact" if conv else "sglang")


def tokens_per_step(row: dict, requests: list[int]) -> float | None:
    """Committed tokens over verify steps on the given requests: each request weighs by its steps, so a request
    that ended after two steps cannot outweigh one of forty-five."""
    pairs = [(row["accept_lengths"][i], row["verify_cts"][i]) for i in requests]
    pairs = [(a, c) for a, c in pairs if a is not None and c]
    steps = sum(c for _, c in pairs)
    return sum(a * c for a, c in pairs) / steps if steps else None


def comparable_acceptance(row: dict, dflash: dict | None) -> tuple[float | None, float | None, str]:
    """DDTREE's and DFLASH's accepted length on the requests where both produced the same tokens.

    The oracle drafter proposes plain's continuation, so once a server's output parts from plain's at a rounding
    tie its drafts stop matching and its accepted length drops to ~1 for the rest of that request. Two servers
    that part at different ties are then compared on different texts. The requests with identical outputs saw
    identical drafts, so there the comparison measures the tree alone."""
    if dflash is None:
        return None, None, "no DFLASH server"
    per_request = all(row.get(k) and dflash.get(k) for k in ("outputs", "accept_lengths", "verify_cts"))
    if not per_request:  # a row without per-request detail: the plain mean of per-request means
        return row["mean_accept_len"], dflash["mean_accept_len"], "mean over requests"
    common = [i for i, (a, b) in enumerate(zip(row["outputs"], dflash["outputs"])) if a == b]
    if not common:
        return None, None, NOT_COMPARABLE
    steps = sum(dflash["verify_cts"][i] or 0 for i in common)
    if steps < MIN_COMPARABLE_STEPS:
        return None, None, f"{TOO_FEW_STEPS} ({steps} DFLASH steps on the {len(common)} requests with its output)"
    basis = f"tokens/step on the {len(common)}/{len(row['outputs'])} requests with DFLASH's output"
    return tokens_per_step(row, common), tokens_per_step(dflash, common), basis


def tree_claims(rows: list[dict]) -> list[dict]:
    """What a tree must show beyond equality: with the oracle drafter, accepted nodes off the top-1 chain (> 0) and a
    mean accepted length above DFLASH's at the same graphs setting, on the requests where both wrote the same
    tokens (comparable_acceptance; with no such request, or too few DFLASH steps on them, the branch nodes
    alone)."""
    dflash = {r["graphs"]: r for r in rows if r["algo"] == "DFLASH" and r["mean_accept_len"]}
    out = []
    for r in rows:
        if r["algo"] != "DDTREE" or not r["oracle"] or r["unsafe"] or (r["budget"] or 0) < 7:
            continue
        if "--speculative-ddtree-budget-schedule" in (r.get("argv") or []):
            continue  # its widths change with the batch (the chain at 4): held to equality (RESULT) only
        m = r["ddtree_metrics"] or {}
        branch = m.get("accepted_branch_nodes", m.get("branch_nodes"))
        acc, base, basis = comparable_acceptance(r, dflash.get(r["graphs"]))
        ok = r["ok"] and isinstance(branch, (int, float)) and branch > 0
        if basis != NOT_COMPARABLE and not basis.startswith(TOO_FEW_STEPS):
            ok = ok and bool(acc) and bool(base) and acc > base
        # the scheduler it served under: overlap unless the launch asked for the synchronous one
        want_sync = "--disable-overlap-schedule" in (r.get("argv") or [])
        sync = (r.get("served") or {}).get("disable_overlap_schedule")
        ok = ok and sync is not None and bool(sync) == want_sync
        # hybrid targets: the GDN tree kernel the server reports is the one asked for
        kernel = m.get("gdn_tree", m.get("gdn_tree_kernel"))
        conv = m.get("conv_tree_kernel")
        # the verify attention that served (verify_attn.py): the tree split-KV kernel (the default) unless the
        # server was asked for SGLang's prefill kernel
        attn = m.get("verify_attention", m.get("verify_attn"))
        asked = (r.get("extra_env") or {}).get("DDTREE_VERIFY_ATTN", "splitkv")
        want_attn = "splitkv" if asked == "splitkv" else "extend"
        ok = ok and attn == want_attn
        want_kernel = want_conv = None
        if TARGET[0] == "hybrid":
            want_kernel, want_conv = wanted_kernels(r.get("extra_env") or {}, r["budget"])
            ok = ok and kernel == want_kernel and conv == want_conv
        out.append({"server": r["server"], "ok": bool(ok), "branch_nodes": branch, "mean_accept_len": acc,
                    "dflash_mean_accept_len": base, "disable_overlap_schedule": sync, "gdn_tree_kernel": kernel,
                    "conv_tree_kernel": conv, "verify_attention": attn,
                    "acceptance_basis": basis,
                    "what": f"branch nodes {branch}, mean acc len {acc if acc is None else round(acc, 2)} vs "
                            f"DFLASH {base if base is None else round(base, 2)} ({basis}), "
                            f"{'synchronous' if sync else 'overlap'} scheduler, verify attention {attn} "
                            f"(want {want_attn})"
                            + (f", GDN tree kernel {kernel} (want {want_kernel}), tree conv {conv} "
                               f"(want {want_conv})" if want_kernel else "")})
    return out


def pack_logs() -> None:
    try:
        OUT.mkdir(parents=True, exist_ok=True)
        with tarfile.open(OUT / "server_logs.tar.gz", "w:gz") as tf:
            if LOGS.is_dir():
                tf.add(LOGS, arcname="logs")
    except Exception as exc:  # noqa: BLE001
        log(f"could not pack logs: {exc}")


def extend_servers(mk) -> list[Server]:
    """DDTREE with SGLang's prefill kernel and the tree mask as verify attention (DDTREE_VERIFY_ATTN=extend), the
    contrast to the tree split-KV default: eager, and in CUDA graphs."""
    out = [mk("ddtree-b15-g0-extend", "DDTREE", False, 15, oracle=True),
           mk("ddtree-b32-g1-extend", "DDTREE", True, 32, oracle=True)]
    for s in out:
        s.extra_env = {"DDTREE_VERIFY_ATTN": "extend"}
    return out


def schedule_server(mk) -> Server:
    """DDTREE whose verify width follows the live batch (--speculative-ddtree-budget-schedule): the four concurrent
    requests drain 4 -> 1, so one server life verifies with the chain, B=15 and B=32, one CUDA graph set a width,
    and the builder's accept walk (DDTREE_ACCEPT=device, the default) meets every batch size."""
    s = mk("ddtree-sched-g1", "DDTREE", True, 32, oracle=True)
    s.extra_args = ["--speculative-ddtree-budget-schedule", "1:32,3:15,0"]
    return s


def suite_servers(suite: str, graphs: list[bool], budgets: list[int], mk) -> list[Server]:
    """The servers after the plain reference, per suite (names say algo, budget, graphs and variant)."""
    wave2: list[Server] = []
    if suite == "worker":
        for g in graphs:
            wave2.append(mk(f"dflash-g{int(g)}", "DFLASH", g, oracle=True))
            for b in budgets:
                wave2.append(mk(f"ddtree-b{b}-g{int(g)}", "DDTREE", g, b, oracle=True))
        wave2.append(mk("ddtree-b15-g0-random", "DDTREE", False, 15, oracle=False))
        eager = mk("ddtree-b32-g1-eagerverify", "DDTREE", True, 32, oracle=True)
        eager.verify_graph = False
        wave2.append(eager)
        sync = mk("ddtree-b15-g1-sync", "DDTREE", True, 15, oracle=True)
        sync.extra_args = ["--disable-overlap-schedule"]  # the synchronous scheduler must agree too
        wave2.append(sync)
        refprep = mk("ddtree-b15-g0-refprep", "DDTREE", False, 15, oracle=True)
        refprep.extra_env = {"DDTREE_PREP": "reference", "DDTREE_ACCEPT": "torch"}  # host heap + torch walk
        wave2.append(refprep)
        wave2 += extend_servers(mk)
        wave2.append(schedule_server(mk))
        extras = ("ddtree-b15-g0", "ddtree-b32-g1", "dflash-g1")
    elif suite == "hybrid":
        for g in graphs:
            wave2.append(mk(f"dflash-g{int(g)}", "DFLASH", g, oracle=True))
            for b in budgets:
                wave2.append(mk(f"ddtree-b{b}-g{int(g)}", "DDTREE", g, b, oracle=True))
            unsafe = mk(f"ddtree-b15-g{int(g)}-unsafe", "DDTREE", g, 15, oracle=True)
            unsafe.unsafe = True
            wave2.append(unsafe)
        wave2.append(mk("ddtree-b15-g1-random", "DDTREE", True, 15, oracle=False))
        sync = mk("ddtree-b15-g1-sync", "DDTREE", True, 15, oracle=True)
        sync.extra_args = ["--disable-overlap-schedule"]
        wave2.append(sync)
        for b in (15, 32):  # the compact GDN tree kernel is the default: SGLang's own must agree too
            stock = mk(f"ddtree-b{b}-g1-sglanggdn", "DDTREE", True, b, oracle=True)
            stock.extra_env = {"DDTREE_GDN_TREE": "sglang"}
            wave2.append(stock)
        conv = mk("ddtree-b32-g1-sglangconv", "DDTREE", True, 32, oracle=True)  # compact conv: the default
        conv.extra_env = {"DDTREE_CONV_TREE": "sglang"}
        wave2.append(conv)
        wave2 += extend_servers(mk)[-1:]
        # the ancestor matrix derived in every layer's kernel (the shared one a forward is the default)
        derive = mk("ddtree-b32-g1-derive", "DDTREE", True, 32, oracle=True)
        derive.extra_env = {"DDTREE_GDN_ANCESTORS": "derive"}
        wave2.append(derive)
        # 65 nodes with the two-block kernel's block 2 on its own rows (opt-in until this server's H200 run)
        rows = mk("ddtree-b64-g1-rows", "DDTREE", True, 64, oracle=True)
        rows.extra_env = {"DDTREE_GDN_BLOCK2": "rows"}
        wave2.append(rows)
        # 128 nodes verified in log2 stages (DDTREE_GDN_SOLVE=levels16, opt-in until timed on a GPU)
        lv16 = mk("ddtree-b127-g1-lv16", "DDTREE", True, 127, oracle=True)
        lv16.extra_env = {"DDTREE_GDN_SOLVE": "levels16"}
        wave2.append(lv16)
        wave2.append(schedule_server(mk))
        # a DFLASH server of every graphs setting measures SGLang's own logprob noise (logprob_bound): with
        # --graphs on alone there is no dflash-g0, and the bf16 run of 2026-12-01 judged DDTREE by fp32's floor
        extras = ("dflash-g0", "dflash-g1", "ddtree-b15-g0", "ddtree-b32-g1")
    else:  # tp
        wave2 += [mk("dflash-g0", "DFLASH", False, oracle=True), mk("dflash-g1", "DFLASH", True, oracle=True),
                  mk("ddtree-b7-g1", "DDTREE", True, 7, oracle=True),
                  mk("ddtree-b15-g0", "DDTREE", False, 15, oracle=True),
                  mk("ddtree-b32-g1", "DDTREE", True, 32, oracle=True)]
        extras = ("dflash-g0", "ddtree-b15-g0", "ddtree-b32-g1")
    for s in wave2:
        s.extras = s.name in extras
    return wave2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheels", default=str(REPO / ".carry" / "whl"))
    ap.add_argument("--flashinfer-include", default=str(REPO / ".carry" / "flashinfer_include.tar.gz"))
    ap.add_argument("--budgets", default="1,7,15,32,64")
    ap.add_argument("--graphs", default="off,on")
    ap.add_argument("--budget-s", type=float, default=480, help="time for all servers: start, requests, stop")
    ap.add_argument("--weights", choices=("informative", "dummy"), default="informative",
                    help="informative: tests/gpu_standins/informative_weights.py (context-dependent greedy output); "
                         "dummy: SGLang's own (near-uniform logits, a 2-cycle per prompt; runs 1-5)")
    ap.add_argument("--dtype", default="float32",
                    help="model dtype for every server: float32 keeps verify-vs-decode rounding (bf16: ~0.1 nats of "
                         "logprob on the informative model, run 6) far below the greedy margins")
    ap.add_argument("--only", default="", help="comma-separated server names (debugging)")
    ap.add_argument("--max-starting", type=int, default=5,
                    help="servers starting at a time after the plain reference (2026-12-07: 12 started together "
                         "on 16 cores were not up within 100 s)")
    ap.add_argument("--port-base", type=int, default=31000, help="servers listen on port-base + 1, + 2, ...")
    ap.add_argument("--setup-only", action="store_true",
                    help="install the carried wheels into the work dir's site/ and stop (for other GPU scripts)")
    ap.add_argument("--target", choices=("dense", "hybrid"), default="dense",
                    help="hybrid: a tiny Qwen3.5 Gated-DeltaNet target (bf16: the GDN chunk kernel refuses float32)")
    ap.add_argument("--tp", type=int, default=1, help="--tp-size of every server (2 on nvidia-h200-x2)")
    ap.add_argument("--suite", choices=("worker", "hybrid", "tp"), default="worker",
                    help="worker: budgets x graphs + variants (runs 4-10); hybrid: trees on the GDN target with "
                         "the unsafe negative control; tp: a small set for tensor parallelism")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.setup_only:
        site, _env = setup(args)
        print(site)
        return 0
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "argv": sys.argv}
    servers: list[Server] = []
    reference = None
    reqs: list = []
    try:
        try:
            meta["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                                 "--format=csv,noheader"], capture_output=True, text=True,
                                                timeout=20).stdout.strip()
        except Exception as exc:  # noqa: BLE001
            meta["nvidia_smi"] = str(exc)
        import torch  # the machine's torch

        meta["torch"] = torch.__version__
        site, env = setup(args)
        if os.environ.get("DDTREE_E2E_SKIP_OVERLAY") != "1":  # (local dry runs of this script only)
            meta["overlay"] = overlay_install(site, env)
        log("overlay installed")
        TARGET[0], TP[0] = args.target, args.tp
        meta["target"], meta["tp"], meta["suite"] = args.target, args.tp, args.suite
        DTYPE[0] = args.dtype  # also the configs' torch_dtype: run 7's eager DFlash draft pass fed a bf16 tensor
        # (from the draft config's torch_dtype) into float32 weights when only --dtype said float32
        target, draft = make_models(args.weights)
        env["DDTREE_TEST_WEIGHTS"] = args.weights
        if args.dtype == "float32":
            env["DDTREE_TEST_DRAFT_DTYPE_GUARD"] = "1"  # see tests/gpu_standins/draft_dtype_guard.py
        meta["weights"] = args.weights
        meta["dtype"] = args.dtype
        reqs = prompts()
        graphs = [g == "on" for g in args.graphs.split(",") if g]
        budgets = [int(b) for b in args.budgets.split(",") if b]
        port = [args.port_base]

        def mk(name, algo, g, budget=None, oracle=False):
            port[0] += 1
            return Server(name, algo, g, budget, oracle, port[0])

        wave1 = [mk("plain-g0", "plain", False)]  # the reference (and the oracle's source)
        wave1[0].extras = True
        wave2 = suite_servers(args.suite, graphs, budgets, mk)
        if args.only:
            keep = set(args.only.split(","))
            wave1 = [s for s in wave1 if s.name in keep or s.name == "plain-g0"][:1]
            wave2 = [s for s in wave2 if s.name in keep]
        servers = wave1 + wave2
        oracle_path = WORK / "oracle.json"
        reference = run_all(servers, target, draft, env, oracle_path, reqs, args.budget_s, args.max_starting)
        if reference is None:
            raise RuntimeError("no plain server produced reference outputs")
    except Exception as exc:  # noqa: BLE001
        meta["error"] = f"{type(exc).__name__}: {exc}"
        log(f"ERROR {meta['error']}")
    finally:
        for s in servers:
            stop(s)
        pack_logs()
    return report(servers, reference, meta, reqs)


if __name__ == "__main__":
    sys.exit(main())
