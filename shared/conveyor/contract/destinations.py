"""Destinations: the services jobs call, declared with the limits every worker shares.

A payment gateway allows 50 requests a second per merchant, a partner webhook falls over at 5
concurrent calls. Lambda scales to hundreds of workers in seconds, so these limits only mean
something when every worker draws from the same state: the worker keeps it in DynamoDB
(conveyor.worker.destinations), the stack creates that table and its alarms, and ``conveyor
limits`` reads and overrides it. A destination is declared once, beside the queues::

    Destination(
        "payments",
        rate=RateLimit(50, per=timedelta(seconds=1), burst=10, key="merchant_id"),
        concurrency=20,
        breaker=Breaker(failures=5, cool_down=timedelta(seconds=30)),
        retry_budget=0.1,
    )

and a job type names the destinations it calls (``@job(..., destinations=("payments",))``), or its
handler asks for one explicitly with ``ctx.limit("payments")`` or ``ctx.call("payments", fn)``.
"""

import re
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from conveyor.contract import limits
from conveyor.contract.durations import format_duration
from conveyor.contract.effects import OPERATION_PATTERN, ReconcileHook, effect_name
from conveyor.contract.errors import require

DESTINATION_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
# A payload field named by a per-key limit, as pydantic field names go.
KEY_FIELD_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# A cool-down or breaker window beyond an hour is an outage to page someone about, not to wait out.
MAX_BREAKER_WINDOW = timedelta(hours=1)
# The concurrency a destination can cap at: Lambda's own ceiling on one event source's concurrency
# (conveyor.contract.limits.ESM_MAX_MAX_CONCURRENCY) times the queues that may share it, rounded.
MAX_DESTINATION_CONCURRENCY = 10_000


class BudgetAction(StrEnum):
    """What a transient failure over the retry budget does: dead-letter it, or retry it about a window later."""

    DEAD_LETTER = "dead_letter"
    SNOOZE = "snooze"


@dataclass(frozen=True)
class RateLimit:
    """At most ``rate`` calls per ``per``, in bursts of up to ``burst`` calls, over every worker.

    Over any window of length W, calls stay within ``rate * W / per + burst``: a token bucket of
    ``burst`` tokens refilled at ``rate / per`` (the generic cell rate algorithm). ``burst``
    defaults to 1, the strictest spacing. With ``key``, each value of that payload field (a
    merchant, a tenant) has its own bucket, so one key flooding cannot starve the others.
    """

    rate: int
    per: timedelta = timedelta(seconds=1)
    burst: int = 1
    key: str | None = None

    def check(self, where: str) -> None:
        require(
            isinstance(self.rate, int) and not isinstance(self.rate, bool) and self.rate > 0,
            where,
            f"rate must be a positive whole number of calls, got {self.rate!r}",
        )
        require(self.per > timedelta(0), where, f"rate per must be positive, got {format_duration(self.per)}")
        require(
            isinstance(self.burst, int) and not isinstance(self.burst, bool) and self.burst >= 1,
            where,
            f"burst must be 1 or more, got {self.burst!r}",
        )
        require(
            self.key is None or bool(KEY_FIELD_PATTERN.match(self.key)),
            where,
            f"key must name a payload field, got {self.key!r}",
        )

    @property
    def interval(self) -> timedelta:
        """The time one token takes to refill: ``per / rate``."""
        return self.per / self.rate

    def describe(self) -> str:
        per = "s" if self.per == timedelta(seconds=1) else format_duration(self.per)
        keyed = f" per {self.key}" if self.key else ""
        return f"{self.rate}/{per} burst {self.burst}{keyed}"


@dataclass(frozen=True)
class Breaker:
    """A circuit breaker whose state every worker shares.

    It opens when ``failures`` calls fail within ``window`` (or, with ``error_rate``, when that
    share of at least ``min_calls`` calls in the window fail). While open, jobs that need the
    destination are snoozed without calling it. After ``cool_down`` it lets ``probes`` calls
    through (half-open): a success closes it, a failure opens it for another cool-down. An alarm
    fires when it stays open longer than ``alarm_after``.
    """

    failures: int = 5
    window: timedelta = timedelta(minutes=1)
    cool_down: timedelta = timedelta(seconds=30)
    probes: int = 1
    error_rate: float | None = None
    min_calls: int = 20
    alarm_after: timedelta = timedelta(minutes=5)

    def describe(self) -> str:
        window = format_duration(self.window)
        if self.error_rate is not None:
            return f"breaker at {self.error_rate:.0%} errors of {self.min_calls}+ calls/{window}"
        return f"breaker after {self.failures} failures/{window}"

    def check(self, where: str) -> None:
        require(self.failures >= 1, where, f"breaker failures must be 1 or more, got {self.failures}")
        for name, value in (("window", self.window), ("cool_down", self.cool_down)):
            require(
                timedelta(seconds=1) <= value <= MAX_BREAKER_WINDOW,
                where,
                f"breaker {name} must be between 1s and {format_duration(MAX_BREAKER_WINDOW)}, "
                f"got {format_duration(value)}",
            )
        require(self.probes >= 1, where, f"breaker probes must be 1 or more, got {self.probes}")
        require(
            self.error_rate is None or 0 < self.error_rate <= 1,
            where,
            f"breaker error_rate must lie in (0, 1], got {self.error_rate}",
        )
        require(self.min_calls >= 1, where, f"breaker min_calls must be 1 or more, got {self.min_calls}")
        require(
            timedelta(minutes=1) <= self.alarm_after <= limits.CLOUDWATCH_MAX_SHORT_PERIOD_RANGE,
            where,
            f"breaker alarm_after must be between 1min (its alarm's period) and "
            f"{format_duration(limits.CLOUDWATCH_MAX_SHORT_PERIOD_RANGE)} (the longest CloudWatch evaluates a "
            f"1-minute alarm over), got {format_duration(self.alarm_after)}",
        )


@dataclass(frozen=True)
class Destination:
    """A service jobs call, and the limits every worker shares when calling it.

    ``concurrency`` caps calls in flight at once (slots that expire with the holder's invocation,
    so a worker that dies does not hold one for ever). ``retry_budget`` bounds retries to that share
    of first attempts over ``budget_window``; over it, a transient failure is dead-lettered with
    reason ``retry_budget_exhausted`` (or, with ``over_budget=BudgetAction.SNOOZE``, retried about a
    window later, spending its attempt). ``max_wait`` is how long a worker may wait in process for a
    token, and for a slot, before it snoozes the job instead: Lambda bills waiting as working.
    ``effects`` names the operations jobs record in the effect ledger (``("charge",)`` declares
    ``payments.charge`` for ``ctx.effect``); ``reconcile`` answers, for an effect recorded as intended
    but never confirmed, whether the provider applied it (conveyor.contract.effects, `conveyor reconcile`).
    """

    name: str
    rate: RateLimit | None = None
    concurrency: int | None = None
    breaker: Breaker | None = None
    retry_budget: float | None = None
    budget_window: timedelta = timedelta(minutes=5)
    over_budget: BudgetAction = BudgetAction.DEAD_LETTER
    max_wait: timedelta = timedelta(milliseconds=250)
    effects: tuple[str, ...] = ()
    reconcile: ReconcileHook | None = None

    def __post_init__(self) -> None:
        where = f"destination {self.name!r}"
        require(
            bool(DESTINATION_NAME_PATTERN.match(self.name)),
            where,
            f"name must match {DESTINATION_NAME_PATTERN.pattern}",
        )
        if self.rate is not None:
            self.rate.check(where)
        require(
            self.concurrency is None
            or (not isinstance(self.concurrency, bool) and 1 <= self.concurrency <= MAX_DESTINATION_CONCURRENCY),
            where,
            f"concurrency must be between 1 and {MAX_DESTINATION_CONCURRENCY}, got {self.concurrency!r}",
        )
        if self.breaker is not None:
            self.breaker.check(where)
        check_retry_budget(self.retry_budget, self.budget_window, where)
        require(
            timedelta(0) <= self.max_wait <= timedelta(seconds=5),
            where,
            f"max_wait must be between 0 and 5s, got {format_duration(self.max_wait)}",
        )
        self._check_effects(where)

    def _check_effects(self, where: str) -> None:
        require(
            isinstance(self.effects, tuple),
            where,
            f"effects must be a tuple of operation names, got {self.effects!r}",
        )
        for operation in self.effects:
            require(
                isinstance(operation, str) and bool(OPERATION_PATTERN.match(operation)),
                where,
                f"effect {operation!r} must match {OPERATION_PATTERN.pattern}",
            )
        require(len(set(self.effects)) == len(self.effects), where, "an effect is declared twice")
        require(
            self.reconcile is None or callable(self.reconcile),
            where,
            f"reconcile must be a function of an EffectRecord, got {self.reconcile!r}",
        )
        require(
            self.reconcile is None or bool(self.effects),
            where,
            "reconcile is given but no effects are declared for it to settle",
        )

    @property
    def effect_names(self) -> tuple[str, ...]:
        """The declared effects' full names, ``<destination>.<operation>``, as ``ctx.effect`` takes them."""
        return tuple(effect_name(self.name, operation) for operation in self.effects)

    def describe(self) -> str:
        """One line for `conveyor topology` and `conveyor limits`."""
        parts = [f"rate {self.rate.describe()}" if self.rate else "no rate limit"]
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.breaker is not None:
            parts.append(self.breaker.describe())
        if self.retry_budget is not None:
            parts.append(f"retry budget {self.retry_budget:g}")
        return ", ".join(parts)


def check_retry_budget(budget: float | None, window: timedelta, where: str) -> None:
    """A retry budget is a share of first attempts, in (0, 1], over a window of a minute to an hour."""
    require(
        budget is None or (not isinstance(budget, bool) and 0 < budget <= 1),
        where,
        f"retry_budget must lie in (0, 1], got {budget!r}",
    )
    require(
        timedelta(minutes=1) <= window <= timedelta(hours=1),
        where,
        f"budget_window must be between 1min and 1h, got {format_duration(window)}",
    )
