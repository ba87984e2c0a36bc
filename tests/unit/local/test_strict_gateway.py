"""The embedded AWS's server side: AWS's limits for any client, and DynamoDB's atomicity under concurrency.

Clients here have this process's strict hooks suspended, so every refusal comes from the
server, as it would for a producer in another process or language.
"""

import json
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from conveyor.local import strict
from conveyor.local.embedded import REGION, EmbeddedAws, free_port

pytestmark = pytest.mark.provokes_refusals  # tests here send what AWS would refuse, on purpose

# Long enough for a request that is not held back to finish; a shorter one only lets the tests pass.
UNBLOCKED_S = 2.0


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


class Pause:
    """Holds the first call of a moto internal mid-operation, to show what other requests see meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, *, after: bool = False) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        original = getattr(owner, name)

        def held(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs) if after else None
            if not self.entered.is_set():
                self.entered.set()
                self.release.wait(UNBLOCKED_S * 5)
            return result if after else original(*args, **kwargs)

        monkeypatch.setattr(owner, name, held)


def in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` on its own thread; its result (or exception) lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except ClientError as error:
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_reader_never_sees_an_update_half_applied(server: EmbeddedAws, monkeypatch: pytest.MonkeyPatch) -> None:
    """moto stores a new key's bare item, then applies the update: AWS never shows the bare item, nor does moto here."""
    from moto.dynamodb.parsing.executors import UpdateExpressionExecutor

    dynamodb = client(server, "dynamodb")
    create_table(dynamodb, "gateway-atomic")
    pause = Pause(monkeypatch, UpdateExpressionExecutor, "execute")  # the bare item is stored by then
    writer, _ = in_thread(
        lambda: dynamodb.update_item(
            TableName="gateway-atomic",
            Key={"pk": {"S": "k"}},
            UpdateExpression="SET #state = :state",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={":state": {"S": "claimed"}},
        )
    )
    assert pause.entered.wait(UNBLOCKED_S * 5)
    reader, scanned = in_thread(lambda: client(server, "dynamodb").scan(TableName="gateway-atomic")["Items"])
    reader.join(UNBLOCKED_S)  # finishes now only if nothing holds it back
    pause.release.set()
    writer.join()
    reader.join()

    assert scanned == [[{"pk": {"S": "k"}, "state": {"S": "claimed"}}]], "the scan saw the update whole"


def test_only_one_of_two_racing_conditional_writes_wins(server: EmbeddedAws, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first writer is held just before it checks its condition: the second must wait, then fail its own."""
    from moto.dynamodb.models import table

    dynamodb = client(server, "dynamodb")
    create_table(dynamodb, "gateway-claims")
    pause = Pause(monkeypatch, table, "get_filter_expression", after=True)  # held once the condition is parsed

    def claim(writer: str) -> Any:
        return client(server, "dynamodb").put_item(
            TableName="gateway-claims",
            Item={"pk": {"S": "k"}, "writer": {"S": writer}},
            ConditionExpression="attribute_not_exists(pk)",
        )

    first, first_outcome = in_thread(lambda: claim("first"))
    assert pause.entered.wait(UNBLOCKED_S * 5)
    second, second_outcome = in_thread(lambda: claim("second"))
    second.join(UNBLOCKED_S)
    pause.release.set()
    first.join()
    second.join()

    assert not isinstance(first_outcome[0], ClientError)
    assert isinstance(second_outcome[0], ClientError)
    assert second_outcome[0].response["Error"]["Code"] == "ConditionalCheckFailedException"
    item = dynamodb.get_item(TableName="gateway-claims", Key={"pk": {"S": "k"}})["Item"]
    assert item["writer"] == {"S": "first"}


def test_two_receives_never_move_one_message_to_the_dlq_twice(
    server: EmbeddedAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receive is held after it picked a message past maxReceiveCount for the DLQ: another receive waits.

    Without the wait, both pick it, and the second to move it fails its whole receive (moto's
    "list.remove(x): x not in list"), leaving the messages it had taken hidden.
    """
    from moto.sqs.models import Message

    sqs = client(server, "sqs")
    dlq = sqs.create_queue(QueueName="gateway-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})
    url = sqs.create_queue(QueueName="gateway-redriven", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="spent")
    sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)  # received once: the next receive moves it
    sqs.send_message(QueueUrl=url, MessageBody="fresh")
    pause = Pause(monkeypatch, Message, "mark_received", after=True)  # "spent" is picked for the DLQ by then

    def receive() -> Any:
        return client(server, "sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)

    first, first_outcome = in_thread(receive)
    assert pause.entered.wait(UNBLOCKED_S * 5)
    second, second_outcome = in_thread(receive)
    second.join(UNBLOCKED_S)
    pause.release.set()
    first.join()
    second.join()

    assert not isinstance(first_outcome[0], ClientError), first_outcome
    assert not isinstance(second_outcome[0], ClientError), second_outcome
    assert [message["Body"] for message in first_outcome[0]["Messages"]] == ["fresh"]
    moved = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10)["Messages"]
    assert [message["Body"] for message in moved] == ["spent"]
