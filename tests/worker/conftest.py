import os
import sys
from pathlib import Path

# Triton kernels (ours and SGLang's tree verify) run in Triton's interpreter without a GPU; set before definition.
try:
    import torch

    _gpu = torch.cuda.is_available()
except ImportError:
    _gpu = False
if not _gpu:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The payload's own modules (ddtree_sglang.tree_prep, .metrics) import without sglang.
PAYLOAD_FILES = Path(__file__).resolve().parents[2] / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files"
if str(PAYLOAD_FILES) not in sys.path:
    sys.path.insert(0, str(PAYLOAD_FILES))
