"""What SQS and earlier runs say about one received message: which attempt this is, and since when."""

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from conveyor.contract import message_attributes as attrs
from conveyor.contract.declarations import MAX_ATTEMPTS_LIMIT
from conveyor.contract.timestamps import parse_utc

MILLISECONDS = 1000


def _parse_time(text: str | None) -> datetime | None:
    """A time stamp attribute; one that does not parse is ignored (a bad attribute must not poison a job)."""
    if not text:
        return None
    try:
        return parse_utc(text)
    except (ValueError, OverflowError):  # not a time stamp, or one outside the years 1 to 9999 in UTC
        return None


def _prior_attempts(text: str | None) -> int:
    """A carried attempt count, as the harness writes it (ASCII digits, under any job's max_attempts), else 0.

    Anything else was not written by the harness: a bad attribute must not poison a job, nor may a
    forged count reach a dead letter's ``conveyor.attempts`` (a Number: at most 38 digits in SQS).
    """
    if not text or not (text.isascii() and text.isdigit()):
        return 0
    count = int(text)
    return count if count < MAX_ATTEMPTS_LIMIT else 0


def _redriven_at(event_attributes: dict[str, Any], raw: dict[str, Any], first_received_at: datetime) -> datetime | None:
    """When an operator redrove the job; never later than SQS says the message was sent.

    `conveyor dlq redrive` stamps the time. A move that keeps the DLQ entry's attributes (the SQS
    console's redrive, StartMessageMoveTask) stamps nothing, but the entry's dead-letter
    attributes give it away: its redrive is its first receive since the move.
    """
    if attrs.read_string(event_attributes, attrs.REASON) is not None:
        return first_received_at
    redriven = _parse_time(attrs.read_string(event_attributes, attrs.REDRIVEN_AT))
    if redriven is None:
        return None
    sent = datetime.fromtimestamp(int(raw["SentTimestamp"]) / MILLISECONDS, tz=UTC)
    return min(redriven, sent)


@dataclass(frozen=True)
class Delivery:
    """Attempts are counted from ApproximateReceiveCount, plus those spent before a snooze re-sent the job.

    What a re-sent copy must carry for this to be read back is ``carried``: the only attributes
    the harness writes on the job's own queue.
    """

    receive_count: int
    prior_attempts: int
    first_received_at: datetime
    carried_first_failure: datetime | None
    not_before: datetime | None
    redriven_at: datetime | None
    redrive_id: str | None

    @classmethod
    def of(cls, record: SQSRecord) -> "Delivery":
        event_attributes: dict[str, Any] = record.raw_event.get("messageAttributes") or {}
        raw = record.raw_event["attributes"]
        prior = attrs.read_string(event_attributes, attrs.PRIOR_ATTEMPTS)
        first_received_at = datetime.fromtimestamp(int(raw["ApproximateFirstReceiveTimestamp"]) / MILLISECONDS, tz=UTC)
        moved_back = attrs.read_string(event_attributes, attrs.REASON) is not None
        return cls(
            receive_count=int(raw["ApproximateReceiveCount"]),
            prior_attempts=0 if moved_back else _prior_attempts(prior),
            first_received_at=first_received_at,
            carried_first_failure=_parse_time(attrs.read_string(event_attributes, attrs.FIRST_FAILED_AT)),
            not_before=None if moved_back else _parse_time(attrs.read_string(event_attributes, attrs.NOT_BEFORE)),
            redriven_at=_redriven_at(event_attributes, raw, first_received_at),
            # A moved-back entry's redrive id belongs to an earlier CLI redrive, long finished.
            redrive_id=None if moved_back else attrs.read_string(event_attributes, attrs.REDRIVE_ID),
        )

    def within(self, max_attempts: int) -> "Delivery":
        """This delivery, its carried attempts ignored if they leave no attempt for a job of ``max_attempts``.

        The harness re-sends a job (a snooze, a deferral) only while it has attempts left, so the
        copy carries fewer than ``max_attempts`` unless SQS counted receives the harness never ran
        (a timed-out invocation's). A larger count is taken as forged and ignored: that can only
        give a job attempts back, never exhaust it before its first failure.
        """
        return self if self.prior_attempts < max_attempts else replace(self, prior_attempts=0)

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

    def carried(self, now: datetime, not_before: datetime | None) -> attrs.SendAttributes:
        """The attributes of a re-sent copy of this job: what ``of`` reads back, and nothing else.

        Never the received message's own attributes: an entry moved back from its DLQ with its ten
        dead-letter attributes would, with one more, be refused by SQS (at most ten per message).
        """
        carried = {attrs.PRIOR_ATTEMPTS: attrs.number(self.attempt - 1)}
        if self.receive_count > 1 or self.carried_first_failure:
            carried[attrs.FIRST_FAILED_AT] = attrs.timestamp(self.first_failed_at(now))
        if not_before is not None:
            carried[attrs.NOT_BEFORE] = attrs.timestamp(not_before)
        if self.redriven_at is not None:
            carried[attrs.REDRIVEN_AT] = attrs.timestamp(self.redriven_at)
        if self.redrive_id is not None:
            carried[attrs.REDRIVE_ID] = attrs.string(self.redrive_id)
        return carried
