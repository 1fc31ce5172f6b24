"""A stand-in for the host's python (inventory `python:`) that misbehaves as the issue #31 probe's did, started as
`hostile_python.py MODE PIDFILE [the agent's argv...]`.

Before misbehaving it starts a child in its own process group (a `sleep` in python, as an agent's subprocess
would be) and writes both pids to PIDFILE, one a line, so a test can check that nothing of the run is left.

    exit      exits at once, printing nothing (the child keeps running, its output detached)
    garbage   prints a line that starts like the agent's JSON reply but is not JSON, and exits
    deep      prints an agent reply nested 100000 deep, and exits
    hang      never answers
    flood     writes stdout as fast as it can, forever
    drip      writes one byte of stdout every 5 ms, forever (faster than the reader's poll)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main() -> None:
    mode, pidfile = sys.argv[1], sys.argv[2]
    quiet = mode in ("exit", "garbage", "deep")  # the child must not hold the channel's pipes open
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if quiet else None,
        stderr=subprocess.DEVNULL if quiet else None,
    )
    tmp = pidfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n{child.pid}\n")
    os.replace(tmp, pidfile)
    out = sys.stdout.buffer
    if mode == "exit":
        os._exit(0)
    if mode == "garbage":
        out.write(b'{"ok": tru\x00e, garbage\n')
        out.flush()
        os._exit(0)
    if mode == "deep":
        out.write(b'{"ok": true, "result": ' + b"[" * 100000 + b"]" * 100000 + b"}\n")
        out.flush()
        os._exit(0)
    if mode == "hang":
        time.sleep(600)
    if mode == "flood":
        block = b"x" * 65536
        while True:
            out.write(block)
    if mode == "drip":
        while True:
            out.write(b".")
            out.flush()
            time.sleep(0.005)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
