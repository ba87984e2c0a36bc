"""The SQS message attributes Conveyor writes, and conversion from the Lambda event's shape.

A DLQ entry carries its failure context in these attributes, so `jobs dlq` can filter on
them without parsing bodies. SQS allows at most 10 attributes per message.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from conveyor.timestamps import utc_text

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
# Set by `jobs dlq redrive`: the job's max_wall_time counts again from this moment.
REDRIVEN_AT = "conveyor.redriven_at"
REDRIVE_ID = "conveyor.redrive_id"

SendAttributes = dict[str, dict[str, str]]


def string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def number(value: int) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": str(value)}


def timestamp(value: datetime) -> dict[str, str]:
    return string(utc_text(value))


def from_event(event_attributes: Mapping[str, Any]) -> SendAttributes:
    """Lambda's ``{"stringValue", "dataType"}`` attributes in SendMessage's shape (string kinds only)."""
    return {
        name: {"DataType": value["dataType"], "StringValue": value["stringValue"]}
        for name, value in event_attributes.items()
        if value.get("stringValue") is not None
    }


def read_string(event_attributes: Mapping[str, Any], name: str) -> str | None:
    value = event_attributes.get(name)
    return value.get("stringValue") if value else None
