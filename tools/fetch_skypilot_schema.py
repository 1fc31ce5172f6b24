#!/usr/bin/env python3
"""Write tests/data/skypilot-<version>-task-schema.json: SkyPilot's own JSON Schemas of a task YAML, evaluated
from the real `skypilot` package, for tests/render/test_render_engines.py to validate `ddtctl render --as
skypilot`.

    python tools/fetch_skypilot_schema.py                    # a throw-away venv with skypilot==0.14.1 (pip)
    python tools/fetch_skypilot_schema.py --python VENV/bin/python   # an interpreter that has that release
    python tools/fetch_skypilot_schema.py --check FILE      # the committed file still matches the package

How: `pip download skypilot==VERSION --no-deps` fetches the wheel (its sha256 is recorded); the schemas are
what that release's `sky.utils.schemas.get_task_schema()` and `get_resources_schema()` return, the two
schemas SkyPilot validates a task with (sky/task.py validates the task, then sky/resources.py its
`resources:`). Those functions build their dicts from the package's other modules (constants, enums, the
config schema), whose imports need SkyPilot's dependencies: stubbing them breaks sky's import cycles, so
the functions run in an interpreter where skypilot is installed for real (the wheel's own files: the check
below compares them with the downloaded wheel)."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.14.1"
REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / f"skypilot-{VERSION}-task-schema.json"
EVALUATE = """
import hashlib, json, sky, sky.utils.schemas as s
print(json.dumps({
    "version": sky.__version__,
    "schemas_py_sha256": hashlib.sha256(open(s.__file__, "rb").read()).hexdigest(),
    "task": s.get_task_schema(),
    "resources": s.get_resources_schema(),
}))
"""


def _download(work: Path, version: str) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work), f"skypilot=={version}"],
        check=True,
    )
    return next(work.glob(f"skypilot-{version}-*.whl"))


def _python_with_skypilot(work: Path, version: str) -> str:
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", f"skypilot=={version}"], check=True)
    return python


def fetch(version: str, python: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wheel = _download(work, version)
        with zipfile.ZipFile(wheel) as zf:
            wheel_schemas = hashlib.sha256(zf.read("sky/utils/schemas.py")).hexdigest()
        python = python or _python_with_skypilot(work, version)
        out = subprocess.run([python, "-c", EVALUATE], check=True, capture_output=True, text=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
        if got["version"] != version or got["schemas_py_sha256"] != wheel_schemas:
            sys.exit(f"{python} has skypilot {got['version']}, not the wheel of skypilot=={version}")
        return {
            "$comment": (
                f"SkyPilot {version}'s task schemas, evaluated from the real package by"
                " tools/fetch_skypilot_schema.py (do not edit): `task` is"
                " sky.utils.schemas.get_task_schema(), `resources` is get_resources_schema() (SkyPilot"
                " validates a task's `resources:` with it separately)."
            ),
            "source": {
                "package": f"skypilot=={version}",
                "wheel": wheel.name,
                "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                "sky/utils/schemas.py sha256": wheel_schemas,
            },
            "task": got["task"],
            "resources": got["resources"],
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=VERSION)
    parser.add_argument(
        "--python", help="an interpreter with skypilot==VERSION installed (default: a temp venv)"
    )
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument(
        "--check", metavar="FILE", help="exit 1 when FILE differs from what the package gives"
    )
    args = parser.parse_args()
    data = fetch(args.version, args.python)
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    if args.check:
        same = Path(args.check).read_text() == text
        print(f"{args.check}: {'up to date' if same else 'differs from the package'}")
        return 0 if same else 1
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
