"""Differential fuzzing of ddtctl's static validator against SGLang 0.5.23's own resolver.

    .venv/bin/python tests/fidelity/fuzz.py [--n 2000] [--seed S] [--json OUT] [--examples 2] [--ddtree]

`make fidelity-fuzz N=2000 SEED=...` runs it (`DDTREE=1`: DDTREE launches through the resolver with the payload view
first on sys.path, as `ddtctl dry-run --overlay auto` does). Each case is a launch argv sampled from the flag
catalog's types and choices (ddtctl/schema/catalogs), weighted toward the speculative, mamba, attention, parallel and page/kv flags, over
the config.json-only model dirs of tests/fidelity/models and the three GPU generations ddtctl declares (sm90, sm100,
sm120). Every case goes through `ddtctl.validate.validate_argv` and through SGLang's prepare_server_args +
resolve_once + check_server_args in ONE warm resolver process of the managed env (ddtctl/bridge).

Outcomes per case: agree (same verdict), stricter-by-design (static rejects only through rules that declare
`sglang_enforces=False`, or findings listed under `stricter_findings` in fuzz_known.yaml, each documenting the
runtime failure SGLang's resolver misses), disagree, oracle-artefact (SGLang's verdict comes from the dry-run
environment, not the launch: ORACLE_ARTEFACTS). Disagreements are
grouped into classes: `miss: <SGLang hook>: <message template>` (SGLang rejects, static accepts) and
`false-reject: <rule ids>` (static rejects what SGLang accepts).

Exit 0 when no case disagrees, 1 otherwise, 2 when the managed SGLang env is missing.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import families  # noqa: E402

MODELS = HERE / "models"
SGLANG = "0.5.23"
GPUS = ("sm90", "sm100", "sm120")

# target model dir -> drafts that fit it, per algorithm family
TARGETS: dict[str, dict[str, tuple[str, ...]]] = {
    "qwen3-8b": {"dflash": ("qwen3-8b-dflash-b16", "qwen3-8b-dflash-b8", "qwen3-8b-dflash-noblock"),
                 "eagle": ("qwen3-8b-eagle3",)},
    "qwen3-30b-a3b": {"dflash": ("qwen3-30b-a3b-dflash-b16",), "eagle": ("qwen3-8b-eagle3",)},
    "deepseek-v3-nextn": {"dflash": ("qwen3-8b-dflash-b16",), "eagle": ()},
    "qwen3-next-80b-a3b": {"dflash": ("qwen3-next-dflash-b16",), "eagle": ("qwen3-8b-eagle3",)},
    "qwen3.5-27b-text": {"dflash": ("qwen3.6-27b-dflash-b16",), "eagle": ("qwen3-8b-eagle3",)},
    "qwen3.6-27b": {"dflash": ("qwen3.6-27b-dflash-b16",), "eagle": ("qwen3-8b-eagle3",)},
    "qwen3.6-35b-a3b": {"dflash": ("qwen3.6-35b-a3b-dflash-b16",), "eagle": ("qwen3-8b-eagle3",)},
}
TARGET_WEIGHTS = {"qwen3-8b": 4, "qwen3-30b-a3b": 2, "deepseek-v3-nextn": 2, "qwen3-next-80b-a3b": 2,
                  "qwen3.5-27b-text": 1, "qwen3.6-27b": 2, "qwen3.6-35b-a3b": 1}
# DDTREE needs the payload view (see fidelity's ddtree_cases.yaml): `--ddtree` fuzzes it through the resolver with
# the built payload first on sys.path; the plain resolver fuzzes SGLang's own algorithms.
ALGORITHMS = {None: 24, "DFLASH": 20, "EAGLE3": 14, "EAGLE": 8, "NEXTN": 6, "STANDALONE": 5, "NGRAM": 10,
              "DSPARK": 2, "UNO": 1, "FROZEN_KV_MTP": 1, "dflash": 2, "eagle3": 1, "nextn": 1}
DDTREE_ALGORITHMS = {"DDTREE": 20, "ddtree": 1}
# DDTREE's own flags (the payload's catalog extension), weighted like the speculative focus group
DDTREE_FOCUS = (r"^speculative-ddtree-", 3.0)

# Flags the generator samples, by group: (name regex, weight). Values come from the catalog (choices, type).
FOCUS = [
    (r"^speculative-(num-steps|eagle-topk|num-draft-tokens|dflash-block-size|draft-window-size|draft-sink-size|"
     r"use-rejection-sampling|use-block-verification|accept-threshold-(single|acc)|attention-mode|"
     r"draft-attention-backend|draft-kv-cache-dtype|adaptive|ngram-(max|min)-bfs-breadth|ngram-match-type)$", 3.0),
    (r"^mamba-(radix-cache-strategy|track-interval|full-memory-ratio|ssm-dtype|backend|max-states-per-path)$", 3.0),
    (r"^(linear-attn-backend|max-mamba-cache-size)$", 1.0),
    (r"^(attention-backend|prefill-attention-backend|decode-attention-backend)$", 4.0),
    (r"^(tp-size|dp-size|pp-size|ep-size|attn-cp-size|nnodes|enable-dp-attention|enable-dp-lm-head|moe-dense-tp-size)$",
     3.0),
    (r"^(page-size|kv-cache-dtype|chunked-prefill-size|disable-radix-cache|disable-overlap-schedule|"
     r"enable-mixed-chunk|max-running-requests|context-length|mem-fraction-static|disable-chunked-prefix-cache)$", 3.0),
    (r"^(enable-torch-compile|disable-cuda-graph|disable-cuda-graph-padding|grammar-backend|"
     r"disaggregation-mode|disaggregation-decode-enable-radix-cache|enable-two-batch-overlap|"
     r"enable-deterministic-inference|sampling-backend|moe-a2a-backend|moe-runner-backend|dtype|"
     r"enable-lora|enable-hierarchical-cache|hicache-ratio)$", 1.0),
]
BACKGROUND_WEIGHT = 0.05
# Flags the sampler leaves out, each with why the CPU resolver cannot judge it; nothing else is left out (issue #32
# item 3: every flag with a finite domain -- a choice, a switch, a number -- is sampled; free text such as paths,
# hosts and JSON has no domain to sample). The covering array (cover.py) leaves out the same ones.
JUDGE_DENY: dict[str, str] = {
    "speculative-algorithm": "a fixed parameter of every case (with a draft that fits the model)",
    "model-path": "a fixed parameter of every case (the model family)",
    "device": "the dry-run declares cuda and the GPU generation itself",
    "enable-http2": "imports granian, absent from the managed env (ORACLE_ARTEFACTS)",
    "enable-nvidia-megakernel": "needs the sgl-nvidia-mega plugin installed (ORACLE_ARTEFACTS)",
}

INT_VALUES = {
    "tp-size": (1, 1, 2, 2, 4, 8), "dp-size": (1, 2, 2, 4), "pp-size": (1, 2, 2), "ep-size": (1, 2, 8),
    "attn-cp-size": (1, 2), "nnodes": (1, 2), "moe-dense-tp-size": (1, 2),
    "page-size": (1, 1, 16, 32, 64, 128), "chunked-prefill-size": (-1, 512, 1000, 2048, 8192),
    "max-running-requests": (1, 8, 48, 128), "context-length": (4096, 32768, 1048576),
    "mamba-track-interval": (8, 16, 64, 100, 256), "max-mamba-cache-size": (16, 256),
    "mamba-max-states-per-path": (-2, -1, 0, 4),
    "speculative-num-steps": (1, 2, 3, 5), "speculative-eagle-topk": (1, 1, 2, 4, 8),
    "speculative-num-draft-tokens": (2, 4, 8, 16, 32), "speculative-dflash-block-size": (0, 8, 16, 16, -4),
    "speculative-draft-window-size": (0, 8, 16, 32, 512), "speculative-draft-sink-size": (-1, 0, 4),
    "speculative-ngram-max-bfs-breadth": (1, 4, 10), "speculative-ngram-min-bfs-breadth": (1, 2, 12),
    "speculative-ddtree-budget": (0, 1, 8, 15, 16, 32, 64, 256, 4096, 5000),
    "speculative-ddtree-topk-cap": (0, 1, 2, 4, 8, 64),
}
FLOAT_VALUES = {
    "mamba-full-memory-ratio": (-1.0, 0.0, 0.5, 0.9, 1.0, 1.5), "mem-fraction-static": (0.5, 0.8, 0.95, 1.2),
    "speculative-accept-threshold-single": (0.5, 1.0), "speculative-accept-threshold-acc": (0.5, 1.0),
    "hicache-ratio": (0.5, 2.0),
}
GENERIC_INTS = (-1, 0, 1, 2, 4, 16, 256)
GENERIC_FLOATS = (-1.0, 0.0, 0.5, 1.0, 2.0)


# SGLang verdicts that come from the CPU dry-run environment, not from the launch: on a GPU host with SGLang's CUDA
# dependencies installed they do not occur. Counted as "oracle-artefact", never as agreement or disagreement.
ORACLE_ARTEFACTS = {
    "FlashInfer mamba module not available": "mamba_hook.py:54-75 imports flashinfer.mamba; the CPU env has no "
                                             "flashinfer wheel (a GPU host's SGLang install does)",
    "--enable-http2 requires the": "serving_hook.py:107-113 imports the optional granian package, absent "
                                   "from the managed env",
    "Unknown quantization method: mxfp4": "layers/quantization/__init__.py:99-105 registers mxfp4 when is_cpu() or "
                                          "is_cuda() at import; the CPU dry-run env declares its GPU after that "
                                          "import, so the registry lacks it (a CUDA host's has it)",
    "plugin is not installed; install sgl-nvidia-mega": "kernel_plugins/nvidia/binding.py:288-298: "
                                                        "--enable-nvidia-megakernel needs the sgl-nvidia-mega plugin "
                                                        "installed next to SGLang on the server host (a host "
                                                        "property; ddtctl warns, DDT939)",
}


@dataclass
class FuzzCase:
    id: str
    gpu: str
    argv: list[str]

    def text(self) -> str:
        import shlex

        return shlex.join(a.replace(str(MODELS), "{models}") for a in self.argv)


@dataclass
class Outcome:
    case: FuzzCase
    outcome: str  # agree | stricter-by-design | disagree | setup-error
    sglang_accepted: bool
    sglang_error: dict | None
    static_errors: list[tuple[str, str]]
    cls: str | None = None
    extra: dict = field(default_factory=dict)


# -- generation -----------------------------------------------------------------------------------------------------
def _pool(catalog, ddtree: bool = False) -> tuple[list, list[float]]:
    specs, weights = [], []
    focus = [(re.compile(p), w) for p, w in FOCUS + ([DDTREE_FOCUS] if ddtree else [])]
    for spec in catalog.flags:
        if spec.deprecated or spec.alias_of or (spec.name.startswith("speculative-ddtree") and not ddtree):
            continue
        weight = next((w for pat, w in focus if pat.search(spec.name)), None)
        if weight is None:
            if spec.name in JUDGE_DENY:
                continue
            usable = spec.choices or spec.action in ("store_true", "boolean_optional") or spec.type in ("int", "float")
            if not usable or spec.nargs not in (None, 0):
                continue
            weight = BACKGROUND_WEIGHT
        specs.append(spec)
        weights.append(weight)
    return specs, weights


def _value(rng: random.Random, spec) -> list[str]:
    """argv tokens for one flag, sampled from the catalog's choices / type."""
    opt = spec.option
    if spec.action == "boolean_optional":
        return [rng.choice([opt, "--no-" + opt[2:]])]
    if spec.nargs == 0 or spec.action in ("store_true", "store_false", "store_const"):
        return [opt]
    if spec.choices:
        return [opt, str(rng.choice(spec.choices))]
    if spec.name in INT_VALUES:
        return [opt, str(rng.choice(INT_VALUES[spec.name]))]
    if spec.name in FLOAT_VALUES:
        return [opt, str(rng.choice(FLOAT_VALUES[spec.name]))]
    if spec.name == "speculative-draft-attention-backend":
        return [opt, rng.choice(("triton", "fa3", "flashinfer", "trtllm_mha", "fa4"))]
    if spec.type == "int":
        return [opt, str(rng.choice(GENERIC_INTS))]
    if spec.type == "float":
        return [opt, str(rng.choice(GENERIC_FLOATS))]
    return []


def _weighted(rng: random.Random, table: dict) -> Any:
    keys = list(table)
    return rng.choices(keys, weights=[table[k] for k in keys])[0]


def generate(n: int, seed: int, *, ddtree: bool = False) -> list[FuzzCase]:
    """n launches from `seed`. ddtree: every launch runs DDTREE (a DFlash drafter 90% of the time, its own flags in
    the pool, overlap scheduling off 70% of the time), for the resolver with the payload view."""
    from ddtctl.schema.extensions import extended_catalog

    rng = random.Random(seed)
    catalog = extended_catalog(SGLANG)
    specs, weights = _pool(catalog, ddtree)
    cases = []
    for i in range(n):
        target = _weighted(rng, TARGET_WEIGHTS)
        gpu = rng.choice(GPUS)
        argv = ["--model-path", str(MODELS / target)]
        algo = _weighted(rng, DDTREE_ALGORITHMS if ddtree else ALGORITHMS)
        if algo is not None:
            argv += ["--speculative-algorithm", algo]
            family = str(algo).upper()
            drafts = TARGETS[target]
            draft = None
            roll = rng.random()
            if family in ("DFLASH", "DSPARK", "DDTREE"):
                draft = rng.choice(drafts["dflash"]) if roll < 0.9 else None
            elif family in ("EAGLE", "EAGLE3", "NEXTN"):
                if target == "deepseek-v3-nextn":
                    draft = target if roll < 0.3 else None
                elif drafts["eagle"] and roll < 0.85:
                    draft = rng.choice(drafts["eagle"])
            elif family == "STANDALONE":
                draft = rng.choice((target, "qwen3-8b")) if roll < 0.9 else None
            elif family in ("UNO", "FROZEN_KV_MTP") and roll < 0.5:
                draft = target
            if draft is not None:
                argv += ["--speculative-draft-model-path", str(MODELS / draft)]
            if family in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE") and rng.random() < 0.6:
                steps = rng.choice((1, 2, 3, 5))
                topk = rng.choice((1, 1, 2, 4, 8))
                tokens = steps + 1 if topk == 1 else rng.choice((steps + 1, 4, 8, 16))
                argv += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                         "--speculative-num-draft-tokens", str(tokens)]
        if ddtree and rng.random() < 0.7:
            argv.append("--disable-overlap-schedule")
        k = rng.choice((0, 1, 1, 2, 2, 3, 3, 4, 5, 6))
        seen = {a for a in argv if a.startswith("--")}
        for spec in rng.choices(specs, weights=weights, k=k):
            if spec.option in seen:
                continue
            tokens = _value(rng, spec)
            if tokens:
                seen.add(spec.option)
                argv += tokens
        cases.append(FuzzCase(id=f"fuzz-{'ddtree-' if ddtree else ''}{seed}-{i}", gpu=gpu, argv=argv))
    return cases


# -- running --------------------------------------------------------------------------------------------------------
_NUM = re.compile(r"(?<![A-Za-z_])-?\d+(\.\d+)?")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def template(message: str) -> str:
    """An SGLang error message with its numbers, quoted values and paths blanked, so one cause is one class."""
    text = (message or "").replace(str(MODELS), "{models}")
    text = re.sub(r"\{models\}/[\w.\-]+", "{model}", text)
    text = _QUOTED.sub("'…'", text)
    text = _NUM.sub("N", text)
    text = text.splitlines()[0] if text else text
    return text[:150]


KNOWN_FILE = HERE / "fuzz_known.yaml"


def stricter_findings() -> list[tuple[str, re.Pattern, str]]:
    """Static findings from outside ddtctl/rules (no `sglang_enforces` flag there: ddtctl/flags.py's value checks)
    that are stricter than SGLang's resolver by design: (rule, message pattern, evidence) from fuzz_known.yaml."""
    import yaml

    if not KNOWN_FILE.exists():
        return []
    data = yaml.safe_load(KNOWN_FILE.read_text(encoding="utf-8")) or {}
    return [(str(e["rule"]), re.compile(str(e["message"])), str(e["evidence"]))
            for e in data.get("stricter_findings") or []]


_STRICTER: list | None = None


def _stricter(rule: str, message: str) -> bool:
    from ddtctl.rules.engine import RULES

    global _STRICTER
    if rule in RULES:
        return not RULES[rule].sglang_enforces
    if _STRICTER is None:
        _STRICTER = stricter_findings()
    return any(rule == r and pattern.search(message) for r, pattern, _ in _STRICTER)


def classify(case: FuzzCase, sglang, static) -> Outcome:
    errors = [(f.rule, f.message) for f in static.findings if f.severity == "error"]
    if sglang.setup_error:
        return Outcome(case, "setup-error", False, sglang.error, errors,
                       cls=f"setup: {sglang.error.get('type')}: {template(sglang.error.get('message', ''))}")
    rules = sorted({r for r, _ in errors})
    message = (sglang.error or {}).get("message") or ""
    for needle in ORACLE_ARTEFACTS:
        if not sglang.accepted and needle in message:
            return Outcome(case, "oracle-artefact", False, sglang.error, errors, cls=f"artefact: {needle}")
    if sglang.accepted == static.valid:
        return Outcome(case, "agree", sglang.accepted, sglang.error, errors)
    if sglang.accepted:
        if errors and all(_stricter(r, m) for r, m in errors):
            return Outcome(case, "stricter-by-design", True, None, errors, cls=f"stricter: {' '.join(rules)}")
        return Outcome(case, "disagree", True, None, errors, cls=f"false-reject: {' '.join(rules)}")
    err = sglang.error or {}
    return Outcome(case, "disagree", False, err, errors,
                   cls=f"miss: {err.get('type')} in {err.get('hook')}: {template(err.get('message', ''))}")


def ddtree_sys_path() -> list[str]:
    """The built DDTREE payload view (ddtctl overlay build, reused when current), for the resolver's sys.path."""
    from corpus import overlay_path

    return overlay_path("ddtree")


def run(cases: list[FuzzCase], client=None, extra_sys_path=()) -> list[Outcome]:
    from ddtctl.dryrun import dry_run_argvs
    from ddtctl.validate import validate_argv

    live = {r.source: r for r in dry_run_argvs([(c.id, c.argv, c.gpu) for c in cases], client=client,
                                               extra_sys_path=list(extra_sys_path))}
    return [classify(c, live[c.id], validate_argv(c.argv, gpu=c.gpu, sglang=SGLANG, source=c.id)) for c in cases]


def table(outcomes: list[Outcome], *, seed: int, examples: int = 1, elapsed: float | None = None,
          mode: str = "plain") -> str:
    n = len(outcomes)
    count = Counter(o.outcome for o in outcomes)
    rejected = sum(not o.sglang_accepted for o in outcomes)
    judged = n - count["oracle-artefact"]
    agree_pct = 100.0 * (count["agree"] + count["stricter-by-design"]) / judged if judged else 100.0
    lines = [
        f"fidelity-fuzz: static `validate` vs SGLang {SGLANG}'s own resolver (seed {seed})"
        + (" with the DDTREE payload" if mode == "ddtree" else ""),
        "",
        "| seed | N | SGLang rejects | agree | stricter-by-design | disagree | oracle artefacts | setup errors "
        "| agreement |",
        "|-----:|--:|---------------:|------:|-------------------:|---------:|-----------------:|-------------:"
        "|----------:|",
        f"| {seed} | {n} | {rejected} | {count['agree']} | {count['stricter-by-design']} | {count['disagree']} | "
        f"{count['oracle-artefact']} | {count['setup-error']} | {agree_pct:.1f}% |",
        "",
        "agreement = (agree + stricter-by-design) / (N - oracle artefacts)",
    ]
    by_gpu: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        by_gpu[o.case.gpu][o.outcome] += 1
    lines += ["", "| GPU | cases | agree | stricter | disagree |", "|---|---:|---:|---:|---:|"]
    for gpu in sorted(by_gpu):
        c = by_gpu[gpu]
        lines.append(f"| {gpu} | {sum(c.values())} | {c['agree']} | {c['stricter-by-design']} | {c['disagree']} |")
    classes: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.cls is not None:
            classes[o.cls].append(o)
    for title, prefix in (("disagreement classes", ("miss", "false-reject")), ("setup errors", ("setup",)),
                          ("stricter by design", ("stricter",)), ("oracle artefacts", ("artefact",))):
        chosen = sorted(((k, v) for k, v in classes.items() if k.startswith(prefix)), key=lambda kv: -len(kv[1]))
        if not chosen:
            continue
        lines += ["", f"{title} ({len(chosen)}):"]
        for key, rows in chosen:
            lines.append(f"  {len(rows):4d}  {key}")
            for o in rows[:examples]:
                lines.append(f"          [{o.case.gpu}] {o.case.text()}")
                if o.outcome == "disagree" and o.sglang_accepted:
                    lines.append("            static: " + "; ".join(f"{r} {m}"[:160] for r, m in o.static_errors))
    if elapsed is not None:
        lines += ["", f"{n} cases through one warm SGLang resolver in {elapsed:.1f} s"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from ddtctl.errors import DdtctlError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=None, help="default: a fresh one (printed)")
    ap.add_argument("--examples", type=int, default=1, help="example argvs per class")
    ap.add_argument("--json", type=Path, default=None, help="write every disagreeing case here")
    ap.add_argument("--ddtree", action="store_true",
                    help="DDTREE launches, resolved with the built DDTREE payload view first on sys.path")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    mode = "ddtree" if args.ddtree else "plain"
    print(f"fidelity-fuzz: seed {seed}, N {args.n}{', DDTREE' if args.ddtree else ''}", flush=True)
    cases = generate(args.n, seed, ddtree=args.ddtree)
    t0 = time.monotonic()
    try:
        outcomes = run(cases, extra_sys_path=ddtree_sys_path() if args.ddtree else ())
    except DdtctlError as err:
        print(f"fidelity-fuzz: {err.one_line()}", file=sys.stderr)
        return 2
    print(table(outcomes, seed=seed, examples=args.examples, elapsed=time.monotonic() - t0, mode=mode))
    print(f"\n{families.CAPTION}\n\n{families.family_table(outcomes, stricter=_stricter)}")
    return finish(outcomes, args.json)


def finish(outcomes: list[Outcome], json_path: Path | None) -> int:
    """Write every disagreeing case to json_path (when given); the exit code: 1 when any case disagrees."""
    if json_path is not None:
        rows = [{"id": o.case.id, "gpu": o.case.gpu, "argv": o.case.text(), "outcome": o.outcome, "class": o.cls,
                 "sglang": o.sglang_error, "static": o.static_errors}
                for o in outcomes if o.outcome in ("disagree", "setup-error", "stricter-by-design")]
        json_path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        print(f"wrote {json_path}")
    return 0 if not any(o.outcome in ("disagree", "setup-error") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
