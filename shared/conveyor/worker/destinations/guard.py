"""A job's way through its destinations' shared limits: breaker, slot and token, then the call's outcome.

``DestinationLimits`` is built once per worker from the topology; ``guard()`` makes a ``JobGuard``
per run, which the harness puts on the job's context (``ctx.limit``, ``ctx.call``) and uses for the
destinations the job type declares:

- A declared destination is taken before the handler runs, so a job never half-runs because its
  second call is limited: the breaker admits it, it holds one concurrency slot for the whole run
  and takes one token. The job then counts as one call, whose outcome is the handler's.
- ``ctx.limit(name)`` / ``ctx.call(name, fn)`` take a token per block (the first block of a declared
  destination uses the token taken before the run) and, for an undeclared destination, a slot for
  the block; each block is one call with its own outcome.

What cannot be had within the destination's ``max_wait`` raises ``Throttled``, which the harness turns
into a snooze: the job goes back to its queue with a delay, no attempt spent. The delay is the
bucket's refill time (or the breaker's cool-down) with jitter, so snoozed jobs do not return in a herd.
"""

import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from conveyor.contract.declarations import JobType, Queue
from conveyor.contract.destinations import BudgetAction, Destination
from conveyor.contract.errors import Discard, Snooze, Throttled
from conveyor.contract.reasons import SnoozeReason
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.worker.classify import FailureKind, classify
from conveyor.worker.destinations.breaker import Breakers, BreakerState, Transition
from conveyor.worker.destinations.budget import RetryBudgets
from conveyor.worker.destinations.metrics import DestinationMetrics
from conveyor.worker.destinations.overrides import Overrides
from conveyor.worker.destinations.rate import RateBuckets
from conveyor.worker.destinations.slots import Slots
from conveyor.worker.destinations.state import destination_scope, queue_scope

logger = Logger(service=SERVICE_NAME)
T = TypeVar("T")

# Failures that say the service is struggling. A permanent failure (a 4xx, a declined card) is the
# request's fault, and an unexpected exception is most likely the job's own bug: neither opens a breaker.
SERVICE_FAILURES = frozenset(
    {FailureKind.RETRYABLE, FailureKind.TIMEOUT, FailureKind.THROTTLED, FailureKind.UNAVAILABLE}
)
# A full slot gives no hint of when one frees; come back after about this long, jittered.
SLOT_SNOOZE = timedelta(seconds=5)
# How often a worker looks for a free slot while it may still wait (within max_wait).
SLOT_POLL_S = 0.05
# SQS delays in whole seconds: a snooze shorter than this would come straight back.
MIN_SNOOZE = timedelta(seconds=1)
# When the limits table itself fails, the job comes back after about this long, jittered.
TABLE_SNOOZE = timedelta(seconds=2)
# A slot outlives its holder's deadline by this much: long enough for the harness's own calls after
# the job, short enough that a worker which died frees it soon after its invocation would have ended.
SLOT_MARGIN_S = 5.0


def _jittered(base: timedelta, rng: random.Random) -> timedelta:
    """``base`` plus up to as much again, at least MIN_SNOOZE: snoozed jobs spread over the refill."""
    seconds = max(MIN_SNOOZE.total_seconds(), base.total_seconds())
    return timedelta(seconds=rng.uniform(seconds, 2 * seconds))


@dataclass(frozen=True)
class OverBudget:
    """A retry budget a retry would break: its scope, what the declaration does then, and its window."""

    scope: str
    action: BudgetAction
    window: timedelta


class DestinationLimits:
    """One worker's clients of the shared state: rate buckets, slots, breakers, budgets and overrides."""

    def __init__(
        self,
        topology: Topology,
        queue: Queue,
        *,
        dynamodb_client: Any,
        table: str,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._topology = topology
        self._queue = queue
        self._clock = clock
        self._rng = rng or random.SystemRandom()
        self._sleep = sleep
        self.metrics = DestinationMetrics()
        self.rates = RateBuckets(dynamodb_client, table, clock=clock)
        self.slots = Slots(dynamodb_client, table, clock=clock)
        self.breakers = Breakers(dynamodb_client, table, clock=clock, on_transition=self._transitioned)
        self.budgets = RetryBudgets(dynamodb_client, table, clock=clock)
        self.overrides = Overrides(dynamodb_client, table, clock=clock)

    def guard(self, job_type: JobType[Any], payload: BaseModel, *, job_id: str, deadline: float) -> "JobGuard":
        """The guard of one run; ``deadline`` (epoch seconds) is when its invocation ends, for slot expiry."""
        return JobGuard(self, job_type, payload, job_id=job_id, deadline=deadline)

    def destination(self, name: str) -> Destination:
        """The declaration with an operator's override applied (read at most every OVERRIDE_REFRESH_S)."""
        return self.overrides.effective(self._topology.destination(name))

    def admit_retry(self, job_type: JobType[Any], used: frozenset[str]) -> "OverBudget | None":
        """Ask every budget a retry of this job falls under; count the retry unless one refuses it.

        The retry is counted when it is scheduled, not when it runs, so a burst of failures cannot all
        pass the check before any of their retries is counted. A budget declared to wait (BudgetAction.SNOOZE)
        lets the retry through, later: it is counted and returned, for the harness to delay it.
        """
        scopes = self._budget_scopes(job_type, used)
        refusing = [
            OverBudget(scope, action, window)
            for scope, budget, window, action in scopes
            if not self.budgets.allows_retry(scope, budget, window)
        ]
        # A budget declared to dead-letter outranks one declared to wait.
        over = min(refusing, key=lambda o: o.action is not BudgetAction.DEAD_LETTER, default=None)
        if over is None or over.action is BudgetAction.SNOOZE:
            for scope, _, window, _ in scopes:
                self.budgets.count(scope, window, retry=True)
        return over

    def count_first(self, job_type: JobType[Any], used: frozenset[str]) -> None:
        """Count a first attempt that reached its handler in every budget it falls under."""
        for scope, _, window, _ in self._budget_scopes(job_type, used):
            self.budgets.count(scope, window, retry=False)

    def _budget_scopes(
        self, job_type: JobType[Any], used: frozenset[str]
    ) -> list[tuple[str, float, timedelta, BudgetAction]]:
        """(scope, budget, window, action) of the queue's budget and of each destination the run used that has one."""
        scopes = []
        if self._queue.retry_budget is not None:
            scope = queue_scope(self._queue.name)
            scopes.append((scope, self._queue.retry_budget, self._queue.budget_window, BudgetAction.DEAD_LETTER))
        for name in sorted(used):
            destination = self._topology.destination(name)
            if destination.retry_budget is not None:
                scopes.append(
                    (
                        destination_scope(name),
                        destination.retry_budget,
                        destination.budget_window,
                        destination.over_budget,
                    )
                )
        return scopes

    def flush(self) -> None:
        """After each batch: the budgets' counts in one write per scope, and the metrics."""
        try:
            self.budgets.flush()
        finally:
            self.metrics.flush()

    def budget_delay(self, over: "OverBudget") -> timedelta:
        """How long a retry over a budget declared to wait waits: about one budget window, jittered."""
        return _jittered(over.window, self._rng)

    def _transitioned(self, transition: Transition) -> None:
        """Every breaker transition this worker made: one log line and the breaker's metric."""
        logger.warning(
            "breaker changed state",
            extra={
                "destination": transition.destination,
                "breaker_from": transition.old.value,
                "breaker_to": transition.new.value,
                "reason": transition.reason,
            },
        )
        self.metrics.breaker_open(transition.destination, is_open=transition.new is not BreakerState.CLOSED)

    def throttle(self, reason: SnoozeReason, destination: str, wait: timedelta) -> Throttled:
        self.metrics.throttled(destination, reason.value)
        if reason is SnoozeReason.BREAKER_OPEN:
            self.metrics.breaker_open(destination, is_open=True)
        return Throttled(reason, destination, _jittered(wait, self._rng))

    def wait_within(self, destination: Destination, waited: float, wait: float, deadline: float) -> bool:
        """Sleep ``wait`` more seconds if, with the ``waited`` already, that fits the destination's max_wait
        and ends before ``deadline``: the wait is bounded by what was slept, whatever the clock says."""
        if waited + wait > destination.max_wait.total_seconds() or self._clock() + wait >= deadline:
            return False
        self._sleep(wait)
        return True


@dataclass
class _Held:
    """A destination this run holds (as in force when taken): its slot, whether the pre-run token is unused, a probe."""

    destination: Destination
    slot: str | None
    token_unused: bool = True
    probe: bool = False
    calls: int = 0


@dataclass
class JobGuard:
    """One run's limits: the Guard a JobContext delegates ``limit`` and ``call`` to."""

    limits: DestinationLimits
    job_type: JobType[Any]
    payload: BaseModel
    job_id: str
    deadline: float
    _held: dict[str, _Held] = field(default_factory=dict)
    _used: set[str] = field(default_factory=set)

    @property
    def used(self) -> frozenset[str]:
        """Every destination this run called, declared or not."""
        return frozenset(self._used | set(self.job_type.destinations))

    @contextmanager
    def declared(self) -> Iterator[None]:
        """Around the handler: take every declared destination first, and record the run as their call.

        Nothing is taken if one cannot be had: what was already held is released before ``Throttled``
        leaves, so a snoozed job holds no slot while it waits. (A job declaring two destinations whose
        breakers are both half-open may take the first's probe and be refused by the second; that
        probe is handed out again once it times out, conveyor.worker.destinations.breaker.)
        """
        with ExitStack() as held:
            for name in self.job_type.destinations:
                held.enter_context(self._hold(name))
            # The breakers last, once every slot and token is had: a half-open probe permit taken before a
            # limit refused the job would be held by no one until it expired.
            for name in self.job_type.destinations:
                self._held[name].probe = self._admit(self._held[name].destination)
            started = time.monotonic()
            try:
                yield
            except Snooze:
                raise
            except BaseException as error:
                self._record_declared(error, time.monotonic() - started)
                raise
            self._record_declared(None, time.monotonic() - started)

    def _record_declared(self, error: BaseException | None, seconds: float) -> None:
        """The run's outcome as one call of each declared destination it did not call through ctx.call."""
        for name in self.job_type.destinations:
            held = self._held[name]
            if held.calls == 0:
                self._outcome(held.destination, error, seconds, probe=held.probe)

    @contextmanager
    def _hold(self, name: str) -> Iterator[None]:
        """The slot and one token of a declared destination, held until the run ends."""
        destination = self.limits.destination(name)
        slot = self._take_slot(destination)
        try:
            self._take_token(destination, None)
            self._held[name] = _Held(destination, slot=slot)
            yield
        finally:
            self._release(destination, slot)

    @contextmanager
    def limit(self, destination: str, *, key: str | None = None) -> Iterator[None]:
        held = self._held.get(destination)
        declaration = held.destination if held else self.limits.destination(destination)
        self._used.add(destination)  # once known declared: the budgets read every destination used
        slot = None if held else self._take_slot(declaration)
        try:
            if held and held.token_unused and key is None:
                held.token_unused = False
            else:
                self._take_token(declaration, key)
            if held:  # admitted before the run: its first call is the probe, if it was one
                probe, held.probe = held.probe, False
                held.calls += 1
            else:
                probe = self._admit(declaration)
            started = time.monotonic()
            try:
                yield
            except Snooze:
                raise
            except BaseException as error:
                self._outcome(declaration, error, time.monotonic() - started, probe=probe)
                raise
            self._outcome(declaration, None, time.monotonic() - started, probe=probe)
        finally:
            self._release(declaration, slot)

    def call(self, destination: str, fn: Callable[[], T], *, key: str | None = None) -> T:
        with self.limit(destination, key=key):
            return fn()

    def _admit(self, destination: Destination) -> bool:
        """Through the breaker, or Throttled: True when this call is a half-open probe."""
        if destination.breaker is None:
            return False
        admission = self.limits.breakers.admit(destination.name, destination.breaker)
        if not admission.allowed:
            raise self.limits.throttle(
                SnoozeReason.BREAKER_OPEN, destination.name, timedelta(seconds=admission.retry_after)
            )
        return admission.probe

    def _take_slot(self, destination: Destination) -> str | None:
        cap = destination.concurrency
        if cap is None:
            return None
        holder = f"{self.job_id}#{uuid.uuid4().hex[:12]}"
        expires_at = self.deadline + SLOT_MARGIN_S

        def acquire() -> bool:
            return self.limits.slots.acquire(destination.name, cap, holder, expires_at=expires_at)

        waited = 0.0
        while not self._limits_table(SnoozeReason.CONCURRENCY_LIMITED, destination, acquire):
            if not self.limits.wait_within(destination, waited, SLOT_POLL_S, self.deadline):
                raise self.limits.throttle(SnoozeReason.CONCURRENCY_LIMITED, destination.name, SLOT_SNOOZE)
            waited += SLOT_POLL_S
        return holder

    def _take_token(self, destination: Destination, key: str | None) -> None:
        rate = destination.rate
        if rate is None:
            return
        if key is None and rate.key is not None:  # a payload without the value shares the destination's bucket
            found = getattr(self.payload, rate.key, None)
            key = None if found is None else str(found)
        waited = 0.0
        while (
            wait := self._limits_table(
                SnoozeReason.RATE_LIMITED,
                destination,
                lambda: self.limits.rates.acquire(destination.name, rate, key_value=key),
            )
        ) > 0:
            if not self.limits.wait_within(destination, waited, wait, self.deadline):
                raise self.limits.throttle(SnoozeReason.RATE_LIMITED, destination.name, timedelta(seconds=wait))
            waited += wait

    def _limits_table(self, reason: SnoozeReason, destination: Destination, take: Callable[[], T]) -> T:
        """``take()`` from the limits table; when the table fails (throttled, unreachable), Throttled.

        Neither failing open (calling a service whose limit cannot be read) nor spending an attempt
        on the table's trouble: the job is snoozed, before its handler ran, for a short while.
        """
        try:
            return take()
        except (ClientError, BotoCoreError) as error:
            logger.warning(
                "limits table unavailable; job snoozed", extra={"destination": destination.name}, exc_info=error
            )
            raise self.limits.throttle(reason, destination.name, TABLE_SNOOZE) from error

    def _release(self, destination: Destination, slot: str | None) -> None:
        if slot is not None:
            self.limits.slots.release(destination.name, slot)

    def _outcome(self, destination: Destination, error: BaseException | None, seconds: float, *, probe: bool) -> None:
        """One call's outcome: its metrics, and the breaker's count when the service failed it.

        A Discard is the job's decision, never the service failing, whatever ``retry_on`` lists: a success.
        """
        failed = (
            error is not None and not isinstance(error, Discard) and classify(error, self.job_type) in SERVICE_FAILURES
        )
        self.limits.metrics.call(destination.name, failed=failed, seconds=seconds)
        if destination.breaker is not None:
            self.limits.breakers.record(destination.name, destination.breaker, ok=not failed, probe=probe)
