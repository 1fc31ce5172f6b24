"""DDTREE as a registered speculative algorithm of sglang 0.5.23 (a CustomSpecAlgo of the DFLASH family)."""

from __future__ import annotations

from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from ddtree_sglang import ALGORITHM, PAYLOAD_NAME

LAUNCH_REFUSAL = (
    f"--speculative-algorithm {ALGORITHM}: this {PAYLOAD_NAME} payload teaches SGLang the DDTREE name, flags and "
    "rules (validation and dry-run work), but it does not contain the DDTREE decoding worker yet, so the server "
    "refuses to start rather than silently run another algorithm. Serve with --speculative-algorithm DFLASH (same "
    "drafter) until a payload with the DDTREE worker is installed."
)


class DdtreeLaunchRefused(RuntimeError):
    """Raised at server start while the payload has no DDTREE worker."""


class DdtreeSpecAlgo(CustomSpecAlgo):
    """DDTREE: the DFLASH drafter's block proposes a draft tree, verified in one target pass of budget + 1 tokens.

    It answers like DFLASH wherever SGLang branches on the DFLASH family (draft runner, target-verify-for-draft,
    hidden-state capture) and is_dflash() stays False so DFLASH-only code paths never take it for plain DFLASH.
    """

    def is_dflash_family(self) -> bool:
        return True

    def supports_target_verify_for_draft(self) -> bool:
        return True

    def supports_prefill_shared_read_done(self) -> bool:
        return True

    def resolve_max_speculative_num_draft_tokens(self, server_args):
        """The verify pass is budget + 1 tokens wide (the drafter's block may be wider): size buffers for both."""
        from sglang.srt.arg_groups.overrides import resolving_view

        cfg = resolving_view(server_args)
        widths = [w for w in (cfg.speculative_num_draft_tokens, cfg.speculative_ddtree_verify_width) if w]
        return max(widths) if widths else None

    def create_worker(self, server_args):
        raise DdtreeLaunchRefused(LAUNCH_REFUSAL)


def worker_factory(server_args):
    raise DdtreeLaunchRefused(LAUNCH_REFUSAL)
