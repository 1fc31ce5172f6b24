"""DDTREE for sglang 0.5.23, shipped by ddtctl's overlay payload `ddtree-sglang`.

What it adds to SGLang (the plugin is loaded through SGLang's own `sglang.srt.plugins` entry point, see plugin.py):
  * the speculative algorithm name DDTREE (`SpeculativeAlgorithm.from_string("DDTREE")`), a member of the DFLASH
    family (same drafter, same resolution defaults);
  * the server arguments --speculative-ddtree-budget / -topk-cap / -shadow-linear / -allow-hybrid-unsafe (from a
    small patch of arg_groups/fields/spec.py);
  * DDTREE's launch rules, enforced inside SGLang's resolution by rules_core.py, a byte-identical copy of
    ddtctl/rules/ddtree/core.py, the same rules `ddtctl validate` applies.
"""

PAYLOAD_NAME = "ddtree-sglang"
ALGORITHM = "DDTREE"
