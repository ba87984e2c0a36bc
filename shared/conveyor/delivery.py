"""What SQS and earlier runs say about one received message: which attempt this is, and since when."""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from conveyor import message_attributes as attrs
from conveyor.timestamps import parse_utc

MILLISECONDS = 1000


def _parse_time(text: str | None) -> datetime | None:
    """A time stamp attribute; one that does not parse is ignored (a bad attribute must not poison a job)."""
    if not text:
        return None
    try:
        return parse_utc(text)
    except ValueError:
        return None


def _redriven_at(event_attributes: dict[str, Any], raw: dict[str, Any]) -> datetime | None:
    """When an operator redrove the job; never later than SQS says the message was sent."""
    redriven = _parse_time(attrs.read_string(event_attributes, attrs.REDRIVEN_AT))
    if redriven is None:
        return None
    sent = datetime.fromtimestamp(int(raw["SentTimestamp"]) / MILLISECONDS, tz=UTC)
    return min(redriven, sent)


@dataclass(frozen=True)
class Delivery:
    """Attempts are counted from ApproximateReceiveCount, plus those spent before a snooze re-sent the job."""

    receive_count: int
    prior_attempts: int
    first_received_at: datetime
    carried_first_failure: datetime | None
    not_before: datetime | None
    redriven_at: datetime | None
    event_attributes: dict[str, Any]

    @classmethod
    def of(cls, record: SQSRecord) -> "Delivery":
        event_attributes: dict[str, Any] = record.raw_event.get("messageAttributes") or {}
        raw = record.raw_event["attributes"]
        prior = attrs.read_string(event_attributes, attrs.PRIOR_ATTEMPTS)
        return cls(
            receive_count=int(raw["ApproximateReceiveCount"]),
            prior_attempts=int(prior) if prior and prior.isdigit() else 0,
            first_received_at=datetime.fromtimestamp(
                int(raw["ApproximateFirstReceiveTimestamp"]) / MILLISECONDS, tz=UTC
            ),
            carried_first_failure=_parse_time(attrs.read_string(event_attributes, attrs.FIRST_FAILED_AT)),
            not_before=_parse_time(attrs.read_string(event_attributes, attrs.NOT_BEFORE)),
            redriven_at=_redriven_at(event_attributes, raw),
            event_attributes=event_attributes,
        )

    @property
    def attempt(self) -> int:
        return self.prior_attempts + self.receive_count

    def deadline_start(self, created_at: datetime) -> datetime:
        """Where max_wall_time counts from: enqueue, or the operator's redrive, which grants a fresh window."""
        return self.redriven_at if self.redriven_at and self.redriven_at > created_at else created_at

    def first_failed_at(self, now: datetime) -> datetime:
        """When this job first failed: carried over a snooze, else its first receive if it was received before."""
        if self.carried_first_failure:
            return self.carried_first_failure
        return self.first_received_at if self.receive_count > 1 else now
