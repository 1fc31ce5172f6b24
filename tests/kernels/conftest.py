import os

# CI has no GPU: the Triton kernels run in Triton's interpreter. Must be set before the kernels are defined.
os.environ.setdefault("TRITON_INTERPRET", "1")
