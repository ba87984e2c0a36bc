"""SQS message move tasks (DLQ redrive) for the embedded AWS, which moto (5.2) does not implement.

The embedded server hands ``StartMessageMoveTask``, ``ListMessageMoveTasks`` and
``CancelMessageMoveTask`` requests to ``MoveTasks``; each task moves messages on its own thread,
through ordinary SQS calls on the same endpoint, as AWS documents the behaviour:

- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html
  (and API_ListMessageMoveTasks.html, API_CancelMessageMoveTask.html): the requests, responses and errors;
- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html:
  only a DLQ can be a source, one active task per source, and a redriven message is a new message
  (a new id and enqueue time, so its receive count starts again) with its body and attributes unchanged;
- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/troubleshooting-dlq-redrive.html:
  a message with no recorded source (sent straight to the DLQ) fails a redrive to source with
  ``CouldNotDetermineMessageSource``, and a deleted destination with ``AWS.SimpleQueueService.NonExistentQueue``.
"""

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract import limits
from conveyor.local.strict.violation import Violation

API = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/"
START = API + "API_StartMessageMoveTask.html"
LIST = API + "API_ListMessageMoveTasks.html"
CANCEL = API + "API_CancelMessageMoveTask.html"

RUNNING, COMPLETED, CANCELLING, CANCELLED, FAILED = "RUNNING", "COMPLETED", "CANCELLING", "CANCELLED", "FAILED"
ACTIVE = frozenset({RUNNING, CANCELLING})
INVALID = "InvalidParameterValue"
NOT_FOUND = "ResourceNotFoundException"
HTTP_NOT_FOUND = 404
MAX_LISTED = 10
# Set by SQS on a message it dead-letters: the queue a redrive to source sends it back to.
SOURCE_ATTRIBUTE = "DeadLetterQueueSourceArn"
UNKNOWN_SOURCE = "CouldNotDetermineMessageSource"
# A short poll, so that a drained source ends the task promptly.
RECEIVE_WAIT_S = 1


@dataclass
class _Task:
    """One move task; its mutable fields are guarded by the owning ``MoveTasks``'s lock."""

    handle: str
    source_arn: str
    destination_arn: str | None
    rate: int | None
    to_move: int
    started_ms: int
    status: str = RUNNING
    moved: int = 0
    failure: str | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread = field(init=False)

    def entry(self) -> dict[str, Any]:
        """The task as ListMessageMoveTasks reports it: optional fields only when they apply."""
        entry: dict[str, Any] = {
            "Status": self.status,
            "SourceArn": self.source_arn,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms,
        }
        optional = {
            "TaskHandle": self.handle if self.status == RUNNING else None,
            "DestinationArn": self.destination_arn,
            "MaxNumberOfMessagesPerSecond": self.rate,
            "FailureReason": self.failure,
        }
        entry.update({name: value for name, value in optional.items() if value is not None})
        return entry


def _required(params: Mapping[str, Any], name: str, citation: str) -> str:
    value = params.get(name)
    if not value:
        raise Violation("MissingParameter", f"The request must contain the parameter {name}.", citation=citation)
    return str(value)


def _bounded(params: Mapping[str, Any], name: str, high: int, citation: str) -> int | None:
    value = params.get(name)
    if value is not None and not 1 <= int(value) <= high:
        raise Violation(
            INVALID,
            f"Value {value} for parameter {name} is invalid. Reason: must be between 1 and {high}.",
            citation=citation,
        )
    return None if value is None else int(value)


def _not_found(parameter: str, citation: str) -> Violation:
    return Violation(
        NOT_FOUND,
        f"The resource that you specified for the {parameter} parameter doesn't exist.",
        citation=citation,
        status=HTTP_NOT_FOUND,
    )


def _decode(handle: str) -> tuple[str, str]:
    """The task id and source ARN a TaskHandle carries (base64 JSON, as AWS's own handles decode)."""
    try:
        fields = json.loads(base64.b64decode(handle, validate=True))
        return str(fields["taskId"]), str(fields["sourceArn"])
    except (ValueError, TypeError, KeyError) as error:  # bad base64 and bad JSON are ValueErrors
        raise Violation(INVALID, "Value for parameter TaskHandle is invalid.", citation=CANCEL) from error


class MoveTasks:
    """The move tasks of one embedded AWS, started, listed and cancelled from any request thread."""

    OPERATIONS = frozenset({"StartMessageMoveTask", "ListMessageMoveTasks", "CancelMessageMoveTask"})

    def __init__(self, sqs_client: Any) -> None:
        self._sqs = sqs_client
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}  # by task id, oldest first
        self._operations: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
            "StartMessageMoveTask": self._start,
            "ListMessageMoveTasks": self._list,
            "CancelMessageMoveTask": self._cancel,
        }

    def handle(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON response body (as the SQS JSON API returns it), or raises ``Violation``."""
        return self._operations[operation](params)

    def stop(self) -> None:
        """Cancel the running tasks and wait for every task thread: call it while the endpoint still serves."""
        with self._lock:
            tasks = list(self._tasks.values())
            for task in tasks:
                if task.status == RUNNING:
                    task.status = CANCELLING
                    task.cancelled.set()
        for task in tasks:
            task.thread.join()

    def _start(self, params: Mapping[str, Any]) -> dict[str, Any]:
        source_arn = _required(params, "SourceArn", START)
        destination_arn = params.get("DestinationArn")
        rate = _bounded(params, "MaxNumberOfMessagesPerSecond", limits.SQS_MAX_MOVE_RATE, START)
        source = self._existing(source_arn, "SourceArn", START)
        if destination_arn is not None:
            self._existing(destination_arn, "DestinationArn", START)
        # A DLQ is a queue some queue's RedrivePolicy names, which is what ListDeadLetterSourceQueues finds.
        if not self._sqs.list_dead_letter_source_queues(QueueUrl=source, MaxResults=1)["queueUrls"]:
            raise Violation(INVALID, "Source queue must be configured as a Dead Letter Queue.", citation=START)
        attributes = self._sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["ApproximateNumberOfMessages"])
        task_id = str(uuid.uuid4())
        task = _Task(
            handle=base64.b64encode(json.dumps({"taskId": task_id, "sourceArn": source_arn}).encode()).decode(),
            source_arn=source_arn,
            destination_arn=destination_arn,
            rate=rate,
            to_move=int(attributes["Attributes"]["ApproximateNumberOfMessages"]),
            started_ms=time.time_ns() // 1_000_000,
        )
        task.thread = threading.Thread(target=self._run, args=(task,), name=f"move-task-{task_id}", daemon=True)
        with self._lock:  # the check and the insert at once, so two concurrent starts cannot both pass
            if any(other.source_arn == source_arn and other.status in ACTIVE for other in self._tasks.values()):
                raise Violation(
                    INVALID,
                    "There is already a task running. Only one active task is allowed for a source queue arn at a "
                    "given time.",
                    citation=START,
                )
            self._tasks[task_id] = task
            task.thread.start()  # under the lock, so that stop() never joins a thread not yet started
        return {"TaskHandle": task.handle}

    def _list(self, params: Mapping[str, Any]) -> dict[str, Any]:
        source_arn = _required(params, "SourceArn", LIST)
        limit = _bounded(params, "MaxResults", MAX_LISTED, LIST) or 1
        self._existing(source_arn, "SourceArn", LIST)
        with self._lock:
            newest_first = [task for task in reversed(self._tasks.values()) if task.source_arn == source_arn]
            return {"Results": [task.entry() for task in newest_first[:limit]]}

    def _cancel(self, params: Mapping[str, Any]) -> dict[str, Any]:
        task_id, source_arn = _decode(_required(params, "TaskHandle", CANCEL))
        self._existing(source_arn, "SourceArn", CANCEL)
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.source_arn != source_arn:
                raise Violation(NOT_FOUND, "Task does not exist.", citation=CANCEL, status=HTTP_NOT_FOUND)
            if task.status != RUNNING:
                raise Violation(
                    INVALID, f"Only a RUNNING task can be cancelled; this task is {task.status}.", citation=CANCEL
                )
            task.status = CANCELLING  # CANCELLED once its thread has stopped
            task.cancelled.set()
            return {"ApproximateNumberOfMessagesMoved": task.moved}

    def _existing(self, arn: str, parameter: str, citation: str) -> str:
        """The URL of the queue an ARN names, or the error AWS gives for a malformed or missing one."""
        parts = arn.split(":")
        if len(parts) != 6 or parts[0] != "arn":
            raise Violation(
                INVALID,
                f"You must use this format to specify the {parameter}: "
                "arn:<partition>:<service>:<region>:<account-id>:<resource-id>",
                citation=citation,
            )
        if parts[2] != "sqs" or parts[3] != self._sqs.meta.region_name:
            raise _not_found(parameter, citation)
        try:
            return self._url(arn)
        except self._sqs.exceptions.QueueDoesNotExist as error:
            raise _not_found(parameter, citation) from error

    def _url(self, arn: str) -> str:
        _, _, _, _, account, name = arn.split(":", 5)
        url: str = self._sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        return url

    def _run(self, task: _Task) -> None:
        """A task's thread: move, then record how the task ended; an AWS error is its FailureReason."""
        try:
            failure = self._move(task)
        except ClientError as error:  # a destination deleted mid-task: AWS.SimpleQueueService.NonExistentQueue
            failure = str(error.response["Error"]["Code"])
        except BotoCoreError as error:  # the endpoint went away: the task must still end
            failure = type(error).__name__
        with self._lock:
            if task.status == CANCELLING:
                task.status = CANCELLED
            else:
                task.status, task.failure = (FAILED, failure) if failure else (COMPLETED, None)

    def _move(self, task: _Task) -> str | None:
        """Move messages until the count taken at the start is reached, the source is drained or the task is
        cancelled; the reason it failed, if it did. A message leaves the source only once it is in its destination.
        """
        source = self._url(task.source_arn)
        urls: dict[str, str] = {}  # destination ARN -> URL
        interval = 1 / task.rate if task.rate else 0.0
        next_send = time.monotonic()
        while (remaining := task.to_move - task.moved) > 0:
            batch: list[dict[str, Any]] = self._sqs.receive_message(
                QueueUrl=source,
                # No more than a second's worth at the rate, so none waits in flight long enough to reappear.
                MaxNumberOfMessages=min(limits.SQS_MAX_RECEIVE_MESSAGES, remaining, task.rate or remaining),
                WaitTimeSeconds=RECEIVE_WAIT_S,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            if not batch:
                return None
            for index, message in enumerate(batch):
                destination = task.destination_arn or message.get("Attributes", {}).get(SOURCE_ATTRIBUTE)
                if destination is None:
                    self._release(source, batch[index:])
                    return UNKNOWN_SOURCE
                if task.cancelled.wait(max(0.0, next_send - time.monotonic())):  # paced; a cancel wakes it
                    self._release(source, batch[index:])
                    return None
                next_send = time.monotonic() + interval
                try:
                    self._send(message, destination, urls)
                except ClientError:
                    self._release(source, batch[index:])
                    raise
                self._sqs.delete_message(QueueUrl=source, ReceiptHandle=message["ReceiptHandle"])
                with self._lock:
                    task.moved += 1
        return None

    def _send(self, message: Mapping[str, Any], destination: str, urls: dict[str, str]) -> None:
        """Send a copy as a new message: same body and attributes; for FIFO, the original id dedupes it."""
        if destination not in urls:
            urls[destination] = self._url(destination)
        request: dict[str, Any] = {"QueueUrl": urls[destination], "MessageBody": message["Body"]}
        if message.get("MessageAttributes"):
            request["MessageAttributes"] = message["MessageAttributes"]
        if destination.endswith(limits.SQS_FIFO_SUFFIX):
            request["MessageGroupId"] = message.get("Attributes", {}).get("MessageGroupId", message["MessageId"])
            request["MessageDeduplicationId"] = message["MessageId"]
        self._sqs.send_message(**request)

    def _release(self, source: str, messages: list[dict[str, Any]]) -> None:
        """Make messages received but not moved visible again at once, rather than after their timeout."""
        self._sqs.change_message_visibility_batch(
            QueueUrl=source,
            Entries=[
                {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 0}
                for index, message in enumerate(messages)
            ],
        )
