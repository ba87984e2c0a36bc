"""The destinations' limits as `conveyor limits` reads them, and the changes it and `conveyor breaker` make.

The state is made by the worker's own classes (tokens taken, slots held, failures recorded), on one
clock shared with what reads it, so every number read back is exact.
"""

from datetime import timedelta
from typing import Any

import pytest

from conveyor.contract.destinations import RateLimit
from conveyor.contract.topology import Topology
from conveyor.ops.limits import BudgetUse, Limits
from conveyor.ops.target import Clients, Target, local_target
from conveyor.worker.destinations.breaker import Breakers, BreakerState
from conveyor.worker.destinations.budget import RetryBudgets
from conveyor.worker.destinations.rate import RateBuckets
from conveyor.worker.destinations.slots import Slots
from conveyor.worker.destinations.state import destination_scope, queue_scope
from tests.aws import Aws
from tests.fixtures.limits_topology import EMAIL_RATE, PAYMENTS, WEBHOOKS_BREAKER, WEBHOOKS_CONCURRENCY
from tests.fixtures.limits_topology import TOPOLOGY as LIMITS_TOPOLOGY
from tests.unit.worker.destinations.limits_support import NOW, Clock


@pytest.fixture
def topology() -> Topology:
    return LIMITS_TOPOLOGY


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def target(aws: Aws) -> Target:
    return local_target(LIMITS_TOPOLOGY, Clients())


@pytest.fixture
def limits(target: Target, clock: Clock) -> Limits:
    return Limits(target, LIMITS_TOPOLOGY, clock=clock)


def limits_items(aws: Aws) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = aws.dynamodb.scan(TableName=aws.provisioned.limits_table)["Items"]
    return sorted(found, key=lambda item: str(item["pk"]["S"]))


def test_an_untouched_table_shows_the_declarations_with_full_buckets_and_closed_breakers(limits: Limits) -> None:
    report = limits.read()
    by_name = {entry.declared.name: entry for entry in report.destinations}
    assert list(by_name) == ["payments", "email", "webhooks", "search"]
    assert all(entry.override is None for entry in report.destinations)
    assert by_name["email"].tokens == EMAIL_RATE.burst
    assert by_name["payments"].tokens is None  # one bucket per currency: no one number
    assert (by_name["payments"].slots_in_use, by_name["webhooks"].slots_in_use) == (0, 0)
    webhooks = by_name["webhooks"].breaker
    assert webhooks is not None
    assert webhooks.state is BreakerState.CLOSED
    search = by_name["search"]
    assert (search.tokens, search.slots_in_use, search.breaker, search.budget) == (None, None, None, None)
    assert report.queue_budgets == [
        BudgetUse(scope="queue:default", budget=0.1, window=timedelta(minutes=5), first=0, retries=0)
    ]


def test_the_report_shows_what_workers_took_and_recorded(aws: Aws, limits: Limits, clock: Clock) -> None:
    table = aws.provisioned.limits_table
    rates = RateBuckets(aws.dynamodb, table, clock=clock)
    for _ in range(5):
        assert rates.acquire("email", EMAIL_RATE) == 0
    slots = Slots(aws.dynamodb, table, clock=clock)
    for holder in ("worker-1", "worker-2"):
        assert slots.acquire("webhooks", WEBHOOKS_CONCURRENCY, holder, expires_at=NOW + 60)
    breakers = Breakers(aws.dynamodb, table, clock=clock)
    for _ in range(WEBHOOKS_BREAKER.failures):
        breakers.record("webhooks", WEBHOOKS_BREAKER, ok=False, probe=False)
    budgets = RetryBudgets(aws.dynamodb, table, clock=clock)
    for scope, window in (
        (destination_scope("payments"), PAYMENTS.budget_window),
        (queue_scope("default"), timedelta(minutes=5)),
    ):
        for _ in range(10):
            budgets.count(scope, window, retry=False)
        for _ in range(2):
            budgets.count(scope, window, retry=True)
    budgets.flush()

    report = limits.read()
    by_name = {entry.declared.name: entry for entry in report.destinations}
    assert by_name["email"].tokens == pytest.approx(15)
    assert by_name["webhooks"].slots_in_use == 2
    breaker = by_name["webhooks"].breaker
    assert breaker is not None
    assert breaker.state is BreakerState.OPEN
    assert breaker.open_until == pytest.approx(NOW + WEBHOOKS_BREAKER.cool_down.total_seconds())
    assert by_name["payments"].budget == BudgetUse(
        scope="destination:payments", budget=0.2, window=PAYMENTS.budget_window, first=10, retries=2
    )
    assert [(use.first, use.retries) for use in report.queue_budgets] == [(10, 2)]
    as_dict = report.as_dict()
    assert as_dict["destinations"][1]["tokens"] == pytest.approx(15)
    assert as_dict["destinations"][2]["breaker"]["state"] == "open"


def test_set_limits_overrides_for_every_worker_and_is_audited(limits: Limits, target: Target) -> None:
    change = limits.set_limits("email", rate="20/s", reason="INC-7 provider asked us to slow down")
    assert change.before == {"rate": "100/1h burst 20", "concurrency": None}
    assert change.after == {"rate": "20/s burst 20", "concurrency": None}  # the burst in force is kept
    entry = limits.read().destinations[1]
    assert entry.effective.rate == RateLimit(20, burst=20)
    assert entry.override is not None
    assert entry.override.set_by == target.actor
    [audited] = target.audit().entries()
    assert (audited.id, audited.action, audited.queue, audited.actor) == (
        change.audit_id,
        "limits.set",
        None,
        target.actor,
    )
    assert audited.details == {
        "destination": "email",
        "reason": "INC-7 provider asked us to slow down",
        "before": change.before,
        "after": change.after,
    }


def test_burst_alone_changes_the_burst_of_the_rate_in_force_and_keeps_its_key(limits: Limits) -> None:
    limits.set_limits("payments", rate="600/min")
    limits.set_limits("payments", burst=3, concurrency=4)
    effective = limits.read().destinations[0].effective
    assert effective.rate == RateLimit(600, per=timedelta(minutes=1), burst=3, key="currency")
    assert effective.concurrency == 4


def test_clear_restores_the_declaration_and_is_audited(limits: Limits, target: Target) -> None:
    limits.set_limits("webhooks", concurrency=1, reason="INC-8")
    change = limits.clear_limits("webhooks", reason="INC-8 over")
    assert (change.before, change.after) == ({"rate": None, "concurrency": 1}, {"rate": None, "concurrency": 5})
    assert limits.read().destinations[2].override is None
    # Audit ids order by the millisecond: two changes within one may list either way.
    assert sorted(entry.action for entry in target.audit().entries()) == ["limits.clear", "limits.set"]


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("email", {"rate": "fast"}, "rate 'fast': expected a positive number per s"),
        ("email", {"rate": "0/s"}, "rate '0/s': expected a positive number"),
        ("email", {"rate": "2.5/s"}, "give a whole number of calls"),
        ("email", {"burst": 0}, "burst must be 1 or more, got 0"),
        ("webhooks", {"burst": 2}, "destination 'webhooks' has no rate limit to change the burst of"),
        ("webhooks", {"concurrency": 0}, "concurrency must be between 1 and 10000, got 0"),
        ("webhooks", {"concurrency": 10_001}, "concurrency must be between 1 and 10000, got 10001"),
    ],
)
def test_bad_limits_are_refused_before_anything_is_written(
    aws: Aws, limits: Limits, target: Target, name: str, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        limits.set_limits(name, **changes)
    assert limits_items(aws) == []
    assert target.audit().entries() == []


def test_a_forced_open_breaker_holds_until_its_time_then_closes_and_both_are_audited(
    limits: Limits, target: Target
) -> None:
    change = limits.set_breaker("webhooks", BreakerState.OPEN, reason="INC-9 partner down", for_=timedelta(minutes=10))
    assert (change.before["state"], change.after["state"], change.after["forced"]) == ("closed", "open", True)
    status = limits.read().destinations[2].breaker
    assert status is not None
    assert (status.state, status.reason) == (BreakerState.OPEN, "INC-9 partner down")
    assert status.open_until == pytest.approx(NOW + 600)
    closed = limits.set_breaker("webhooks", BreakerState.CLOSED, reason="INC-9 partner is back")
    assert (closed.before["state"], closed.after["state"], closed.after["forced"]) == ("open", "closed", False)
    assert [entry["to"] for entry in limits.read().destinations[2].history()] == ["open", "closed"]
    audited = {entry.action: entry.details for entry in target.audit().entries()}
    assert {action: (details["destination"], details["reason"]) for action, details in audited.items()} == {
        "breaker.open": ("webhooks", "INC-9 partner down"),
        "breaker.close": ("webhooks", "INC-9 partner is back"),
    }
    assert audited["breaker.close"]["before"] == change.after


def test_a_fresh_breaker_can_be_forced_open_until_closed_or_closed(limits: Limits) -> None:
    assert limits.set_breaker("payments", BreakerState.CLOSED, reason="belt and braces").after["state"] == "closed"
    opened = limits.set_breaker("webhooks", BreakerState.OPEN, reason="until further notice")
    assert (opened.after["state"], opened.after["open_until"], opened.after["forced"]) == ("open", None, True)


def test_a_destination_without_a_breaker_cannot_have_one_forced(aws: Aws, limits: Limits, target: Target) -> None:
    with pytest.raises(ValueError, match="destination 'email' declares no breaker"):
        limits.set_breaker("email", BreakerState.OPEN, reason="x")
    assert limits_items(aws) == []
    assert target.audit().entries() == []
