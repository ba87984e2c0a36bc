"""The policy for one received message: parse, validate, run once, then ack, retry or dead-letter.

Every path ends in exactly one of: the record returns (SQS deletes it: success, discarded,
duplicate, dead-lettered, or re-sent for later), or it raises (a batch item failure: SQS redelivers it
after the backoff this module set). Nothing is acknowledged before its outcome is durable.
While a job runs, a heartbeat keeps its message hidden (conveyor.worker.heartbeat); a long job's
checkpoints and continuations are in conveyor.worker.checkpoints; a scheduled job's missed-run policy
and run audit, in conveyor.worker.schedule_runs.
"""

import math
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import aws_lambda_powertools
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from conveyor.contract import limits
from conveyor.contract.declarations import JobType
from conveyor.contract.destinations import BudgetAction
from conveyor.contract.envelope import Envelope, parse_envelope
from conveyor.contract.errors import Continued, ContractError, Discard, RetryableError, Snooze, Throttled
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import mask_values, sensitive_values
from conveyor.contract.reasons import Reason, SnoozeReason
from conveyor.contract.schedules import MissedReason
from conveyor.contract.settings import SERVICE_NAME, WorkerSettings
from conveyor.contract.timestamps import utc_text
from conveyor.contract.topology import Topology
from conveyor.sdk.catalog import TopologyCatalog
from conveyor.sdk.prepare import JobRequest, message_entry, prepare, single_send
from conveyor.worker.checkpoints import CheckpointStore, Chunk, Progress
from conveyor.worker.classify import FailureKind, classify
from conveyor.worker.dead_letter import DeadLetterQueue, Failure, failure_attributes, truncate
from conveyor.worker.delivery import Delivery
from conveyor.worker.destinations.guard import DestinationLimits, JobGuard
from conveyor.worker.effects import EffectLedger, RunEffects
from conveyor.worker.heartbeat import DEADLINE_MARGIN, Heartbeats, lease_for
from conveyor.worker.idempotency import Completion, Discarded, IdempotentRunner, record_lifetime
from conveyor.worker.lease_values import LeaseLostError
from conveyor.worker.missed_runs import ScheduledRuns
from conveyor.worker.outcomes import JobOutcome, Kind, Observer, ignore
from conveyor.worker.timeouts import time_limit
from conveyor.worker.tracing import job_subsegment

logger = Logger(service=SERVICE_NAME)

# Time kept back from each invocation for the harness's own calls after a job (DLQ send,
# visibility change): a tenth of the function timeout, at most two seconds.
RESERVE_FRACTION = 0.1
MAX_RESERVE_S = 2.0
MILLISECONDS = 1000
# The one log line of each outcome (the job event); retries log as warnings, dead letters as errors.
OUTCOME_MESSAGES = {
    Kind.SUCCEEDED: "job succeeded",
    Kind.DUPLICATE: "job duplicate absorbed",
    Kind.RETRIED: "job failed; will retry",
    Kind.DEAD_LETTERED: "job dead-lettered",
    Kind.SNOOZED: "job snoozed",
    Kind.DEFERRED: "job deferred to the next invocation",
    Kind.DISCARDED: "job discarded",
}
IN_PROGRESS_ELSEWHERE = "job in progress elsewhere; snoozed"
DUPLICATE_OF_DISCARDED = "job duplicate absorbed; its run was discarded"


# Frames in these (the harness, Powertools' idempotency) lead to every job's code: a job's traceback starts after them.
_RUNNER_DIRS = (str(Path(__file__).parents[1]), str(Path(aws_lambda_powertools.__file__ or "").parent))


def job_traceback(error: BaseException) -> str:
    """``error``'s traceback from the job's own first frame on (all of it if it never reached the job's code)."""
    trace = traceback.TracebackException.from_exception(error)
    frames = list(trace.stack)
    first = next((index for index, frame in enumerate(frames) if not frame.filename.startswith(_RUNNER_DIRS)), 0)
    trace.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(trace.format()).rstrip()


class RetryScheduledError(Exception):
    """Raised to report a batch item failure once the message's backoff is set."""


@dataclass
class Invocation:
    """One Lambda invocation's time budget, shared by the records of its batch."""

    context: LambdaContext
    reserve_s: float
    started: int = field(default=0)

    def budget_for(self, job_timeout: timedelta | None) -> float | None:
        """Seconds the next job may run, or None to defer it to a later invocation.

        A job with a declared timeout starts only if that whole timeout still fits (the first
        job of a batch always starts), so one slow job cannot push the rest past the deadline.
        A job without one may use whatever the invocation has left.
        """
        remaining = self.context.get_remaining_time_in_millis() / MILLISECONDS - self.reserve_s
        if job_timeout is None:
            return remaining if remaining > 0 else None
        wanted = job_timeout.total_seconds()
        if remaining >= wanted:
            return wanted
        if self.started == 0 and remaining > 0:
            return remaining
        return None

    def deadline(self) -> float:
        """When the invocation ends, as a ``time.monotonic()`` instant."""
        return time.monotonic() + self.context.get_remaining_time_in_millis() / MILLISECONDS


class Harness:
    def __init__(
        self,
        topology: Topology,
        settings: WorkerSettings,
        *,
        sqs_client: Any,
        dynamodb_client: Any,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] | None = None,
        observer: Observer = ignore,
    ) -> None:
        self._topology = topology
        self._catalog = TopologyCatalog(topology)
        self._settings = settings
        self.queue = topology.queue(settings.queue)
        self._sqs = sqs_client
        self._dlq = DeadLetterQueue(sqs_client, settings.dlq_url)
        self._heartbeats = Heartbeats(sqs_client, queue_url=settings.queue_url, lease=lease_for(self.queue))
        self._runners = {
            job_type.name: IdempotentRunner(
                job_type, table_name=settings.idempotency_table, dynamodb_client=dynamodb_client
            )
            for job_type in topology.job_types_on(settings.queue)
        }
        self._checkpoints = CheckpointStore(dynamodb_client, settings.checkpoints_table)
        # Builds the envelope of a job's next chunk, exactly as a producer's enqueue would.
        self._rng = rng or random.SystemRandom()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._observer = observer
        # The declared destinations' shared limits, and the queue's retry budget (conveyor.worker.destinations).
        # What the jobs did at their destinations (ctx.effect): conveyor.worker.effects.
        self._ledger = EffectLedger(dynamodb_client, settings.ledger_table, clock=self._clock)
        self._limits = DestinationLimits(
            topology,
            self.queue,
            dynamodb_client=dynamodb_client,
            table=settings.limits_table,
            clock=lambda: self._clock().timestamp(),
            rng=self._rng,
        )
        # The run audit and missed-run policy of scheduled jobs (conveyor.worker.schedule_runs).
        self._scheduled = (
            ScheduledRuns(
                topology,
                dynamodb_client=dynamodb_client,
                table_name=settings.schedule_runs_table,
                sqs_client=sqs_client,
                queue_url=settings.queue_url,
                clock=self._clock,
            )
            if topology.schedules
            else None
        )

    def begin(self, context: LambdaContext) -> Invocation:
        for runner in self._runners.values():
            runner.register(context)
        reserve = min(MAX_RESERVE_S, self.queue.function_timeout.total_seconds() * RESERVE_FRACTION)
        return Invocation(context=context, reserve_s=reserve)

    def end(self) -> None:
        """After each batch: the retry budgets' counts and the destinations' metrics leave the worker."""
        self._limits.flush()

    def run_record(self, record: SQSRecord, invocation: Invocation) -> None:
        now = self._clock()
        delivery = Delivery.of(record)
        try:
            envelope = parse_envelope(record.body)
        except ContractError as error:
            self._dead_letter(record, delivery, now, reason=error.reason, error=error)
            return
        try:
            job_type = self._admit(record, envelope)
            payload = job_type.load_payload(envelope.data, envelope.v)
        except ContractError as error:
            self._dead_letter(record, delivery, now, reason=error.reason, error=error, envelope=envelope)
            return
        delivery = delivery.within(job_type.retry.max_attempts)
        if delivery.not_before and delivery.not_before > now:
            # Past max_wall_time from the deadline's start (or from now, for a created_at in the future)
            # the job could never run in time: dead-letter it now rather than re-send it until then.
            start = min(delivery.deadline_start(envelope.created_at), now)
            if delivery.not_before - start > job_type.retry.max_wall_time:
                late = ContractError(
                    Reason.DEADLINE_EXCEEDED,
                    f"not before {utc_text(delivery.not_before)}, past max_wall_time "
                    f"{job_type.retry.max_wall_time.total_seconds():.0f}s",
                )
                self._dead_letter(record, delivery, now, reason=late.reason, error=late, envelope=envelope)
                return
            self._requeue(record, delivery, envelope, now, delivery.not_before - now, Kind.SNOOZED)
            return
        age = now - delivery.deadline_start(envelope.created_at)
        if age > job_type.retry.max_wall_time:
            if self._scheduled and self._scheduled.paused_past_deadline(envelope, delivery.attempt):
                # It waited out a pause of its queue: an operator's decision, not a failure to dead-letter.
                self._report(Kind.DISCARDED, delivery, envelope, reason=MissedReason.PAUSED)
                return
            deadline = ContractError(
                Reason.DEADLINE_EXCEEDED,
                f"enqueued (or redriven) {age.total_seconds():.0f}s ago, past max_wall_time "
                f"{job_type.retry.max_wall_time.total_seconds():.0f}s",
            )
            self._dead_letter(record, delivery, now, reason=deadline.reason, error=deadline, envelope=envelope)
            return
        budget = invocation.budget_for(job_type.timeout)
        if budget is None:
            self._requeue(record, delivery, envelope, now, timedelta(0), Kind.DEFERRED)
            return
        invocation.started += 1
        self._run(record, delivery, envelope, job_type, payload, budget, invocation.deadline(), now)

    def _admit(self, record: SQSRecord, envelope: Envelope) -> JobType[Any]:
        job_type = self._topology.job_type(envelope.type)
        if job_type.queue != self._settings.queue:
            raise ContractError(
                Reason.UNKNOWN_TYPE,
                f"job type {job_type.name!r} runs on queue {job_type.queue!r}, not {self._settings.queue!r}",
            )
        size = len(record.body.encode())
        if size > job_type.max_payload_bytes:
            raise ContractError(
                Reason.PAYLOAD_TOO_LARGE,
                f"body is {size} bytes, over the {job_type.max_payload_bytes}-byte limit of {job_type.name}",
            )
        return job_type

    def _run(
        self,
        record: SQSRecord,
        delivery: Delivery,
        envelope: Envelope,
        job_type: JobType[Any],
        payload: BaseModel,
        budget: float,
        deadline: float,
        now: datetime,
    ) -> None:
        key = job_type.idempotency_key_for(job_id=envelope.id, dedupe_key=envelope.dedupe_key, payload=payload)
        bound = {
            "queue": self.queue.name,
            "job_id": envelope.id,
            "job_type": job_type.name,
            "attempt": delivery.attempt,
            **envelope.correlation.model_dump(),
        }
        logger.thread_safe_append_keys(**bound)
        progress = self._progress(record, envelope, job_type, payload, key)
        # The invocation's end on the epoch clock the shared limits compare: a slot expires after it.
        guard = self._limits.guard(
            job_type, payload, job_id=envelope.id, deadline=now.timestamp() + deadline - time.monotonic()
        )
        context = JobContext(
            job_id=envelope.id,
            job_type=job_type.name,
            attempt=delivery.attempt,
            max_attempts=job_type.retry.max_attempts,
            idempotency_key=key,
            created_at=envelope.created_at,
            correlation=envelope.correlation,
            logger=logger,
            deadline_monotonic=time.monotonic() + budget,
            progress=progress,
            guard=guard,
            effects=RunEffects(
                self._ledger,
                self._topology,
                job_type,
                job_id=envelope.id,
                attempt=delivery.attempt,
                # The loaded payload, defaults included: a sensitive default is as sensitive as a value sent.
                sensitive=lambda: sensitive_values(job_type.model, payload.model_dump(mode="json")),
                now=now,
            ),
        )

        def call_handler() -> Discarded | None:
            if self._scheduled:  # inside the idempotent call: a completed occurrence's duplicate never gets here
                self._scheduled.begin(envelope)
            # The limit covers the handler only, never Powertools' own record writes around it.
            # The declared destinations are taken first (a wait bounded by their max_wait), and their outcomes
            # recorded and slots released after: the time limit covers the handler only.
            with guard.declared():
                snoozed = False
                try:
                    with time_limit(budget):
                        job_type.handler(payload, context)
                except Continued as continued:
                    logger.info("job continues in its next chunk", extra={"next_job_id": continued.next_job_id})
                    if self._scheduled:  # its occurrence succeeds with its last chunk
                        self._scheduled.continued(envelope, continued.next_job_id)
                except Discard as discard:  # final on purpose: the key completes, and records why
                    return Discarded(truncate(self._describe(discard, envelope)))
                except Snooze:
                    snoozed = True  # not an attempt: the job runs again as the same attempt
                    raise
                except LeaseLostError as lost:  # a scheduled run's work passed to the lease's new holder: let it go
                    if self._scheduled is None or not self._scheduled.lease_lost(envelope, delivery.attempt):
                        raise
                    return Discarded(truncate(self._describe(lost, envelope)))
                finally:
                    if delivery.attempt == 1 and not snoozed:  # retries count when scheduled (admit_retry)
                        self._limits.count_first(job_type, guard.used)
            return None

        # The message stays hidden while the job runs, never past the invocation's deadline and margin.
        heartbeat = self._heartbeats.keep(
            receipt_handle=record.receipt_handle,
            job_id=envelope.id,
            hold_until=deadline + DEADLINE_MARGIN.total_seconds(),
        )
        try:
            with job_subsegment(job_type.name, envelope.id, record.attributes.aws_trace_header), heartbeat:
                completion = self._runners[job_type.name].run(key, call_handler)
        except Snooze as snooze:
            reason = snooze.reason if isinstance(snooze, Throttled) else None
            if self._scheduled and reason is SnoozeReason.BREAKER_OPEN:
                self._scheduled.waiting(envelope, MissedReason.DEPENDENCY_DOWN)
            self._requeue(record, delivery, envelope, now, snooze.delay, Kind.SNOOZED, reason=reason)
        except IdempotencyAlreadyInProgressError:
            # Another invocation holds the key (a duplicate delivery, or a worker that crashed mid-job): not
            # a failure of the job, so no attempt is spent. Its hold ends with that invocation, at the latest
            # one function timeout from now.
            lease = lease_for(self.queue)
            self._requeue(record, delivery, envelope, now, lease, Kind.SNOOZED, message=IN_PROGRESS_ELSEWHERE)
        except Exception as error:  # every failure is classified; none escapes unrecorded
            self._fail(record, delivery, envelope, job_type, error, now, guard)
        else:
            if completion.ran:
                self._finish(progress)
            if self._scheduled:  # a duplicate too: it may be the redelivery of a run whose record failed
                if completion.discarded is None:
                    self._scheduled.succeeded(envelope, delivery.attempt)
                else:
                    self._scheduled.discarded(envelope, completion.discarded, delivery.attempt)
            self._report_completed(completion, delivery, envelope, now)
        finally:
            logger.thread_safe_remove_keys(bound)

    def _report_completed(self, completion: Completion, delivery: Delivery, envelope: Envelope, now: datetime) -> None:
        """A run whose key completed: succeeded or discarded, or a duplicate of one (saying so if it was discarded)."""
        discarded = completion.discarded
        if not completion.ran:
            message = DUPLICATE_OF_DISCARDED if discarded is not None else None
            self._report(Kind.DUPLICATE, delivery, envelope, reason=discarded, started_at=now, message=message)
            return
        kind = Kind.SUCCEEDED if discarded is None else Kind.DISCARDED
        self._report(kind, delivery, envelope, reason=discarded, started_at=now)

    def _progress(
        self, record: SQSRecord, envelope: Envelope, job_type: JobType[Any], payload: BaseModel, key: str
    ) -> Progress:
        """The run's checkpoints; it may hand off to a next chunk unless its key comes from its payload."""
        return Progress(
            self._checkpoints,
            job_type=job_type.name,
            job_id=envelope.id,
            idempotency_key=key,
            lifetime=record_lifetime(job_type),
            clock=self._clock,
            hand_off=None if job_type.idempotency_key else partial(self._hand_off, record, envelope, job_type, payload),
        )

    @staticmethod
    def _finish(progress: Progress) -> None:
        """Delete a completed run's checkpoint; if that fails, the job still succeeded and TTL deletes it."""
        try:
            progress.finish()
        except (BotoCoreError, ClientError):
            logger.warning("could not delete the checkpoint of a completed job; its TTL will", exc_info=True)

    def _hand_off(
        self, record: SQSRecord, envelope: Envelope, job_type: JobType[Any], payload: BaseModel, chunk: Chunk
    ) -> None:
        """Enqueue a job's next chunk on this queue: its payload, its correlation, the chunk's own id and key.

        The chunk's key rides as the dedupe key, which (for a job type without an ``idempotency_key``
        template) is the key the chunk runs under; on a FIFO queue it also dedupes the send.
        """
        request = JobRequest(
            job_type,
            payload,
            job_id=chunk.job_id,
            dedupe_key=chunk.idempotency_key,
            group=record.attributes.message_group_id,
        )
        entry = prepare(self._catalog, 0, request, envelope.correlation).entry
        self._sqs.send_message(QueueUrl=self._settings.queue_url, **single_send(entry))

    def _fail(
        self,
        record: SQSRecord,
        delivery: Delivery,
        envelope: Envelope,
        job_type: JobType[Any],
        error: Exception,
        now: datetime,
        guard: JobGuard,
    ) -> None:
        kind = classify(error, job_type)
        if kind is FailureKind.PERMANENT:
            self._dead_letter(
                record, delivery, now, reason=Reason.PERMANENT_ERROR, error=error, envelope=envelope, started_at=now
            )
            return
        if delivery.attempt >= job_type.retry.max_attempts:
            self._dead_letter(
                record, delivery, now, reason=Reason.ATTEMPTS_EXHAUSTED, error=error, envelope=envelope, started_at=now
            )
            return
        delay = job_type.retry.delay(delivery.attempt, self._rng)
        if isinstance(error, RetryableError) and error.retry_after is not None:
            delay = max(delay, error.retry_after)  # the service said when; never sooner than the backoff
        left = job_type.retry.max_wall_time - (now - delivery.deadline_start(envelope.created_at))
        if delay > left:
            self._dead_letter(
                record, delivery, now, reason=Reason.DEADLINE_EXCEEDED, error=error, envelope=envelope, started_at=now
            )
            return
        # Only a retry that will be scheduled is put to the budgets (and counted by them).
        over = self._limits.admit_retry(job_type, guard.used)
        if over is not None and over.action is BudgetAction.DEAD_LETTER:
            self._dead_letter(
                record,
                delivery,
                now,
                reason=Reason.RETRY_BUDGET_EXHAUSTED,
                error=error,
                envelope=envelope,
                started_at=now,
            )
            return
        if over is not None:  # declared to wait: the retry waits about one budget window, within its wall time
            delay = max(delay, min(self._limits.budget_delay(over), left))
        self._set_visibility(record, delay)
        self._report(Kind.RETRIED, delivery, envelope, reason=kind.value, error=error, delay=delay, started_at=now)
        raise RetryScheduledError(f"attempt {delivery.attempt} failed; retry in {delay.total_seconds():.1f}s")

    def _set_visibility(self, record: SQSRecord, delay: timedelta) -> None:
        """Backoff is the message's visibility: SQS hands it out again once the delay has passed."""
        seconds = min(math.ceil(delay.total_seconds()), int(limits.SQS_MAX_VISIBILITY_TIMEOUT.total_seconds()))
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self._settings.queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=seconds
            )
        except Exception:  # the queue's own visibility timeout still brings the message back
            logger.exception("could not set retry backoff; the queue's visibility timeout applies")

    def _requeue(
        self,
        record: SQSRecord,
        delivery: Delivery,
        envelope: Envelope,
        now: datetime,
        delay: timedelta,
        kind: Kind,
        *,
        message: str | None = None,
        reason: SnoozeReason | None = None,
    ) -> None:
        """Run the job later without spending an attempt: re-send a copy, then ack this one.

        SQS delays a message by at most 15 minutes; a longer wait rides along as ``not_before``
        and the copy is re-sent again until then. A FIFO queue has no per-message delay, so there
        the message's visibility is extended instead (which holds its group, as FIFO must).
        """
        if self.queue.fifo:
            self._set_visibility(record, delay)
            self._report(kind, delivery, envelope, delay=delay, message=message, reason=reason)
            raise RetryScheduledError(f"deferred {delay.total_seconds():.1f}s on a FIFO queue")
        entry = message_entry(
            record.body,
            delay_seconds=math.ceil(min(delay, limits.SQS_MAX_DELAY).total_seconds()),
            attributes=delivery.carried(now, now + delay if delay > limits.SQS_MAX_DELAY else None),
        )
        self._sqs.send_message(QueueUrl=self._settings.queue_url, **single_send(entry))
        self._report(kind, delivery, envelope, delay=delay, message=message, reason=reason)

    def _dead_letter(
        self,
        record: SQSRecord,
        delivery: Delivery,
        now: datetime,
        *,
        reason: Reason,
        error: Exception,
        envelope: Envelope | None = None,
        started_at: datetime | None = None,
    ) -> None:
        failure = Failure(
            reason=reason,
            error_class=type(error).__name__,
            error=self._describe(error, envelope),
            attempts=delivery.attempt,
            first_failed_at=delivery.first_failed_at(now),
            last_failed_at=now,
            job_type=envelope.type if envelope else None,
            job_id=envelope.id if envelope else None,
            redrive_id=delivery.redrive_id,
        )
        self._dlq.send(
            record.body,
            failure_attributes(failure, self._settings.queue),
            group=(record.attributes.message_group_id or record.message_id) if self.queue.fifo else None,
            deduplication_id=record.message_id,
        )
        if envelope and self._scheduled:
            self._scheduled.failed(envelope, reason, delivery.attempt)
        self._report(Kind.DEAD_LETTERED, delivery, envelope, reason=reason, error=error, started_at=started_at)

    def _report(
        self,
        kind: Kind,
        delivery: Delivery,
        envelope: Envelope | None,
        *,
        reason: str | None = None,
        error: Exception | None = None,
        delay: timedelta | None = None,
        started_at: datetime | None = None,
        message: str | None = None,
    ) -> None:
        """Tell the observer how the record ended, and log it: one line per outcome, the job event that
        `conveyor tail` follows and the local console shows. ``started_at`` is set when the handler ran."""
        outcome = JobOutcome(
            queue=self.queue.name,
            kind=kind,
            job_type=envelope.type if envelope else None,
            job_id=envelope.id if envelope else None,
            attempt=delivery.attempt,
            created_at=envelope.created_at if envelope else None,
            finished_at=self._clock(),
            started_at=started_at,
            reason=reason,
            error_class=type(error).__name__ if error else None,
        )
        self._observer(outcome)
        fields: dict[str, Any] = {
            "outcome": kind.value,
            "queue": outcome.queue,
            "job_type": outcome.job_type,
            "job_id": outcome.job_id,
            "attempt": outcome.attempt,
        }
        if started_at is not None:
            fields["duration_ms"] = round((outcome.finished_at - started_at).total_seconds() * MILLISECONDS, 1)
        if reason is not None:
            fields["reason"] = reason
        if delay is not None:
            fields["delay_s"] = delay.total_seconds()
        if error is not None:
            fields |= {"error_class": outcome.error_class, "error": self._describe(error, envelope)}
            if started_at is not None:  # the handler raised it: where is worth reading, masked as the text is
                fields["exception"] = self._mask(job_traceback(error), envelope)
        log = {Kind.RETRIED: logger.warning, Kind.DEAD_LETTERED: logger.error}.get(kind, logger.info)
        log(message or OUTCOME_MESSAGES[kind], extra=fields)

    def _describe(self, error: BaseException, envelope: Envelope | None) -> str:
        """The error's text with the payload's sensitive values masked."""
        return self._mask(str(error) or type(error).__name__, envelope)

    def _mask(self, text: str, envelope: Envelope | None) -> str:
        if envelope is None:
            return text
        try:
            model = self._topology.job_type(envelope.type).model
        except ContractError:
            return text
        return mask_values(text, sensitive_values(model, envelope.data))
