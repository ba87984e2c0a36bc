"""Leases: one holder at a time, taken over after expiry, and a stale holder fenced out of commits.

Runs on in-process moto with an injected clock, so expiry is a step of the clock, not a sleep.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from conveyor.contract import naming
from conveyor.contract.errors import TransactionConditionError
from conveyor.worker import lease
from conveyor.worker.lease import Leases
from conveyor.worker.lease_values import InvalidLeaseError, Lease, LeaseLostError

LEASES = naming.table_name(naming.LEASES_TABLE)
REPORTS = "conveyor-reports"  # a resource the lease protects
NAME = "nightly-report"
TTL = timedelta(seconds=30)
START = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb")
        for table, key in ((LEASES, lease.KEY), (REPORTS, "report_id")):
            client.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        yield client


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def leases(dynamodb: Any, clock: Clock) -> Leases:
    return Leases(dynamodb, LEASES, clock=clock)


def acquired(leases: Leases, holder: str) -> Lease:
    held = leases.acquire(NAME, holder, TTL)
    assert held is not None
    return held


def put_report(report_id: str, token: int) -> dict[str, Any]:
    """The protected write; it also stores the token on the resource, refusing an older holder."""
    return {
        "Put": {
            "TableName": REPORTS,
            "Item": {"report_id": {"S": report_id}, "fence": {"N": str(token)}},
            "ConditionExpression": "attribute_not_exists(fence) OR fence <= :token",
            "ExpressionAttributeValues": {":token": {"N": str(token)}},
        }
    }


def reports(dynamodb: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = dynamodb.scan(TableName=REPORTS)["Items"]
    return items


def test_a_free_lease_is_acquired_with_the_first_token(dynamodb: Any, leases: Leases) -> None:
    held = acquired(leases, "worker-a")
    assert (held.name, held.holder, held.token) == (NAME, "worker-a", 1)
    assert (held.acquired_at, held.expires_at) == (START, START + TTL)
    assert leases.current(NAME) == held
    item = dynamodb.get_item(TableName=LEASES, Key={lease.KEY: {"S": NAME}})["Item"]
    assert item[lease.HOLDER] == {"S": "worker-a"}
    assert item[lease.TOKEN] == {"N": "1"}
    assert item[lease.EXPIRES_AT] == {"N": str(int((START + TTL).timestamp()))}
    assert item[lease.ACQUIRED_AT] == {"S": "2026-03-29T01:00:00Z"}


def test_a_second_holder_is_refused_while_the_lease_is_live(leases: Leases, clock: Clock) -> None:
    held = acquired(leases, "worker-a")
    clock.advance(TTL - timedelta(seconds=1))
    assert leases.acquire(NAME, "worker-b", TTL) is None
    assert leases.current(NAME) == held


def test_acquiring_a_lease_already_held_extends_it_and_keeps_the_token(leases: Leases, clock: Clock) -> None:
    first = acquired(leases, "worker-a")
    clock.advance(timedelta(seconds=10))
    again = acquired(leases, "worker-a")
    assert (again.token, again.acquired_at, again.expires_at) == (first.token, START, clock.now + TTL)


def test_renew_extends_the_lease_past_its_first_expiry(leases: Leases, clock: Clock) -> None:
    held = acquired(leases, "worker-a")
    clock.advance(timedelta(seconds=20))
    renewed = leases.renew(held, TTL)
    assert (renewed.token, renewed.expires_at) == (held.token, clock.now + TTL)
    clock.advance(timedelta(seconds=20))  # past the first expiry, within the renewed one
    assert leases.acquire(NAME, "worker-b", TTL) is None
    assert leases.current(NAME) == renewed


def test_an_expired_lease_is_taken_over_and_its_stale_holder_is_fenced(
    dynamodb: Any, leases: Leases, clock: Clock
) -> None:
    stale = acquired(leases, "worker-a")
    clock.advance(TTL)
    assert leases.current(NAME) is None
    fresh = acquired(leases, "worker-b")
    assert fresh.token > stale.token

    with pytest.raises(LeaseLostError, match=r"renew: .* was taken over by 'worker-b' \(token 2\)") as lost:
        leases.renew(stale, TTL)
    assert lost.value.lease == stale

    with pytest.raises(LeaseLostError, match=r"fenced_write: .* taken over by 'worker-b'.*nothing was written"):
        leases.fenced_write(stale, [put_report("r-1", stale.token)])
    assert reports(dynamodb) == []

    leases.fenced_write(fresh, [put_report("r-1", fresh.token)])
    assert reports(dynamodb) == [{"report_id": {"S": "r-1"}, "fence": {"N": "2"}}]
    assert leases.current(NAME) == fresh


def test_a_holder_past_its_expiry_cannot_commit_until_it_renews(dynamodb: Any, leases: Leases, clock: Clock) -> None:
    held = acquired(leases, "worker-a")
    clock.advance(TTL)
    with pytest.raises(LeaseLostError, match=r"expired at 2026-03-29T01:00:30\+00:00; renew it before committing"):
        leases.fenced_write(held, [put_report("r-1", held.token)])
    assert reports(dynamodb) == []
    # Nobody took it over, so no other holder can have acted: renewing it is safe.
    renewed = leases.renew(held, TTL)
    leases.fenced_write(renewed, [put_report("r-1", renewed.token)])
    assert len(reports(dynamodb)) == 1


def test_the_token_stored_on_the_resource_refuses_an_older_holder(dynamodb: Any, leases: Leases, clock: Clock) -> None:
    stale = acquired(leases, "worker-a")
    clock.advance(TTL)
    fresh = acquired(leases, "worker-b")
    dynamodb.put_item(**put_report("r-1", fresh.token)["Put"])
    # A resource written outside the fence transaction still refuses the stale holder's token.
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
        dynamodb.put_item(**put_report("r-1", stale.token)["Put"])
    assert reports(dynamodb) == [{"report_id": {"S": "r-1"}, "fence": {"N": "2"}}]


def test_fence_condition_guards_a_write_to_the_lease_item_itself(dynamodb: Any, leases: Leases, clock: Clock) -> None:
    stale = acquired(leases, "worker-a")

    def save_progress(held: Lease, row: str) -> None:
        condition = leases.fence_condition(held)
        dynamodb.update_item(
            TableName=LEASES,
            Key={lease.KEY: {"S": NAME}},
            UpdateExpression="SET last_row = :row",
            ConditionExpression=condition.expression,
            ExpressionAttributeNames=dict(condition.names),
            ExpressionAttributeValues={**condition.values, ":row": {"S": row}},
        )

    save_progress(stale, "row-100")
    clock.advance(TTL)
    fresh = acquired(leases, "worker-b")
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
        save_progress(stale, "row-200")
    save_progress(fresh, "row-150")
    item = dynamodb.get_item(TableName=LEASES, Key={lease.KEY: {"S": NAME}})["Item"]
    assert item["last_row"] == {"S": "row-150"}


def test_a_failed_write_condition_is_not_a_lost_lease(dynamodb: Any, leases: Leases) -> None:
    held = acquired(leases, "worker-a")
    dynamodb.put_item(**put_report("r-1", held.token + 1)["Put"])
    with pytest.raises(TransactionConditionError, match="write 1: ConditionalCheckFailed") as raised:
        leases.fenced_write(held, [put_report("r-2", held.token), put_report("r-1", held.token)])
    assert raised.value.failed_writes == {1: "ConditionalCheckFailed"}
    assert [item["report_id"]["S"] for item in reports(dynamodb)] == ["r-1"]


def test_a_released_lease_is_acquired_again_with_a_higher_token(leases: Leases) -> None:
    first = acquired(leases, "worker-a")
    assert leases.release(first) is True
    assert leases.current(NAME) is None
    again = acquired(leases, "worker-a")
    assert again.token == first.token + 1
    with pytest.raises(LeaseLostError, match=r"renew: lease 'nightly-report' of 'worker-a' \(token 1\)"):
        leases.renew(first, TTL)


def test_renewing_a_released_lease_raises_lease_lost(leases: Leases) -> None:
    held = acquired(leases, "worker-a")
    leases.release(held)
    with pytest.raises(LeaseLostError, match="is no longer held by anyone"):
        leases.renew(held, TTL)


def test_releasing_a_lost_lease_returns_false_and_leaves_the_new_holder(leases: Leases, clock: Clock) -> None:
    stale = acquired(leases, "worker-a")
    clock.advance(TTL)
    fresh = acquired(leases, "worker-b")
    assert leases.release(stale) is False
    assert leases.current(NAME) == fresh
    assert leases.release(fresh) is True
    assert leases.release(fresh) is False


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=4), timedelta(hours=1, seconds=1)])
def test_a_ttl_out_of_range_fails_before_any_call(dynamodb: Any, leases: Leases, ttl: timedelta) -> None:
    with pytest.raises(InvalidLeaseError, match="must be from 5s to 1h; renew a lease to hold it longer"):
        leases.acquire(NAME, "worker-a", ttl)
    assert dynamodb.scan(TableName=LEASES)["Items"] == []
    held = acquired(leases, "worker-a")
    with pytest.raises(InvalidLeaseError, match="must be from 5s to 1h"):
        leases.renew(held, ttl)


def test_too_many_writes_for_one_transaction_fail_before_the_call(leases: Leases) -> None:
    held = acquired(leases, "worker-a")
    writes = [put_report(f"r-{index}", held.token) for index in range(100)]
    with pytest.raises(InvalidLeaseError, match="100 writes and the fence, over DynamoDB's limit of 100"):
        leases.fenced_write(held, writes)
