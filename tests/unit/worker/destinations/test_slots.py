"""Slots: at most ``cap`` holders, one write each, and slots of dead holders taken back once expired."""

import io
import threading
from decimal import Decimal
from typing import Any

import boto3
import pytest

from conveyor.contract import limits
from conveyor.contract.destinations import MAX_DESTINATION_CONCURRENCY
from conveyor.contract.sizes import item_bytes
from conveyor.worker.destinations import slots
from conveyor.worker.destinations.rate import bounded_name
from conveyor.worker.destinations.slots import Slots
from conveyor.worker.destinations.state import HOLDERS, KEY, slots_key
from tests.aws import Aws
from tests.unit.worker.destinations.limits_support import NOW, Clock, counted

DESTINATION = "webhooks"
TTL = 30.0


@pytest.fixture
def semaphore(aws: Aws, table: str, clock: Clock) -> Slots:
    return Slots(aws.dynamodb, table, clock=clock)


def holders(aws: Aws, table: str) -> dict[str, Decimal]:
    """Holder -> expiry, as numbers (moto keeps the digits sent, AWS normalises them)."""
    item = aws.dynamodb.get_item(TableName=table, Key={KEY: {"S": slots_key(DESTINATION)}}, ConsistentRead=True)
    return {name: Decimal(value["N"]) for name, value in item["Item"][HOLDERS]["M"].items()}


def take(semaphore: Slots, holder: str, *, cap: int = 2, ttl: float = TTL) -> bool:
    return semaphore.acquire(DESTINATION, cap, holder, expires_at=NOW + ttl)


def test_slots_up_to_the_cap_then_none(aws: Aws, table: str, semaphore: Slots) -> None:
    assert [take(semaphore, holder) for holder in ("a", "b", "c")] == [True, True, False]
    assert semaphore.in_use(DESTINATION) == 2
    assert holders(aws, table) == {"a": Decimal("1800000030"), "b": Decimal("1800000030")}


def test_the_common_case_is_one_update_item(aws: Aws, semaphore: Slots) -> None:
    calls = counted(aws.dynamodb)
    assert take(semaphore, "first")  # the map does not exist yet: a second write creates it
    assert calls == {"UpdateItem": 2}
    assert take(semaphore, "second")
    assert not take(semaphore, "third")
    semaphore.release(DESTINATION, "second")
    assert calls == {"UpdateItem": 5}


def test_a_holder_taking_its_slot_again_extends_it(aws: Aws, table: str, semaphore: Slots) -> None:
    assert take(semaphore, "a")
    assert take(semaphore, "b")
    assert take(semaphore, "a", ttl=60)  # full, but a holds one already
    assert holders(aws, table)["a"] == Decimal("1800000060")
    assert semaphore.in_use(DESTINATION) == 2


def test_a_released_slot_is_free_again(semaphore: Slots) -> None:
    assert take(semaphore, "a")
    assert take(semaphore, "b")
    semaphore.release(DESTINATION, "a")
    assert semaphore.in_use(DESTINATION) == 1
    assert take(semaphore, "c")


def test_releasing_an_unknown_holder_is_harmless(aws: Aws, table: str, semaphore: Slots) -> None:
    semaphore.release(DESTINATION, "never-held")  # no item at all
    assert take(semaphore, "a")
    semaphore.release(DESTINATION, "never-held")
    semaphore.release(DESTINATION, "a")
    semaphore.release(DESTINATION, "a")
    assert holders(aws, table) == {}


def test_a_failed_release_is_logged_not_raised(aws: Aws, clock: Clock, logs: io.StringIO) -> None:
    Slots(aws.dynamodb, "conveyor-no-such-table", clock=clock).release(DESTINATION, "a")
    assert "could not release a concurrency slot" in logs.getvalue()


def test_expired_holders_are_taken_back(aws: Aws, table: str, semaphore: Slots, clock: Clock) -> None:
    assert take(semaphore, "dead-1", ttl=5)
    assert take(semaphore, "dead-2", ttl=6)
    clock.now = NOW + 10
    assert semaphore.in_use(DESTINATION) == 0
    calls = counted(aws.dynamodb)
    assert take(semaphore, "alive", ttl=60)
    assert calls == {"UpdateItem": 2}  # full; then the expired removed in the write that adds it
    assert holders(aws, table) == {"alive": Decimal("1800000060")}


def test_a_holder_is_not_taken_back_before_it_expires(semaphore: Slots, clock: Clock) -> None:
    assert take(semaphore, "a", ttl=5)
    assert take(semaphore, "b", ttl=20)
    clock.now = NOW + 5  # a's expiry has come, b's not
    assert semaphore.in_use(DESTINATION) == 1
    assert take(semaphore, "c")
    assert not take(semaphore, "d")


def test_a_holder_that_renewed_meanwhile_keeps_its_slot(aws: Aws, table: str, clock: Clock) -> None:
    """Between a worker seeing a holder expired and its reclaim, the holder extends: it is not removed."""
    semaphore = Slots(aws.dynamodb, table, clock=clock)
    assert take(semaphore, "slow", ttl=5)
    assert take(semaphore, "dead", ttl=6)
    clock.now = NOW + 10
    writes = 0

    def renew_before_the_reclaim(**_: Any) -> None:
        nonlocal writes
        writes += 1
        if writes == 2:  # the first write saw the map full; the second is the reclaim
            aws.dynamodb.update_item(
                TableName=table,
                Key={KEY: {"S": slots_key(DESTINATION)}},
                UpdateExpression="SET #h.#slow = :later",
                ExpressionAttributeNames={"#h": HOLDERS, "#slow": "slow"},
                ExpressionAttributeValues={":later": {"N": str(NOW + 60)}},
            )

    other = Slots(aws.dynamodb, table, clock=clock)
    aws.dynamodb.meta.events.register("before-call.dynamodb.UpdateItem", renew_before_the_reclaim)
    assert other.acquire(DESTINATION, 2, "new", expires_at=NOW + 30)
    assert holders(aws, table) == {"slow": Decimal("1800000060"), "new": Decimal("1800000030")}


def test_expiry_is_stored_to_the_millisecond_rounded_up(aws: Aws, table: str, semaphore: Slots) -> None:
    assert semaphore.acquire(DESTINATION, 2, "a", expires_at=NOW + 1.0001)
    assert holders(aws, table) == {"a": Decimal("1800000001.001")}


def test_a_long_holder_id_is_stored_by_its_hash(aws: Aws, table: str, semaphore: Slots) -> None:
    long = "job-" + "x" * 100
    assert take(semaphore, long)
    assert take(semaphore, long)
    assert list(holders(aws, table)) == [bounded_name(long, slots.MAX_HOLDER_BYTES)]
    semaphore.release(DESTINATION, long)
    assert holders(aws, table) == {}


def test_the_largest_cap_fits_in_one_item() -> None:
    assert len(bounded_name("x" * 1000, slots.MAX_HOLDER_BYTES)) <= slots.MAX_HOLDER_BYTES
    expiry = {"N": "1800000000.001"}  # every significant digit an expiry has
    entries = {f"{index:0{slots.MAX_HOLDER_BYTES}d}": expiry for index in range(MAX_DESTINATION_CONCURRENCY)}
    item = {KEY: {"S": slots_key("d" * 40)}, HOLDERS: {"M": entries}}
    assert item_bytes(item) <= limits.DYNAMODB_MAX_ITEM_BYTES


def test_a_reclaim_of_many_expired_holders_stays_within_expression_limits(
    aws: Aws, table: str, semaphore: Slots, clock: Clock
) -> None:
    cap = slots.MAX_RECLAIMED + 8
    names = [bounded_name(f"dead-{index}-" + "x" * 100, slots.MAX_HOLDER_BYTES) for index in range(cap)]
    for index, name in enumerate(names):
        assert semaphore.acquire(DESTINATION, cap, name, expires_at=NOW + 1 + index / 1000)
    clock.now = NOW + 10
    requests: list[dict[str, Any]] = []
    aws.dynamodb.meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", lambda params, **_: requests.append(params)
    )
    assert semaphore.acquire(DESTINATION, cap, "new", expires_at=NOW + 30)
    reclaim = requests[-1]
    for expression in (reclaim["UpdateExpression"], reclaim["ConditionExpression"]):
        assert len(expression.encode()) <= limits.DYNAMODB_MAX_EXPRESSION_BYTES
    assert len(holders(aws, table)) == cap - slots.MAX_RECLAIMED + 1  # the oldest expired removed


def test_workers_racing_to_reclaim_never_pass_the_cap(aws: Aws, table: str, semaphore: Slots, clock: Clock) -> None:
    cap = 3
    for index in range(cap):
        assert semaphore.acquire(DESTINATION, cap, f"dead-{index}", expires_at=NOW + 1)
    clock.now = NOW + 10
    session = boto3.session.Session()
    workers = [Slots(session.client("dynamodb"), table, clock=clock) for _ in range(20)]
    taken: list[bool] = []
    start = threading.Barrier(len(workers))

    def race(index: int) -> None:
        start.wait()
        taken.append(workers[index].acquire(DESTINATION, cap, f"worker-{index}", expires_at=NOW + 30))

    threads = [threading.Thread(target=race, args=(index,)) for index in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 1 <= taken.count(True) == len(holders(aws, table)) <= cap
    assert all(name.startswith("worker-") for name in holders(aws, table))
