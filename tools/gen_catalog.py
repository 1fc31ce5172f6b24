#!/usr/bin/env python3
"""Generate ddtctl's flag catalog for an SGLang release from that release's REAL argparse parser.

The parser is built exactly as `sglang serve` builds it (ArgumentParser + ServerArgs.add_cli_args) inside an
interpreter where that release is importable; ddtctl never imports sglang itself. Typical use, with a throwaway venv
per release (torch==2.13.0 CPU first, then `pip install --no-deps sglang==X` and the small set of packages its
server_args import needs):

    python tools/gen_catalog.py --python /work/tmp-catvenv-0.5.23/bin/python \
        --out ddtctl/schema/catalogs/sglang-0.5.23.json
    python tools/gen_catalog.py --python ~/.cache/ddtctl/sglang-0.5.23/bin/python --check \
        ddtctl/schema/catalogs/sglang-0.5.23.json          # exit 1 if the committed file is stale

Without --python it dumps the sglang importable in the current interpreter.

How the shipped catalogs were made (one CPU venv; older releases layered on top with `pip install --target`):
    python3.11 -m venv /work/tmp-catvenv-0.5.23 && V=/work/tmp-catvenv-0.5.23/bin
    $V/pip install torch==2.13.0                      # CPU build first, so nothing pulls a CUDA torch
    $V/pip install --no-deps sglang==0.5.23
    $V/pip install numpy orjson psutil pybase64 requests triton packaging pillow starlette msgspec pydantic \
        pyzmq tqdm ipython aiohttp transformers==5.19.0 dill apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 \
        compressed-tensors==0.18.0 gguf openai==2.8.0 partial_json_parser einops torch==2.13.0
    $V/pip install --no-deps torchvision==0.28.0      # CUDA wheel; argparse_dump declares its two ops on CPU torch
    # 0.5.12 / 0.5.19: their own transformers/tokenizers/xgrammar pins, first on sys.path
    $V/pip install --no-deps --target /work/tmp-catvenv-0.5.12/site sglang==0.5.12 transformers==5.6.0 \
        tokenizers==0.22.2 xgrammar==0.2.0 "huggingface-hub>=1.5.0,<2.0"
    $V/pip install --no-deps --target /work/tmp-catvenv-0.5.19/site sglang==0.5.19 transformers==5.12.1 \
        tokenizers==0.22.2 xgrammar==0.2.1 "huggingface-hub>=1.5.0,<2.0"
    python tools/gen_catalog.py --python $V/python --out ddtctl/schema/catalogs/sglang-0.5.23.json
    python tools/gen_catalog.py --python $V/python --pythonpath /work/tmp-catvenv-0.5.12/site \
        --out ddtctl/schema/catalogs/sglang-0.5.12.json          # likewise 0.5.19
The dump itself lives in ddtctl/schema/argparse_dump.py (stdlib only, run as a script in the target interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMP_SCRIPT = ROOT / "ddtctl" / "schema" / "argparse_dump.py"

sys.path.insert(0, str(DUMP_SCRIPT.parent))
from argparse_dump import dump_catalog, dump_parser, to_json  # noqa: E402,F401  (re-exported)


def generate(python: str | os.PathLike[str] | None = None, *, timeout_s: float = 300.0,
             extra_sys_path: tuple[str, ...] = ()) -> dict:
    """The catalog document of the sglang importable by `python` (default: this interpreter), via a subprocess."""
    python = str(python or sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if extra_sys_path:
        env["PYTHONPATH"] = os.pathsep.join(extra_sys_path)
    with tempfile.TemporaryDirectory(prefix="ddtctl-catalog-") as tmp:
        out = Path(tmp) / "catalog.json"
        proc = subprocess.run([python, str(DUMP_SCRIPT), "--out", str(out)], env=env, capture_output=True,
                              text=True, timeout=timeout_s, cwd=tmp)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-20:]
            raise RuntimeError(f"{python} could not dump the sglang parser (exit {proc.returncode}):\n"
                               + "\n".join(tail))
        return json.loads(out.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", help="interpreter where the sglang release is importable (default: this one)")
    ap.add_argument("--pythonpath", action="append", default=[],
                    help="directory put on the target's sys.path first (e.g. an unpacked `pip install --target`)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--out", help="write the catalog to this file (default: stdout)")
    group.add_argument("--check", metavar="FILE", help="compare with FILE; exit 1 and show the difference if stale")
    args = ap.parse_args(argv)

    doc = generate(args.python, extra_sys_path=tuple(args.pythonpath))
    text = to_json(doc)
    if args.check:
        committed = Path(args.check).read_text(encoding="utf-8")
        if committed == text:
            print(f"{args.check}: up to date ({len(doc['flags'])} flags, sglang {doc['sglang']})")
            return 0
        import difflib

        sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), text.splitlines(True),
                                                   args.check, "generated", n=0))
        return 1
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}: {len(doc['flags'])} flags, sglang {doc['sglang']}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
