"""A long-polling receive on moto wakes when a hidden or delayed message becomes receivable, as SQS hands it out."""

import math
from typing import Any

import boto3
import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from conveyor.local.moto_concurrency import _until_next_visible

REGION = "us-east-1"


@pytest.fixture
def queue(empty_aws: None) -> tuple[Any, str, Any]:
    """An SQS client, a queue's URL, and moto's own model of that queue."""
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="waits")["QueueUrl"]
    return sqs, url, sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues["waits"]


def test_an_empty_queue_or_a_visible_message_sets_no_wake_up(queue: tuple[Any, str, Any]) -> None:
    sqs, url, model = queue
    assert _until_next_visible(model) == math.inf
    sqs.send_message(QueueUrl=url, MessageBody="visible now")
    assert _until_next_visible(model) == math.inf  # a receive takes it at once, or cannot (its FIFO group)


def test_a_delayed_message_wakes_the_wait_when_its_delay_ends(queue: tuple[Any, str, Any]) -> None:
    sqs, url, model = queue
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=4)
    assert 3 < _until_next_visible(model) <= 4.01


def test_a_hidden_message_wakes_the_wait_when_its_visibility_ends(queue: tuple[Any, str, Any]) -> None:
    sqs, url, model = queue
    sqs.send_message(QueueUrl=url, MessageBody="retry me")
    sqs.receive_message(QueueUrl=url, VisibilityTimeout=7)
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=9)
    assert 6 < _until_next_visible(model) <= 7.01  # the earliest of the two
