"""The schedule run audit: per schedule its state, per occurrence what became of it.

Items are keyed by ``id``:

- ``<schedule>``: the schedule's state. ``last_scheduled`` is the newest occurrence a run has
  claimed, ``last_status`` that occurrence's status, ``last_success`` the newest occurrence that
  succeeded, ``next_expected`` the occurrence after ``last_scheduled``. It never expires.
- ``<schedule>@<scheduled time>`` (plus ``#<shard>`` on a sharded schedule, like the job's id
  without its ``schedule:`` prefix): one occurrence, with its ``status``, a ``reason`` code, the
  ``attempts`` that ended it, its ``job_id`` and times. It expires after ``RETENTION``.

What is done with them around a job is conveyor.worker.missed_runs's. docs/schedules.md ("Run audit") is the contract.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from aws_lambda_powertools import Logger

from conveyor.contract.schedule_inputs import ORIGIN_PREFIX, Occurrence
from conveyor.contract.schedules import Schedule
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.timestamps import parse_utc, utc_text

logger = Logger(service=SERVICE_NAME)

KEY = "id"
EXPIRES_AT = "expires_at"
RETENTION = timedelta(days=90)
# An occurrence item's attributes.
SCHEDULE = "schedule"
SCHEDULED_AT = "scheduled_time"
SHARD = "shard"
STATUS = "status"
REASON = "reason"
ATTEMPTS = "attempts"
JOB_ID = "job_id"
CLAIMED_AT = "claimed_at"
RECORDED_AT = "recorded_at"
# The state item's attributes.
LAST_SCHEDULED = "last_scheduled"
LAST_SUCCESS = "last_success"
LAST_STATUS = "last_status"
NEXT_EXPECTED = "next_expected"

# The reason on an occurrence a catch-up run enqueued; the others are MissedReason's and the dead-letter Reasons.
CAUGHT_UP = "caught_up"

_PLACEHOLDER = re.compile(r"#(\w+)")
AttributeValue = dict[str, str]


class RunStatus(StrEnum):
    PENDING = "pending"  # enqueued by a catch-up; no worker has claimed it yet
    RUNNING = "running"  # claimed; it ends succeeded, or failed once dead-lettered
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DISCARDED = "discarded"  # its handler discarded it on purpose: the reason is the handler's text, masked
    MISSED = "missed"  # never ran: the reason says which policy decided so


@dataclass(frozen=True)
class RunRecord:
    """One occurrence item, read back."""

    occurrence: Occurrence
    status: RunStatus
    reason: str | None
    attempts: int | None
    job_id: str | None


@dataclass(frozen=True)
class ScheduleState:
    """A schedule's state item, read back."""

    last_scheduled: datetime | None
    last_success: datetime | None
    last_status: RunStatus | None
    next_expected: datetime | None


def occurrence_key(occurrence: Occurrence) -> str:
    """The occurrence's item key: its job id without the ``schedule:`` prefix."""
    shard = "" if occurrence.shard is None else f"#{occurrence.shard}"
    return f"{occurrence.schedule}@{utc_seconds(occurrence.scheduled_time)}{shard}"


def occurrence_job_id(occurrence: Occurrence) -> str:
    return ORIGIN_PREFIX + occurrence_key(occurrence)


def shards_of(schedule: Schedule) -> list[int | None]:
    """The shard of each job an occurrence enqueues: None for an unsharded schedule, whose ids carry none."""
    return list(range(schedule.shards)) if schedule.shards > 1 else [None]


def utc_seconds(moment: datetime) -> str:
    """Scheduler's own format: whole seconds, UTC, so that text order is time order."""
    return utc_text(moment, timespec="seconds")


def _s(text: str) -> AttributeValue:
    return {"S": text}


def _n(number: int) -> AttributeValue:
    return {"N": str(number)}


class ScheduleRuns:
    """The run audit table. Every write is conditional where order matters, so it can be repeated."""

    def __init__(self, dynamodb_client: Any, table_name: str, *, clock: Callable[[], datetime]) -> None:
        self._dynamodb = dynamodb_client
        self._table = table_name
        self._clock = clock

    # --- occurrences -----------------------------------------------------------------------

    def claim(self, occurrence: Occurrence, *, job_id: str, caught_up: bool) -> bool:
        """Mark the occurrence running; True only on its first attempt (no run had claimed it yet).

        A pending catch-up keeps its ``caught_up`` reason; an occurrence recorded missed that
        arrives after all (a late Scheduler retry) runs, and loses its missed reason.
        """
        now = self._clock()
        fields = {**self._stamp(occurrence, now), STATUS: _s(RunStatus.RUNNING), CLAIMED_AT: _s(now.isoformat())}
        fields[JOB_ID] = _s(job_id)
        if caught_up:
            fields[REASON] = _s(CAUGHT_UP)
        return self._update(
            occurrence_key(occurrence),
            fields,
            remove=() if caught_up else (REASON,),
            condition=f"attribute_not_exists(#{CLAIMED_AT})",
        )

    def known(self, occurrence: Occurrence) -> bool:
        """Whether the audit has a row for the occurrence: it ran, runs, was caught up or recorded missed."""
        item = self._dynamodb.get_item(
            TableName=self._table, Key={KEY: _s(occurrence_key(occurrence))}, ConsistentRead=True
        ).get("Item")
        return item is not None

    def record_pending(self, occurrence: Occurrence) -> bool:
        """A catch-up run was enqueued; written only if nothing is known of the occurrence yet."""
        fields = {STATUS: _s(RunStatus.PENDING), REASON: _s(CAUGHT_UP), JOB_ID: _s(occurrence_job_id(occurrence))}
        return self._create(occurrence, fields)

    def record_missed(self, occurrence: Occurrence, reason: str) -> bool:
        """The occurrence will not run; written only if nothing is known of it yet (it may have run late)."""
        return self._create(occurrence, {STATUS: _s(RunStatus.MISSED), REASON: _s(reason)})

    def record_succeeded(self, occurrence: Occurrence, *, job_id: str, attempts: int) -> bool:
        """True if this call recorded the success; False if it was recorded before (a duplicate)."""
        return self._finish(occurrence, RunStatus.SUCCEEDED, job_id=job_id, attempts=attempts)

    def record_failed(self, occurrence: Occurrence, *, job_id: str, attempts: int, reason: str) -> bool:
        """The run was dead-lettered with ``reason``: recorded for an occurrence nobody accounted for yet,
        or one a run claimed. A stale copy dead-lettered for its age leaves a queued catch-up (pending),
        a recorded miss and a success alone."""
        return self._finish(
            occurrence,
            RunStatus.FAILED,
            job_id=job_id,
            attempts=attempts,
            reason=reason,
            condition=f"attribute_not_exists(#{STATUS}) OR #{STATUS} = :running",
            condition_values={":running": _s(RunStatus.RUNNING)},
        )

    def record_discarded(self, occurrence: Occurrence, *, job_id: str, attempts: int, reason: str) -> bool:
        """The run's handler discarded it with ``reason``: recorded over a claimed (or waiting) run;
        False if recorded before (a duplicate) or the occurrence ended otherwise."""
        return self._finish(
            occurrence,
            RunStatus.DISCARDED,
            job_id=job_id,
            attempts=attempts,
            reason=reason,
            condition=f"attribute_not_exists(#{STATUS}) OR #{STATUS} IN (:running, :pending)",
            condition_values={":running": _s(RunStatus.RUNNING), ":pending": _s(RunStatus.PENDING)},
        )

    def runs(self, schedule: str) -> list[RunRecord]:
        """Every recorded occurrence of ``schedule``, oldest first (a scan: for reports and tests)."""
        pages = self._dynamodb.get_paginator("scan").paginate(
            TableName=self._table,
            FilterExpression="begins_with(#id, :prefix)",
            ExpressionAttributeNames={"#id": KEY},
            ExpressionAttributeValues={":prefix": _s(f"{schedule}@")},
            ConsistentRead=True,
        )
        records = [_record(item) for page in pages for item in page["Items"]]
        return sorted(records, key=lambda r: (r.occurrence.scheduled_time, r.occurrence.shard or 0))

    # --- the schedule's state ----------------------------------------------------------------

    def state(self, schedule: str) -> ScheduleState | None:
        item = self._dynamodb.get_item(TableName=self._table, Key={KEY: _s(schedule)}, ConsistentRead=True).get("Item")
        if item is None:
            return None

        def moment(name: str) -> datetime | None:
            return parse_utc(item[name]["S"]) if name in item else None

        return ScheduleState(
            last_scheduled=moment(LAST_SCHEDULED),
            last_success=moment(LAST_SUCCESS),
            last_status=RunStatus(item[LAST_STATUS]["S"]) if LAST_STATUS in item else None,
            next_expected=moment(NEXT_EXPECTED),
        )

    def advance(self, schedule: str, scheduled_time: datetime, next_expected: datetime | None) -> bool:
        """Make ``scheduled_time`` the newest claimed occurrence; False if a newer one already is."""
        fields = {LAST_SCHEDULED: _s(utc_seconds(scheduled_time)), LAST_STATUS: _s(RunStatus.RUNNING)}
        if next_expected is not None:
            fields[NEXT_EXPECTED] = _s(utc_seconds(next_expected))
        return self._update(
            schedule,
            fields,
            remove=(NEXT_EXPECTED,) if next_expected is None else (),
            condition=f"attribute_not_exists(#{LAST_SCHEDULED}) OR #{LAST_SCHEDULED} < :{LAST_SCHEDULED}",
        )

    def record_outcome(self, schedule: str, scheduled_time: datetime, status: RunStatus) -> None:
        """Set ``last_status`` if the occurrence is the newest; move ``last_success`` forward on a success."""
        at = {":at": _s(utc_seconds(scheduled_time))}
        newest = f"#{LAST_SCHEDULED} = :at"
        if status is not RunStatus.SUCCEEDED:
            self._update(schedule, {LAST_STATUS: _s(status)}, condition=newest, condition_values=at)
            return
        success = {LAST_SUCCESS: at[":at"]}
        later = f"(attribute_not_exists(#{LAST_SUCCESS}) OR #{LAST_SUCCESS} < :{LAST_SUCCESS})"
        if not self._update(
            schedule, {**success, LAST_STATUS: _s(status)}, condition=f"{newest} AND {later}", condition_values=at
        ):
            # A catch-up (older than the newest occurrence) succeeded: only last_success may move.
            self._update(schedule, success, condition=later)

    # --- writes ----------------------------------------------------------------------------

    def _stamp(self, occurrence: Occurrence, now: datetime) -> dict[str, AttributeValue]:
        """What every write to an occurrence item sets: which occurrence it is, when, and its expiry."""
        fields = {
            SCHEDULE: _s(occurrence.schedule),
            SCHEDULED_AT: _s(utc_seconds(occurrence.scheduled_time)),
            RECORDED_AT: _s(now.isoformat()),
            EXPIRES_AT: _n(int((now + RETENTION).timestamp())),
        }
        if occurrence.shard is not None:
            fields[SHARD] = _n(occurrence.shard)
        return fields

    def _create(self, occurrence: Occurrence, fields: Mapping[str, AttributeValue]) -> bool:
        stamped = {**self._stamp(occurrence, self._clock()), **fields}
        return self._update(occurrence_key(occurrence), stamped, condition=f"attribute_not_exists(#{KEY})")

    def _finish(
        self,
        occurrence: Occurrence,
        status: RunStatus,
        *,
        job_id: str,
        attempts: int,
        reason: str | None = None,
        condition: str = f"attribute_not_exists(#{STATUS}) OR #{STATUS} <> :succeeded",
        condition_values: Mapping[str, AttributeValue] | None = None,
    ) -> bool:
        """Write the run's end; by default over anything but a success recorded before."""
        fields = {**self._stamp(occurrence, self._clock()), STATUS: _s(status), JOB_ID: _s(job_id)}
        fields[ATTEMPTS] = _n(attempts)
        if reason is not None:
            fields[REASON] = _s(reason)
        return self._update(
            occurrence_key(occurrence),
            fields,
            condition=condition,
            condition_values=condition_values or {":succeeded": _s(RunStatus.SUCCEEDED)},
        )

    def _update(
        self,
        key: str,
        fields: Mapping[str, AttributeValue],
        *,
        remove: Sequence[str] = (),
        condition: str,
        condition_values: Mapping[str, AttributeValue] | None = None,
    ) -> bool:
        """SET ``fields`` (each as ``#name = :name``) and REMOVE ``remove`` if ``condition`` holds; False if not."""
        expression = "SET " + ", ".join(f"#{name} = :{name}" for name in fields)
        if remove:
            expression += " REMOVE " + ", ".join(f"#{name}" for name in remove)
        names = {f"#{name}": name for name in _PLACEHOLDER.findall(f"{expression} {condition}")}
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key={KEY: _s(key)},
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={f":{name}": value for name, value in fields.items()}
                | dict(condition_values or {}),
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            return False
        return True


def _record(item: Mapping[str, AttributeValue]) -> RunRecord:
    shard = int(item[SHARD]["N"]) if SHARD in item else None
    return RunRecord(
        occurrence=Occurrence(item[SCHEDULE]["S"], parse_utc(item[SCHEDULED_AT]["S"]), shard),
        status=RunStatus(item[STATUS]["S"]),
        reason=item[REASON]["S"] if REASON in item else None,
        attempts=int(item[ATTEMPTS]["N"]) if ATTEMPTS in item else None,
        job_id=item[JOB_ID]["S"] if JOB_ID in item else None,
    )
