"""The schedule run audit: per schedule its state, per occurrence what became of it.

Items are keyed by ``id``:

- ``<schedule>``: the schedule's state. ``last_scheduled`` is the newest occurrence a run has
  claimed, ``last_status`` that occurrence's status, ``last_success`` the newest occurrence that
  succeeded, ``next_expected`` the occurrence after ``last_scheduled``. It never expires.
- ``<schedule>@<scheduled time>`` (plus ``#<shard>`` on a sharded schedule, like the job's id
  without its ``schedule:`` prefix): one occurrence, with its ``status``, a ``reason`` code, the
  ``attempts`` that ended it, its ``job_id`` and times. It expires after ``RETENTION``.

``ScheduledRuns`` is what the harness calls around a scheduled job. Before the handler, the
first attempt of an occurrence claims its item (a conditional write, so retries and duplicate
deliveries never apply the policy twice) and, if the occurrence is newer than ``last_scheduled``,
applies the schedule's missed-run policy to the occurrences in between, then advances
``last_scheduled`` (a conditional write that only moves it forward). After the handler it records
``succeeded`` (and writes the dead man's switch metric) or, when the job is dead-lettered,
``failed`` with the dead-letter reason. docs/schedules.md ("Run audit") is the contract.
"""

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from conveyor import limits
from conveyor.declarations import Topology
from conveyor.envelope import Envelope
from conveyor.errors import ConveyorError
from conveyor.metrics import SCHEDULE_DIMENSION, SCHEDULE_SUCCEEDED, metric_set
from conveyor.schedules import (
    ORIGIN_PREFIX,
    MissedRunPlan,
    Occurrence,
    Schedule,
    apply_missed_policy,
    missed_occurrences,
    next_occurrence,
    parse_occurrence_id,
    render_catch_up,
    schedule_input,
)
from conveyor.settings import SERVICE_NAME
from conveyor.timestamps import parse_utc, utc_text

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
# Missed occurrences are recorded one conditional write each, before the handler of the run
# that found them: bound that work, so the first run after a long outage of a frequent schedule
# does not spend its invocation on the audit. Older ones are only logged.
MAX_MISSED_ROWS = 100

_PLACEHOLDER = re.compile(r"#(\w+)")
AttributeValue = dict[str, str]


class RunStatus(StrEnum):
    PENDING = "pending"  # enqueued by a catch-up; no worker has claimed it yet
    RUNNING = "running"  # claimed; it ends succeeded, or failed once dead-lettered
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    MISSED = "missed"  # never ran: the reason says which policy decided so


class CatchUpError(ConveyorError):
    """SQS rejected some catch-up runs; the job is retried and the next occurrence enqueues them again."""


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
    return f"{occurrence.schedule}@{_time(occurrence.scheduled_time)}{shard}"


def occurrence_job_id(occurrence: Occurrence) -> str:
    return ORIGIN_PREFIX + occurrence_key(occurrence)


def shards_of(schedule: Schedule) -> list[int | None]:
    """The shard of each job an occurrence enqueues: None for an unsharded schedule, whose ids carry none."""
    return list(range(schedule.shards)) if schedule.shards > 1 else [None]


def _time(moment: datetime) -> str:
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
        fields = {LAST_SCHEDULED: _s(_time(scheduled_time)), LAST_STATUS: _s(RunStatus.RUNNING)}
        if next_expected is not None:
            fields[NEXT_EXPECTED] = _s(_time(next_expected))
        return self._update(
            schedule,
            fields,
            remove=(NEXT_EXPECTED,) if next_expected is None else (),
            condition=f"attribute_not_exists(#{LAST_SCHEDULED}) OR #{LAST_SCHEDULED} < :{LAST_SCHEDULED}",
        )

    def record_outcome(self, schedule: str, scheduled_time: datetime, status: RunStatus) -> None:
        """Set ``last_status`` if the occurrence is the newest; move ``last_success`` forward on a success."""
        at = {":at": _s(_time(scheduled_time))}
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
            SCHEDULED_AT: _s(_time(occurrence.scheduled_time)),
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


def emit_schedule_succeeded(schedule: str) -> None:
    """The dead man's switch's metric: 1 per occurrence (and shard) that succeeded, dimension ``schedule``.

    Written as its own EMF document right away rather than buffered with the job metrics: a
    scheduled run is rare, and the alarm reads this dimension set alone.
    """
    metrics = metric_set(((SCHEDULE_DIMENSION, schedule),))
    metrics.add_metric(name=SCHEDULE_SUCCEEDED, unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()


class ScheduledRuns:
    """What the harness does around a scheduled job: claim it, apply the missed-run policy, record how it ended."""

    def __init__(
        self,
        topology: Topology,
        *,
        dynamodb_client: Any,
        table_name: str,
        sqs_client: Any,
        queue_url: str,
        clock: Callable[[], datetime],
    ) -> None:
        self._schedules = {schedule.name: schedule for schedule in topology.schedules}
        self._templates = {
            (schedule.name, shard): schedule_input(schedule, topology.job_type(schedule.job), shard or 0)
            for schedule in topology.schedules
            for shard in shards_of(schedule)
        }
        self.runs = ScheduleRuns(dynamodb_client, table_name, clock=clock)
        self._sqs = sqs_client
        self._queue_url = queue_url
        self._clock = clock

    def occurrence(self, envelope: Envelope) -> Occurrence | None:
        """The occurrence a job runs, or None if no declared schedule enqueued it.

        A chunk of a continued job (``<id>#<n>``) is not one, though on an unsharded schedule its
        id reads like a shard's.
        """
        occurrence = parse_occurrence_id(envelope.id)
        schedule = self._schedules.get(occurrence.schedule) if occurrence else None
        if occurrence is None or schedule is None or schedule.job != envelope.type:
            return None
        return occurrence if occurrence.shard in shards_of(schedule) else None

    def begin(self, envelope: Envelope) -> None:
        """Before the handler: claim the occurrence and, on its first attempt, account for the ones missed before it."""
        occurrence = self.occurrence(envelope)
        if occurrence is None:
            return
        # Scheduler writes the scheduled time as created_at; a catch-up, the time it was enqueued.
        caught_up = envelope.created_at != occurrence.scheduled_time
        self.runs.claim(occurrence, job_id=envelope.id, caught_up=caught_up)
        if caught_up:
            return  # a catch-up may run before its enqueuer advanced the state: it accounts for nothing
        schedule = self._schedules[occurrence.schedule]
        moment = occurrence.scheduled_time
        state = self.runs.state(schedule.name)
        last = state.last_scheduled if state else None
        if last is not None and moment <= last:
            return  # a late delivery, or another shard of the newest: that run accounted for the gap
        # A retry (or a duplicate) of this run finds the state not yet advanced and applies the policy
        # again: occurrences already recorded are left out, and catch-up sends carry fixed ids.
        self._account_for_missed(schedule, last, moment, envelope)
        self.runs.advance(schedule.name, moment, next_occurrence(schedule, moment, anchor=moment))

    def succeeded(self, envelope: Envelope, attempt: int) -> None:
        """After a run (or a duplicate of one) succeeded: record it; the first record writes the metric."""
        occurrence = self.occurrence(envelope)
        if occurrence is None:
            return
        if self.runs.record_succeeded(occurrence, job_id=envelope.id, attempts=attempt):
            self.runs.record_outcome(occurrence.schedule, occurrence.scheduled_time, RunStatus.SUCCEEDED)
            emit_schedule_succeeded(occurrence.schedule)

    def failed(self, envelope: Envelope, reason: str, attempt: int) -> None:
        """After the job was dead-lettered. Best effort: the DLQ already holds the job and its reason."""
        occurrence = self.occurrence(envelope)
        if occurrence is None:
            return
        try:
            if self.runs.record_failed(occurrence, job_id=envelope.id, attempts=attempt, reason=reason):
                self.runs.record_outcome(occurrence.schedule, occurrence.scheduled_time, RunStatus.FAILED)
        except (BotoCoreError, ClientError):
            logger.warning("could not record a dead-lettered scheduled run in the run audit", exc_info=True)

    def _account_for_missed(
        self, schedule: Schedule, last: datetime | None, moment: datetime, envelope: Envelope
    ) -> None:
        missed = missed_occurrences(schedule, last, moment)
        if not missed:
            return
        shards = shards_of(schedule)
        plan = apply_missed_policy(schedule, missed)

        def unknown(moments: Sequence[datetime]) -> list[datetime]:
            # Planned over the whole gap, then narrowed: a retry finishes what an earlier attempt began,
            # and never catches up more than max_runs.
            return [t for t in moments if not self.runs.known(Occurrence(schedule.name, t, shards[0]))]

        plan = MissedRunPlan(to_enqueue=unknown(plan.to_enqueue), to_record_missed=unknown(plan.to_record_missed))
        # Catch-ups carry the ARN of the schedule whose run enqueued them: their actor.
        self._enqueue_catch_ups(schedule, plan.to_enqueue, envelope.correlation.actor or schedule.name)
        limit = max(1, MAX_MISSED_ROWS // len(shards))
        recorded, unrecorded = plan.to_record_missed[-limit:], plan.to_record_missed[:-limit]
        for missed_time in recorded:
            for shard in shards:
                self.runs.record_missed(Occurrence(schedule.name, missed_time, shard), schedule.missed.reason)
        log = {
            "schedule": schedule.name,
            "missed": len(missed),
            "caught_up": len(plan.to_enqueue),
            "recorded_missed": len(recorded),
            "reason": schedule.missed.reason.value,
        }
        if unrecorded:
            log |= {
                "unrecorded": len(unrecorded),
                "unrecorded_from": _time(unrecorded[0]),
                "unrecorded_until": _time(unrecorded[-1]),
            }
            logger.warning("missed occurrences beyond the audit's bound are not recorded one by one", extra=log)
        logger.info("missed occurrences accounted for", extra=log)

    def _enqueue_catch_ups(self, schedule: Schedule, moments: Iterable[datetime], actor: str) -> None:
        """Send the catch-up runs, then record them pending.

        In that order, a crash in between leaves a run without its row (its claim writes one),
        never a pending row without a run.
        """
        now = self._clock()
        runs = [
            (
                Occurrence(schedule.name, moment, shard),
                render_catch_up(self._templates[(schedule.name, shard)], moment, actor, now),
            )
            for moment in moments
            for shard in shards_of(schedule)
        ]
        for start in range(0, len(runs), limits.SQS_MAX_BATCH_ENTRIES):
            chunk = runs[start : start + limits.SQS_MAX_BATCH_ENTRIES]
            entries = [{"Id": str(index), "MessageBody": body} for index, (_, body) in enumerate(chunk)]
            failed = self._sqs.send_message_batch(QueueUrl=self._queue_url, Entries=entries).get("Failed", [])
            if failed:
                raise CatchUpError(
                    f"schedule {schedule.name!r}: {len(failed)} of {len(entries)} catch-up runs were not accepted: "
                    + "; ".join(f"{entry['Code']}: {entry.get('Message', '')}" for entry in failed[:3])
                )
        for occurrence, _ in runs:
            self.runs.record_pending(occurrence)
