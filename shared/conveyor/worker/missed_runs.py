"""The missed-run policy, applied around each scheduled job: claim the occurrence, account for the ones missed.

``ScheduledRuns`` is what the harness calls around a scheduled job. Before the handler, the
first attempt of an occurrence claims its item (a conditional write, so retries and duplicate
deliveries never apply the policy twice) and, if the occurrence is newer than ``last_scheduled``,
applies the schedule's missed-run policy to the occurrences in between, then advances
``last_scheduled`` (a conditional write that only moves it forward). After the handler it records
``succeeded`` (and writes the dead man's switch metric), ``discarded`` with the handler's reason
(no metric: a schedule whose runs always discard is one the switch should catch) or, when the job
is dead-lettered, ``failed`` with the dead-letter reason. The rows live in conveyor.worker.schedule_runs.
"""

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract import limits
from conveyor.contract.cron import next_occurrence, occurrences
from conveyor.contract.envelope import Envelope
from conveyor.contract.errors import ConveyorError
from conveyor.contract.reasons import Reason
from conveyor.contract.schedule_inputs import Occurrence, parse_occurrence_id, render_catch_up, schedule_input
from conveyor.contract.schedules import MissedReason, Schedule
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.worker.metrics import SCHEDULE_DIMENSION, SCHEDULE_SUCCEEDED, SHARD_DIMENSION, metric_set
from conveyor.worker.schedule_runs import (
    RunStatus,
    ScheduleRuns,
    ScheduleState,
    occurrence_job_id,
    shards_of,
    utc_seconds,
)

logger = Logger(service=SERVICE_NAME)

# Missed occurrences are recorded one conditional write each, before the handler of the run
# that found them: bound that work, so the first run after a long outage of a frequent schedule
# does not spend its invocation on the audit. Older ones are only logged.
MAX_MISSED_ROWS = 100
# A continued chunk's id is its first job's id plus "#<chunk number>" (conveyor.worker.checkpoints).
_CHUNK_SUFFIX = re.compile(r"#\d+$")


class CatchUpError(ConveyorError):
    """SQS rejected some catch-up runs; the job is retried and the next occurrence enqueues them again."""


class MissedRunPlan(NamedTuple):
    """What a run does about missed occurrences: enqueue some, record the rest missed (``policy.reason``)."""

    to_enqueue: list[datetime]
    to_record_missed: list[datetime]


def missed_occurrences(schedule: Schedule, last_scheduled: datetime | None, now_scheduled: datetime) -> list[datetime]:
    """Occurrences strictly between the last recorded run and this one: the runs that never came.

    With no run recorded yet there is nothing to miss. A rate schedule counts from
    ``last_scheduled``, which was one of its real occurrences.
    """
    if last_scheduled is None:
        return []
    between = occurrences(schedule, last_scheduled, now_scheduled, anchor=last_scheduled)
    return [moment for moment in between if moment < now_scheduled]


def apply_missed_policy(schedule: Schedule, missed: Sequence[datetime]) -> MissedRunPlan:
    """Split missed occurrences by the schedule's policy: catch_up(n) enqueues the n most recent, skip none."""
    ordered = sorted(missed)
    kept = min(schedule.missed.max_runs, len(ordered)) if schedule.missed.kind == "catch_up" else 0
    split = len(ordered) - kept
    return MissedRunPlan(to_enqueue=ordered[split:], to_record_missed=ordered[:split])


def emit_schedule_succeeded(schedule: str, shard: int | None = None) -> None:
    """The dead man's switch's metric: 1 per occurrence (and shard) that succeeded, dimension ``schedule``;
    a sharded schedule's shard writes it a second time with ``schedule`` and ``shard``, which its shard's alarm reads.

    Written as their own EMF documents right away rather than buffered with the job metrics: a
    scheduled run is rare, and each alarm reads one dimension set alone.
    """
    dimension_sets: list[tuple[tuple[str, str], ...]] = [((SCHEDULE_DIMENSION, schedule),)]
    if shard is not None:
        dimension_sets.append(((SCHEDULE_DIMENSION, schedule), (SHARD_DIMENSION, str(shard))))
    for dimensions in dimension_sets:
        metrics = metric_set(dimensions)
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
        try:
            occurrence = parse_occurrence_id(envelope.id)
        except ValueError:  # it reads like an occurrence's id but names no instant (month 13, say): not one
            return None
        schedule = self._schedules.get(occurrence.schedule) if occurrence else None
        if occurrence is None or schedule is None or schedule.job != envelope.type:
            return None
        return occurrence if occurrence.shard in shards_of(schedule) else None

    def carried(self, envelope: Envelope) -> Occurrence | None:
        """The occurrence a job runs, itself or as one of its continued chunks (``<occurrence id>#<n>``)."""
        occurrence = self.occurrence(envelope)
        if occurrence is None and _CHUNK_SUFFIX.search(envelope.id):
            first = envelope.model_copy(update={"id": _CHUNK_SUFFIX.sub("", envelope.id)})
            occurrence = self.occurrence(first)
        return occurrence

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
        self._account_for_missed(schedule, state, moment, envelope)
        self.runs.advance(schedule.name, moment, next_occurrence(schedule, moment, anchor=moment))

    def succeeded(self, envelope: Envelope, attempt: int) -> None:
        """After a run (or a duplicate of one) succeeded: record it; the first record writes the metric.

        A run that continued in a chunk has not succeeded yet: its occurrence succeeds with its last chunk.
        """
        occurrence = self.carried(envelope)
        if occurrence is None:
            return
        chunk = envelope.id != occurrence_job_id(occurrence)
        if self.runs.record_succeeded(occurrence, job_id=envelope.id, attempts=attempt, chunk=chunk):
            self.runs.record_outcome(occurrence.schedule, occurrence.scheduled_time, RunStatus.SUCCEEDED)
            emit_schedule_succeeded(occurrence.schedule, occurrence.shard)

    def continued(self, envelope: Envelope, next_job_id: str) -> None:
        """The run handed its work to its next chunk (enqueued): the occurrence's run goes on in that chunk."""
        occurrence = self.carried(envelope)
        if occurrence is not None:
            self.runs.record_continued(occurrence, job_id=envelope.id, next_job_id=next_job_id)

    def waiting(self, envelope: Envelope, reason: MissedReason) -> None:
        """The run was snoozed for ``reason`` (a declared destination is down): ``pending`` with it until it ends.

        Best effort: the snooze is what makes the run wait; the row only says why.
        """
        occurrence = self.carried(envelope)
        if occurrence is None:
            return
        try:
            self.runs.record_waiting(occurrence, reason)
        except (BotoCoreError, ClientError):
            logger.warning("could not record a scheduled run's wait in the run audit", exc_info=True)

    def lease_lost(self, envelope: Envelope, attempt: int) -> bool:
        """The run's lease passed to another holder: recorded ``missed`` with ``lease_lost``; False if not scheduled.

        Not a failure and not retried: the lease's new holder does the work now.
        """
        occurrence = self.carried(envelope)
        if occurrence is None:
            return False
        self._end(occurrence, envelope, attempt, MissedReason.LEASE_LOST)
        return True

    def paused_past_deadline(self, envelope: Envelope, attempt: int) -> bool:
        """For a run past its ``max_wall_time``: if it waited out a pause of its queue (or schedule), record it
        ``missed`` with ``paused`` and return True, so it is let go rather than dead-lettered."""
        occurrence = self.carried(envelope)
        if occurrence is None:
            return False
        state = self.runs.state(occurrence.schedule)
        if state is None or not state.paused_between(occurrence.scheduled_time, self._clock()):
            return False
        self._end(occurrence, envelope, attempt, MissedReason.PAUSED)
        return True

    def _end(self, occurrence: Occurrence, envelope: Envelope, attempt: int, reason: MissedReason) -> None:
        if self.runs.record_ended(occurrence, job_id=envelope.id, attempts=attempt, reason=reason):
            self.runs.record_outcome(occurrence.schedule, occurrence.scheduled_time, RunStatus.MISSED)

    def discarded(self, envelope: Envelope, reason: str, attempt: int) -> None:
        """After its handler (or the run a duplicate repeats) discarded it, in any chunk: recorded, without the
        dead man's metric."""
        occurrence = self.carried(envelope)
        if occurrence is None:
            return
        chunk = envelope.id != occurrence_job_id(occurrence)
        if self.runs.record_discarded(occurrence, job_id=envelope.id, attempts=attempt, reason=reason, chunk=chunk):
            self.runs.record_outcome(occurrence.schedule, occurrence.scheduled_time, RunStatus.DISCARDED)

    def failed(self, envelope: Envelope, reason: str, attempt: int) -> None:
        """After the job was dead-lettered. Best effort: the DLQ already holds the job and its reason."""
        occurrence = self.carried(envelope)
        if occurrence is None:
            return
        try:
            # A run that waited on a dependency until it could no longer run in time failed for that dependency.
            waited = reason == Reason.DEADLINE_EXCEEDED and self.runs.record_failed(
                occurrence,
                job_id=envelope.id,
                attempts=attempt,
                reason=MissedReason.DEPENDENCY_DOWN,
                waiting_on=MissedReason.DEPENDENCY_DOWN,
            )
            if waited or self.runs.record_failed(occurrence, job_id=envelope.id, attempts=attempt, reason=reason):
                self.runs.record_outcome(occurrence.schedule, occurrence.scheduled_time, RunStatus.FAILED)
        except (BotoCoreError, ClientError):
            logger.warning("could not record a dead-lettered scheduled run in the run audit", exc_info=True)

    def _account_for_missed(
        self, schedule: Schedule, state: ScheduleState | None, moment: datetime, envelope: Envelope
    ) -> None:
        missed = missed_occurrences(schedule, state.last_scheduled if state else None, moment)
        if not missed:
            return
        shards = shards_of(schedule)
        # Occurrences that fell due while the schedule (or its queue) was paused were left out on purpose:
        # recorded missed as paused, never caught up. The policy decides about the rest.
        paused = [t for t in missed if state is not None and state.paused_at(t)]
        missed = [t for t in missed if t not in paused]
        plan = apply_missed_policy(schedule, missed)

        def unknown(moments: Sequence[datetime]) -> list[datetime]:
            # Planned over the whole gap, then narrowed: a retry finishes what an earlier attempt began,
            # and never catches up more than max_runs.
            return [t for t in moments if not self.runs.known(Occurrence(schedule.name, t, shards[0]))]

        plan = MissedRunPlan(to_enqueue=unknown(plan.to_enqueue), to_record_missed=unknown(plan.to_record_missed))
        # Catch-ups carry the ARN of the schedule whose run enqueued them: their actor.
        self._enqueue_catch_ups(schedule, plan.to_enqueue, envelope.correlation.actor or schedule.name)
        limit = max(1, MAX_MISSED_ROWS // len(shards))
        reasons = {t: MissedReason.PAUSED for t in unknown(paused)}
        reasons |= {t: schedule.missed.reason for t in plan.to_record_missed}
        ordered = sorted(reasons)
        recorded, unrecorded = ordered[-limit:], ordered[:-limit]
        for missed_time in recorded:
            for shard in shards:
                self.runs.record_missed(Occurrence(schedule.name, missed_time, shard), reasons[missed_time])
        log = {
            "schedule": schedule.name,
            "missed": len(missed) + len(paused),
            "paused": len(paused),
            "caught_up": len(plan.to_enqueue),
            "recorded_missed": len(recorded),
            "reason": schedule.missed.reason.value,
        }
        if unrecorded:
            log |= {
                "unrecorded": len(unrecorded),
                "unrecorded_from": utc_seconds(unrecorded[0]),
                "unrecorded_until": utc_seconds(unrecorded[-1]),
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
