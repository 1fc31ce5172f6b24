"""DDTree kernels: exact reference (numpy) and Triton kernels (torch + triton, the `kernels` extra).

Nothing here is imported by `ddtctl validate`; torch and triton are imported only by the
modules that need them. `selftest(device)` is what the DDTREE payload runs before a server
launch (it also warms the Triton cache).
"""

from __future__ import annotations


def selftest(device: str = "cpu", **kwargs):
    from ddtctl.kernels.selftest import selftest as _selftest

    return _selftest(device, **kwargs)


__all__ = ["selftest"]
