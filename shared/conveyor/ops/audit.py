"""Who changed what, and when: every redrive, discard, pause, resume, resize, limits override and forced breaker.

The audit table has one item per operation, keyed by a time-ordered id. Operators read it
with `conveyor audit`; the volume is that of human actions, so a scan is the right query.
"""

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from conveyor.contract.timestamps import utc_text

AUDIT_KEY = "id"
AUDIT_TTL = "expires_at"
# Long enough to answer "what happened last year" in a post-mortem.
AUDIT_RETENTION = timedelta(days=400)


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: str
    actor: str
    action: str
    queue: str | None
    details: dict[str, Any]


class AuditLog:
    def __init__(self, dynamodb: Any, table_name: str, *, actor: str) -> None:
        self._dynamodb = dynamodb
        self._table = table_name
        self.actor = actor

    def record(self, action: str, *, queue: str | None, details: Mapping[str, Any]) -> AuditEntry:
        now = datetime.now(UTC)
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

    def entries(self, *, queue: str | None = None, limit: int | None = None) -> list[AuditEntry]:
        """The newest entries first, optionally for one queue only."""
        found = []
        for page in self._dynamodb.get_paginator("scan").paginate(TableName=self._table, ConsistentRead=True):
            for item in page["Items"]:
                if queue is None or item.get("queue", {}).get("S") == queue:
                    found.append(
                        AuditEntry(
                            id=item[AUDIT_KEY]["S"],
                            at=item["at"]["S"],
                            actor=item["actor"]["S"],
                            action=item["action"]["S"],
                            queue=item.get("queue", {}).get("S"),
                            details=json.loads(item["details"]["S"]),
                        )
                    )
        found.sort(key=lambda entry: entry.id, reverse=True)
        return found[:limit] if limit is not None else found
