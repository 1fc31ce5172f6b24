#!/usr/bin/env bash
# Issue #11's tensor-parallel proof on nvidia-h200-x2, in one device call (see notes/flagship-hybrid-tp.md):
# real SGLang 0.5.23 servers at --tp-size 2 (plain, DFLASH, DDTREE; CUDA graphs off and on; the same oracle drafter
# for DFLASH and DDTREE, now served from the vocab-parallel top-K), two runs side by side on the same two GPUs:
#   dense  tiny Qwen3 in float32: DDTREE == plain greedy token for token;
#   hybrid tiny Qwen3.5 (Gated-DeltaNet) in bf16: equal except at measured rounding ties.
# Needs .carry/ (tools/fetch_gpu_carry.sh) carried. Usage on the device: bash bench/flagship_tp2.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/flagship-out} NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
run() {  # target dtype port-base
  OUT=$OUT/tp2-$1 DDTREE_E2E_WORK=/tmp/ddtree-e2e-tp2-$1 timeout "${E2E_TIMEOUT:-500}" python3 bench/sglang_e2e_gpu.py \
    --target "$1" --dtype "$2" --tp 2 --suite tp --port-base "$3" --budget-s "${E2E_BUDGET:-440}" \
    > "$OUT/e2e_tp2_$1.log" 2>&1
}
run dense float32 33000 & a=$!
run hybrid bfloat16 34000 & b=$!
wait $a; ra=$?
wait $b; rb=$?
for t in dense hybrid; do echo "=== tp2 $t"; grep -v whl "$OUT/e2e_tp2_$t.log" | tail -45; done
[ $ra -eq 0 ] && [ $rb -eq 0 ]
