#!/usr/bin/env python3
"""STAND-IN for `nvidia-smi` (this machine has no GPU). Answers the two queries ddtctl's facts use, and
`topo -m` (ddtctl doctor), every GPU pair joined by `--link` (NV18: NVLink; PIX, PXB, PHB, NODE, SYS: PCIe).

    standin_nvidia_smi.py [--gpus N] [--name "NVIDIA H200"] [--mem-mib 143771] [--cap 9.0] [--link NV18]
                          [nvidia-smi args...]
"""
import sys

argv = sys.argv[1:]
opts = {"--gpus": "1", "--name": "NVIDIA H200", "--mem-mib": "143771", "--cap": "9.0", "--driver": "580.65.06",
        "--cuda": "13.0", "--link": "NV18"}
rest = []
i = 0
while i < len(argv):
    if argv[i] in opts and i + 1 < len(argv):
        opts[argv[i]] = argv[i + 1]
        i += 2
    else:
        rest.append(argv[i])
        i += 1
n = int(opts["--gpus"])
if any(a.startswith("--query-gpu=") for a in rest):
    for idx in range(n):
        mem = int(opts["--mem-mib"])
        print(f"{idx}, {opts['--name']}, {mem}, {mem - 512}, {opts['--driver']}, {opts['--cap']}")
elif rest[:2] == ["topo", "-m"]:
    names = [f"GPU{i}" for i in range(n)]
    print("\x1b[4m\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m")
    for i, name in enumerate(names):
        cells = [" X " if j == i else opts["--link"] for j in range(n)]
        print(name + "\t" + "\t".join(cells) + "\t0-31\t0\t\tN/A")
    print("\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect"
          "\n  NV#  = Connection traversing a bonded set of # NVLinks")
else:
    print("+-----------------------------------------------------------------------------------------+")
    print(f"| NVIDIA-SMI {opts['--driver']}   (ddtctl test stand-in)  Driver Version: {opts['--driver']}"
          f"   CUDA Version: {opts['--cuda']}     |")
    print("+-----------------------------------------------------------------------------------------+")
