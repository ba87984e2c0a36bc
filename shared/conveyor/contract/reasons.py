"""Why a job was dead-lettered or retried: a fixed vocabulary that ops tools and alarms key on."""

from enum import StrEnum


class Reason(StrEnum):
    """A dead letter's (or a retry's) reason code, carried as the ``conveyor.reason`` attribute."""

    INVALID_JSON = "invalid_json"
    INVALID_ENVELOPE = "invalid_envelope"
    UNKNOWN_TYPE = "unknown_type"
    UNSUPPORTED_VERSION = "unsupported_version"
    INVALID_PAYLOAD = "invalid_payload"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    PERMANENT_ERROR = "permanent_error"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    # A transient failure when retries of its queue or destination are over their declared budget.
    RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"
    # Why the stream relay dead-lettered a record (the relay DLQ holds the whole record).
    INVALID_OUTBOX_ITEM = "invalid_outbox_item"
    UNKNOWN_QUEUE = "unknown_queue"
    WRONG_QUEUE = "wrong_queue"
    STREAM_RULE_FAILED = "stream_rule_failed"


# Reasons only the relay gives: a job queue's DLQ never holds them.
RELAY_ONLY = frozenset(
    {Reason.INVALID_OUTBOX_ITEM, Reason.UNKNOWN_QUEUE, Reason.WRONG_QUEUE, Reason.STREAM_RULE_FAILED}
)


class SnoozeReason(StrEnum):
    """Why a job was sent back to its queue without spending an attempt."""

    RATE_LIMITED = "rate_limited"
    CONCURRENCY_LIMITED = "concurrency_limited"
    BREAKER_OPEN = "breaker_open"
