"""`ddtctl doctor`'s checks: pure functions of (Launch, DoctorFacts) that return result rows (pyinfra's
facts -> checks shape). Nothing here connects or prints: ddtctl/doctor.py gathers the facts in one SSH round
trip and runs CHECKS; the CLI prints the rows. Each row: a status (ok / warn / fail / skipped), what was
found, and a one-line fix."""

from __future__ import annotations

import re
from typing import Callable

from ddtctl.doctor_model import PINS, DoctorFacts, Launch, Row, Status
from ddtctl.errors import UsageError
from ddtctl.schema.gpus import resolve_gpu

GIB = 1 << 30
DISK_MIN_BYTES = 1 << 30  # the work dir: releases (hard links into the store), logs (preflight's headroom)
SHM_MIN_BYTES = 1 << 30  # Docker's default /dev/shm is 64 MiB; NCCL between GPUs of one host needs more
GPU_BUSY_BYTES = 2 << 30  # memory in use on an idle GPU (the driver's own is well under this)


def _gib(n: int | None) -> str:
    """A size in GiB, or in MiB / KiB below one GiB ('?' when unknown)."""
    if n is None:
        return "?"
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n / 1024:.1f} KiB"


def _version(text: str | None) -> tuple[int, ...]:
    """The leading numbers of a version ('2.14.1+cu130' -> (2, 14, 1)); () when there are none."""
    m = re.match(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(x) for x in m.group().split(".")) if m else ()


def _pinned(requires: list[str] | None, dist: str) -> str | None:
    """The `==` version a requirement list pins `dist` to (`torch==2.14.1; ...` -> 2.14.1)."""
    for req in requires or []:
        m = re.match(
            rf"\s*{re.escape(dist)}\s*(?:\[[^\]]*\])?\s*==\s*([\w.+-]+)", req.replace("_", "-"), re.I
        )
        if m:
            return m.group(1)
    return None


# ------------------------------------------------------------------------------------------------- GPUs
def _visible(launch: Launch, df: DoctorFacts) -> list[int]:
    """Indexes of the GPUs the server would see (CUDA_VISIBLE_DEVICES of the profile's or the host's env)."""
    indexes = [g.index for g in df.facts.gpus]
    cvd = {**df.host_env, **launch.env}.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return indexes
    ids = [x.strip() for x in cvd.split(",") if x.strip()]
    if all(x.isdigit() for x in ids):
        return [int(x) for x in ids if int(x) in indexes]
    return indexes[: len(ids)]  # UUIDs: their count


def check_gpus(launch: Launch, df: DoctorFacts) -> Row:
    f = df.facts
    if not f.gpus:
        return Row(
            "gpus",
            Status.FAIL,
            f"no GPU: {f.gpu_error or 'nvidia-smi listed none'}",
            "check that nvidia-smi works on the host (or set nvidia_smi: in the inventory)",
        )
    visible = _visible(launch, df)
    names = sorted({g.name for g in f.gpus})
    need = launch.per_node
    found = f"{len(visible)} x {', '.join(names)} visible" + (
        f"; {launch.layout} needs {need} per host" if launch.source else ""
    )
    if len(visible) < need:
        return Row("gpus", Status.FAIL, found, "lower tp-size / pp-size, or use a host with more GPUs")
    if launch.gpu_count is not None and launch.gpu_count != len(f.gpus):
        return Row(
            "gpus",
            Status.WARN,
            found + f"; the profile's hardware.count is {launch.gpu_count}, the host has {len(f.gpus)}",
            f"set hardware.count: {len(f.gpus)}",
        )
    busy = [
        g
        for g in f.gpus
        if g.index in visible[:need]
        and g.memory_total_mib is not None
        and g.memory_free_mib is not None
        and (g.memory_total_mib - g.memory_free_mib) * (1 << 20) > GPU_BUSY_BYTES
    ]
    if busy and not f.server_running:
        used = ", ".join(
            f"GPU {g.index} {(g.memory_total_mib or 0) - (g.memory_free_mib or 0)} MiB" for g in busy
        )
        return Row(
            "gpus",
            Status.WARN,
            found + f"; memory in use with no server of ours running: {used}",
            "stop the process that holds it (nvidia-smi lists it) before launching",
        )
    return Row("gpus", Status.OK, found)


def check_gpu_kind(launch: Launch, df: DoctorFacts) -> Row:

    gpus = df.facts.gpus
    if not launch.gpu:
        return Row(
            "gpu-kind",
            Status.SKIPPED,
            "the profile names no hardware.gpu",
            "set hardware: {gpu: ..., count: N}",
        )
    if not gpus:
        return Row("gpu-kind", Status.SKIPPED, "no GPU found")
    want = resolve_gpu(launch.gpu)
    have_name = gpus[0].name
    have = None
    try:
        have = resolve_gpu(have_name)
    except UsageError:  # a GPU ddtctl does not know: nvidia-smi's compute capability decides
        pass
    have_sm, have_product = (have.sm, have.name) if have else (gpus[0].sm, None)
    found = f"profile is for {launch.gpu} (sm{want.sm}); host has {have_name} (sm{have_sm})"
    fix = f"set hardware.gpu: {have_product or f'sm{have_sm}'} and re-validate"
    if len({g.name for g in gpus}) > 1:
        return Row(
            "gpu-kind",
            Status.WARN,
            found + "; the host mixes GPU kinds",
            "pin the server to one kind with CUDA_VISIBLE_DEVICES",
        )
    if have_sm != want.sm:
        return Row("gpu-kind", Status.FAIL, found, fix)
    if have and not want.name.startswith("sm") and have.name != want.name:
        return Row("gpu-kind", Status.WARN, found + f" ({want.memory_gb} vs {have.memory_gb} GB)", fix)
    return Row("gpu-kind", Status.OK, found)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LINK_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")  # PCIe paths, nearest first (NV#: NVLink)


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -m` as {(gpu_a, gpu_b): link} (NV18, PIX, PXB, PHB, NODE, SYS), both orders."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header = next((ln.split() for ln in lines if "GPU0" in ln.split() and "X" not in ln.split()), [])
    cols = [int(t[3:]) for t in header if re.fullmatch(r"GPU\d+", t)]
    links: dict[tuple[int, int], str] = {}
    for line in lines:
        tokens = line.split()
        if len(tokens) > len(cols) and re.fullmatch(r"GPU\d+", tokens[0]) and "X" in tokens:
            row = int(tokens[0][3:])
            for col, cell in zip(cols, tokens[1 : 1 + len(cols)], strict=True):
                if col != row:
                    links[(row, col)] = cell
    return links


def check_topology(launch: Launch, df: DoctorFacts) -> Row:
    n = launch.per_node
    if n <= 1:
        return Row("topology", Status.SKIPPED, f"one GPU per host ({launch.layout}): no GPU-to-GPU traffic")
    c = df.checkup
    if c.topology is None:
        return Row(
            "topology",
            Status.WARN,
            f"cannot read the GPU topology: {c.topology_error or 'not asked'}",
            "check `nvidia-smi topo -m` on the host",
        )
    links = parse_topology(c.topology)
    gpus = _visible(launch, df)[:n]
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    if len(gpus) < n:
        return Row("topology", Status.SKIPPED, f"{len(gpus)} of the {n} GPUs needed are visible (see gpus)")
    unknown = [f"GPU{a}-GPU{b}" for a, b in pairs if (a, b) not in links]
    if unknown:
        return Row(
            "topology",
            Status.WARN,
            f"`nvidia-smi topo -m` does not list {', '.join(unknown)}",
            "check `nvidia-smi topo -m` on the host",
        )
    kinds = sorted({links[p] for p in pairs})
    if all(k.startswith("NV") for k in kinds):
        return Row("topology", Status.OK, f"NVLink between all {n} GPUs ({', '.join(kinds)})")
    worst = max(
        (links[p] for p in pairs if not links[p].startswith("NV")),
        key=lambda k: _LINK_ORDER.index(k) if k in _LINK_ORDER else 9,
    )
    a, b = next(p for p in pairs if links[p] == worst)
    found = f"{n} GPUs over {', '.join(kinds)} (GPU{a}-GPU{b}: {worst})"
    p2p_off = {**df.host_env, **launch.env}.get("NCCL_P2P_DISABLE") == "1"
    if p2p_off:
        return Row(
            "topology",
            Status.WARN,
            found + "; NCCL_P2P_DISABLE=1 in the env",
            "remove NCCL_P2P_DISABLE from the env",
        )
    if n > 2:
        return Row(
            "topology",
            Status.WARN,
            found + f": SGLang {launch.sglang}'s custom all-reduce is off on more than two PCIe-only GPUs "
            "(NCCL all-reduces instead)",
            "expected on PCIe-only GPUs; on an NVLink host, check `nvidia-smi nvlink -s` and fabricmanager",
        )
    if worst == "SYS":
        return Row(
            "topology",
            Status.WARN,
            found + ": the pair crosses the CPU interconnect",
            "pick two GPUs of one CPU socket with CUDA_VISIBLE_DEVICES",
        )
    return Row("topology", Status.OK, found + ": PCIe peer-to-peer")


# --------------------------------------------------------------------------------------- software stack
def check_driver(launch: Launch, df: DoctorFacts) -> Row:
    f, pins = df.facts, PINS.get(launch.sglang)
    if not f.gpus or not f.driver:
        return Row("driver", Status.SKIPPED, "no driver answered (see gpus)")
    have = _version(f.cuda)
    torch_cuda = _version(df.checkup.torch_cuda)
    found = f"driver {f.driver}, CUDA {f.cuda or '?'}" + (
        f"; torch built for CUDA {df.checkup.torch_cuda}" if torch_cuda else ""
    )
    if not have:
        return Row(
            "driver",
            Status.WARN,
            found + ": nvidia-smi names no CUDA version",
            "check `nvidia-smi` on the host",
        )
    if pins and have[0] < pins.cuda_major:
        return Row(
            "driver",
            Status.FAIL,
            found + f": SGLang {launch.sglang} (torch {pins.torch}, flashinfer cu{pins.cuda_major}) "
            f"needs CUDA {pins.cuda_major}",
            f"upgrade the NVIDIA driver to >= {pins.driver_min} (CUDA {pins.cuda_major})",
        )
    if torch_cuda and torch_cuda[:1] > have[:1]:
        return Row(
            "driver",
            Status.FAIL,
            found + ": the driver is older than torch's CUDA",
            f"upgrade the driver to one of CUDA {df.checkup.torch_cuda}",
        )
    if torch_cuda and torch_cuda[:2] > have[:2]:
        return Row(
            "driver",
            Status.WARN,
            found + ": runs under CUDA minor version compatibility only (no PTX JIT of newer kernels)",
            f"upgrade the driver to one of CUDA {df.checkup.torch_cuda}",
        )
    return Row("driver", Status.OK, found)


def check_torch(launch: Launch, df: DoctorFacts) -> Row:
    c, pins = df.checkup, PINS.get(launch.sglang)
    want = _pinned(c.requires.get("sglang"), "torch") or (pins.torch if pins else None)
    have = c.packages.get("torch")
    pip = f"pip install torch=={want}" if want else "install the torch SGLang needs"
    if not have:
        return Row("torch", Status.FAIL, f"torch is not installed for {df.facts.python}", pip)
    cpu = c.torch_found and not c.torch_cuda
    found = (
        f"torch {have}"
        + (f" (CUDA {c.torch_cuda})" if c.torch_cuda else "")
        + (": a CPU build" if cpu else "")
        + (f"; SGLang {launch.sglang} pins {want}" if want else "")
    )
    if cpu:
        return Row("torch", Status.FAIL, found, f"install torch's CUDA build: {pip}")
    if want and _version(have)[:2] != _version(want)[:2]:
        return Row("torch", Status.FAIL, found, pip)
    if want and _version(have) != _version(want):
        return Row("torch", Status.WARN, found, pip)
    return Row("torch", Status.OK, found)


def check_python(launch: Launch, df: DoctorFacts) -> Row:
    pins = PINS.get(launch.sglang)
    have = _version(df.facts.python_version)
    found = f"python {df.facts.python_version} ({df.facts.python})"
    if pins and have[:2] < pins.python:
        need = ".".join(map(str, pins.python))
        return Row(
            "python",
            Status.FAIL,
            found + f": SGLang {launch.sglang} needs python >= {need}",
            f"point the inventory's python: at a python >= {need} with SGLang {launch.sglang}",
        )
    return Row("python", Status.OK, found)


def check_sglang(launch: Launch, df: DoctorFacts) -> Row:
    f = df.facts
    if f.sglang_version is None:
        return Row(
            "sglang",
            Status.FAIL,
            f"sglang is not importable by {f.python}",
            "set the host's python: in the inventory to the interpreter that has SGLang",
        )
    whose = "the profile" if launch.source else "ddtctl"
    found = f"sglang {f.sglang_version} at {f.sglang_root or '?'}; {whose} targets {launch.sglang}"
    if f.sglang_version != launch.sglang:
        return Row(
            "sglang",
            Status.FAIL,
            found,
            f"pip install sglang=={launch.sglang} on the host, or change the profile's sglang:",
        )
    return Row("sglang", Status.OK, found)


def check_payload(launch: Launch, df: DoctorFacts) -> Row:
    if launch.algorithm != "DDTREE":
        return Row(
            "ddtree-payload",
            Status.SKIPPED,
            f"the profile's algorithm is {launch.algorithm or 'none'}, not DDTREE",
        )
    pay, rec = df.checkup.payload, df.installed_payload
    where = pay.root or "(no SGLang root)"
    recorded = (
        f"; installed by ddtctl: {str(rec.get('hash') or '')[:12]} (release {rec.get('release')})"
        if rec
        else ""
    )
    deploy = (
        f"`ddtctl deploy {df.facts.host} --profile {launch.source or 'PROFILE'}` installs it with the release"
    )
    if pay.present:
        if rec:
            return Row("ddtree-payload", Status.OK, f"in {where}{recorded}")
        return Row("ddtree-payload", Status.WARN, f"in {where}, not installed by ddtctl (by hand?)", deploy)
    if pay.package or pay.entry_point:
        part = "package without its entry point" if pay.package else "entry point without its package"
        return Row("ddtree-payload", Status.FAIL, f"half installed in {where}: {part}{recorded}", deploy)
    if rec:
        return Row(
            "ddtree-payload",
            Status.FAIL,
            f"missing from {where}{recorded} (SGLang reinstalled since?)",
            deploy,
        )
    return Row("ddtree-payload", Status.WARN, f"not installed in {where}", deploy)


def check_nccl(launch: Launch, df: DoctorFacts) -> Row:
    c = df.checkup
    dist = next((d for d in ("nvidia-nccl-cu13", "nvidia-nccl-cu12") if c.packages.get(d)), None)
    have = f"{dist} {c.packages[dist]}" if dist else "no nvidia-nccl-cu* package"
    if launch.tp * launch.pp <= 1:
        return Row("nccl", Status.SKIPPED, f"{have}; {launch.layout}: no NCCL communicator")
    want_dist = next(
        (d for d in ("nvidia-nccl-cu13", "nvidia-nccl-cu12") if _pinned(c.requires.get("torch"), d)), None
    )
    want = _pinned(c.requires.get("torch"), want_dist) if want_dist else None
    if dist is None:
        return Row(
            "nccl",
            Status.WARN,
            f"{have} for {df.facts.python} (a torch that links NCCL in needs none)",
            f"pip install {want_dist}=={want}" if want_dist else "install the NCCL torch was built with",
        )
    found = have + (f"; torch requires {want_dist} {want}" if want_dist else "")
    if want_dist and (want_dist != dist or want != c.packages[dist]):
        return Row("nccl", Status.WARN, found, f"pip install {want_dist}=={want}")
    return Row("nccl", Status.OK, found)


# ------------------------------------------------------------------------------------ disk, models, port
def check_disk(launch: Launch, df: DoctorFacts) -> Row:
    f = df.facts
    found = f"{_gib(f.disk_free_bytes)} free in the work dir {f.work_dir}"
    if f.disk_free_bytes < DISK_MIN_BYTES:
        return Row(
            "disk",
            Status.FAIL,
            found,
            f"free at least {_gib(DISK_MIN_BYTES)} there (`ddtctl releases` lists old releases)",
        )
    return Row("disk", Status.OK, found)


def _hub_id(path: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", path)) and not path.startswith(".")


def check_model_dir(name: str, path: str | None, df: DoctorFacts) -> Row:
    if not path:
        return Row(
            name,
            Status.SKIPPED,
            "the profile has no " + ("draft model" if name.startswith("draft") else "model"),
        )
    d = df.checkup.models.get(path)
    if d is None:
        return Row(name, Status.SKIPPED, f"{path}: not checked")
    if not d.exists:
        if _hub_id(path):
            return Row(
                name,
                Status.WARN,
                f"{path}: a hub id, downloaded at the first launch",
                f"download it ahead (`huggingface-cli download {path} --local-dir DIR`), set model.path: DIR",
            )
        return Row(
            name,
            Status.FAIL,
            f"{path}: no such directory ({_gib(d.free_bytes)} free in {d.free_at})",
            f"copy the model to {path} on the host",
        )
    size = ("at least " if d.truncated else "") + _gib(d.size_bytes)
    found = f"{path}: {size}, {d.weight_files} weight file(s); {_gib(d.free_bytes)} free on its file system"
    index = d.index or {}
    if index.get("missing_count"):
        missing = ", ".join(index.get("missing") or [])
        return Row(
            name,
            Status.FAIL,
            found + f"; {index['missing_count']} of {index.get('shards')} indexed shards missing ({missing})",
            "finish copying the model",
        )
    if not d.weight_files:
        return Row(
            name, Status.FAIL, found + ": no weights (*.safetensors, *.bin)", "copy the model's weight files"
        )
    return Row(name, Status.OK, found)


def check_model_config(name: str, path: str | None, want: str | None, df: DoctorFacts) -> Row:
    if not path:
        return Row(
            name,
            Status.SKIPPED,
            "the profile has no " + ("draft model" if name.startswith("draft") else "model"),
        )
    info = df.facts.models.get(path)
    if info is None or (_hub_id(path) and "config" not in info):
        return Row(name, Status.SKIPPED, f"{path}: not on the host")
    if "config" not in info:
        return Row(
            name,
            Status.FAIL,
            f"{path}: {info.get('error', 'config.json not read')}",
            "copy the model's config.json to the host",
        )
    archs = info["config"].get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    found = f"{path}/config.json: {arch or 'no architectures'}"
    if want and arch != want:
        return Row(
            name,
            Status.FAIL,
            found + f"; the profile says {want}",
            f"set model.architecture: {arch} or point model.path at a {want} model",
        )
    return Row(name, Status.OK, found + ("; as the profile says" if want else ""))


def check_models(launch: Launch, df: DoctorFacts) -> list[Row]:
    return [
        check_model_dir("model-dir", launch.model_path, df),
        check_model_config("model-config", launch.model_path, launch.architecture, df),
        check_model_dir("draft-dir", launch.draft_path, df),
        check_model_config("draft-config", launch.draft_path, None, df),
    ]


def check_port(launch: Launch, df: DoctorFacts) -> Row:
    f = df.facts
    srv = f.server or {}
    if f.server_running and srv.get("port") == launch.port:
        return Row(
            "port", Status.OK, f"port {launch.port} is held by our server (release {srv.get('release')})"
        )
    if launch.port in f.ports_in_use:
        return Row(
            "port",
            Status.FAIL,
            f"port {launch.port} is in use by another process",
            f"stop what listens there (`ss -ltnp 'sport = :{launch.port}'`) or change server.port",
        )
    return Row("port", Status.OK, f"port {launch.port} is free")


def check_shm(launch: Launch, df: DoctorFacts) -> Row:
    shm = df.checkup.shm
    multi = launch.per_node > 1
    fix = "give it more: `docker run --shm-size 32g`, or `mount -o remount,size=32G /dev/shm`"
    if shm.error or shm.total_bytes is None:
        return Row("shm", Status.FAIL if multi else Status.WARN, f"no /dev/shm: {shm.error}", fix)
    found = f"/dev/shm {_gib(shm.total_bytes)} ({_gib(shm.free_bytes)} free)"
    if (shm.free_bytes or 0) < SHM_MIN_BYTES:
        need = f"; NCCL between {launch.per_node} GPUs needs more" if multi else ""
        return Row("shm", Status.FAIL if multi else Status.WARN, found + need, fix)
    return Row("shm", Status.OK, found)


def _one(check: Callable[[Launch, DoctorFacts], Row]) -> Callable[[Launch, DoctorFacts], list[Row]]:
    return lambda launch, df: [check(launch, df)]


CHECKS: tuple[Callable[[Launch, DoctorFacts], list[Row]], ...] = (
    _one(check_gpus),
    _one(check_gpu_kind),
    _one(check_topology),
    _one(check_driver),
    _one(check_torch),
    _one(check_python),
    _one(check_sglang),
    _one(check_payload),
    _one(check_nccl),
    _one(check_disk),
    check_models,
    _one(check_port),
    _one(check_shm),
)
ROW_NAMES = (
    "gpus", "gpu-kind", "topology", "driver", "torch", "python", "sglang", "ddtree-payload", "nccl", "disk",
    "model-dir", "model-config", "draft-dir", "draft-config", "port", "shm",
)  # fmt: skip


# what only a profile says (tp, the algorithm, the models, the port): without one, these rows are skipped
PROFILE_ROWS = frozenset(ROW_NAMES) - {"gpus", "driver", "torch", "python", "sglang", "disk", "shm"}


def run_checks(launch: Launch, df: DoctorFacts) -> list[Row]:
    rows = [row for check in CHECKS for row in check(launch, df)]
    if launch.source is None:  # the report's header says how to give one
        rows = [Row(r.name, Status.SKIPPED, "no profile") if r.name in PROFILE_ROWS else r for r in rows]
    return rows
