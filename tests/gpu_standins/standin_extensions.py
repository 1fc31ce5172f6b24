"""Test-only stand-ins for SGLang's compiled extensions (sgl_kernel, flashinfer, cutlass) on the lent GPU machine.

See README.md. Import hooks create the modules on demand; nothing here is used outside bench/sglang_e2e_gpu.py.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

import torch
import torch.nn.functional as F

ROOTS = ("sgl_kernel", "flashinfer", "cutlass")


# ---------------------------------------------------------------------------------------------------- sgl_kernel ops
def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool = False) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    w = weight.float() + (1.0 if gemma else 0.0)
    return (y * w).to(x.dtype)


def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    y = _rms(input, weight, eps)
    if out is not None:
        out.copy_(y)
        return out
    return y


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    residual.add_(input)
    input.copy_(_rms(residual, weight, eps))


def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    y = _rms(input, weight, eps, gemma=True)
    if out is not None:
        out.copy_(y)
        return out
    return y


def gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    residual.add_(input)
    input.copy_(_rms(residual, weight, eps, gemma=True))


def _and_mul(act):
    def op(input, out=None, enable_pdl=None):
        d = input.shape[-1] // 2
        y = (act(input[..., :d].float()) * input[..., d:].float()).to(input.dtype)
        if out is not None:
            out.copy_(y)
            return out
        return y

    return op


silu_and_mul = _and_mul(F.silu)
gelu_and_mul = _and_mul(lambda t: F.gelu(t, approximate="none"))
gelu_tanh_and_mul = _and_mul(lambda t: F.gelu(t, approximate="tanh"))


def weak_ref_tensor(t):
    return t


SGL_KERNEL_OPS = {
    "rmsnorm": rmsnorm,
    "fused_add_rmsnorm": fused_add_rmsnorm,
    "gemma_rmsnorm": gemma_rmsnorm,
    "gemma_fused_add_rmsnorm": gemma_fused_add_rmsnorm,
    "silu_and_mul": silu_and_mul,
    "gelu_and_mul": gelu_and_mul,
    "gelu_tanh_and_mul": gelu_tanh_and_mul,
    "weak_ref_tensor": weak_ref_tensor,
}
SGL_KERNEL_UTILS = {"is_arch_support_pdl": lambda *a, **k: False}


# ---------------------------------------------------------------------------------------------------- flashinfer
def fi_top_k(input, k, *args, **kwargs):
    values, indices = torch.topk(input, k, dim=-1)
    return values, indices


def top_k_renorm_probs(probs, top_k, *args, **kwargs):
    k = top_k if isinstance(top_k, int) else top_k.view(-1, 1)
    sorted_p, _ = torch.sort(probs, dim=-1, descending=True)
    idx = (torch.as_tensor(k, device=probs.device).clamp(min=1) - 1).expand(probs.shape[0], 1).long()
    thresh = torch.gather(sorted_p, 1, idx)
    p = torch.where(probs >= thresh, probs, torch.zeros_like(probs))
    return p / p.sum(-1, keepdim=True)


def top_p_renorm_probs(probs, top_p, *args, **kwargs):
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    cum = torch.cumsum(sorted_p, -1)
    tp = torch.as_tensor(top_p, device=probs.device, dtype=probs.dtype).view(-1, 1)
    keep = (cum - sorted_p) < tp
    kept = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
    out = torch.zeros_like(probs).scatter_(1, order, kept)
    return out / out.sum(-1, keepdim=True)


FLASHINFER = {"top_k": fi_top_k}
FLASHINFER_SAMPLING = {"top_k_renorm_probs": top_k_renorm_probs, "top_p_renorm_probs": top_p_renorm_probs}


# ---------------------------------------------------------------------------------------------------- modules
class _MissingMeta(type):
    """An sgl_kernel object we did not stand in for: importable (and subclassable), loud when called."""

    def __call__(cls, *args, **kwargs):
        raise NotImplementedError(f"sgl_kernel stand-in: {cls.__qualname__} is not provided (tests/gpu_standins)")

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _missing(f"{cls.__qualname__}.{attr}")


def _missing(name: str):
    return _MissingMeta(name.rsplit(".", 1)[-1], (), {"__qualname__": name, "__module__": name.split(".")[0]})


class _InertMeta(type):
    """flashinfer/cutlass objects SGLang only probes: attribute access works, subclassing works, calls are no-ops
    (a call with one callable argument returns it: inert decorators keep the decorated function)."""

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], type):
            return args[0]
        return super().__call__(*args, **kwargs)

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _inert(f"{cls.__qualname__}.{attr}")


class _InertBase(metaclass=_InertMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _inert(f"{type(self).__qualname__}.{attr}")

    def __call__(self, *args, **kwargs):
        return None


def _inert(name: str):
    return _InertMeta(name.rsplit(".", 1)[-1], (_InertBase,), {"__qualname__": name,
                                                                 "__module__": name.split(".")[0]})


class StandinModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = self.__name__
        if name.startswith("sgl_kernel"):
            return _missing(f"{name}.{attr}")
        return _inert(f"{name}.{attr}")


def _populate(mod: types.ModuleType) -> None:
    name = mod.__name__
    table = {
        "sgl_kernel": SGL_KERNEL_OPS,
        "sgl_kernel.utils": SGL_KERNEL_UTILS,
        "flashinfer": FLASHINFER,
        "flashinfer.sampling": FLASHINFER_SAMPLING,
    }.get(name, {})
    for k, v in table.items():
        setattr(mod, k, v)
    if name in ("sgl_kernel", "flashinfer", "cutlass"):
        mod.__version__ = {"sgl_kernel": "0.4.3", "flashinfer": "0.7.2", "cutlass": "4.3.0"}[name]


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return StandinModule(spec.name)

    def exec_module(self, module):
        _populate(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        root = fullname.split(".")[0]
        if root not in ROOTS:
            return None
        origin = None
        locations: list[str] = []
        if root == "flashinfer":
            base = os.environ.get("DDTREE_STANDIN_FLASHINFER_DIR", "")
            if base:
                folder = os.path.join(base, *fullname.split(".")[1:])
                origin = os.path.join(folder, "__init__.py")
                locations = [folder]
        spec = importlib.machinery.ModuleSpec(fullname, _Loader(), origin=origin, is_package=True)
        spec.submodule_search_locations = locations
        if origin:
            spec.has_location = True
        return spec


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    os.environ.setdefault("SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK", "1")


install()
