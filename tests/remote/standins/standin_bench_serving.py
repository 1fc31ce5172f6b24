#!/usr/bin/env python3
"""STAND-IN for `python -m sglang.benchmark.serving` (no GPU and no real SGLang server here).

Takes the flags `ddtctl tune` passes (--backend sglang --host H --port P --dataset-name random-ids --tokenize-prompt
--random-input-len N --random-output-len N --num-prompts N --max-concurrency C --seed S --output-file F ...,
or --dataset-name custom --dataset-path F --sharegpt-output-len N for a prompt file), and, like the real one:
reads the custom dataset as sglang/benchmark/datasets/custom.py does (JSON lines, `conversations` of
`content`/`value` turns, at least two), sends requests to the server (a few seeded POST /generate calls to the
stand-in server, with `Authorization: Bearer $OPENAI_API_KEY` when that is set, as SGLang's get_auth_headers
does), reads GET /server_info, and appends one JSON line to --output-file with the real benchmark's keys
(`completed`: the prompts used). The figures are deterministic, from what the server reports (its algorithm,
DDTREE budget, dflash block size, and the accepted length in internal_states):

    tokens/s = 100 * sqrt(C) * accept_length / step_cost
    step_cost = 1 + budget * C / 64 (DDTREE), 1 + block_size * C / 128 (other speculative), 1 (none)

so at concurrency 1 the DDTREE budgets 16/32/64 give 231.71/239.60/197.25 tokens/s (32 wins; DFLASH block 16: 222.2),
and at concurrency 8 the smallest budget wins. STANDIN_BENCH_FAIL=1 (in the benchmark's own environment) exits 1.

Run-to-run noise, seeded (for `ddtctl tune --repeats`): `--standin-noise REL --standin-runs FILE` scales the
tokens/s of each run by 1 + REL * u, u uniform in [-1, 1] from a generator seeded with --seed and the number of
runs FILE has counted so far (each run adds a line to it: the same sweep gives the same figures).
"""
import argparse
import json
import math
import os
import random
import sys
import urllib.request


def figures(info: dict, concurrency: int) -> dict:
    algo = str(info.get("speculative_algorithm") or "").upper()
    states = info.get("internal_states") or [{}]
    accept = states[0].get("avg_spec_accept_length") if algo else None
    if algo == "DDTREE":
        cost = 1.0 + float(info.get("speculative_ddtree_budget") or 15) * concurrency / 64.0
    elif algo:
        cost = 1.0 + float(info.get("speculative_dflash_block_size") or 16) * concurrency / 128.0
    else:
        cost = 1.0
    tps = 100.0 * math.sqrt(concurrency) * float(accept or 1.0) / cost
    itl = 1000.0 * concurrency / tps
    ttft = 50.0 + float(info.get("speculative_ddtree_budget") or 0) / 4.0
    return {"output_throughput": tps, "median_itl_ms": itl, "p99_itl_ms": 1.5 * itl, "mean_itl_ms": itl,
            "median_ttft_ms": ttft, "mean_ttft_ms": ttft, "p99_ttft_ms": 2 * ttft, "accept_length": accept}


def noisy(row: dict, args: argparse.Namespace) -> dict:
    """The figures of one run with its seeded noise; counts the run in --standin-runs."""
    try:
        with open(args.standin_runs) as f:
            count = sum(1 for _ in f)
    except FileNotFoundError:
        count = 0
    with open(args.standin_runs, "a") as f:
        f.write(f"{args.max_concurrency}\n")
    factor = 1.0 + args.standin_noise * random.Random(f"{args.seed}-{count}").uniform(-1.0, 1.0)
    itl = row["median_itl_ms"] / factor
    return {"output_throughput": row["output_throughput"] * factor, "median_itl_ms": itl, "mean_itl_ms": itl,
            "p99_itl_ms": 1.5 * itl, "standin_run": count}


def custom_prompts(path: str) -> list[list[int]]:
    """The user turns of SGLang's custom dataset, as token ids: their UTF-8 bytes (no tokenizer here)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            convs = json.loads(line).get("conversations", [])
            if len(convs) >= 2:
                out.append(list(convs[0].get("content", convs[0].get("value", "")).encode()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="sglang")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--dataset-name", default="random")
    ap.add_argument("--random-input-len", type=int, default=512)
    ap.add_argument("--random-output-len", type=int, default=256)
    ap.add_argument("--random-range-ratio", type=float, default=0.0)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-concurrency", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--output-file", required=True)
    ap.add_argument("--tokenizer")
    ap.add_argument("--disable-tqdm", action="store_true")
    ap.add_argument("--dataset-path", default="")
    ap.add_argument("--sharegpt-output-len", type=int)
    ap.add_argument("--standin-noise", type=float, default=0.0)
    ap.add_argument("--standin-runs", default="")
    args, _unknown = ap.parse_known_args()
    if os.environ.get("STANDIN_BENCH_FAIL"):
        print("[standin-bench] failing on purpose (STANDIN_BENCH_FAIL)", flush=True)
        return 1
    base = f"http://{args.host}:{args.port}"
    rng = random.Random(args.seed)
    if args.dataset_name == "custom":
        prompts = custom_prompts(args.dataset_path)[:args.num_prompts]
        output_len = args.sharegpt_output_len or 256
    else:
        prompts = [[rng.randrange(1000, 150000) for _ in range(8)] for _ in range(args.num_prompts)]
        output_len = args.random_output_len
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = "Bearer " + os.environ["OPENAI_API_KEY"]
    completed = 0
    for ids in prompts[:4]:  # really talk to the server (a few requests; it is a stand-in)
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": min(output_len, 4)}}
        req = urllib.request.Request(base + "/generate", json.dumps(body).encode(), headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            completed += bool(json.loads(resp.read()).get("output_ids"))
    auth = {k: v for k, v in headers.items() if k == "Authorization"}  # as SGLang's get_auth_headers()
    with urllib.request.urlopen(urllib.request.Request(base + "/server_info", headers=auth), timeout=10) as resp:
        info = json.loads(resp.read())
    row = {"tag": None, "backend": args.backend, "dataset_name": args.dataset_name, "request_rate": float("inf"),
           "max_concurrency": args.max_concurrency, "random_input_len": args.random_input_len,
           "random_output_len": args.random_output_len, "random_range_ratio": args.random_range_ratio,
           "server_info": info, "duration": 1.0, "completed": len(prompts) if completed else 0,
           "total_output_tokens": args.num_prompts * args.random_output_len, "seed": args.seed, "standin": True}
    row.update(figures(info, args.max_concurrency))
    if args.standin_runs:
        row.update(noisy(row, args))
    with open(args.output_file, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"Output token throughput (tok/s): {row['output_throughput']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
