"""The event source emulator applies partial batch responses as Lambda does."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.declarations import Queue, Topology
from conveyor.local.embedded import EmbeddedAws, free_port
from conveyor.local.event_source import QueuePoller, failed_ids, to_lambda_record
from conveyor.local.provision import provision

BATCH = {"m-1", "m-2", "m-3"}


@pytest.mark.parametrize(
    ("response", "kept"),
    [
        (None, set()),
        ({}, set()),
        ({"batchItemFailures": []}, set()),
        ({"batchItemFailures": [{"itemIdentifier": "m-2"}]}, {"m-2"}),
        ({"batchItemFailures": [{"itemIdentifier": "m-1"}, {"itemIdentifier": "m-3"}]}, {"m-1", "m-3"}),
        # An identifier that is empty, missing or not in the batch fails the whole batch.
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, BATCH),
        ({"batchItemFailures": [{"itemIdentifier": None}]}, BATCH),
        ({"batchItemFailures": [{}]}, BATCH),
        ({"batchItemFailures": [{"itemIdentifier": "m-9"}]}, BATCH),
        # A response Lambda cannot read fails the whole batch too.
        ("ok", BATCH),
        ({"batchItemFailures": "m-1"}, BATCH),
    ],
)
def test_partial_batch_response_decides_what_stays_on_the_queue(response: object, kept: set[str]) -> None:
    assert failed_ids(response, BATCH) == kept


def test_records_have_every_attribute_lambda_sends() -> None:
    message = {
        "MessageId": "m-1",
        "ReceiptHandle": "rh",
        "Body": "{}",
        "MD5OfBody": "99914b932bd37a50b983c5e7c90ae93b",
        "Attributes": {
            "ApproximateReceiveCount": "2",
            "SentTimestamp": "1700000000000",
            "SenderId": "AIDA",
            "ApproximateFirstReceiveTimestamp": "1700000000100",
        },
        "MessageAttributes": {"conveyor.prior_attempts": {"DataType": "Number", "StringValue": "1"}},
    }
    record = to_lambda_record(message, queue_arn="arn:aws:sqs:eu-west-1:123456789012:conveyor-default")
    # The keys of a record in AWS's own sample event (Powertools' tests/events/sqsEvent.json).
    assert set(record) == {
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    }
    assert record["attributes"]["ApproximateReceiveCount"] == "2"
    assert record["awsRegion"] == "eu-west-1"
    assert record["eventSource"] == "aws:sqs"
    assert record["messageAttributes"]["conveyor.prior_attempts"]["stringValue"] == "1"
    assert record["messageAttributes"]["conveyor.prior_attempts"]["dataType"] == "Number"


class Recorder:
    """A stand-in Lambda function: records each invocation and answers as told."""

    def __init__(self, answer: Callable[[list[str]], object] = lambda ids: None, pause_s: float = 0.0) -> None:
        self.batches: list[list[str]] = []
        self.remaining_ms: list[int] = []
        self._answer = answer
        self._pause_s = pause_s
        self._running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: LambdaContext) -> object:
        ids = [record["messageId"] for record in event["Records"]]
        with self._lock:
            self.batches.append(ids)
            self.remaining_ms.append(context.get_remaining_time_in_millis())
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        time.sleep(self._pause_s)
        with self._lock:
            self._running -= 1
        return self._answer(ids)


def _topology(**queue_options: Any) -> Topology:
    return Topology(queues=(Queue("q", age_objective=timedelta(minutes=1), **queue_options),))


@contextmanager
def polling(topology: Topology, handler: Recorder, messages: int) -> Iterator[tuple[Any, str, QueuePoller]]:
    """Poll a queue on moto in server mode, as the local runtime does (in-process moto may hand
    one message to two concurrent receivers, which real SQS and moto's server do not)."""
    server = EmbeddedAws(free_port())
    server.start()
    try:
        sqs = boto3.client("sqs", endpoint_url=server.endpoint_url)
        dynamodb = boto3.client("dynamodb", endpoint_url=server.endpoint_url)
        provisioned = provision(topology, sqs=sqs, dynamodb=dynamodb)
        queue = provisioned.queues["q"]
        for start in range(0, messages, 10):
            sqs.send_message_batch(
                QueueUrl=queue.url,
                Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(start, min(messages, start + 10))],
            )
        poller = QueuePoller(
            declaration=topology.queue("q"), provisioned=queue, handler=handler, sqs=sqs, function_name="q-worker"
        )
        poller.start()
        try:
            yield sqs, queue.url, poller
        finally:
            poller.stop()
            poller.join(time.monotonic() + 5)
            for queue_url in sqs.list_queues().get("QueueUrls", []):
                sqs.delete_queue(QueueUrl=queue_url)
            for table in dynamodb.list_tables()["TableNames"]:
                dynamodb.delete_table(TableName=table)
    finally:
        server.stop()


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def _counts(sqs: Any, url: str) -> tuple[int, int]:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def test_batches_fill_up_to_batch_size_within_the_window() -> None:
    handler = Recorder()
    topology = _topology(batch_size=25, batching_window=timedelta(seconds=2), max_concurrency=2)
    with polling(topology, handler, messages=25) as (sqs, url, poller):
        _wait_for(lambda: poller.stats.deleted == 25)
        assert _counts(sqs, url) == (0, 0)
    sizes = [len(batch) for batch in handler.batches]
    # Two pollers share 25 messages; one receive returns at most 10, so a batch above 10 was gathered.
    assert sum(sizes) == 25
    assert 10 < max(sizes) <= 25


def test_only_failed_records_stay_on_the_queue() -> None:
    handler = Recorder(answer=lambda ids: {"batchItemFailures": [{"itemIdentifier": ids[0]}]})
    with polling(_topology(batch_size=5, max_concurrency=2), handler, messages=5) as (sqs, url, poller):
        _wait_for(lambda: poller.stats.invocations >= 1)
        assert poller.stats.deleted == 4
        assert _counts(sqs, url) == (0, 1)


def test_an_exception_returns_the_whole_batch() -> None:
    def explode(ids: list[str]) -> object:
        raise RuntimeError("boom")

    with polling(_topology(batch_size=5, max_concurrency=2), Recorder(answer=explode), messages=5) as (
        sqs,
        url,
        poller,
    ):
        _wait_for(lambda: poller.stats.invocations >= 1)
        assert poller.stats.deleted == 0
        assert _counts(sqs, url) == (0, 5)


def test_an_invocation_past_its_timeout_returns_the_whole_batch() -> None:
    handler = Recorder(pause_s=1.2)
    topology = _topology(batch_size=3, max_concurrency=2, function_timeout=timedelta(seconds=1))
    with polling(topology, handler, messages=3) as (sqs, url, poller):
        _wait_for(lambda: poller.stats.invocations >= 1)
        assert poller.stats.deleted == 0
        assert _counts(sqs, url) == (0, 3)
    assert 0 < handler.remaining_ms[0] <= 1000


def test_concurrency_never_exceeds_the_declared_maximum() -> None:
    handler = Recorder(pause_s=0.2)
    with polling(_topology(batch_size=1, max_concurrency=3), handler, messages=12) as (_, _, poller):
        _wait_for(lambda: poller.stats.deleted >= 12)
    assert 1 <= handler.most_at_once <= 3
