import os


# Without a GPU (CI) the Triton kernels run in Triton's interpreter; the flag must be set before they are defined.
try:
    import torch

    _gpu = torch.cuda.is_available()
except ImportError:  # the kernels extra is absent: the tests that need torch skip themselves
    _gpu = False
if not _gpu:
    os.environ.setdefault("TRITON_INTERPRET", "1")
