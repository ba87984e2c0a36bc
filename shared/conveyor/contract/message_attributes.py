"""The SQS message attributes Conveyor writes, and reading them from the Lambda event's shape.

SQS allows at most 10 attributes per message (conveyor.contract.limits), so each kind of message has a
fixed set, never a copy of another's:

- a DLQ entry (conveyor.worker.dead_letter): its failure context, so `conveyor dlq` filters without
  parsing bodies: reason, error_class, error, attempts, source_queue, first_failed_at,
  last_failed_at, job_type, job_id and redrive_id: at most 10;
- a job on its own queue: what the harness reads back (conveyor.worker.delivery): prior_attempts,
  first_failed_at, not_before, redriven_at and redrive_id: at most 5. The CLI's redrive sends
  two of them; a snooze or deferral sends what ``Delivery.carried`` gives.

An entry moved back from the DLQ with its attributes (the SQS console, StartMessageMoveTask)
arrives on the job's queue with the DLQ set; the harness reads it as redriven and re-sends only
its own set.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from conveyor.contract.timestamps import utc_text

REASON = "conveyor.reason"
ERROR_CLASS = "conveyor.error_class"
ERROR = "conveyor.error"
ATTEMPTS = "conveyor.attempts"
SOURCE_QUEUE = "conveyor.source_queue"
JOB_TYPE = "conveyor.job_type"
JOB_ID = "conveyor.job_id"
FIRST_FAILED_AT = "conveyor.first_failed_at"
LAST_FAILED_AT = "conveyor.last_failed_at"
# Carried by a snoozed job's re-sent copy: attempts already spent, and the earliest run time.
PRIOR_ATTEMPTS = "conveyor.prior_attempts"
NOT_BEFORE = "conveyor.not_before"
# Set by `conveyor dlq redrive`: the job's max_wall_time counts again from this moment.
REDRIVEN_AT = "conveyor.redriven_at"
REDRIVE_ID = "conveyor.redrive_id"

SendAttributes = dict[str, dict[str, str]]


def string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def number(value: int) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": str(value)}


def timestamp(value: datetime) -> dict[str, str]:
    return string(utc_text(value))


def read_string(event_attributes: Mapping[str, Any], name: str) -> str | None:
    value = event_attributes.get(name)
    return value.get("stringValue") if value else None
