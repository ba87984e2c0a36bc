"""DLQ entries as `conveyor dlq` reads them: failure context, masking, filters and their errors."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor.contract import message_attributes as attrs
from conveyor.contract.envelope import Envelope
from conveyor.contract.payloads import MASK
from conveyor.contract.reasons import Reason
from conveyor.ops.dlq_entries import RECEIVE_LIMIT, DlqEntry, DlqFilter, parse_time
from functions.topology import TOPOLOGY

FAILED_AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SENT_MS = 1_764_000_000_000


def _webhook(body: str = "secret-token-123") -> Envelope:
    return Envelope(
        type="deliver_webhook",
        v=1,
        id="job-1",
        created_at=FAILED_AT - timedelta(hours=1),
        data={"url": "https://example.com/hook", "event_id": "evt-1", "body": body},
    )


def _message(body: str, attributes: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "MessageId": "m-1",
        "ReceiptHandle": "r-1",
        "Body": body,
        "Attributes": {"SentTimestamp": str(SENT_MS)},
        "MessageAttributes": attributes or {},
    }


def _dead_lettered(envelope: Envelope, reason: Reason = Reason.PERMANENT_ERROR) -> dict[str, Any]:
    return _message(
        envelope.to_json(),
        {
            attrs.REASON: attrs.string(reason.value),
            attrs.ERROR_CLASS: attrs.string("PermanentError"),
            attrs.ERROR: attrs.string("receiver answered 410"),
            attrs.ATTEMPTS: attrs.number(1),
            attrs.JOB_TYPE: attrs.string(envelope.type),
            attrs.JOB_ID: attrs.string(envelope.id),
            attrs.FIRST_FAILED_AT: attrs.timestamp(FAILED_AT),
            attrs.LAST_FAILED_AT: attrs.timestamp(FAILED_AT),
        },
    )


def test_entry_carries_the_failure_context_the_harness_attached() -> None:
    entry = DlqEntry.of(_dead_lettered(_webhook()))
    assert entry.summary() == {
        "job_id": "job-1",
        "job_type": "deliver_webhook",
        "reason": "permanent_error",
        "error_class": "PermanentError",
        "error": "receiver answered 410",
        "attempts": 1,
        "first_failed_at": FAILED_AT.isoformat(),
        "failed_at": FAILED_AT.isoformat(),
        "message_id": "m-1",
    }


def test_entry_that_sqs_moved_itself_has_the_receive_limit_reason() -> None:
    entry = DlqEntry.of(_message(_webhook().to_json()))
    assert (entry.reason, entry.job_id, entry.job_type, entry.attempts) == (
        RECEIVE_LIMIT,
        "job-1",
        "deliver_webhook",
        None,
    )
    assert entry.failed_at == datetime.fromtimestamp(SENT_MS / 1000, tz=UTC)


def test_detail_masks_sensitive_fields_and_keeps_the_rest() -> None:
    detail = DlqEntry.of(_dead_lettered(_webhook())).detail(TOPOLOGY)
    assert detail["envelope"]["data"] == {"url": "https://example.com/hook", "event_id": "evt-1", "body": MASK}
    assert "secret-token-123" not in str(detail)


def test_detail_of_an_unknown_type_masks_every_field() -> None:
    envelope = Envelope(type="retired_job", v=1, id="j", created_at=FAILED_AT, data={"card": "4242"})
    detail = DlqEntry.of(_message(envelope.to_json())).detail(TOPOLOGY)
    assert detail["envelope"]["data"] == {"card": MASK}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("token=secret-token-123", id="not-json"),
        pytest.param('{"token": "secret-token-123", "x": ' + "[" * 5000 + "]" * 5000 + "}", id="nested-5000-deep"),
    ],
)
def test_a_body_that_is_no_json_object_is_shown_only_when_asked_for(body: str) -> None:
    entry = DlqEntry.of(_message(body))
    hidden = entry.detail(TOPOLOGY)
    assert (hidden["envelope"], hidden["job_id"]) == (None, None)
    assert "secret-token-123" not in str(hidden)
    assert "--raw" in hidden["body"]
    assert entry.detail(TOPOLOGY, raw=True)["body"] == body


def test_an_invalid_envelope_is_still_masked_by_its_type() -> None:
    """No id, so not an envelope; its data still names a type whose model says what is secret."""
    body = json.dumps({"type": "deliver_webhook", "v": 1, "data": {"url": "https://x.example", "body": "s3cr3t"}})
    detail = DlqEntry.of(_message(body)).detail(TOPOLOGY)
    assert detail["envelope"]["data"] == {"url": "https://x.example", "body": MASK}


def test_an_invalid_payload_is_masked_by_value_too() -> None:
    """The payload fails its contract (a bad url), so masking cannot rely on loading it."""
    envelope = _webhook().model_copy(update={"data": {"url": "ftp://s3cr3t", "event_id": "evt", "body": "s3cr3t"}})
    detail = DlqEntry.of(_dead_lettered(envelope, Reason.INVALID_PAYLOAD)).detail(TOPOLOGY)
    assert detail["envelope"]["data"] == {"url": f"ftp://{MASK}", "event_id": "evt", "body": MASK}


def test_filter_matches_reason_type_and_time_window() -> None:
    entry = DlqEntry.of(_dead_lettered(_webhook()))
    build = DlqFilter.build
    assert build(TOPOLOGY, "bulk").matches(entry)
    assert build(TOPOLOGY, "bulk", reasons=("permanent_error",), job_types=("deliver_webhook",)).matches(entry)
    assert not build(TOPOLOGY, "bulk", reasons=("invalid_json",)).matches(entry)
    assert build(TOPOLOGY, "bulk", since="2026-11-29T12:00:00Z", until="2026-11-29T12:00:01Z").matches(entry)
    assert not build(TOPOLOGY, "bulk", until="2026-11-29T12:00:00Z").matches(entry)
    assert not build(TOPOLOGY, "bulk", since="2026-11-29T12:00:01").matches(entry)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"reasons": ("permanent",)}, ValueError, "unknown reason 'permanent'"),
        ({"job_types": ("charge_order",)}, LookupError, "does not run on queue 'bulk'"),
        ({"since": "last tuesday"}, ValueError, "expected ISO 8601"),
        ({"since": "2h", "until": "3h"}, ValueError, "is not before"),
    ],
)
def test_filter_rejects_what_would_silently_match_nothing(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        DlqFilter.build(TOPOLOGY, "bulk", **options)


def test_relative_time_counts_back_from_now() -> None:
    now = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
    assert parse_time("90m", now=now) == now - timedelta(minutes=90)
    assert parse_time("2026-11-29T10:00:00", now=now) == datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
