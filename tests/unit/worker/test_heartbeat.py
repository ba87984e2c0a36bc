"""The heartbeat: a running job's message stays hidden while it runs, and only while it runs.

The queue here has a 2-second function timeout, so the lease is 2 s and renewals come every
two thirds of a second; invocations get more time than their jobs need, so what stops the
renewals in the harness tests is the job ending, not the deadline. Renewals are observed as
the ChangeMessageVisibility requests the client makes (they still reach moto), and as what a
second receive finds.
"""

import json
import math
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from pydantic import Field

from conveyor.contract import naming
from conveyor.contract.declarations import Queue, RetryPolicy
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import job
from conveyor.worker.heartbeat import BEATS_PER_LEASE, Heartbeats, lease_for, visibility_for
from tests.aws import Aws
from tests.harness_support import DEFAULT_SEED, QueueDriver, envelope

QUEUE = "slow"
SLOW = Queue(QUEUE, age_objective=timedelta(minutes=5), function_timeout=timedelta(seconds=2))
LEASE = lease_for(SLOW)
INTERVAL_S = LEASE.total_seconds() / BEATS_PER_LEASE
INVOCATION_S = 8.0
FAR_AWAY_S = 60.0

# Each nap's run, (monotonic) start and end; and how many messages its probe found visible.
WINDOWS: dict[str, tuple[float, float]] = {}
PROBES: list[int] = []


class CrashedError(Exception):
    """Retried, after the policy's backoff of up to ten minutes."""


class Nap(Payload):
    key: str = Field(min_length=1)
    sleep_s: float = Field(ge=0)
    probe: bool = False
    crash: bool = False


@job("nap", queue=QUEUE, model=Nap, retry=RetryPolicy(max_attempts=3, base=timedelta(minutes=10)))
def nap(payload: Nap, ctx: JobContext) -> None:
    """Sleeps, then (if asked) looks for visible messages on its own queue, then returns or crashes."""
    started = time.monotonic()
    time.sleep(payload.sleep_s)
    if payload.probe:
        sqs = boto3.client("sqs")
        url = sqs.get_queue_url(QueueName=naming.queue_name(QUEUE))["QueueUrl"]
        PROBES.append(len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])))
    WINDOWS[payload.key] = (started, time.monotonic())
    if payload.crash:
        raise CrashedError(f"{payload.key} crashed")


TEST_TOPOLOGY = Topology(queues=(SLOW,), job_types=(nap,))


@dataclass(frozen=True)
class Change:
    at: float
    receipt_handle: str
    seconds: int


@contextmanager
def visibility_changes(sqs: Any) -> Iterator[list[Change]]:
    """Every ChangeMessageVisibility request the client makes, from any thread, with when it was made."""
    changes: list[Change] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        changes.append(Change(time.monotonic(), params["ReceiptHandle"], params["VisibilityTimeout"]))

    event = "provide-client-params.sqs.ChangeMessageVisibility"
    sqs.meta.events.register(event, record)
    try:
        yield changes
    finally:
        sqs.meta.events.unregister(event, record)


@pytest.fixture(autouse=True)
def history() -> Iterator[None]:
    WINDOWS.clear()
    PROBES.clear()
    yield
    WINDOWS.clear()
    PROBES.clear()


@pytest.fixture
def topology() -> Topology:
    return TEST_TOPOLOGY


@pytest.fixture
def slow(aws: Aws) -> QueueDriver:
    return QueueDriver(aws, QUEUE)


def nap_body(key: str, **data: Any) -> str:
    return envelope("nap", {"key": key, **data})


def wait_past_a_renewal() -> None:
    """Long enough for a renewal to happen, had the heartbeat not stopped."""
    time.sleep(INTERVAL_S * 1.5)


# --- the renewal ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "lease_s", "hold_until", "expected"),
    [
        pytest.param(0.0, 2.0, 60.0, 2, id="a-whole-lease"),
        pytest.param(0.0, 2.5, 60.0, 3, id="whole-seconds-rounded-up"),
        pytest.param(10.0, 2.0, 11.2, 2, id="cut-to-the-hold-rounded-up"),
        pytest.param(10.0, 2.0, 10.0, None, id="at-the-hold"),
        pytest.param(12.0, 2.0, 10.0, None, id="past-the-hold"),
    ],
)
def test_renewal_is_a_lease_but_never_reaches_past_the_hold(
    now: float, lease_s: float, hold_until: float, expected: int | None
) -> None:
    assert visibility_for(now, lease=timedelta(seconds=lease_s), hold_until=hold_until) == expected


def test_lease_is_one_function_timeout_not_the_visibility_timeout() -> None:
    assert lease_for(SLOW) == SLOW.function_timeout < SLOW.effective_visibility_timeout


# --- the heartbeat on its own --------------------------------------------------------------------


def test_heartbeat_of_a_hung_job_lets_the_message_go_at_the_hold(slow: QueueDriver) -> None:
    record = slow.send_and_receive(nap_body("hung", sleep_s=0), visibility=1)
    hold_until = time.monotonic() + 1.5

    with (
        visibility_changes(slow.aws.sqs) as changes,
        Heartbeats(slow.aws.sqs, queue_url=slow.url, lease=LEASE).keep(
            receipt_handle=record["receiptHandle"], job_id="job-hung", hold_until=hold_until
        ),
    ):
        time.sleep(3.0)  # the job hangs past the hold
        found = slow.receive()

    assert changes, "it renewed before the hold"
    assert all(change.at <= hold_until for change in changes)
    assert all(change.seconds <= math.ceil(hold_until - change.at) for change in changes)
    assert [again["messageId"] for again in found] == [record["messageId"]], "back soon after the hold"


class ThrottledSqs:
    """An SQS client whose every ChangeMessageVisibility is throttled; ``retried`` is set at the second attempt."""

    def __init__(self) -> None:
        self.attempts = 0
        self.retried = threading.Event()

    def change_message_visibility(self, **request: Any) -> None:
        self.attempts += 1
        if self.attempts == 2:
            self.retried.set()
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "ChangeMessageVisibility")


def test_failed_renewal_is_logged_and_the_heartbeat_carries_on(caplog: pytest.LogCaptureFixture) -> None:
    sqs = ThrottledSqs()

    with Heartbeats(sqs, queue_url="q", lease=LEASE).keep(
        receipt_handle="r", job_id="job-t", hold_until=time.monotonic() + FAR_AWAY_S
    ):
        # Leaving waits out the renewal in flight, so the second failure is logged when ``keep`` ends.
        assert sqs.retried.wait(FAR_AWAY_S), "it stopped trying after a throttled renewal"

    assert sqs.attempts >= 2
    assert [r.getMessage() for r in caplog.records].count("could not extend a running job's visibility") >= 2


class RecordingSqs:
    """An SQS client that records each ChangeMessageVisibility; ``hold`` makes a call wait until released."""

    def __init__(self) -> None:
        self.handles: list[str] = []
        self.called = threading.Event()
        self.hold = threading.Event()
        self.hold.set()

    def change_message_visibility(self, **request: Any) -> None:
        self.handles.append(request["ReceiptHandle"])
        self.called.set()
        self.hold.wait(FAR_AWAY_S)


def heartbeat_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "conveyor-heartbeats"]


def test_short_jobs_make_no_call_and_share_one_thread() -> None:
    sqs = RecordingSqs()
    heartbeats = Heartbeats(sqs, queue_url="q", lease=LEASE)
    before = len(heartbeat_threads())

    for n in range(50):
        with heartbeats.keep(receipt_handle=f"r{n}", job_id=f"job-{n}", hold_until=time.monotonic() + FAR_AWAY_S):
            pass

    assert sqs.handles == []
    assert len(heartbeat_threads()) == before + 1


def test_jobs_running_at_once_are_each_renewed() -> None:
    sqs = RecordingSqs()
    heartbeats = Heartbeats(sqs, queue_url="q", lease=LEASE)
    hold_until = time.monotonic() + FAR_AWAY_S

    with (
        heartbeats.keep(receipt_handle="a", job_id="job-a", hold_until=hold_until),
        heartbeats.keep(receipt_handle="b", job_id="job-b", hold_until=hold_until),
    ):
        wait_past_a_renewal()

    assert sorted(set(sqs.handles)) == ["a", "b"]


class BrokenOnceSqs(RecordingSqs):
    """Its first ChangeMessageVisibility fails with an error no AWS client raises."""

    def change_message_visibility(self, **request: Any) -> None:
        if not self.handles:
            self.handles.append("broken")
            self.called.set()
            raise RuntimeError("unexpected")
        super().change_message_visibility(**request)


def test_an_unexpected_renewal_error_is_logged_and_the_shared_thread_renews_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sqs = BrokenOnceSqs()
    heartbeats = Heartbeats(sqs, queue_url="q", lease=LEASE)

    with heartbeats.keep(receipt_handle="first", job_id="job-1", hold_until=time.monotonic() + FAR_AWAY_S):
        assert sqs.called.wait(FAR_AWAY_S), "the first renewal was never tried"
    sqs.called.clear()
    with heartbeats.keep(receipt_handle="second", job_id="job-2", hold_until=time.monotonic() + FAR_AWAY_S):
        assert sqs.called.wait(FAR_AWAY_S), "the shared thread renewed nothing after the error"

    assert sqs.handles[0] == "broken"
    assert "second" in sqs.handles, "the next job's message was still renewed"
    assert "could not extend a running job's visibility" in [r.getMessage() for r in caplog.records]


def test_leaving_waits_for_a_renewal_in_flight_so_none_lands_after() -> None:
    sqs = RecordingSqs()
    sqs.hold.clear()
    heartbeats = Heartbeats(sqs, queue_url="q", lease=LEASE)
    left = threading.Event()

    def run_job() -> None:
        with heartbeats.keep(receipt_handle="r", job_id="job-r", hold_until=time.monotonic() + FAR_AWAY_S):
            assert sqs.called.wait(FAR_AWAY_S)
        left.set()

    job = threading.Thread(target=run_job)
    job.start()
    assert sqs.called.wait(FAR_AWAY_S)
    assert not left.wait(INTERVAL_S), "left while its renewal was still being sent"
    sqs.hold.set()
    job.join(FAR_AWAY_S)
    assert left.is_set()
    assert sqs.handles == ["r"]


# --- in the harness ------------------------------------------------------------------------------


def test_slow_job_is_not_handed_to_a_second_worker_and_renewals_stop_when_it_ends(slow: QueueDriver) -> None:
    record = slow.send_and_receive(nap_body("slow", sleep_s=2.3, probe=True), visibility=2)

    with visibility_changes(slow.aws.sqs) as changes:
        assert slow.run(record, timeout_s=INVOCATION_S) == []
        renewed = len(changes)
        wait_past_a_renewal()

    assert PROBES == [0], "a receive 2.3 s into the job, past the 2 s it was received for, found nothing"
    assert renewed >= 2
    assert {(change.receipt_handle, change.seconds) for change in changes} == {(record["receiptHandle"], 2)}
    assert len(changes) == renewed


def test_only_the_running_record_of_a_batch_is_renewed(slow: QueueDriver) -> None:
    slow.send(nap_body("first", sleep_s=1.2))
    slow.send(nap_body("second", sleep_s=1.2))
    records = slow.receive()
    handles = {json.loads(record["body"])["data"]["key"]: record["receiptHandle"] for record in records}

    with visibility_changes(slow.aws.sqs) as changes:
        assert slow.run(*records, timeout_s=INVOCATION_S) == []

    order = sorted(WINDOWS, key=lambda key: WINDOWS[key][0])
    second_started = WINDOWS[order[1]][0]
    assert {change.receipt_handle for change in changes if change.at < second_started} == {handles[order[0]]}
    assert {change.receipt_handle for change in changes if change.at >= second_started} == {handles[order[1]]}


def test_crashed_job_stops_renewing_and_waits_out_its_backoff(slow: QueueDriver) -> None:
    record = slow.send_and_receive(nap_body("crash", sleep_s=1.0, crash=True))

    with visibility_changes(slow.aws.sqs) as changes:
        assert slow.run(record, timeout_s=INVOCATION_S) == [record["messageId"]]
        wait_past_a_renewal()

    *renewals, backoff = changes
    assert renewals, "it renewed while the job ran"
    assert {change.seconds for change in renewals} == {2}
    expected = nap.retry.delay(1, random.Random(DEFAULT_SEED))
    assert (backoff.at > WINDOWS["crash"][1], backoff.seconds) == (True, math.ceil(expected.total_seconds()))
    assert slow.receive() == [], "nothing replaced the backoff"
