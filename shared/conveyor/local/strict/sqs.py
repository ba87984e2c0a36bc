"""SQS requests AWS refuses and moto (5.2) accepts, checked as AWS documents them."""

import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from conveyor.contract import limits
from conveyor.contract.sizes import message_bytes
from conveyor.contract.sqs_text import first_uncarried
from conveyor.local.strict.violation import EntryFailures, Rule, Violation

SEND_MESSAGE = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html"
SEND_BATCH = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html"
BATCH_ENTRY = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatchRequestEntry.html"
)
ATTRIBUTES = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html"
RECEIVE = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html"
VISIBILITY = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html"
DELETE_BATCH = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessageBatch.html"
MOVE_TASK = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html"

INVALID = "InvalidParameterValue"
MISSING = "MissingParameter"
QUERY_PREFIX = "AWS.SimpleQueueService."

_ATTRIBUTE_NAME = re.compile(limits.SQS_ATTRIBUTE_NAME_PATTERN)
_ENTRY_ID = re.compile(limits.SQS_BATCH_ENTRY_ID_PATTERN)
# Group and deduplication ids: alphanumeric characters and punctuation (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~).
_MESSAGE_ID_FIELD = re.compile(r"[!-~]+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
MAX_DELAY_S = int(limits.SQS_MAX_DELAY.total_seconds())
MAX_VISIBILITY_S = int(limits.SQS_MAX_VISIBILITY_TIMEOUT.total_seconds())
MAX_WAIT_S = int(limits.SQS_MAX_WAIT.total_seconds())


def _batch_error(name: str, message: str, citation: str) -> Violation:
    """A batch error: modeled by its shape name, reported under the query protocol's prefixed code."""
    return Violation(QUERY_PREFIX + name, message, citation=citation, shape=name)


def _fifo(params: Mapping[str, Any]) -> bool:
    return str(params.get("QueueUrl", "")).endswith(limits.SQS_FIFO_SUFFIX)


def _range(params: Mapping[str, Any], name: str, low: int, high: int, citation: str) -> None:
    value = params.get(name)
    if value is not None and not low <= int(value) <= high:
        raise Violation(
            INVALID,
            f"Value {value} for parameter {name} is invalid. Reason: must be between {low} and {high}.",
            citation=citation,
        )


def _check_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> None:
    if len(attributes) > limits.SQS_MAX_MESSAGE_ATTRIBUTES:
        raise Violation(
            INVALID,
            f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum "
            f"[{limits.SQS_MAX_MESSAGE_ATTRIBUTES}].",
            citation=ATTRIBUTES,
        )
    for name, value in attributes.items():
        if len(name) > limits.SQS_MAX_ATTRIBUTE_NAME_LENGTH:
            raise Violation(
                INVALID,
                f"Message (user) attribute names must be shorter than {limits.SQS_MAX_ATTRIBUTE_NAME_LENGTH} Bytes",
                citation=ATTRIBUTES,
            )
        if name.lower().startswith(limits.SQS_RESERVED_ATTRIBUTE_PREFIXES) or not _ATTRIBUTE_NAME.fullmatch(name):
            raise Violation(
                INVALID,
                f"Message (user) attribute name '{name}' is invalid: it may hold letters, digits, periods, hyphens "
                "and underscores, must not start with 'AWS.' or 'Amazon.', start or end with '.', or hold '..'.",
                citation=ATTRIBUTES,
            )
        data_type = str(value.get("DataType", ""))
        kind = data_type.split(".", 1)[0]
        if kind not in limits.SQS_ATTRIBUTE_DATA_TYPES:
            raise Violation(
                INVALID,
                f"The message attribute '{name}' has an invalid message attribute type, the set of supported "
                "type prefixes is Binary, Number, and String.",
                citation=ATTRIBUTES,
            )
        field = "BinaryValue" if kind == "Binary" else "StringValue"
        if not value.get(field):
            raise Violation(
                INVALID,
                f"Message (user) attribute '{name}' must contain a non-empty value of type '{data_type}'.",
                citation=ATTRIBUTES,
            )
        if kind == "Number" and not _NUMBER.fullmatch(str(value[field])):
            raise Violation(
                INVALID, f"Can't cast the value of message (user) attribute '{name}' to a number.", citation=ATTRIBUTES
            )


def _check_message(message: Mapping[str, Any], *, fifo: bool) -> None:
    """One message, alone or as a batch entry."""
    body = message.get("MessageBody")
    if not body:
        raise Violation(MISSING, "The request must contain the parameter MessageBody.", citation=SEND_MESSAGE)
    bad = first_uncarried(body)
    if bad:
        raise Violation(
            "InvalidMessageContents",
            f"Invalid binary character '#x{ord(bad.group()):X}' was found in the message body, the set of allowed "
            "characters is #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF].",
            citation=SEND_MESSAGE,
        )
    attributes = message.get("MessageAttributes") or {}
    _check_attributes(attributes)
    size = message_bytes(body, attributes)
    if size > limits.SQS_MAX_MESSAGE_BYTES:
        raise Violation(
            INVALID,
            f"One or more parameters are invalid. Reason: Message must be shorter than "
            f"{limits.SQS_MAX_MESSAGE_BYTES} bytes (this one is {size}, body and attributes).",
            citation=SEND_MESSAGE,
        )
    if fifo and message.get("DelaySeconds"):  # 0 is accepted
        raise Violation(
            INVALID,
            f"Value {message['DelaySeconds']} for parameter DelaySeconds is invalid. Reason: The request include "
            "parameter that is not valid for this queue type.",
            citation=SEND_MESSAGE,
        )
    _range(message, "DelaySeconds", 0, MAX_DELAY_S, SEND_MESSAGE)
    if not fifo and "MessageDeduplicationId" in message:
        raise Violation(
            INVALID,
            f"Value {message['MessageDeduplicationId']} for parameter MessageDeduplicationId is invalid. Reason: "
            "The request includes a parameter that is not valid for this queue type.",
            citation=SEND_MESSAGE,
        )
    if fifo and not message.get("MessageGroupId"):
        raise Violation(MISSING, "The request must contain the parameter MessageGroupId.", citation=SEND_MESSAGE)
    for name, most in (
        ("MessageGroupId", limits.SQS_MAX_GROUP_ID_LENGTH),
        ("MessageDeduplicationId", limits.SQS_MAX_DEDUPLICATION_ID_LENGTH),
    ):
        value = message.get(name)
        if value is not None and (len(value) > most or not _MESSAGE_ID_FIELD.fullmatch(value)):
            raise Violation(
                INVALID,
                f"Value {value} for parameter {name} is invalid. Reason: it must be 1 to {most} alphanumeric "
                "or punctuation characters.",
                citation=SEND_MESSAGE,
            )


def _entry_failures(entries: Sequence[Mapping[str, Any]], check: Callable[[Mapping[str, Any]], None]) -> EntryFailures:
    failures: EntryFailures = {}
    for entry in entries:
        try:
            check(entry)
        except Violation as violation:
            failures[str(entry["Id"])] = violation
    return failures


def _check_entries(entries: Sequence[Mapping[str, Any]], citation: str) -> None:
    """What every *Batch action requires of its entries."""
    if not entries:
        raise _batch_error("EmptyBatchRequest", "There should be at least one entry in the request.", citation)
    if len(entries) > limits.SQS_MAX_BATCH_ENTRIES:
        raise _batch_error(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {limits.SQS_MAX_BATCH_ENTRIES}. You have sent {len(entries)}.",
            citation,
        )
    seen: set[str] = set()
    for entry in entries:
        entry_id = str(entry.get("Id", ""))
        if not _ENTRY_ID.fullmatch(entry_id):
            raise _batch_error(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
                "It can be at most 80 letters long.",
                BATCH_ENTRY,
            )
        if entry_id in seen:
            raise _batch_error("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.", citation)
        seen.add(entry_id)


def send_message(params: Mapping[str, Any]) -> None:
    _check_message(params, fifo=_fifo(params))


def send_message_batch(params: Mapping[str, Any]) -> EntryFailures:
    """The request as a whole, then each message: AWS fails a bad message as a ``Failed`` entry, not the call."""
    entries = params.get("Entries") or []
    _check_entries(entries, SEND_BATCH)
    total = sum(message_bytes(entry.get("MessageBody") or "", entry.get("MessageAttributes")) for entry in entries)
    if total > limits.SQS_MAX_BATCH_BYTES:
        raise _batch_error(
            "BatchRequestTooLong",
            f"Batch requests cannot be longer than {limits.SQS_MAX_BATCH_BYTES} bytes. You have sent {total} bytes.",
            SEND_BATCH,
        )
    return _entry_failures(entries, partial(_check_message, fifo=_fifo(params)))


def receive_message(params: Mapping[str, Any]) -> None:
    _range(params, "MaxNumberOfMessages", 1, limits.SQS_MAX_RECEIVE_MESSAGES, RECEIVE)
    _range(params, "WaitTimeSeconds", 0, MAX_WAIT_S, RECEIVE)
    _range(params, "VisibilityTimeout", 0, MAX_VISIBILITY_S, RECEIVE)


def change_message_visibility(params: Mapping[str, Any]) -> None:
    _range(params, "VisibilityTimeout", 0, MAX_VISIBILITY_S, VISIBILITY)


def change_message_visibility_batch(params: Mapping[str, Any]) -> EntryFailures:
    entries = params.get("Entries") or []
    _check_entries(entries, VISIBILITY)
    return _entry_failures(entries, change_message_visibility)


def delete_message_batch(params: Mapping[str, Any]) -> None:
    _check_entries(params.get("Entries") or [], DELETE_BATCH)


def start_message_move_task(params: Mapping[str, Any]) -> None:
    _range(params, "MaxNumberOfMessagesPerSecond", 1, limits.SQS_MAX_MOVE_RATE, MOVE_TASK)


RULES: dict[str, Rule] = {
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "ReceiveMessage": receive_message,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
    "DeleteMessageBatch": delete_message_batch,
    "StartMessageMoveTask": start_message_move_task,
}
