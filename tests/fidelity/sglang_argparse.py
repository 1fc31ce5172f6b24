"""Run by the managed SGLang env's python (tests/fidelity/test_argv_parse.py): SGLang's own argv parsing, as
`prepare_server_args` does it (ArgumentParser(prog="sglang serve") + ServerArgs.add_cli_args, the --config
merge, parse_args), on each argv of a JSON list read from stdin. Prints one JSON list: per argv either
{"ok": true, "ns": {dest: value}} (values as the catalog dump writes them) or {"ok": false, "error": line}.
Standard library + sglang only; does not import ddtctl (it loads argparse_dump.py and resolver_worker.py by path).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    argvs = json.load(sys.stdin)
    import torch

    _load("resolver_worker", ROOT / "ddtctl" / "bridge" / "resolver_worker.py")._import_torchvision(torch)
    jsonable = _load("argparse_dump", ROOT / "ddtctl" / "schema" / "argparse_dump.py")._jsonable
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    logging.disable(logging.CRITICAL)  # deprecation warnings
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    out = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                if "--config" in argv:
                    argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
                ns = parser.parse_args(argv)
            out.append({"ok": True, "ns": {k: jsonable(v) for k, v in vars(ns).items()}})
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("sglang serve: error: ")]
            out.append({"ok": False, "error": lines[-1][len("sglang serve: error: ") :] if lines else "exit"})
        except Exception as exc:  # noqa: BLE001 - the config merger's ValueError
            out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    json.dump(out, sys.__stdout__)


if __name__ == "__main__":
    main()
