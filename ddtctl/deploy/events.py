"""What a deploy reports as it goes: stage events (Stage, Level) and the run's final Status, as str-valued
enums so the JSON report and the text output carry the same strings as before (`"facts"`, `"rolled_back"`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable

from ddtctl.argv import mask_text


class Stage(StrEnum):
    """Where an event comes from, in the order a deploy reaches them (log: a server log line; ssh: the
    transport)."""

    SSH = "ssh"
    FACTS = "facts"
    PREFLIGHT = "preflight"
    LOCK = "lock"
    PLAN = "plan"
    SHIP = "ship"
    DRY_RUN = "dry-run"
    WARMUP = "warmup"
    INSTALL = "install"
    LAUNCH = "launch"
    HEALTH = "health"
    LOG = "log"
    RECORD = "record"
    ROLLBACK = "rollback"


class Level(StrEnum):
    INFO = "info"
    OK = "ok"
    WARN = "warn"
    ERROR = "error"
    LOG = "log"  # a line of the server's own output


class Status(StrEnum):
    """How a deploy ended. The first five leave the host as intended (exit 0)."""

    PLANNED = "planned"  # --plan: stopped after the plan, nothing changed
    CHECKED = "checked"  # --stage: shipped and checked on the host, nothing installed or restarted
    UNCHANGED = "unchanged"  # the same release already serves
    DEPLOYED = "deployed"
    ABORTED = "aborted"  # the plan was not confirmed
    REJECTED = "rejected"  # preflight, SGLang's resolver on the host or the kernel warm-up said no
    ROLLED_BACK = "rolled_back"  # the new release failed its health check; the previous one serves again
    FAILED = "failed"

    @property
    def ok(self) -> bool:
        return self in (Status.PLANNED, Status.CHECKED, Status.UNCHANGED, Status.DEPLOYED, Status.ABORTED)


@dataclass
class Event:
    stage: Stage
    message: str
    host: str | None = None
    level: Level = Level.INFO
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        return {
            "stage": str(self.stage),
            "message": self.message,
            "host": self.host,
            "level": str(self.level),
            "time": self.time,
        }


class EventLog:
    """Emits events (to a callback, and into `items`), with every known secret masked in their text."""

    def __init__(self, callback: Callable[[Event], None] | None, secrets: set[str] | None = None):
        self.callback = callback
        self.items: list[Event] = []
        self.secrets: set[str] = set(secrets or ())  # values never shown (server log lines included)

    def mask(self, text: str) -> str:
        return mask_text(text, self.secrets)

    def __call__(
        self, stage: Stage, message: str, host: str | None = None, level: Level = Level.INFO
    ) -> None:
        ev = Event(Stage(stage), self.mask(message), host, Level(level))
        self.items.append(ev)
        if self.callback:
            self.callback(ev)
