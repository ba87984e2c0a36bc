"""The local runtime's age controller, minute by minute on a clock the test moves: up when behind, down when calm.

The queue's age is what the embedded AWS publishes (conveyor.local.sqs_metrics, from moto's queues), read back
from the embedded CloudWatch as the Lambda controller reads it; the mappings are the local runtime's own.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from conveyor.contract import naming
from conveyor.contract.declarations import Queue
from conveyor.contract.topology import Topology
from conveyor.local.scale_on_age import ScaleLoop, local_scaler
from conveyor.local.sqs_metrics import SqsMetricsPublisher
from conveyor.ops.audit import AuditLog
from conveyor.ops.event_sources import LocalEventSources
from conveyor.worker.scale_on_age import ACTOR, COOL_DOWN, AgeScaler
from tests.aws import Aws

OBJECTIVE = timedelta(minutes=2)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def topology() -> Topology:
    return Topology(
        queues=(
            Queue(
                "elastic",
                age_objective=OBJECTIVE,
                max_concurrency=4,
                scale_on_age=True,
                scale_min=2,
                scale_max=16,
            ),
            Queue("fixed", age_objective=OBJECTIVE, max_concurrency=3),
        )
    )


class Clock:
    """Starts half a minute before the wall clock's now (moto dates messages by the wall clock), then moves only
    when told: a message sent at the start is 30s old a minute later, 90s after two, and so on, never at a
    whole-minute objective however long the test takes to send it."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC) - timedelta(seconds=30)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Controlled:
    aws: Aws
    clock: Clock
    scaler: AgeScaler
    sources: LocalEventSources
    publisher: SqsMetricsPublisher

    def minutes(self, count: int) -> list[int]:
        """Let ``count`` minutes pass, each ending as the embedded AWS publishes and the controller runs."""
        seen = []
        for _ in range(count):
            self.clock.now += MINUTE
            self.publisher.publish(self.clock.now)
            self.scaler.tick()
            seen.append(self.concurrency("elastic"))
        return seen

    def concurrency(self, queue: str) -> int:
        value = self.sources.state(queue).max_concurrency
        assert value is not None
        return value

    def send(self, queue: str) -> None:
        self.aws.sqs.send_message(QueueUrl=self.aws.queue_url(queue), MessageBody="{}")

    def audit(self) -> list[dict[str, Any]]:
        log = AuditLog(self.aws.dynamodb, naming.table_name(naming.AUDIT_TABLE), actor="reader")
        return [
            {"actor": entry.actor, "action": entry.action, **entry.details}
            for entry in reversed(log.entries(queue="elastic"))
        ]


@pytest.fixture
def controlled(aws: Aws) -> Controlled:
    clock = Clock()
    sources = LocalEventSources(aws.dynamodb, aws.provisioned.event_sources_table)
    cloudwatch = boto3.client("cloudwatch")
    scaler = local_scaler(
        aws.topology, dynamodb=aws.dynamodb, cloudwatch=cloudwatch, event_sources=sources, clock=clock
    )
    return Controlled(aws, clock, scaler, sources, SqsMetricsPublisher(cloudwatch))


def drain(controlled: Controlled, queue: str) -> None:
    url = controlled.aws.queue_url(queue)
    for message in controlled.aws.receive(url):
        controlled.aws.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_a_backlog_older_than_the_objective_doubles_concurrency_up_to_the_bound_and_is_audited(
    controlled: Controlled,
) -> None:
    controlled.send("elastic")
    controlled.send("fixed")

    # Each run reads the datapoint published the minute before (CloudWatch's EndTime is exclusive): ages 30s
    # and 90s are within the 2m objective, 150s is over it, and so is every minute after.
    assert controlled.minutes(6) == [4, 4, 4, 8, 16, 16]

    assert controlled.concurrency("fixed") == 3
    age = pytest.approx
    assert controlled.audit() == [
        {"actor": ACTOR, "action": "concurrency", "from": 4, "to": 8, "age_s": age(150, abs=5), "objective_s": 120.0}
        | {"why": "age over objective"},
        {"actor": ACTOR, "action": "concurrency", "from": 8, "to": 16, "age_s": age(210, abs=5), "objective_s": 120.0}
        | {"why": "age over objective"},
    ]


def test_after_recovery_it_halves_once_per_cool_down_down_to_the_lower_bound(controlled: Controlled) -> None:
    controlled.send("elastic")
    controlled.minutes(5)
    assert controlled.concurrency("elastic") == 16
    drain(controlled, "elastic")

    cool_down = int(COOL_DOWN / MINUTE)
    # A cool-down after the last over-objective datapoint (and the last change, the same minute), it halves;
    # each step down starts the cool-down again.
    after_recovery = controlled.minutes(3 * cool_down + 2)

    assert after_recovery == [16] * cool_down + [8] * cool_down + [4] * cool_down + [2, 2]
    downs = [(row["from"], row["to"], row["why"]) for row in controlled.audit()[2:]]
    assert downs == [(16, 8, f"age under half the objective for {COOL_DOWN}"), (8, 4, downs[0][2]), (4, 2, downs[0][2])]


def test_a_paused_queue_is_never_scaled_and_resumes_from_where_it_was(controlled: Controlled) -> None:
    controlled.sources.pause("elastic", resume_at=None)
    controlled.send("elastic")

    assert controlled.minutes(5) == [4] * 5
    assert controlled.audit() == []

    controlled.sources.resume("elastic")
    assert controlled.minutes(1) == [8]


def test_a_concurrency_set_by_hand_is_where_the_controller_starts(controlled: Controlled) -> None:
    controlled.sources.set_max_concurrency("elastic", 12)
    controlled.send("elastic")

    assert controlled.minutes(4) == [12, 12, 12, 16]
    assert controlled.audit()[0]["from"] == 12


def test_the_runtime_runs_the_controller_in_a_loop_that_stops_when_asked(controlled: Controlled) -> None:
    loop = ScaleLoop(controlled.scaler, period_s=3600)
    loop.start()
    loop.stop()
    # Without a deadline: the loop waits on its stop event, so stop ends an hour's wait, not the hour.
    assert loop.join()
