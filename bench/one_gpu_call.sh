#!/usr/bin/env bash
# One device call on one GPU for issue #30 (notes/budget-schedule.md), picked by the card it lands on:
#   H200 (> 100 GB): the flagship shape, Qwen3.6-27B-shaped GDN hybrid at tp 1: DFLASH, the DDTREE budget schedule
#                    and DDTREE B=127, public-acceptance drafter, batch 1/8/32, the whole call;
#   H100:            the exactness suites first (dense float32 worker suite + GDN-hybrid bf16 suite, both with the
#                    budget-schedule server, one suite after the other), then the 8B shape's DFLASH / schedule /
#                    B=127 table if CALL_S leaves over 150 s (CALL_S=600 does).
# Needs .carry/ (tools/fetch_gpu_carry.sh) carried. Usage on the device: OUT=$OUT bash bench/one_gpu_call.sh
# Env: CALL_S (seconds for the whole command, default 555), SCHEDULE (default 2:127,4:64,8:16,0).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/one-gpu-out}
mkdir -p "$OUT"
start=$(date +%s)
CALL_S=${CALL_S:-555}
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
echo "# $(date -u '+%F %T UTC') $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) ($mem MiB)"
servers=dflash-public,ddtree-sched-public,ddtree-b127-public
rc=0
if [ "$mem" -gt 100000 ]; then
  T=qwen36-27b C=DFLASH:16
else
  T=qwen3-8b C=
  ONLY_E2E=1 CALL_S=${E2E_S:-440} bash bench/step_cost_x4.sh > "$OUT/e2e_summary.txt" 2>&1 || rc=1
  grep -E "^=== |RESULT|EXTRAS|CLAIMS|FAIL|sched" "$OUT/e2e_summary.txt" | cut -c1-220 | tail -40
fi
left=$((CALL_S - ($(date +%s) - start)))
echo "# throughput: target $T, $left s left"
[ "$left" -gt 150 ] || { echo "too little time left for the throughput servers"; exit $rc; }
SKIP_E2E=1 TARGET=$T LANES=0 DRAFTERS=public BUDGETS=127 SYNC_BUDGETS= BATCHES=1,8,32 \
  SCHEDULE=${SCHEDULE:-2:127,4:64,8:16,0} CAPS=$C PROFILE= DDTREE_LOG_INTERVAL=25 \
  THROUGHPUT_ARGS="--new-tokens 128 --server-s 90 --servers $servers" CALL_S=$left bash bench/step_cost_x4.sh || rc=1
exit $rc
