"""The schedule run audit: per schedule its state, per occurrence what became of it.

Items are keyed by ``id``:

- ``<schedule>``: the schedule's state. ``last_scheduled`` is the newest occurrence a run has
  claimed, ``last_status`` that occurrence's status, ``last_success`` the newest occurrence that
  succeeded, ``next_expected`` the occurrence after ``last_scheduled``; ``paused_at`` (and
  ``pause_until``) while the schedule or its queue is paused, and ``pauses``, the latest pause
  windows, which ops writes and the missed-run accounting reads. It never expires.
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
from typing import Any, NamedTuple

from aws_lambda_powertools import Logger

from conveyor.contract.schedule_inputs import ORIGIN_PREFIX, Occurrence
from conveyor.contract.schedules import MissedReason, Schedule
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
# The chunk (job id) that carries an occurrence's run on, after it continued (ctx.continue_later).
CONTINUED_IN = "continued_in"
# The state item's attributes.
LAST_SCHEDULED = "last_scheduled"
LAST_SUCCESS = "last_success"
LAST_STATUS = "last_status"
NEXT_EXPECTED = "next_expected"
# Pause markers: an open pause's start (and planned end, for a timed one), and the closed windows.
PAUSED_AT = "paused_at"
PAUSE_UNTIL = "pause_until"
PAUSES = "pauses"
# Closed pause windows kept on the state item, newest last: enough for any gap a run will look into
# (a schedule paused and resumed more often than this between two runs is recorded by its latest pauses).
MAX_PAUSES = 20
_WINDOW_SEPARATOR = "/"

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


class PauseWindow(NamedTuple):
    """When a schedule, or its queue, was paused: ``end`` None while the pause is open and untimed."""

    start: datetime
    end: datetime | None

    def holds(self, moment: datetime) -> bool:
        return self.start <= moment and (self.end is None or moment < self.end)


@dataclass(frozen=True)
class ScheduleState:
    """A schedule's state item, read back."""

    last_scheduled: datetime | None
    last_success: datetime | None
    last_status: RunStatus | None
    next_expected: datetime | None
    pauses: tuple[PauseWindow, ...] = ()

    def paused_at(self, moment: datetime) -> bool:
        """Whether ``moment`` fell inside a recorded pause of the schedule or its queue."""
        return any(window.holds(moment) for window in self.pauses)

    def paused_between(self, since: datetime, until: datetime) -> bool:
        """Whether a recorded pause overlaps ``[since, until]``: a job enqueued at ``since`` may have waited it out."""
        return any(w.start <= until and (w.end is None or w.end > since) for w in self.pauses)


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

    def record_succeeded(self, occurrence: Occurrence, *, job_id: str, attempts: int, chunk: bool = False) -> bool:
        """True if this call recorded the success; False if it was recorded before (a duplicate), or if
        ``job_id`` is a run the occurrence has continued past: only its last chunk's success counts, and a
        ``chunk`` only if the occurrence's run continued in it."""
        carried = f"#{CONTINUED_IN} = :{JOB_ID}"
        if not chunk:
            carried = f"(attribute_not_exists(#{CONTINUED_IN}) OR {carried})"
        return self._finish(
            occurrence,
            RunStatus.SUCCEEDED,
            job_id=job_id,
            attempts=attempts,
            condition=f"(attribute_not_exists(#{STATUS}) OR #{STATUS} <> :succeeded) AND {carried}",
            condition_values={":succeeded": _s(RunStatus.SUCCEEDED)},
        )

    def record_continued(self, occurrence: Occurrence, *, job_id: str, next_job_id: str) -> bool:
        """The run (or chunk) ``job_id`` handed its work to the chunk ``next_job_id``: the occurrence stays running."""
        fields = {**self._stamp(occurrence, self._clock()), STATUS: _s(RunStatus.RUNNING)}
        fields[CONTINUED_IN] = _s(next_job_id)
        return self._update(
            occurrence_key(occurrence),
            fields,
            condition=f"#{STATUS} <> :succeeded AND (attribute_not_exists(#{CONTINUED_IN}) OR #{CONTINUED_IN} = :job)",
            condition_values={":succeeded": _s(RunStatus.SUCCEEDED), ":job": _s(job_id)},
        )

    def record_waiting(self, occurrence: Occurrence, reason: MissedReason) -> bool:
        """A claimed run is waiting (snoozed) for ``reason``: ``pending`` until it runs to an end."""
        return self._update(
            occurrence_key(occurrence),
            {**self._stamp(occurrence, self._clock()), STATUS: _s(RunStatus.PENDING), REASON: _s(reason)},
            condition=f"#{STATUS} IN (:running, :pending)",
            condition_values={":running": _s(RunStatus.RUNNING), ":pending": _s(RunStatus.PENDING)},
        )

    def record_failed(
        self, occurrence: Occurrence, *, job_id: str, attempts: int, reason: str, waiting_on: str | None = None
    ) -> bool:
        """The run was dead-lettered with ``reason``: recorded for an occurrence nobody accounted for yet,
        one a run claimed, or one waiting (``pending``) on the reason ``waiting_on``. A stale copy
        dead-lettered for its age leaves a queued catch-up (pending), a recorded miss and a success alone."""
        condition = f"attribute_not_exists(#{STATUS}) OR #{STATUS} = :running"
        values = {":running": _s(RunStatus.RUNNING)}
        if waiting_on is not None:
            condition = f"#{STATUS} = :pending AND #{REASON} = :waiting_on"
            values = {":pending": _s(RunStatus.PENDING), ":waiting_on": _s(waiting_on)}
        return self._finish(
            occurrence,
            RunStatus.FAILED,
            job_id=job_id,
            attempts=attempts,
            reason=reason,
            condition=condition,
            condition_values=values,
        )

    def record_ended(self, occurrence: Occurrence, *, job_id: str, attempts: int, reason: MissedReason) -> bool:
        """A run ended without running to completion and without failing (its lease lost, its queue paused past its
        deadline): ``missed`` with ``reason``, unless it was recorded succeeded or failed before."""
        return self._finish(
            occurrence,
            RunStatus.MISSED,
            job_id=job_id,
            attempts=attempts,
            reason=reason,
            condition=f"attribute_not_exists(#{STATUS}) OR #{STATUS} IN (:running, :pending, :missed)",
            condition_values={
                ":running": _s(RunStatus.RUNNING),
                ":pending": _s(RunStatus.PENDING),
                ":missed": _s(RunStatus.MISSED),
            },
        )

    def record_discarded(
        self, occurrence: Occurrence, *, job_id: str, attempts: int, reason: str, chunk: bool = False
    ) -> bool:
        """The run's handler discarded it with ``reason``: recorded over a claimed (or waiting) run, by its
        last chunk if it continued (as ``record_succeeded``); False if recorded before (a duplicate) or it
        ended otherwise."""
        carried = f"#{CONTINUED_IN} = :{JOB_ID}"
        if not chunk:
            carried = f"(attribute_not_exists(#{CONTINUED_IN}) OR {carried})"
        return self._finish(
            occurrence,
            RunStatus.DISCARDED,
            job_id=job_id,
            attempts=attempts,
            reason=reason,
            condition=f"(attribute_not_exists(#{STATUS}) OR #{STATUS} IN (:running, :pending)) AND {carried}",
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

        windows = [_window(value["S"]) for value in item.get(PAUSES, {}).get("L", [])]
        if PAUSED_AT in item:
            windows.append(PauseWindow(parse_utc(item[PAUSED_AT]["S"]), moment(PAUSE_UNTIL)))
        return ScheduleState(
            last_scheduled=moment(LAST_SCHEDULED),
            last_success=moment(LAST_SUCCESS),
            last_status=RunStatus(item[LAST_STATUS]["S"]) if LAST_STATUS in item else None,
            next_expected=moment(NEXT_EXPECTED),
            pauses=tuple(windows),
        )

    def pause(self, schedule: str, at: datetime, *, until: datetime | None = None) -> None:
        """Open a pause of ``schedule`` (or of its queue) at ``at``; a timed one ends by itself at ``until``.

        Pausing what is paused keeps the open pause's start and changes only its planned end.
        """
        end = {PAUSE_UNTIL: _s(utc_seconds(until))} if until is not None else {}
        remove = () if until is not None else (PAUSE_UNTIL,)
        opened = {PAUSED_AT: _s(utc_seconds(at)), **end}
        if not self._update(schedule, opened, remove=remove, condition=f"attribute_not_exists(#{PAUSED_AT})"):
            self._update(schedule, end, remove=remove, condition=f"attribute_exists(#{PAUSED_AT})")

    def resume(self, schedule: str, at: datetime) -> None:
        """Close the open pause at ``at`` (or at its planned end, if that came first) and keep it in ``pauses``."""
        state = self._dynamodb.get_item(TableName=self._table, Key={KEY: _s(schedule)}, ConsistentRead=True).get("Item")
        if state is None or PAUSED_AT not in state:
            return
        start = state[PAUSED_AT]["S"]
        until = state.get(PAUSE_UNTIL, {}).get("S")
        end = min(utc_seconds(at), until) if until else utc_seconds(at)
        kept = [value for value in state.get(PAUSES, {}).get("L", [])][-(MAX_PAUSES - 1) :]
        self._update(
            schedule,
            {PAUSES: {"L": [*kept, _s(f"{start}{_WINDOW_SEPARATOR}{end}")]}},  # type: ignore[dict-item]
            remove=(PAUSED_AT, PAUSE_UNTIL),
            condition=f"#{PAUSED_AT} = :started",
            condition_values={":started": _s(start)},
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
        parts = [f"SET {', '.join(f'#{name} = :{name}' for name in fields)}"] if fields else []
        if remove:
            parts.append("REMOVE " + ", ".join(f"#{name}" for name in remove))
        expression = " ".join(parts)
        names = {f"#{name}": name for name in _PLACEHOLDER.findall(f"{expression} {condition}")}
        values = {f":{name}": value for name, value in fields.items()} | dict(condition_values or {})
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key={KEY: _s(key)},
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                **({"ExpressionAttributeValues": values} if values else {}),
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


def _window(text: str) -> PauseWindow:
    start, end = text.split(_WINDOW_SEPARATOR)
    return PauseWindow(parse_utc(start), parse_utc(end))
