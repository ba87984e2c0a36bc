"""Writing the ops audit: one item per change to how a queue or destination is operated.

Operators' changes (conveyor.ops.audit, which also reads the table back) and the changes Conveyor
makes by itself in Lambda (the age controller, conveyor.worker.scale_on_age) write the same rows,
so `conveyor audit` shows both. The writer lives on the Lambda side for that reason.
"""

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from conveyor.contract.timestamps import utc_text

AUDIT_KEY = "id"
AUDIT_TTL = "expires_at"
# Long enough to answer "what happened last year" in a post-mortem.
AUDIT_RETENTION = timedelta(days=400)
# What writing a row needs on the audit table (reading the rows back is the operators' Scan).
WRITE_ACTIONS = ("dynamodb:PutItem",)


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: str
    actor: str
    action: str
    queue: str | None
    details: dict[str, Any]


class AuditWriter:
    """Records changes as ``actor``, dated by ``clock`` (the wall clock unless a test or the local runtime sets one)."""

    def __init__(
        self, dynamodb: Any, table_name: str, *, actor: str, clock: Callable[[], datetime] | None = None
    ) -> None:
        self._dynamodb = dynamodb
        self._table = table_name
        self._clock = clock or (lambda: datetime.now(UTC))
        self.actor = actor

    def record(self, action: str, *, queue: str | None, details: Mapping[str, Any]) -> AuditEntry:
        now = self._clock()
        at = utc_text(now, timespec="milliseconds")
        entry = AuditEntry(
            id=f"{at}#{uuid.uuid4().hex[:12]}",
            at=at,
            actor=self.actor,
            action=action,
            queue=queue,
            details=dict(details),
        )
        item: dict[str, Any] = {
            AUDIT_KEY: {"S": entry.id},
            "at": {"S": entry.at},
            "actor": {"S": entry.actor},
            "action": {"S": action},
            "details": {"S": json.dumps(entry.details, sort_keys=True, default=str)},
            AUDIT_TTL: {"N": str(int((now + AUDIT_RETENTION).timestamp()))},
        }
        if queue is not None:
            item["queue"] = {"S": queue}
        self._dynamodb.put_item(TableName=self._table, Item=item)
        return entry
