"""The embedded AWS's server side: AWS's limits for any client, and DynamoDB's atomicity under concurrency.

Clients here have this process's strict hooks suspended, so every refusal comes from the
server, as it would for a producer in another process or language.
"""

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from conveyor.local import strict
from conveyor.local.embedded import REGION, EmbeddedAws, free_port

ROUNDS = 200
WRITERS = 4


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedAws]:
    aws = EmbeddedAws(free_port())
    aws.start()
    try:
        yield aws
    finally:
        aws.stop()


@pytest.fixture
def lenient_server() -> Iterator[EmbeddedAws]:
    aws = EmbeddedAws(free_port(), strict=False)
    aws.start()
    try:
        yield aws
    finally:
        aws.stop()


@pytest.fixture(autouse=True)
def unchecked_clients() -> Iterator[None]:
    with strict.suspended():
        yield


def client(server: EmbeddedAws, service: str) -> Any:
    return boto3.client(service, endpoint_url=server.endpoint_url, region_name=REGION)  # type: ignore[call-overload]


def create_table(dynamodb: Any, name: str) -> None:
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def eleven_attributes() -> dict[str, dict[str, str]]:
    return {f"a{index}": {"DataType": "String", "StringValue": "v"} for index in range(11)}


def test_server_refuses_an_eleventh_attribute_with_aws_error_and_citation(server: EmbeddedAws) -> None:
    sqs = client(server, "sqs")
    url = sqs.create_queue(QueueName="gateway-eleven")["QueueUrl"]

    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=eleven_attributes())

    error = refused.value.response["Error"]
    assert error["Code"] == "InvalidParameterValue"
    assert "Number of message attributes [11] exceeds the allowed maximum [10]" in error["Message"]
    assert "docs.aws.amazon.com" in error["Message"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_server_fails_a_bad_batch_entry_alone_and_delivers_the_rest(server: EmbeddedAws) -> None:
    sqs = client(server, "sqs")
    url = sqs.create_queue(QueueName="gateway-batch")["QueueUrl"]

    response = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "good", "MessageBody": "fine"},
            {"Id": "bad", "MessageBody": "x", "MessageAttributes": eleven_attributes()},
        ],
    )

    assert [entry["Id"] for entry in response["Successful"]] == ["good"]
    (failed,) = response["Failed"]
    assert (failed["Id"], failed["Code"], failed["SenderFault"]) == ("bad", "InvalidParameterValue", True)
    assert [message["Body"] for message in sqs.receive_message(QueueUrl=url)["Messages"]] == ["fine"]


def test_server_refuses_a_batch_over_ten_entries_with_the_modeled_exception(server: EmbeddedAws) -> None:
    sqs = client(server, "sqs")
    url = sqs.create_queue(QueueName="gateway-eleven-entries")["QueueUrl"]

    with pytest.raises(sqs.exceptions.TooManyEntriesInBatchRequest):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(index), "MessageBody": "x"} for index in range(11)])


def test_server_refuses_an_item_over_400_kb(server: EmbeddedAws) -> None:
    dynamodb = client(server, "dynamodb")
    create_table(dynamodb, "gateway-items")
    # moto alone accepts up to 405,000 bytes; AWS stops at 409,600 counted as names plus values.
    item = {"pk": {"S": "k"}, "v": {"S": "x" * (409_600 - len("pk") - len("k") - len("v") + 1)}}

    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(TableName="gateway-items", Item=item)

    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "Item" not in dynamodb.get_item(TableName="gateway-items", Key={"pk": {"S": "k"}})


def test_lenient_server_lets_moto_accept_what_aws_refuses(lenient_server: EmbeddedAws) -> None:
    sqs = client(lenient_server, "sqs")
    url = sqs.create_queue(QueueName="gateway-lenient")["QueueUrl"]

    sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=eleven_attributes())

    (message,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert len(message["MessageAttributes"]) == 11


def test_readers_never_see_a_half_applied_update(server: EmbeddedAws) -> None:
    """moto stores a new key's bare item before applying the update; AWS never shows it, nor does the gateway."""
    dynamodb = client(server, "dynamodb")
    create_table(dynamodb, "gateway-atomic")
    done = threading.Event()
    bare: list[dict[str, Any]] = []

    def read() -> None:
        reader = client(server, "dynamodb")
        while not done.is_set():
            items = reader.scan(TableName="gateway-atomic", ConsistentRead=True)["Items"]
            bare.extend(item for item in items if "state" not in item)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for index in range(ROUNDS):
            dynamodb.update_item(
                TableName="gateway-atomic",
                Key={"pk": {"S": f"k{index}"}},
                UpdateExpression="SET #state = :state",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":state": {"S": "claimed"}},
            )
    finally:
        done.set()
        thread.join()

    assert bare == []


def test_only_one_of_concurrent_conditional_writes_wins(server: EmbeddedAws) -> None:
    dynamodb = client(server, "dynamodb")
    create_table(dynamodb, "gateway-claims")
    wins: list[tuple[int, int]] = []
    start = threading.Barrier(WRITERS)

    def claim(writer: int) -> None:
        own = client(server, "dynamodb")
        start.wait()
        for index in range(ROUNDS // WRITERS):
            try:
                own.put_item(
                    TableName="gateway-claims",
                    Item={"pk": {"S": f"k{index}"}, "writer": {"N": str(writer)}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except own.exceptions.ConditionalCheckFailedException:
                continue
            wins.append((index, writer))

    threads = [threading.Thread(target=claim, args=(writer,)) for writer in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(index for index, _ in wins) == list(range(ROUNDS // WRITERS)), "each key claimed exactly once"
