#!/usr/bin/env python3
"""STAND-IN for `python -m sglang.launch_server` (no GPU here, so no real SGLang server can run).

Takes the same argv, serves GET /health and GET /get_server_info (the parsed argv, dest-keyed like SGLang's
server_args) on --host/--port. Knobs (environment, set through the profile's `env:`):
    STANDIN_HEALTH=fail        /health always answers 503 (a server that never becomes healthy)
    STANDIN_READY_AFTER_S=1.5  /health answers 503 until that many seconds after start
    STANDIN_EXIT=3             exit with that status right after start (a server that crashes)
    STANDIN_IGNORE_SIGTERM=1   ignore SIGTERM (stop must escalate to SIGKILL)
    STANDIN_SERVE=key=value    report `key` as `value` in /get_server_info (a server that runs something else)
    STANDIN_PRINT_ENV=NAME     print NAME=value of that environment variable at start (a server logging a secret)
    STANDIN_EXIT_IF=key=value  exit with status 3 at start when argv has `key` (dest) = `value` (one point of a
                               `ddtctl tune` sweep that fails to start)
With a speculative algorithm, /get_server_info also carries `internal_states` as SGLang's scheduler reports it: an
`avg_spec_accept_length` that depends on the algorithm and the DDTREE budget (accept_length() below), plus DDTREE's
own `ddtree` metrics; tests/remote/standins/standin_bench_serving.py turns it into benchmark figures.
POST /generate ({"input_ids": [...], "sampling_params": {"max_new_tokens": N}}) answers `output_ids`: a fixed
function of the prompt, the same whatever the algorithm (as greedy decoding must be), so bench/deploy_gpu.py's CPU
rehearsal can compare a deployed server's outputs with a plain one's. STANDIN_GENERATE_SALT=x changes that function.
Launched with --api-key, POST /generate and GET /get_server_info answer 401 without `Authorization: Bearer KEY`,
as SGLang's middleware does (its NORMAL auth level; /health stays open).
For SGLang's own benchmark (`python -m sglang.benchmark.serving --backend sglang`, which bench/deploy_gpu.py's CPU
rehearsal of `ddtctl tune` runs for real): GET /v1/models and /model_info; POST /generate also takes `text` (words
`t<id>` are token ids, as the rehearsal's tokenizer writes them; other text: its UTF-8 bytes) and, with
`"stream": true`, answers server-sent events as SGLang does (cumulative `text`, `output_ids`, `meta_info` with
`completion_tokens`, then `data: [DONE]`). STANDIN_STEP_MS=20 paces that stream like a speculative decoder: each step
emits the accepted length's worth of tokens and takes 20 ms times the step cost of
tests/remote/standins/standin_bench_serving.py (1 + budget / 64 for DDTREE, 1 + block / 128 for other algorithms).
Non-zero --node-rank processes serve no HTTP (as in SGLang multi-node) and just run until stopped.
"""
import json
import os
import re
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse(argv):
    args, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("--"):
            i += 1
            continue
        key, _, inline = a[2:].partition("=")
        dest = key.replace("-", "_")
        if inline:
            args[dest] = coerce(inline)
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            args[dest] = coerce(argv[i + 1])
            i += 2
        else:
            args[dest] = True
            i += 1
    return args


def coerce(v):
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


def continuation(ids, n, salt=""):
    """`n` token ids after `ids`: each a hash of the last 8 ids (a deterministic stand-in for greedy decoding)."""
    import hashlib

    seq, out = list(ids), []
    for _ in range(n):
        h = hashlib.blake2b((salt + ",".join(map(str, seq[-8:]))).encode(), digest_size=8).digest()
        tok = 1000 + int.from_bytes(h, "little") % 150000
        out.append(tok)
        seq.append(tok)
    return out


def accept_length(args):
    """The stand-in's mean accepted length: DDTREE 1 + 3 (1 - exp(-budget / 16)), DFLASH 2.5, else None."""
    import math

    algo = str(args.get("speculative_algorithm") or "").upper()
    if algo == "DDTREE":
        return 1.0 + 3.0 * (1.0 - math.exp(-float(args.get("speculative_ddtree_budget") or 15) / 16.0))
    if algo:
        return 2.5
    return None


def prompt_ids(body):
    """The request's token ids: `input_ids`, or `text` read back as the rehearsal's tokenizer writes ids."""
    if body.get("input_ids") is not None:
        return list(body["input_ids"])
    text = str(body.get("text") or "")
    words = text.split()
    if words and all(re.fullmatch(r"t\d+", w) for w in words):
        return [int(w[1:]) for w in words]
    return list(text.encode())


def step_cost(args):
    """A decode step's cost relative to a plain one (standin_bench_serving.py's formula, at concurrency 1)."""
    algo = str(args.get("speculative_algorithm") or "").upper()
    if algo == "DDTREE":
        return 1.0 + float(args.get("speculative_ddtree_budget") or 15) / 64.0
    if algo:
        return 1.0 + float(args.get("speculative_dflash_block_size") or 16) / 128.0
    return 1.0


def stream_events(args, ids, out):
    """SGLang's /generate stream for `out` (cumulative text; paced by STANDIN_STEP_MS): (delay_s, event bytes)."""
    accept = accept_length(args) or 1.0
    step_s = float(os.environ.get("STANDIN_STEP_MS") or 0) / 1000.0 * step_cost(args)
    sent, credit = 0, 0.0
    while sent < len(out):
        credit += accept
        take = max(1, min(len(out) - sent, int(credit)))
        credit -= take
        sent += take
        meta = {"completion_tokens": sent, "prompt_tokens": len(ids)}
        if args.get("speculative_algorithm"):
            meta["spec_accept_length"] = accept
        event = {"text": " ".join(f"t{t}" for t in out[:sent]), "output_ids": out[:sent], "meta_info": meta}
        yield step_s, b"data: " + json.dumps(event).encode() + b"\n\n"
    yield 0.0, b"data: [DONE]\n\n"


def send_stream(handler, args, ids, out):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    for delay, event in stream_events(args, ids, out):
        time.sleep(delay)
        handler.wfile.write(event)
        handler.wfile.flush()


def model_info(args, path):
    """GET /v1/models (the served model, as the benchmark reads its name) or /model_info."""
    model = str(args.get("served_model_name") or args.get("model_path") or "standin")
    if path == "/v1/models":
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "sglang", "root": model,
                                            "max_model_len": 4096}]}
    tokenizer = args.get("tokenizer_path") or args.get("model_path")
    return {"model_path": args.get("model_path"), "tokenizer_path": tokenizer, "is_generation": True}


def main():
    argv = sys.argv[1:]
    args = parse(argv)
    started = time.time()
    print(f"[standin] pid {os.getpid()} argv {json.dumps(argv)}", flush=True)
    print(f"[standin] cwd {os.getcwd()} release {os.environ.get('DDTCTL_RELEASE')}", flush=True)
    if os.environ.get("STANDIN_PRINT_ENV"):
        name = os.environ["STANDIN_PRINT_ENV"]
        print(f"[standin] {name}={os.environ.get(name)}", flush=True)
    if os.environ.get("STANDIN_EXIT"):
        print("[standin] crashing on purpose (STANDIN_EXIT)", flush=True)
        sys.exit(int(os.environ["STANDIN_EXIT"]))
    if os.environ.get("STANDIN_EXIT_IF"):
        key, _, value = os.environ["STANDIN_EXIT_IF"].partition("=")
        if str(args.get(key)) == value:
            print(f"[standin] crashing on purpose (STANDIN_EXIT_IF {key}={value})", flush=True)
            sys.exit(3)
    if os.environ.get("STANDIN_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, lambda *a: print("[standin] ignoring SIGTERM", flush=True))
    else:
        signal.signal(signal.SIGTERM, lambda *a: (print("[standin] SIGTERM, exiting", flush=True), os._exit(0)))
    if int(args.get("node_rank", 0) or 0) != 0:
        print(f"[standin] node rank {args['node_rank']} of {args.get('nnodes')}: no HTTP server", flush=True)
        while True:
            time.sleep(1)
    if os.environ.get("STANDIN_SERVE"):
        key, _, value = os.environ["STANDIN_SERVE"].partition("=")
        args[key] = coerce(value)
    ready_after = float(os.environ.get("STANDIN_READY_AFTER_S", "0"))
    fail = os.environ.get("STANDIN_HEALTH") == "fail"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            print("[standin] " + fmt % a, flush=True)

        def _send(self, code, body=b""):
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            healthy = not fail and time.time() - started >= ready_after
            if self.path == "/health":
                self._send(200 if healthy else 503)
            elif self.path in ("/v1/models", "/model_info"):
                if not healthy:
                    return self._send(503)
                self._send(200, json.dumps(model_info(args, self.path)).encode())
            elif self.path in ("/get_server_info", "/server_info"):
                if not healthy:
                    return self._send(503)
                if args.get("api_key") and self.headers.get("Authorization") != f"Bearer {args['api_key']}":
                    return self._send(401, b'{"error": "Unauthorized"}')
                info = dict(args, version="0.5.23", launch_command=argv, standin=True, pid=os.getpid(),
                            env={k: v for k, v in os.environ.items() if k.startswith(("STANDIN_", "DDTCTL_", "CUDA_", "NCCL_", "TRITON_"))})
                accept = accept_length(args)
                if accept is not None:
                    state = {"avg_spec_accept_length": accept}
                    if str(args.get("speculative_algorithm")).upper() == "DDTREE":
                        budget = int(args.get("speculative_ddtree_budget") or 15)
                        state["ddtree"] = [{"algorithm": "DDTREE", "budget": budget, "tree_size": budget,
                                            "verify_width": budget + 1, "mean_accept_len": accept}]
                    info["internal_states"] = [state]
                self._send(200, json.dumps(info).encode())
            else:
                self._send(404)

        def do_POST(self):
            if self.path != "/generate":
                return self._send(404)
            if args.get("api_key") and self.headers.get("Authorization") != f"Bearer {args['api_key']}":
                return self._send(401, b'{"error": "Unauthorized"}')
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            n = int((body.get("sampling_params") or {}).get("max_new_tokens", 16))
            ids = prompt_ids(body)
            out = continuation(ids, n, os.environ.get("STANDIN_GENERATE_SALT", ""))
            if body.get("stream"):
                return send_stream(self, args, ids, out)
            meta = {"completion_tokens": len(out)}
            if args.get("speculative_algorithm"):
                meta.update(spec_accept_length=1.0, spec_verify_ct=len(out))
            if body.get("return_logprob"):
                meta["output_token_logprobs"] = [[-0.1, t, None] for t in out]
                if body.get("top_logprobs_num"):
                    meta["output_top_logprobs"] = [[[-0.1, t, None], [-2.5, t + 1, None]] for t in out]
            self._send(200, json.dumps({"output_ids": out, "meta_info": meta}).encode())

    srv = ThreadingHTTPServer((str(args.get("host", "127.0.0.1")), int(args.get("port", 30000))), Handler)
    print(f"[standin] serving on {srv.server_address}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
