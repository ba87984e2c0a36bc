"""Rate buckets: GCRA on one item, one conditional write per token, leases that keep the bound.

In-process moto with a clock that moves only when told, so a refill is a step of the clock, not a sleep.
"""

import random
from datetime import timedelta
from typing import Any

import pytest

from conveyor.contract import limits
from conveyor.contract.destinations import DESTINATION_NAME_PATTERN, RateLimit
from conveyor.worker.destinations import rate
from conveyor.worker.destinations.rate import RateBuckets, bounded_name
from conveyor.worker.destinations.state import EXPIRES_AT, KEY, TAT, rate_key
from tests.aws import Aws
from tests.unit.worker.destinations.limits_support import NOW, Clock, counted, sent, within_bound

DESTINATION = "payments"
# T = 100 ms, burst 2: too small a burst to lease, so every token is one write.
PAIR = RateLimit(10, burst=2)
# T = 10 ms, burst 10: leases of up to 7 tokens, valid 22.5 ms, and a tolerance of 67.5 ms instead of 90.
LEASING = RateLimit(100, burst=10)


@pytest.fixture
def buckets(aws: Aws, table: str, clock: Clock) -> RateBuckets:
    return RateBuckets(aws.dynamodb, table, clock=clock)


def item(aws: Aws, table: str, key: str) -> dict[str, Any]:
    found: dict[str, Any] = aws.dynamodb.get_item(TableName=table, Key={KEY: {"S": key}}, ConsistentRead=True)["Item"]
    return found


def test_an_idle_bucket_gives_its_burst_then_the_exact_wait(buckets: RateBuckets, clock: Clock) -> None:
    assert [buckets.acquire(DESTINATION, PAIR) for _ in range(2)] == [0.0, 0.0]
    assert buckets.acquire(DESTINATION, PAIR) == pytest.approx(0.1)
    clock.advance(0.05)
    assert buckets.acquire(DESTINATION, PAIR) == pytest.approx(0.05)
    clock.advance(0.05)
    assert buckets.acquire(DESTINATION, PAIR) == 0.0


def test_a_denied_call_takes_nothing(aws: Aws, table: str, buckets: RateBuckets) -> None:
    for _ in range(2):
        buckets.acquire(DESTINATION, PAIR)
    before = item(aws, table, rate_key(DESTINATION))
    assert RateBuckets(aws.dynamodb, table, clock=lambda: NOW).acquire(DESTINATION, PAIR) > 0
    assert buckets.acquire(DESTINATION, PAIR) > 0
    assert item(aws, table, rate_key(DESTINATION)) == before


def test_an_idle_bucket_refills_to_its_burst(buckets: RateBuckets, clock: Clock) -> None:
    limit = RateLimit(5, burst=4)  # T = 200 ms
    while buckets.acquire(DESTINATION, limit) == 0.0:
        pass
    assert buckets.peek(DESTINATION, limit) == pytest.approx(0.0)
    clock.advance(0.1)
    assert buckets.peek(DESTINATION, limit) == pytest.approx(0.5)  # half of the next token refilled
    clock.advance(10)
    assert buckets.peek(DESTINATION, limit) == 4.0
    assert [buckets.acquire(DESTINATION, limit) for _ in range(4)] == [0.0] * 4
    assert buckets.peek(DESTINATION, limit) == 0.0


def test_a_burst_of_one_spaces_calls_by_the_interval(buckets: RateBuckets, clock: Clock) -> None:
    limit = RateLimit(5)
    assert buckets.acquire(DESTINATION, limit) == 0.0
    assert buckets.acquire(DESTINATION, limit) == pytest.approx(0.2)
    clock.advance(0.2)
    assert buckets.acquire(DESTINATION, limit) == 0.0


def test_a_slow_rate_counts_in_its_own_period(buckets: RateBuckets, clock: Clock) -> None:
    limit = RateLimit(2, per=timedelta(minutes=1))
    assert buckets.acquire(DESTINATION, limit) == 0.0
    assert buckets.acquire(DESTINATION, limit) == pytest.approx(30.0)


def test_per_key_buckets_are_independent(aws: Aws, table: str, buckets: RateBuckets, clock: Clock) -> None:
    keyed = RateLimit(10, burst=2, key="merchant_id")
    assert [buckets.acquire(DESTINATION, keyed, key_value="m-1") for _ in range(2)] == [0.0, 0.0]
    assert buckets.acquire(DESTINATION, keyed, key_value="m-1") > 0
    assert [buckets.acquire(DESTINATION, keyed, key_value="m-2") for _ in range(2)] == [0.0, 0.0]
    assert buckets.peek(DESTINATION, keyed, key_value="m-3") == 2.0
    # Without a value, the destination's own bucket; a limit without key ignores the value.
    assert [buckets.acquire(DESTINATION, keyed) for _ in range(2)] == [0.0, 0.0]
    assert buckets.acquire(DESTINATION, PAIR, key_value="m-4") > 0


def test_a_per_key_bucket_expires_after_its_tat(aws: Aws, table: str, buckets: RateBuckets) -> None:
    keyed = RateLimit(10, burst=2, key="merchant_id")
    for _ in range(2):
        buckets.acquire(DESTINATION, keyed, key_value="m-1")
    stored = item(aws, table, rate_key(DESTINATION, "m-1"))
    assert float(stored[TAT]["N"]) == pytest.approx(NOW + 0.2)
    assert int(stored[EXPIRES_AT]["N"]) >= NOW + 0.2 + rate.KEYED_BUCKET_TTL_MARGIN_S
    buckets.acquire(DESTINATION, PAIR)
    assert EXPIRES_AT not in item(aws, table, rate_key(DESTINATION))  # the destination's bucket stays


@pytest.mark.parametrize(
    "value",
    ["x" * 10_000, "é" * 40, "\ud800lone surrogate", "#looks-hashed", "", "a#b#c"],
    ids=["long", "multibyte", "surrogate", "hash-like", "empty", "separators"],
)
def test_any_key_value_names_a_small_valid_key(buckets: RateBuckets, value: str) -> None:
    keyed = RateLimit(10, burst=1, key="tenant")
    assert buckets.acquire(DESTINATION, keyed, key_value=value) == 0.0
    assert buckets.acquire(DESTINATION, keyed, key_value=value) > 0  # the same bucket again
    assert buckets.acquire(DESTINATION, keyed, key_value=value + "-other") == 0.0


def test_names_are_bounded_and_cannot_pose_as_a_hash() -> None:
    assert bounded_name("m-1") == "m-1"
    hashed = bounded_name("x" * 65)
    assert hashed.startswith("#")
    assert len(hashed) == 23
    assert bounded_name(hashed) != hashed
    assert bounded_name("x" * 64) == "x" * 64
    assert len({bounded_name(v) for v in ("", "#", "##", "x" * 65, "x" * 66, "\ud800")}) == 6
    longest_destination = "d" * 40
    assert DESTINATION_NAME_PATTERN.match(longest_destination)
    assert not DESTINATION_NAME_PATTERN.match(longest_destination + "d")
    longest = rate_key(longest_destination, "é" * (rate.MAX_PLAIN_NAME_BYTES // 2))
    assert len(longest.encode()) <= limits.DYNAMODB_MAX_PARTITION_KEY_BYTES


def test_times_are_sent_as_exact_decimals(aws: Aws, buckets: RateBuckets, clock: Clock) -> None:
    requests = sent(aws.dynamodb)
    clock.now = NOW + 0.0123456
    buckets.acquire(DESTINATION, RateLimit(3, burst=2))
    buckets.acquire(DESTINATION, RateLimit(3, burst=2))
    idle, busy = (request["ExpressionAttributeValues"] for request in requests)
    assert idle[":now"] == {"N": "1800000000.012346"}
    assert idle[":tat"] == {"N": "1800000000.345680"}  # T = 1/3 s rounded up to the microsecond
    assert busy[":add"] == {"N": "0.333334"}


def test_the_common_case_is_one_update_item(aws: Aws, table: str, buckets: RateBuckets, clock: Clock) -> None:
    calls = counted(aws.dynamodb)
    assert buckets.acquire(DESTINATION, PAIR) == 0.0  # idle
    assert buckets.acquire(DESTINATION, PAIR) == 0.0  # busy: the tat it saw is ahead
    assert calls == {"UpdateItem": 2}
    clock.advance(0.05)
    assert buckets.acquire(DESTINATION, PAIR) > 0  # known empty: answered without a request
    assert calls == {"UpdateItem": 2}
    other = RateBuckets(aws.dynamodb, table, clock=clock)
    assert other.acquire(DESTINATION, PAIR) > 0  # a worker that knows nothing asks once
    assert calls == {"UpdateItem": 3}


def test_the_other_form_is_tried_once_when_the_guess_was_wrong(aws: Aws, table: str, clock: Clock) -> None:
    first, second = (RateBuckets(aws.dynamodb, table, clock=clock) for _ in range(2))
    assert first.acquire(DESTINATION, PAIR) == 0.0
    calls = counted(aws.dynamodb)
    assert second.acquire(DESTINATION, PAIR) == 0.0  # guessed idle, the bucket was busy
    assert calls == {"UpdateItem": 2}
    clock.advance(1)
    assert second.acquire(DESTINATION, PAIR) == 0.0  # busy last time, idle now
    assert calls == {"UpdateItem": 4}
    clock.advance(1)
    assert second.acquire(DESTINATION, PAIR) == 0.0  # the form that last succeeded
    assert calls == {"UpdateItem": 5}


def test_a_worker_busy_on_a_bucket_leases_tokens(aws: Aws, buckets: RateBuckets, clock: Clock) -> None:
    calls = counted(aws.dynamodb)
    uses = []
    for _ in range(200):
        clock.advance(0.002)  # 500 calls a second, within the limit of 1000
        if buckets.acquire(DESTINATION, RateLimit(1000, burst=50)) == 0.0:
            uses.append(clock.now)
    assert len(uses) == 200
    assert calls["UpdateItem"] <= 200 / 5
    assert within_bound(uses, RateLimit(1000, burst=50))


def test_leased_tokens_are_not_handed_out_after_their_validity(aws: Aws, buckets: RateBuckets, clock: Clock) -> None:
    fast = RateLimit(1000, burst=50)  # T = 1 ms; leases valid 12.25 ms, of up to 10 tokens
    calls = counted(aws.dynamodb)
    for _ in range(9):  # a lease of 2 at the 3rd call, 4 at the 5th, 8 at the 9th
        clock.advance(0.001)
        assert buckets.acquire(DESTINATION, fast) == 0.0
    assert calls == {"UpdateItem": 5}
    clock.advance(0.001)
    assert buckets.acquire(DESTINATION, fast) == 0.0  # one of the lease's 7 left
    assert calls == {"UpdateItem": 5}
    clock.advance(0.012)
    assert buckets.acquire(DESTINATION, fast) == 0.0  # the other 6 expired with it: a write
    assert calls["UpdateItem"] > 5


def test_a_lease_answered_after_its_validity_keeps_its_first_token_and_drops_the_rest(
    aws: Aws, buckets: RateBuckets, clock: Clock
) -> None:
    fast = RateLimit(1000, burst=50)  # T = 1 ms; leases valid 12.25 ms, of up to 10 tokens
    calls = counted(aws.dynamodb)
    for _ in range(8):  # busy enough that the next write asks for a lease of several tokens
        clock.advance(0.001)
        assert buckets.acquire(DESTINATION, fast) == 0.0
    clock.advance(0.02)  # whatever lease is held has expired: the next acquire writes
    slow = lambda **_: clock.advance(0.1)  # noqa: E731 - a DynamoDB answer slower than the validity
    aws.dynamodb.meta.events.register("after-call.dynamodb.UpdateItem", slow)
    before = calls["UpdateItem"]
    assert buckets.acquire(DESTINATION, fast) == 0.0  # a slow answer still gives its first token
    assert calls["UpdateItem"] > before
    aws.dynamodb.meta.events.unregister("after-call.dynamodb.UpdateItem", slow)
    before = calls["UpdateItem"]
    assert buckets.acquire(DESTINATION, fast) == 0.0
    assert calls["UpdateItem"] > before  # the late lease's other tokens were not handed out


@pytest.mark.parametrize(
    "limit",
    [RateLimit(5), PAIR, RateLimit(10, burst=3), LEASING, RateLimit(1000, burst=50)],
    ids=lambda limit: limit.describe(),
)
def test_workers_together_keep_the_bound_over_every_window(
    aws: Aws, table: str, clock: Clock, limit: RateLimit
) -> None:
    """Workers with their own leases and guesses, calling in bursts and lulls, on one clock.

    A token counts at the moment acquire returns it: with no delay of its own, any excess is the limiter's.
    """
    rng = random.Random(17)
    workers = [RateBuckets(aws.dynamodb, table, clock=clock) for _ in range(4)]
    interval = limit.interval.total_seconds()
    uses = []
    for _ in range(300):
        clock.advance(rng.choice([0, 0, 0.001, interval / 3, interval * 2]))
        if rng.choice(workers).acquire(DESTINATION, limit) == 0.0:
            uses.append(clock.now)
    assert len(uses) > limit.burst
    assert within_bound(uses, limit)


def test_leased_tokens_used_late_leave_room_for_no_more_than_the_burst(aws: Aws, table: str, clock: Clock) -> None:
    """The worst case for leases: held to the end of their validity while another worker empties the bucket."""
    fast = RateLimit(1000, burst=50)  # T = 1 ms; leases valid 12.25 ms
    leasing, other = (RateBuckets(aws.dynamodb, table, clock=clock) for _ in range(2))
    uses = []
    for _ in range(9):  # ends holding a lease of 7 tokens
        clock.advance(0.001)
        assert leasing.acquire(DESTINATION, fast) == 0.0
        uses.append(clock.now)
    clock.advance(0.012)
    for worker in (leasing, other):
        while worker.acquire(DESTINATION, fast) == 0.0:
            uses.append(clock.now)
    assert uses.count(clock.now) <= fast.burst
    assert within_bound(uses, fast)
