"""Pause, resume and size a queue's consumption: its event source mapping's state.

In AWS that state is the Lambda event source mapping itself, and a timed pause leaves an
EventBridge Scheduler one-time schedule that re-enables it. The local runtime has no
Lambda mappings (one created in moto consumes the messages itself), so its pollers read
the same state from an item per queue in the embedded DynamoDB (all queues' in one request,
every few seconds), and a due resume is applied by whoever reads the state next. Either way the
resume writes an audit row as ``conveyor:timed-resume`` (conveyor.worker.timed_resume), once.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from conveyor.contract import limits
from conveyor.contract.errors import ConveyorError
from conveyor.contract.topology import Topology
from conveyor.worker.audit import AuditWriter
from conveyor.worker.scale_on_age import PAUSED_STATES
from conveyor.worker.timed_resume import ACTION as RESUME_ACTION
from conveyor.worker.timed_resume import ACTOR as RESUME_ACTOR
from conveyor.worker.timed_resume import TimedResume, ended_pause

LOCAL_EVENT_SOURCES_KEY = "queue"
RESUME_RETRY_ATTEMPTS = 10
RESUME_RETRY_WINDOW = timedelta(hours=1)
# BatchGetItem returns keys it could not read (when throttled) as UnprocessedKeys; AWS advises
# asking for them again with exponential backoff:
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
UNPROCESSED_ATTEMPTS = 5
UNPROCESSED_BACKOFF_S = 0.05
# The local mapping's update that resumes it, by hand or when a timed pause is due.
_RESUME_UPDATE = "SET enabled = :on REMOVE resume_at"
_RESUME_VALUES = {":on": {"BOOL": True}}


class EventSourceNotFoundError(ConveyorError, LookupError):
    """The queue has no event source (mapping) where one was expected."""


class EventSourceReadError(ConveyorError):
    """The event sources could not be read: DynamoDB kept leaving some unprocessed (throttling)."""


@dataclass(frozen=True)
class EventSourceState:
    enabled: bool
    max_concurrency: int | None
    resume_at: datetime | None = None


class EventSources(Protocol):
    def state(self, queue: str) -> EventSourceState: ...

    def pause(self, queue: str, *, resume_at: datetime | None, reason: str | None = None) -> None: ...

    def resume(self, queue: str) -> None: ...

    def set_max_concurrency(self, queue: str, value: int) -> None: ...


def check_max_concurrency(value: int) -> int:
    if not limits.ESM_MIN_MAX_CONCURRENCY <= value <= limits.ESM_MAX_MAX_CONCURRENCY:
        raise ValueError(
            f"concurrency {value}: must be between {limits.ESM_MIN_MAX_CONCURRENCY} "
            f"and {limits.ESM_MAX_MAX_CONCURRENCY} (Lambda's MaximumConcurrency range)"
        )
    return value


def _timestamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def _audit_time(value: datetime) -> str:
    """As `conveyor pause` writes ``resume_at`` in its row, so the resume's row names the same pause."""
    return value.astimezone(UTC).isoformat(timespec="seconds")


class LocalEventSources:
    """The local runtime's mappings: one item per queue in ``table_name``.

    With ``audit_table``, a due timed resume is recorded there by the reader whose conditional update applied
    it: readers racing on one due resume all try the update, one wins, only the winner writes the row.
    """

    def __init__(
        self,
        dynamodb: Any,
        table_name: str,
        *,
        clock: Callable[[], datetime] | None = None,
        audit_table: str | None = None,
    ) -> None:
        self._dynamodb = dynamodb
        self._table = table_name
        self._clock = clock or (lambda: datetime.now(UTC))
        self._audit = AuditWriter(dynamodb, audit_table, actor=RESUME_ACTOR, clock=self._clock) if audit_table else None

    def seed(self, topology: Topology) -> None:
        """Give each declared queue an enabled mapping with its declared concurrency, unless it has one."""
        for queue in topology.queues:
            try:
                self._dynamodb.put_item(
                    TableName=self._table,
                    Item={
                        LOCAL_EVENT_SOURCES_KEY: {"S": queue.name},
                        "enabled": {"BOOL": True},
                        "max_concurrency": {"N": str(queue.max_concurrency)},
                    },
                    ConditionExpression="attribute_not_exists(#key)",
                    ExpressionAttributeNames={"#key": LOCAL_EVENT_SOURCES_KEY},
                )
            except self._dynamodb.exceptions.ConditionalCheckFailedException:
                continue

    def state(self, queue: str) -> EventSourceState:
        item = self._dynamodb.get_item(
            TableName=self._table, Key={LOCAL_EVENT_SOURCES_KEY: {"S": queue}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            raise self._not_found([queue])
        return self._state(queue, item)

    def states(self, queues: Sequence[str]) -> dict[str, EventSourceState]:
        """The state of each of ``queues``, read in one BatchGetItem (per 100 queues): what the local runtime
        reads every few seconds, at one request for all its queues."""
        items: dict[str, dict[str, Any]] = {}
        for start in range(0, len(queues), limits.DYNAMODB_MAX_BATCH_GET_KEYS):
            keys = [
                {LOCAL_EVENT_SOURCES_KEY: {"S": queue}}
                for queue in queues[start : start + limits.DYNAMODB_MAX_BATCH_GET_KEYS]
            ]
            request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
            for attempt in range(UNPROCESSED_ATTEMPTS):
                if attempt:
                    time.sleep(UNPROCESSED_BACKOFF_S * 2 ** (attempt - 1))
                response = self._dynamodb.batch_get_item(RequestItems=request)
                items |= {
                    item[LOCAL_EVENT_SOURCES_KEY]["S"]: item for item in response["Responses"].get(self._table, [])
                }
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
            else:
                raise EventSourceReadError(
                    f"{self._table}: keys still unprocessed after {UNPROCESSED_ATTEMPTS} attempts"
                )
        missing = [queue for queue in queues if queue not in items]
        if missing:
            raise self._not_found(missing)
        return {queue: self._state(queue, items[queue]) for queue in queues}

    def _state(self, queue: str, item: dict[str, Any]) -> EventSourceState:
        """The state an item holds, after firing its timed resume if that is due."""
        resume_at = _parse_timestamp(item["resume_at"]["S"]) if "resume_at" in item else None
        enabled = bool(item["enabled"]["BOOL"])
        if not enabled and resume_at is not None and resume_at <= self._clock():
            # The one-time schedule's moment has come: fire it, unless the pause changed meanwhile.
            try:
                self._update(
                    queue, _RESUME_UPDATE, {**_RESUME_VALUES, ":at": item["resume_at"]}, condition="resume_at = :at"
                )
            except self._dynamodb.exceptions.ConditionalCheckFailedException:
                return self.state(queue)
            if self._audit is not None:
                self._audit.record(
                    RESUME_ACTION,
                    queue=queue,
                    details=ended_pause(
                        resume_at=_audit_time(resume_at),
                        reason=item.get("pause_reason", {}).get("S"),
                        paused_at=item.get("paused_at", {}).get("S"),
                    ),
                )
            enabled, resume_at = True, None
        return EventSourceState(enabled=enabled, max_concurrency=int(item["max_concurrency"]["N"]), resume_at=resume_at)

    def pause(self, queue: str, *, resume_at: datetime | None, reason: str | None = None) -> None:
        """A timed pause keeps its reason and time for the audit row of the resume that ends it."""
        values: dict[str, Any] = {":off": {"BOOL": False}}
        if resume_at is None:
            expression = "SET enabled = :off REMOVE resume_at, pause_reason, paused_at"
        else:
            expression = "SET enabled = :off, resume_at = :at, paused_at = :now"
            values[":at"] = {"S": _timestamp(resume_at)}
            values[":now"] = {"S": _audit_time(self._clock())}
            if reason is None:
                expression += " REMOVE pause_reason"
            else:
                expression += ", pause_reason = :why"
                values[":why"] = {"S": reason}
        self._update(queue, expression, values)

    def resume(self, queue: str) -> None:
        self._update(queue, _RESUME_UPDATE, _RESUME_VALUES)

    def set_max_concurrency(self, queue: str, value: int) -> None:
        self._update(queue, "SET max_concurrency = :n", {":n": {"N": str(check_max_concurrency(value))}})

    def _update(self, queue: str, expression: str, values: dict[str, Any], *, condition: str = "") -> None:
        """Update the queue's mapping if it exists (else EventSourceNotFoundError) and ``condition`` holds (else
        ConditionalCheckFailedException)."""
        exists = "attribute_exists(#key)"
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key={LOCAL_EVENT_SOURCES_KEY: {"S": queue}},
                UpdateExpression=expression,
                ExpressionAttributeValues=values,
                ConditionExpression=f"{exists} AND {condition}" if condition else exists,
                ExpressionAttributeNames={"#key": LOCAL_EVENT_SOURCES_KEY},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException as error:
            if "Item" not in error.response:  # no old item: the queue has no mapping
                raise self._not_found([queue]) from error
            raise

    def _not_found(self, queues: Sequence[str]) -> EventSourceNotFoundError:
        names = ", ".join(repr(queue) for queue in queues)
        return EventSourceNotFoundError(
            f"queue {names} has no event source in {self._table}"
            if len(queues) == 1
            else f"queues {names} have no event source in {self._table}"
        )


@dataclass(frozen=True)
class ResumeSchedules:
    """Where a timed pause leaves its one-time schedule, the role it assumes, and the function it invokes
    (conveyor.worker.timed_resume: enables the mapping and audits the resume)."""

    group: str
    role_arn: str
    prefix: str
    function_arn: str

    def name(self, queue: str) -> str:
        return f"{self.prefix}-resume-{queue}"


class LambdaEventSources:
    """The deployed mappings, by queue name, as the stack's outputs list them."""

    def __init__(self, lambda_client: Any, scheduler: Any, *, mappings: dict[str, str], schedules: ResumeSchedules):
        self._lambda = lambda_client
        self._scheduler = scheduler
        self._mappings = mappings
        self._schedules = schedules

    def state(self, queue: str) -> EventSourceState:
        mapping = self._lambda.get_event_source_mapping(UUID=self._uuid(queue))
        scaling = mapping.get("ScalingConfig") or {}
        return EventSourceState(
            enabled=mapping["State"] not in PAUSED_STATES,
            max_concurrency=scaling.get("MaximumConcurrency"),
            resume_at=self._resume_at(queue),
        )

    def pause(self, queue: str, *, resume_at: datetime | None, reason: str | None = None) -> None:
        """The resume schedule is in place before the mapping stops: a failure cannot leave a timed pause endless."""
        self._delete_schedule(queue)
        if resume_at is not None:
            self._scheduler.create_schedule(
                Name=self._schedules.name(queue),
                GroupName=self._schedules.group,
                ScheduleExpression=f"at({_timestamp(resume_at)})",
                ScheduleExpressionTimezone="UTC",
                FlexibleTimeWindow={"Mode": "OFF"},
                ActionAfterCompletion="DELETE",
                Description=f"conveyor: resume queue {queue} after a timed pause",
                Target={
                    "Arn": self._schedules.function_arn,
                    "RoleArn": self._schedules.role_arn,
                    "Input": TimedResume(
                        queue=queue,
                        uuid=self._uuid(queue),
                        resume_at=_audit_time(resume_at),
                        reason=reason,
                        paused_at=_audit_time(datetime.now(UTC)),
                    ).to_input(),
                    # Bounded: Scheduler retries for 24 h by default; `conveyor status` shows a resume that never came.
                    "RetryPolicy": {
                        "MaximumRetryAttempts": RESUME_RETRY_ATTEMPTS,
                        "MaximumEventAgeInSeconds": int(RESUME_RETRY_WINDOW.total_seconds()),
                    },
                },
            )
        self._lambda.update_event_source_mapping(UUID=self._uuid(queue), Enabled=False)

    def resume(self, queue: str) -> None:
        self._lambda.update_event_source_mapping(UUID=self._uuid(queue), Enabled=True)
        self._delete_schedule(queue)

    def set_max_concurrency(self, queue: str, value: int) -> None:
        self._lambda.update_event_source_mapping(
            UUID=self._uuid(queue), ScalingConfig={"MaximumConcurrency": check_max_concurrency(value)}
        )

    def _uuid(self, queue: str) -> str:
        try:
            return self._mappings[queue]
        except KeyError:
            raise EventSourceNotFoundError(
                f"queue {queue!r} has no event source mapping in the stack's outputs"
            ) from None

    def _resume_at(self, queue: str) -> datetime | None:
        try:
            schedule = self._scheduler.get_schedule(Name=self._schedules.name(queue), GroupName=self._schedules.group)
        except self._scheduler.exceptions.ResourceNotFoundException:
            return None
        return _parse_timestamp(str(schedule["ScheduleExpression"])[len("at(") : -1])

    def _delete_schedule(self, queue: str) -> None:
        try:
            self._scheduler.delete_schedule(Name=self._schedules.name(queue), GroupName=self._schedules.group)
        except self._scheduler.exceptions.ResourceNotFoundException:
            return
