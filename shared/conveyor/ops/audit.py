"""Who changed what, and when: every redrive, discard, pause, resume, resize, limits override and forced breaker.

The audit table has one item per operation, keyed by a time-ordered id. Operators read it
with `conveyor audit`; the volume is that of human actions, so a scan is the right query.
Rows are written by conveyor.worker.audit's writer, which the age controller in Lambda shares.
"""

import json

from conveyor.worker.audit import AUDIT_KEY, AUDIT_TTL, AuditEntry, AuditWriter

__all__ = ["AUDIT_KEY", "AUDIT_TTL", "AuditEntry", "AuditLog"]


class AuditLog(AuditWriter):
    """The audit table as operators use it: ``record`` a change, read ``entries`` back."""

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
