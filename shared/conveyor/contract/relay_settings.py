"""The stream relay's settings, carried in environment variables the stack sets on each relay.

One relay runs per stream: the outbox table's (``source`` = ``OUTBOX_SOURCE``) or a declared
table's that stream rules read (``source`` = the table's declared name). Like WorkerSettings,
one class owns the variable names on both sides.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass

from conveyor.contract.errors import DeclarationError

OUTBOX_SOURCE = "outbox"

SOURCE_ENV = "CONVEYOR_RELAY_SOURCE"
DLQ_URL_ENV = "CONVEYOR_RELAY_DLQ_URL"
QUEUE_URLS_ENV = "CONVEYOR_QUEUE_URLS"
# The dedupe table (conveyor.sdk.dedupe): producers read this variable too, as the relay claims keys as they do.
DEDUPE_TABLE_ENV = "CONVEYOR_DEDUPE_TABLE"


@dataclass(frozen=True)
class RelaySettings:
    source: str
    dlq_url: str
    # Declared queue name -> URL, for every queue a relayed job may go to.
    queue_urls: Mapping[str, str]
    # Where a relayed job with a dedupe key claims it (conveyor.sdk.dedupe).
    dedupe_table: str

    def to_environment(self) -> dict[str, str]:
        return {
            SOURCE_ENV: self.source,
            DLQ_URL_ENV: self.dlq_url,
            QUEUE_URLS_ENV: json.dumps(dict(self.queue_urls), sort_keys=True),
            DEDUPE_TABLE_ENV: self.dedupe_table,
        }

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "RelaySettings":
        missing = [
            name for name in (SOURCE_ENV, DLQ_URL_ENV, QUEUE_URLS_ENV, DEDUPE_TABLE_ENV) if not environ.get(name)
        ]
        if missing:
            raise DeclarationError(f"relay environment: missing {', '.join(missing)}")
        try:
            urls = json.loads(environ[QUEUE_URLS_ENV])
        except ValueError as error:
            raise DeclarationError(f"relay environment: {QUEUE_URLS_ENV} is not JSON: {error}") from error
        if not isinstance(urls, dict) or not all(isinstance(v, str) for v in urls.values()):
            raise DeclarationError(f"relay environment: {QUEUE_URLS_ENV} must map queue names to URLs")
        return cls(
            source=environ[SOURCE_ENV],
            dlq_url=environ[DLQ_URL_ENV],
            queue_urls=urls,
            dedupe_table=environ[DEDUPE_TABLE_ENV],
        )
