"""Which of ddtctl's value ranges SGLang 0.5.23's resolver enforces itself (issue #32 item 1).

    .venv/bin/python tests/fidelity/range_probe.py          # prints the table; exit 1 when ddtctl's table is stale

ddtctl/schema/flag_models.py gives numeric flags ranges argparse does not check (RANGES, the ports). A value out of
such a range is an error only where SGLang's resolver raises for it (RESOLVER_ENFORCED) or where its start-up is
shown to fail (RUNTIME_EVIDENCE, with the file:line); otherwise it is a warning (DDT013). This probe puts one value
just outside each side of each range, alone on a dense launch, through the real resolver, and reports the sides it
rejects: the ground truth RESOLVER_ENFORCED is held equal to (test_range_probe.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

MODEL = HERE / "models" / "qwen3-8b"
GPU = "sm90"


def probes() -> list[tuple[str, str, str, str]]:
    """(flag dest, side, flag name, value) for every side of every range of the pinned catalog."""
    from ddtctl.schema.catalog import load_catalog
    from ddtctl.schema.flag_models import value_range

    out = []
    for spec in load_catalog("0.5.23").flags:
        bounds = value_range(spec)
        if not bounds or spec.type not in ("int", "float") or spec.nargs not in (None, "?"):
            continue
        step = 1 if spec.type == "int" else 0.25
        if "ge" in bounds:
            out.append((spec.dest, "low", spec.name, str(bounds["ge"] - step)))
        elif "gt" in bounds:
            out.append((spec.dest, "low", spec.name, str(bounds["gt"])))
        if "le" in bounds:
            out.append((spec.dest, "high", spec.name, str(bounds["le"] + step)))
        elif "lt" in bounds:
            out.append((spec.dest, "high", spec.name, str(bounds["lt"])))
    return out


def probe() -> dict[tuple[str, str], str | None]:
    """(dest, side) -> SGLang's error for the value alone, or None when its resolver accepts it."""
    from ddtctl.dryrun import dry_run_argvs

    items = probes()
    results = dry_run_argvs([(f"{dest}:{side}", ["--model-path", str(MODEL), f"--{name}={value}"], GPU)
                             for dest, side, name, value in items])
    out: dict[tuple[str, str], str | None] = {}
    for (dest, side, _, _), r in zip(items, results, strict=True):
        if r.setup_error:
            raise RuntimeError(f"{dest}:{side}: {r.error}")
        out[(dest, side)] = None if r.accepted else (f"{(r.error or {}).get('message', 'rejected')} [{r.error_at}]")
    return out


def main() -> int:
    from ddtctl.schema.flag_models import RESOLVER_ENFORCED

    seen = probe()
    enforced = {key for key, err in seen.items() if err is not None}
    for (dest, side), err in sorted(seen.items()):
        print(f"{dest:<40} {side:<5} {'rejects: ' + err.splitlines()[0][:90] if err else 'accepts'}")
    stale = enforced ^ set(RESOLVER_ENFORCED)
    print(f"\n{len(enforced)} of {len(seen)} range sides enforced by SGLang's resolver"
          + (f"; RESOLVER_ENFORCED differs on {sorted(stale)}" if stale else "; RESOLVER_ENFORCED matches"))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
