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


DDTREE_FLAG_SPECS: tuple[FlagSpec, ...] = (
    _flag(
        "speculative-ddtree-budget",
        "int",
        "store",
        None,
        "DDTree node budget B: draft-tree nodes verified per step, root excluded (verify width B+1). "
        "Default: block_size - 1.",
    ),
    _flag(
        "speculative-ddtree-topk-cap",
        "int",
        "store",
        None,
        "Cap on candidates per tree depth (K = min(cap, budget, vocab)). Default: the budget.",
    ),
    _flag(
        "speculative-ddtree-budget-schedule",
        "str",
        "store",
        None,
        "DDTree budget per batch size, e.g. 2:127,4:64,8:16,0: batches of at most 2 requests verify a "
        "127-node tree, at most 4 a 64-node one, at most 8 a 16-node one, larger batches the chain (0 or "
        "chain). Default: the budget at every batch size; unset budget: the schedule's widest.",
    ),
    _flag(
        "speculative-ddtree-shadow-linear",
        None,
        "store_true",
        False,
        "On hybrid (Mamba/GDN) targets, verify only the tree's top-1 chain so recurrent layers never see a "
        "rejected branch: state-exact, identical to chain speculative decoding.",
    ),
    _flag(
        "speculative-ddtree-allow-hybrid-unsafe",
        None,
        "store_true",
        False,
        "Acknowledge that tree verification on recurrent layers is not state-exact "
        "and run DDTREE on a hybrid target anyway.",
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
