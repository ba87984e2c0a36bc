"""DLQ entries as operators see them: the failure context the harness attached, and filters on it.

A message that SQS itself moved (after maxReceiveCount receives: the worker crashed or timed
out every time) carries none of the harness's attributes; its reason is ``receive_limit``.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from conveyor.contract import message_attributes as attrs
from conveyor.contract.durations import parse_duration
from conveyor.contract.envelope import Envelope, parse_envelope, parse_json
from conveyor.contract.errors import ContractError
from conveyor.contract.payloads import MASK, mask_values, sensitive_fields, sensitive_values
from conveyor.contract.reasons import RELAY_ONLY, Reason
from conveyor.contract.timestamps import parse_utc
from conveyor.contract.topology import Topology

RECEIVE_LIMIT = "receive_limit"
# What a job queue's DLQ entry can say: the harness's reasons, or SQS's own redrive.
REASONS = (*(reason.value for reason in Reason if reason not in RELAY_ONLY), RECEIVE_LIMIT)
MILLISECONDS = 1000


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO 8601 time stamp (a naive one is UTC), or a duration ago: ``2h`` is two hours before now."""
    try:
        return (now or datetime.now(UTC)) - parse_duration(text.strip())
    except ValueError:
        pass
    try:
        return parse_utc(text)
    except ValueError as error:
        raise ValueError(
            f"time stamp {text!r}: expected ISO 8601 (2026-11-29T16:00:00Z) or a duration ago (90s, 15m, 2h, 1d)"
        ) from error


def attribute(message: Mapping[str, Any], name: str) -> str | None:
    value = message.get("MessageAttributes", {}).get(name)
    return value.get("StringValue") if value else None


@dataclass(frozen=True)
class DlqEntry:
    message_id: str
    receipt_handle: str
    body: str
    reason: str
    job_id: str | None
    job_type: str | None
    error_class: str | None
    error: str | None
    attempts: int | None
    first_failed_at: datetime | None
    failed_at: datetime
    group_id: str | None
    envelope: Envelope | None
    # Set when the entry failed again after `conveyor dlq redrive` returned it to its queue.
    redrive_id: str | None = None
    # In the relay DLQ, the relay's source; in the schedules DLQ, the schedule (conveyor.ops.own_dlqs).
    source: str | None = None
    # The message attributes as sent, shown by `conveyor dlq show` for the relay and schedules DLQs.
    attributes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, message: Mapping[str, Any]) -> "DlqEntry":
        system = message.get("Attributes", {})
        try:
            envelope: Envelope | None = parse_envelope(message["Body"])
        except ContractError:
            envelope = None
        failed = attribute(message, attrs.LAST_FAILED_AT)
        first = attribute(message, attrs.FIRST_FAILED_AT)
        attempts = attribute(message, attrs.ATTEMPTS)
        sent = datetime.fromtimestamp(int(system.get("SentTimestamp", 0)) / MILLISECONDS, tz=UTC)
        return cls(
            message_id=message["MessageId"],
            receipt_handle=message["ReceiptHandle"],
            body=message["Body"],
            reason=attribute(message, attrs.REASON) or RECEIVE_LIMIT,
            job_id=attribute(message, attrs.JOB_ID) or (envelope.id if envelope else None),
            job_type=attribute(message, attrs.JOB_TYPE) or (envelope.type if envelope else None),
            error_class=attribute(message, attrs.ERROR_CLASS),
            error=attribute(message, attrs.ERROR),
            attempts=int(attempts) if attempts else None,
            first_failed_at=parse_time(first) if first else None,
            failed_at=parse_time(failed) if failed else sent,
            group_id=system.get("MessageGroupId"),
            envelope=envelope,
            redrive_id=attribute(message, attrs.REDRIVE_ID),
        )

    def summary(self) -> dict[str, Any]:
        """What `conveyor dlq ls --json` prints per entry."""
        return {
            "job_id": self.job_id,
            "job_type": self.job_type,
            "reason": self.reason,
            "error_class": self.error_class,
            "error": self.error,
            "attempts": self.attempts,
            "first_failed_at": self.first_failed_at.isoformat() if self.first_failed_at else None,
            "failed_at": self.failed_at.isoformat(),
            "message_id": self.message_id,
        }

    def detail(self, topology: Topology, *, raw: bool = False) -> dict[str, Any]:
        """Everything about the entry, the payload's sensitive fields masked.

        A body that is not even a JSON object cannot be masked field by field, so it is
        shown only when asked for (``raw``): it may hold anything.
        """
        document: Any = self.envelope.model_dump(mode="json") if self.envelope else _json_object(self.body)
        if document is None:
            body = self.body if raw else f"<{len(self.body.encode())} bytes, not a JSON object: shown with --raw>"
            return {**self.summary(), "envelope": None, "body": body}
        if isinstance(document.get("data"), dict):
            kind = document.get("type")
            document["data"] = masked_data(topology, kind if isinstance(kind, str) else None, document["data"])
        return {**self.summary(), "envelope": document, "body": None}


def _json_object(body: str) -> dict[str, Any] | None:
    try:
        document = parse_json(body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def masked_data(topology: Topology, job_type_name: str | None, data: dict[str, Any]) -> dict[str, Any]:
    """The payload with sensitive fields masked: by name, and by value wherever the value recurs.

    Values are taken from the data as it is and as upcast to the current version, so a field
    renamed since (an older version's name) is masked too. Without a known type nothing says
    what is safe, so everything is masked.
    """
    try:
        job_type = topology.job_type(job_type_name or "")
    except ContractError:
        return dict.fromkeys(data, MASK)
    names = sensitive_fields(job_type.model)
    values = sensitive_values(job_type.model, data)
    for version in range(1, job_type.version + 1):
        try:
            current = job_type.load_payload(data, version).model_dump(mode="json")
        except ContractError:
            continue
        values += sensitive_values(job_type.model, current)
    return {
        name: MASK if name in names else json.loads(mask_values(json.dumps(value), values))
        for name, value in data.items()
    }


@dataclass(frozen=True)
class DlqFilter:
    reasons: frozenset[str] = frozenset()
    job_types: frozenset[str] = frozenset()
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def build(
        cls,
        topology: Topology,
        queue: str,
        *,
        reasons: tuple[str, ...] = (),
        job_types: tuple[str, ...] = (),
        since: str | None = None,
        until: str | None = None,
    ) -> "DlqFilter":
        """Checked against the declarations: a typo must not silently match nothing."""
        unknown = set(reasons) - set(REASONS)
        if unknown:
            raise ValueError(f"unknown reason {sorted(unknown)[0]!r}; one of: {', '.join(REASONS)}")
        on_queue = {job.name for job in topology.job_types_on(queue)}
        for name in job_types:
            if name not in on_queue:
                raise LookupError(f"job type {name!r} does not run on queue {queue!r} ({', '.join(sorted(on_queue))})")
        return cls.checked(reasons=reasons, job_types=job_types, since=since, until=until)

    @classmethod
    def checked(
        cls,
        *,
        reasons: tuple[str, ...] = (),
        job_types: tuple[str, ...] = (),
        since: str | None = None,
        until: str | None = None,
    ) -> "DlqFilter":
        """With the time window parsed and checked; the reasons and job types as given."""
        built = cls(
            reasons=frozenset(reasons),
            job_types=frozenset(job_types),
            since=parse_time(since) if since else None,
            until=parse_time(until) if until else None,
        )
        if built.since and built.until and built.since >= built.until:
            raise ValueError(f"--since {since} is not before --until {until}")
        return built

    def matches(self, entry: DlqEntry) -> bool:
        return (
            (not self.reasons or entry.reason in self.reasons)
            and (not self.job_types or entry.job_type in self.job_types)
            and (self.since is None or entry.failed_at >= self.since)
            and (self.until is None or entry.failed_at < self.until)
        )

    def describe(self) -> dict[str, Any]:
        """For the audit row and the report."""
        return {
            "reasons": sorted(self.reasons),
            "job_types": sorted(self.job_types),
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }
