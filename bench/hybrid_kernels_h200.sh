#!/usr/bin/env bash
# DDTREE's verify kernels in one nvidia-h200 call (issue #12, notes/step-cost-h200.md "Next device calls"):
#   1. bench/tree_attn_gpu.py       the tree split-KV verify attention (kernels/tree_attn.py) against SGLang's
#                                   extend_attention_fwd with the tree mask (exact + time), any target;
#   2. bench/gdn_tree_gpu.py        the compact GDN tree verify's TF32 launch variants (64-wide value tiles, the
#                                   ancestor matrix given), each checked and timed, against the default launch
#                                   and SGLang's kernels;
#      (gdn_wide: the same at 65..128 nodes, the two-block kernel the flagship's budget 64 runs, and b2_64,
#      b2_64_bv64: block 2 on the full 64-row tile against the default and bv64 launches' rows-only one);
#   3. bench/conv_tree_gpu.py       the compact tree conv against SGLang's tree and chain convs (exact + time),
#                                   at tp 1 and at one tp 8 rank's 1280 channels (conv_tree_tp8);
#   4. bench/hybrid_tree_kernels.py the compact conv + GDN verify + commit through hybrid.py's hooks, against
#                                   the path chains (SGLang's own kernels, tf32x3).
# Each step has its own time limit and log; one failing step does not stop the others; exit 1 if any failed.
# Needs .carry/whl carried (tools/fetch_gpu_carry.sh). Usage on the device: bash bench/hybrid_kernels_h200.sh
# Env: CALL_S (seconds this call may use, default 560); SKIP (step names to leave out, e.g. "conv_tree
# hybrid_tree").
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/hybrid-kernels-out}
mkdir -p "$OUT"
CALL_S=${CALL_S:-560}
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl || exit 2
export PYTHONPATH=tests/gpu_standins:/tmp/site:. DDTREE_GPU_STANDINS=1 SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1

rc=0
step() {  # name share-of-what-is-left command...
  local name=$1 share=$2
  shift 2
  case " ${SKIP:-} " in *" $name "*) echo "=== $name: skipped (SKIP)"; return ;; esac
  local left=$((CALL_S - (SECONDS - t0) - 10))
  local limit=$((left * share / 100))
  if [ "$limit" -lt 30 ]; then
    echo "=== $name: skipped, ${left}s left"
    rc=1
    return
  fi
  echo "=== $name (limit ${limit}s): $*"
  OUT=$OUT/$name timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local code=$?
  echo "    exit $code after $((SECONDS - t0))s"
  tail -25 "$OUT/$name.log"
  [ "$code" -eq 0 ] || rc=1
}

step tree_attn 40 python3 bench/tree_attn_gpu.py
step gdn_tree 45 python3 bench/gdn_tree_gpu.py --widths 33,64 --heads 16x48 --variants anc,bv64,anc_bv64,scratch
# the two-block path (65..128 nodes); batch 4: the 48-layer commit timing copies the scratch per layer
step gdn_wide 60 python3 bench/gdn_tree_gpu.py --widths 65,96,128 --batches 1,4 --heads 16x48 \
  --variants bv64,anc_bv64,b2_64,b2_64_bv64
step conv_tree 50 python3 bench/conv_tree_gpu.py --launches 64x16,64x32,128x16  # each launch compiles
# one rank of the flagship: 1280 channels
step conv_tree_tp8 50 python3 bench/conv_tree_gpu.py --tp 8 --launches 64x16,128x16
step hybrid_tree 100 python3 bench/hybrid_tree_kernels.py
echo "RESULT: $([ $rc -eq 0 ] && echo PASS || echo FAIL) in $((SECONDS - t0))s (logs and json under \$OUT)"
exit $rc
