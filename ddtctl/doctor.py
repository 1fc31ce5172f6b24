"""`ddtctl doctor [HOST]`: one checklist of a GPU host against a profile (issue #34 item 5).

The shape is pyinfra's facts -> checks: the host's facts come in one SSH round trip (a Batch of the agent's
`facts`, `state` and `checkup` operations, ddtctl/remote/protocol.py), then the pure checks of
ddtctl/doctor_checks.py turn them into rows (ok / warn / fail / skipped, what was found, a one-line fix). The
CLI only prints the report. SSH itself is the first row: an unreachable host or an unknown host key is a
failed row (the other rows skipped), not an exception.

Exit codes (ddtctl/errors.py): 0 when no row failed, 3 (REMOTE) when SSH failed, else 1 (INVALID: a check
failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddtctl.doctor_checks import ROW_NAMES, run_checks
from ddtctl.doctor_model import PINS, DoctorFacts, Launch, Pins, Row, Status
from ddtctl.errors import ExitCode, RemoteError, UsageError
from ddtctl.profile import load_profile
from ddtctl.remote.facts import HostFacts
from ddtctl.remote.inventory import Host, load_inventory, resolve_host
from ddtctl.remote.protocol import Batch, Checkup, Facts, State
from ddtctl.remote.transport import Connection
from ddtctl.server_argv import typed_launch

__all__ = ["PINS", "DoctorFacts", "Launch", "Pins", "Row", "Status", "run_checks"]


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def launch_from_profile(path: str) -> Launch:
    """What the profile at `path` asks of its host: GPUs (tp x pp x dp over its hosts), port, algorithm,
    models, env, from the profile's typed launch (the values SGLang reads from the argv deploy renders)."""

    loaded = load_profile(path)
    prof = loaded.profile
    parsed = typed_launch(prof)
    hosts = list(prof.hosts or [])
    algorithm = parsed.get("speculative_algorithm")
    return Launch(
        source=loaded.source,
        sglang=prof.sglang,
        gpu=prof.hardware.gpu if prof.hardware else None,
        gpu_count=prof.hardware.count if prof.hardware else None,
        tp=_count(parsed.get("tp_size")),
        pp=_count(parsed.get("pp_size")),
        dp=_count(parsed.get("dp_size")),
        dp_attention=bool(parsed.get("enable_dp_attention")),
        nnodes=len(hosts) if len(hosts) > 1 else _count(parsed.get("nnodes")),
        port=int(parsed.get("port") or 30000),
        algorithm=str(algorithm).upper() if algorithm else None,
        model_path=prof.model.path,
        architecture=prof.model.architecture,
        draft_path=parsed.get("speculative_draft_model_path") or None,
        env=dict(prof.env),
    )


@dataclass
class DoctorReport:
    host: str
    address: str
    profile: str | None
    rows: list[Row] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(r.name == "ssh" and r.status == Status.FAIL for r in self.rows):
            return ExitCode.REMOTE
        return ExitCode.INVALID if any(r.status == Status.FAIL for r in self.rows) else ExitCode.OK

    def counts(self) -> dict[str, int]:
        return {str(s): sum(r.status == s for r in self.rows) for s in Status}

    def to_json(self) -> dict:
        return {
            "host": self.host,
            "address": self.address,
            "profile": self.profile,
            "checks": [r.to_json() for r in self.rows],
            "counts": self.counts(),
        }


def _model_paths(launch: Launch) -> tuple[str, ...]:
    return tuple(p for p in (launch.model_path, launch.draft_path) if p)


def gather(conn, launch: Launch) -> DoctorFacts:
    """The facts every check reads, in one round trip (facts, state, checkup in one agent batch)."""
    h: Host = conn.host
    paths = _model_paths(launch)
    checkup = Checkup(h.nvidia_smi, launch.per_node > 1 or None, h.sglang_root, paths)
    reply, state, check = conn.call(Batch((Facts(h.nvidia_smi, paths), State(), checkup)), retry=True)
    facts = HostFacts(**vars(reply), host=h.name)
    facts.sglang_root = h.sglang_root or reply.sglang_root
    return DoctorFacts(facts, check, state.state.installed_payload, dict(h.env))


def doctor(host: Host, launch: Launch, *, trust_new_host: bool = False) -> DoctorReport:
    """Connect (the `ssh` row), gather the facts, run the checks. Only an SSH failure is caught: it is the
    report's first row, failed, with every other row skipped."""
    report = DoctorReport(host.name, f"{host.user}@{host.address}:{host.port}", launch.source)
    try:
        with Connection(host, trust_new_host=trust_new_host).open() as conn:
            key = (
                f"; host key added to known_hosts: {conn.trusted_key}"
                if conn.trusted_key
                else ", host key known"
            )
            report.rows.append(Row("ssh", Status.OK, f"reachable as {report.address}{key}"))
            df = gather(conn, launch)
    except RemoteError as err:
        report.rows = [Row("ssh", Status.FAIL, err.message, err.fix)]
        report.rows += [Row(name, Status.SKIPPED, "SSH failed") for name in ROW_NAMES]
        return report

    report.rows += run_checks(launch, df)
    return report


def doctor_target(host: str | None, profile: str | None, inventory: str | None) -> tuple[Host, Launch]:
    """The host and the launch to check it against. Without HOST: the profile's host (with --profile), else
    the inventory's only host; the inventory has no default host beyond that, so several are a usage error.
    Without --profile: the host's own profile (inventory `profile:`), else the host-only checks."""
    inv = load_inventory(inventory)
    if host is None and profile is not None:
        prof = load_profile(profile).profile
        host = prof.host or (prof.hosts[0] if prof.hosts else None)
    if host is None:
        names = sorted(inv.hosts)
        if len(names) != 1:
            fix = "ddtctl doctor HOST, or --profile P (its host: is checked)"
            if inv.path is None:
                raise UsageError(f"no HOST given and no inventory to take one from: {inv.missing()}", fix=fix)
            what = f"{len(names)} hosts ({', '.join(names)})" if names else "no hosts"
            raise UsageError(f"no HOST given and the inventory has {what}", where=str(inv.path), fix=fix)
        host = names[0]
    h = resolve_host(host, inv)
    if profile is None:
        profile = inv.default_profile(h)
    return h, launch_from_profile(profile) if profile else Launch()
