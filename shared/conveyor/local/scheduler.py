"""EventBridge Scheduler, emulated: the declared schedules fire on the local runtime's clock.

moto stores schedules but never fires them, so locally this stands in for Scheduler. It reads
the declarations the stack deploys and sends what Scheduler would send: each shard's target
input (``schedule_input``) with the context attributes filled in (``render_input``), to the job's
queue. What it shares with the cloud, it takes from ``conveyor.contract.schedules``:

- cron, rate and at expressions in the schedule's time zone, with EventBridge's DST rules;
- each shard is its own schedule, so each gets its own random delay within the flexible window;
- like a schedule created when the emulator starts, nothing scheduled before the start fires, and
  a rate fires at the start (Scheduler invokes a new rate schedule at once, then every period);
- at least once: a send that fails is tried again on the next tick.

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
from conveyor.contract.schedule_inputs import render_input, schedule_input
from conveyor.contract.schedules import Schedule
from conveyor.contract.topology import Topology
from conveyor.local.provision import ProvisionedQueue
from conveyor.worker.schedule_runs import shards_of

log = logging.getLogger(__name__)

TICK_S = 1.0
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


@dataclass(frozen=True)
class _Target:
    """One shard's Scheduler schedule: its templated input, its ARN, the queue it sends to."""

    schedule: Schedule
    shard: int | None
    template: str
    arn: str
    queue_url: str


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
    ) -> None:
        self.clock = clock or ScheduleClock()
        self._sqs = sqs
        self._rng = rng or random.SystemRandom()
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
                    )
                )
        # Whole seconds, as Scheduler reports times; a rate schedule counts its periods from here.
        self.started_at = self.clock().replace(microsecond=0)
        self._cursor = self.started_at - _JUST_BEFORE
        self._pending: list[Firing] = []
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
                except (BotoCoreError, ClientError):
                    log.warning(
                        "could not send %s at %s (shard %s); trying again on the next tick",
                        firing.schedule,
                        firing.scheduled_time,
                        firing.shard,
                        exc_info=True,
                    )
                    continue
                self._pending.remove(firing)
                sent.append(firing)
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

    def _firing(self, target: _Target, moment: datetime, *, delay: timedelta) -> Firing:
        return Firing(
            schedule=target.schedule.name,
            scheduled_time=moment,
            shard=target.shard,
            due=moment + delay,
            queue_url=target.queue_url,
            body=render_input(target.template, moment, target.arn),
        )

    def _run(self) -> None:
        while not self._stopping.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # the emulator outlives a failed tick, as Scheduler outlives a failed invocation
                log.exception("the local scheduler's tick failed; ticking on")
