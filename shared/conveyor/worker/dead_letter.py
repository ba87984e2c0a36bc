"""Send a failed message, body unchanged, to its queue's DLQ with the reason in attributes.

The send happens before the source message is acknowledged; if it fails the record is
reported as failed and redelivered, so a dead letter is never dropped.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from conveyor.contract import message_attributes as attrs
from conveyor.contract.reasons import Reason

# Both bounded, so the attributes fit limits.DEAD_LETTER_ATTRIBUTE_BYTES beside any body a job type accepts.
MAX_ERROR_CHARS = 1024
MAX_ERROR_CLASS_CHARS = 256


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
    return text if len(text) <= limit else text[: limit - 1] + "…"


def reason_attributes(reason: Reason, error: str) -> dict[str, dict[str, str]]:
    """What every dead letter says: the reason code and the error text, bounded."""
    return {attrs.REASON: attrs.string(reason.value), attrs.ERROR: attrs.string(truncate(error) or "-")}


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
        attributes[attrs.JOB_TYPE] = attrs.string(failure.job_type)
    if failure.job_id:
        attributes[attrs.JOB_ID] = attrs.string(failure.job_id)
    if failure.redrive_id:
        attributes[attrs.REDRIVE_ID] = attrs.string(failure.redrive_id)
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
        """Send ``body`` unchanged; ``group`` (and ``deduplication_id``) for a FIFO DLQ."""
        request: dict[str, Any] = {"QueueUrl": self._url, "MessageBody": body, "MessageAttributes": dict(attributes)}
        if group is not None:
            request["MessageGroupId"] = group
            request["MessageDeduplicationId"] = deduplication_id
        self._sqs.send_message(**request)
