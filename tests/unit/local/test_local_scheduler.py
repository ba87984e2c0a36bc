"""The scheduler emulator on a controllable clock: when it fires, what it sends, and what it never sends.

SQS is a fake that keeps each request: the emulator makes one call, ``send_message``, and these
tests are about which bodies it sends when. The times follow EventBridge Scheduler's rules (the
Kyiv cases are those of test_schedules.py): 03:30 in Kyiv is 01:30 UTC in winter and 00:30 UTC
in summer, does not exist on 2026-03-29 and happens twice on 2026-10-25.
"""

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from conveyor.contract.envelope import parse_envelope
from conveyor.contract.schedule_inputs import RETRY_ATTEMPTS, delivery_retry
from conveyor.contract.schedules import Schedule
from conveyor.contract.topology import Topology
from conveyor.local.provision import ProvisionedQueue
from conveyor.local.scheduler import Firing, LocalScheduler, ScheduleClock, schedule_arn
from tests.aws import Aws
from tests.fixtures.schedule_topology import HEARTBEAT, NIGHTLY_REPORT, SWEEP_ORDERS, TOPOLOGY, build_report

QUEUE = ProvisionedQueue(
    name="reports",
    url="https://sqs.us-east-1.amazonaws.com/123456789012/conveyor-reports",
    arn="arn:aws:sqs:us-east-1:123456789012:conveyor-reports",
    dlq_url="https://sqs.us-east-1.amazonaws.com/123456789012/conveyor-reports-dlq",
)
DLQ_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/conveyor-schedules-dlq"
SEED = 7
MINUTE = timedelta(minutes=1)


def utc(month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, year: int = 2026) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


class FakeSqs:
    """Keeps every send_message request; ``fail_next`` sends are refused as throttled."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.fail_next = 0

    def send_message(self, **request: Any) -> dict[str, Any]:
        if self.fail_next:
            self.fail_next -= 1
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "SendMessage")
        self.sent.append(request)
        return {"MessageId": str(len(self.sent))}


def emulator(schedule: Schedule, start: datetime, sqs: Any, queue: ProvisionedQueue = QUEUE) -> LocalScheduler:
    """An emulator of one of the fixture's schedules, created at ``start`` on a stopped clock."""
    topology = Topology(queues=TOPOLOGY.queues, job_types=TOPOLOGY.job_types, schedules=(schedule,))
    return LocalScheduler(
        topology,
        sqs=sqs,
        queues={queue.name: queue},
        clock=ScheduleClock(start),
        rng=random.Random(SEED),
        dlq_url=DLQ_URL,
    )


def tick_at(scheduler: LocalScheduler, moment: datetime) -> list[Firing]:
    scheduler.clock.set(moment)
    return scheduler.tick()


@pytest.mark.parametrize(
    ("start", "until", "expected"),
    [
        pytest.param(
            utc(3, 27),
            utc(3, 31),
            [utc(3, 27, 1, 30), utc(3, 28, 1, 30), utc(3, 30, 0, 30)],
            id="clocks-go-forward-the-gap-is-skipped",
        ),
        pytest.param(
            utc(10, 23),
            utc(10, 27),
            [utc(10, 23, 0, 30), utc(10, 24, 0, 30), utc(10, 25, 0, 30), utc(10, 26, 1, 30)],
            id="clocks-go-back-the-repeated-time-runs-once",
        ),
    ],
)
def test_a_kyiv_cron_fires_at_its_utc_instants_across_a_clock_change(
    start: datetime, until: datetime, expected: list[datetime]
) -> None:
    sqs = FakeSqs()
    scheduler = emulator(NIGHTLY_REPORT, start, sqs)

    fired = tick_at(scheduler, until)

    assert [firing.scheduled_time for firing in fired] == expected
    assert [parse_envelope(request["MessageBody"]).created_at for request in sqs.sent] == expected


def test_an_occurrence_fires_at_its_instant_never_before_and_none_from_before_the_start() -> None:
    sqs = FakeSqs()
    # 04:31 in Kyiv on June 1st: that day's 03:30 came before the emulator did, like a schedule created then.
    scheduler = emulator(NIGHTLY_REPORT, utc(6, 1, 1, 31), sqs)

    assert scheduler.tick() == []
    assert tick_at(scheduler, utc(6, 2, 0, 29, 59)) == []
    (firing,) = tick_at(scheduler, utc(6, 2, 0, 30))
    assert firing.scheduled_time == utc(6, 2, 0, 30)
    assert tick_at(scheduler, utc(6, 2, 23)) == [], "each occurrence fires once"


def test_sends_the_templated_input_as_scheduler_would_with_the_occurrence_id() -> None:
    sqs = FakeSqs()
    scheduler = emulator(SWEEP_ORDERS, utc(6, 1, 9, 50), sqs)

    tick_at(scheduler, utc(6, 1, 10, 10))

    assert len(sqs.sent) == SWEEP_ORDERS.shards
    for request in sqs.sent:
        assert request["QueueUrl"] == QUEUE.url
        envelope = parse_envelope(request["MessageBody"])
        shard = envelope.data["shard"]
        assert envelope.id == envelope.dedupe_key == f"schedule:sweep-orders@2026-06-01T10:00:00Z#{shard}"
        assert envelope.created_at == utc(6, 1, 10)
        assert envelope.data == {"table": "orders", "shard": shard, "shards": SWEEP_ORDERS.shards}
        assert envelope.correlation.origin == "schedule:sweep-orders"
        assert envelope.correlation.actor == (
            f"arn:aws:scheduler:us-east-1:123456789012:schedule/conveyor-schedules/conveyor-sweep-orders-{shard}"
        )
    assert sorted(parse_envelope(r["MessageBody"]).data["shard"] for r in sqs.sent) == list(range(4))


def test_each_shard_fires_at_its_own_moment_within_the_flexible_window() -> None:
    sqs = FakeSqs()
    start = utc(6, 1)
    scheduler = emulator(SWEEP_ORDERS, start, sqs)
    window = SWEEP_ORDERS.flexible_window
    assert window is not None

    sent_at: list[tuple[Firing, datetime]] = []
    moment = start
    while moment < start + timedelta(hours=3) - window:  # every shard of 00:00 to 02:45 is due by then
        moment += MINUTE
        sent_at += [(firing, moment) for firing in tick_at(scheduler, moment)]

    quarters = [start + timedelta(minutes=15) * n for n in range(12)]
    assert sorted({firing.scheduled_time for firing, _ in sent_at}) == quarters
    assert len(sent_at) == len(quarters) * SWEEP_ORDERS.shards
    for firing, when in sent_at:
        assert firing.scheduled_time <= firing.due < firing.scheduled_time + window
        assert firing.due <= when < firing.due + MINUTE, "sent at the first tick once due"
    delays = {firing.due - firing.scheduled_time for firing, _ in sent_at}
    assert len(delays) == len(sent_at), "each shard of each occurrence is delayed on its own"


def test_a_rate_schedule_fires_at_the_start_then_every_period() -> None:
    sqs = FakeSqs()
    scheduler = emulator(HEARTBEAT, utc(6, 1, 10, 0, 7) + timedelta(milliseconds=500), sqs)

    fired = tick_at(scheduler, utc(6, 1, 10, 12))

    assert [firing.scheduled_time for firing in fired] == [
        utc(6, 1, 10, 0, 7),
        utc(6, 1, 10, 5, 7),
        utc(6, 1, 10, 10, 7),
    ]


def test_nothing_fires_during_a_pause_and_what_fell_due_is_dropped() -> None:
    sqs = FakeSqs()
    scheduler = emulator(NIGHTLY_REPORT, utc(6, 1), sqs)
    assert [f.scheduled_time for f in tick_at(scheduler, utc(6, 1, 12))] == [utc(6, 1, 0, 30)]

    scheduler.pause()
    assert tick_at(scheduler, utc(6, 4, 12)) == []
    scheduler.resume()
    assert scheduler.tick() == [], "the outage's occurrences are never sent"

    assert [f.scheduled_time for f in tick_at(scheduler, utc(6, 5, 12))] == [utc(6, 5, 0, 30)]
    assert len(sqs.sent) == 2


def test_a_send_that_fails_is_sent_again_on_the_next_tick() -> None:
    sqs = FakeSqs()
    scheduler = emulator(NIGHTLY_REPORT, utc(6, 1), sqs)
    sqs.fail_next = 1

    assert tick_at(scheduler, utc(6, 1, 0, 31)) == []
    (firing,) = scheduler.tick()

    assert firing.scheduled_time == utc(6, 1, 0, 30)
    assert len(sqs.sent) == 1


def dead_letters(sqs: FakeSqs) -> list[dict[str, str]]:
    """The attributes of each send to the schedules DLQ, as plain strings."""
    return [
        {name: value["StringValue"] for name, value in request["MessageAttributes"].items()}
        for request in sqs.sent
        if request["QueueUrl"] == DLQ_URL
    ]


def test_a_send_still_throttled_after_the_retry_policy_goes_to_the_dlq_with_schedulers_attributes() -> None:
    sqs = FakeSqs()
    scheduler = emulator(NIGHTLY_REPORT, utc(6, 1), sqs)
    sqs.fail_next = 1 + RETRY_ATTEMPTS  # the first try and every retry

    assert tick_at(scheduler, utc(6, 1, 0, 31)) == []
    for _ in range(RETRY_ATTEMPTS):
        assert sqs.sent == []
        assert scheduler.tick() == []

    (attributes,) = dead_letters(sqs)
    assert attributes.pop("EXECUTION_ID")
    assert attributes == {
        "ERROR_CODE": "ThrottlingException",
        "ERROR_MESSAGE": "slow down",
        "EXHAUSTED_RETRY_CONDITION": "MaximumRetryAttempts",
        "IS_PAYLOAD_TRUNCATED": "false",
        "RETRY_ATTEMPTS": str(RETRY_ATTEMPTS),
        "SCHEDULED_TIME": "2026-06-01T00:30:00Z",
        "SCHEDULE_ARN": schedule_arn(QUEUE.arn, NIGHTLY_REPORT, None),
        "TARGET_ARN": QUEUE.arn,
    }
    assert parse_envelope(sqs.sent[0]["MessageBody"]).id == "schedule:nightly-report@2026-06-01T00:30:00Z"
    assert scheduler.tick() == [], "given up: never sent again"
    assert len(sqs.sent) == 1


def test_a_send_failing_past_the_maximum_event_age_goes_to_the_dlq_before_its_retries_run_out() -> None:
    sqs = FakeSqs()
    scheduler = emulator(NIGHTLY_REPORT, utc(6, 1), sqs)
    age = delivery_retry(NIGHTLY_REPORT, build_report).max_event_age
    sqs.fail_next = 2

    assert tick_at(scheduler, utc(6, 1, 0, 31)) == []  # the first try fails; one retry is left before the age
    assert tick_at(scheduler, utc(6, 1, 0, 30) + age) == []

    (attributes,) = dead_letters(sqs)
    assert (attributes["EXHAUSTED_RETRY_CONDITION"], attributes["RETRY_ATTEMPTS"]) == ("MaximumEventAgeInSeconds", "1")


def test_a_send_to_a_queue_that_is_gone_is_not_retried_and_goes_to_the_dlq(aws: Aws) -> None:
    """Real SQS refuses it (moto): Scheduler does not retry an error no retry fixes, and sets no exhausted condition."""
    queue = aws.provisioned.queues[build_report.queue]
    dlq_url = aws.provisioned.schedules_dlq_url
    assert dlq_url is not None
    scheduler = LocalScheduler(
        Topology(queues=TOPOLOGY.queues, job_types=TOPOLOGY.job_types, schedules=(NIGHTLY_REPORT,)),
        sqs=aws.sqs,
        queues={queue.name: queue},
        clock=ScheduleClock(utc(6, 1)),
        rng=random.Random(SEED),
        dlq_url=dlq_url,
    )
    aws.sqs.delete_queue(QueueUrl=queue.url)

    assert tick_at(scheduler, utc(6, 1, 0, 31)) == []

    response = aws.sqs.receive_message(QueueUrl=dlq_url, MessageAttributeNames=["All"], MaxNumberOfMessages=10)
    (message,) = response["Messages"]
    attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
    assert attributes["ERROR_CODE"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert attributes["RETRY_ATTEMPTS"] == "0"
    assert "EXHAUSTED_RETRY_CONDITION" not in attributes
    assert (attributes["SCHEDULE_ARN"], attributes["TARGET_ARN"]) == (
        schedule_arn(queue.arn, NIGHTLY_REPORT, None),
        queue.arn,
    )
    assert parse_envelope(message["Body"]).id == "schedule:nightly-report@2026-06-01T00:30:00Z"


def test_the_schedule_clock_follows_the_wall_clock_until_frozen() -> None:
    clock = ScheduleClock()
    before = datetime.now(UTC)
    frozen = clock.freeze()
    assert before <= frozen <= datetime.now(UTC)
    assert clock() == frozen


def test_the_schedule_clock_never_goes_back() -> None:
    clock = ScheduleClock(utc(6, 1))
    clock.advance(MINUTE)
    assert clock() == utc(6, 1, 0, 1)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.set(utc(6, 1))
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-MINUTE)


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY
