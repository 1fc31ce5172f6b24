#!/usr/bin/env bash
# Issue #11's proof on one H200 (nvidia-h200), in one device call (see notes/flagship-hybrid-tp.md):
#   tier (a) bench/hybrid_tree_kernels.py: SGLang's GDN tree kernels in float32 on random DDTREE trees -- every node's
#            conv/SSM state and output equals its root-to-node path run as a chain; the chain kernels on tree order
#            and the deduplicated conv layout must mismatch; the committed state equals the accepted path's;
#   tier (b) bench/sglang_e2e_gpu.py --target hybrid --suite hybrid: real SGLang 0.5.23 servers on a tiny Qwen3.5
#            (Gated-DeltaNet) target in bf16, CUDA graphs off and on: DDTREE == plain greedy except at measured
#            rounding ties, branch nodes accepted, mean accepted length above DFLASH's with the same drafter, and
#            the old sibling-sharing mode (--speculative-ddtree-allow-hybrid-unsafe) diverging.
# Both run side by side. Needs .carry/ (tools/fetch_gpu_carry.sh) carried. On the device: bash bench/flagship_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/flagship-out}
mkdir -p "$OUT/hybrid"
OUT=$OUT/hybrid DDTREE_E2E_WORK=/tmp/ddtree-e2e-hybrid-tp1 timeout "${E2E_TIMEOUT:-520}" python3 bench/sglang_e2e_gpu.py --target hybrid --dtype bfloat16 \
  --suite hybrid --budgets "${BUDGETS:-7,15,32}" --graphs off,on --budget-s "${E2E_BUDGET:-460}" > "$OUT/e2e_hybrid.log" 2>&1 &
e2e=$!
rk=0
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  kwork=/tmp/ddtree-kernels
  site=$(DDTREE_E2E_WORK=$kwork python3 bench/sglang_e2e_gpu.py --setup-only 2>/dev/null | tail -1)
  PYTHONPATH="tests/gpu_standins:$site:." DDTREE_GPU_STANDINS=1 \
    DDTREE_STANDIN_FLASHINFER_DIR=$kwork/flashinfer_pkg/flashinfer \
    timeout "${KERNELS_TIMEOUT:-240}" python3 bench/hybrid_tree_kernels.py > "$OUT/kernels.log" 2>&1
  rk=$?
fi
wait $e2e; re=$?
[ -f "$OUT/kernels.log" ] && { echo "=== tier (a): kernels (exit $rk)"; tail -45 "$OUT/kernels.log"; }
echo "=== tier (b): hybrid servers (exit $re)"; grep -v whl "$OUT/e2e_hybrid.log" | tail -60
[ $rk -eq 0 ] && [ $re -eq 0 ]
