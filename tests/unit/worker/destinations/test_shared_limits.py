"""Done when (issue #17): limits hold across concurrent workers, and one key flooding does not slow another.

Each worker is a thread with its own boto3 client, its own RateBuckets and Slots, against the
in-process moto of the ``aws`` fixture, whose conditional writes are atomic across threads
(conveyor.local.moto_concurrency). The threads race for real; only time is virtual. It moves when
every worker is waiting, straight to the earliest wake-up, so a recorded time stamp is exactly the
time a worker's clock read when it was granted, whatever the machine's load. Real time would let a
busy CI host hold a thread between "granted" and "recorded the start" for longer than a token
interval, and the bound would fail for the recording's sake; here nothing depends on scheduling but
the order of the races, which every assertion holds for.
"""

import heapq
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from conveyor.contract.destinations import RateLimit
from conveyor.worker.destinations.rate import RateBuckets
from conveyor.worker.destinations.slots import Slots
from tests.aws import Aws
from tests.unit.worker.destinations.limits_support import NOW, within_bound

DESTINATION = "partner"
WORKERS = 50
# 20 calls a second in bursts of 5 (a bucket that leases, so 4 at once), 5 in flight. Calls of 100 to
# 300 ms: 5 slots could make 25 calls a second, so the rate binds; and the first 4 calls are still
# running when the fifth slot holder gets its token, one interval later, so the cap is reached.
RATE = RateLimit(20, burst=5)
CAP = 5
CALLS_EACH = 2
CALL_S = (0.1, 0.3)
# A worker without a slot looks again after this long (jittered: Slots gives no hint of when one frees).
SLOT_POLL_S = (0.1, 0.3)
SLOT_TTL_S = 60.0
# Virtual seconds a run may last: each test's work takes under 10, so a worker still sleeping past
# this is stuck (say, never granted a slot). Judged on the virtual clock, never the wall clock.
HORIZON_S = 60.0


class VirtualTime:
    """A clock for threads: it moves only when every live worker sleeps, to the earliest wake-up."""

    def __init__(self, workers: int) -> None:
        self._now = NOW
        self._live = workers
        self._wakes: list[float] = []
        self._changed = threading.Condition()

    def __call__(self) -> float:
        with self._changed:
            return self._now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "a worker that sleeps no time would hold the clock still"
        with self._changed:
            wake = self._now + seconds
            assert wake <= NOW + HORIZON_S, f"a worker still waiting {HORIZON_S:g} virtual seconds in: stuck"
            heapq.heappush(self._wakes, wake)
            self._advance()
            while self._now < wake:
                self._changed.wait()

    def done(self) -> None:
        with self._changed:
            self._live -= 1
            self._advance()

    def _advance(self) -> None:
        if self._wakes and len(self._wakes) == self._live:
            self._now = heapq.heappop(self._wakes)
            while self._wakes and self._wakes[0] <= self._now:
                heapq.heappop(self._wakes)
            self._changed.notify_all()


@dataclass
class Call:
    """One call: when its worker asked for it, when it started and ended, and the waits acquire answered."""

    asked: float
    start: float
    end: float
    waited: list[float]
    key: str | None = None


def run_workers(count: int, work: Callable[[int, Any, VirtualTime], list[Call]]) -> list[Call]:
    """``work(index, its own client, time)`` on ``count`` threads at once; every call they made."""
    time = VirtualTime(count)
    session = boto3.session.Session()
    clients = [session.client("dynamodb") for _ in range(count)]
    calls: list[Call] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        try:
            made = work(index, clients[index], time)
            with lock:
                calls.extend(made)
        except BaseException as error:
            errors.append(error)
        finally:
            time.done()

    threads = [threading.Thread(target=worker, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # a stuck worker fails at the horizon, and counts as done for the others
    assert not errors, errors
    return calls


def token(buckets: RateBuckets, time: VirtualTime, limit: RateLimit, key: str | None = None) -> list[float]:
    """Wait as told until a token is taken; the waits."""
    waits = []
    while (wait := buckets.acquire(DESTINATION, limit, key_value=key)) > 0:
        waits.append(wait)
        time.sleep(wait)
    return waits


def most_in_flight(calls: list[Call]) -> int:
    """The most calls running at one instant; a call ending as another starts is not running with it."""
    events = sorted([(call.start, 1) for call in calls] + [(call.end, -1) for call in calls])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def most_in_one_second(starts: list[float]) -> int:
    starts = sorted(starts)
    return max(sum(1 for other in starts if start <= other <= start + 1.0) for start in starts)


def test_fifty_workers_keep_the_cap_and_the_rate(aws: Aws) -> None:
    table = aws.provisioned.limits_table

    def work(index: int, client: Any, time: VirtualTime) -> list[Call]:
        rng = random.Random(index)
        slots, buckets = Slots(client, table, clock=time), RateBuckets(client, table, clock=time)
        holder = f"worker-{index}"
        calls = []
        for _ in range(CALLS_EACH):
            asked = time()
            while not slots.acquire(DESTINATION, CAP, holder, expires_at=time() + SLOT_TTL_S):
                time.sleep(rng.uniform(*SLOT_POLL_S))
            waited = token(buckets, time, RATE)
            start = time()
            time.sleep(rng.uniform(*CALL_S))
            calls.append(Call(asked, start, time(), waited))
            slots.release(DESTINATION, holder)
        return calls

    calls = run_workers(WORKERS, work)
    assert len(calls) == WORKERS * CALLS_EACH
    assert most_in_flight(calls) == CAP  # reached, never passed
    starts = [call.start for call in calls]
    assert most_in_one_second(starts) <= RATE.rate + RATE.burst
    assert within_bound(starts, RATE)
    assert any(call.waited for call in calls)  # the rate bound: some waited for a token


@pytest.mark.parametrize(
    "limit", [RateLimit(10, burst=2), RateLimit(500, burst=25)], ids=lambda limit: limit.describe()
)
def test_workers_calling_as_fast_as_they_may_keep_the_bound(aws: Aws, limit: RateLimit) -> None:
    """Each call short and the next right after it: a busy bucket that may lease does."""
    table = aws.provisioned.limits_table

    def work(index: int, client: Any, time: VirtualTime) -> list[Call]:
        buckets = RateBuckets(client, table, clock=time)
        calls = []
        while time() < NOW + 0.5:
            asked = time()
            waited = token(buckets, time, limit)
            calls.append(Call(asked, time(), time(), waited))
            time.sleep(0.004)  # 4 workers wanting 1000 calls a second
        return calls

    starts = [call.start for call in run_workers(4, work)]
    assert within_bound(starts, limit)
    assert len(starts) >= limit.rate / 2  # the workers used the limit, not less


def test_one_key_flooding_does_not_delay_another(aws: Aws) -> None:
    """Ten workers flood one merchant; another merchant's calls, within its own limit, never wait."""
    table = aws.provisioned.limits_table
    keyed = RateLimit(10, burst=2, key="merchant_id")
    flooders, quiet_every_s = 10, 0.25  # 4 calls a second, well within 10

    def work(index: int, client: Any, time: VirtualTime) -> list[Call]:
        buckets = RateBuckets(client, table, clock=time)
        key = "flood" if index < flooders else "quiet"
        calls = []
        while time() < NOW + 2:
            asked = time()
            waited = token(buckets, time, keyed, key)
            calls.append(Call(asked, time(), time(), waited, key=key))
            time.sleep(quiet_every_s if key == "quiet" else 0.001)
        return calls

    calls = run_workers(flooders + 1, work)
    quiet = [call for call in calls if call.key == "quiet"]
    flood = [call for call in calls if call.key == "flood"]
    assert len(quiet) == 8
    assert all(call.start == call.asked for call in quiet)  # granted when asked: never told to wait
    assert any(call.waited for call in flood)  # the flood was held to its own limit
    assert within_bound([call.start for call in flood], keyed)
