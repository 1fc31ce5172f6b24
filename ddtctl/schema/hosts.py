"""JSON Schema of the inventory (`hosts.yaml`), for editors:
`# yaml-language-server: $schema=.../hosts.schema.json`.

Generated from HOST_FIELDS; tests/schema/test_hosts_schema.py keeps HOST_FIELDS equal to
the keys the inventory reader accepts (ddtctl/remote/inventory/host.py `_HOST_KEYS`) and the
shipped file equal to this generator's output:
python -m ddtctl.schema.hosts --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ddtctl.remote.inventory.names import ADDRESS_SCHEMA_PATTERN, HOST_PATTERN, USER_PATTERN

SCHEMA_PATH = Path(__file__).resolve().parent / "hosts.schema.json"

_STR = {"type": "string"}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
# the ranges the reader (ddtctl/remote/inventory/resolve.py) accepts
_CONNECT_S = {"type": "number", "minimum": 0.1, "maximum": 3600}
_COMMAND_S = {"type": "number", "minimum": 0.1, "maximum": 7 * 86400}
HOST_FIELDS: dict[str, tuple[dict[str, Any], str]] = {
    "address": (
        {"type": "string", "pattern": ADDRESS_SCHEMA_PATTERN},
        "Host name or IP to connect to, or an ~/.ssh/config alias (default: the host's name); letters, "
        "digits, '.', '_', '-' (not first), or an IP address",
    ),
    "user": (
        {"type": "string", "pattern": USER_PATTERN},
        "SSH user (else ~/.ssh/config's User, else the local user)",
    ),
    "port": (_PORT, "SSH port (else ~/.ssh/config's Port, else 22)"),
    "key": (
        {"oneOf": [_STR, {"type": "array", "items": _STR, "minItems": 1}]},
        "Private key file(s); passwords are refused (default: ~/.ssh/config's IdentityFile, then the agent)",
    ),
    "python": (_STR, "The host's Python that has sglang installed"),
    "work_dir": (
        _STR,
        "Releases, content-addressed store, logs, pid file and lock on the host (default ~/ddtctl)",
    ),
    "profile": (_STR, "The host's default profile (`ddtctl deploy HOST --algo DDTREE` starts from it)"),
    "launcher": (
        {"oneOf": [_STR, {"type": "array", "items": _STR}]},
        "Command that starts the server (default: python -m sglang.launch_server)",
    ),
    "env": (
        {
            "type": "object",
            "additionalProperties": {"type": ["string", "number", "boolean"]},
            "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        },
        "Server environment (a profile's env: wins over these)",
    ),
    "nvidia_smi": (_STR, "nvidia-smi on the host (default: the one on its PATH)"),
    "sglang_root": (_STR, "site-packages holding sglang (default: where the host's python finds it)"),
    "connect_timeout_s": (_CONNECT_S, "SSH connect timeout, seconds (default: ConnectTimeout, else 10)"),
    "command_timeout_s": (_COMMAND_S, "Timeout of one remote command, seconds (default 120)"),
    "known_hosts": (_STR, "known_hosts file host keys are verified against (default ~/.ssh/known_hosts)"),
    "dist_init_port": (_PORT, "Multi-node: the --dist-init-addr port on rank 0 (default 50000)"),
    "warmup": (
        {"oneOf": [_STR, {"type": "array", "items": _STR}]},
        "Command run on the GPU before the server starts (default: the payload's kernel self-test; none)",
    ),
}


def hosts_schema() -> dict[str, Any]:
    host = {
        "type": "object",
        "additionalProperties": False,
        "properties": {k: {**spec, "description": doc} for k, (spec, doc) in HOST_FIELDS.items()},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ddtctl inventory (hosts.yaml)",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "ssh_config": {
                "type": "string",
                "description": "ssh_config file to read (default ~/.ssh/config)",
            },
            "known_hosts": {"type": "string", "description": "Default known_hosts for every host"},
            "defaults": {**host, "description": "Settings every host inherits"},
            "hosts": {
                "type": "object",
                "description": "Deploy targets by name",
                "propertyNames": {"pattern": HOST_PATTERN},
                "additionalProperties": {"oneOf": [host, {"type": "null"}]},
            },
        },
    }


def render() -> str:
    return json.dumps(hosts_schema(), indent=2) + "\n"


if __name__ == "__main__":
    if "--write" in sys.argv:
        from ddtctl.safeio import write_new

        write_new(SCHEMA_PATH, render())
        print(f"wrote {SCHEMA_PATH}")
    else:
        sys.stdout.write(render())
