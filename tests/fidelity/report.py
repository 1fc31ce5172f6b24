"""`make fidelity`: the agreement table of ddtctl's static validator vs SGLang's own resolver over tests/fidelity.

    .venv/bin/python tests/fidelity/report.py [--notes FILE]

Exit 0 when the recorded SGLang verdicts still hold and every disagreement is a listed known one
(known_disagreements.yaml), 1 otherwise, 2 when the managed SGLang env is missing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import corpus  # noqa: E402


def main(argv: list[str]) -> int:
    from ddtctl.errors import DdtctlError

    notes = None
    if "--notes" in argv:
        notes = Path(argv[argv.index("--notes") + 1])
    cases = corpus.load_cases()
    t0 = time.monotonic()
    try:
        live = corpus.run_sglang(cases)
    except DdtctlError as err:
        print(f"fidelity: {err.one_line()}", file=sys.stderr)
        return 2
    t_sglang = time.monotonic() - t0
    static = corpus.run_static(cases)
    rows = corpus.compare(cases, live, static)
    print(corpus.table(rows))
    mismatches = corpus.recorded_mismatches(cases, live)
    if mismatches:
        print("\nrecorded SGLang verdicts that no longer hold:")
        for m in mismatches:
            print("  " + m)
    known = corpus.load_known_disagreements()
    unexplained = [r.case.id for r in rows if r.outcome == "disagree" and r.case.id not in known]
    fixed = [cid for cid in known if not any(r.case.id == cid and r.outcome == "disagree" for r in rows)]
    print(f"\n{len(cases)} cases through one warm SGLang resolver in {t_sglang:.1f} s")
    if known:
        print(f"known disagreements (known_disagreements.yaml): {len(known)}"
              + (f"; no longer disagreeing, remove them: {', '.join(fixed)}" if fixed else ""))
    if unexplained:
        print(f"unexplained disagreements: {', '.join(unexplained)}")
    if notes is not None:
        notes.write_text(corpus.notes_markdown(rows, known), encoding="utf-8")
        print(f"wrote {notes}")
    return 1 if (mismatches or unexplained) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
