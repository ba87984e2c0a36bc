"""The transactional outbox's public item schema: enqueue a job by writing one DynamoDB item.

A producer puts this item in the same TransactWriteItems call as its domain change, so the
job exists if and only if the change committed. The relay reads the table's stream and
sends ``envelope``, byte for byte, to ``queue``. Producers in any language may write it;
docs/outbox.md is the contract. Items expire (TTL) once the stream has surely delivered them.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from conveyor.contract.timestamps import utc_text

# Where the stack tells producers and the relay the table's name; locally it is naming.table_name(naming.OUTBOX_TABLE).
OUTBOX_TABLE_ENV = "CONVEYOR_OUTBOX_TABLE"

KEY = "id"
QUEUE = "queue"
ENVELOPE = "envelope"
CREATED_AT = "created_at"
EXPIRES_AT = "expires_at"
GROUP = "group"
# The producer's X-Ray trace header, when it wrote the item inside a traced request: the relay sends the job with it
# as AWSTraceHeader, so the job's trace links to that request rather than to the relay's invocation.
TRACE_HEADER = "trace_header"
# DynamoDB Streams keeps records 24 hours; a second day leaves the item for inspection.
RETENTION = timedelta(days=2)


@dataclass(frozen=True)
class OutboxEntry:
    """One job as the outbox holds it."""

    job_id: str
    queue: str
    envelope: str
    created_at: datetime
    group: str | None = None
    trace_header: str | None = None

    def item(self) -> dict[str, Any]:
        """The item in DynamoDB's wire format, as PutItem and TransactWriteItems take it."""
        item: dict[str, Any] = {
            KEY: {"S": self.job_id},
            QUEUE: {"S": self.queue},
            ENVELOPE: {"S": self.envelope},
            CREATED_AT: {"S": utc_text(self.created_at)},
            EXPIRES_AT: {"N": str(int((self.created_at + RETENTION).timestamp()))},
        }
        if self.group is not None:
            item[GROUP] = {"S": self.group}
        if self.trace_header is not None:
            item[TRACE_HEADER] = {"S": self.trace_header}
        return item
