"""Survey and ship: what the host holds (its state and its store), and the release's files sent to it,
verified and materialized as releases/<id>/ (nothing is installed or started here)."""

from __future__ import annotations

import getpass
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import ddtctl
from ddtctl.remote.protocol import Materialize, State, StateReply
from ddtctl.remote.ship import ShipResult, StoreListing, list_store, missing_objects, ship
from ddtctl.remote.transport import Connection

from .plan import HostPlan
from .spec import DeploySpec, Target


@dataclass
class Survey:
    """One host before the plan: its agent state, and which of the release's objects its store lacks."""

    state: StateReply
    missing: set[str]
    listing: StoreListing


def survey_host(conn: Connection, spec: DeploySpec) -> Survey:
    with ThreadPoolExecutor(1) as pool:  # the state (agent) and the store listing (SFTP) overlap
        fut = pool.submit(conn.call, State(), retry=True)
        listing = list_store(conn)
        state = fut.result()
    return Survey(state, missing_objects(listing, spec.manifests), listing)


def release_record(spec: DeploySpec, t: Target, hp: HostPlan) -> dict:
    """releases/<id>/release.json: what the release runs, where it came from, who deployed it."""

    return {
        "id": hp.release_id,
        "fingerprint": hp.fingerprint,
        "profile": {"name": spec.name, "source": spec.source, "sha256": spec.profile_hash},
        "sglang": spec.sglang,
        "algorithm": spec.algorithm,
        "argv": t.argv,
        "launch_argv": t.launch_argv,
        "env": t.env,
        "port": t.port,
        "probe_host": t.probe_host,
        "rank": t.rank,
        "nnodes": t.nnodes,
        "health_timeout_s": spec.health_timeout_s,
        "payload_hash": spec.payload.digest if spec.payload else None,
        "payload": spec.payload.to_json() if spec.payload else None,
        "tools": spec.tools.to_json() if spec.tools else None,
        "deployed_by": f"{getpass.getuser()}@{socket.gethostname()}",
        "ddtctl": ddtctl.__version__,
        "created_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kind": spec.kind,
        **({"tune": spec.tune} if spec.tune else {}),
    }


def ship_release(
    conn: Connection,
    spec: DeploySpec,
    t: Target,
    hp: HostPlan,
    survey: Survey,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> ShipResult:
    """Upload what the host's store lacks, verify it there, then materialize the release from the store."""
    progress = (lambda what, done, total: on_progress(t.name, done, total)) if on_progress else None
    return ship(
        conn,
        spec.manifests,
        listing=survey.listing,
        on_progress=progress,
        then=[Materialize(release_record(spec, t, hp))],
    )


def describe_shipped(s: ShipResult) -> str:
    reused = f", {s.reused} reused from an interrupted deploy" if s.reused else ""
    return (
        f"{s.files_sent} file(s) sent ({s.bytes_sent} bytes), "
        f"{s.skipped} skipped (already there, same sha256), "
        f"{s.verified} verified on the host{reused}"
    )
