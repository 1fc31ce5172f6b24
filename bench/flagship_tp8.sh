#!/usr/bin/env bash
# Issue #18 in one device call: the flagship -- DDTREE with the seed's flags (budget 64, topk-cap 64, shadow-linear,
# extra_buffer 0.5) on a Qwen3.6-27B-shaped GDN hybrid (bf16, dummy weights) at --tp-size $TP -- installed by
# `ddtctl deploy` itself over a loopback sshd (bench/deploy_gpu.py --flagship-tp: facts, preflight, plan, ship,
# SGLang's resolver on the host, kernel warm-up, launch, health, served args), its outputs against a plain greedy
# server, then tokens/s against a DFLASH server of the same model and tp, redeploy, rollback and the operations.
# Device call (nvidia-h200-x8; TP=2 on nvidia-h200-x2), carry .carry/deploy and .carry/flashinfer_include.tar.gz
# (tools/fetch_deploy_carry.sh):  TP=8 bash bench/flagship_tp8.sh
# At TP=2 the 27B-shaped servers start in ~120-175 s each: SKIP=redeploy,broken,requests2 leaves room for DFLASH
# (those phases are proven by bench/deploy_gpu.py on the tiny model, notes/deploy-h200.md).
# SERVER_ENV=DDTREE_GDN_TREE=compact deploys with the compact GDN tree verify and scratch (opt-in).
# CPU rehearsal of the same phases (stand-in server, 8 stand-in GPUs): tests/bench/test_deploy_rehearsal.py.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OUT=${OUT:-/tmp/flagship-tp8-out}
exec timeout "${CALL_S:-590}" python3 bench/deploy_gpu.py --flagship-tp "${TP:-8}" --drafter "${DRAFTER:-oracle}" \
  --batches "${BATCHES:-1,8}" --budget-s "${BUDGET_S:-570}" \
  --skip "${SKIP:-}" ${SERVER_ENV:+--server-env "$SERVER_ENV"}
