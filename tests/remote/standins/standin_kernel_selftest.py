#!/usr/bin/env python3
"""STAND-IN for the payload's Triton kernel self-test (`python -m ddtree_sglang.kernels.selftest --device cuda`),
which needs a GPU. Checks what deploy's warm-up promises: the release's payload is importable (PYTHONPATH) and the
Triton cache dir is the server's; writes a marker "kernel" into that cache. STANDIN_WARMUP=fail makes it fail."""
import os
import sys

import ddtree_sglang  # from the release's payload files/, without installing anything

cache = os.environ["TRITON_CACHE_DIR"]
print(f"[standin-selftest] payload {ddtree_sglang.__file__} version {getattr(ddtree_sglang, 'VERSION', '?')}")
if os.environ.get("STANDIN_WARMUP") == "fail":
    print("[standin-selftest] FAILED: top-k mismatch on device (simulated)")
    sys.exit(1)
os.makedirs(cache, exist_ok=True)
with open(os.path.join(cache, "standin-kernel.marker"), "w") as f:
    f.write(os.environ.get("DDTCTL_RELEASE", "?"))
print(f"[standin-selftest] ok; compiled into {cache}")
