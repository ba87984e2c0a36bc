"""Send a failed message, body unchanged, to its queue's DLQ with the reason in attributes.

The send happens before the source message is acknowledged; if it fails the record is
reported as failed and redelivered, so a dead letter is never dropped.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger

from conveyor.contract import limits
from conveyor.contract import message_attributes as attrs
from conveyor.contract.reasons import Reason
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.sizes import attribute_bytes, message_bytes, utf8_bytes
from conveyor.contract.sqs_text import replace_uncarried

logger = Logger(service=SERVICE_NAME)

# All bounded, so the attributes fit limits.DEAD_LETTER_ATTRIBUTE_BYTES beside any body a job type accepts.
MAX_ERROR_CHARS = 1024
MAX_ERROR_CLASS_CHARS = 256
# A job type or redrive id as the message named it: an undeclared type, or a forged id, may be any length.
MAX_NAME_CHARS = 256
# A string attribute's value takes what a body takes; any other character is replaced.
REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class Failure:
    reason: Reason
    error_class: str
    error: str
    attempts: int
    first_failed_at: datetime
    last_failed_at: datetime
    job_type: str | None = None
    job_id: str | None = None
    # The CLI redrive that returned the job, so that redrive's canary can tell it failed again.
    redrive_id: str | None = None


def truncate(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text``, at most ``limit`` characters, each one SQS carries in an attribute (others become U+FFFD).

    An error may quote anything a message held: a payload's key with a NUL in it, say.
    """
    text = replace_uncarried(text, REPLACEMENT)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def reason_attributes(reason: Reason, error: str) -> dict[str, dict[str, str]]:
    """What every dead letter says: the reason code and the error text, bounded."""
    return {attrs.REASON: attrs.string(reason.value), attrs.ERROR: attrs.string(truncate(error) or "-")}


def fitting(body: str, attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` as SQS takes them beside ``body``: all, unless body and all pass the 1 MiB limit.

    A body past every job type's max_payload_bytes can fail before admission (not JSON, say); then
    the reason goes first and the other attributes, smallest first, while they fit. A body within
    a few bytes of the limit keeps none: it is still dead-lettered, whole, and its reason logged.
    """
    if message_bytes(body, attributes) <= limits.SQS_MAX_MESSAGE_BYTES:
        return dict(attributes)
    room = limits.SQS_MAX_MESSAGE_BYTES - utf8_bytes(body)
    kept: dict[str, Any] = {}
    for name, value in sorted(attributes.items(), key=lambda item: (item[0] != attrs.REASON, attribute_bytes(*item))):
        size = attribute_bytes(name, value)
        if size <= room:
            kept[name] = value
            room -= size
    return kept


def failure_attributes(failure: Failure, source_queue: str) -> dict[str, dict[str, str]]:
    """A job's dead letter: its reason and the failure's full context, so `conveyor dlq` filters without the body."""
    attributes = reason_attributes(failure.reason, failure.error) | {
        attrs.ERROR_CLASS: attrs.string(truncate(failure.error_class, MAX_ERROR_CLASS_CHARS)),
        attrs.ATTEMPTS: attrs.number(failure.attempts),
        attrs.SOURCE_QUEUE: attrs.string(source_queue),
        attrs.FIRST_FAILED_AT: attrs.timestamp(failure.first_failed_at),
        attrs.LAST_FAILED_AT: attrs.timestamp(failure.last_failed_at),
    }
    if failure.job_type:
        attributes[attrs.JOB_TYPE] = attrs.string(truncate(failure.job_type, MAX_NAME_CHARS))
    if failure.job_id:
        attributes[attrs.JOB_ID] = attrs.string(truncate(failure.job_id, MAX_NAME_CHARS))
    if failure.redrive_id:
        attributes[attrs.REDRIVE_ID] = attrs.string(truncate(failure.redrive_id, MAX_NAME_CHARS))
    return attributes


class DeadLetterQueue:
    """The one writer of dead letters: the harness's to a job queue's DLQ, the relay's to the relay DLQ."""

    def __init__(self, sqs_client: Any, url: str) -> None:
        self._sqs = sqs_client
        self._url = url

    def send(
        self,
        body: str,
        attributes: Mapping[str, Any],
        *,
        group: str | None = None,
        deduplication_id: str | None = None,
    ) -> None:
        """Send ``body`` unchanged, with the attributes that fit; ``group`` and ``deduplication_id`` for a FIFO DLQ."""
        kept = fitting(body, attributes)
        if len(kept) < len(attributes):
            logger.warning(
                "dead letter too large for all its attributes; sent without some",
                extra={"body_bytes": utf8_bytes(body), "dropped": sorted(set(attributes) - set(kept))},
            )
        request: dict[str, Any] = {"QueueUrl": self._url, "MessageBody": body}
        if kept:
            request["MessageAttributes"] = kept
        if group is not None:
            request["MessageGroupId"] = group
            request["MessageDeduplicationId"] = deduplication_id
        self._sqs.send_message(**request)
