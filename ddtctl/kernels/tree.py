"""`ddtctl kernels tree`: the tree DDTree builds from one request's draft
logits [L, V] (numpy reference only)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ddtctl.errors import UsageError
from ddtctl.safeio import read_regular

MAX_LOGITS_BYTES = (
    512 * 1024 * 1024
)  # one request's draft logits: L rows over a vocabulary (16 x 152k float32: 10 MB)


@dataclass
class TreeNode:
    index: int
    token: int
    depth: int
    parent: int
    rank: int
    score: float  # log-prob of the prefix under the factorized drafter
    prob: float  # exp(score): the surrogate's probability that this node is accepted


@dataclass
class TreeReport:
    source: str
    depth: int
    vocab: int
    budget: int
    k: int
    expected_accept_length: float  # sum of node probabilities (accepted draft tokens; +1 bonus per step)
    chain_expected_accept_length: float  # the same drafter as a chain (top-1 at each depth, B = L)
    nodes: list[TreeNode] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def load_logits(path: str):
    import io

    import numpy as np

    if not Path(path).exists() and not Path(path).is_symlink():
        raise UsageError(f"no such file: {path}", fix="give a .npy file holding draft logits [L, V]")
    # a regular file of bounded size (a FIFO or /dev/zero is refused, not read), parsed from memory
    raw = read_regular(
        path, MAX_LOGITS_BYTES, what=".npy logits", fix="give a .npy file holding draft logits [L, V]"
    )
    if raw.startswith(b"PK"):
        raise UsageError(
            f"{path}: holds several arrays (.npz), expected one [L, V] array", fix="save with numpy.save"
        )
    _check_npy_header(path, raw)
    try:
        x = np.load(io.BytesIO(raw), allow_pickle=False)
    except Exception as err:
        raise UsageError(
            f"cannot read {path} as .npy: {str(err)[:200]}", fix="save the logits with numpy.save"
        ) from None
    if x.ndim == 3 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 2:
        raise UsageError(
            f"{path}: logits have shape {tuple(x.shape)}, expected [L, V]",
            fix="one request's draft logits: L = block_size - 1 rows over the vocabulary",
        )
    if x.dtype.kind not in "fiu":
        raise UsageError(f"{path}: dtype {x.dtype} is not numeric", fix="save float logits")
    with np.errstate(over="ignore", invalid="ignore"):
        x = x.astype(np.float64)
    if np.isnan(x).any():
        raise UsageError(f"{path}: logits contain NaN", fix="check the drafter's output")
    if np.isposinf(x).any() or not np.isfinite(x).any(axis=1).all():
        raise UsageError(f"{path}: a row has +inf or no finite logit", fix="check the drafter's output")
    # Finite logits beyond float32's range (1e300) would become +-inf in the cast, and NaN in the
    # softmax (issue #14: the check ran before the cast). Softmax is shift-invariant: subtract each
    # row's largest logit in float64 first; what still underflows to -inf has probability 0 anyway.
    # Logits within float32's range are cast as they are.
    finite = x[np.isfinite(x)]
    if finite.size and np.abs(finite).max() > np.finfo(np.float32).max:
        with np.errstate(over="ignore", invalid="ignore"):
            x = x - x.max(axis=1, keepdims=True)
    with np.errstate(over="ignore"):
        return x.astype(np.float32)


def _check_npy_header(path: str, raw: bytes) -> None:
    """The .npy header must describe exactly the bytes that follow it: a header claiming a 37 GiB
    array over 24 bytes of data made numpy try to allocate it (found by the bad-input corpus),
    and a text file was read as a pickle."""
    import io

    import numpy as np
    from numpy.lib import format as npformat

    f = io.BytesIO(raw)
    try:
        version = npformat.read_magic(f)
        read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
        shape, _, dtype = read(f)
    except Exception as err:  # no NUMPY magic, or a header numpy cannot parse
        raise UsageError(
            f"{path}: not a .npy file ({str(err)[:120]})", fix="save the logits with numpy.save"
        ) from None
    if dtype.hasobject:
        raise UsageError(f"{path}: holds Python objects (a pickle), not numbers", fix="save float logits")
    want = int(np.prod(shape, dtype=object)) * dtype.itemsize
    have = len(raw) - f.tell()
    if want != have:
        raise UsageError(
            f"{path}: the header says shape {tuple(shape)} ({want} bytes) but {have} bytes follow it",
            fix="the file is truncated or forged; save the logits again with numpy.save",
        )


def tree_report(path: str, budget: int) -> TreeReport:
    from ddtctl.kernels import reference as R

    x = load_logits(path)
    depth, vocab = x.shape
    try:
        k = R.check_budget(depth, vocab, budget)
    except ValueError as err:
        raise UsageError(f"--budget {budget}: {err}", fix="choose a smaller budget") from None
    lp, ids = R.topk_logprobs(x, k)
    tree = R.build(lp, ids, budget)
    chain = R.build(lp[:, :1], ids[:, :1], depth)
    nodes = [
        TreeNode(
            i,
            int(tree.tokens[i - 1]),
            int(tree.depths[i - 1]),
            int(tree.parents[i]),
            int(tree.ranks[i - 1]),
            float(tree.scores[i - 1]),
            math.exp(float(tree.scores[i - 1])),
        )
        for i in range(1, budget + 1)
    ]
    return TreeReport(
        str(path),
        depth,
        vocab,
        budget,
        k,
        tree.expected_accept_length(),
        chain.expected_accept_length(),
        nodes,
    )


def render_text(report: TreeReport, decode=None) -> str:
    """Draw the tree; `decode(token_id) -> str` labels tokens when a tokenizer is at hand."""
    children: dict[int, list[TreeNode]] = {}
    for node in report.nodes:
        children.setdefault(node.parent, []).append(node)
    lines = [
        f"root  (L={report.depth}, V={report.vocab}, B={report.budget}, K={report.k}; expected accepted "
        f"tokens {report.expected_accept_length:.3f} vs chain {report.chain_expected_accept_length:.3f})"
    ]

    def walk(parent: int, prefix: str) -> None:
        kids = children.get(parent, [])
        for j, node in enumerate(kids):
            last = j == len(kids) - 1
            label = f"{node.token}" if decode is None else f"{node.token} {decode(node.token)!r}"
            lines.append(
                f"{prefix}{'└── ' if last else '├── '}#{node.index} tok {label}  "
                f"d{node.depth} r{node.rank}  p={node.prob:.4f}"
            )
            walk(node.index, prefix + ("    " if last else "│   "))

    walk(0, "")
    return "\n".join(lines)
