"""Send a failed message, body unchanged, to its queue's DLQ with the reason in attributes.

The send happens before the source message is acknowledged; if it fails the record is
reported as failed and redelivered, so a dead letter is never dropped.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from conveyor import message_attributes as attrs
from conveyor.reasons import Reason

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


class DeadLetterQueue:
    def __init__(self, sqs_client: Any, *, url: str, source_queue: str, fifo: bool) -> None:
        self._sqs = sqs_client
        self._url = url
        self._source_queue = source_queue
        self._fifo = fifo

    def send(self, record: SQSRecord, failure: Failure) -> None:
        attributes = {
            attrs.REASON: attrs.string(failure.reason.value),
            attrs.ERROR_CLASS: attrs.string(truncate(failure.error_class, MAX_ERROR_CLASS_CHARS)),
            attrs.ERROR: attrs.string(truncate(failure.error) or "-"),
            attrs.ATTEMPTS: attrs.number(failure.attempts),
            attrs.SOURCE_QUEUE: attrs.string(self._source_queue),
            attrs.FIRST_FAILED_AT: attrs.timestamp(failure.first_failed_at),
            attrs.LAST_FAILED_AT: attrs.timestamp(failure.last_failed_at),
        }
        if failure.job_type:
            attributes[attrs.JOB_TYPE] = attrs.string(failure.job_type)
        if failure.job_id:
            attributes[attrs.JOB_ID] = attrs.string(failure.job_id)
        if failure.redrive_id:
            attributes[attrs.REDRIVE_ID] = attrs.string(failure.redrive_id)
        request: dict[str, Any] = {"QueueUrl": self._url, "MessageBody": record.body, "MessageAttributes": attributes}
        if self._fifo:
            request["MessageGroupId"] = record.attributes.message_group_id or record.message_id
            request["MessageDeduplicationId"] = record.message_id
        self._sqs.send_message(**request)
