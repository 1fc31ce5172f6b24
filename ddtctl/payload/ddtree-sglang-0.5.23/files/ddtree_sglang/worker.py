"""The DDTREE decoding worker for sglang 0.5.23 (design: ddtctl notes/ddtree-worker-design.md).

Built on SGLang's DFLASH spec-v2 worker: the same drafter and draft pass, then a draft tree (budget B) built from the
drafter's vocab-parallel top-K + log-sum-exp, one target verify pass of width B + 1 with an ancestor-only custom mask
(and, on hybrid Mamba/GDN targets, parent-indexed recurrent state: hybrid.py), SGLang's tree walk to accept (the
prediction broadcast from TP rank 0, as DFLASH does), and a commit that compacts the accepted nodes' KV into chain
order, commits the last accepted node's recurrent state and hands the accepted hidden states to the drafter.
Runs under SGLang's overlap scheduler (spec v2), as DFLASH does: a decode step never waits for the device (no
host sync: the mask is sized from host-side lengths, the metrics accumulate on the device), the committed lengths are
published as soon as the accept is known, and the KV reservation covers the step still in flight.
"""

from __future__ import annotations

import importlib
import logging
import os
import time

import torch

from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.lora.layers import unwrap_lora_layer
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
    enable_num_token_non_padded,
)
from sglang.srt.runtime_context import get_exec, get_parallel, get_spec
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
from sglang.srt.speculative.dflash_utils import apply_dflash_verify_logits_adjustments
from sglang.srt.speculative.dflash_worker_v2 import (
    DFlashWorkerV2,
    _resolve_dflash_embedding_module,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite
from sglang.srt.speculative.spec_utils import commit_mamba_states_after_verify, draft_tp_context

from ddtree_sglang import draft_head, rules_core, tree_prep
from ddtree_sglang import graphs, hybrid
from ddtree_sglang.graphs import verify_graph_ready, verify_graphs_enabled
from ddtree_sglang.schedule import WidthSchedule
from ddtree_sglang.metrics import DdtreeMetrics, register

logger = logging.getLogger(__name__)


class DdtreeWorkerRefused(RuntimeError):
    """The DDTREE worker cannot run this configuration correctly; it says why instead of decoding wrongly."""


def _spec_value(server_args, name, default=None):
    spec = get_spec()
    value = getattr(spec, name, None)
    if value is None:
        value = getattr(server_args, name, None)
    return default if value is None else value


class DDTreeDraftInput(DFlashDraftInputV2):
    """DFLASH's draft-side state; decode reservations cover the verify width (2 * max(block, B + 1) slots)."""

    reserve_tokens: int = 0  # class-level, set by the worker (one DDTREE configuration per process)

    def prepare_for_decode(self, batch):
        import sglang.srt.speculative.dflash_info_v2 as info_v2

        block = int(get_spec().speculative_num_draft_tokens)
        # DFLASH reserves 2 * tokens past the committed length; under overlap that length lags the step in flight
        # (up to `block` more tokens), and the next window needs max(block, B + 1).
        tokens = tree_prep.decode_reserve_tokens(block, int(type(self).reserve_tokens or 0))
        if tokens == block:
            return super().prepare_for_decode(batch)
        original = info_v2.get_spec
        info_v2.get_spec = lambda: hybrid.WidthView(original(), tokens)
        try:
            return super().prepare_for_decode(batch)
        finally:
            info_v2.get_spec = original


def _make_input(bonus_tokens: torch.Tensor, new_seq_lens: torch.Tensor) -> DDTreeDraftInput:
    bs = int(new_seq_lens.numel())
    device = bonus_tokens.device
    return DDTreeDraftInput(
        topk_p=torch.empty((bs, 0), device=device, dtype=torch.float32),
        topk_index=torch.empty((bs, 0), device=device, dtype=torch.int64),
        bonus_tokens=bonus_tokens.to(dtype=torch.int64),
        new_seq_lens=new_seq_lens.to(dtype=torch.int64),
        hidden_states=torch.empty((bs, 0), device=device, dtype=torch.float16),
    )


def _load_test_hook():
    spec = os.environ.get("DDTREE_TEST_DRAFT_HOOK")
    if not spec:
        return None
    module, _, func = spec.partition(":")
    hook = getattr(importlib.import_module(module), func or "override")
    logger.warning("DDTREE: test-only draft hook %s is active (draft logits are replaced)", spec)
    return hook


class DDTreeWorker(DFlashWorkerV2):
    """DDTREE: DFLASH's draft pass -> draft tree -> one tree verify pass of width B + 1 -> accept -> commit."""

    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        block = int(self.block_size)
        self.depth = block - 1
        if self.depth < 1:
            raise DdtreeWorkerRefused(f"DDTREE needs a drafter block size >= 2, got {block}.")
        budget = int(_spec_value(server_args, "speculative_ddtree_budget", rules_core.default_budget(block)))
        cap = _spec_value(server_args, "speculative_ddtree_topk_cap", None)
        self.shadow_linear = bool(_spec_value(server_args, "speculative_ddtree_shadow_linear", False))
        self.allow_hybrid_unsafe = bool(_spec_value(server_args, "speculative_ddtree_allow_hybrid_unsafe", False))
        self.vocab_size = int(self.model_runner.model_config.vocab_size)
        self.is_hybrid = mambaish_config(self.model_runner.model_config) is not None
        # Hybrid targets: "tree" = exact trees, each node on its own ancestors' recurrent state (hybrid.py); "unsafe" =
        # the chain kernels on tree order, siblings sharing recurrent state (--speculative-ddtree-allow-hybrid-unsafe).
        self.hybrid_mode = None
        if self.is_hybrid:
            if self.allow_hybrid_unsafe:
                self.hybrid_mode = "unsafe"
                logger.warning(
                    "DDTREE on a hybrid target with --speculative-ddtree-allow-hybrid-unsafe: sibling branches share "
                    "recurrent state during verification; outputs may differ from the target's greedy decoding.")
            else:
                self.hybrid_mode = "tree"  # checked at the first decode: the target's backends are built after us
        self._tree_backend_checked = False
        if self.use_compact_draft_cache:
            raise DdtreeWorkerRefused("DDTREE does not support --speculative-draft-window-size yet; remove it.")
        if self.selector is not None or self.lilicorr is not None or self._is_domino:
            raise DdtreeWorkerRefused(
                "DDTREE needs a plain DFlash drafter (draft logits per position); selector/Domino/LiLiCorr drafters "
                "are not supported.")
        if get_parallel().attn_dp_enabled:
            raise DdtreeWorkerRefused(
                "DDTREE does not support DP attention yet (ranks would verify different batches); use --tp-size "
                "without --enable-dp-attention.")
        backend = getattr(self.model_runner, "attn_backend", None)
        backend = getattr(backend, "full_attn_backend", None) or backend  # hybrid models wrap the full-attn one
        if backend is not None and type(backend).__name__ != "TritonAttnBackend":
            raise DdtreeWorkerRefused(
                f"DDTREE verifies with a custom tree mask and is proven on --attention-backend triton only "
                f"(got {type(backend).__name__}).")
        if getattr(backend, "use_verify_splitkv", False) or getattr(backend, "use_verify_shared_kv", False):
            raise DdtreeWorkerRefused("DDTREE cannot use the split-KV verify kernels (causal chains only); unset "
                                      "SGLANG_ENABLE_SPLITKV_VERIFY.")
        self.verify_graphs = verify_graphs_enabled()
        self.budget = int(budget)
        self.topk_cap = None if cap is None else int(cap)
        self.verify_width = self.budget + 1
        self.window = max(block, self.verify_width)
        DDTreeDraftInput.reserve_tokens = self.verify_width
        prep_mode = os.environ.get("DDTREE_PREP", "triton" if torch.cuda.is_available() else "reference")
        self.tp_size = int(get_parallel().tp_group.world_size)
        # the greedy walk: the tree builder's device kernel where the tree is built on the device (its batch size is
        # a launch dimension); SGLang's Triton walk compiles once per batch size met while serving
        self.accept_mode = os.environ.get("DDTREE_ACCEPT", "device" if prep_mode == "triton" else "sglang")
        if self.accept_mode not in ("device", "sglang", "torch"):
            raise DdtreeWorkerRefused(f"DDTREE_ACCEPT must be device, sglang or torch, got {self.accept_mode!r}")
        if self.accept_mode == "device" and prep_mode != "triton":
            raise DdtreeWorkerRefused("DDTREE_ACCEPT=device walks the tree the device builder built: it needs "
                                      "DDTREE_PREP=triton")
        self.preparer = tree_prep.TreePreparer(
            depth=self.depth, vocab=self.vocab_size, budget=self.budget, topk_cap=self.topk_cap,
            mode=prep_mode, device=self.device,
        )
        # the verify width per batch size (--speculative-ddtree-budget-schedule; none: the budget at every size).
        # The draft top-K, the KV window and the reservations stay sized for the budget, the widest tree.
        try:
            self.schedule = WidthSchedule(
                _spec_value(server_args, "speculative_ddtree_budget_schedule", None), depth=self.depth,
                vocab=self.vocab_size, budget=self.budget, topk_cap=self.topk_cap, mode=prep_mode,
                device=self.device)
        except ValueError as err:
            raise DdtreeWorkerRefused(f"DDTREE budget schedule: {err}") from None
        self._width_runners: dict = {}  # verify width -> (target attention backend, its verify graph runner)
        # the scheduler captures the target's graphs (tp_worker.init_cuda_graphs) after this worker exists and before
        # ours: the startup runner then captures only the batch sizes the widest width serves
        self._startup_capture = None
        if self.schedule.scheduled and verify_graphs_enabled():
            ctx = graphs.widest_sizes_only(self.target_worker.model_runner, self.schedule)
            self._startup_capture = (ctx, ctx.__enter__())
        self.width_steps: dict[str, int] = {}  # steps per verify width (host counts), for the log line
        self.metrics = DdtreeMetrics(
            budget=self.budget, verify_width=self.verify_width, prep_mode=prep_mode,
            accept_mode=self.accept_mode, interval=int(os.environ.get("DDTREE_LOG_INTERVAL", "50")),
        )
        register(self.metrics)
        self._metrics_sync = os.environ.get("DDTREE_METRICS_SYNC") == "1"
        self._test_hook = _load_test_hook()
        if get_parallel().tp_rank == 0:
            logger.info(
                "DDTREE worker ready: block_size=%d depth=%d budget=%d topk=%d verify_width=%d prep=%s accept=%s tp=%d "
                "hybrid=%s", block, self.depth, self.budget, self.preparer.k, self.verify_width, prep_mode,
                self.accept_mode, self.tp_size, self.hybrid_mode)
            if self.schedule.scheduled:
                logger.info("DDTREE budget schedule %r: %s", self.schedule.text, self.schedule.describe())

    # DFLASH folds its greedy head into the draft graph; DDTREE folds its top-K + log-sum-exp there instead
    # (draft_head.DraftTopK: static buffers the worker reads after a replayed draft pass).
    def _maybe_build_draft_sampler(self):
        server_args = getattr(self, "server_args", None)
        block = int(self.block_size)
        depth = block - 1
        vocab = int(self.model_runner.model_config.vocab_size)
        budget = int(_spec_value(server_args, "speculative_ddtree_budget", rules_core.default_budget(block)))
        cap = _spec_value(server_args, "speculative_ddtree_topk_cap", None)
        k = tree_prep.effective_k(depth, vocab, budget, None if cap is None else int(cap))
        lm_head = unwrap_lora_layer(getattr(self.target_worker.model_runner.model, "lm_head", None))
        tp_group = get_parallel().tp_group
        head, why = draft_head.build(lm_head, block_size=int(self.block_size), k=k,
                                     max_bs=max(get_exec().graph.cuda_graph_config.decode.bs),
                                     tp_group=tp_group if int(tp_group.world_size) > 1 else None)
        if get_parallel().tp_rank == 0:
            logger.info("DDTREE draft top-%d head: %s", k, why)
        return head

    def init_cuda_graphs(self):
        """DFLASH's draft graphs, then (with a budget schedule) one target verify graph runner per narrower width,
        each capturing the batch sizes that width serves (graphs.capture_width_runners); the target's own runner,
        captured at the widest width, serves the rest."""
        asked: dict = {}
        if self._startup_capture is not None:  # the target's graphs were captured (tp_worker first) under it
            ctx, asked = self._startup_capture
            self._startup_capture = None
            ctx.__exit__(None, None, None)  # before anything else may raise: SGLang's batch sizes come back whole
        super().init_cuda_graphs()
        if not self.schedule.scheduled:
            return
        self._width_runners = graphs.capture_width_runners(
            self.target_worker.model_runner, self.schedule, block=int(self.block_size), capture_bs=asked.get("bs"))

    def _make_next_draft_input_prefill(self, *, bonus_tokens, seq_lens):
        return _make_input(bonus_tokens, seq_lens)

    def _make_next_draft_input_decode(self, *, bonus_tokens, new_seq_lens):
        return _make_input(bonus_tokens, new_seq_lens)

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch or batch.forward_mode.is_idle():
            return super().forward_batch_generation(
                batch, on_publish=on_publish, grammar_barrier=grammar_barrier, pp_proxy_tensors=pp_proxy_tensors)
        if batch.spec_info is None:
            raise RuntimeError("DDTREE decode without draft state")
        if batch.has_grammar:
            raise DdtreeWorkerRefused("DDTREE does not support constrained decoding [DDT109].")
        return self._ddtree_decode(batch, on_publish)

    # -- draft pass (DFLASH's, returning the draft top-K) ------------------------------------------------------------
    def _draft_topk(self, batch, draft_input, prefix_lens, kv_loc_plan, window_2d):
        """DFLASH's draft pass, then the top-K log-probs of every draft position over the target's (vocab-parallel)
        head: lp [bs, L, K] fp32 (logit - full-vocab log-sum-exp, descending) and global token ids [bs, L, K]. Each
        TP rank projects its vocab shard, and only K candidates and one LSE per row are gathered (SGLang's
        `candidate_topk(..., with_partition=True)`), so no rank holds full-vocab draft logits."""
        from sglang.srt.models.dflash import candidate_topk

        bs = len(batch.seq_lens)
        block = int(self.block_size)
        device = self.device
        target_model = self.target_worker.model_runner.model
        embed_module = unwrap_lora_layer(_resolve_dflash_embedding_module(self.draft_model, target_model))
        lm_head = unwrap_lora_layer(getattr(target_model, "lm_head", None))
        weight = getattr(lm_head, "weight", None)
        if weight is None or weight.dim() != 2:
            raise DdtreeWorkerRefused("DDTREE needs a dense target lm_head weight (quantized heads unsupported).")

        self._ensure_draft_block_buffers(bs)
        block_ids = self._draft_block_ids_buf[:bs]
        positions_2d = self._draft_block_positions_buf[:bs]
        block_ids.fill_(int(self._mask_token_id))
        block_ids[:, 0].copy_(draft_input.bonus_tokens)
        torch.add(prefix_lens.unsqueeze(1), self._block_pos_offsets, out=positions_2d)
        if self._full_embed_gpu is not None:
            noise_embedding = torch.nn.functional.embedding(block_ids, self._full_embed_gpu)
        else:
            noise_embedding = embed_module(block_ids)
        if self._noise_embed_scale != 1.0:
            noise_embedding = noise_embedding * self._noise_embed_scale
        input_embeds = noise_embedding.view(-1, noise_embedding.shape[-1])
        positions = positions_2d.reshape(-1)

        seq_lens_cpu = self._draft_seq_lens_cpu_buf[:bs]
        if batch.seq_lens_cpu is not None:
            seq_lens_cpu.copy_(batch.seq_lens_cpu)
            seq_lens_cpu.add_(block)
            draft_seq_lens_sum = int(seq_lens_cpu.sum())
        elif draft_input.nxt_kv_lens_cpu is not None:
            seq_lens_cpu.copy_(draft_input.nxt_kv_lens_cpu)
            draft_seq_lens_sum = int(draft_input.nxt_kv_lens_sum)
        else:
            for i, req in enumerate(batch.reqs):
                seq_lens_cpu[i] = req.kv.kv_allocated_len
            draft_seq_lens_sum = int(seq_lens_cpu.sum())

        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=prefix_lens,
            out_cache_loc=window_2d[:, :block].reshape(-1),
            seq_lens_sum=draft_seq_lens_sum,
            seq_lens_cpu=seq_lens_cpu,
            positions=positions,
            input_embeds=input_embeds,
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            num_token_non_padded=(
                torch.full((), bs * block, dtype=torch.int32, device=device)
                if enable_num_token_non_padded() else None
            ),
            global_num_token_non_padded_cpu=bs * block,
            can_run_decode_cuda_graph=batch.can_run_decode_cuda_graph,
        )
        kv_loc_plan.bind(forward_batch, self.draft_model_runner.kv_index_translator, cols=slice(0, block))
        with torch.inference_mode(), draft_tp_context(self.draft_parallel_layout):
            draft_out = self.draft_model_runner.forward(forward_batch)
        k = self.preparer.k
        head = self._draft_sampler if isinstance(self._draft_sampler, draft_head.DraftTopK) else None
        if head is not None and head.captured and getattr(draft_out, "can_run_graph", False):
            lp, ids = head.read(bs)  # the replayed draft graph's tail computed them (sorted, descending)
            self.metrics.head_graph_steps += 1
        else:
            hidden = draft_out.logits_output.hidden_states
            if hidden is None:
                raise RuntimeError("DDTREE: the DFlash draft model returned no hidden states.")
            hidden = hidden[: bs * block].view(bs, block, -1)[:, 1:, :].reshape(bs * self.depth, -1)
            head = head or self._eager_head(lm_head, k)
            if head is not None:
                lp, ids = head.compute(hidden)
                lp, ids = lp.view(bs, self.depth, k), ids.view(bs, self.depth, k)
            else:
                ids, vals, lse = candidate_topk(hidden, lm_head, k, with_partition=True)
                lp = (vals.float() - lse.float().view(-1, 1)).view(bs, self.depth, k)
                lp, order = torch.sort(lp, dim=-1, descending=True)  # the tree build reads each depth best-first
                ids = torch.gather(ids.view(bs, self.depth, k), -1, order)
        if self._test_hook is not None:
            lp, ids = self._test_hook(reqs=batch.reqs, prefix_lens=prefix_lens, root_tokens=block_ids[:, 0], lp=lp,
                                      ids=ids, vocab=self.vocab_size)
        return lp, ids

    # -- accept -------------------------------------------------------------------------------------------------
    def _posterior(self, logits: torch.Tensor, sampling_info, bs: int, n: int) -> torch.Tensor:
        """Target token at every node: argmax for greedy requests, a sample (temperature/top-k/top-p) otherwise."""
        greedy = torch.argmax(logits, dim=-1).view(bs, n)
        if sampling_info is None or sampling_info.is_all_greedy:
            return greedy
        temps = sampling_info.temperatures.view(bs, 1).repeat_interleave(n, 0)
        top_ks = sampling_info.top_ks.view(bs).repeat_interleave(n, 0)
        top_ps = sampling_info.top_ps.view(bs).repeat_interleave(n, 0)
        x = logits.float() / temps.clamp(min=1e-6)
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        ranks = torch.arange(x.shape[-1], device=x.device)[None, :]
        keep = ranks < top_ks.clamp(min=1)[:, None]
        cum = torch.cumsum(probs, dim=-1)
        keep &= (cum - probs) < top_ps[:, None]
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        pick = torch.multinomial(probs / probs.sum(-1, keepdim=True), 1)
        sampled = torch.gather(order, 1, pick).view(bs, n)
        is_greedy = (sampling_info.top_ks.view(bs) <= 1)[:, None]
        return torch.where(is_greedy, greedy, sampled)

    def _accept(self, vi: tree_prep.VerifyInputs, predict: torch.Tensor,
                preparer: tree_prep.TreePreparer | None = None) -> tuple[tree_prep.Accepted, torch.Tensor]:
        """The accepted path (local node indices) and SGLang's flat accept index (b * n + node, -1 padded)."""
        bs, n = vi.input_ids.shape
        if self.accept_mode == "device":
            acc = (preparer or self.preparer).follow(vi, predict.to(torch.int64))
            if acc is None:
                raise RuntimeError("DDTREE_ACCEPT=device: no device tree plan for this verify")
            return acc, tree_prep.flat_accept_index(acc.accepted, n)
        if self.accept_mode == "torch":
            acc = tree_prep.follow_greedy(vi.input_ids, vi.parents, predict, self.depth)
            return acc, tree_prep.flat_accept_index(acc.accepted, n)
        from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

        dev = predict.device
        predicts = torch.full((bs * n,), -1, dtype=torch.int32, device=dev)
        accept_index = torch.full((bs, self.depth + 1), -1, dtype=torch.int32, device=dev)
        accept_num = torch.zeros((bs,), dtype=torch.int32, device=dev)
        # SGLang's own greedy tree walk over the left-child / right-sibling arrays (positional: its argument names
        # are predicts, accept_index, accept_token_num, candidates, retrieve_index, retrieve_next_token,
        # retrieve_next_sibling, target_predict).
        verify_tree_greedy_triton(
            predicts,
            accept_index,
            accept_num,
            vi.input_ids.to(torch.int64).contiguous(),
            vi.retrive_index.to(torch.int64).contiguous(),
            vi.retrive_next_token.to(torch.int64).contiguous(),
            vi.retrive_next_sibling.to(torch.int64).contiguous(),
            predict.to(torch.int64).contiguous(),
        )
        acc = tree_prep.accepted_from_sglang(accept_index, accept_num, n)
        alen = accept_num.to(torch.int64)
        last = torch.gather(acc, 1, alen[:, None])[:, 0]
        bonus = torch.gather(predict.to(torch.int64), 1, last[:, None])[:, 0]
        return tree_prep.Accepted(acc, alen, bonus), accept_index

    _kv_mover = None
    _eager_draft_head = None

    def _eager_head(self, lm_head, k: int):
        """The same top-K head for draft passes that ran eagerly (no draft graph, or a batch above its sizes)."""
        if self._eager_draft_head is None:
            tp_group = get_parallel().tp_group
            head, _ = draft_head.build(lm_head, block_size=int(self.block_size), k=k, max_bs=1, graph=False,
                                       tp_group=tp_group if int(tp_group.world_size) > 1 else None)
            self._eager_draft_head = head or False
        return self._eager_draft_head or None

    def _move_target_kv(self, pool, dst: torch.Tensor, src: torch.Tensor) -> None:
        """KV rows src -> dst ([bs, L] slots, chain order) in every layer, never reading a row after it was written
        (an accepted node can be both a source and another node's destination, so the pool's own parallel Triton
        copy cannot be used): ChainRowMover walks each request's chain positions in order, all layers in one
        launch; the native gather-then-scatter per layer otherwise (DDTREE_KV_MOVE=native, scaled KV)."""
        pool = getattr(pool, "full_kv_pool", pool)  # hybrid targets: the full-attention layers' pool
        k_buffer, v_buffer = getattr(pool, "k_buffer", None), getattr(pool, "v_buffer", None)
        if k_buffer is None or v_buffer is None or getattr(pool, "use_hnd", False):
            raise DdtreeWorkerRefused(f"DDTREE commits KV into chain order on MHA token pools only "
                                      f"(got {type(pool).__name__}).")
        from sglang.srt.mem_cache.memory_pool import move_kv_cache_native

        if getattr(pool, "k_scale_buffer", None) is None and dst.is_cuda and \
                os.environ.get("DDTREE_KV_MOVE", "chain") == "chain":
            mover = self._kv_mover
            if mover is None or mover.key != (k_buffer[0].data_ptr(), len(k_buffer)):
                mover = tree_prep._triton_kernels().ChainRowMover(list(k_buffer) + list(v_buffer))
                mover.key = (k_buffer[0].data_ptr(), len(k_buffer))
                self._kv_mover = mover
            mover.move(dst, src)  # every layer in one launch, chain positions in order (acc[j] >= j)
            return
        move_kv_cache_native(k_buffer, v_buffer, dst.reshape(-1), src.reshape(-1))
        if getattr(pool, "k_scale_buffer", None) is not None:
            move_kv_cache_native(pool.k_scale_buffer, pool.v_scale_buffer, dst.reshape(-1), src.reshape(-1))

    # -- one decode round ----------------------------------------------------------------------------------------
    def _tree_mask(self, vi, batch, draft_input, prefix_lens, bs: int, n: int) -> torch.Tensor:
        """The verify pass's custom mask, tree cells only (tree_prep.tree_mask), sized from host-side lengths: the
        exact prefix lengths when the batch has them, else the allocated lengths of prepare_for_decode (an upper
        bound; under the overlap scheduler the exact ones are on the device only). A replayed verify graph copies
        the mask into the attention backend's buffer, so the size never exceeds that buffer."""
        host = batch.seq_lens_cpu[:bs] if batch.seq_lens_cpu is not None else draft_input.nxt_kv_lens_cpu
        total = tree_prep.mask_total_bound(n, host[:bs] if host is not None else None)
        if total is None:  # no host lengths at all: size it from the device (one sync)
            total = int((n * (prefix_lens.to(torch.int64) + n)).sum())
        backend = getattr(self.target_worker.model_runner, "attn_backend", None)
        backend = getattr(backend, "full_attn_backend", None) or backend
        buffer = getattr(getattr(backend, "_verify_mask", None), "buffer", None)
        if buffer is not None:
            total = min(total, int(buffer.numel()))
        return tree_prep.tree_mask(vi.visibility, prefix_lens, total)

    def _check_tree_backend(self) -> None:
        """Tree mode needs the target's GDN backend in its topk > 1 mode (hybrid.py's hook). The scheduler builds
        the target's attention backends after the speculative worker, so this runs at the first decode."""
        linear = getattr(getattr(self.model_runner, "attn_backend", None), "linear_attn_backend", None)
        if linear is None or type(linear).__name__ != "GDNAttnBackend" or int(getattr(linear, "topk", 0)) <= 1:
            raise DdtreeWorkerRefused(
                "DDTREE verifies exact trees on hybrid targets through SGLang's Gated-DeltaNet tree kernels "
                f"(parent-indexed state); this target's linear-attention backend is "
                f"{type(linear).__name__ if linear is not None else 'missing'} without tree mode.")
        self._tree_backend_checked = True
        kernel = getattr(getattr(linear, "kernel_dispatcher", None), "tree_verify_kernel", None)
        self.metrics.gdn_tree_kernel = "compact" if isinstance(kernel, hybrid.CompactTreeVerify) else "sglang"
        logger.info("DDTREE hybrid tree verify: %s GDN tree kernel", self.metrics.gdn_tree_kernel)

    def _ddtree_decode(self, batch, on_publish):
        if self.hybrid_mode == "tree" and not self._tree_backend_checked:
            self._check_tree_backend()
        # carried over from the previous overlap iteration; may have been produced on another stream
        batch.seq_lens.record_stream(torch.get_device_module(self.device).current_stream())
        bs = len(batch.seq_lens)
        width = self.schedule.pick(bs)
        self.width_steps[width.label] = self.width_steps.get(width.label, 0) + 1
        # a scheduled width verifies on its own attention backend and graph runner (restored after the commit,
        # which still reads the verify's metadata)
        restore = graphs.use_width_runner(self.target_worker.model_runner, self._width_runners, width.width)
        try:
            return self._ddtree_decode_at(batch, on_publish, width)
        finally:
            restore()

    def _ddtree_decode_at(self, batch, on_publish, width):
        draft_input = batch.spec_info
        bs = len(batch.seq_lens)
        block = int(self.block_size)
        n = width.width
        window = self.window
        device = self.device
        prefix_lens = batch.seq_lens
        runner = self.target_worker.model_runner

        # The iteration's KV window: req_to_token[req, prefix : prefix + window] (reserved by prepare_for_decode).
        window_loc = assign_extend_cache_locs_func(
            req_pool_indices=batch.req_pool_indices,
            req_to_token=runner.req_to_token_pool.req_to_token,
            start_offset=prefix_lens,
            end_offset=prefix_lens + window,
            batch_size=bs,
            draft_token_num=window,
            device=device,
        )
        window_2d = window_loc.view(bs, window)
        kv_loc_plan = runner.kv_index_translator.plan(
            req_pool_indices=batch.req_pool_indices,
            seq_lens=prefix_lens,
            seq_lens_cpu=batch.seq_lens_cpu if batch.seq_lens_cpu is not None else draft_input.nxt_kv_lens_cpu,
            write_virtual=window_loc,
            read_extent=window,
        )

        # 1) draft top-K from DFLASH's draft pass
        lp, ids = self._draft_topk(batch, draft_input, prefix_lens, kv_loc_plan, window_2d)

        # 2) tree + verify inputs
        t0 = time.perf_counter()
        roots = draft_input.bonus_tokens.view(-1).to(torch.int64)
        vi = self.schedule.prepare(width, lp, ids, roots, prefix_lens)
        if self._metrics_sync:
            torch.cuda.synchronize()
        prep_s = time.perf_counter() - t0
        custom_mask = self._tree_mask(vi, batch, draft_input, prefix_lens, bs, n)

        # 3) target verify, width n
        verify_input = DFlashVerifyInput(
            draft_token=vi.input_ids.reshape(-1),
            positions=vi.positions.reshape(-1),
            draft_token_num=n,
            custom_mask=custom_mask,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            kv_loc_plan=kv_loc_plan,
            kv_loc_cols=slice(0, n),
        )
        if self.hybrid_mode == "tree":
            # read by the hybrid linear-attention backend in its topk > 1 mode (eager and graph replay alike)
            verify_input.retrieve_next_token = vi.retrive_next_token.to(torch.int32).contiguous()
            verify_input.retrieve_next_sibling = vi.retrive_next_sibling.to(torch.int32).contiguous()
        sampling_info = batch.sampling_info
        seq_lens_cpu_backup, seq_lens_sum_backup = batch.seq_lens_cpu, batch.seq_lens_sum
        if seq_lens_cpu_backup is not None:
            verify_host = seq_lens_cpu_backup + n
            batch.seq_lens_cpu = verify_host
            batch.seq_lens_sum = int(verify_host.sum())
        elif draft_input.nxt_kv_lens_cpu is not None:
            batch.seq_lens_cpu = draft_input.nxt_kv_lens_cpu
            batch.seq_lens_sum = int(draft_input.nxt_kv_lens_sum)
        batch.out_cache_loc = window_2d[:, :n].reshape(-1)
        verify_forward_batch, graph = verify_input.prepare_for_verify(batch, self.target_worker)
        batch.seq_lens_cpu, batch.seq_lens_sum = seq_lens_cpu_backup, seq_lens_sum_backup
        if graph and not verify_graph_ready():
            # Without graphs.py's hooks a captured DFLASH-family verify graph has no tree mask: never verify a tree
            # as a chain.
            raise DdtreeWorkerRefused("DDTREE verify would replay a target CUDA graph captured without a tree mask.")
        target_out = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True, skip_attn_backend_init=True)
        logits_output = target_out.logits_output
        target_predict = None
        target_lp = self._target_logits_processor
        if target_lp is not None and target_lp.is_deferred_shard(logits_output.next_token_logits):
            if self._can_skip_verify_logits(batch, sampling_info):
                target_predict = target_lp.deferred_argmax(logits_output.next_token_logits)[: bs * n].view(bs, n)
                logits_output.next_token_logits = None
            else:
                logits_output.next_token_logits = target_lp.finish_deferred_gather(logits_output.next_token_logits)
        if target_predict is None:
            verify_logits = logits_output.next_token_logits[: bs * n]  # (graph replays may pad the batch)
            if sampling_info is not None:
                apply_dflash_verify_logits_adjustments(
                    next_token_logits=verify_logits, sampling_info=sampling_info, draft_token_num=n)
            target_predict = self._posterior(verify_logits, sampling_info, bs, n)
        sampled = sampling_info is not None and not sampling_info.is_all_greedy
        # every TP rank walks the tree with rank 0's predictions (sampling draws per rank), as DFLASH does
        target_predict = self._tp_sync.sync(
            SpecTpSyncSite.DFLASH_ACCEPT_SAMPLE if sampled else SpecTpSyncSite.DFLASH_ACCEPT_GREEDY,
            target_predict.contiguous())

        # 4) accept
        acc, accept_index = self._accept(vi, target_predict, width.preparer)
        cm = tree_prep.commit(vi.input_ids, acc, block)
        commit_lens = cm.commit_lens
        new_seq_lens = prefix_lens + commit_lens.to(prefix_lens.dtype)
        if on_publish is not None:
            # the next step's schedule (resolve, reservation) waits on this, not on the commit below
            on_publish(new_seq_lens)
        if batch.return_logprob:
            # DFLASH's chain layout: logits row (b, j) is the one that produced out token (b, j) -- here the row of
            # accepted node acc[j] (its prediction is out token j; the last one is the bonus).
            from sglang.srt.layers.logprob_processor import compute_spec_logprobs

            rows = logits_output.next_token_logits[: bs * n].view(bs, n, -1)
            chain = torch.gather(rows, 1, cm.chain_src.clamp(max=n - 1)[:, :, None].expand(bs, block, rows.shape[-1]))
            logits_output.next_token_logits = chain.reshape(bs * block, -1)
            compute_spec_logprobs(batch, logits_output, cm.out_tokens.reshape(-1), chain_stride=block)
        if self.hybrid_mode == "tree":
            # SGLang's own tree commit: the state of the last accepted NODE (its index in the verify window), and the
            # mamba-track snapshot at the accepted node where the track interval is crossed.
            hybrid.pending_path(accept_index, commit_lens, n)  # the compact tree commit replays this path
            commit_mamba_states_after_verify(self.target_worker, batch, commit_lens, accept_index, n)
        elif self._need_mamba_verify_commit:
            # unsafe mode (the user accepted that siblings share state): DFLASH's chain-position commit
            self._update_target_mamba_state_after_verify(
                batch=batch, seq_lens_pre_verify=prefix_lens.clone(), seq_lens_post_verify=new_seq_lens,
                commit_lens=commit_lens)

        # 5) commit: target KV of the accepted nodes into chain order, drafter hidden handoff
        target_slots = kv_loc_plan.write_ids(runner.kv_index_translator, cols=slice(0, n)).view(bs, n)
        src_local = cm.chain_src[:, : min(block, n)]
        dst_local = torch.arange(src_local.shape[1], device=device).expand_as(src_local)
        src_slots = torch.gather(target_slots, 1, src_local)
        dst_slots = torch.gather(target_slots, 1, dst_local)
        self._move_target_kv(runner.token_to_kv_pool, dst_slots, src_slots)

        hidden = logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE verify requires target hidden states, but got None.")
        hidden = hidden[: bs * n].view(bs, n, -1)
        chain_hidden = torch.gather(hidden, 1, cm.chain_src.clamp(max=n - 1)[:, :, None].expand(bs, block,
                                                                                                 hidden.shape[-1]))
        chain_pos = prefix_lens.view(bs, 1).to(torch.int64) + torch.arange(block, device=device)[None, :]
        draft_loc = self._draft_write_ids(kv_loc_plan).view(bs, window)[:, :block].contiguous()
        self._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=chain_hidden.reshape(-1, chain_hidden.shape[-1]),
            cache_loc=draft_loc.reshape(-1),
            cache_loc_2d=draft_loc,
            positions=chain_pos.reshape(-1),
            commit_lens=commit_lens,
        )
        logits_output.hidden_states = None

        self.metrics.record_device(acc.accept_len, tree_prep.branch_accepts(acc, vi.retrive_next_token), prep_s,
                                   max_depth=self.depth, graph=bool(graph))
        if self.metrics.steps % self.metrics.interval == 0 and get_parallel().tp_rank == 0:
            logger.info(self.metrics.line() + (f" widths={self.width_steps}" if self.schedule.scheduled else ""))

        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=cm.out_tokens.reshape(-1),
            accept_lens=commit_lens,
            can_run_cuda_graph=target_out.can_run_cuda_graph,
            next_draft_input=self._make_next_draft_input_decode(bonus_tokens=acc.bonus, new_seq_lens=new_seq_lens),
            speculative_num_draft_tokens=block,
            new_seq_lens=new_seq_lens,
            routed_experts_output=target_out.routed_experts_output,
            indexer_topk_output=target_out.indexer_topk_output,
        )


def create_worker(server_args):
    """SpeculativeAlgorithm factory result: the worker class SGLang instantiates (like DFLASH's)."""
    return DDTreeWorker
