"""`ddtctl deploy` and the host operations around it: facts -> preflight -> plan -> ship -> launch -> health
-> record.

Every function here returns a result object; the CLI (ddtctl/cli/remote.py) only parses and prints. Progress
is reported through an `on_event(Event)` callback. The host ends either serving the new release or exactly as
it was: nothing on the host changes before the plan is confirmed and the deploy lock is held; files are
shipped into a content-addressed store and only activated by install + launch; a failed health check rolls
back to the previous release (payload and server), or, with none, stops the new server and uninstalls the
payload.

Modules, in the order a deploy reaches them (pipeline.STAGES runs them over one DeployRun):
    spec           profile -> DeploySpec -> one Target per host
    preflight      static checks of a target against its host's facts (plain data in, Checks out)
    lock           the host's deploy lock (RemoteLock) and the operations that need it (locked_call)
    plan           per host: release id, files to ship, stop / install / start (plain data in, HostPlan out)
    ship           survey the host's store, ship and materialize the release
    remote_dryrun  SGLang's resolver on the host with the payload staged
    launch         kernel warm-up, stop + install, start; rollback after a failed health check
    health         /health and the served identity against the resolved one
    pipeline       DeployOptions, DeployRun, the stages, deploy(), DeployResult
    hostops        facts, status, releases, logs, stop, rollback outside a deploy
    releases       the rollback target (never a sweep point of `ddtctl tune`) and `releases --prune`
    events         Stage, Level, Status, Event, EventLog;  secrets: masking of JSON reports
The agent operations these send are typed in ddtctl.remote.protocol; argv reading and masking is ddtctl.argv.
"""

from ddtctl.argv import (
    SECRET_ENV,
    SECRET_WORDS,
    is_secret_flag,
    mask_argv,
    mask_env,
    secret_values,
)

from .events import Event, EventLog, Level, Stage, Status
from .health import (
    DDTREE_PREFIX,
    IDENTITY_FIELDS,
    HealthResult,
    expected_identity,
    identity_mismatches,
    same_value,
    wait_healthy,
)
from .hostops import (
    HostStatus,
    LogsResult,
    RollbackResult,
    StopResult,
    host_by_name,
    host_facts,
    host_logs,
    host_releases,
    host_status,
    iter_hosts,
    release_summary,
    rollback,
    stop_server,
)
from .launch import KERNEL_SELFTEST, KERNEL_WARMUP, warmup_argv
from .lock import RemoteLock, locked_call
from .pipeline import STAGES, DeployOptions, DeployResult, DeployRun, Outcome, connect, deploy
from .plan import HostPlan, Plan, argv_diff, describe_plan, make_plan_for_host, release_fingerprint
from .preflight import BUNDLED_WORKER, WORKER_CAPABILITY_RULE, Check, preflight_checks, ships_bundled_worker
from .releases import DEFAULT_KEEP, PrunePlan, PruneResult, prune_plan, prune_releases, rollback_target
from .remote_dryrun import remote_dry_run
from .secrets import mask_info, mask_strings
from .spec import PAYLOAD_MANIFEST, DeploySpec, Target, default_payload_dir, spec_from_profile, tools_manifest

_release_summary = release_summary  # the name ddtctl/cli/remote.py imports

__all__ = [
    "BUNDLED_WORKER",
    "DEFAULT_KEEP",
    "DDTREE_PREFIX",
    "IDENTITY_FIELDS",
    "KERNEL_SELFTEST",
    "KERNEL_WARMUP",
    "PAYLOAD_MANIFEST",
    "SECRET_ENV",
    "SECRET_WORDS",
    "STAGES",
    "WORKER_CAPABILITY_RULE",
    "Check",
    "DeployOptions",
    "DeployResult",
    "DeployRun",
    "DeploySpec",
    "Event",
    "EventLog",
    "HealthResult",
    "HostPlan",
    "HostStatus",
    "Level",
    "LogsResult",
    "Outcome",
    "Plan",
    "PrunePlan",
    "PruneResult",
    "RemoteLock",
    "RollbackResult",
    "Stage",
    "Status",
    "StopResult",
    "Target",
    "argv_diff",
    "connect",
    "default_payload_dir",
    "deploy",
    "describe_plan",
    "expected_identity",
    "host_by_name",
    "host_facts",
    "host_logs",
    "host_releases",
    "host_status",
    "identity_mismatches",
    "is_secret_flag",
    "iter_hosts",
    "locked_call",
    "make_plan_for_host",
    "mask_argv",
    "mask_env",
    "mask_info",
    "mask_strings",
    "preflight_checks",
    "prune_plan",
    "prune_releases",
    "release_fingerprint",
    "release_summary",
    "remote_dry_run",
    "rollback",
    "rollback_target",
    "same_value",
    "secret_values",
    "ships_bundled_worker",
    "spec_from_profile",
    "stop_server",
    "tools_manifest",
    "wait_healthy",
    "warmup_argv",
]
