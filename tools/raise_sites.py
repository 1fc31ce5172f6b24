"""Raise-site coverage of SGLang's resolver by ddtctl's rules: see ddtctl/rules/coverage.py.

    python tools/raise_sites.py [--sglang-root DIR] [--all] [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddtctl.rules.coverage import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
