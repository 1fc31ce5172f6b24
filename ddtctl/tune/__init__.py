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
"""

from __future__ import annotations

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
