"""SQS message move tasks (DLQ redrive), emulated for the embedded AWS, against an in-process moto."""

import base64
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from conveyor.local.move_tasks import MoveTasks
from conveyor.local.strict.violation import Violation

DEADLINE_S = 5.0
ATTRIBUTES = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "attempt": {"DataType": "Number.int", "StringValue": "3"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
}


@dataclass(frozen=True)
class Queue:
    url: str
    arn: str


@pytest.fixture
def sqs() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("sqs")


@pytest.fixture
def tasks(sqs: Any) -> Iterator[MoveTasks]:
    tasks = MoveTasks(sqs)
    yield tasks
    tasks.stop()


def _queue(sqs: Any, name: str, dead_letter: Queue | None = None) -> Queue:
    attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
    if dead_letter:
        attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": dead_letter.arn, "maxReceiveCount": 5})
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    return Queue(url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def _dlq(sqs: Any, name: str = "work") -> tuple[Queue, Queue]:
    """A queue and its dead-letter queue, as (source, dlq)."""
    suffix = ".fifo" if name.endswith(".fifo") else ""
    dlq = _queue(sqs, name.removesuffix(suffix) + "-dlq" + suffix)
    return _queue(sqs, name, dead_letter=dlq), dlq


def _send(sqs: Any, queue: Queue, count: int) -> list[str]:
    """Send ``count`` messages; their ids, in order."""
    ids = []
    for index in range(count):
        fifo = {"MessageGroupId": "orders", "MessageDeduplicationId": f"dedup-{index}"}
        request = {"QueueUrl": queue.url, "MessageBody": f"job-{index}", "MessageAttributes": ATTRIBUTES}
        ids.append(sqs.send_message(**request, **(fifo if queue.arn.endswith(".fifo") else {}))["MessageId"])
    return ids


def _receive(sqs: Any, queue: Queue) -> list[dict[str, Any]]:
    return list(
        sqs.receive_message(
            QueueUrl=queue.url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
    )


def _count(sqs: Any, queue: Queue) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[name]) for name in names)


def _latest(tasks: MoveTasks, source: Queue) -> dict[str, Any]:
    results: list[dict[str, Any]] = tasks.handle("ListMessageMoveTasks", {"SourceArn": source.arn})["Results"]
    return results[0]


def _wait_for(tasks: MoveTasks, source: Queue, status: str) -> dict[str, Any]:
    """The latest task once it has ``status``; fails if it has not got there by the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while (entry := _latest(tasks, source))["Status"] != status and time.monotonic() < deadline:
        time.sleep(0.02)
    assert entry["Status"] == status, entry
    return entry


def _refused(tasks: MoveTasks, operation: str, params: dict[str, Any]) -> Violation:
    with pytest.raises(Violation) as caught:
        tasks.handle(operation, params)
    return caught.value


def test_moves_to_a_destination_as_new_messages_with_body_and_attributes_kept(sqs: Any, tasks: MoveTasks) -> None:
    _, dlq = _dlq(sqs)
    replay = _queue(sqs, "replay")
    originals = _send(sqs, dlq, 3)
    # Received once already, so that a reset receive count shows.
    sqs.receive_message(QueueUrl=dlq.url, MaxNumberOfMessages=10, VisibilityTimeout=0)

    before_ms = time.time_ns() // 1_000_000
    handle = tasks.handle("StartMessageMoveTask", {"SourceArn": dlq.arn, "DestinationArn": replay.arn})["TaskHandle"]
    after_ms = time.time_ns() // 1_000_000

    assert json.loads(base64.b64decode(handle))["sourceArn"] == dlq.arn
    entry = _wait_for(tasks, dlq, "COMPLETED")
    started = entry.pop("StartedTimestamp")
    assert entry == {
        "Status": "COMPLETED",
        "SourceArn": dlq.arn,
        "DestinationArn": replay.arn,
        "ApproximateNumberOfMessagesMoved": 3,
        "ApproximateNumberOfMessagesToMove": 3,
    }
    assert before_ms <= started <= after_ms, "StartedTimestamp is the start, in epoch milliseconds"
    moved = _receive(sqs, replay)
    assert sorted(message["Body"] for message in moved) == ["job-0", "job-1", "job-2"]
    assert all(message["MessageAttributes"] == ATTRIBUTES for message in moved)
    assert not {message["MessageId"] for message in moved} & set(originals)
    assert {message["Attributes"]["ApproximateReceiveCount"] for message in moved} == {"1"}
    assert _count(sqs, dlq) == 0


class _RecordsSource:
    """moto never sets DeadLetterQueueSourceArn; this client adds it on receive, as SQS does on dead-lettering."""

    def __init__(self, sqs: Any, source_arn: str) -> None:
        self._sqs = sqs
        self._source_arn = source_arn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def receive_message(self, **request: Any) -> dict[str, Any]:
        response: dict[str, Any] = self._sqs.receive_message(**request)
        for message in response.get("Messages", []):
            message.setdefault("Attributes", {})["DeadLetterQueueSourceArn"] = self._source_arn
        return response


def test_redrives_to_the_source_each_message_came_from(sqs: Any) -> None:
    source, dlq = _dlq(sqs)
    _send(sqs, dlq, 2)
    tasks = MoveTasks(_RecordsSource(sqs, source.arn))
    try:
        tasks.handle("StartMessageMoveTask", {"SourceArn": dlq.arn})
        entry = _wait_for(tasks, dlq, "COMPLETED")
    finally:
        tasks.stop()

    assert "DestinationArn" not in entry
    assert (entry["ApproximateNumberOfMessagesMoved"], entry["ApproximateNumberOfMessagesToMove"]) == (2, 2)
    assert sorted(message["Body"] for message in _receive(sqs, source)) == ["job-0", "job-1"]
    assert _count(sqs, dlq) == 0


def test_a_message_with_no_recorded_source_fails_a_redrive_to_source(sqs: Any, tasks: MoveTasks) -> None:
    source, dlq = _dlq(sqs)
    _send(sqs, dlq, 1)  # sent straight to the DLQ, as the troubleshooting page describes

    tasks.handle("StartMessageMoveTask", {"SourceArn": dlq.arn})

    entry = _wait_for(tasks, dlq, "FAILED")
    assert entry["FailureReason"] == "CouldNotDetermineMessageSource"
    assert (entry["ApproximateNumberOfMessagesMoved"], entry["ApproximateNumberOfMessagesToMove"]) == (0, 1)
    assert "TaskHandle" not in entry
    # Left in the DLQ and visible at once, not after its visibility timeout.
    assert [message["Body"] for message in _receive(sqs, dlq)] == ["job-0"]
    assert _count(sqs, source) == 0


@pytest.mark.parametrize(
    ("dlq_name", "group"),
    [("work", None), ("work.fifo", "orders")],  # no group on a standard queue: the message id stands in
)
def test_a_fifo_destination_gets_a_group_and_the_original_id_as_deduplication_id(
    sqs: Any, tasks: MoveTasks, dlq_name: str, group: str | None
) -> None:
    _, dlq = _dlq(sqs, dlq_name)
    replay = _queue(sqs, "replay.fifo")
    originals = _send(sqs, dlq, 2)

    tasks.handle("StartMessageMoveTask", {"SourceArn": dlq.arn, "DestinationArn": replay.arn})

    assert _wait_for(tasks, dlq, "COMPLETED")["ApproximateNumberOfMessagesMoved"] == 2
    moved = {message["Body"]: message["Attributes"] for message in _receive(sqs, replay)}
    for index, original in enumerate(originals):
        attributes = moved[f"job-{index}"]
        assert attributes["MessageDeduplicationId"] == original
        assert attributes["MessageGroupId"] == (group or original)


def test_one_active_task_per_source_and_cancel(sqs: Any, tasks: MoveTasks) -> None:
    _, dlq = _dlq(sqs)
    replay = _queue(sqs, "replay")
    _send(sqs, dlq, 5)
    start = {"SourceArn": dlq.arn, "DestinationArn": replay.arn, "MaxNumberOfMessagesPerSecond": 1}
    handle = tasks.handle("StartMessageMoveTask", start)["TaskHandle"]

    running = _latest(tasks, dlq)
    assert (running["Status"], running["TaskHandle"], running["MaxNumberOfMessagesPerSecond"]) == ("RUNNING", handle, 1)
    second = _refused(tasks, "StartMessageMoveTask", start)
    assert (second.code, second.status) == ("InvalidParameterValue", 400)
    assert "There is already a task running." in str(second)

    moved = tasks.handle("CancelMessageMoveTask", {"TaskHandle": handle})["ApproximateNumberOfMessagesMoved"]

    assert _latest(tasks, dlq)["Status"] in {"CANCELLING", "CANCELLED"}
    cancelled = _wait_for(tasks, dlq, "CANCELLED")
    final = cancelled["ApproximateNumberOfMessagesMoved"]
    assert moved <= final < 5  # a send under way when cancelled still completes
    assert "TaskHandle" not in cancelled
    # Moved messages stay moved, the rest stay in the DLQ: none lost, none doubled.
    assert (_count(sqs, replay), _count(sqs, dlq)) == (final, 5 - final)
    again = _refused(tasks, "CancelMessageMoveTask", {"TaskHandle": handle})
    assert (again.code, again.status) == ("InvalidParameterValue", 400)
    assert "CANCELLED" in str(again)
    # No longer active: a new task may start, and is listed first.
    tasks.handle("StartMessageMoveTask", {"SourceArn": dlq.arn, "DestinationArn": replay.arn})
    _wait_for(tasks, dlq, "COMPLETED")
    listed = tasks.handle("ListMessageMoveTasks", {"SourceArn": dlq.arn, "MaxResults": 10})["Results"]
    assert [entry["Status"] for entry in listed] == ["COMPLETED", "CANCELLED"]
    assert _count(sqs, replay) == 5


def test_concurrent_starts_on_one_source_admit_one(sqs: Any, tasks: MoveTasks) -> None:
    _, dlq = _dlq(sqs)
    replay = _queue(sqs, "replay")
    _send(sqs, dlq, 3)
    start_params = {"SourceArn": dlq.arn, "DestinationArn": replay.arn, "MaxNumberOfMessagesPerSecond": 1}

    def start(_: int) -> str:
        try:
            tasks.handle("StartMessageMoveTask", start_params)
        except Violation as violation:
            return violation.code
        return "started"

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = sorted(pool.map(start, range(4)))

    assert outcomes == ["InvalidParameterValue"] * 3 + ["started"]


def test_a_destination_deleted_mid_task_fails_it(sqs: Any, tasks: MoveTasks) -> None:
    _, dlq = _dlq(sqs)
    replay = _queue(sqs, "replay")
    _send(sqs, dlq, 3)
    start = {"SourceArn": dlq.arn, "DestinationArn": replay.arn, "MaxNumberOfMessagesPerSecond": 1}
    tasks.handle("StartMessageMoveTask", start)
    deadline = time.monotonic() + DEADLINE_S
    while _latest(tasks, dlq)["ApproximateNumberOfMessagesMoved"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)

    sqs.delete_queue(QueueUrl=replay.url)

    entry = _wait_for(tasks, dlq, "FAILED")
    assert entry["FailureReason"] == "AWS.SimpleQueueService.NonExistentQueue"
    moved = entry["ApproximateNumberOfMessagesMoved"]
    assert 1 <= moved < 3
    assert len(_receive(sqs, dlq)) == 3 - moved  # the rest stay, visible


def test_stop_cancels_running_tasks(sqs: Any, tasks: MoveTasks) -> None:
    _, dlq = _dlq(sqs)
    _send(sqs, dlq, 5)
    tasks.handle("StartMessageMoveTask", {"SourceArn": dlq.arn, "MaxNumberOfMessagesPerSecond": 1})

    tasks.stop()

    assert _latest(tasks, dlq)["Status"] == "CANCELLED"


def test_only_a_dead_letter_queue_can_be_a_source(sqs: Any, tasks: MoveTasks) -> None:
    source, _ = _dlq(sqs)

    refused = _refused(tasks, "StartMessageMoveTask", {"SourceArn": source.arn})

    assert (refused.code, refused.status) == ("InvalidParameterValue", 400)
    assert str(refused).startswith("Source queue must be configured as a Dead Letter Queue.")


@pytest.mark.parametrize(
    ("operation", "params", "parameter"),
    [
        ("StartMessageMoveTask", {"SourceArn": "arn:aws:sqs:us-east-1:123456789012:nope"}, "SourceArn"),
        ("StartMessageMoveTask", {"SourceArn": "arn:aws:sqs:eu-west-1:123456789012:work-dlq"}, "SourceArn"),
        (
            "StartMessageMoveTask",
            {
                "SourceArn": "arn:aws:sqs:us-east-1:123456789012:work-dlq",
                "DestinationArn": "arn:aws:sqs:us-east-1:123456789012:nope",
            },
            "DestinationArn",
        ),
        ("ListMessageMoveTasks", {"SourceArn": "arn:aws:sqs:us-east-1:123456789012:nope"}, "SourceArn"),
    ],
)
def test_a_missing_queue_is_a_404(
    sqs: Any, tasks: MoveTasks, operation: str, params: dict[str, Any], parameter: str
) -> None:
    _dlq(sqs)

    refused = _refused(tasks, operation, params)

    assert (refused.code, refused.shape, refused.status) == (
        "ResourceNotFoundException",
        "ResourceNotFoundException",
        404,
    )
    assert str(refused).startswith(f"The resource that you specified for the {parameter} parameter doesn't exist.")


@pytest.mark.parametrize(
    ("operation", "params", "message"),
    [
        ("StartMessageMoveTask", {"SourceArn": "work-dlq"}, "You must use this format to specify the SourceArn"),
        (
            "StartMessageMoveTask",
            {"SourceArn": "arn:aws:sqs:us-east-1:123456789012:work-dlq", "MaxNumberOfMessagesPerSecond": 501},
            "must be between 1 and 500",
        ),
        (
            "ListMessageMoveTasks",
            {"SourceArn": "arn:aws:sqs:us-east-1:123456789012:work-dlq", "MaxResults": 11},
            "must be between 1 and 10",
        ),
        ("CancelMessageMoveTask", {"TaskHandle": "not a handle"}, "Value for parameter TaskHandle is invalid."),
        (
            "CancelMessageMoveTask",
            {"TaskHandle": base64.b64encode(b"[1]").decode()},
            "Value for parameter TaskHandle is invalid.",
        ),
    ],
)
def test_invalid_parameters_are_refused(
    sqs: Any, tasks: MoveTasks, operation: str, params: dict[str, Any], message: str
) -> None:
    _dlq(sqs)

    refused = _refused(tasks, operation, params)

    assert (refused.code, refused.status) == ("InvalidParameterValue", 400)
    assert message in str(refused)


def test_cancelling_an_unknown_task_is_a_404(sqs: Any, tasks: MoveTasks) -> None:
    _, dlq = _dlq(sqs)
    handle = base64.b64encode(
        json.dumps({"taskId": "00000000-0000-0000-0000-000000000000", "sourceArn": dlq.arn}).encode()
    )

    refused = _refused(tasks, "CancelMessageMoveTask", {"TaskHandle": handle.decode()})

    assert (refused.code, refused.status) == ("ResourceNotFoundException", 404)
    assert str(refused).startswith("Task does not exist.")
