"""DDTREE as a registered speculative algorithm of sglang 0.5.23 (a CustomSpecAlgo of the DFLASH family)."""

from __future__ import annotations

from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from ddtree_sglang import ALGORITHM, PAYLOAD_NAME

LAUNCH_REFUSAL = (
    f"--speculative-algorithm {ALGORITHM}: the DDTREE worker of this {PAYLOAD_NAME} payload is switched off on this "
    "host (DDTREE_WORKER=0), so the server refuses to start rather than silently run another algorithm. Unset "
    "DDTREE_WORKER to serve DDTREE, or serve with --speculative-algorithm DFLASH (same drafter)."
)


class DdtreeLaunchRefused(RuntimeError):
    """Raised at server start when the DDTREE worker is switched off (DDTREE_WORKER=0)."""


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

    def get_num_tokens_per_req_for_target_verify(self, num_draft_tokens: int, is_draft_worker: bool) -> int:
        """TARGET_VERIFY width for graph capture and buffers. The drafter keeps DFLASH's block (its graphs serve the
        draft pass). The target captures at the verify width B + 1 with the tree mask (graphs.py); with
        DDTREE_VERIFY_GRAPH=0 it answers a width no verify has, so every tree verify runs eagerly."""
        if is_draft_worker:
            return num_draft_tokens
        from sglang.srt.runtime_context import get_spec

        from ddtree_sglang.graphs import verify_graphs_enabled

        width = int(getattr(get_spec(), "speculative_ddtree_verify_width", None) or 0)
        if verify_graphs_enabled() and width:
            return width
        return max(int(num_draft_tokens or 0), width) + 1

    # SpeculativeAlgorithm (the enum) methods that sglang 0.5.23's CustomSpecAlgo lacks but the scheduler calls on
    # whatever algorithm it runs; DDTREE answers as DFLASH does.
    def carries_draft_hidden_states(self) -> bool:
        return False  # EAGLE family only

    def need_topk(self) -> bool:
        return False  # EAGLE / STANDALONE only

    def get_platform_worker_cls(self):
        return None  # no out-of-tree platform worker replaces DDTREE's

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True,
                          needs_confidence_relay: bool = False):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay)

    def create_worker(self, server_args):
        if not worker_enabled():
            raise DdtreeLaunchRefused(LAUNCH_REFUSAL)
        return super().create_worker(server_args)


def worker_enabled() -> bool:
    """Whether this payload's DDTREE worker (worker.py) serves. On by default since it decoded losslessly in a real
    SGLang 0.5.23 server on an H200 (notes/sglang-e2e-h200.md, run 4); DDTREE_WORKER=0 is the operator's off switch
    (launch is then refused, never downgraded)."""
    import os

    return os.environ.get("DDTREE_WORKER", "1") != "0"


def worker_factory(server_args):
    if not worker_enabled():
        raise DdtreeLaunchRefused(LAUNCH_REFUSAL)
    from ddtree_sglang.worker import DDTreeWorker

    return DDTreeWorker
