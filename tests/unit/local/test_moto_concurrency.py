"""A long-polling receive on moto wakes when a hidden or delayed message becomes receivable, as SQS hands it out."""

import math
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

import boto3
import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from conveyor.local import moto_concurrency
from conveyor.local.embedded import EmbeddedAws, free_port
from conveyor.local.moto_concurrency import until_next_visible

REGION = "us-east-1"


@pytest.fixture
def queue(empty_aws: None) -> tuple[Any, str, Any]:
    """An SQS client, a queue's URL, and moto's own model of that queue."""
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="waits")["QueueUrl"]
    return sqs, url, sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues["waits"]


def test_an_empty_queue_or_a_visible_message_sets_no_wake_up(queue: tuple[Any, str, Any]) -> None:
    sqs, url, model = queue
    assert until_next_visible(model) == math.inf
    sqs.send_message(QueueUrl=url, MessageBody="visible now")
    assert until_next_visible(model) == math.inf  # a receive takes it at once, or cannot (its FIFO group)


def test_a_delayed_message_wakes_the_wait_when_its_delay_ends(queue: tuple[Any, str, Any]) -> None:
    sqs, url, model = queue
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=4)
    assert 3 < until_next_visible(model) <= 4.01


def test_a_hidden_message_wakes_the_wait_when_its_visibility_ends(queue: tuple[Any, str, Any]) -> None:
    sqs, url, model = queue
    sqs.send_message(QueueUrl=url, MessageBody="retry me")
    sqs.receive_message(QueueUrl=url, VisibilityTimeout=7)
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=9)
    assert 6 < until_next_visible(model) <= 7.01  # the earliest of the two


POLL_FOREVER = """
import sys, boto3
sqs = boto3.client("sqs", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id="local", aws_secret_access_key="local")
print("polling", flush=True)
sqs.receive_message(QueueUrl=sys.argv[2], WaitTimeSeconds=20)
"""


def wait_for_a_long_poll_on_the_server() -> None:
    """Until a thread of this process (the embedded server's) waits in a long poll."""
    deadline = time.monotonic() + 20
    while not any(
        frame.f_code is moto_concurrency._wait_for_messages.__code__
        for top in sys._current_frames().values()
        for frame in _stack(top)
    ):
        if time.monotonic() >= deadline:
            raise AssertionError("no long poll reached the server")
        time.sleep(0.05)


def _stack(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def test_a_long_poll_whose_client_was_killed_takes_no_message() -> None:
    """The local runtime's pollers die with their worker process; a dead one's poll must not hide a message."""
    server = EmbeddedAws(free_port())
    server.start()
    try:
        sqs = server.client("sqs")
        url = sqs.create_queue(QueueName="orphaned", Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
        poller = subprocess.Popen(
            [sys.executable, "-c", POLL_FOREVER, server.endpoint_url, url], stdout=subprocess.PIPE, text=True
        )
        assert poller.stdout is not None
        assert poller.stdout.readline() == "polling\n"
        wait_for_a_long_poll_on_the_server()
        poller.kill()
        poller.wait()
        sqs.send_message(QueueUrl=url, MessageBody="for the living")
        received = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, MessageSystemAttributeNames=["All"])
        assert [m["Body"] for m in received.get("Messages", [])] == ["for the living"]
        assert received["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == "1"
    finally:
        server.stop()


def test_metric_statistics_read_the_series_with_exactly_the_dimensions_asked(empty_aws: None) -> None:
    """As on AWS: a per-shard series written beside its schedule's is not summed into the schedule's."""
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    now = datetime.now(UTC)
    schedule = {"Name": "schedule", "Value": "sweep"}
    cloudwatch.put_metric_data(
        Namespace="Conveyor",
        MetricData=[
            {"MetricName": "ScheduleSucceeded", "Dimensions": [schedule], "Value": 1, "Timestamp": now},
            {
                "MetricName": "ScheduleSucceeded",
                "Dimensions": [schedule, {"Name": "shard", "Value": "0"}],
                "Value": 1,
                "Timestamp": now,
            },
        ],
    )

    def total(dimensions: list[dict[str, str]]) -> float:
        points = cloudwatch.get_metric_statistics(
            Namespace="Conveyor",
            MetricName="ScheduleSucceeded",
            Dimensions=dimensions,
            StartTime=now - timedelta(minutes=5),
            EndTime=now + timedelta(minutes=5),
            Period=600,
            Statistics=["Sum"],
        )["Datapoints"]
        return float(sum(point["Sum"] for point in points))

    assert total([schedule]) == 1
    assert total([{"Name": "shard", "Value": "0"}, schedule]) == 1
    assert total([{"Name": "schedule", "Value": "other"}]) == 0
