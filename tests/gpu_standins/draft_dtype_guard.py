"""Test-only: cast the DFlash draft model's input embeddings to its own weights' dtype.

Runs 7 and 8 (float32 models): every CUDA-graphs-off DFlash draft pass -- SGLang's DFLASH worker and DDTREE's alike
-- died with "expected mat1 and mat2 to have the same dtype, but got: c10::BFloat16 != float" at the draft layer's
qkv_proj: a bf16 embedding reaches float32 weights. With CUDA graphs on, the graph's static input buffer (float32)
casts on copy, so those servers ran. bf16 models (the production case) never see it. Enabled by the e2e script only
for float32 runs (DDTREE_TEST_DRAFT_DTYPE_GUARD=1), for DFLASH and DDTREE equally; logs the first cast it makes.
"""

from __future__ import annotations

import sys


def install() -> None:
    from post_import import after_import

    def patch(mod):
        cls = mod.DFlashDraftModel
        if getattr(cls, "_dtype_guarded", False):
            return
        orig = cls.forward
        seen = []

        def forward(self, input_ids, positions, forward_batch, input_embeds=None, *args, **kwargs):
            if input_embeds is None:
                embed = getattr(self, "embed_tokens", None)
                if embed is not None:
                    input_embeds = embed(input_ids)
            want = next(self.layers.parameters()).dtype
            if input_embeds is not None and input_embeds.dtype != want:
                if not seen:
                    seen.append(1)
                    print(f"[test draft dtype guard] input_embeds {input_embeds.dtype} -> {want}", file=sys.stderr,
                          flush=True)
                input_embeds = input_embeds.to(want)
            return orig(self, input_ids, positions, forward_batch, input_embeds, *args, **kwargs)

        cls.forward = forward
        cls._dtype_guarded = True

    after_import("sglang.srt.models.dflash", patch)
