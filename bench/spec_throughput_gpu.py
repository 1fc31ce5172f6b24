#!/usr/bin/env python3
"""Step cost and tokens/s of plain, DFLASH and DDTREE servers at real model sizes, side by side, in one GPU call
(issue #12). Prints one table with ratios to DFLASH measured in the same call; JSON and the profiler summaries go to
$OUT. Run from the repo root on the lent H200 (python3 = the image's torch), with `.carry/` carried
(tools/fetch_gpu_carry.sh):

    python3 bench/spec_throughput_gpu.py --target qwen3-8b --drafter random,calibrated --budgets 16,64

Targets (SGLang's `--load-format dummy` weights, bf16, CUDA graphs on, a 5-layer DFlash drafter of block 16):
  qwen3-8b    Qwen3-8B's shape (hidden 4096, 36 layers, 32/8 heads, vocab 151936, ~16 GB of weights);
  qwen36-27b  Qwen3.6-27B's shape (Gated-DeltaNet hybrid, 64 layers, full attention every 4th, hidden 5120, vocab
              248320; 50 GB of weights).
One server at a time per GPU, alone on it while measured; `--gpus 0,1,2,3` runs one lane per GPU in parallel (plain
first: its outputs are the calibrated drafter's oracle). `--sync-budgets 16` adds DDTREE servers launched with
--disable-overlap-schedule, to measure what the overlap scheduler is worth.
Drafters (the same for DFLASH and DDTREE):
  random      the dummy drafter: about one token per step, so 1 / throughput is the step time;
  calibrated  the test-only oracle drafter (tests/gpu_standins/oracle_drafter.py) with rank probabilities that put
              DFLASH's mean accepted length in the paper's 6-8 range (DDTREE_TEST_ORACLE_RANK_P), i.i.d. by depth;
  public      the same oracle with public serving's acceptance by depth (tests/gpu_standins/drafter_profiles.py):
              rank 0 with 0.82, 0.76, 0.68, 0.71, 0.77, then 0.75; misses 0.6/0.3/0.1 at ranks 1-3 (DFLASH ~4.1);
  public-flat the same rank 0 by depth, misses 0.4/0.3/0.2 at ranks 1-3 and 0.1 outside the top 4 (sensitivity).
Per server and batch (1, 8, 32 concurrent requests of `--new-tokens` greedy tokens, ignore_eos): wall time of a
measured batch after a warm-up batch, tokens/s, mean accepted length (the server's own spec_accept_length) and
ms/step = wall / verify steps of the slowest request (plain: / tokens).
`--profile` asks SGLang's /start_profile for a few decode steps of one DFLASH and one DDTREE server (batch 1) and
keeps the top kernels/ops by self time, plus GPU time per step by kind (GEMM, attention, GDN, conv, ...) and the
GPU's busy time against the window: the side-by-side table says where DDTREE's extra step time goes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT") or "/tmp/spec-throughput-out")
WORK = Path(os.environ.get("DDTREE_E2E_WORK", "/tmp/spec-throughput"))
os.environ.setdefault("DDTREE_E2E_WORK", str(WORK))

_spec = importlib.util.spec_from_file_location("sglang_e2e_gpu", REPO / "bench" / "sglang_e2e_gpu.py")
e2e = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = e2e
_spec.loader.exec_module(e2e)  # setup / overlay install / http / health / stop: one implementation

CALIBRATED_RANK_P = "0.88,0.08,0.02"  # DFLASH: expected accepted drafts sum(0.88^k, k=1..15) = 6.3, length 7.3
MASK_ID = 151669
# drafters that are the test-only oracle (they need the plain server's continuations): the i.i.d. one and the rank
# profiles by depth of tests/gpu_standins/drafter_profiles.py
sys.path.insert(0, str(REPO / "tests" / "gpu_standins"))
import drafter_profiles  # noqa: E402  (standard library only: the drafter kinds' one home)

sys.path.pop(0)
# the budget schedule's syntax, from the rules' one source of truth (standard library only, loaded by its path: the
# device's python has none of ddtctl's dependencies)
_core_spec = importlib.util.spec_from_file_location("ddtree_core", REPO / "ddtctl" / "rules" / "ddtree" / "core.py")
ddtree_core = importlib.util.module_from_spec(_core_spec)
sys.modules[_core_spec.name] = ddtree_core  # its dataclasses look their module up
_core_spec.loader.exec_module(ddtree_core)
parse_budget_schedule = ddtree_core.parse_budget_schedule
ORACLE_DRAFTERS = drafter_profiles.KINDS
DRAFTERS = ("random",) + ORACLE_DRAFTERS

TARGETS = {
    "qwen3-8b": {
        "target": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
                   "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False},
        "draft_layers": [1, 9, 17, 25, 33], "hybrid": False, "side_by_side": False,
    },
    "qwen36-27b": {
        "target": {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": 5120,
                   "num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
                   "intermediate_size": 17408, "vocab_size": 248320, "tie_word_embeddings": False,
                   "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
                   "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                   "attn_output_gate": True, "partial_rotary_factor": 0.25,
                   "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}},
        "draft_layers": [1, 16, 31, 46, 61], "hybrid": True, "side_by_side": False,
    },
}
COMMON = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000, "max_position_embeddings": 8192,
          "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645, "attention_bias": False,
          "attention_dropout": 0.0, "initializer_range": 0.02, "rope_scaling": None, "use_cache": True}


def log(msg: str) -> None:
    e2e.log(msg)


def make_models(name: str) -> tuple[Path, Path]:
    spec = TARGETS[name]
    target, draft = WORK / "models" / name, WORK / "models" / f"{name}-dflash"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    t = {**COMMON, **spec["target"]}
    (target / "config.json").write_text(json.dumps(t))
    d = {**COMMON, "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 5,
         "hidden_size": t["hidden_size"], "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
         "intermediate_size": t["intermediate_size"], "vocab_size": t["vocab_size"], "tie_word_embeddings": False,
         "block_size": 16, "num_target_layers": t["num_hidden_layers"],
         "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": spec["draft_layers"]}}
    (draft / "config.json").write_text(json.dumps(d))
    return target, draft


@dataclass
class Bench:
    name: str
    algo: str  # plain | DFLASH | DDTREE
    budget: int | None
    drafter: str  # random | calibrated | public | public-flat | - (plain)
    port: int
    proc: subprocess.Popen | None = None
    argv: list = field(default_factory=list)
    status: str = "not run"
    error: str | None = None
    startup_s: float | None = None
    results: dict = field(default_factory=dict)  # batch -> measurement
    profile: list | None = None
    profile_kinds: dict | None = None  # GPU time per step by kind of kernel (kernel_kinds)
    extra_args: list = field(default_factory=list)  # e.g. --disable-overlap-schedule
    extra_env: dict = field(default_factory=dict)  # e.g. DDTREE_GDN_TREE=compact
    # "" | "sync" | "sglanggdn" | "extend" | "compact" | "anc": a DDTREE configuration beside the default
    variant: str = ""
    gdn_tree_kernel: str | None = None  # hybrid DDTREE: what the server's log says it verifies trees with
    gpu: str | None = None  # CUDA_VISIBLE_DEVICES of this server (--gpus lanes)

    @property
    def log_path(self) -> Path:
        return WORK / "logs" / f"{self.name}.log"


def server_argv(b: Bench, target: Path, draft: Path, hybrid: bool, max_bs: int, side_by_side: bool) -> list[str]:
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(target), "--load-format", "dummy",
            "--skip-tokenizer-init", "--attention-backend", "triton", "--sampling-backend", "pytorch",
            "--grammar-backend", "none", "--disable-radix-cache", "--dtype", "bfloat16", "--port", str(b.port),
            "--random-seed", "0", "--cuda-graph-max-bs-decode", str(max_bs), "--max-running-requests", str(max_bs),
            "--disable-prefill-cuda-graph", "--log-level", "info"]
    # side by side: each server's KV pool is capped (tokens), so the fraction is only a load-time margin
    argv += (["--mem-fraction-static", "0.13", "--max-total-tokens", "131072"] if side_by_side
             else ["--mem-fraction-static", os.environ.get("SPEC_MEM_FRACTION", "0.85")])
    if hybrid:
        argv += e2e.HYBRID_FLAGS
    if b.algo != "plain":
        argv += ["--speculative-algorithm", b.algo, "--speculative-draft-model-path", str(draft)]
    if b.algo == "DDTREE" and b.budget:
        argv += ["--speculative-ddtree-budget", str(b.budget)]
    if b.algo == "DDTREE":
        if hybrid:
            argv += ["--speculative-ddtree-shadow-linear"]
    return argv + list(b.extra_args)


def start(b: Bench, target: Path, draft: Path, env: dict, oracle: Path, args, spec: dict) -> None:
    b.port = e2e.free_port(b.port)
    max_bs = min([max(args.batches)] + [n for algo, n in parse_caps(args.max_running) if algo == b.algo])
    b.argv = server_argv(b, target, draft, spec["hybrid"], max_bs, spec["side_by_side"])
    if max_bs < max(args.batches):
        log(f"{b.name}: capped at --max-running-requests {max_bs}: larger batches run in waves")
    e = dict(env)
    if b.gpu is not None:
        e["CUDA_VISIBLE_DEVICES"] = b.gpu
    e["SGLANG_TORCH_PROFILER_DIR"] = str(WORK / "profiles" / b.name)
    if b.algo == "DDTREE":
        e["DDTREE_LOG_INTERVAL"] = os.environ.get("DDTREE_LOG_INTERVAL", "200")  # steps between metrics lines
    e.update(b.extra_env)
    if b.drafter in ORACLE_DRAFTERS:
        if b.drafter != "calibrated":  # a rank profile by draft depth
            e["DDTREE_TEST_ORACLE_DRAFTER"] = b.drafter
        e["DDTREE_TEST_DRAFT_HOOK"] = "oracle_drafter:override"
        e["DDTREE_TEST_ORACLE"] = str(oracle)
        e["DDTREE_TEST_ORACLE_RANK_P"] = args.rank_p
        e["DDTREE_TEST_ORACLE_CALIBRATED"] = "1"  # the drafter's probabilities state its accuracy
        if args.oracle == "device":  # gathers on the GPU, no host sync: the step times measure the algorithms
            e["DDTREE_TEST_ORACLE_DEVICE"] = "1"
    b.log_path.parent.mkdir(parents=True, exist_ok=True)
    b.proc = subprocess.Popen(b.argv, env=e, stdout=open(b.log_path, "w"), stderr=subprocess.STDOUT,
                              start_new_session=True, cwd=WORK)
    b.status = "starting"
    b._t_start = time.monotonic()  # type: ignore[attr-defined]


def parse_caps(spec: str) -> list[tuple[str, int]]:
    """--max-running DFLASH:16[,ALGO:N...]: per-algorithm caps on --max-running-requests (and the decode graphs'
    largest batch). DFLASH's full-state GDN verify scratch for 32 requests of the 27B shape does not fit one H200
    beside the weights (notes/budget-schedule.md), so a batch-32 row at tp 1 needs DFLASH capped; the capped server
    then serves the batch in waves, as a real deployment on that card would."""
    caps = []
    for part in (x for x in spec.split(",") if x):
        algo, _, n = part.partition(":")
        if algo not in ("plain", "DFLASH", "DDTREE") or not n.isdigit() or int(n) < 1:
            raise SystemExit(f"--max-running {spec!r}: want ALGO:N[,ALGO:N] with ALGO plain, DFLASH or DDTREE")
        caps.append((algo, int(n)))
    return caps


def wait_gpu_idle(gpu: str | None, timeout: float = 240.0, below_mib: int = 4000) -> float:
    """Seconds waited until the GPU's used memory is below `below_mib` (the previous server's processes gone):
    a server started while its predecessor still holds the card fails its memory check."""
    if gpu is None:
        return 0.0
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                                   gpu], capture_output=True, text=True, timeout=10).stdout.strip()
            if int(used.splitlines()[0]) < below_mib:
                break
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            break
        time.sleep(1.0)
    return time.monotonic() - t0


def prompts(n: int, vocab: int) -> list[list[int]]:
    import random

    rng = random.Random(4321)
    return [[rng.randrange(1000, min(vocab, 150000)) for _ in range(64)] for _ in range(n)]


def generate(b: Bench, reqs: list[list[int]], new_tokens: int) -> tuple[float, list[dict]]:
    base = f"http://127.0.0.1:{b.port}"

    def one(ids):
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0,
                                                      "ignore_eos": True}}
        return e2e.http("POST", base + "/generate", body, timeout=600)[1]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(reqs)) as ex:
        out = list(ex.map(one, reqs))
    return time.perf_counter() - t0, out


def measure(b: Bench, reqs_all: list[list[int]], batches: list[int], new_tokens: int, repeats: int = 1) -> None:
    """Per batch size: a warm-up batch, then `repeats` measured ones; the last is kept, the earlier ones' tokens/s
    are logged (first_tokens_per_s): a gap between them is a one-time cost, e.g. a kernel compiled per batch size
    as requests finish one by one."""
    for bs in batches:
        reqs = reqs_all[:bs]
        generate(b, reqs, min(new_tokens, 32))  # warm-up (graphs of this batch size, caches)
        first = None
        for _ in range(max(1, repeats) - 1):
            wall, out = generate(b, reqs, new_tokens)
            first = sum(len(r.get("output_ids") or []) for r in out) / wall
            log(f"{b.name} bs={bs}: first measured batch {first:.1f} tok/s")
        wall, out = generate(b, reqs, new_tokens)
        metas = [r.get("meta_info", {}) for r in out]
        steps = [m.get("spec_verify_ct") or len(r.get("output_ids") or []) for m, r in zip(metas, out)]
        acc = [m.get("spec_accept_length") for m in metas if m.get("spec_accept_length")]
        tokens = sum(len(r.get("output_ids") or []) for r in out)
        b.results[bs] = {"wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
                         "steps": max(steps), "ms_per_step": 1000 * wall / max(1, max(steps)),
                         "mean_accept_len": sum(acc) / len(acc) if acc else None,
                         "outputs": [r.get("output_ids") for r in out], "first_tokens_per_s": first}
        log(f"{b.name} bs={bs}: {tokens / wall:.1f} tok/s, {b.results[bs]['ms_per_step']:.2f} ms/step")


def gdn_kernel_of(b: Bench) -> str | None:
    """The worker's log line at its first hybrid decode: "DDTREE hybrid tree verify: <compact|sglang> GDN tree
    kernel"."""
    import re

    try:
        found = re.search(r"DDTREE hybrid tree verify: (\w+) GDN tree kernel", b.log_path.read_text(errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def profile(b: Bench, reqs: list[list[int]], steps: int) -> None:
    """A few decode steps of `reqs` decoding together (the live batch) under SGLang's own torch profiler
    (/start_profile), summarised by self CUDA time; the profiler starts while they decode, so no prefill lands in
    the window."""
    base = f"http://127.0.0.1:{b.port}"
    trace_dir = WORK / "profiles" / b.name
    try:
        # decode steps only: the request is past its prefill when the profiler starts
        load = threading.Thread(target=generate, args=(b, reqs, 600), daemon=True)
        load.start()
        time.sleep(1.5)
        e2e.http("POST", base + "/start_profile", {"output_dir": str(trace_dir), "num_steps": steps,
                                                  "activities": ["CPU", "GPU"]}, timeout=60)
        load.join(timeout=120)
        time.sleep(2)
        b.profile = summarise_traces(trace_dir)
        b.profile_kinds = kernel_kinds(trace_dir, steps)
    except Exception as exc:  # noqa: BLE001
        b.profile = [{"error": f"{type(exc).__name__}: {exc}"}]


TRACE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cpu_op")  # device work, and the torch ops that launch it


def summarise_traces(trace_dir: Path, top: int = 40) -> list[dict]:
    """Top GPU kernels / memcpys and torch CPU ops by total duration over the chrome traces SGLang wrote (gzipped
    or not); Python frames and annotations (which nest everything) are left out."""
    import gzip

    totals: dict[tuple[str, str], list[float]] = {}
    for path in sorted(trace_dir.rglob("*.json*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            doc = json.load(f)
        for ev in doc.get("traceEvents", []) if isinstance(doc, dict) else doc:
            if ev.get("ph") != "X" or "dur" not in ev or ev.get("cat") not in TRACE_CATS:
                continue
            key = (str(ev.get("cat", "")), str(ev.get("name", ""))[:90])
            slot = totals.setdefault(key, [0.0, 0])
            slot[0] += float(ev["dur"])
            slot[1] += 1
    rows = [{"cat": c, "name": n, "total_us": t, "count": k} for (c, n), (t, k) in totals.items()]
    rows.sort(key=lambda r: -r["total_us"])
    return rows[:top]


# What a GPU kernel is, by its name (first match wins): the step's cost by kind, DFLASH beside DDTREE
KERNEL_KINDS = (
    ("gemm", r"nvjet|gemm|cutlass|splitKreduce|cublas|sm90_xmma"),
    ("gdn", r"delta_rule|gdn"),
    ("conv", r"conv"),
    ("attention", r"_fwd_kernel|attn|attention|prefix_partials|tree_combine|flash|merge_state|decode_kernel|fmha"),
    ("ddtree prep", r"_build_kernel|_compile_kernel|_follow_kernel|_move_chain_rows|_tree_parents"),
    ("norm", r"norm|MeanOps"),
    ("sample/topk", r"topk|sort|softmax|argmax|sampling|radix|scan|cumsum"),
    ("copy/elementwise", r"elementwise|copy|memcpy|memset|fill|index|scatter|gather|cat_|Memcpy|Memset"),
)


def kernel_kind(name: str) -> str:
    import re

    return next((kind for kind, pattern in KERNEL_KINDS if re.search(pattern, name)), "other")


def kernel_kinds(trace_dir: Path, steps: int) -> dict:
    """GPU time per step (us) by kind of kernel, and the GPU's busy time (overlapping kernels of several streams
    counted once) against the window from the first kernel's start to the last one's end, per step."""
    import gzip

    per_kind: dict[str, float] = {}
    spans: list[tuple[float, float]] = []
    files = 0
    for path in sorted(trace_dir.rglob("*.json*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            doc = json.load(f)
        events = [ev for ev in (doc.get("traceEvents", []) if isinstance(doc, dict) else doc)
                  if ev.get("ph") == "X" and ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in ev]
        if not events:
            continue
        files += 1  # one trace per TP rank: per-step figures are per rank
        for ev in events:
            kind = kernel_kind(str(ev.get("name", ""))) if ev["cat"] == "kernel" else "copy/elementwise"
            per_kind[kind] = per_kind.get(kind, 0.0) + float(ev["dur"])
            spans.append((float(ev.get("ts", 0.0)), float(ev.get("ts", 0.0)) + float(ev["dur"])))
    spans.sort()
    busy, window, end = 0.0, 0.0, None
    for start, stop in spans:
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    if spans:
        window = max(stop for _, stop in spans) - spans[0][0]
    per = max(1, steps) * max(1, files)
    return {"steps": steps, "ranks": files, "kinds": {k: v / per for k, v in per_kind.items()},
            "busy_us": busy / per, "window_us": window / per}


def kinds_table(benches: list[Bench]) -> str:
    """The profiled servers side by side: ms per step by kernel kind, GPU busy and the trace window."""
    cols = [b for b in benches if b.profile_kinds]
    if not cols:
        return ""
    kinds = [k for k, _ in KERNEL_KINDS] + ["other"]
    width = max(14, *(len(b.name) for b in cols))
    lines = [f"{'ms per step':<18}" + "".join(f"{b.name:>{width + 2}}" for b in cols),
             "-" * (18 + (width + 2) * len(cols))]
    for kind in kinds:
        values = [b.profile_kinds["kinds"].get(kind, 0.0) / 1000 for b in cols]
        if any(values):
            lines.append(f"{kind:<18}" + "".join(f"{v:>{width + 2}.2f}" for v in values))
    for label, key in (("GPU busy", "busy_us"), ("trace window", "window_us")):
        lines.append(f"{label:<18}" + "".join(f"{b.profile_kinds[key] / 1000:>{width + 2}.2f}" for b in cols))
    gdn = gdn_vs_dflash(cols)
    if gdn:
        lines.append("GDN time a step vs DFLASH's (#30: <= 1.2 x): "
                     + ", ".join(f"{name} {ratio:.3f}" for name, ratio in gdn.items()))
    return "\n".join(lines)


def gdn_vs_dflash(cols: list[Bench]) -> dict[str, float]:
    """Each profiled DDTREE server's GDN kernel time a step over the DFLASH server's of the same drafter (hybrid
    targets only: where DFLASH ran GDN kernels)."""
    base = {b.drafter: b.profile_kinds["kinds"].get("gdn", 0.0) for b in cols if b.algo == "DFLASH"}
    return {b.name: b.profile_kinds["kinds"].get("gdn", 0.0) / base[b.drafter] for b in cols
            if b.algo == "DDTREE" and base.get(b.drafter)}


def profiled(b: Bench, args) -> bool:
    """DFLASH and the first budget's DDTREE servers (every variant of it) of the first drafter; with
    --profile-sched, the schedule's server too"""
    drafter, budget = args.drafter.split(",")[0], next((x for x in args.budgets.split(",") if x), None)
    if b.drafter != drafter:
        return False
    if b.algo == "DFLASH":
        return not b.variant
    if b.variant == "sched":
        return b.algo == "DDTREE" and bool(getattr(args, "profile_sched", False))
    return b.algo == "DDTREE" and budget is not None and b.budget == int(budget)


def ratios(benches: list[Bench]) -> list[dict]:
    """One row per (server, batch): tokens/s and ms/step, with ratios to the DFLASH server of the same drafter."""
    dflash = {(b.drafter, bs): r for b in benches if b.algo == "DFLASH" and not b.variant
              for bs, r in b.results.items()}
    # step cost of each configuration with the random drafter (no test hook in the loop), by (algo, budget, variant)
    step = {(b.algo, b.budget, b.variant, bs): r["ms_per_step"] for b in benches if b.drafter == "random"
            for bs, r in b.results.items()}
    rows = []
    for b in benches:
        for bs, r in sorted(b.results.items()):
            ref = dflash.get((b.drafter, bs))
            row = {"server": b.name, "algo": b.algo, "budget": b.budget, "drafter": b.drafter, "batch": bs,
                   "tokens_per_s": r["tokens_per_s"], "ms_per_step": r["ms_per_step"],
                   "mean_accept_len": r["mean_accept_len"],
                   "speed_vs_dflash": (r["tokens_per_s"] / ref["tokens_per_s"]) if ref else None,
                   "step_vs_dflash": (r["ms_per_step"] / ref["ms_per_step"]) if ref else None,
                   "projected_vs_dflash": None}
            # calibrated drafter: its accepted length over the random drafter's step time of the same server kind,
            # against DFLASH's. The test-only oracle hook runs per request on the host inside each step, which the
            # measured ratio pays and a real drafter does not.
            if b.drafter in ORACLE_DRAFTERS and ref and r["mean_accept_len"] and ref["mean_accept_len"]:
                mine = step.get((b.algo, b.budget, b.variant, bs))
                base = step.get(("DFLASH", None, "", bs))
                if mine and base:
                    row["projected_vs_dflash"] = (r["mean_accept_len"] / mine) / (ref["mean_accept_len"] / base)
            rows.append(row)
    return rows


def agreement(benches: list[Bench]) -> str:
    """Per DDTREE server and batch: how many requests decoded exactly DFLASH's output (the same drafter)."""
    ref = {(b.drafter, bs): r.get("outputs") for b in benches if b.algo == "DFLASH" and not b.variant
           for bs, r in b.results.items()}
    parts = []
    for b in benches:
        for bs, r in sorted(b.results.items()):
            theirs, mine = ref.get((b.drafter, bs)), r.get("outputs")
            if b.algo == "DDTREE" and theirs and mine:
                parts.append(f"{b.name}@{bs} {sum(x == y for x, y in zip(mine, theirs))}/{len(mine)}")
    return ", ".join(parts)


def table(rows: list[dict], meta: dict) -> str:
    hdr = (f"{'server':<28} {'drafter':<10} {'batch':>5} {'tok/s':>9} {'ms/step':>8} {'acc_len':>7} "
           f"{'tok/s vs DFLASH':>15} {'step vs DFLASH':>14} {'projected':>9}")
    lines = [f"# {meta.get('date')} {meta.get('nvidia_smi')} target={meta.get('target')}", hdr, "-" * len(hdr)]
    for r in rows:
        f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
        lines.append(f"{r['server']:<28} {r['drafter']:<10} {r['batch']:>5} {f(r['tokens_per_s'], '.1f'):>9} "
                     f"{f(r['ms_per_step'], '.2f'):>8} {f(r['mean_accept_len'], '.2f'):>7} "
                     f"{f(r['speed_vs_dflash'], '.3f'):>15} {f(r['step_vs_dflash'], '.3f'):>14} "
                     f"{f(r.get('projected_vs_dflash'), '.3f'):>9}")
    return "\n".join(lines)


def copy_server_logs(benches: list[Bench], dest: Path, lines: int = 3000) -> list[Path]:
    """This run's server logs (their last `lines` lines: start-up, hook and metrics lines included), for
    post-mortems. Only this run's: a machine kept warm still holds the logs of earlier calls in WORK."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for path in (p for b in benches for p in (b.log_path, b.log_path.with_suffix(".first.log"))):
        if path.is_file():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            written.append(dest / path.name)
            written[-1].write_text("\n".join(tail) + "\n")
    return written


def parse_env_variant(spec: str) -> tuple[str, str, dict]:
    """NAME:BUDGETS:KEY=VALUE[;KEY=VALUE...], e.g.
    sglangconv-anc:64:DDTREE_CONV_TREE=sglang;DDTREE_GDN_ANCESTORS=shared"""
    try:
        name, budgets, assignments = spec.split(":", 2)
        env = dict(a.split("=", 1) for a in assignments.split(";") if a)
    except ValueError:
        raise SystemExit(f"--env-variant {spec!r}: want NAME:BUDGETS:KEY=VALUE[;KEY=VALUE...]") from None
    if not name or not env or not all(k.startswith("DDTREE_") for k in env):
        raise SystemExit(f"--env-variant {spec!r}: a name and DDTREE_* switches are needed")
    return budgets, name, env


def plan(args) -> list[Bench]:
    port = [args.port_base]
    out = []

    def mk(name, algo, budget, drafter):
        port[0] += 1
        out.append(Bench(name, algo, budget, drafter, port[0]))

    if not getattr(args, "skip_plain", False) or set(args.drafter.split(",")) & set(ORACLE_DRAFTERS):
        mk("plain", "plain", None, "-")  # the calibrated drafter's oracle (and plain's step time)
    schedule = getattr(args, "budget_schedule", "")
    widest = None
    if schedule:
        try:
            widest = max(b for _, b in parse_budget_schedule(schedule)) or None  # none: a chain-only schedule
        except ValueError as err:
            raise SystemExit(f"--budget-schedule {schedule!r}: {err}") from None
    for drafter in args.drafter.split(","):
        mk(f"dflash-{drafter}", "DFLASH", None, drafter)
        if schedule:  # right after DFLASH: a DDTREE server whose verify width follows the live batch
            mk(f"ddtree-sched-{drafter}", "DDTREE", widest, drafter)
            out[-1].extra_args = ["--speculative-ddtree-budget-schedule", schedule]
            out[-1].variant = "sched"
        for budget in (int(x) for x in args.budgets.split(",") if x):
            mk(f"ddtree-b{budget}-{drafter}", "DDTREE", budget, drafter)
    for budget in (int(x) for x in args.sync_budgets.split(",") if x):  # the synchronous scheduler, for contrast
        mk(f"ddtree-b{budget}-random-sync", "DDTREE", budget, "random")
        out[-1].extra_args = ["--disable-overlap-schedule"]
        out[-1].variant = "sync"
    variants = (  # (budgets, name, server env): DDTREE configurations beside the default, per drafter
        (args.sglang_gdn_budgets, "sglanggdn", {"DDTREE_GDN_TREE": "sglang"}),  # hybrid: SGLang's GDN kernel
        (args.extend_budgets, "extend", {"DDTREE_VERIFY_ATTN": "extend"}),  # SGLang's prefill kernel, tree mask
        (args.compact_budgets, "compact", {"DDTREE_GDN_TREE": "compact", "DDTREE_CONV_TREE": "compact"}),
        (args.anc_budgets, "anc", {"DDTREE_GDN_ANCESTORS": "shared"}),  # hybrid: one ancestor matrix a forward
        (args.derive_budgets, "derive", {"DDTREE_GDN_ANCESTORS": "derive"}),  # hybrid: per layer
    )
    for spec in getattr(args, "env_variant", None) or []:
        variants += (parse_env_variant(spec),)
    for drafter in args.drafter.split(","):
        for budgets, variant, env in variants:
            for budget in (int(x) for x in budgets.split(",") if x):
                mk(f"ddtree-b{budget}-{drafter}-{variant}", "DDTREE", budget, drafter)
                out[-1].extra_env, out[-1].variant = dict(env), variant
    if args.servers:  # in the order named, plain first: a call that runs out of time loses the last ones
        named = [x for x in args.servers.split(",") if x]
        unknown = sorted(set(named) - {b.name for b in out})
        if unknown:
            raise SystemExit(f"--servers {','.join(unknown)}: not planned by these options; planned: "
                             f"{', '.join(b.name for b in out)}")
        out = [b for b in out if b.algo == "plain"] + sorted(
            (b for b in out if b.name in named and b.algo != "plain"), key=lambda b: named.index(b.name))
    return out


def run_order(benches: list[Bench], args) -> list[Bench]:
    """The order servers start in (one at a time per GPU): --servers' own order when given (plan keeps it);
    otherwise plain first (the oracle drafters' source), then the random drafter's servers, the oracle drafters'
    last."""
    if args.servers:
        return list(benches)
    return sorted(benches, key=lambda b: (b.algo != "plain", b.drafter in ORACLE_DRAFTERS))


# a start-up that ran out of GPU memory on a GPU found idle fails the same way again: no second start
MEMORY_FAILURES = ("CUDA out of memory", "OutOfMemoryError", "Not enough memory",
                   "leave no GPU memory", "Not enough GPU memory")


def failed_for_memory(log_text: str) -> bool:
    return any(m in log_text for m in MEMORY_FAILURES)


def skip_rest(queue: list[Bench], reason: str) -> None:
    """Every server not yet started is skipped, for `reason` (the queue is emptied)."""
    for b in queue:
        b.status, b.error = "skipped", reason
    queue.clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=sorted(TARGETS), default="qwen3-8b")
    ap.add_argument("--drafter", default="random,calibrated")
    ap.add_argument("--budgets", default="8,16,32,64")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--servers", default="", help="only these server names (plain always runs: the oracle's source)")
    ap.add_argument("--rank-p", default=CALIBRATED_RANK_P)
    ap.add_argument("--oracle", choices=("device", "host"), default="device",
                    help="the calibrated drafter's implementation: device (gathers, no host sync) or host (the "
                    "Python oracle of the 2026-11-30 rows, ~3-6 ms a step)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-batch", type=int, default=1, help="requests decoding together while profiled")
    ap.add_argument("--repeats", type=int, default=1, help="measured batches per batch size (the last is kept)")
    ap.add_argument("--profile-sched", action="store_true", help="profile the --budget-schedule server too")
    ap.add_argument("--port-base", type=int, default=30000)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--gpus", default="", help="comma-separated GPU ids: one server at a time per GPU, run in "
                    "parallel lanes (each server alone on its GPU while measured)")
    ap.add_argument("--server-s", type=float, default=110, help="do not start a server with less time than this left")
    ap.add_argument("--skip-plain", action="store_true", help="no plain server (random drafters only)")
    ap.add_argument("--stop-on-memory", action="store_true",
                    help="after a server runs out of GPU memory at start-up, start no other (a shape that does "
                    "not fit the card: the call's time goes to what the caller runs next)")
    ap.add_argument("--sync-budgets", default="", help="DDTREE budgets also run with --disable-overlap-schedule")
    ap.add_argument("--sglang-gdn-budgets", default="",
                    help="hybrid targets: DDTREE budgets also run with SGLang's GDN tree kernel "
                    "(DDTREE_GDN_TREE=sglang) instead of the compact default (ddtctl/kernels/gdn_tree.py)")
    ap.add_argument("--extend-budgets", default="",
                    help="DDTREE budgets also run with SGLang's prefill kernel and the tree mask as verify attention "
                    "(DDTREE_VERIFY_ATTN=extend) instead of the tree split-KV default (ddtctl/kernels/tree_attn.py)")
    ap.add_argument("--compact-budgets", default="",
                    help="hybrid targets: DDTREE budgets also run with both compact kernels named "
                    "(DDTREE_GDN_TREE=compact and DDTREE_CONV_TREE=compact: the GDN tree verify and the "
                    "tree conv); both are the payload's defaults, so this variant runs what the plain "
                    "DDTREE servers run")
    ap.add_argument("--anc-budgets", default="",
                    help="hybrid targets: DDTREE budgets also run with the compact GDN verify's ancestor matrix "
                    "built once per verify forward for all layers named (DDTREE_GDN_ANCESTORS=shared; the "
                    "payload's default since 2026-12-01, so this variant runs what the plain DDTREE servers run)")
    ap.add_argument("--derive-budgets", default="",
                    help="hybrid targets: DDTREE budgets also run with the ancestor matrix derived in every GDN "
                    "layer's kernel call (DDTREE_GDN_ANCESTORS=derive), the contrast to the shared default")
    ap.add_argument("--env-variant", action="append", default=[], metavar="NAME:BUDGETS:KEY=VALUE[;...]",
                    help="DDTREE budgets also run with these payload switches, e.g. "
                    "sglangconv-anc:64:DDTREE_CONV_TREE=sglang;DDTREE_GDN_ANCESTORS=shared (repeatable)")
    ap.add_argument("--budget-schedule", default="", metavar="MAX_BS:BUDGET,...,BUDGET",
                    help="also run, per drafter, a DDTREE server (ddtree-sched-<drafter>) with "
                    "--speculative-ddtree-budget-schedule, e.g. 2:127,4:64,8:16,0: its verify width follows the live "
                    "batch (0: the chain), beside the fixed budgets")
    ap.add_argument("--max-running", default="", metavar="ALGO:N[,ALGO:N]",
                    help="cap --max-running-requests per algorithm, e.g. DFLASH:16 (see parse_caps)")
    ap.add_argument("--wheels", default=str(REPO / ".carry" / "whl"))
    ap.add_argument("--flashinfer-include", default=str(REPO / ".carry" / "flashinfer_include.tar.gz"))
    args = ap.parse_args()
    args.batches = [int(x) for x in str(args.batches).split(",") if x]
    parse_caps(args.max_running)
    unknown = [d for d in args.drafter.split(",") if d not in DRAFTERS]
    if unknown:
        raise SystemExit(f"--drafter {','.join(unknown)}: unknown; want a comma list of {', '.join(DRAFTERS)}")
    deadline = time.monotonic() + args.budget_s
    spec = TARGETS[args.target]
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "argv": sys.argv, "target": args.target}
    try:
        meta["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        meta["nvidia_smi"] = str(exc)
    benches = plan(args)
    WORK.mkdir(parents=True, exist_ok=True)
    oracle = WORK / "oracle.json"
    gpus = [g for g in args.gpus.split(",") if g] or [None]
    try:
        site, env = e2e.setup(args)
        e2e.overlay_install(site, env)
        target, draft = make_models(args.target)
        vocab = spec["target"]["vocab_size"]
        reqs = prompts(max(args.batches), vocab)
        queue = run_order(benches, args)
        lock, oracle_ready = threading.Lock(), threading.Event()

        def lane(gpu):
            while True:
                with lock:
                    if not queue:
                        return
                    b = queue.pop(0)
                if deadline - time.monotonic() < args.server_s:
                    b.status, b.error = "skipped", "no time left in this call"
                    continue
                b.gpu = gpu
                waited = wait_gpu_idle(gpu)
                if waited > 1:
                    log(f"{b.name}: waited {waited:.0f}s for GPU {gpu} to be released")
                start(b, target, draft, env, oracle, args, spec)
                try:
                    healthy = e2e.wait_healthy(b, deadline - 20)  # same health loop as the e2e script
                    if not healthy and b.status == "died" and deadline - time.monotonic() > args.server_s \
                            and not failed_for_memory(b.log_path.read_text(errors="replace")):
                        log(f"{b.name}: died at start-up, once more: {b.error}")
                        (WORK / "logs" / f"{b.name}.first.log").write_text(b.log_path.read_text(errors="replace"))
                        wait_gpu_idle(gpu)
                        start(b, target, draft, env, oracle, args, spec)
                        healthy = e2e.wait_healthy(b, deadline - 20)
                    if not healthy:
                        log(f"{b.name}: {b.status} {b.error}")
                        if args.stop_on_memory and b.status == "died" and \
                                failed_for_memory(b.log_path.read_text(errors="replace")):
                            with lock:
                                skip_rest(queue, f"{b.name} ran out of GPU memory at start-up (--stop-on-memory)")
                        continue
                    log(f"{b.name} healthy after {b.startup_s:.0f}s on GPU {gpu}")
                    if b.algo == "plain":  # the reference continuations: the calibrated drafter's oracle
                        _, out = generate(b, reqs, args.new_tokens + 40)
                        seqs = {",".join(map(str, ids)): ids + r.get("output_ids", []) for ids, r in zip(reqs, out)}
                        oracle.write_text(json.dumps({"sequences": seqs}))
                        oracle_ready.set()
                    elif b.drafter in ORACLE_DRAFTERS and not oracle_ready.wait(max(0.0, deadline - time.monotonic())):
                        b.status, b.error = "skipped", "the plain server's oracle never came"
                        continue
                    measure(b, reqs, args.batches, args.new_tokens, args.repeats)
                    b.gdn_tree_kernel = gdn_kernel_of(b)
                    if args.profile and profiled(b, args):
                        profile(b, reqs[: args.profile_batch], 5)
                    b.status = "done"
                except Exception as exc:  # noqa: BLE001
                    b.status, b.error = "error", f"{type(exc).__name__}: {exc}"
                    log(f"{b.name}: {b.error}")
                finally:
                    e2e.stop(b)

        threads = [threading.Thread(target=lane, args=(g,), daemon=True) for g in gpus]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(1.0, deadline - time.monotonic()))
    except Exception as exc:  # noqa: BLE001
        meta["error"] = f"{type(exc).__name__}: {exc}"
        log(f"ERROR {meta['error']}")
    finally:
        for b in benches:
            e2e.stop(b)
    rows = ratios(benches)
    text = table(rows, meta)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "spec_throughput.json").write_text(json.dumps(
        {"meta": meta, "rows": rows, "servers": [{"name": b.name, "status": b.status, "error": b.error,
                                                  "startup_s": b.startup_s, "argv": b.argv, "profile": b.profile,
                                                  "profile_kinds": b.profile_kinds,
                                                  "gdn_tree_kernel": b.gdn_tree_kernel,
                                                  "results": b.results} for b in benches]}, default=str))
    (OUT / "spec_throughput_table.txt").write_text(text + "\n")
    copy_server_logs(benches, OUT / "server_logs")
    print("\n" + text, flush=True)
    for b in benches:
        if b.profile:
            print(f"\nprofile {b.name} (top ops by total duration, us):", flush=True)
            for p in b.profile[:30]:
                print(f"  {p.get('total_us', 0):>12.0f} {p.get('count', 0):>6} {p.get('cat', '')[:12]:<12} "
                      f"{p.get('name', p.get('error', ''))}", flush=True)
    by_kind = kinds_table(benches)
    if by_kind:
        print("\nGPU time per step by kind of kernel (profiled steps; busy = any kernel running):\n" + by_kind,
              flush=True)
    same = agreement(benches)
    if same:
        print("\nrequests whose output equals DFLASH's (same drafter and batch; bf16 ties may part them): " + same,
              flush=True)
    kernels = {b.name: b.gdn_tree_kernel for b in benches if b.gdn_tree_kernel}
    if kernels:
        print("GDN tree kernel: " + ", ".join(f"{k}={v}" for k, v in kernels.items()), flush=True)
    bad = [b.name for b in benches if b.status != "done"]
    print(f"\nSERVERS: {len(benches) - len(bad)}/{len(benches)} measured" + (f" (not: {', '.join(bad)})" if bad
                                                                          else ""), flush=True)
    return 1 if bad or meta.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
