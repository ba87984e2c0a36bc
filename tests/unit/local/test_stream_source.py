"""The stream event source emulator delivers a DynamoDB stream as the relays' mapping does: INSERTs
only, in order, retried from the lowest reported failure, bisected on errors, and given up on to
the on-failure destination after the retries or the record age the mapping allows."""

import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamLambdaOnFailureDestinationModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from conveyor.contract import message_attributes
from conveyor.contract.reasons import Reason
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.local.embedded import REGION, EmbeddedAws, free_port
from conveyor.local.event_source import Handler
from conveyor.local.runtime import LocalRuntime
from conveyor.local.stream_source import (
    RECORD_AGE_EXCEEDED,
    RETRY_ATTEMPTS_EXHAUSTED,
    UNHANDLED,
    Backoff,
    StreamPoller,
    drop_moto_duplicates,
    to_lambda_record,
)
from conveyor.sdk import outbox
from conveyor.worker.relay import RELAY_SOURCE
from tests.e2e.conftest import wait_until
from tests.fixtures.relay_topology import NEW, ORDERS, STANDARD
from tests.fixtures.relay_topology import TOPOLOGY as RELAY_TOPOLOGY

KEY = "id"
WAIT_S = 30.0
STOP_S = 10.0
# A quiet stream's waits for these tests: short, so that none waits out the 10-second cap.
BASE_WAIT_S = 0.01
CAP_WAIT_S = 0.08
CREATED = datetime(2026, 11, 29, 12, 0, 5, 250_000, tzinfo=UTC)
STREAM_ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/t/stream/2026-11-29T00:00:00.000"
# The keys of a record in AWS's sample DynamoDB Streams event (Powertools' tests/events/dynamoStreamEvent.json).
LAMBDA_RECORD_KEYS = {"eventID", "eventVersion", "dynamodb", "awsRegion", "eventName", "eventSourceARN", "eventSource"}

Answer = Callable[[list[dict[str, Any]]], object]


class Recorder:
    """A stand-in relay: records the item ids of each invocation, and answers as ``answer`` says."""

    def __init__(self, answer: Answer = lambda records: None) -> None:
        self.batches: list[list[str]] = []
        self.records: list[dict[str, Any]] = []
        self._answer = answer
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: LambdaContext) -> object:
        with self._lock:
            self.batches.append([item_id(record) for record in event["Records"]])
            self.records += event["Records"]
        return self._answer(event["Records"])

    def delivered(self) -> list[str]:
        with self._lock:
            return [identifier for batch in self.batches for identifier in batch]


class Gate:
    """A stand-in relay that holds every invocation until ``release``."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.finished: list[list[str]] = []

    def __call__(self, event: dict[str, Any], context: LambdaContext) -> object:
        self.entered.set()
        self.released.wait()
        self.finished.append([item_id(record) for record in event["Records"]])
        return None


class RecordingBackoff(Backoff):
    """The poller's backoff, recording every wait it gives and how many waits it had given at each reset."""

    def __init__(self) -> None:
        super().__init__(base_s=BASE_WAIT_S, cap_s=CAP_WAIT_S)
        self.waits: list[float] = []
        self.resets: list[int] = []

    def reset(self) -> None:
        self.resets.append(len(self.waits))
        super().reset()

    def next_wait(self) -> float:
        wait = super().next_wait()
        self.waits.append(wait)
        return wait


class CountingStreams:
    """The endpoint's Streams client, counting the calls of each operation."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        operation = getattr(self._client, name)

        def counted(**request: Any) -> Any:
            with self._lock:
                self.calls[name] += 1
            return operation(**request)

        return counted

    def count(self, operation: str) -> int:
        with self._lock:
            return self.calls[operation]


class ExpiringIterators:
    """The endpoint's Streams client, except that the GetRecords after ``expire`` fails as with an expired iterator."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.expiring = threading.Event()
        self.failed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_records(self, **request: Any) -> Any:
        if self.expiring.is_set():
            self.expiring.clear()
            self.failed.set()
            error = {"Error": {"Code": "ExpiredIteratorException", "Message": "Iterator expired"}}
            raise ClientError(error, "GetRecords")  # type: ignore[arg-type]
        return self._client.get_records(**request)


def item_id(record: dict[str, Any]) -> str:
    return str(record["dynamodb"]["Keys"][KEY]["S"])


@dataclass
class Stream:
    """A table with a NEW_IMAGE stream and an on-failure queue, on the moto server."""

    server: EmbeddedAws
    table: str
    stream_arn: str
    dlq_url: str
    pollers: list[StreamPoller] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dynamodb = self.server.client("dynamodb")
        self.sqs = self.server.client("sqs")
        self.streams = self.server.client("dynamodbstreams")

    def put(self, *item_ids: str) -> None:
        for identifier in item_ids:
            self.dynamodb.put_item(TableName=self.table, Item={KEY: {"S": identifier}, "value": {"S": "v"}})

    def start(self, handler: Handler, **options: Any) -> StreamPoller:
        poller = StreamPoller(
            stream_arn=self.stream_arn,
            handler=handler,
            streams=options.pop("streams", self.streams),
            sqs=self.sqs,
            dlq_url=self.dlq_url,
            function_name="relay",
            backoff=options.pop("backoff", Backoff(base_s=BASE_WAIT_S, cap_s=CAP_WAIT_S)),
            **options,
        )
        self.pollers.append(poller)
        poller.start()
        return poller

    def sequence_numbers(self) -> dict[str, str]:
        """Item id -> sequence number of its last record, read from the stream itself."""
        shard = self.shard_id()
        iterator = self.streams.get_shard_iterator(
            StreamArn=self.stream_arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records = self.streams.get_records(ShardIterator=iterator)["Records"]
        return {item_id(record): record["dynamodb"]["SequenceNumber"] for record in records}

    def shard_id(self) -> str:
        return str(self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"][0]["ShardId"])

    def dead_letters(self) -> list[dict[str, Any]]:
        """On-failure records received from the queue; each stays hidden for the rest of the test."""
        messages = self.sqs.receive_message(QueueUrl=self.dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        return [json.loads(message["Body"]) for message in messages.get("Messages", [])]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedAws]:
    """moto in server mode, as the local runtime runs it (in-process moto may deliver twice under concurrency)."""
    aws = EmbeddedAws(free_port())
    aws.start()
    yield aws
    aws.stop()


@pytest.fixture
def stream(server: EmbeddedAws) -> Iterator[Stream]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    dynamodb, sqs = server.client("dynamodb"), server.client("sqs")
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    stream_arn = dynamodb.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    created = Stream(server=server, table=name, stream_arn=stream_arn, dlq_url=dlq_url)
    yield created
    for poller in created.pollers:
        poller.stop()
    deadline = time.monotonic() + STOP_S
    for poller in created.pollers:
        poller.join(deadline)
    dynamodb.delete_table(TableName=name)
    sqs.delete_queue(QueueUrl=dlq_url)


def stream_record(identifier: str, event_name: str = "INSERT", **attributes: str) -> dict[str, Any]:
    """A record as boto3 returns it from GetRecords: the creation time a datetime, binary values bytes."""
    keys = {KEY: {"S": identifier}}
    return {
        "eventID": uuid.uuid4().hex,
        "eventName": event_name,
        "eventVersion": "1.0",
        "eventSource": "aws:dynamodb",
        "awsRegion": "eu-west-1",
        "dynamodb": {
            "ApproximateCreationDateTime": CREATED,
            "Keys": keys,
            "NewImage": {**keys, **{name: {"S": value} for name, value in attributes.items()}},
            "SequenceNumber": str(uuid.uuid4().int),
            "SizeBytes": 20,
            "StreamViewType": "NEW_IMAGE",
        },
    }


def test_records_are_json_as_lambda_delivers_them() -> None:
    record = stream_record("a")
    record["dynamodb"]["NewImage"]["blob"] = {"B": b"\x00\x01"}
    delivered = to_lambda_record(record, stream_arn=STREAM_ARN)
    assert set(delivered) == LAMBDA_RECORD_KEYS
    assert delivered["eventSourceARN"] == STREAM_ARN
    assert delivered["awsRegion"] == "eu-west-1"
    # Epoch seconds, rounded down as DynamoDB reports them; binary values in base64.
    assert delivered["dynamodb"]["ApproximateCreationDateTime"] == CREATED.replace(microsecond=0).timestamp()
    assert delivered["dynamodb"]["NewImage"]["blob"] == {"B": "AAE="}
    assert record["dynamodb"]["NewImage"]["blob"] == {"B": b"\x00\x01"}


def test_only_a_key_only_insert_followed_by_an_insert_of_its_item_is_a_moto_duplicate() -> None:
    duplicate, created = stream_record("u"), stream_record("u", value="v")
    key_only, other = stream_record("k"), stream_record("w", value="x")
    updated = stream_record("m", "MODIFY", value="y")
    key_only_then_modified = stream_record("m")
    records = [duplicate, created, key_only, other, key_only_then_modified, updated]
    assert drop_moto_duplicates(records) == [created, key_only, other, key_only_then_modified, updated]


def test_a_quiet_stream_is_polled_ever_less_often_up_to_the_cap_and_records_reset_the_waits() -> None:
    backoff = Backoff(base_s=1, cap_s=8)
    # Nothing read yet: the longest wait. After records: Lambda's quick polls, doubling to the cap.
    assert backoff.next_wait() == 8
    backoff.reset()
    assert [backoff.next_wait() for _ in range(6)] == [1, 2, 4, 8, 8, 8]


def test_records_reset_the_poller_backoff(stream: Stream) -> None:
    backoff = RecordingBackoff()
    handler = Recorder()
    stream.start(handler, backoff=backoff)
    wait_until(lambda: len(backoff.waits) >= 2, "the empty stream is polled twice")
    stream.put("a")
    wait_until(lambda: handler.delivered() == ["a"], "a is delivered")
    wait_until(lambda: len(backoff.waits) >= (backoff.resets or [0])[-1] + 5, "the stream is quiet again")
    # Before the record, at the cap; from the read that returned it, from the base up again.
    [reset] = backoff.resets
    assert set(backoff.waits[:reset]) == {CAP_WAIT_S}
    assert backoff.waits[reset : reset + 5] == [min(CAP_WAIT_S, BASE_WAIT_S * 2**n) for n in range(5)]


def test_a_quiet_stream_costs_no_listing_and_one_iterator_per_poll(stream: Stream) -> None:
    streams = CountingStreams(stream.streams)
    stream.start(Recorder(), streams=streams)
    wait_until(lambda: streams.count("get_records") >= 5, "the empty stream is polled five times")
    stream.pollers[-1].stop()
    assert stream.pollers[-1].join(time.monotonic() + STOP_S)
    # Listed once at the start; each empty poll reopens its iterator (see the moto workaround).
    assert streams.calls["describe_stream"] == 1
    assert streams.calls["get_shard_iterator"] == streams.calls["get_records"]


def test_inserts_reach_the_function_in_order_and_updates_and_deletes_do_not(stream: Stream) -> None:
    stream.put("a", "b")
    stream.dynamodb.update_item(
        TableName=stream.table,
        Key={KEY: {"S": "a"}},
        UpdateExpression="SET #v = :v",
        ExpressionAttributeNames={"#v": "value"},
        ExpressionAttributeValues={":v": {"S": "changed"}},
    )
    stream.dynamodb.delete_item(TableName=stream.table, Key={KEY: {"S": "b"}})
    stream.put("c")
    handler = Recorder()
    stream.start(handler)
    wait_until(lambda: "c" in handler.delivered(), "c is delivered")
    assert handler.batches == [["a", "b", "c"]]
    assert {record["eventName"] for record in handler.records} == {"INSERT"}
    assert all(set(record) == LAMBDA_RECORD_KEYS for record in handler.records)
    assert {record["eventSourceARN"] for record in handler.records} == {stream.stream_arn}
    assert {record["awsRegion"] for record in handler.records} == {REGION}


@pytest.mark.parametrize("batch_size", [100, 1], ids=["within-one-read", "across-reads"])
def test_an_update_item_that_creates_an_item_is_one_insert(stream: Stream, batch_size: int) -> None:
    stream.dynamodb.update_item(
        TableName=stream.table,
        Key={KEY: {"S": "u"}},
        UpdateExpression="SET #v = :v",
        ExpressionAttributeNames={"#v": "value"},
        ExpressionAttributeValues={":v": {"S": "new"}},
    )
    stream.put("w")
    handler = Recorder()
    stream.start(handler, batch_size=batch_size)
    wait_until(lambda: "w" in handler.delivered(), "w is delivered")
    assert handler.delivered() == ["u", "w"]
    assert handler.records[0]["dynamodb"]["NewImage"]["value"] == {"S": "new"}


def _failures(records: list[dict[str, Any]], *item_ids: str) -> dict[str, Any]:
    return {
        "batchItemFailures": [
            {"itemIdentifier": record["dynamodb"]["SequenceNumber"]}
            for record in records
            if item_id(record) in item_ids
        ]
    }


def test_a_reported_failure_redelivers_that_record_and_the_later_ones_only(stream: Stream) -> None:
    calls = iter(range(1_000))
    handler = Recorder(lambda records: _failures(records, "r3", "r5") if next(calls) == 0 else None)
    stream.put("r1", "r2", "r3", "r4", "r5")
    stream.start(handler)
    wait_until(lambda: len(handler.batches) == 2, "the failed records are delivered again")
    stream.put("r6")
    wait_until(lambda: "r6" in handler.delivered(), "a later record is delivered")
    # From the lowest failed record on; r1 and r2 are done.
    assert handler.batches == [["r1", "r2", "r3", "r4", "r5"], ["r3", "r4", "r5"], ["r6"]]
    assert stream.dead_letters() == []


def test_an_exception_bisects_the_batch_and_a_poison_record_goes_to_the_dlq_after_its_retries(stream: Stream) -> None:
    def poisoned(records: list[dict[str, Any]]) -> object:
        if "p" in [item_id(record) for record in records]:
            raise RuntimeError("the relay cannot handle p")
        return None

    handler = Recorder(poisoned)
    stream.put("a", "p", "b", "c")
    stream.start(handler, max_retry_attempts=2)
    [dead_letter] = wait_until(stream.dead_letters, "the poison record is in the DLQ")
    stream.put("d")
    wait_until(lambda: "d" in handler.delivered(), "a later record is delivered")

    # Halves until p is alone (splits use no retry), then p once and twice more; then the rest flows.
    assert handler.batches == [["a", "p", "b", "c"], ["a", "p"], ["a"], ["p"], ["p"], ["p"], ["b", "c"], ["d"]]
    # What Lambda sends an SQS on-failure destination: metadata naming the record's place in the stream.
    failure = DynamoDBStreamLambdaOnFailureDestinationModel.model_validate(dead_letter)
    assert failure.request_context.condition == RETRY_ATTEMPTS_EXHAUSTED
    assert failure.request_context.approximate_invoke_count == 5
    assert failure.request_context.function_arn.endswith(":function:relay")
    assert failure.response_context.function_error == UNHANDLED
    info = failure.ddb_stream_batch_info
    poison = stream.sequence_numbers()["p"]
    assert (info.start_sequence_number, info.end_sequence_number, info.batch_size) == (poison, poison, 1)
    assert (info.stream_arn, info.shard_id) == (stream.stream_arn, stream.shard_id())


def test_records_older_than_the_max_age_go_straight_to_the_dlq(stream: Stream) -> None:
    handler = Recorder()
    stream.put("a", "b")
    stream.start(handler, max_record_age=timedelta(0))
    [dead_letter] = wait_until(stream.dead_letters, "the expired records are in the DLQ")
    sequence_numbers = stream.sequence_numbers()
    assert dead_letter["requestContext"]["condition"] == RECORD_AGE_EXCEEDED
    assert dead_letter["requestContext"]["approximateInvokeCount"] == 0
    assert "responseContext" not in dead_letter  # never invoked
    info = dead_letter["DDBStreamBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequence_numbers["a"],
        sequence_numbers["b"],
        2,
    )
    assert handler.batches == []


def test_stop_lets_the_invocation_in_flight_finish_and_reads_no_more(stream: Stream) -> None:
    gate = Gate()
    stream.put("a")
    poller = stream.start(gate)
    assert gate.entered.wait(WAIT_S)
    poller.stop()
    stream.put("b")
    now = time.monotonic()
    still_in_flight = not poller.join(now)  # a deadline of now: is the held invocation still running?
    assert still_in_flight
    gate.released.set()
    stop_deadline = time.monotonic() + STOP_S
    assert poller.join(stop_deadline)
    assert gate.finished == [["a"]]


def test_a_failed_read_is_logged_and_reading_resumes_after_the_checkpoint(
    stream: Stream, caplog: pytest.LogCaptureFixture
) -> None:
    streams = ExpiringIterators(stream.streams)
    handler = Recorder()
    stream.put("a")
    stream.start(handler, streams=streams)
    wait_until(lambda: handler.delivered() == ["a"], "a is delivered")
    streams.expiring.set()
    wait_until(streams.failed.is_set, "a read fails")
    stream.put("b")
    wait_until(lambda: "b" in handler.delivered(), "b is delivered")
    assert handler.batches == [["a"], ["b"]]
    logged = [record for record in caplog.records if "resuming after sequence number" in record.getMessage()]
    assert len(logged) == 1
    assert logged[0].levelno == logging.ERROR


def test_the_local_runtime_hands_each_stream_to_the_relay_of_its_source(
    server: EmbeddedAws, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runtime = LocalRuntime(RELAY_TOPOLOGY, endpoint_url=server.endpoint_url)
    for name, value in runtime.provision().table_environment().items():
        monkeypatch.setenv(name, value)  # start sets them too; the test's end removes them
    runtime.start(raw_values=tmp_path / "metrics.jsonl")
    try:
        provisioned = runtime.provisioned
        assert runtime.stream_pollers.keys() == {OUTBOX_SOURCE, ORDERS}
        # A poison record in each stream: an outbox item without an envelope, an order no rule can charge.
        runtime.dynamodb.put_item(
            TableName=provisioned.outbox_table, Item={outbox.KEY: {"S": "job-1"}, outbox.QUEUE: {"S": STANDARD}}
        )
        runtime.dynamodb.put_item(
            TableName=provisioned.tables[ORDERS],
            Item={"order_id": {"S": "o-1"}, "status": {"S": NEW}, "amount_cents": {"N": "0"}},
        )
        reasons: dict[str, str] = {}

        def both_dead_lettered() -> dict[str, str] | None:
            received = runtime.sqs.receive_message(
                QueueUrl=provisioned.relay_dlq_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=1,
                MessageAttributeNames=["All"],
            )
            for message in received.get("Messages", []):
                attributes = message["MessageAttributes"]
                reasons[attributes[RELAY_SOURCE]["StringValue"]] = attributes[message_attributes.REASON]["StringValue"]
            return reasons if len(reasons) == len(provisioned.streams) else None

        assert wait_until(both_dead_lettered, "each relay dead-letters its poison record") == {
            OUTBOX_SOURCE: Reason.INVALID_OUTBOX_ITEM.value,
            ORDERS: Reason.INVALID_PAYLOAD.value,
        }
    finally:
        assert runtime.drain(grace_s=STOP_S)
