"""A pairwise covering array over SGLang 0.5.23's whole flag catalog, for the differential fuzz (issue #32 item 3).

    .venv/bin/python tests/fidelity/cover.py [--rows N] [--per-row K] [--seed S] [--json OUT]

`make fidelity-fuzz` runs the whole array (then the random sampler); CI runs a fixed-seed prefix of it
(tests/fidelity/test_cover.py).

Parameters: every flag of the catalog that takes a judgeable value (each choice; each boolean spelling, `--x` and
`--no-x`; boundary numbers), plus three that every case sets: the model family (dense, MoE, MLA with NEXTN, GDN
hybrid, Mamba hybrid, multimodal wrapper: config.json dirs under models/), the GPU generation (sm90, sm100, sm120)
and the speculative algorithm (with a draft that fits the family). A *setting* is one (parameter, value); the array
covers every pair of settings of two different parameters: each pair appears together in some case.

Why not one case per row of the textbook array: a textbook row sets every parameter, and a launch with 400 flags
is rejected for one reason whatever the rest says. Here a case sets the three fixed parameters and K flags (default
20), chosen greedily (AETG-style: of a random sample of candidates, the one that covers the most pairs still
uncovered together with what the case already holds), so the array stays a few thousand launches and each one still
reads as a launch a person could write.

Free-text flags (paths, names, hosts, JSON) have no finite domain and are not parameters; they are counted in the
report's header. DENY names the few flags the resolver cannot judge on this machine, each with the reason.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import families  # noqa: E402
import fuzz  # noqa: E402

MODELS = fuzz.MODELS
SGLANG = fuzz.SGLANG
GPUS = fuzz.GPUS

# model family -> (target dir, DFlash-style draft or None, EAGLE-style draft or None)
FAMILIES: dict[str, tuple[str, str | None, str | None]] = {
    "dense": ("qwen3-8b", "qwen3-8b-dflash-b16", "qwen3-8b-eagle3"),
    "moe": ("qwen3-30b-a3b", "qwen3-30b-a3b-dflash-b16", "qwen3-8b-eagle3"),
    "mla-nextn": ("deepseek-v3-nextn", "qwen3-8b-dflash-b16", "deepseek-v3-nextn"),
    "gdn-hybrid": ("qwen3-next-80b-a3b", "qwen3-next-dflash-b16", "qwen3-8b-eagle3"),
    "gdn-hybrid-text": ("qwen3.5-27b-text", "qwen3.6-27b-dflash-b16", "qwen3-8b-eagle3"),
    "mamba-hybrid": ("nemotron-h-8b", None, None),
    "multimodal": ("qwen3.6-27b", "qwen3.6-27b-dflash-b16", "qwen3-8b-eagle3"),
    "multimodal-moe": ("qwen3.6-35b-a3b", "qwen3.6-35b-a3b-dflash-b16", "qwen3-8b-eagle3"),
}
ALGORITHMS = (None, "DFLASH", "EAGLE3", "EAGLE", "NEXTN", "STANDALONE", "NGRAM", "DSPARK", "UNO", "FROZEN_KV_MTP")

# Flags left out of the array, each with why the CPU resolver cannot judge it (nothing else is left out).
DENY: dict[str, str] = fuzz.JUDGE_DENY  # the random sampler's, the one list

# Boundary numbers for integer and float flags without a table in fuzz.py: below, at and above the usual floor.
INT_BOUNDARIES = (-1, 0, 1)
FLOAT_BOUNDARIES = (-1.0, 0.0, 1.0)

@dataclass(frozen=True)
class Setting:
    param: str  # a flag name, or "model" / "gpu" / "algorithm"
    value: str | None  # what the case shows: a family, a GPU, an algorithm, or the flag's value (None: a switch)
    argv: tuple[str, ...]  # the tokens it adds to the launch


def flag_settings(catalog) -> tuple[list[Setting], list[str]]:
    """Every (flag, value) the array covers, and the flags left out as free text."""
    settings: list[Setting] = []
    free_text: list[str] = []
    for spec in catalog.flags:
        if spec.deprecated or spec.alias_of or spec.name in DENY or spec.name.startswith("speculative-ddtree"):
            continue
        opt = spec.option
        if spec.action == "boolean_optional":
            settings += [Setting(spec.name, "on", (opt,)), Setting(spec.name, "off", ("--no-" + opt[2:],))]
        elif spec.nargs == 0 or spec.action in ("store_true", "store_false", "store_const"):
            settings.append(Setting(spec.name, None, (opt,)))
        elif spec.choices and spec.nargs in (None, "?"):
            settings += [Setting(spec.name, str(c), (opt, str(c))) for c in spec.choices]
        elif spec.type == "int" and spec.nargs is None:
            values = fuzz.INT_VALUES.get(spec.name) or INT_BOUNDARIES
            settings += [Setting(spec.name, str(v), (opt, str(v))) for v in dict.fromkeys(values)]
        elif spec.type == "float" and spec.nargs is None:
            values = fuzz.FLOAT_VALUES.get(spec.name) or FLOAT_BOUNDARIES
            settings += [Setting(spec.name, str(v), (opt, str(v))) for v in dict.fromkeys(values)]
        else:
            free_text.append(spec.name)
    return settings, free_text


def fixed_settings() -> list[Setting]:
    out = [Setting("model", family, ()) for family in FAMILIES]
    out += [Setting("gpu", gpu, ()) for gpu in GPUS]
    out += [Setting("algorithm", algo or "none", ()) for algo in ALGORITHMS]
    return out


ALONE_FILE = HERE / "cover_alone.json"
BASE_ALONE = ("dense", "sm90", "none")  # the launch each setting is tried alone on


def setting_key(s: Setting) -> str:
    return f"{s.param}={s.value}" if s.value is not None else s.param


def rejected_alone() -> set[str] | None:
    """Settings SGLang's resolver rejects on their own (cover_alone.json, written by `cover.py --prescreen`), or
    None when the file is missing or was made from another catalog."""
    from ddtctl.schema.extensions import extended_catalog

    if not ALONE_FILE.exists():
        return None
    data = json.loads(ALONE_FILE.read_text(encoding="utf-8"))
    flags, _ = flag_settings(extended_catalog(SGLANG))
    if sorted(data.get("settings", {})) != sorted(setting_key(s) for s in flags):
        return None
    return {k for k, v in data["settings"].items() if not v["accepted"]}


def prescreen(path: Path = ALONE_FILE) -> dict:
    """Each flag setting alone on the base launch through SGLang's resolver; the verdicts, written to path."""
    from ddtctl.dryrun import dry_run_argvs
    from ddtctl.schema.extensions import extended_catalog

    flags, _ = flag_settings(extended_catalog(SGLANG))
    settings = fixed_settings() + flags
    base = [settings.index(Setting(p, v, ())) for p, v in zip(("model", "gpu", "algorithm"), BASE_ALONE)]
    array = Array(settings, [], 0, 0, [])
    items = []
    for s in flags:
        argv, gpu = case_argv(array, base + [settings.index(s)])
        items.append((setting_key(s), argv, gpu))
    verdicts = {r.source: r for r in dry_run_argvs(items)}
    out = {"sglang": SGLANG, "base": list(BASE_ALONE), "settings": {
        key: {"accepted": verdicts[key].accepted,
              "message": None if verdicts[key].accepted else fuzz.template((verdicts[key].error or {}).get(
                  "message", ""))}
        for key, _, _ in items}}
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


@dataclass
class Array:
    settings: list[Setting]
    rows: list[list[int]]  # setting indices of each case
    pairs_total: int
    pairs_covered: int
    free_text: list[str]
    # settings SGLang rejects on their own (cover_alone.json): each in one case on the base launch, outside the
    # pairwise domain (a setting that fails alone would decide every case it is paired in)
    single_rows: list[list[int]] = field(default_factory=list)


def _pair_count(settings: list[Setting]) -> int:
    per_param = Counter(s.param for s in settings)
    n = len(settings)
    return (n * n - sum(c * c for c in per_param.values())) // 2


def build(
    *,
    seed: int,
    per_row: int = 20,
    max_rows: int | None = None,
    candidates: int = 96,
    settings: list[Setting] | None = None,
) -> Array:
    """The greedy covering array (all rows, or the first max_rows) over the catalog's settings (or `settings`,
    which must start with the fixed parameters). Deterministic for a seed."""
    free_text: list[str] = []
    singles: list[Setting] = []
    if settings is None:
        from ddtctl.schema.extensions import extended_catalog

        flags, free_text = flag_settings(extended_catalog(SGLANG))
        alone = rejected_alone() or set()
        singles = [s for s in flags if setting_key(s) in alone]
        settings = fixed_settings() + [s for s in flags if setting_key(s) not in alone] + singles
    n = len(settings) - len(singles)
    param_of = [s.param for s in settings]
    param_mask: dict[str, int] = defaultdict(int)
    for i, p in enumerate(param_of):
        param_mask[p] |= 1 << i
    everything = (1 << n) - 1
    # uncovered[i]: bit j set while settings i and j (of different parameters) have not appeared together
    uncovered = [everything & ~param_mask[param_of[i]] for i in range(n)]
    fixed_params = ("model", "gpu", "algorithm")
    fixed_idx = {p: [i for i in range(n) if param_of[i] == p] for p in fixed_params}
    flag_idx = [i for i in range(n) if param_of[i] not in fixed_params]
    rng = random.Random(seed)
    rows: list[list[int]] = []
    remaining = sum(bin(u).count("1") for u in uncovered) // 2
    total = remaining
    while remaining and (max_rows is None or len(rows) < max_rows):
        row: list[int] = []
        row_mask = 0
        used: set[str] = set()
        for p in fixed_params:  # the fixed parameter value with the most uncovered partners first
            best = max(fixed_idx[p], key=lambda i: ((uncovered[i] & row_mask).bit_count(), uncovered[i].bit_count(),
                                                    rng.random()))
            row.append(best)
            row_mask |= 1 << best
            used.add(p)
        for k in range(per_row):
            # the first flag by a full scan (so the last uncovered pairs are always reached), the rest from a
            # random sample plus partners still uncovered with the last pick
            pool = flag_idx if k == 0 else rng.sample(flag_idx, min(candidates, len(flag_idx))) + _bits(
                uncovered[row[-1]], 32
            )
            pool = [i for i in pool if param_of[i] not in used]
            if not pool:
                break
            best = max(pool, key=lambda i: ((uncovered[i] & row_mask).bit_count(), uncovered[i].bit_count()))
            if uncovered[best].bit_count() == 0:
                break
            row.append(best)
            row_mask |= 1 << best
            used.add(param_of[best])
        newly = 0
        for i in row:
            newly += (uncovered[i] & row_mask).bit_count()
            uncovered[i] &= ~row_mask
        remaining -= newly // 2
        if newly == 0:  # nothing left that a row can still cover (cannot happen while pairs remain)
            break
        rows.append(row)
    base = [settings.index(Setting(p, v, ())) for p, v in zip(("model", "gpu", "algorithm"), BASE_ALONE)] \
        if singles else []
    single_rows = [base + [n + k] for k in range(len(singles))]
    return Array(settings, rows, total, total - remaining, free_text, single_rows)


def _bits(mask: int, limit: int) -> list[int]:
    """The lowest `limit` set bits of mask, as indices."""
    out = []
    while mask and len(out) < limit:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def pairs_covered(array: Array, rows: list[list[int]]) -> int:
    seen: set[tuple[int, int]] = set()
    for row in rows:
        for a in range(len(row)):
            for b in range(a + 1, len(row)):
                i, j = sorted((row[a], row[b]))
                if array.settings[i].param != array.settings[j].param:
                    seen.add((i, j))
    return len(seen)


def case_argv(array: Array, row: list[int]) -> tuple[list[str], str]:
    """The launch argv of a row, and its GPU."""
    chosen = {array.settings[i].param: array.settings[i] for i in row[:3]}
    target, dflash_draft, eagle_draft = FAMILIES[str(chosen["model"].value)]
    argv = ["--model-path", str(MODELS / target)]
    algo = chosen["algorithm"].value
    if algo != "none":
        argv += ["--speculative-algorithm", str(algo)]
        draft = None
        if algo in ("DFLASH", "DSPARK"):
            draft = dflash_draft
        elif algo in ("EAGLE", "EAGLE3", "NEXTN"):
            draft = eagle_draft
        elif algo in ("STANDALONE", "UNO", "FROZEN_KV_MTP"):
            draft = target
        if draft is not None:
            argv += ["--speculative-draft-model-path", str(MODELS / draft)]
    for i in row[3:]:
        argv += list(array.settings[i].argv)
    return argv, str(chosen["gpu"].value)


def cases(array: Array, rows: list[list[int]] | None = None, *, prefix: str = "cover") -> list[fuzz.FuzzCase]:
    out = []
    for n, row in enumerate(array.rows if rows is None else rows):
        argv, gpu = case_argv(array, row)
        out.append(fuzz.FuzzCase(id=f"{prefix}-{n}", gpu=gpu, argv=argv))
    return out


def family_table(outcomes: list[fuzz.Outcome]) -> str:
    return families.family_table(outcomes, model_names={target: name for name, (target, _, _) in FAMILIES.items()},
                                 stricter=fuzz._stricter)


def header(array: Array, rows: list[list[int]]) -> str:
    flags = {s.param for s in array.settings} - {"model", "gpu", "algorithm"}
    covered = array.pairs_covered if rows is array.rows else pairs_covered(array, rows)
    return (f"covering array: {len(array.settings)} settings of {len(flags)} flags + model family "
            f"({len(FAMILIES)}), GPU ({len(GPUS)}), algorithm ({len(ALGORITHMS)}); {len(array.free_text)} "
            f"free-text flags not parameters; {len(DENY)} denied (cover.DENY)\n"
            f"{len(array.single_rows)} settings rejected alone (cover_alone.json) run one per case, outside the "
            f"pairs\n"
            f"cases: {len(rows)} of the array's {len(array.rows)}; pairs covered: {covered} of "
            f"{array.pairs_total} ({100.0 * covered / array.pairs_total:.2f}%)")


def main(argv: list[str]) -> int:
    from ddtctl.errors import DdtctlError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--per-row", type=int, default=20, help="flags set per case besides model, GPU, algorithm")
    ap.add_argument("--rows", type=int, default=None, help="only the first N cases (default: the whole array)")
    ap.add_argument("--examples", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="write every disagreeing case here")
    ap.add_argument("--prescreen", action="store_true",
                    help=f"first try every setting alone through SGLang and write {ALONE_FILE.name}")
    args = ap.parse_args(argv)
    if args.prescreen:
        t0 = time.monotonic()
        data = prescreen()
        bad = sum(not v["accepted"] for v in data["settings"].values())
        print(f"prescreen: {len(data['settings'])} settings alone, {bad} rejected by SGLang "
              f"({time.monotonic() - t0:.0f} s); wrote {ALONE_FILE}", flush=True)
    t0 = time.monotonic()
    array = build(seed=args.seed, per_row=args.per_row, max_rows=args.rows)
    print(f"fidelity-cover: seed {args.seed}, built in {time.monotonic() - t0:.1f} s", flush=True)
    print(header(array, array.rows), flush=True)
    t0 = time.monotonic()
    try:
        outcomes = fuzz.run(cases(array) + cases(array, array.single_rows, prefix="alone"))
    except DdtctlError as err:
        print(f"fidelity-cover: {err.one_line()}", file=sys.stderr)
        return 2
    print(fuzz.table(outcomes, seed=args.seed, examples=args.examples, elapsed=time.monotonic() - t0))
    print(f"\n{families.CAPTION}\n")
    print(family_table(outcomes))
    return fuzz.finish(outcomes, args.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
