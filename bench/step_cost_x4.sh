#!/usr/bin/env bash
# Issue #12 in one device call on nvidia-h200-x4 (notes/step-cost-h200.md): DDTREE under the overlap scheduler,
# proven exact and timed against DFLASH side by side.
#   GPU 0      the exactness proofs (bench/sglang_e2e_gpu.py): the dense worker suite (float32) and the GDN-hybrid
#              suite (bf16), tiny models, every DDTREE server on the overlap scheduler plus one synchronous one;
#   GPUs 1..3  bench/spec_throughput_gpu.py lanes, one real-size server per GPU at a time (alone on it while
#              timed): plain, DFLASH, DDTREE budgets, random and calibrated drafters, and DDTREE launched with
#              --disable-overlap-schedule for contrast.
# Needs .carry/ (tools/fetch_gpu_carry.sh) carried. Usage on the device: bash bench/step_cost_x4.sh
# Env: TARGET (qwen3-8b | qwen36-27b), LANES (GPU ids for the throughput lanes), BUDGETS, SYNC_BUDGETS, BATCHES,
#      DRAFTERS (a comma list of random, calibrated, public, public-flat: the i.i.d. oracle drafter and the public
#      acceptance profile by depth with its two miss splits, tests/gpu_standins/drafter_profiles.py), SKIP_E2E=1,
#      CALL_S (seconds this call may use), SCHEDULE (a DDTREE budget schedule, e.g. 2:127,4:64,8:16,0: one more
#      DDTREE server per drafter, ddtree-sched-<drafter>, whose verify width follows the live batch), PROFILE= (empty:
#      no profiler steps), CAPS (e.g. DFLASH:16: --max-running-requests per algorithm), ONLY_E2E=1 (the exactness
#      suites alone, one after the other on GPU 0, E2E_BUDGETS their DDTREE budgets, E2E_SUITES=dense,hybrid which
#      of them, E2E_ONLY a comma list of their server names).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/step-cost-out} NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
CALL_S=${CALL_S:-560}
e2e() {  # target dtype suite port-base budgets
  OUT=$OUT/e2e-$1 DDTREE_E2E_WORK=/tmp/ddtree-e2e-$1 CUDA_VISIBLE_DEVICES=0 timeout $((CALL_S - 10)) \
    python3 bench/sglang_e2e_gpu.py --target "$1" --dtype "$2" --suite "$3" --port-base "$4" --budgets "$5" \
    --budget-s $((CALL_S - 60)) ${E2E_ONLY:+--only "$E2E_ONLY"} > "$OUT/e2e_$1.log" 2>&1
}
if [ "${ONLY_E2E:-0}" = 1 ]; then  # the exactness suites alone on one GPU, one after the other: together, 28
  # servers of mem-fraction 0.15 left some no KV cache on an 80 GB H100 (2026-12-07: "Loaded weights leave no GPU
  # memory for the KV cache"), and a suite's servers already start together
  suites=${E2E_SUITES:-dense,hybrid}; share=$((CALL_S / $(tr ',' '\n' <<< "$suites" | wc -l))); rc=0
  case ",$suites," in *,dense,*) CALL_S=$share e2e dense float32 worker 31000 "${E2E_BUDGETS:-15}" || rc=1;; esac
  case ",$suites," in *,hybrid,*) CALL_S=$share e2e hybrid bfloat16 hybrid 32000 "${E2E_BUDGETS:-15}" || rc=1;; esac
  for t in dense hybrid; do
    [ -f "$OUT/e2e_$t.log" ] && { echo "=== e2e $t"; grep -v whl "$OUT/e2e_$t.log" | tail -40; }
  done
  exit $rc
fi
pids=()
if [ "${SKIP_E2E:-0}" != 1 ]; then
  e2e dense float32 worker 31000 "${E2E_BUDGETS:-15}" & pids+=($!)
  e2e hybrid bfloat16 hybrid 32000 "${E2E_BUDGETS:-15}" & pids+=($!)
fi
OUT=$OUT/throughput DDTREE_E2E_WORK=/tmp/spec-throughput timeout $((CALL_S - 5)) python3 bench/spec_throughput_gpu.py \
  --target "${TARGET:-qwen3-8b}" --gpus "${LANES:-1,2,3}" --drafter "${DRAFTERS:-random,calibrated}" \
  --budgets "${BUDGETS:-16,32,64}" --sync-budgets "${SYNC_BUDGETS-16}" --batches "${BATCHES:-1,8,32}" \
  ${SCHEDULE:+--budget-schedule "$SCHEDULE"} ${CAPS:+--max-running "$CAPS"} ${PROFILE---profile} --port-base 30000 --budget-s $((CALL_S - 25)) \
  ${THROUGHPUT_ARGS:-} > "$OUT/throughput.log" 2>&1 & tp=$!
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
wait $tp || rc=1
for t in dense hybrid; do
  [ -f "$OUT/e2e_$t.log" ] && { echo "=== e2e $t"; grep -v whl "$OUT/e2e_$t.log" | tail -40; }
done
echo "=== throughput"; grep -v whl "$OUT/throughput.log" | tail -60
logs=$OUT/throughput/server_logs
if [ -d "$logs" ]; then  # $OUT brings back 8 files: the logs travel as one archive, their key lines in the output
  echo "=== server log lines (hook, DDTREE metrics, errors)"
  for f in "$logs"/*.log; do
    echo "--- $(basename "$f")"
    grep -E "draft hook|DDTREE (budget schedule|hybrid tree verify|compact GDN|draft top|verify graphs at)" "$f" \
      | cut -c1-200 | head -8
    grep -E "available_gpu_mem" "$f" | sed -E 's/.*(available_gpu_mem=[0-9.]+ ?GB).*/\1/' | tail -2 | tr '\n' ' '; echo
    grep -E "DDTREE metrics" "$f" | cut -c1-330 | tail -2
    grep -E "Error|Traceback|out of memory" "$f" | cut -c1-200 | tail -4
  done
  tar czf "$OUT/server_logs.tar.gz" -C "$OUT/throughput" server_logs && rm -rf "$logs"
fi
exit $rc
