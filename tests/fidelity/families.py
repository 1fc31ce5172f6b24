"""Feature families for the fidelity fuzz's per-family agreement table (issue #32 item 3).

    .venv/bin/python tests/fidelity/families.py --write   # re-derive flag_sections.json (managed env)

A flag's family comes from where SGLang 0.5.23 declares it, not from a hand list of flags: each flag is a
field of one namespace class under sglang/srt/arg_groups/fields/ (its `_NS_PATH`: spec, disagg, exec.mamba,
exec.kernel, parallel, lora, memory, ...), under a section banner there (`# Hierarchical cache` between two
`# ---` lines). flag_sections.json snapshots that map (field -> [namespace, section]) so the table needs no
SGLang install; the DDTREE payload's own fields (its patch of fields/spec.py) join their file's namespace. A
namespace, or one section of it, is then named by the feature family the issue reports (NAMESPACE_FAMILY,
SECTION_FAMILY: 25 entries over SGLang's 21 namespaces); a namespace without an entry is its own family.

A case counts in the family of every flag it sets (the model path and the draft path, which every speculative
case sets, excepted), so a disagreeing case counts against each of them; `attention x GPU` rows split the
attention family by the case's GPU, and `model: ...` rows split every case by its model family. `named`
counts, per family, the disagreements whose deciding message names a flag of it: a finer blame than "set".
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "flag_sections.json"
SGLANG = "0.5.23"
FIELDS_DIR = "sglang/srt/arg_groups/fields"
PAYLOAD_PATCHES = HERE.parents[1] / "ddtctl" / "payload" / f"ddtree-sglang-{SGLANG}" / "patches"

# SGLang namespace -> feature family (a namespace not named here is its own family).
NAMESPACE_FAMILY = {
    "spec": "speculative",
    "disagg": "disaggregation",
    "exec.mamba": "mamba",
    # SGLang's "Kernel backend" section: attention backends (and DSA, sampling, grammar backends)
    "exec.kernel": "attention",
    "parallel": "parallelism",
    "exec.comm": "parallelism",
    "exec.moe": "moe",
    "exec.overlap": "moe",  # two-batch overlap of MoE dispatch
    "lora": "lora",
    "memory": "scheduling",  # radix cache and eviction; its cache-tier sections are below
    "schedule": "scheduling",
    "exec.graph": "cuda graph",
    "mm": "multimodal",
    "model": "model loading",
    "exec.offload": "offloading",
    "exec.features": "runtime features",
    "exec.deterministic": "deterministic inference",
    "exec.dllm": "diffusion LLM",
}
# (namespace, section banner) -> feature family, where a section differs from its namespace's.
SECTION_FAMILY = {
    ("schedule", "Mamba cache and linear attn"): "mamba",
    ("memory", "Hierarchical cache"): "hierarchical cache",
    ("memory", "Hierarchical sparse attention"): "hierarchical cache",
    ("memory", "LMCache"): "hierarchical cache",
    ("memory", "FlexKV"): "hierarchical cache",
    ("memory", "Unified Radix Cache"): "hierarchical cache",
    ("model", "Quantization and data type"): "quantization",
}
UNPLACED = "other"  # a flag SGLang declares outside the namespace classes (--config)
FIXED_FLAGS = frozenset({"model_path", "speculative_draft_model_path"})

_RULE = re.compile(r"^\s*# -{10,}\s*$")
_TITLE = re.compile(r"^\s*# (\S.*?)\s*$")
_ADDED_FIELD = re.compile(r"^\+    ([a-z_][a-z0-9_]*): ")


def parse_fields(source: str) -> dict[str, tuple[str, str | None]]:
    """field -> (namespace, section) for one fields/*.py module's text."""
    lines = source.splitlines()
    banners = [
        (i + 2, m.group(1))
        for i in range(len(lines) - 2)
        if _RULE.match(lines[i]) and _RULE.match(lines[i + 2]) and (m := _TITLE.match(lines[i + 1]))
    ]
    out: dict[str, tuple[str, str | None]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        ns = next(
            (
                st.value.value
                for st in node.body
                if isinstance(st, ast.Assign)
                and isinstance(st.value, ast.Constant)
                and any(getattr(t, "id", None) == "_NS_PATH" for t in st.targets)
            ),
            None,
        )
        if not isinstance(ns, str):
            continue
        for st in node.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                above = [title for line, title in banners if node.lineno <= line <= st.lineno]
                out[st.target.id] = (ns, above[-1] if above else None)
    return out


def derive(site_packages: Path, patches: Iterable[Path] = ()) -> dict[str, tuple[str, str | None]]:
    """field -> (namespace, section) over SGLang's fields/ package, plus the fields the given patches add."""
    out: dict[str, tuple[str, str | None]] = {}
    ns_of_file: dict[str, str] = {}
    for path in sorted((site_packages / FIELDS_DIR).glob("*.py")):
        parsed = parse_fields(path.read_text(encoding="utf-8"))
        out.update(parsed)
        if len({ns for ns, _ in parsed.values()}) == 1:
            ns_of_file[path.name] = next(iter(parsed.values()))[0]
    for patch in patches:  # e.g. sglang__srt__arg_groups__fields__spec.py.patch
        name = patch.name.removesuffix(".patch").rsplit("__", 1)[-1]
        if name not in ns_of_file:
            continue
        for line in patch.read_text(encoding="utf-8").splitlines():
            if (m := _ADDED_FIELD.match(line)) and m.group(1) not in out:
                out[m.group(1)] = (ns_of_file[name], None)
    return out


def payload_patches() -> list[Path]:
    return sorted(PAYLOAD_PATCHES.glob("sglang__srt__arg_groups__fields__*.patch"))


@functools.cache
def sections() -> dict[str, tuple[str, str | None]]:
    data = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    return {k: (v[0], v[1]) for k, v in data["fields"].items()}


def family_of(ns: str, section: str | None) -> str:
    return SECTION_FAMILY.get((ns, section or "")) or NAMESPACE_FAMILY.get(ns, ns)


@functools.cache
def _dest_of_option() -> dict[str, str]:
    from ddtctl.schema.extensions import extended_catalog

    catalog = extended_catalog(SGLANG)
    live = {spec.name: spec.dest for spec in catalog.flags}
    out: dict[str, str] = {}
    for spec in catalog.flags:
        dest = live.get(spec.alias_of or "", spec.dest)
        for option in spec.option_strings:
            out[option] = dest
    return out


def flag_family(option: str) -> str | None:
    """The feature family of one argv option (`--tp-size`, `--no-enable-x`); None for the fixed model flags
    and for tokens that are not options of the catalog."""
    dests = _dest_of_option()
    dest = dests.get(option) or (dests.get("--" + option[5:]) if option.startswith("--no-") else None)
    if dest is None or dest in FIXED_FLAGS:
        return None
    where = sections().get(dest)
    return family_of(*where) if where else UNPLACED


def case_families(argv: list[str], gpu: str) -> set[str]:
    families = {f for a in argv if a.startswith("--") and (f := flag_family(a.split("=", 1)[0])) is not None}
    return families | ({f"attention x {gpu}"} if "attention" in families else set())


def model_of(argv: list[str], names: dict[str, str] | None = None) -> str | None:
    """The model dir a case's --model-path names (by the name `names` gives it, when given)."""
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in ("--model-path", "--model"):
            base = Path(value).name
            return (names or {}).get(base, base)
    return None


_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def named_families(outcome, stricter: Callable[[str, str], bool] | None = None) -> set[str]:
    """The families of the flags a disagreement's deciding message names: ddtctl's errors where SGLang
    accepts (a false reject; less those `stricter(rule, message)` calls stricter than SGLang by design),
    SGLang's error where ddtctl accepts (a miss)."""
    if outcome.sglang_accepted:
        text = " ".join(m for r, m in outcome.static_errors if stricter is None or not stricter(r, m))
    else:
        text = str((outcome.sglang_error or {}).get("message") or "")
    return {f for option in _OPTION.findall(text) if (f := flag_family(option)) is not None}


def family_table(
    outcomes: list,
    *,
    model_names: dict[str, str] | None = None,
    stricter: Callable[[str, str], bool] | None = None,
) -> str:
    """Agreement per feature family of the fuzz's outcomes (fuzz.Outcome: .case.argv, .case.gpu,
    .outcome, .sglang_accepted); agreement = (agree + stricter-by-design) / (cases - oracle artefacts), as
    fuzz.table does. `named` counts the disagreements whose deciding message names a flag of the family."""
    rows: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        keys = case_families(o.case.argv, o.case.gpu)
        model = model_of(o.case.argv, model_names)
        keys |= {f"model: {model}"} if model else set()
        named = named_families(o, stricter) if o.outcome in ("disagree", "setup-error") else set()
        for key in keys:
            c = rows[key]
            c["cases"] += 1
            c[o.outcome] += 1
            c["sglang rejects"] += not o.sglang_accepted
            c["named"] += key in named
    lines = [
        "| feature family | cases | SGLang rejects | agree | stricter | disagree | named | artefact "
        "| agreement |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(rows, key=lambda k: (k.startswith("model: "), k.startswith("attention x"), k)):
        c = rows[key]
        judged = c["cases"] - c["oracle-artefact"]
        pct = 100.0 * (c["agree"] + c["stricter-by-design"]) / judged if judged else 100.0
        lines.append(
            f"| {key} | {c['cases']} | {c['sglang rejects']} | {c['agree']} | {c['stricter-by-design']} | "
            f"{c['disagree'] + c['setup-error']} | {c['named']} | {c['oracle-artefact']} | {pct:.1f}% |"
        )
    return "\n".join(lines)


CAPTION = (
    "agreement per feature family (a family per flag from the SGLang namespace/section that declares it, "
    "tests/fidelity/families.py; a case counts in the family of every flag it sets, so a disagreeing case "
    "counts against each of them; `named`: the disagreements whose deciding message, ddtctl's error for a "
    "false reject or SGLang's for a miss, names a flag of the family; `model:` rows split all cases by "
    "model):"
)


def write_snapshot(site_packages: Path, path: Path = SNAPSHOT) -> dict:
    fields = derive(site_packages, payload_patches())
    data = {
        "sglang": SGLANG,
        "source": f"{FIELDS_DIR}/*.py: each field's class _NS_PATH and section banner, plus "
        "the fields the DDTREE payload's patches add (families.py --write)",
        "fields": {k: list(v) for k, v in sorted(fields.items())},
    }
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data["fields"].items())
    path.write_text(
        f'{{"sglang": {json.dumps(SGLANG)},\n "source": {json.dumps(data["source"])},\n "fields": {{\n'
        f"{body}\n}}}}\n",
        encoding="utf-8",
    )
    return data


def managed_site_packages() -> Path | None:
    from ddtctl.envs import managed_env

    return next(iter(sorted(managed_env(SGLANG).root.glob("lib/python*/site-packages"))), None)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1]))
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__.splitlines()[2].strip())
    site = managed_site_packages()
    if site is None:
        sys.exit(f"families: the managed SGLang {SGLANG} env is not built (`make sglang-env`)")
    written = write_snapshot(site)
    print(f"families: {len(written['fields'])} fields -> {SNAPSHOT}")
