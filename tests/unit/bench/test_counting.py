"""bench.counting: every client made inside ``counting`` has its requests counted; none made after it."""

from collections import Counter
from typing import Any

import boto3
from botocore.stub import Stubber

from bench.counting import Call, counting, per_job, resource_of

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/000000000000/conveyor-critical"


def stubbed_sqs(receives: int) -> tuple[Any, Stubber]:
    """An SQS client answering ``receives`` ReceiveMessage calls without reaching any endpoint."""
    client = boto3.client("sqs", region_name="us-east-1")
    stubber = Stubber(client)
    for _ in range(receives):
        stubber.add_response("receive_message", {"Messages": []}, {"QueueUrl": QUEUE_URL})
    stubber.activate()
    return client, stubber


def test_requests_are_counted_by_service_operation_and_resource() -> None:
    with counting() as counter:
        client, stubber = stubbed_sqs(2)
        before = counter.snapshot()
        client.receive_message(QueueUrl=QUEUE_URL)
        client.receive_message(QueueUrl=QUEUE_URL)
        counted = counter.since(before)
    stubber.assert_no_pending_responses()
    assert counted == Counter({Call("sqs", "ReceiveMessage", "conveyor-critical"): 2})


def test_first_after_finds_the_first_call_since_a_moment() -> None:
    with counting() as counter:
        client, _ = stubbed_sqs(1)
        client.receive_message(QueueUrl=QUEUE_URL)
        call = Call("sqs", "ReceiveMessage", "conveyor-critical")
        first = counter.first_after(call, 0.0)
        assert first is not None
        assert counter.first_after(call, first + 1e-9) is None
        assert counter.first_after(Call("sqs", "DeleteMessageBatch", "conveyor-critical"), 0.0) is None


def test_clients_made_after_the_block_are_not_counted() -> None:
    with counting() as counter:
        pass
    client, _ = stubbed_sqs(1)
    client.receive_message(QueueUrl=QUEUE_URL)
    assert counter.snapshot() == Counter()


def test_the_resource_is_the_queue_table_or_streamed_table_named() -> None:
    assert resource_of({"QueueUrl": QUEUE_URL}) == "conveyor-critical"
    assert resource_of({"TableName": "conveyor-idempotency"}) == "conveyor-idempotency"
    arn = "arn:aws:dynamodb:us-east-1:000000000000:table/conveyor-outbox/stream/2026-12-02T09:00:00.000"
    assert resource_of({"StreamArn": arn}) == "conveyor-outbox"
    assert resource_of({"ShardIterator": "abc"}) == ""
    assert resource_of({"RequestItems": {"b": {}, "a": {}}}) == "a,b"
    transaction = [
        {"Put": {"TableName": "outbox"}},
        {"Update": {"TableName": "orders"}},
        {"Put": {"TableName": "outbox"}},
    ]
    assert resource_of({"TransactItems": transaction}) == "orders,outbox"


def test_per_job_sums_by_service_operation_largest_first_over_the_kept_calls() -> None:
    counts = Counter(
        {
            Call("sqs", "ReceiveMessage", "a"): 3,
            Call("sqs", "ReceiveMessage", "b"): 1,
            Call("dynamodb", "PutItem", "t"): 10,
            Call("cloudwatch", "PutMetricData"): 5,
        }
    )
    found = per_job(counts, 10, lambda call: call.service != "cloudwatch")
    assert found == {"dynamodb.PutItem": 1.0, "sqs.ReceiveMessage": 0.4}
    assert list(found) == ["dynamodb.PutItem", "sqs.ReceiveMessage"]
