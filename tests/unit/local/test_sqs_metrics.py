"""The embedded AWS publishes SQS's oldest-message age, and `conveyor status` reads it back."""

from datetime import UTC, datetime, timedelta

import boto3

from conveyor.local.sqs_metrics import SqsMetricsPublisher
from conveyor.ops.status import oldest_age_s


def test_oldest_age_is_published_per_queue_and_read_back(empty_aws: None) -> None:
    sqs, cloudwatch = boto3.client("sqs"), boto3.client("cloudwatch")
    busy = sqs.create_queue(QueueName="busy")["QueueUrl"]
    idle = sqs.create_queue(QueueName="idle")["QueueUrl"]
    sent = datetime.now(UTC)
    sqs.send_message(QueueUrl=busy, MessageBody="waiting")

    later = sent + timedelta(seconds=90)
    SqsMetricsPublisher(cloudwatch).publish(later)

    age = oldest_age_s(cloudwatch, busy, now=later + timedelta(seconds=1))
    assert age is not None
    assert 89 <= age <= 91
    assert oldest_age_s(cloudwatch, idle, now=later + timedelta(seconds=1)) == 0.0


def test_no_datapoint_reads_as_unknown(empty_aws: None) -> None:
    url = boto3.client("sqs").create_queue(QueueName="unpublished")["QueueUrl"]
    assert oldest_age_s(boto3.client("cloudwatch"), url) is None
