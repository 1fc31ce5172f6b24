"""Kernel self-test: the Triton kernels against the exact reference on fresh random logits.

On "cpu" the kernels run in Triton's interpreter at small sizes; on "cuda" at the sizes a server uses (this
also compiles and caches the kernels for those shapes, so the first decode step does not pay for it).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ddtctl.errors import EnvironmentMissing, UsageError


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class SelftestResult:
    device: str
    ok: bool
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    versions: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _kernels_module(interpret: bool):
    """The Triton kernels module, defined for the interpreter (CPU) or the compiler (GPU).

    Triton reads TRITON_INTERPRET both when a kernel is defined and when it runs, so the caller keeps the
    variable set for as long as the kernels run (see `_interpreter_env`).
    """
    try:
        import torch  # noqa: F401 - availability probes
        import triton  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise EnvironmentMissing(
            f"the kernels need torch and triton ({err.name} is missing)",
            fix="pip install -e '.[kernels]' (install torch first)",
        ) from None
    from ddtctl.kernels import triton_kernels as tk

    is_interp = type(tk._build_kernel).__name__ == "InterpretedFunction"
    if is_interp != interpret:
        tk = importlib.reload(tk)
    return tk


@contextlib.contextmanager
def _interpreter_env(interpret: bool):
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def poison(plan) -> None:
    """Fill every output buffer with garbage, so that an element a kernel fails to write cannot match."""
    import torch

    for _name, value in vars(plan).items():
        if isinstance(value, torch.Tensor):
            if value.dtype == torch.bool:
                value.copy_(torch.rand(value.shape, device=value.device) < 0.5)
            elif value.dtype.is_floating_point:
                value.fill_(float("nan"))
            else:
                value.fill_(-77)


def check_case(tk, *, batch, depth, vocab, budget, dtype, device, seed, ties=False, prefix_len=7, **plan_kw):
    """Run one case through every kernel and compare with the reference. Returns a list of Checks."""
    import torch

    from ddtctl.kernels import reference as R

    gen = torch.Generator().manual_seed(seed)
    if ties:
        x = torch.randint(-3, 2, (batch, depth, vocab), generator=gen).float()
        x[:, :, ::5] = float("-inf")
    else:
        x = torch.randn(batch, depth, vocab, generator=gen) * 4
    x = x.to(dtype)
    name = f"b{batch} L{depth} V{vocab} B{budget} {str(dtype).replace('torch.', '')}{' ties' if ties else ''}"
    if plan_kw:
        name += " " + ",".join(f"{k}={v}" for k, v in plan_kw.items())
    checks: list[Check] = []
    kw = {}
    if vocab < 4096:  # small vocabularies: small groups, so the group prefilter is exercised too
        kw = dict(group_size=8, groups_per_tile=4, groups_per_chunk=4)
    plan = tk.DDTreePlan(batch, depth, vocab, budget, device, **{**kw, **plan_kw})
    poison(plan)
    xd = x.to(device)
    lp, ids = plan.topk(xd)
    lp_h, ids_h = lp.cpu().numpy(), ids.cpu().numpy().astype(np.int64)
    rlp, rids = R.topk_logprobs(x.float().numpy(), plan.K)
    ids_ok = np.array_equal(ids_h, rids)
    lp_err = float(np.max(np.abs(lp_h - rlp)))
    checks.append(
        Check(f"topk {name}", ids_ok and lp_err <= 1e-4, f"ids equal={ids_ok}, max |lp-ref|={lp_err:.2e}")
    )
    tokens, depths, parents, _ = plan.build()
    tok_h, dep_h, par_h = tokens.cpu().numpy(), depths.cpu().numpy(), parents.cpu().numpy()
    trees = [R.build(lp_h[i], ids_h[i], budget) for i in range(batch)]
    same = sum(R.trees_equal(trees[i], tok_h[i], dep_h[i], par_h[i]) for i in range(batch))
    checks.append(Check(f"build {name}", same == batch, f"{same}/{batch} trees identical to the reference"))
    roots = torch.arange(batch, dtype=torch.int64) + 3
    starts = torch.arange(batch, dtype=torch.int64) * 5 + prefix_len
    input_ids, positions, vis, packed = plan.compile(roots.to(device), starts.to(device))
    bad = []
    ii_h, pos_h, vis_h, pk_h = (t.cpu().numpy() for t in (input_ids, positions, vis, packed))
    nt_h, ns_h, ri_h = (
        t.cpu().numpy() for t in (plan.retrive_next_token, plan.retrive_next_sibling, plan.retrive_index)
    )
    for i in range(batch):
        c = R.compile_tree(trees[i], int(roots[i]), int(starts[i]), prefix_len)
        for label, got, want in (
            ("input_ids", ii_h[i], c.input_ids),
            ("positions", pos_h[i], c.positions),
            ("visibility", vis_h[i], trees[i].visibility),
            ("packed", pk_h[i], c.packed),
            ("next_token", nt_h[i], c.retrive_next_token),
            ("next_sibling", ns_h[i], c.retrive_next_sibling),
            ("retrive_index", ri_h[i], c.retrive_index + i * (budget + 1)),
        ):
            if not np.array_equal(got, want):
                bad.append(f"{label}[{i}]")
    checks.append(
        Check(f"compile {name}", not bad, "all arrays equal" if not bad else "differs: " + ", ".join(bad))
    )
    # posterior: follows the drafted token most of the time, so that paths of several nodes are accepted
    rng = np.random.default_rng(seed)
    post = np.where(
        rng.random((batch, budget + 1)) < 0.8,
        np.roll(ii_h, -1, axis=1),
        rng.integers(0, vocab, (batch, budget + 1)),
    )
    acc, alen, bonus = plan.follow(torch.from_numpy(post).to(device))
    acc_h, alen_h, bonus_h = acc.cpu().numpy(), alen.cpu().numpy(), bonus.cpu().numpy()
    fbad = 0
    for i in range(batch):
        f = R.follow(ii_h[i], par_h[i], post[i])
        if not (
            np.array_equal(acc_h[i], f.padded(depth))
            and alen_h[i] == f.accept_length
            and bonus_h[i] == f.bonus
        ):
            fbad += 1
    checks.append(Check(f"follow {name}", fbad == 0, f"{batch - fbad}/{batch} walks identical"))
    return checks


def selftest(device: str = "cpu", *, quick: bool = False) -> SelftestResult:
    """Every kernel against the reference on a few cases: on the CPU under
    the Triton interpreter, or on the GPU."""
    if device not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}", fix="use --device cpu or --device cuda")
    with _interpreter_env(device == "cpu"):
        return _selftest(device, quick=quick)


def _selftest(device: str, *, quick: bool) -> SelftestResult:
    if device not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}", fix="use --device cpu or --device cuda")
    t0 = time.perf_counter()
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise EnvironmentMissing("the kernels need torch", fix="pip install -e '.[kernels]'") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise EnvironmentMissing(
            "no CUDA device is visible to torch", fix="run on a GPU host, or use --device cpu"
        )
    tk = _kernels_module(interpret=(device == "cpu"))
    import triton

    result = SelftestResult(
        device=device, ok=False, versions={"torch": torch.__version__, "triton": triton.__version__}
    )
    if device == "cpu":
        cases = [
            dict(batch=2, depth=3, vocab=300, budget=7, dtype=torch.float32, seed=1),
            dict(batch=2, depth=4, vocab=257, budget=16, dtype=torch.bfloat16, seed=2),
            dict(batch=2, depth=3, vocab=97, budget=20, dtype=torch.float32, seed=3, ties=True),
            dict(batch=2, depth=3, vocab=200, budget=9, dtype=torch.bfloat16, seed=4, cand_cap=1),
        ]
        if quick:
            cases = cases[:1]
    else:
        result.versions["gpu"] = torch.cuda.get_device_name()
        cases = [
            dict(batch=2, depth=15, vocab=248320, budget=64, dtype=torch.bfloat16, seed=1),
            dict(batch=2, depth=15, vocab=151936, budget=64, dtype=torch.float32, seed=2),
            dict(batch=2, depth=7, vocab=1000, budget=16, dtype=torch.float32, seed=3, ties=True),
            dict(batch=2, depth=15, vocab=248320, budget=64, dtype=torch.bfloat16, seed=4, cand_cap=1),
        ]
        if quick:
            cases = cases[:1]
    for case in cases:
        try:
            result.checks.extend(check_case(tk, device=device, **case))
        except Exception as err:  # a kernel that fails to compile or launch is a failed check, not a crash
            result.checks.append(Check(f"case {case}", False, f"{type(err).__name__}: {err}"))
    result.ok = bool(result.checks) and all(c.ok for c in result.checks)
    result.seconds = time.perf_counter() - t0
    return result
