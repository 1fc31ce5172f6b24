#!/usr/bin/env bash
# One device call on one GPU for issue #30 (notes/budget-schedule.md), picked by the card it lands on:
#   H200 (> 100 GB): the flagship shape, Qwen3.6-27B-shaped GDN hybrid at tp 1: DFLASH, the DDTREE budget schedule
#                    and DDTREE B=127 (SGLang's accept walk), public-acceptance drafter, batch 1/8/32, the whole call;
#   H100:            the same 27B shape at batch 1, where its DFLASH fits 78 GiB (--max-running-requests 1: SGLang's
#                    verify scratch is 2 x 16 x 147 MiB, against 33 x 16 x 147 MiB at batch 32): DFLASH against
#                    DDTREE per drafter, in the order of the issue's batch-1 goals (public B=127 with two A/Bs: the
#                    GDN verify in log2 stages, DDTREE_GDN_SOLVE=levels16, and SGLang's accept walk; i.i.d. B=127;
#                    random B=64), the last dropped when the call runs out. If the 27B DFLASH row does not come
#                    (it did not start), the 8B shape's DFLASH / schedule / B=127 table in the time left. With
#                    E2E=1 the exactness suites first (dense float32 worker suite + GDN-hybrid bf16 suite, both with
#                    the budget-schedule server, one suite after the other). After the tables, the GDN-hybrid
#                    suite's plain / DFLASH / B=15 / B=64 / schedule servers if 170 s are left.
# Servers run one at a time, plain first (the oracle drafters' source), then in the order named; one that would
# start too late to be measured is skipped, so the last named is the first to go.
# Each table's files come back as one archive, $OUT/<table>.tar.gz (t27b, t27b-bs1, t8b); its table is printed.
# Needs .carry/ (tools/fetch_gpu_carry.sh) carried. Usage on the device: OUT=$OUT bash bench/one_gpu_call.sh
# Env: CALL_S (seconds for the whole command, default 555), SCHEDULE (default 2:127,4:64,8:16,0), E2E=1 (H100: the
#      exactness suites before the tables; off by default since 2026-12-07: the suites' 28 servers need the whole
#      call to come up, and the tables are the issue's first goal).
# JIT caches: a fresh machine compiles every Triton/nvcc kernel again (the first server's start is 80-110 s, later ones
# 50-60 s). If .carry/jit_cache.tar.xz exists it is unpacked into $HOME first; at the end this call's caches go back
# as $OUT/jit_cache.tar.xz when under 15 MB, to be moved into .carry/ for the next session (xz, not gzip: 2.4 MB
# against 7.4, and the tree plus .carry/ must stay under the 64 MiB a call carries). The exactness suites'
# logs, tables and JSON come back as $OUT/e2e.tar.gz (a call brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/one-gpu-out}
mkdir -p "$OUT"
start=$(date +%s)
CALL_S=${CALL_S:-555}
[ -f .carry/jit_cache.tar.xz ] && tar xJf .carry/jit_cache.tar.xz -C "$HOME" 2>/dev/null && echo "# JIT caches unpacked"
at_exit() {  # $OUT brings back 8 files: the suites' logs, tables and JSON travel as one archive
  local e2e; e2e=$(cd "$OUT" && ls -d e2e_dense.log e2e_hybrid.log e2e-dense e2e-hybrid 2>/dev/null)
  [ -n "$e2e" ] && tar czf "$OUT/e2e.tar.gz" -C "$OUT" $e2e && (cd "$OUT" && rm -rf $e2e)
  local t
  for t in t27b t27b-bs1 t8b; do
    [ -d "$OUT/$t" ] && tar czf "$OUT/$t.tar.gz" -C "$OUT" "$t" && rm -rf "${OUT:?}/$t"
  done
  (cd "$HOME" && XZ_OPT=-T0 tar cJf /tmp/jit_cache.tar.xz --exclude='.cache/pip' --exclude='.cache/ddtctl' .triton/cache .cache 2>/dev/null)
  local size; size=$(stat -c %s /tmp/jit_cache.tar.xz 2>/dev/null || echo 0)
  echo "# JIT caches: $size bytes"
  [ "$size" -gt 0 ] && [ "$size" -lt 15000000 ] && cp /tmp/jit_cache.tar.xz "$OUT/"
}
trap at_exit EXIT
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
echo "# $(date -u '+%F %T UTC') $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) ($mem MiB)"
# ddtree-b127-public-sglangwalk: B=127 walked by SGLang's verify_tree_greedy_triton (DDTREE_ACCEPT=sglang), the A/B of
# the builder's walk at batch 1, where the schedule's row fell from 15.96 to 18.75 ms a step between two H100 calls
# (2026-12-07 08:54 with SGLang's walk, 15:44 with the builder's; DFLASH 12.99 -> 13.50)
servers=dflash-public,ddtree-sched-public,ddtree-b127-public-sglangwalk
rc=0
exactness() {  # [env...]: bench/step_cost_x4.sh's exactness suites, their verdict lines printed
  env "$@" ONLY_E2E=1 bash bench/step_cost_x4.sh > "$OUT/e2e_summary.txt" 2>&1 || rc=1
  grep -E "^=== |RESULT|EXTRAS|CLAIMS|FAIL|sched" "$OUT/e2e_summary.txt" | cut -c1-220 | tail -40
}
table() {  # name target batches drafters budgets servers caps schedule server_s seconds [extra args]: one table
  # (PROFILE=--profile: SGLang's profiler over 5 steps of DFLASH and the first budget's DDTREE, by kind of kernel)
  local name=$1 target=$2 batches=$3 drafters=$4 budgets=$5 servers=$6 caps=$7 schedule=$8 server_s=$9 secs=${10}
  shift 10
  echo "# table $name: target $target, batch $batches, $secs s"
  OUT=$OUT/$name SKIP_E2E=1 TARGET=$target LANES=0 DRAFTERS=$drafters BUDGETS=$budgets SYNC_BUDGETS= \
    BATCHES=$batches SCHEDULE=$schedule CAPS=$caps PROFILE="${PROFILE-}" DDTREE_LOG_INTERVAL=25 \
    THROUGHPUT_ARGS="--server-s $server_s --servers $servers $*" CALL_S=$secs bash bench/step_cost_x4.sh \
    || rc=1
}
measured() {  # table server: did the table measure this server?
  python3 - "$OUT/$1/throughput/spec_throughput.json" "$2" <<'PY' 2>/dev/null
import json, sys
servers = json.load(open(sys.argv[1]))["servers"]
sys.exit(0 if any(s["name"] == sys.argv[2] and s["status"] == "done" for s in servers) else 1)
PY
}
left() { echo $((CALL_S - ($(date +%s) - start))); }
h100=1
[ "$mem" -gt 100000 ] && h100=0
[ "$h100" = 1 ] && [ "${E2E:-0}" = 1 ] && exactness CALL_S="${E2E_S:-440}"
if [ "$(left)" -le 150 ]; then
  echo "too little time left for the throughput servers"
elif [ "$h100" = 0 ]; then  # H200: the flagship table at batch 1 / 8 / 32 (DFLASH capped at 16 running requests)
  table t27b qwen36-27b 1,8,32 public 127 "$servers" DFLASH:16 "${SCHEDULE:-2:127,4:64,8:16,0}" 130 "$(left)" \
    --new-tokens 128 --repeats 2 --env-variant sglangwalk:127:DDTREE_ACCEPT=sglang
else  # H100: the flagship shape's batch-1 goals first, with the per-kind profile of DFLASH and the DDTREE B=127
  # servers (public drafter: ~12 s each), 512 new tokens as the issue's table (one measured batch: a request's fixed
  # costs weigh less than at 128); the 8B table if its DFLASH did not come
  PROFILE=--profile table t27b-bs1 qwen36-27b 1 public,calibrated,random 127,64 \
    dflash-public,ddtree-b127-public,ddtree-b127-public-lv16,ddtree-b127-public-sglangwalk,dflash-calibrated,\
ddtree-b127-calibrated,dflash-random,ddtree-b64-random "" "" 130 "$(left)" --new-tokens 512 --stop-on-memory \
    --env-variant lv16:127:DDTREE_GDN_SOLVE=levels16 --env-variant sglangwalk:127:DDTREE_ACCEPT=sglang
  if ! measured t27b-bs1 dflash-public && [ "$(left)" -gt 150 ]; then
    echo "# the 27B DFLASH row did not come: the 8B table"
    table t8b qwen3-8b 1,8,32 public 127 "$servers" "" "${SCHEDULE:-2:127,4:64,8:16,0}" 90 "$(left)" \
      --new-tokens 128 --repeats 2 --env-variant sglangwalk:127:DDTREE_ACCEPT=sglang
  fi
fi
if [ "$h100" = 1 ] && [ "${E2E:-0}" != 1 ] && [ "$(left)" -gt 170 ]; then  # the time left: the budget schedule's
  # exactness in a GDN-hybrid server (bf16), beside plain, DFLASH and B=15 / B=64 (the two-block GDN verify)
  echo "# hybrid exactness, $(left) s left"
  exactness CALL_S="$(left)" E2E_SUITES=hybrid E2E_ONLY=plain-g0,dflash-g1,ddtree-b15-g1,ddtree-b64-g1-rows,ddtree-sched-g1
fi
exit $rc
