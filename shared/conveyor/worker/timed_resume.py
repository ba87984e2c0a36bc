"""The end of a timed pause: the queue's mapping enabled again, and an audit row that says so.

`conveyor pause --for` leaves a one-time EventBridge Scheduler schedule. Its target is this small
function rather than a universal target calling UpdateEventSourceMapping directly: a universal
target makes one API call and nothing else, so the resume would happen with no audit row, and
`conveyor audit` would show a pause that never ended. The row is written after the mapping is
enabled, so a failed update (retried by Scheduler's bounded policy) records nothing. Locally the
same row is written by whoever wins the conditional update that applies a due resume
(conveyor.ops.event_sources.LocalEventSources).
"""

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.contract.settings import AUDIT_TABLE_ENV, SERVICE_NAME
from conveyor.worker.audit import AuditWriter

ACTOR = "conveyor:timed-resume"
REQUIRED = ("queue", "uuid", "resume_at")
ACTION = "resume"

logger = Logger(service=SERVICE_NAME)


def ended_pause(*, resume_at: str, reason: str | None, paused_at: str | None) -> dict[str, Any]:
    """The resume row's details: the pause it ends, by the ``resume_at`` its own row holds, its reason and time."""
    return {"ends_pause": {"resume_at": resume_at, "reason": reason, "paused_at": paused_at}}


@dataclass(frozen=True)
class TimedResume:
    """What a timed pause's schedule hands its target: which mapping to enable, and which pause that ends."""

    queue: str
    uuid: str
    resume_at: str
    reason: str | None = None
    paused_at: str | None = None

    def to_input(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> "TimedResume":
        """The schedule's input; anything else is refused, naming what is wrong."""
        missing = [name for name in REQUIRED if not isinstance(event.get(name), str)]
        if missing:
            raise ValueError(f"timed resume input: {', '.join(missing)} missing or not a string")
        return cls(
            queue=event["queue"],
            uuid=event["uuid"],
            resume_at=event["resume_at"],
            reason=event.get("reason"),
            paused_at=event.get("paused_at"),
        )

    def details(self) -> dict[str, Any]:
        return ended_pause(resume_at=self.resume_at, reason=self.reason, paused_at=self.paused_at)


class TimedResumer:
    """Enables the mapping, then records the resume; an error leaves the row unwritten, and Scheduler retries."""

    def __init__(self, lambda_client: Any, audit: AuditWriter) -> None:
        self._lambda = lambda_client
        self._audit = audit

    def __call__(self, request: TimedResume) -> None:
        self._lambda.update_event_source_mapping(UUID=request.uuid, Enabled=True)
        entry = self._audit.record(ACTION, queue=request.queue, details=request.details())
        logger.info("timed pause ended", extra={"queue": request.queue, "audit_id": entry.id})


def make_timed_resume_handler() -> Callable[[dict[str, Any], LambdaContext], None]:
    """The Lambda entry point; clients and the table name are read on the first call, inside Lambda."""
    resumer: TimedResumer | None = None

    @logger.inject_lambda_context(clear_state=True)
    def handler(event: dict[str, Any], context: LambdaContext) -> None:
        nonlocal resumer
        if resumer is None:
            audit = AuditWriter(boto3.client("dynamodb"), os.environ[AUDIT_TABLE_ENV], actor=ACTOR)
            resumer = TimedResumer(boto3.client("lambda"), audit)
        resumer(TimedResume.of(event))

    return handler
