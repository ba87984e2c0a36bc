"""EventBridge Scheduler, emulated: the declared schedules fire on the local runtime's clock.

moto stores schedules but never fires them, so locally this stands in for Scheduler. It reads
the declarations the stack deploys and sends what Scheduler would send: each shard's target
input (``schedule_input``) with the context attributes filled in (``render_input``), to the job's
queue. What it shares with the cloud, it takes from ``conveyor.contract.schedules``:

- cron, rate and at expressions in the schedule's time zone, with EventBridge's DST rules;
- each shard is its own schedule, so each gets its own random delay within the flexible window;
- like a schedule created when the emulator starts, nothing scheduled before the start fires, and
  a rate fires at the start (Scheduler invokes a new rate schedule at once, then every period);
- at least once: a send that fails is tried again on the next tick, within the retry policy the
  stack deploys (``delivery_retry``: retries and maximum event age); a send that exhausts it, or
  fails with an error Scheduler does not retry (4xx other than throttling), goes to the schedules
  DLQ with the message attributes Scheduler sets, or is dropped when there is none.

The clock is the wall clock, read every ``TICK_S`` (Scheduler's own precision is 60 seconds, so
nothing may depend on finer timing). A test or the demo sets a ``ScheduleClock`` and moves it:
what falls due then fires at the next tick, or at once through ``tick()``. ``pause`` and
``resume`` simulate an outage: occurrences due in between are never sent, which is what the run
audit must then notice. Only the local clock is simulated: the input, the ids, the missed-run
policy and everything the cloud does are unchanged.
"""

import logging
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract import naming
from conveyor.contract.cron import occurrences
from conveyor.contract.errors import DeclarationError
from conveyor.contract.schedule_inputs import (
    DLQ_ERROR_CODE,
    DLQ_ERROR_MESSAGE,
    DLQ_EXECUTION_ID,
    DLQ_EXHAUSTED_RETRY_CONDITION,
    DLQ_IS_PAYLOAD_TRUNCATED,
    DLQ_RETRY_ATTEMPTS,
    DLQ_SCHEDULE_ARN,
    DLQ_SCHEDULED_TIME,
    DLQ_TARGET_ARN,
    DeliveryRetry,
    delivery_retry,
    render_input,
    schedule_input,
)
from conveyor.contract.schedules import Schedule
from conveyor.contract.topology import Topology
from conveyor.local.provision import ProvisionedQueue
from conveyor.worker.classify import HTTP_CLIENT_ERROR, HTTP_SERVER_ERROR, THROTTLING_CODES
from conveyor.worker.schedule_runs import shards_of, utc_seconds

log = logging.getLogger(__name__)

TICK_S = 1.0
MAXIMUM_RETRY_ATTEMPTS = "MaximumRetryAttempts"
MAXIMUM_EVENT_AGE = "MaximumEventAgeInSeconds"
# Occurrences in (cursor, now] are due: starting the cursor this much before the start includes the start itself.
_JUST_BEFORE = timedelta(microseconds=1)


class ScheduleClock:
    """The emulator's clock: the wall clock until ``freeze``, ``set`` or ``advance`` stops it; then it moves when told.

    It never goes back: the emulator fires each instant once, as time passes it.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.utcoffset() is None:
            raise ValueError("a schedule clock needs a timezone-aware start")
        self._lock = threading.Lock()
        self._fixed = start

    def __call__(self) -> datetime:
        with self._lock:
            return self._read()

    def freeze(self) -> datetime:
        """Stop the clock where it is (the wall clock's now, if it was following it); returns that time."""
        with self._lock:
            self._fixed = self._read()
            return self._fixed

    def set(self, moment: datetime) -> None:
        with self._lock:
            if moment.utcoffset() is None:
                raise ValueError(f"a schedule clock needs a timezone-aware time, not {moment}")
            if moment < self._read():
                raise ValueError(f"a schedule clock only moves forward: {moment} is before {self._read()}")
            self._fixed = moment

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            if delta < timedelta(0):
                raise ValueError(f"a schedule clock only moves forward, not by {delta}")
            self._fixed = self._read() + delta

    def _read(self) -> datetime:
        return self._fixed if self._fixed is not None else datetime.now(UTC)


@dataclass(frozen=True)
class Firing:
    """One shard's job of one occurrence: sent once ``due`` (its scheduled time plus its flexible-window delay)."""

    schedule: str
    scheduled_time: datetime
    shard: int | None
    due: datetime
    queue_url: str
    body: str
    arn: str  # the shard's schedule's
    queue_arn: str  # the target's


@dataclass(frozen=True)
class _Target:
    """One shard's Scheduler schedule: its templated input, its ARN, the queue it sends to."""

    schedule: Schedule
    shard: int | None
    template: str
    arn: str
    queue_url: str
    queue_arn: str
    retry: DeliveryRetry


def schedule_arn(queue_arn: str, schedule: Schedule, shard: int | None) -> str:
    """The ARN the stack gives this shard's schedule (infra/schedules.py), in the queue's region and account."""
    _, partition, _, region, account, _ = queue_arn.split(":", 5)
    prefix = naming.current_prefix()
    name = f"{prefix}-{schedule.name}" + ("" if shard is None else f"-{shard}")
    return f"arn:{partition}:scheduler:{region}:{account}:schedule/{prefix}-schedules/{name}"


class LocalScheduler:
    """Fires the topology's schedules on ``clock``, from the moment it is created."""

    def __init__(
        self,
        topology: Topology,
        *,
        sqs: Any,
        queues: Mapping[str, ProvisionedQueue],
        clock: ScheduleClock | None = None,
        rng: random.Random | None = None,
        dlq_url: str | None = None,
    ) -> None:
        self.clock = clock or ScheduleClock()
        self._sqs = sqs
        self._rng = rng or random.SystemRandom()
        self._dlq_url = dlq_url
        self._targets = []
        for schedule in topology.schedules:
            job_type = topology.job_type(schedule.job)
            queue = queues[job_type.queue]
            for shard in shards_of(schedule):
                self._targets.append(
                    _Target(
                        schedule=schedule,
                        shard=shard,
                        template=schedule_input(schedule, job_type, shard or 0),
                        arn=schedule_arn(queue.arn, schedule, shard),
                        queue_url=queue.url,
                        queue_arn=queue.arn,
                        retry=delivery_retry(schedule, job_type),
                    )
                )
        # Whole seconds, as Scheduler reports times; a rate schedule counts its periods from here.
        self.started_at = self.clock().replace(microsecond=0)
        self._cursor = self.started_at - _JUST_BEFORE
        self._pending: list[Firing] = []
        self._failures: dict[Firing, int] = {}  # failed sends so far, per pending firing
        self._retries = {(t.schedule.name, t.shard): t.retry for t in self._targets}
        self._paused = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="local-scheduler", daemon=True)

    def start(self) -> None:
        """Tick every ``TICK_S`` in a thread until ``stop``."""
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Stop ticking; True once the thread has ended (a send in progress finishes first)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def tick(self) -> list[Firing]:
        """Send every firing due by the clock's now, oldest first; returns what was sent."""
        with self._lock:
            now = self.clock()
            if self._paused:
                return []
            if now > self._cursor:
                for target in self._targets:
                    window = target.schedule.flexible_window or timedelta(0)
                    for moment in occurrences(target.schedule, self._cursor, now, anchor=self.started_at):
                        self._pending.append(self._firing(target, moment, delay=self._rng.random() * window))
                self._cursor = now
            sent = []
            for firing in sorted((f for f in self._pending if f.due <= now), key=lambda f: f.due):
                try:
                    self._sqs.send_message(QueueUrl=firing.queue_url, MessageBody=firing.body)
                except (BotoCoreError, ClientError) as error:
                    if not self._give_up(firing, error, now):
                        continue
                else:
                    sent.append(firing)
                self._pending.remove(firing)
                self._failures.pop(firing, None)
            return sent

    def fire(self, schedule: str, moment: datetime) -> list[Firing]:
        """Send now each shard's job of ``schedule``'s occurrence at ``moment``, whatever the clock says.

        For tests (conveyor.testing's ``run_schedule``): one occurrence on demand, as Scheduler sends it.
        """
        firings = [self._firing(t, moment, delay=timedelta(0)) for t in self._targets if t.schedule.name == schedule]
        if not firings:
            declared = ", ".join(dict.fromkeys(target.schedule.name for target in self._targets)) or "none"
            raise DeclarationError(f"unknown schedule {schedule!r} (declared: {declared})")
        for firing in firings:
            self._sqs.send_message(QueueUrl=firing.queue_url, MessageBody=firing.body)
        return firings

    def pause(self) -> None:
        """Begin a simulated outage: nothing is sent until ``resume``."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        """End the outage: what fell due during it is dropped, as if Scheduler's retries had run out."""
        with self._lock:
            now = self.clock()
            self._pending = [firing for firing in self._pending if firing.due > now]
            self._cursor = max(self._cursor, now)
            self._paused = False

    def _give_up(self, firing: Firing, error: BotoCoreError | ClientError, now: datetime) -> bool:
        """After a failed send: True if the firing is done with (dead-lettered), False to try it on the next tick.

        As Scheduler does: an error it does not retry ends at once, without an exhausted condition;
        a retryable one is tried again until its retries or its maximum event age run out.
        """
        failures = self._failures.get(firing, 0) + 1
        self._failures[firing] = failures
        retry = self._retries[(firing.schedule, firing.shard)]
        condition: str | None
        if not _retryable(error):
            condition = None
        elif now - firing.due >= retry.max_event_age:
            condition = MAXIMUM_EVENT_AGE
        elif failures > retry.max_retry_attempts:
            condition = MAXIMUM_RETRY_ATTEMPTS
        else:
            log.warning(
                "could not send %s at %s (shard %s); trying again on the next tick",
                firing.schedule,
                firing.scheduled_time,
                firing.shard,
                exc_info=True,
            )
            return False
        self._dead_letter(firing, error, retries=failures - 1, condition=condition)
        return True

    def _dead_letter(
        self, firing: Firing, error: BotoCoreError | ClientError, *, retries: int, condition: str | None
    ) -> None:
        """Send the firing's input to the schedules DLQ with Scheduler's attributes; without one it is dropped."""
        if isinstance(error, ClientError):
            code, message = error.response["Error"].get("Code", ""), error.response["Error"].get("Message", "")
        else:
            code, message = type(error).__name__, str(error)
        values = {
            DLQ_ERROR_CODE: code or "Unknown",
            DLQ_ERROR_MESSAGE: message or str(error),
            DLQ_EXECUTION_ID: f"{self._rng.getrandbits(64):016x}",
            DLQ_IS_PAYLOAD_TRUNCATED: "false",
            DLQ_RETRY_ATTEMPTS: str(retries),
            DLQ_SCHEDULED_TIME: utc_seconds(firing.scheduled_time),
            DLQ_SCHEDULE_ARN: firing.arn,
            DLQ_TARGET_ARN: firing.queue_arn,
        }
        if condition is not None:
            values[DLQ_EXHAUSTED_RETRY_CONDITION] = condition
        log.error(
            "gave up sending %s at %s (shard %s): %s after %d retries; %s",
            firing.schedule,
            firing.scheduled_time,
            firing.shard,
            code,
            retries,
            "sent to the schedules DLQ" if self._dlq_url else "dropped (no schedules DLQ)",
        )
        if self._dlq_url is None:
            return
        try:
            self._sqs.send_message(
                QueueUrl=self._dlq_url,
                MessageBody=firing.body,
                MessageAttributes={name: {"DataType": "String", "StringValue": v} for name, v in values.items()},
            )
        except (BotoCoreError, ClientError):  # Scheduler drops a dead-letter event it cannot deliver, too
            log.exception("could not send a dead-letter event to the schedules DLQ; dropped")

    def _firing(self, target: _Target, moment: datetime, *, delay: timedelta) -> Firing:
        return Firing(
            schedule=target.schedule.name,
            scheduled_time=moment,
            shard=target.shard,
            due=moment + delay,
            queue_url=target.queue_url,
            body=render_input(target.template, moment, target.arn),
            arn=target.arn,
            queue_arn=target.queue_arn,
        )

    def _run(self) -> None:
        while not self._stopping.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # the emulator outlives a failed tick, as Scheduler outlives a failed invocation
                log.exception("the local scheduler's tick failed; ticking on")


def _retryable(error: BotoCoreError | ClientError) -> bool:
    """Whether Scheduler would retry the send: throttling, a server error or no answer; not a 4xx (a missing
    queue, a denied permission), which no retry fixes."""
    if isinstance(error, BotoCoreError):
        return True
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", HTTP_SERVER_ERROR))
    code = error.response["Error"].get("Code", "")
    return code in THROTTLING_CODES or not HTTP_CLIENT_ERROR <= status < HTTP_SERVER_ERROR
