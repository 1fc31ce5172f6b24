#!/usr/bin/env bash
# One device call on one GPU for issue #30 (notes/budget-schedule.md), picked by the card it lands on:
#   H200 (> 100 GB): the flagship shape, Qwen3.6-27B-shaped GDN hybrid at tp 1: DFLASH, the DDTREE budget schedule
#                    and DDTREE B=127 (SGLang's accept walk), public-acceptance drafter, batch 1/8/32, the whole call;
#   H100:            the 8B shape's DFLASH / schedule / B=127 table; with E2E=1 the exactness suites first (dense
#                    float32 worker suite + GDN-hybrid bf16 suite, both with the budget-schedule server, one suite
#                    after the other) and the table only if CALL_S leaves over 150 s; without E2E=1, after the
#                    table, the GDN-hybrid suite's plain / DFLASH / B=15 / B=64 / schedule servers if 170 s are left.
# Servers run one at a time in the order plain (the public drafter's oracle), DFLASH, schedule, B=127 with SGLang's
# walk; one that would start with under 90 s left is skipped, so the last is the first to go.
# Needs .carry/ (tools/fetch_gpu_carry.sh) carried. Usage on the device: OUT=$OUT bash bench/one_gpu_call.sh
# Env: CALL_S (seconds for the whole command, default 555), SCHEDULE (default 2:127,4:64,8:16,0), E2E=1 (H100: the
#      exactness suites before the 8B table; off by default since 2026-12-07: the suites' 28 servers need the whole
#      call to come up, and the table is the issue's first goal).
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
if [ "$mem" -gt 100000 ]; then
  T=qwen36-27b C=DFLASH:16 h100=0
else
  T=qwen3-8b C= h100=1
fi
[ "$h100" = 1 ] && [ "${E2E:-0}" = 1 ] && exactness CALL_S="${E2E_S:-440}"
left=$((CALL_S - ($(date +%s) - start)))
echo "# throughput: target $T, $left s left"
[ "$left" -gt 150 ] || { echo "too little time left for the throughput servers"; exit $rc; }
SKIP_E2E=1 TARGET=$T LANES=0 DRAFTERS=public BUDGETS=127 SYNC_BUDGETS= BATCHES=1,8,32 \
  SCHEDULE=${SCHEDULE:-2:127,4:64,8:16,0} CAPS=$C PROFILE= DDTREE_LOG_INTERVAL=25 \
  THROUGHPUT_ARGS="--new-tokens 128 --server-s 90 --repeats 2 --servers $servers \
  --env-variant sglangwalk:127:DDTREE_ACCEPT=sglang" CALL_S=$left bash bench/step_cost_x4.sh || rc=1
left=$((CALL_S - ($(date +%s) - start)))
if [ "$h100" = 1 ] && [ "${E2E:-0}" != 1 ] && [ "$left" -gt 170 ]; then  # the time left: the budget schedule's
  # exactness in a GDN-hybrid server (bf16), beside plain, DFLASH and B=15 / B=64 (the two-block GDN verify)
  echo "# hybrid exactness, $left s left"
  exactness CALL_S="$left" E2E_SUITES=hybrid E2E_ONLY=plain-g0,dflash-g1,ddtree-b15-g1,ddtree-b64-g1-rows,ddtree-sched-g1
fi
exit $rc
