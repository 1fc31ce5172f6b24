"""Flags ddtctl adds to SGLang through the DDTREE payload (they are not in any SGLang release's catalog)."""

from __future__ import annotations

from ddtctl.schema.catalog import Catalog, FlagSpec, load_catalog

PAYLOAD = "the ddtctl DDTREE payload (ddtctl overlay)"


def _flag(name: str, type_: str | None, action: str, default, help_: str) -> FlagSpec:
    return FlagSpec(
        name=name,
        option_strings=(f"--{name}",),
        dest=name.replace("-", "_"),
        action=action,
        type=type_,
        nargs=0 if action == "store_true" else None,
        default=default,
        choices=None,
        required=False,
        help=help_ + f" [added by {PAYLOAD}]",
        deprecated=False,
        alias_of=None,
    )


# The one source of the DDTREE flags' type, default and help. The payload's patch of SGLang's
# arg_groups/fields/spec.py declares the same fields (SGLang's own --help); tests/schema/
# test_ddtree_flag_source.py holds it, the payload's smoke table and ddtree_core.DDTREE_FLAGS equal to these.
DDTREE_FLAG_SPECS: tuple[FlagSpec, ...] = (
    _flag(
        "speculative-ddtree-budget",
        "int",
        "store",
        None,
        "DDTREE only. Node budget B of the draft tree: nodes verified per step, root excluded (each verify "
        "pass is B + 1 tokens wide). Default: block size - 1; with a budget schedule, the schedule's widest "
        "tree.",
    ),
    _flag(
        "speculative-ddtree-topk-cap",
        "int",
        "store",
        None,
        "DDTREE only. Most candidates per tree depth taken from the draft logits (K = min(cap, budget, "
        "vocab)). Default: the budget.",
    ),
    _flag(
        "speculative-ddtree-budget-schedule",
        "str",
        "store",
        None,
        "DDTREE only. Budget per batch size, e.g. 2:127,4:64,8:16,0: batches of at most 2 requests verify a "
        "127-node tree, at most 4 a 64-node one, at most 8 a 16-node one, larger batches the chain (0 or "
        "chain). Default: the budget at every batch size.",
    ),
    _flag(
        "speculative-ddtree-shadow-linear",
        None,
        "store_true",
        False,
        "DDTREE only, hybrid (Mamba/GDN) targets: state-exact tree verification, each tree node verified on "
        "the recurrent state of its own root-to-node path and the state committed along the accepted path "
        "only. Already the default on hybrid targets (the flag says so explicitly); contradicts "
        "--speculative-ddtree-allow-hybrid-unsafe.",
    ),
    _flag(
        "speculative-ddtree-allow-hybrid-unsafe",
        None,
        "store_true",
        False,
        "DDTREE only, hybrid (Mamba/GDN) targets: verify with the chain kernels in tree order instead of "
        "exact trees; sibling branches share recurrent state, so outputs may differ from the target's greedy "
        "decoding.",
    ),
)


class ExtendedCatalog(Catalog):
    """A release's catalog plus ddtctl's payload flags, looked up the same way."""

    def __init__(self, base: Catalog):
        super().__init__(
            base.version, tuple(base.flags) + DDTREE_FLAG_SPECS, generator=base.generator, source=base.source
        )
        self.base = base

    @staticmethod
    def is_extension(spec: FlagSpec) -> bool:
        return spec in DDTREE_FLAG_SPECS


_cache: dict[str, ExtendedCatalog] = {}


def extended_catalog(version: str) -> ExtendedCatalog:

    if version not in _cache:
        _cache[version] = ExtendedCatalog(load_catalog(version))
    return _cache[version]
