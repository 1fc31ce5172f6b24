"""`ddtctl tune`: find the speculative-decoding settings that serve fastest on the real host (issue #15).

The package's public face; one module per part of the work:

- `sweep`: the main loop (`tune()`, TuneOptions): each point of the space built as a profile in memory,
  validated, deployed, benchmarked, recorded; the host restored (or serving the winner) at the end;
- `space`: the search space (defaults per algorithm, a `--space` YAML, `env.NAME` keys) and each point's
  profile (a Variant: the document and the loaded profile, never a file);
- `bench`: SGLang's benchmark on the host through the agent's typed `bench` operation
  (ddtctl.remote.protocol.Bench), the user's prompt file, the figures read back;
- `results`: the points, the runs and the JSON-lines results file; `stats`: medians, spreads and the winner's
  verdict; `schedule`: DDTREE's budget schedule; `write`: `tune --write`; `plot`: `--plot` and
  `--plot-terminal` (matplotlib / plotext, imported only when drawing).

Nothing here prints: `tune()` returns a TuneResult and reports progress through callbacks.

The names below load their module on first use (PEP 562), so that `ddtctl validate SPACE.yaml`, which reads a
search space through `space` (an input, like a profile), does not load the sweep and its deploy machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddtctl.tune.bench import DEFAULT_BENCH, BenchRun, Prompts, load_prompts
    from ddtctl.tune.results import PointResult, TuneResult, append_result, read_results
    from ddtctl.tune.space import (
        BASELINES,
        DDTREE_SPACE,
        EAGLE_SPACE,
        ENV_PREFIX,
        PointSpec,
        Variant,
        baseline_point,
        default_space,
        env_name,
        env_value,
        load_space,
        normalize_space,
        point_env,
        points_of,
        variant_data,
        variant_profile,
    )
    from ddtctl.tune.sweep import DEFAULT_CONCURRENCY, TuneOptions, new_run_id, tune
    from ddtctl.tune.write import WriteResult, write_point

_HOME = {
    "DEFAULT_BENCH": "bench",
    "BenchRun": "bench",
    "Prompts": "bench",
    "load_prompts": "bench",
    "PointResult": "results",
    "TuneResult": "results",
    "append_result": "results",
    "read_results": "results",
    "BASELINES": "space",
    "DDTREE_SPACE": "space",
    "EAGLE_SPACE": "space",
    "ENV_PREFIX": "space",
    "PointSpec": "space",
    "Variant": "space",
    "baseline_point": "space",
    "default_space": "space",
    "env_name": "space",
    "env_value": "space",
    "load_space": "space",
    "normalize_space": "space",
    "point_env": "space",
    "points_of": "space",
    "variant_data": "space",
    "variant_profile": "space",
    "DEFAULT_CONCURRENCY": "sweep",
    "TuneOptions": "sweep",
    "new_run_id": "sweep",
    "tune": "sweep",
    "WriteResult": "write",
    "write_point": "write",
}
__all__ = [
    "BASELINES",
    "DDTREE_SPACE",
    "DEFAULT_BENCH",
    "DEFAULT_CONCURRENCY",
    "EAGLE_SPACE",
    "ENV_PREFIX",
    "BenchRun",
    "PointResult",
    "PointSpec",
    "Prompts",
    "TuneOptions",
    "TuneResult",
    "Variant",
    "WriteResult",
    "append_result",
    "baseline_point",
    "default_space",
    "env_name",
    "env_value",
    "load_prompts",
    "load_space",
    "new_run_id",
    "normalize_space",
    "point_env",
    "points_of",
    "read_results",
    "tune",
    "variant_data",
    "variant_profile",
    "write_point",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value
