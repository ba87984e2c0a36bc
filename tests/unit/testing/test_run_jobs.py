"""conveyor.testing: a project's jobs run through the real harness on in-process moto, on a clock the test moves.

The topology here has one job type per way a job ends: it succeeds (and enqueues a follow-up
through a client of its own), fails for a while, fails for good, snoozes, or snoozes without end.
"""

import os
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from conveyor import (
    JobContext,
    Payload,
    PermanentError,
    Queue,
    Reason,
    RetryableError,
    RetryPolicy,
    Schedule,
    Snooze,
    Topology,
    job,
)
from conveyor.sdk import default_client
from conveyor.testing import DrainError, run_jobs

# How often each handler ran, by job type and payload ("place_order:o1").
calls: Counter[str] = Counter()
# How many more times a flaky job fails before it succeeds, by order id.
failures_left: dict[str, int] = {}


class Order(Payload):
    order_id: str


@job("place_order", queue="orders", model=Order, idempotency_key="{order_id}#place")
def place_order(payload: Order, ctx: JobContext) -> None:
    calls[f"place_order:{payload.order_id}"] += 1
    # A job's own enqueue goes through the client of the run_jobs block it runs in.
    send_receipt.enqueue(Order(order_id=payload.order_id))


@job("send_receipt", queue="orders", model=Order)
def send_receipt(payload: Order, ctx: JobContext) -> None:
    calls[f"send_receipt:{payload.order_id}"] += 1


@job("flaky", queue="orders", model=Order, retry=RetryPolicy(max_attempts=3, base=timedelta(minutes=1)))
def flaky(payload: Order, ctx: JobContext) -> None:
    calls[f"flaky:{payload.order_id}"] += 1
    if failures_left.get(payload.order_id, 0) > 0:
        failures_left[payload.order_id] -= 1
        raise RetryableError("the provider is down")


@job("decline", queue="orders", model=Order)
def decline(payload: Order, ctx: JobContext) -> None:
    raise PermanentError(f"card declined for {payload.order_id}")


@job("wait_for_stock", queue="orders", model=Order)
def wait_for_stock(payload: Order, ctx: JobContext) -> None:
    calls[f"wait_for_stock:{payload.order_id}"] += 1
    if ctx.attempt == 1 and calls[f"wait_for_stock:{payload.order_id}"] == 1:
        raise Snooze(timedelta(minutes=10))


@job("wait_forever", queue="orders", model=Order)
def wait_forever(payload: Order, ctx: JobContext) -> None:
    raise Snooze(timedelta(minutes=1))


class Report(Payload):
    report: str


@job("nightly_report", queue="orders", model=Report)
def nightly_report(payload: Report, ctx: JobContext) -> None:
    calls[f"nightly_report:{payload.report}"] += 1


TOPOLOGY = Topology(
    queues=(Queue("orders", age_objective=timedelta(minutes=5)),),
    job_types=(place_order, send_receipt, flaky, decline, wait_for_stock, wait_forever, nightly_report),
    schedules=(Schedule("nightly", "cron(0 2 * * ? *)", job="nightly_report", payload={"report": "sales"}),),
)
START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    calls.clear()
    failures_left.clear()


def test_an_enqueued_job_runs_once_on_drain_and_its_follow_up_too() -> None:
    with run_jobs(TOPOLOGY, start=START) as jobs:
        job_id = jobs.client.enqueue("place_order", {"order_id": "o1"})
        assert [envelope.id for envelope in jobs.enqueued("place_order")] == [job_id]
        assert jobs.succeeded() == 0  # nothing runs before drain

        jobs.drain()

        assert jobs.succeeded("place_order") == 1
        assert jobs.succeeded(send_receipt) == 1
        assert calls == {"place_order:o1": 1, "send_receipt:o1": 1}
        (receipt,) = jobs.enqueued("send_receipt", order_id="o1")
        assert receipt.data == {"order_id": "o1"}
        assert jobs.enqueued("send_receipt", order_id="o2") == []
        assert jobs.dead_lettered() == []


def test_a_typed_enqueue_inside_the_block_goes_through_its_client_and_only_there() -> None:
    with run_jobs(TOPOLOGY, start=START) as jobs:
        assert default_client() is jobs.client
        job_id = place_order.enqueue(Order(order_id="o7"))
        assert [envelope.id for envelope in jobs.enqueued(place_order)] == [job_id]
        jobs.drain()
        assert jobs.succeeded(send_receipt) == 1

    assert default_client() is not jobs.client


def test_a_repeated_job_is_absorbed_by_idempotency_and_its_effect_happens_once() -> None:
    with run_jobs(TOPOLOGY, start=START) as jobs:
        jobs.client.enqueue("place_order", {"order_id": "o1"})
        jobs.client.enqueue("place_order", {"order_id": "o1"})

        jobs.drain()

        assert (jobs.succeeded("place_order"), jobs.duplicates("place_order")) == (1, 1)
        assert calls["place_order:o1"] == 1
        assert len(jobs.enqueued("place_order", order_id="o1")) == 2  # two jobs, one effect


def test_a_failing_job_is_retried_after_its_backoff_as_drain_moves_the_clock() -> None:
    failures_left["o1"] = 2
    with run_jobs(TOPOLOGY, start=START) as jobs:
        jobs.client.enqueue("flaky", {"order_id": "o1"})

        jobs.drain()

        assert (jobs.retried("flaky"), jobs.succeeded("flaky"), jobs.failed("flaky")) == (2, 1, 0)
        assert [o.attempt for o in jobs.outcomes] == [1, 2, 3]


def test_a_job_out_of_attempts_is_dead_lettered_with_its_reason_and_body() -> None:
    failures_left["o1"] = 5
    with run_jobs(TOPOLOGY, start=START) as jobs:
        jobs.client.enqueue("flaky", {"order_id": "o1"})
        jobs.client.enqueue("decline", {"order_id": "o2"})

        jobs.drain()

        assert (jobs.retried("flaky"), jobs.failed("flaky"), jobs.failed("decline")) == (2, 1, 1)
        reasons = {entry.job_type: entry.reason for entry in jobs.dead_lettered()}
        assert reasons == {"flaky": Reason.ATTEMPTS_EXHAUSTED, "decline": Reason.PERMANENT_ERROR}
        (declined,) = jobs.dead_lettered("decline")
        (sent,) = jobs.enqueued("decline")
        assert declined.envelope == sent
        assert declined.error == "card declined for o2"
        assert len(jobs.dead_lettered()) == 2  # reading the DLQ leaves the entries there


def test_without_advance_a_snoozed_job_waits_until_the_test_moves_the_clock() -> None:
    with run_jobs(TOPOLOGY, start=START) as jobs:
        jobs.client.enqueue("wait_for_stock", {"order_id": "o1"})

        jobs.drain(advance=False)
        assert (jobs.succeeded("wait_for_stock"), calls["wait_for_stock:o1"]) == (0, 1)

        jobs.advance(timedelta(minutes=9))
        jobs.drain(advance=False)
        assert jobs.succeeded("wait_for_stock") == 0

        jobs.advance(timedelta(minutes=1, seconds=1))
        jobs.drain(advance=False)
        assert jobs.succeeded("wait_for_stock") == 1


def test_a_job_that_snoozes_without_end_ends_drain_with_an_error_naming_it() -> None:
    with run_jobs(TOPOLOGY, start=START) as jobs:
        jobs.client.enqueue("wait_forever", {"order_id": "o1"})

        with pytest.raises(DrainError, match=r"delivered 20 messages .*orders: .*wait_forever snoozed x20"):
            jobs.drain(max_deliveries=20)


def test_a_schedule_run_on_demand_sends_its_job_at_that_time() -> None:
    at = datetime(2030, 1, 2, 2, 0, tzinfo=UTC)
    with run_jobs(TOPOLOGY, start=START) as jobs:
        jobs.run_schedule("nightly", at=at)
        assert jobs.now() >= at

        jobs.drain()

        assert calls["nightly_report:sales"] == 1
        (sent,) = jobs.enqueued("nightly_report")
        assert sent.created_at == at
        with pytest.raises(ValueError, match="unknown schedule 'weekly'"):
            jobs.run_schedule("weekly")


def test_the_clock_only_moves_forward() -> None:
    with run_jobs(TOPOLOGY, start=START) as jobs, pytest.raises(ValueError, match="only moves forward"):
        jobs.advance(timedelta(seconds=-1))


def test_nothing_leaks_out_of_run_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    before = dict(os.environ)
    with run_jobs(TOPOLOGY, start=START) as jobs:
        assert "AWS_ENDPOINT_URL" not in os.environ
        jobs.client.enqueue("place_order", {"order_id": "o1"})
        jobs.advance(timedelta(days=3))
        assert time_machine.escape_hatch.is_travelling()

    assert dict(os.environ) == before
    assert not time_machine.escape_hatch.is_travelling(), "the clock is the real one again"
    with run_jobs(TOPOLOGY, start=START) as jobs:
        jobs.drain()  # the first block's job is not on this block's queue
        assert (jobs.enqueued(), jobs.succeeded()) == ([], 0)
