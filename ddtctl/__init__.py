"""ddtctl: checked, repeatable SGLang launches for speculative decoding."""

__version__ = "0.1.0"
PINNED_SGLANG = "0.5.23"
