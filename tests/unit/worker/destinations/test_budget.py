"""Retry budgets: retries held to a share of first attempts over a sliding window, whatever the failure rate.

In-process moto with a clock that moves only when told; each worker is a ``RetryBudgets`` with its own
boto3 client, flushing at the end of each batch as the harness does.
"""

import io
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from conveyor.worker.destinations.budget import (
    FORGET_AFTER_S,
    MIN_RETRIES_PER_WINDOW,
    USAGE_REFRESH_S,
    BudgetUsage,
    RetryBudgets,
)
from conveyor.worker.destinations.state import (
    EXPIRES_AT,
    FIRST,
    KEY,
    RETRIES,
    budget_key,
    destination_scope,
    queue_scope,
)
from tests.aws import Aws
from tests.unit.worker.destinations.limits_support import NOW, Clock, counted

WINDOW = timedelta(minutes=5)
SECONDS = int(WINDOW.total_seconds())
SCOPE = destination_scope("payments")
BUDGET = 0.1
BATCH = 10
MAX_ATTEMPTS = 3


def fail_writes(model: Any, **_: Any) -> None:
    """A throttled write, which moto cannot produce."""
    if model.name == "UpdateItem":
        raise ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected"}}, "UpdateItem"
        )


@pytest.fixture
def budgets(aws: Aws, table: str, clock: Clock) -> RetryBudgets:
    return RetryBudgets(aws.dynamodb, table, clock=clock)


def stored(aws: Aws, table: str, start: float) -> dict[str, Any]:
    item: dict[str, Any] = aws.dynamodb.get_item(TableName=table, Key={KEY: {"S": budget_key(SCOPE, int(start))}})[
        "Item"
    ]
    return item


def run_batch(worker: RetryBudgets, *, fails: list[bool]) -> tuple[int, int]:
    """One batch of first attempts, each retried while it fails and the budget allows: (retries, refused)."""
    retries = refused = 0
    for failed in fails:
        worker.count(SCOPE, WINDOW, retry=False)
        for _ in range(MAX_ATTEMPTS - 1 if failed else 0):
            if not worker.allows_retry(SCOPE, BUDGET, WINDOW):
                refused += 1
                break
            worker.count(SCOPE, WINDOW, retry=True)
            retries += 1
    worker.flush()
    return retries, refused


def test_with_the_dependency_failing_every_call_retries_stay_within_the_budget_over_all_workers(
    budgets: RetryBudgets, table: str, clock: Clock
) -> None:
    workers = (budgets, RetryBudgets(boto3.client("dynamodb"), table, clock=clock))
    batches = 20
    retries = 0
    for index in range(batches):
        retries += run_batch(workers[index % 2], fails=[True] * BATCH)[0]
        clock.advance(USAGE_REFRESH_S)  # each worker sees the other's flushed batch
    first = batches * BATCH
    assert BUDGET * first < retries <= BUDGET * first + MIN_RETRIES_PER_WINDOW
    assert workers[0].usage(SCOPE, WINDOW) == BudgetUsage(first=first, retries=retries)


def test_a_healthy_failure_rate_is_never_refused(budgets: RetryBudgets, clock: Clock) -> None:
    refused = 0
    for batch in range(100):
        fails = [(batch * BATCH + index) % 20 == 0 for index in range(BATCH)]  # 5% of first attempts fail
        refused += run_batch(budgets, fails=fails)[1]
        clock.advance(USAGE_REFRESH_S)
    assert refused == 0


def test_a_quiet_scope_may_still_retry_up_to_the_floor(budgets: RetryBudgets) -> None:
    retries, refused = run_batch(budgets, fails=[True] * 3)
    assert (retries, refused) == (2 * 3, 0)
    allowed = 0
    while budgets.allows_retry(SCOPE, BUDGET, WINDOW):
        budgets.count(SCOPE, WINDOW, retry=True)
        allowed += 1
    assert 2 * 3 + allowed == int(BUDGET * 3 + MIN_RETRIES_PER_WINDOW)


def test_the_window_slides_the_previous_one_counts_by_its_overlap(budgets: RetryBudgets, clock: Clock) -> None:
    for _ in range(100):
        budgets.count(SCOPE, WINDOW, retry=False)
    for _ in range(10):
        budgets.count(SCOPE, WINDOW, retry=True)
    budgets.flush()

    clock.advance(SECONDS * 1.25)  # a quarter into the next window: three quarters of the last still count
    assert budgets.usage(SCOPE, WINDOW) == BudgetUsage(first=75, retries=7.5)
    for _ in range(20):
        budgets.count(SCOPE, WINDOW, retry=False)
    assert budgets.usage(SCOPE, WINDOW) == BudgetUsage(first=95, retries=7.5)  # unflushed counts included

    clock.advance(SECONDS)  # two windows on, the first no longer counts
    assert budgets.usage(SCOPE, WINDOW) == BudgetUsage(first=15, retries=0)


def test_one_write_per_scope_per_flush_and_one_read_per_refresh(aws: Aws, table: str, clock: Clock) -> None:
    client = boto3.client("dynamodb")
    requests = counted(client)
    budgets = RetryBudgets(client, table, clock=clock)
    queue = queue_scope("default")
    for _ in range(50):
        budgets.count(SCOPE, WINDOW, retry=False)
        budgets.count(queue, WINDOW, retry=True)
    budgets.flush()
    assert requests == {"UpdateItem": 2}
    item = stored(aws, table, NOW)
    assert (item[FIRST], item[RETRIES]) == ({"N": "50"}, {"N": "0"})
    assert item[EXPIRES_AT] == {"N": str(int(NOW) + 3 * SECONDS)}

    budgets.flush()  # nothing counted since
    assert requests == {"UpdateItem": 2}

    for _ in range(5):
        budgets.usage(SCOPE, WINDOW)
    assert requests == {"UpdateItem": 2, "BatchGetItem": 1}  # the previous window; the flush returned the current
    clock.advance(USAGE_REFRESH_S)
    budgets.usage(SCOPE, WINDOW)
    assert requests == {"UpdateItem": 2, "BatchGetItem": 2}


def test_a_failed_flush_keeps_its_counts_for_the_next(
    aws: Aws, budgets: RetryBudgets, table: str, logs: io.StringIO
) -> None:
    for _ in range(4):
        budgets.count(SCOPE, WINDOW, retry=False)
    budgets.count(SCOPE, WINDOW, retry=True)
    aws.dynamodb.meta.events.register("before-call.dynamodb", fail_writes)
    budgets.flush()
    assert "retry budget counts kept for the next flush" in logs.getvalue()
    assert budgets.usage(SCOPE, WINDOW) == BudgetUsage(first=4, retries=1)

    aws.dynamodb.meta.events.unregister("before-call.dynamodb", fail_writes)
    budgets.count(SCOPE, WINDOW, retry=False)
    budgets.flush()
    item = stored(aws, table, NOW)
    assert (item[FIRST], item[RETRIES]) == ({"N": "5"}, {"N": "1"})
    assert budgets.usage(SCOPE, WINDOW) == BudgetUsage(first=5, retries=1)


def test_a_budget_that_cannot_be_read_allows_the_retry(table: str, clock: Clock, logs: io.StringIO) -> None:
    client = boto3.client("dynamodb")

    def fail(model: Any, **_: Any) -> None:
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"}}, model.name)

    client.meta.events.register("before-call.dynamodb", fail)
    cut_off = RetryBudgets(client, table, clock=clock)
    for _ in range(int(MIN_RETRIES_PER_WINDOW) + 1):
        cut_off.count(SCOPE, WINDOW, retry=True)
    assert cut_off.allows_retry(SCOPE, BUDGET, WINDOW)
    assert "retry budget unreadable: allowing the retry" in logs.getvalue()


def test_a_flush_of_retries_alone_keeps_the_first_attempts_other_workers_stored(
    budgets: RetryBudgets, table: str, clock: Clock
) -> None:
    """The regression the demo found: a flush that added no first attempts read the bucket back without them."""
    other = RetryBudgets(boto3.client("dynamodb"), table, clock=clock)
    for _ in range(100):
        other.count(SCOPE, WINDOW, retry=False)
    other.flush()
    budgets.count(SCOPE, WINDOW, retry=True)
    budgets.flush()  # its copy of the bucket is now what this write returned
    assert budgets.usage(SCOPE, WINDOW) == BudgetUsage(first=100, retries=1)
    assert budgets.allows_retry(SCOPE, BUDGET, WINDOW)


def test_a_long_lived_worker_forgets_the_buckets_no_window_reaches(budgets: RetryBudgets, clock: Clock) -> None:
    budgets.usage(SCOPE, WINDOW)
    first_buckets = len(budgets._stored)
    for _ in range(48):  # four hours of five-minute windows, read once each
        clock.advance(SECONDS)
        budgets.usage(SCOPE, WINDOW)
    assert first_buckets == 2
    # The current and previous buckets, and those read within FORGET_AFTER_S: not one per window since the start.
    assert len(budgets._stored) <= 2 + FORGET_AFTER_S / SECONDS
