"""Overrides: what `conveyor limits set` writes and every worker applies instead of the declaration."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from conveyor.contract.destinations import MAX_DESTINATION_CONCURRENCY, RateLimit
from conveyor.contract.topology import Topology
from conveyor.worker.destinations.overrides import Override, Overrides
from conveyor.worker.destinations.state import OVERRIDE_REFRESH_S
from tests.aws import Aws
from tests.fixtures.limits_topology import EMAIL, PAYMENTS, SEARCH
from tests.fixtures.limits_topology import TOPOLOGY as LIMITS_TOPOLOGY
from tests.unit.worker.destinations.limits_support import NOW, Clock


@pytest.fixture
def topology() -> Topology:
    return LIMITS_TOPOLOGY


@pytest.fixture
def overrides(aws: Aws, clock: Clock) -> Overrides:
    return Overrides(aws.dynamodb, aws.provisioned.limits_table, clock=clock)


def items(aws: Aws) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = aws.dynamodb.scan(TableName=aws.provisioned.limits_table)["Items"]
    return found


def test_without_an_override_the_declaration_applies(overrides: Overrides) -> None:
    assert overrides.get("payments") is None
    assert overrides.effective(PAYMENTS) is PAYMENTS


def test_a_rate_override_keeps_the_declared_key_and_the_concurrency(overrides: Overrides) -> None:
    set_ = overrides.set(PAYMENTS, rate=RateLimit(20, burst=5), by="ops@example", reason="INC-1")
    assert set_ == Override(
        rate=RateLimit(20, burst=5), concurrency=None, set_by="ops@example", set_at=NOW, reason="INC-1"
    )
    effective = overrides.effective(PAYMENTS)
    assert effective.rate == RateLimit(20, burst=5, key="currency")
    assert effective.concurrency == PAYMENTS.concurrency
    assert effective.breaker == PAYMENTS.breaker


def test_a_rate_per_minute_is_kept_as_written(overrides: Overrides) -> None:
    overrides.set(EMAIL, rate=RateLimit(600, per=timedelta(minutes=1), burst=3), by="ops")
    assert overrides.effective(EMAIL).rate == RateLimit(600, per=timedelta(minutes=1), burst=3)


def test_a_destination_without_a_declared_rate_can_be_given_one(overrides: Overrides) -> None:
    overrides.set(SEARCH, rate=RateLimit(5), concurrency=2, by="ops")
    assert overrides.effective(SEARCH) == replace(SEARCH, rate=RateLimit(5), concurrency=2)


def test_a_later_override_keeps_what_it_does_not_change_and_its_own_reason_only(
    overrides: Overrides, clock: Clock
) -> None:
    overrides.set(PAYMENTS, rate=RateLimit(20), by="alice", reason="INC-1")
    clock.now += 60
    later = overrides.set(PAYMENTS, concurrency=3, by="bob")
    assert later == Override(rate=RateLimit(20), concurrency=3, set_by="bob", set_at=NOW + 60, reason=None)
    assert overrides.effective(PAYMENTS) == replace(PAYMENTS, rate=RateLimit(20, key="currency"), concurrency=3)


def test_clear_restores_the_declaration_and_leaves_no_item(aws: Aws, overrides: Overrides) -> None:
    overrides.clear("email")  # never overridden
    assert items(aws) == []
    overrides.set(EMAIL, concurrency=4, by="ops")
    overrides.clear("email")
    assert overrides.get("email") is None
    assert Overrides(aws.dynamodb, aws.provisioned.limits_table).get("email") is None  # not just this cache
    assert overrides.effective(EMAIL) is EMAIL


@pytest.mark.parametrize(
    ("rate", "concurrency", "message"),
    [
        (RateLimit(0), None, "rate must be a positive whole number of calls, got 0"),
        (RateLimit(5, burst=0), None, "burst must be 1 or more, got 0"),
        (RateLimit(5, per=timedelta(0)), None, "rate per must be positive"),
        (None, 0, f"concurrency must be between 1 and {MAX_DESTINATION_CONCURRENCY}, got 0"),
        (None, MAX_DESTINATION_CONCURRENCY + 1, f"got {MAX_DESTINATION_CONCURRENCY + 1}"),
        (None, None, "nothing to override"),
    ],
)
def test_an_override_the_declaration_would_refuse_is_refused_and_nothing_is_written(
    aws: Aws, overrides: Overrides, rate: RateLimit | None, concurrency: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as raised:  # a DeclarationError where the declaration refuses
        overrides.set(PAYMENTS, rate=rate, concurrency=concurrency, by="ops")
    assert str(raised.value).startswith("destination 'payments': ")
    assert items(aws) == []


def test_a_worker_reads_an_override_at_most_once_per_refresh(aws: Aws, clock: Clock) -> None:
    reads: list[str] = []
    aws.dynamodb.meta.events.register(
        "before-parameter-build.dynamodb.GetItem", lambda params, **_: reads.append(params["Key"]["pk"]["S"])
    )
    worker = Overrides(aws.dynamodb, aws.provisioned.limits_table, clock=clock)
    operator = Overrides(aws.dynamodb, aws.provisioned.limits_table, clock=clock)
    for _ in range(50):
        worker.effective(PAYMENTS)
        worker.get("email")
    assert reads == ["override#payments", "override#email"]

    operator.set(PAYMENTS, concurrency=7, by="ops")
    clock.now += OVERRIDE_REFRESH_S - 0.1
    assert worker.effective(PAYMENTS).concurrency == PAYMENTS.concurrency  # still the copy it read
    clock.now += 0.1
    for _ in range(50):
        assert worker.effective(PAYMENTS).concurrency == 7
    assert reads == ["override#payments", "override#email", "override#payments"]
