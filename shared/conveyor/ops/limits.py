"""What `conveyor limits` and `conveyor breaker` read and change: the destinations' shared limits, live.

The state is the workers' own (the limits table, read through the worker's classes), so what this
shows is what the next job will meet. Every change is an override or a forced breaker state that
workers pick up without a deploy, and is recorded in the audit table as pause and resume are.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from conveyor.contract.destinations import Destination, RateLimit
from conveyor.contract.timestamps import utc_text
from conveyor.contract.topology import Topology
from conveyor.ops.rate import parse_rate_as_written
from conveyor.ops.target import Target
from conveyor.worker.destinations.breaker import Breakers, BreakerState, BreakerStatus
from conveyor.worker.destinations.budget import RetryBudgets
from conveyor.worker.destinations.overrides import Override, Overrides
from conveyor.worker.destinations.rate import RateBuckets
from conveyor.worker.destinations.slots import Slots
from conveyor.worker.destinations.state import destination_scope, queue_scope

Clock = Callable[[], float]


def epoch_text(seconds: float | None) -> str | None:
    return None if seconds is None else utc_text(datetime.fromtimestamp(seconds, UTC), timespec="seconds")


def rate_dict(rate: RateLimit | None) -> dict[str, Any] | None:
    if rate is None:
        return None
    return {"rate": rate.rate, "per_s": rate.per.total_seconds(), "burst": rate.burst, "key": rate.key}


@dataclass(frozen=True)
class BudgetUse:
    """Retries against first attempts in the current window of a queue's or a destination's retry budget."""

    scope: str
    budget: float
    window: timedelta
    # The previous window's counts weighted by how much of it the sliding window still covers: fractions.
    first: float
    retries: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "budget": self.budget,
            "window_s": self.window.total_seconds(),
            "first": self.first,
            "retries": self.retries,
        }


@dataclass(frozen=True)
class DestinationLimits:
    """One destination: as declared, as overridden, and the live state of each limit it declares.

    ``tokens`` is None without a rate or with a per-key rate (one bucket per key: no one number);
    ``slots_in_use`` None without a concurrency cap; ``breaker`` None without a breaker.
    """

    declared: Destination
    override: Override | None
    effective: Destination
    tokens: float | None
    slots_in_use: int | None
    breaker: BreakerStatus | None
    budget: BudgetUse | None

    def as_dict(self) -> dict[str, Any]:
        override = self.override
        return {
            "name": self.declared.name,
            "declared": {
                "rate": rate_dict(self.declared.rate),
                "concurrency": self.declared.concurrency,
                "describe": self.declared.describe(),
            },
            "override": None
            if override is None
            else {
                "rate": rate_dict(override.rate),
                "concurrency": override.concurrency,
                "set_by": override.set_by,
                "set_at": epoch_text(override.set_at),
                "reason": override.reason,
            },
            "effective": {"rate": rate_dict(self.effective.rate), "concurrency": self.effective.concurrency},
            "tokens": self.tokens,
            "slots_in_use": self.slots_in_use,
            "breaker": None if self.breaker is None else breaker_dict(self.breaker) | {"history": self.history()},
            "retry_budget": None if self.budget is None else self.budget.as_dict(),
        }

    def history(self) -> list[dict[str, Any]]:
        """The breaker's latest transitions, oldest first: what opened and closed it, automatically or not."""
        return [
            {
                "from": transition.old.value,
                "to": transition.new.value,
                "reason": transition.reason,
                "by": transition.by,
                "at": epoch_text(transition.at),
            }
            for transition in (self.breaker.history if self.breaker else ())
        ]


@dataclass(frozen=True)
class LimitsReport:
    destinations: list[DestinationLimits]
    queue_budgets: list[BudgetUse]

    def as_dict(self) -> dict[str, Any]:
        return {
            "destinations": [entry.as_dict() for entry in self.destinations],
            "queue_budgets": [entry.as_dict() for entry in self.queue_budgets],
        }


@dataclass(frozen=True)
class Change:
    """An operator's change to a destination, as audited: its state before and after."""

    destination: str
    action: str
    before: dict[str, Any]
    after: dict[str, Any]
    audit_id: str

    def as_dict(self) -> dict[str, Any]:
        return vars(self).copy()


def breaker_dict(status: BreakerStatus) -> dict[str, Any]:
    """A breaker's state as the audit keeps it before and after a change (its history is on its item)."""
    return {
        "state": status.state.value,
        "open_until": epoch_text(status.open_until),
        "forced": status.forced,
        "failures": status.failures,
        "reason": status.reason,
        "by": status.by,
        "at": epoch_text(status.at),
    }


class Limits:
    """The limits table through the worker's own classes, for one command."""

    def __init__(self, target: Target, topology: Topology, *, clock: Clock = time.time) -> None:
        dynamodb = target.clients("dynamodb")
        table = target.limits_table
        self._target = target
        self._topology = topology
        self._clock = clock
        self.overrides = Overrides(dynamodb, table, clock=clock)
        self.rates = RateBuckets(dynamodb, table, clock=clock)
        self.slots = Slots(dynamodb, table, clock=clock)
        self.breakers = Breakers(dynamodb, table, clock=clock)
        self.budgets = RetryBudgets(dynamodb, table, clock=clock)

    def read(self) -> LimitsReport:
        return LimitsReport(
            destinations=[self.destination(declared) for declared in self._topology.destinations],
            queue_budgets=[
                self._budget(queue_scope(queue.name), queue.retry_budget, queue.budget_window)
                for queue in self._topology.queues
                if queue.retry_budget is not None
            ],
        )

    def destination(self, declared: Destination) -> DestinationLimits:
        override = self.overrides.get(declared.name)
        effective = self.overrides.effective(declared)
        rate = effective.rate
        return DestinationLimits(
            declared=declared,
            override=override,
            effective=effective,
            tokens=self.rates.peek(declared.name, rate) if rate is not None and rate.key is None else None,
            slots_in_use=self.slots.in_use(declared.name) if effective.concurrency is not None else None,
            breaker=self.breakers.read(declared.name) if declared.breaker is not None else None,
            budget=None
            if declared.retry_budget is None
            else self._budget(destination_scope(declared.name), declared.retry_budget, declared.budget_window),
        )

    def _budget(self, scope: str, budget: float, window: timedelta) -> BudgetUse:
        usage = self.budgets.usage(scope, window)
        return BudgetUse(scope=scope, budget=budget, window=window, first=usage.first, retries=usage.retries)

    def set_limits(
        self,
        name: str,
        *,
        rate: str | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
        reason: str | None = None,
    ) -> Change:
        """Override the rate (``"20/s"``), its burst and/or the concurrency; ValueError, before any write, if bad.

        A rate without ``burst`` keeps the burst in force, and ``burst`` alone changes only the burst of
        the rate in force: an operator easing one knob should not silently reset another.
        """
        declared = self._topology.destination(name)
        before = self.overrides.effective(declared)
        new_rate = _rate(rate, burst, before.rate, name)
        self.overrides.set(declared, rate=new_rate, concurrency=concurrency, by=self._target.actor, reason=reason)
        return self._record(
            "limits.set", name, reason, _limits_dict(before), _limits_dict(self.overrides.effective(declared))
        )

    def clear_limits(self, name: str, *, reason: str | None = None) -> Change:
        declared = self._topology.destination(name)
        before = self.overrides.effective(declared)
        self.overrides.clear(name)
        return self._record("limits.clear", name, reason, _limits_dict(before), _limits_dict(declared))

    def set_breaker(self, name: str, state: BreakerState, *, reason: str, for_: timedelta | None = None) -> Change:
        """Force the breaker open (for ``for_``, or until closed) or closed; ValueError if none is declared."""
        declared = self._topology.destination(name)
        if declared.breaker is None:
            raise ValueError(f"destination {name!r} declares no breaker, so workers would not consult one")
        before = breaker_dict(self.breakers.read(name))
        until = self._clock() + for_.total_seconds() if for_ is not None else None
        self.breakers.force(name, state, reason=reason, by=self._target.actor, until=until)
        action = f"breaker.{'close' if state is BreakerState.CLOSED else 'open'}"
        return self._record(action, name, reason, before, breaker_dict(self.breakers.read(name)))

    def _record(
        self, action: str, name: str, reason: str | None, before: dict[str, Any], after: dict[str, Any]
    ) -> Change:
        """The audit row of a change, shaped as pause's: who (the audit's actor), what, why, before and after."""
        details = {"destination": name, "reason": reason, "before": before, "after": after}
        entry = self._target.audit().record(action, queue=None, details=details)
        return Change(destination=name, action=action, before=before, after=after, audit_id=entry.id)


def _limits_dict(destination: Destination) -> dict[str, Any]:
    return {
        "rate": destination.rate.describe() if destination.rate else None,
        "concurrency": destination.concurrency,
    }


def _rate(text: str | None, burst: int | None, current: RateLimit | None, name: str) -> RateLimit | None:
    """The rate an override sets from ``--rate`` and ``--burst``, on top of the rate in force."""
    if text is None:
        if burst is None:
            return None
        if current is None:
            raise ValueError(f"destination {name!r} has no rate limit to change the burst of; give a rate too")
        return replace(current, burst=burst)
    count, per_s = parse_rate_as_written(text)
    if not count.is_integer():
        raise ValueError(f"rate {text!r}: give a whole number of calls, per a longer unit if need be (e.g. 150/min)")
    limit = RateLimit(int(count), per=timedelta(seconds=per_s))
    if burst is not None:
        return replace(limit, burst=burst)
    return replace(limit, burst=current.burst) if current else limit
