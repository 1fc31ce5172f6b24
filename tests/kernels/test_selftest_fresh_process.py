"""`selftest('cpu')` as the payload and deploy call it: a fresh process, TRITON_INTERPRET not set beforehand."""

from __future__ import annotations

import os
import subprocess
import sys


def test_cpu_selftest_sets_up_the_interpreter_itself():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("from ddtctl.kernels.selftest import selftest; import os; r = selftest(device='cpu', quick=True); "
            "print(r.ok, [c.detail for c in r.checks if not c.ok][:1], os.environ.get('TRITON_INTERPRET'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True [] None"  # passed, and the variable is restored afterwards
