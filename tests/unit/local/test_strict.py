"""Strict mode: in-process moto refuses what AWS refuses, with AWS's error code and the page that says so.

Every request goes through a real boto3 client to ``mock_aws`` (tests/conftest.py installed strict
mode), as the SDK and the tests meet it. Each limit has a refused case (AWS's code, the AWS page
cited, nothing reached moto) and an accepted case at the boundary, so a rule that refuses
everything fails here too. The numbers are AWS's, written out, not read from conveyor.contract.limits.
"""

import base64
import io
import zipfile
from collections.abc import Iterator
from functools import cache
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from conveyor.contract.sizes import item_bytes, message_bytes, number_bytes
from conveyor.local import strict

pytestmark = pytest.mark.provokes_refusals  # tests here send what AWS would refuse, on purpose

AWS_DOCS = "docs.aws.amazon.com"
INVALID = "InvalidParameterValue"
MISSING = "MissingParameter"
VALIDATION = "ValidationException"
# SQS's batch errors are modeled shapes, reported under their query-protocol codes.
SQS_QUERY_PREFIX = "AWS.SimpleQueueService."

MIB = 1_048_576  # an SQS message, body and attributes; and a SendMessageBatch in total
MAX_ITEM = 409_600  # a DynamoDB item: "400 KB"
TABLE = "items"
KEY = {"pk": {"S": "k"}}  # 2 + 1 = 3 bytes as DynamoDB counts it
ACCOUNT = "123456789012"


@cache
def client(service: str) -> Any:
    """One client per service for the module: making one costs more than a test (moto is on per test)."""
    return boto3.client(service)  # type: ignore[call-overload]


def assert_refused(error: ClientError, code: str) -> None:
    """Refused as AWS refuses: HTTP 400, AWS's error code, and the AWS page that states the limit."""
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error.response["Error"]["Code"] == code
    assert AWS_DOCS in error.response["Error"]["Message"]


# --- SQS -------------------------------------------------------------------------------------------


@pytest.fixture
def sqs() -> Iterator[Any]:
    with mock_aws():
        yield client("sqs")


@pytest.fixture
def queue(sqs: Any) -> str:
    url: str = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    return url


@pytest.fixture
def fifo_queue(sqs: Any) -> str:
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    url: str = sqs.create_queue(QueueName="jobs.fifo", Attributes=attributes)["QueueUrl"]
    return url


def depth(sqs: Any, url: str) -> dict[str, int]:
    """How many messages the queue holds: visible, in flight and delayed."""
    names = {
        "visible": "ApproximateNumberOfMessages",
        "in_flight": "ApproximateNumberOfMessagesNotVisible",
        "delayed": "ApproximateNumberOfMessagesDelayed",
    }
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names.values()))["Attributes"]
    return {state: int(attributes[name]) for state, name in names.items()}


def queued(sqs: Any, url: str) -> int:
    return sum(depth(sqs, url).values())


def string(value: str, data_type: str = "String") -> dict[str, Any]:
    return {"DataType": data_type, "StringValue": value}


def attributes(count: int) -> dict[str, Any]:
    return {f"attr{i}": string("v") for i in range(count)}


def attribute(name: str = "a", value: dict[str, Any] | None = None) -> dict[str, Any]:
    """A SendMessage request's one message attribute."""
    return {"MessageAttributes": {name: value or string("v")}}


# "a" + "String" + "v": SQS counts each attribute's name, data type and value.
ONE_ATTRIBUTE_BYTES = 8


def message_of(size: int) -> dict[str, Any]:
    """A body and one attribute that SQS counts as exactly ``size`` bytes."""
    return {"MessageBody": "x" * (size - ONE_ATTRIBUTE_BYTES), **attribute()}


# Under 1 MiB in characters, over it in UTF-8 bytes ("é" is two): moto counts characters.
TWO_BYTE_BODY_OVER = "é" * (MIB // 2 + 1)

BAD_ATTRIBUTE_NAMES = {
    "space": "trace id",
    "slash": "trace/id",
    "colon": "trace:id",
    "257-characters": "a" * 257,
    "AWS-prefix": "AWS.trace",
    "aws-prefix-lower-case": "aws.trace",
    "Amazon-prefix": "Amazon.trace",
    "amazon-prefix-mixed-case": "aMaZoN.trace",
    "leading-period": ".trace",
    "trailing-period": "trace.",
    "double-period": "trace..id",
}

SEND_REFUSED = [
    pytest.param(False, {"MessageAttributes": attributes(11)}, INVALID, id="eleven-attributes"),
    *(
        pytest.param(False, attribute(name), INVALID, id=f"attribute-name-{label}")
        for label, name in BAD_ATTRIBUTE_NAMES.items()
    ),
    pytest.param(False, attribute(value=string("")), INVALID, id="empty-string-value"),
    pytest.param(False, attribute(value={"DataType": "Binary", "BinaryValue": b""}), INVALID, id="empty-binary-value"),
    pytest.param(False, attribute(value=string("v", "Text")), INVALID, id="data-type-text"),
    pytest.param(False, attribute(value=string("v", "string")), INVALID, id="data-type-lower-case"),
    pytest.param(False, attribute(value=string("five", "Number")), INVALID, id="number-not-numeric"),
    pytest.param(False, attribute(value=string("1.2.3", "Number")), INVALID, id="number-two-points"),
    pytest.param(False, {"MessageBody": "job\x01"}, "InvalidMessageContents", id="body-control-character"),
    pytest.param(False, {"MessageBody": "job\ufffe"}, "InvalidMessageContents", id="body-non-character"),
    pytest.param(False, {"MessageBody": ""}, MISSING, id="empty-body"),
    pytest.param(False, {"MessageBody": "x" * MIB, **attribute()}, INVALID, id="1-MiB-body-plus-an-attribute"),
    pytest.param(False, message_of(MIB + 1), INVALID, id="one-byte-over-1-MiB"),
    pytest.param(False, {"MessageBody": TWO_BYTE_BODY_OVER}, INVALID, id="two-byte-characters-over-1-MiB"),
    pytest.param(False, {"DelaySeconds": 901}, INVALID, id="delay-901s"),
    pytest.param(False, {"MessageDeduplicationId": "d"}, INVALID, id="deduplication-id-on-a-standard-queue"),
    pytest.param(True, {"MessageGroupId": "g", "DelaySeconds": 5}, INVALID, id="fifo-per-message-delay"),
    pytest.param(True, {}, MISSING, id="fifo-without-group-id"),
    pytest.param(True, {"MessageGroupId": "g" * 129}, INVALID, id="fifo-group-id-of-129-characters"),
    pytest.param(True, {"MessageGroupId": "group one"}, INVALID, id="fifo-group-id-with-a-space"),
]

SEND_ACCEPTED = [
    pytest.param(False, {"MessageAttributes": attributes(10)}, id="ten-attributes"),
    pytest.param(False, message_of(MIB), id="exactly-1-MiB-counting-attributes"),
    pytest.param(False, {"MessageBody": "é" * (MIB // 2)}, id="exactly-1-MiB-of-two-byte-characters"),
    pytest.param(False, attribute("a" * 256), id="attribute-name-of-256-characters"),
    pytest.param(False, attribute("AWSfoo"), id="attribute-name-AWS-without-period"),
    pytest.param(False, attribute("Trace.id-v2_x"), id="attribute-name-with-period-hyphen-underscore"),
    pytest.param(False, attribute(value=string("{}", "String.json")), id="data-type-with-custom-label"),
    pytest.param(False, attribute(value=string("-1.5E3", "Number")), id="number-with-exponent"),
    pytest.param(False, attribute(value={"DataType": "Binary", "BinaryValue": b"\x00\xff"}), id="binary-value"),
    pytest.param(False, {"MessageBody": "tab\tline\ncr\r \ue000 \U0001f600"}, id="body-allowed-characters"),
    pytest.param(False, {"DelaySeconds": 900}, id="delay-900s"),
    pytest.param(False, {"MessageGroupId": "tenant-1"}, id="group-id-on-a-standard-queue"),
    pytest.param(True, {"MessageGroupId": "g", "DelaySeconds": 0}, id="fifo-delay-0"),
    pytest.param(True, {"MessageGroupId": "g" * 128}, id="fifo-group-id-of-128-characters"),
    pytest.param(True, {"MessageGroupId": "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"}, id="fifo-group-id-punctuation"),
]


@pytest.mark.parametrize(("fifo", "message", "code"), SEND_REFUSED)
def test_send_message_aws_refuses_is_refused_as_aws_does_and_nothing_is_queued(
    sqs: Any, queue: str, fifo_queue: str, fifo: bool, message: dict[str, Any], code: str
) -> None:
    url = fifo_queue if fifo else queue
    with pytest.raises(ClientError) as caught:
        sqs.send_message(**{"QueueUrl": url, "MessageBody": "job", **message})
    assert_refused(caught.value, code)
    assert queued(sqs, url) == 0


@pytest.mark.parametrize(("fifo", "message"), SEND_ACCEPTED)
def test_send_message_at_aws_limits_is_accepted_and_queued(
    sqs: Any, queue: str, fifo_queue: str, fifo: bool, message: dict[str, Any]
) -> None:
    url = fifo_queue if fifo else queue
    sqs.send_message(**{"QueueUrl": url, "MessageBody": "job", **message})
    assert queued(sqs, url) == 1


@pytest.mark.parametrize(
    ("fifo", "bad", "code"),
    [
        pytest.param(False, {"MessageAttributes": attributes(11)}, INVALID, id="eleven-attributes"),
        pytest.param(False, attribute("AWS.trace"), INVALID, id="reserved-attribute-name"),
        pytest.param(False, {"MessageBody": "job\x01"}, "InvalidMessageContents", id="body-control-character"),
        pytest.param(False, {"DelaySeconds": 901}, INVALID, id="delay-901s"),
        pytest.param(False, {"MessageDeduplicationId": "d"}, INVALID, id="deduplication-id-on-a-standard-queue"),
        pytest.param(True, {"DelaySeconds": 5}, INVALID, id="fifo-per-message-delay"),
    ],
)
def test_send_message_batch_fails_the_entry_aws_refuses_and_delivers_the_other(
    sqs: Any, queue: str, fifo_queue: str, fifo: bool, bad: dict[str, Any], code: str
) -> None:
    url, group = (fifo_queue, {"MessageGroupId": "g"}) if fifo else (queue, {})
    entries = [{"Id": "good", "MessageBody": "ok", **group}, {"Id": "bad", "MessageBody": "ko", **group, **bad}]
    response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert [entry["Id"] for entry in response["Successful"]] == ["good"]
    (failed,) = response["Failed"]
    assert (failed["Id"], failed["SenderFault"], failed["Code"]) == ("bad", True, code)
    assert AWS_DOCS in failed["Message"]
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [message["Body"] for message in received] == ["ok"]


def test_send_message_batch_whose_every_entry_aws_refuses_fails_them_all_and_sends_nothing(
    sqs: Any, queue: str
) -> None:
    entries = [{"Id": f"e{i}", "MessageBody": "job", "MessageAttributes": attributes(11)} for i in range(2)]
    response = sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert response.get("Successful", []) == []
    assert sorted((entry["Id"], entry["Code"]) for entry in response["Failed"]) == [("e0", INVALID), ("e1", INVALID)]
    assert queued(sqs, queue) == 0


# moto counts a visibility change's 12 hours from the message's sending, to the millisecond, so it
# refuses exactly 43,200 s a moment later; ReceiveMessage shows 43,200 itself accepted.
ALMOST_12_HOURS = 43_000

BATCH_ACTIONS = ["send_message_batch", "delete_message_batch", "change_message_visibility_batch"]


def batch_entry(action: str, entry_id: str, receipt_handle: str) -> dict[str, Any]:
    """One entry of ``action``; a delete or a visibility change to 0 would each move the in-flight message."""
    if action == "send_message_batch":
        return {"Id": entry_id, "MessageBody": "job"}
    entry = {"Id": entry_id, "ReceiptHandle": receipt_handle}
    return {**entry, "VisibilityTimeout": 0} if action == "change_message_visibility_batch" else entry


@pytest.mark.parametrize("action", BATCH_ACTIONS)
@pytest.mark.parametrize(
    ("ids", "shape"),
    [
        # botocore does not check a list's length client-side, so an empty batch reaches the hook.
        pytest.param([], "EmptyBatchRequest", id="no-entries"),
        pytest.param([f"e{i}" for i in range(11)], "TooManyEntriesInBatchRequest", id="eleven-entries"),
        pytest.param(["same", "same"], "BatchEntryIdsNotDistinct", id="duplicate-ids"),
        pytest.param(["bad id"], "InvalidBatchEntryId", id="id-with-a-space"),
        pytest.param(["bad.id"], "InvalidBatchEntryId", id="id-with-a-period"),
        pytest.param(["i" * 81], "InvalidBatchEntryId", id="id-of-81-characters"),
    ],
)
def test_batch_request_aws_refuses_raises_the_modeled_error_and_changes_nothing(
    sqs: Any, queue: str, action: str, ids: list[str], shape: str
) -> None:
    sqs.send_message(QueueUrl=queue, MessageBody="in flight")
    (message,) = sqs.receive_message(QueueUrl=queue)["Messages"]
    entries = [batch_entry(action, entry_id, message["ReceiptHandle"]) for entry_id in ids]
    with pytest.raises(getattr(sqs.exceptions, shape)) as caught:
        getattr(sqs, action)(QueueUrl=queue, Entries=entries)
    assert_refused(caught.value, SQS_QUERY_PREFIX + shape)
    assert depth(sqs, queue) == {"visible": 0, "in_flight": 1, "delayed": 0}


def test_batches_of_ten_entries_with_ids_up_to_80_characters_are_accepted_by_every_batch_action(
    sqs: Any, queue: str
) -> None:
    ids = ["i" * 80, "with-hyphen", "with_underscore", *(f"E{i}" for i in range(7))]
    sent = sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": i, "MessageBody": i} for i in ids])
    assert len(sent["Successful"]) == 10
    assert not sent.get("Failed")
    received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    handles = [{"Id": i, "ReceiptHandle": message["ReceiptHandle"]} for i, message in zip(ids, received, strict=True)]
    visibility = [{**handle, "VisibilityTimeout": ALMOST_12_HOURS} for handle in handles]
    assert len(sqs.change_message_visibility_batch(QueueUrl=queue, Entries=visibility)["Successful"]) == 10
    assert len(sqs.delete_message_batch(QueueUrl=queue, Entries=handles)["Successful"]) == 10
    assert queued(sqs, queue) == 0


def test_send_message_batch_over_1_mib_in_total_is_refused_though_each_message_fits(sqs: Any, queue: str) -> None:
    # 600,000 bytes each, but 300,000 characters: moto, which counts characters, would take it.
    entries = [{"Id": f"e{i}", "MessageBody": "é" * 300_000} for i in range(2)]
    with pytest.raises(sqs.exceptions.BatchRequestTooLong) as caught:
        sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert_refused(caught.value, SQS_QUERY_PREFIX + "BatchRequestTooLong")
    assert queued(sqs, queue) == 0


def test_send_message_batch_of_exactly_1_mib_in_total_is_accepted(sqs: Any, queue: str) -> None:
    entries = [{"Id": f"e{i}", "MessageBody": "é" * (MIB // 4)} for i in range(2)]
    assert len(sqs.send_message_batch(QueueUrl=queue, Entries=entries)["Successful"]) == 2
    assert queued(sqs, queue) == 2


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"MaxNumberOfMessages": 11}, id="eleven-messages"),
        pytest.param({"WaitTimeSeconds": 21}, id="wait-21s"),
        pytest.param({"VisibilityTimeout": 43_201}, id="visibility-over-12-hours"),
    ],
)
def test_receive_message_outside_aws_ranges_is_refused_and_receives_nothing(
    sqs: Any, queue: str, params: dict[str, int]
) -> None:
    sqs.send_message(QueueUrl=queue, MessageBody="job")
    with pytest.raises(ClientError) as caught:
        sqs.receive_message(QueueUrl=queue, **params)
    assert_refused(caught.value, INVALID)
    assert depth(sqs, queue)["visible"] == 1


def test_receive_message_at_the_top_of_aws_ranges_is_accepted(sqs: Any, queue: str) -> None:
    sqs.send_message(QueueUrl=queue, MessageBody="job")  # there, so a 20 s long poll answers at once
    response = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=20, VisibilityTimeout=43_200)
    assert [message["Body"] for message in response["Messages"]] == ["job"]


def test_change_message_visibility_beyond_12_hours_is_refused_and_within_them_is_accepted(sqs: Any, queue: str) -> None:
    sqs.send_message(QueueUrl=queue, MessageBody="job")
    (message,) = sqs.receive_message(QueueUrl=queue)["Messages"]
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=43_201)
    assert_refused(caught.value, INVALID)
    sqs.change_message_visibility(
        QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=ALMOST_12_HOURS
    )
    assert depth(sqs, queue)["in_flight"] == 1


def test_change_message_visibility_batch_fails_the_entry_beyond_12_hours_and_applies_the_other(
    sqs: Any, queue: str
) -> None:
    sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": i, "MessageBody": i} for i in ("a", "b")])
    first, second = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    entries = [
        {"Id": "good", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 0},
        {"Id": "bad", "ReceiptHandle": second["ReceiptHandle"], "VisibilityTimeout": 43_201},
    ]
    response = sqs.change_message_visibility_batch(QueueUrl=queue, Entries=entries)
    assert [entry["Id"] for entry in response["Successful"]] == ["good"]
    (failed,) = response["Failed"]
    assert (failed["Id"], failed["SenderFault"], failed["Code"]) == ("bad", True, INVALID)
    assert AWS_DOCS in failed["Message"]
    assert depth(sqs, queue) == {"visible": 1, "in_flight": 1, "delayed": 0}


def test_start_message_move_task_faster_than_500_messages_a_second_is_refused() -> None:
    # In-process moto has no message move tasks (the embedded AWS's server emulates them), so the
    # rule is called directly, as the client hook and the server both call it.
    params = {"SourceArn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:jobs-dlq"}
    assert strict.check("sqs", "StartMessageMoveTask", {**params, "MaxNumberOfMessagesPerSecond": 500}) == {}
    with pytest.raises(strict.Violation) as caught:
        strict.check("sqs", "StartMessageMoveTask", {**params, "MaxNumberOfMessagesPerSecond": 501})
    assert caught.value.code == INVALID
    assert AWS_DOCS in str(caught.value)


def test_suspended_lets_a_request_aws_refuses_through_to_moto(sqs: Any, queue: str) -> None:
    eleven = {"QueueUrl": queue, "MessageBody": "job", "MessageAttributes": attributes(11)}
    with strict.suspended():
        sqs.send_message(**eleven)
    assert queued(sqs, queue) == 1
    with pytest.raises(ClientError) as caught:
        sqs.send_message(**eleven)
    assert_refused(caught.value, INVALID)


# --- DynamoDB --------------------------------------------------------------------------------------


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        dynamodb = client("dynamodb")
        dynamodb.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield dynamodb


EMPTY_LISTS = 1500


def padding(size: int) -> dict[str, Any]:
    """A List that DynamoDB counts as ``size`` bytes: 3, plus for each element 1 and its own size.

    moto refuses an item over 405,000 bytes as it counts them, and counts no List overhead: with
    1,500 empty Lists (4 bytes each to DynamoDB, none to moto) the item is under moto's limit,
    so only strict mode can refuse it.
    """
    text = size - 3 - EMPTY_LISTS * (1 + 3) - 1
    return {"L": [{"L": []}] * EMPTY_LISTS + [{"S": "x" * text}]}


def write_item(dynamodb: Any, how: str, size: int) -> None:
    """Put, or update into being, an item whose size (as conveyor.contract.sizes counts the request) is ``size``.

    The update sets ``bl`` from ``:b``: both two bytes, so the request's count is the new item's.
    """
    if how == "put":
        item = {**KEY, "bl": padding(size - 3 - 2)}
        assert item_bytes(item) == size
        dynamodb.put_item(TableName=TABLE, Item=item)
    else:
        values = {":b": padding(size - 3 - 2)}
        assert item_bytes(KEY) + item_bytes(values) == size
        dynamodb.update_item(TableName=TABLE, Key=KEY, UpdateExpression="SET bl = :b", ExpressionAttributeValues=values)


def stored(dynamodb: Any) -> dict[str, Any] | None:
    item: dict[str, Any] | None = dynamodb.get_item(TableName=TABLE, Key=KEY).get("Item")
    return item


def test_item_one_byte_over_400_kb_is_refused_and_not_written(dynamodb: Any) -> None:
    """A put only: an update's resulting size is known to the table alone (docs/local.md)."""
    with pytest.raises(ClientError) as caught:
        write_item(dynamodb, "put", MAX_ITEM + 1)
    assert_refused(caught.value, VALIDATION)
    assert stored(dynamodb) is None


@pytest.mark.parametrize("how", ["put", "update"])
def test_item_of_exactly_400_kb_is_written(dynamodb: Any, how: str) -> None:
    write_item(dynamodb, how, MAX_ITEM)
    item = stored(dynamodb)
    assert item is not None
    assert item_bytes(item) == MAX_ITEM


def write_values(dynamodb: Any, how: str, values: dict[str, Any]) -> None:
    """PutItem of the key and ``values``, or UpdateItem setting each ``name`` from its ``:name``."""
    if how == "put":
        dynamodb.put_item(TableName=TABLE, Item={**KEY, **values})
    else:
        expression = "SET " + ", ".join(f"{name[1:]} = {name}" for name in values)
        dynamodb.update_item(TableName=TABLE, Key=KEY, UpdateExpression=expression, ExpressionAttributeValues=values)


@pytest.mark.parametrize(
    ("how", "values"),
    [
        pytest.param("put", {"tags": {"SS": []}}, id="string-set"),
        pytest.param("put", {"scores": {"NS": []}}, id="number-set"),
        pytest.param("put", {"blobs": {"BS": []}}, id="binary-set"),
        pytest.param("put", {"meta": {"M": {"tags": {"SS": []}}}}, id="set-in-a-map"),
        pytest.param("put", {"rows": {"L": [{"S": "x"}, {"NS": []}]}}, id="set-in-a-list"),
        pytest.param("put", {"rows": {"L": [{"M": {"blobs": {"BS": []}}}]}}, id="set-in-a-map-in-a-list"),
        pytest.param("update", {":tags": {"SS": []}}, id="update-value"),
        pytest.param("update", {":meta": {"M": {"scores": {"NS": []}}}}, id="update-value-set-in-a-map"),
    ],
)
def test_empty_set_is_refused_and_the_item_not_written(dynamodb: Any, how: str, values: dict[str, Any]) -> None:
    with pytest.raises(ClientError) as caught:
        write_values(dynamodb, how, values)
    assert_refused(caught.value, VALIDATION)
    assert stored(dynamodb) is None


def test_non_empty_sets_and_empty_lists_and_maps_are_written(dynamodb: Any) -> None:
    item = {
        **KEY,
        "tags": {"SS": ["a"]},
        "meta": {"M": {"scores": {"NS": ["1"]}, "none": {"M": {}}}},
        "rows": {"L": [{"L": []}, {"BS": [b"\x00"]}]},
    }
    dynamodb.put_item(TableName=TABLE, Item=item)
    assert stored(dynamodb) == item


def transact_puts(count: int, size: int) -> list[dict[str, Any]]:
    return [
        {"Put": {"TableName": TABLE, "Item": {"pk": {"S": f"k{i}"}, "bl": {"S": "x" * size}}}} for i in range(count)
    ]


def scanned(dynamodb: Any) -> int:
    """How many items the table holds (moto pages a scan at 1 MB, even a count)."""
    pages = dynamodb.get_paginator("scan").paginate(TableName=TABLE, Select="COUNT")
    return sum(int(page["Count"]) for page in pages)


def test_transact_write_items_over_4_mb_in_total_is_refused_and_writes_nothing(dynamodb: Any) -> None:
    # Eleven items of 390,000 bytes: each fits, together they are over 4 MB (4,194,304 bytes).
    with pytest.raises(ClientError) as caught:
        dynamodb.transact_write_items(TransactItems=transact_puts(11, 390_000))
    assert_refused(caught.value, VALIDATION)
    assert scanned(dynamodb) == 0


def test_transact_write_items_under_4_mb_in_total_is_written(dynamodb: Any) -> None:
    dynamodb.transact_write_items(TransactItems=transact_puts(10, 390_000))
    assert scanned(dynamodb) == 10


def put_requests(count: int) -> dict[str, Any]:
    return {TABLE: [{"PutRequest": {"Item": {"pk": {"S": f"k{i}"}}}} for i in range(count)]}


def test_batch_write_item_of_26_requests_is_refused_and_writes_nothing(dynamodb: Any) -> None:
    with pytest.raises(ClientError) as caught:
        dynamodb.batch_write_item(RequestItems=put_requests(26))
    assert_refused(caught.value, VALIDATION)
    assert scanned(dynamodb) == 0


def test_batch_write_item_of_25_requests_is_written(dynamodb: Any) -> None:
    assert dynamodb.batch_write_item(RequestItems=put_requests(25))["UnprocessedItems"] == {}
    assert scanned(dynamodb) == 25


def test_batch_get_item_of_101_keys_is_refused_and_100_are_read(dynamodb: Any) -> None:
    dynamodb.batch_write_item(RequestItems=put_requests(25))
    keys = [{"pk": {"S": f"k{i}"}} for i in range(101)]
    with pytest.raises(ClientError) as caught:
        dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": keys}})
    assert_refused(caught.value, VALIDATION)
    response = dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": keys[:100]}})
    assert len(response["Responses"][TABLE]) == 25


# --- EventBridge Scheduler -------------------------------------------------------------------------


@pytest.fixture
def scheduler() -> Iterator[Any]:
    with mock_aws():
        yield client("scheduler")


def schedule(name: str = "nightly", *, window: dict[str, Any] | None = None, **target: Any) -> dict[str, Any]:
    """A CreateSchedule/UpdateSchedule request; moto takes fake target and role ARNs."""
    return {
        "Name": name,
        "ScheduleExpression": "rate(1 hour)",
        "FlexibleTimeWindow": window or {"Mode": "OFF"},
        "Target": {
            "Arn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:jobs",
            "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/scheduler",
            **target,
        },
    }


def schedules(scheduler: Any) -> list[dict[str, Any]]:
    """Every schedule, in full, to show a refused request changed none."""
    names = [entry["Name"] for entry in scheduler.list_schedules()["Schedules"]]
    return [{**scheduler.get_schedule(Name=name), "ResponseMetadata": None} for name in names]


@pytest.mark.parametrize("action", ["create_schedule", "update_schedule"])
@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(schedule("nightly report"), id="name-with-a-space"),
        pytest.param(schedule("jobs:nightly"), id="name-with-a-colon"),
        pytest.param(schedule("n" * 65), id="name-of-65-characters"),
        pytest.param(schedule(RetryPolicy={"MaximumRetryAttempts": 186}), id="186-retries"),
        pytest.param(schedule(RetryPolicy={"MaximumEventAgeInSeconds": 86_401}), id="event-age-over-a-day"),
        pytest.param(
            schedule(window={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 1441}), id="flexible-window-over-a-day"
        ),
        pytest.param(schedule(window={"Mode": "FLEXIBLE"}), id="flexible-window-without-its-length"),
        pytest.param({**schedule(), "ActionAfterCompletion": "ARCHIVE"}, id="unknown-action-after-completion"),
    ],
)
def test_schedule_aws_refuses_is_refused_and_no_schedule_changes(
    scheduler: Any, action: str, request_: dict[str, Any]
) -> None:
    scheduler.create_schedule(**schedule())
    before = schedules(scheduler)
    with pytest.raises(scheduler.exceptions.ValidationException) as caught:
        getattr(scheduler, action)(**request_)
    assert_refused(caught.value, VALIDATION)
    assert schedules(scheduler) == before


def test_schedules_at_aws_limits_are_created_and_updated(scheduler: Any) -> None:
    name = ("Jobs-nightly_report.v2" * 3)[:64]
    top = {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86_400}
    scheduler.create_schedule(
        **schedule(name, window={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 1440}, RetryPolicy=top),
        ActionAfterCompletion="DELETE",
    )
    bottom = {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}
    scheduler.update_schedule(
        **schedule(name, window={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 1}, RetryPolicy=bottom)
    )
    stored_schedule = scheduler.get_schedule(Name=name)
    assert stored_schedule["Target"]["RetryPolicy"] == bottom
    assert stored_schedule["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 1}


# --- Lambda event source mappings ------------------------------------------------------------------


AT_LIMITS: dict[str, Any] = {
    "BatchSize": 10_000,
    "MaximumBatchingWindowInSeconds": 300,
    "ScalingConfig": {"MaximumConcurrency": 1000},
}


@pytest.fixture
def mapping() -> Iterator[tuple[Any, str]]:
    """A Lambda client, and an SQS event source mapping at the top of every range AWS allows."""
    with mock_aws():
        role = client("iam").create_role(RoleName="worker", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("worker.py", "def handler(event, context):\n    return None\n")
        functions = client("lambda")
        functions.create_function(
            FunctionName="worker",
            Runtime="python3.11",
            Role=role,
            Handler="worker.handler",
            Code={"ZipFile": code.getvalue()},
        )
        sqs = client("sqs")
        url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        created = functions.create_event_source_mapping(FunctionName="worker", EventSourceArn=arn, **AT_LIMITS)
        yield functions, str(created["UUID"])


def mapping_settings(functions: Any, uuid: str) -> dict[str, Any]:
    current = functions.get_event_source_mapping(UUID=uuid)
    return {name: current.get(name) for name in AT_LIMITS}


@pytest.mark.parametrize("action", ["create_event_source_mapping", "update_event_source_mapping"])
@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"ScalingConfig": {"MaximumConcurrency": 1001}}, id="maximum-concurrency-1001"),
        pytest.param({"MaximumBatchingWindowInSeconds": 301}, id="batching-window-301s"),
        pytest.param({"BatchSize": 10_001}, id="batch-size-10001"),
        pytest.param({"BatchSize": 11, "MaximumBatchingWindowInSeconds": 0}, id="batch-over-10-without-a-window"),
    ],
)
def test_event_source_mapping_setting_aws_refuses_is_refused_and_the_mapping_is_unchanged(
    mapping: tuple[Any, str], action: str, settings: dict[str, Any]
) -> None:
    functions, uuid = mapping
    target = {"UUID": uuid} if action == "update_event_source_mapping" else {"FunctionName": "worker"}
    with pytest.raises(functions.exceptions.InvalidParameterValueException) as caught:
        getattr(functions, action)(**target, **settings)
    assert_refused(caught.value, "InvalidParameterValueException")
    assert mapping_settings(functions, uuid) == AT_LIMITS
    assert len(functions.list_event_source_mappings(FunctionName="worker")["EventSourceMappings"]) == 1


def test_event_source_mapping_at_aws_limits_is_created_and_updated(mapping: tuple[Any, str]) -> None:
    functions, uuid = mapping  # created at the top of every range by the fixture
    assert mapping_settings(functions, uuid) == AT_LIMITS
    bottom = {"BatchSize": 1, "MaximumBatchingWindowInSeconds": 0, "ScalingConfig": {"MaximumConcurrency": 2}}
    functions.update_event_source_mapping(UUID=uuid, **bottom)
    assert mapping_settings(functions, uuid) == bottom


def test_invoke_with_a_payload_that_is_not_json_reaches_lambda() -> None:
    with mock_aws():
        functions = client("lambda")
        with pytest.raises(functions.exceptions.ResourceNotFoundException):
            functions.invoke(FunctionName="missing", Payload=b"plain text")


# --- Sizes as AWS counts them ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "size"),
    [
        ("0.00100", 2),  # one significant digit: leading and trailing zeros are not stored
        ("-12345", 4),  # five digits: three bytes, plus one
        ("1E+10", 2),  # the exponent is not a digit
        ("0", 2),
        ("12", 2),
        ("123", 3),
        ("1" * 38, 20),
    ],
)
def test_number_bytes_is_one_byte_per_two_significant_digits_plus_one(number: str, size: int) -> None:
    assert number_bytes(number) == size


def test_item_bytes_counts_names_values_and_each_list_and_map_overhead() -> None:
    item = {
        "id": {"S": "héllo"},  # 2 + 6 (é is two bytes)
        "n": {"N": "-12345"},  # 1 + 4
        "ok": {"BOOL": True},  # 2 + 1
        "no": {"NULL": True},  # 2 + 1
        "b": {"B": b"\x00\x01\x02"},  # 1 + 3
        "ss": {"SS": ["a", "bc"]},  # 2 + 3
        "m": {"M": {"k": {"S": "v"}, "l": {"L": [{"N": "1"}, {"S": "xy"}]}}},
        # 1 + (3 + 1 per entry x 2 + "k" 1 + "v" 1 + "l" 1 + (3 + (1 + 2) + (1 + 2)))
    }
    assert item_bytes(item) == 8 + 5 + 3 + 3 + 4 + 5 + (1 + 3 + 2 + 1 + 1 + 1 + 9)


def test_message_bytes_counts_the_body_and_each_attributes_name_data_type_and_value() -> None:
    assert message_bytes("héllo") == 6
    assert message_bytes("job", {"tenant": string("acme"), "n": string("12", "Number")}) == 3 + (6 + 6 + 4) + (
        1 + 6 + 2
    )
    assert message_bytes(message_of(MIB)["MessageBody"], attribute()["MessageAttributes"]) == MIB
    assert len(TWO_BYTE_BODY_OVER) < MIB < message_bytes(TWO_BYTE_BODY_OVER)


@pytest.mark.parametrize(
    "binary",
    [
        pytest.param(b"\x00\xff\x10\x20", id="bytes"),
        pytest.param(base64.b64encode(b"\x00\xff\x10\x20").decode(), id="base64"),
    ],
)
def test_binary_values_count_their_raw_bytes_whether_given_as_bytes_or_base64(binary: bytes | str) -> None:
    assert message_bytes("", {"b": {"DataType": "Binary", "BinaryValue": binary}}) == 1 + 6 + 4
    assert item_bytes({"b": {"B": binary}, "bs": {"BS": [binary]}}) == (1 + 4) + (2 + 4)
