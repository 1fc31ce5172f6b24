"""Record SGLang's real verdicts into cases.yaml: runs every case through the pinned SGLang resolver (one warm worker)
and rewrites expected_sglang / sglang_error_type / sglang_hook / sglang_message. Hand-written fields (expect_rules,
expect_findings, sglang_overrides, stricter_by_design, note) are kept. Use after adding cases; review the diff before committing.

    .venv/bin/python tests/fidelity/record.py            # show what would change
    .venv/bin/python tests/fidelity/record.py --write    # rewrite cases.yaml
    .venv/bin/python tests/fidelity/record.py --fresh-check   # every case in its own fresh process vs one warm one
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import yaml  # noqa: E402

import corpus  # noqa: E402

HEADER_END = "cases:\n"
KEY_ORDER = ("id", "gpu", "argv", "overlay", "expected_sglang", "sglang_error_type", "sglang_hook", "sglang_message",
             "expect_rules", "expect_findings", "sglang_overrides", "stricter_by_design", "note")


def _flow(case: dict) -> str:
    parts = []
    for key in KEY_ORDER:
        if key in case and case[key] is not None and case[key] != []:
            value = json.dumps(case[key], ensure_ascii=False)  # JSON scalars/lists are valid YAML flow
            parts.append(f"{key}: {value}")
    return "- {" + ", ".join(parts) + "}"


def fresh_check() -> int:
    """Full results (verdict, error, resolved values, overrides, warnings) of every case resolved in a fresh
    interpreter must equal those of the one warm worker: no state leaks between resolves."""
    from ddtctl.envs import require_env

    def normal(r):
        return {"accepted": r.accepted, "error": r.error, "error_at": r.error_at,
                "resolved": {k: v for k, v in r.resolved.items() if k != "random_seed"},
                "overrides": [o for o in r.overrides if o["field"] != "random_seed"], "warnings": r.warnings}

    cases = corpus.load_cases()
    warm = corpus.run_sglang(cases)
    python = require_env().python
    bad = []
    for i, case in enumerate(cases, 1):
        client = corpus.new_client(case, python)
        try:
            fresh = corpus.run_sglang([case], client=None if case.overlay else client,
                                      overlay_client=client if case.overlay else None)[case.id]
        finally:
            client.close()
        if normal(fresh) != normal(warm[case.id]):
            bad.append(case.id)
        print(f"[{i}/{len(cases)}] {case.id}: {'same' if case.id not in bad else 'DIFFERENT'}", flush=True)
    print(f"fresh-process check: {len(cases) - len(bad)}/{len(cases)} identical" + (f"; different: {bad}" if bad else ""))
    return 1 if bad else 0


def main() -> int:
    if "--fresh-check" in sys.argv:
        return fresh_check()
    write = "--write" in sys.argv
    text = corpus.CASES_FILE.read_text(encoding="utf-8")
    header = text[: text.index(HEADER_END)]
    raw_cases = yaml.safe_load(text)["cases"]
    cases = corpus.load_cases()
    live = corpus.run_sglang(cases)
    changed = 0
    out_lines = []
    group = None
    for raw, case in zip(raw_cases, cases):
        r = live[case.id]
        if r.setup_error:
            print(f"{case.id}: NOT RESOLVED: {r.error}", file=sys.stderr)
            return 2
        new = dict(raw)
        new["expected_sglang"] = "accepted" if r.accepted else "rejected"
        for key in ("sglang_error_type", "sglang_hook", "sglang_message"):
            new.pop(key, None)
        if not r.accepted:
            new["sglang_error_type"] = r.error["type"]
            new["sglang_hook"] = r.error["hook"]
            new["sglang_message"] = corpus.portable(r.error["message"])
        if {k: new.get(k) for k in KEY_ORDER} != {k: raw.get(k) for k in KEY_ORDER}:
            changed += 1
            print(f"~ {case.id}: {raw.get('expected_sglang')} -> {new['expected_sglang']}"
                  + (f" ({new.get('sglang_error_type')}: {new.get('sglang_message', '')[:120]})" if not r.accepted else ""))
        prefix = case.id.split("-")[0]
        if prefix != group:
            out_lines.append(f"# ---- {prefix}")
            group = prefix
        out_lines.append(_flow(new))
    print(f"{changed} of {len(cases)} cases changed")
    if write:
        corpus.CASES_FILE.write_text(header + HEADER_END + "\n".join(out_lines) + "\n", encoding="utf-8")
        corpus.load_cases()  # round-trip check
        print(f"wrote {corpus.CASES_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
