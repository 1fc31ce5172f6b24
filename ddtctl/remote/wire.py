"""The agent's wire contract under the typed operations of ddtctl/remote/protocol.py: the operation names, the
request base (its parameters as they go on the wire, the parse of the agent's `result` into the reply type),
Batch (several operations in one round trip) and the checks the reply parses run on the agent's JSON.

A reply of another shape (an agent and a controller of different versions) is a RemoteError naming the
operation and the field, raised where the reply is parsed, not a KeyError or TypeError further on. The
underscored helpers are for protocol.py, their one user.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar

from ddtctl.errors import RemoteError


class Op(StrEnum):
    """The agent's operation names (agent.py `op_<name>`)."""

    HELLO = "hello"
    FACTS = "facts"
    STATE = "state"
    PROBE = "probe"
    LOGS = "logs"
    MISSING = "missing"
    COMMIT = "commit"
    MATERIALIZE = "materialize"
    SET_STATUS = "set_status"
    INSTALL = "install"
    UNINSTALL = "uninstall"
    WARMUP = "warmup"
    START = "start"
    STOP = "stop"
    GC = "gc"
    PRUNE = "prune"
    BATCH = "batch"
    LOCK = "lock"
    COMMIT_STREAM = "commit_stream"
    JOURNAL = "journal"
    CHECKUP = "checkup"
    BENCH = "bench"


_JSON_KINDS = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _malformed(op: str, what: str) -> RemoteError:
    return RemoteError(
        f"the agent's `{op}` reply {what}",
        fix="the host runs another agent version: re-run, ddtctl sends its own agent",
    )


def _field(data: Any, key: str, op: str) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise _malformed(op, f"lacks {key!r}")
    return data[key]


def _dict(data: Any, op: str) -> dict:
    if not isinstance(data, dict):
        raise RemoteError(f"the agent's `{op}` reply is not an object: {str(data)[:80]!r}")
    return data


def _checked(value: Any, kind: type, op: str, where: str, *, nullable: bool = False) -> Any:
    """`value` when it is a `kind` (or None, when `nullable`); `where` names it in the reply
    (`gpus[0].name`)."""
    if isinstance(value, kind) or (nullable and value is None):
        return value
    got = _JSON_KINDS.get(type(value), type(value).__name__)
    raise _malformed(op, f"has {where!r} as {got}, not {_JSON_KINDS[kind]}")


def _typed(
    data: dict, key: str, op: str, kind: type, *, at: str = "", required: bool = True, nullable: bool = False
) -> Any:
    """data[key], checked to be a `kind`. A key that is not `required` may be missing or None (None then);
    `at` is where `data` sits in the reply (`gpus[0].`)."""
    if required and key not in data:
        raise _malformed(op, f"lacks {at + key!r}")
    return _checked(data.get(key), kind, op, at + key, nullable=nullable or not required)


ReplyT = TypeVar("ReplyT")


@dataclass(frozen=True)
class Request(Generic[ReplyT]):
    """One agent operation. `params()` is what goes on the wire (None-valued fields are left out: the agent
    applies its own default); `parse()` turns the agent's result into the reply type."""

    OP: ClassVar[Op]
    REPLY: ClassVar[Any]  # the reply dataclass: its from_json parses the agent's result

    def params(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def parse(self, result: Any) -> ReplyT:
        return self.REPLY.from_json(result)

    def stdin(self) -> bytes | None:
        """What the operation reads on its stdin: what must stay off the host's command line (`ps` shows it,
        logs keep it), e.g. a secret; None: nothing."""
        return None


@dataclass(frozen=True)
class Batch(Request[list]):
    """Several operations in one round trip; the agent stops at the first failure. The reply is each
    operation's reply, parsed by its own request."""

    OP = Op.BATCH
    ops: tuple[Request, ...]

    def params(self) -> dict[str, Any]:
        return {"ops": [[r.OP.value, r.params()] for r in self.ops]}

    def parse(self, result: Any) -> list:
        if not isinstance(result, list) or len(result) != len(self.ops):
            raise RemoteError(
                f"the agent's `batch` reply has {len(result) if isinstance(result, list) else 'no'} "
                f"results for {len(self.ops)} operations"
            )
        return [r.parse(x) for r, x in zip(self.ops, result, strict=True)]
