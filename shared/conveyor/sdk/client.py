"""The producer SDK: validate jobs, wrap them in envelopes, and send them in batches.

Every job of a call is checked before anything is sent, so misuse fails whole. A job id is
returned only once SQS has accepted its message; ``EnqueueError`` says which were accepted
and which were not, so a caller that retries re-sends only what was not accepted (and a
duplicate, if it happens, is absorbed by the worker's idempotency).
"""

import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from conveyor.contract import naming
from conveyor.contract.declarations import JobType, RetryPolicy
from conveyor.contract.envelope import Correlation
from conveyor.contract.errors import EnqueueError
from conveyor.contract.loader import load_topology
from conveyor.contract.topology import Topology
from conveyor.sdk.catalog import Catalog, TopologyCatalog
from conveyor.sdk.correlation import current_correlation
from conveyor.sdk.outbox import OUTBOX_TABLE_ENV
from conveyor.sdk.prepare import JobRequest, PreparedJob, chunks, prepare, reject_repeated_ids
from conveyor.sdk.transactions import OutboxWriter

# Entries SQS failed for its own reasons (throttling, internal errors) are sent again, up to
# this many attempts in all, with the same full-jitter backoff jobs use.
SEND_RETRY = RetryPolicy(max_attempts=5, base=timedelta(milliseconds=100), cap=timedelta(seconds=2))


class JobClient:
    """Enqueue jobs: ``JobClient().enqueue("send_welcome_email", {"user_id": 1})``.

    Inside the project the client reads the topology (the argument, else the project setting:
    conveyor.contract.loader); outside it, ``JobClient.from_schema`` reads the committed JSON Schema.
    Clients default to boto3's, so AWS_ENDPOINT_URL points them at the local runtime.
    """

    def __init__(
        self,
        topology: Topology | None = None,
        *,
        sqs_client: Any = None,
        dynamodb_client: Any = None,
        outbox_table: str | None = None,
        prefix: str | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        catalog: Catalog | None = None,
    ) -> None:
        self._catalog = catalog or TopologyCatalog(topology or load_topology())
        self._sqs = sqs_client
        self._dynamodb = dynamodb_client
        self._outbox_table = (
            outbox_table or os.environ.get(OUTBOX_TABLE_ENV) or naming.table_name(naming.OUTBOX_TABLE, prefix=prefix)
        )
        self._prefix = prefix
        self._rng = rng or random.Random()  # noqa: S311 - backoff jitter, not cryptography
        self._sleep = sleep
        self._queue_urls: dict[str, str] = {}

    @classmethod
    def from_schema(
        cls,
        schema: str | os.PathLike[str] | Mapping[str, Any],
        *,
        sqs_client: Any = None,
        dynamodb_client: Any = None,
        outbox_table: str | None = None,
        prefix: str | None = None,
    ) -> "JobClient":
        """A client for a producer outside the project: job types by name, payloads as dicts.

        ``schema`` is the document `conveyor schema` writes (docs/schema/envelope.schema.json), as
        a path or already loaded. Payloads are checked against it before anything is sent.
        """
        # Imported here: jsonschema is the SDK's only for this path, never the worker's.
        from conveyor.sdk.schema_catalog import SchemaCatalog

        return cls(
            sqs_client=sqs_client,
            dynamodb_client=dynamodb_client,
            outbox_table=outbox_table,
            prefix=prefix,
            catalog=SchemaCatalog(schema),
        )

    @property
    def sqs(self) -> Any:
        if self._sqs is None:
            self._sqs = boto3.client("sqs")
        return self._sqs

    @property
    def dynamodb(self) -> Any:
        if self._dynamodb is None:
            self._dynamodb = boto3.client("dynamodb")
        return self._dynamodb

    @cached_property
    def _outbox(self) -> OutboxWriter:
        return OutboxWriter(self.dynamodb, self._outbox_table)

    def enqueue(
        self,
        job: JobType[Any] | str,
        payload: BaseModel | Mapping[str, Any],
        *,
        dedupe_key: str | None = None,
        delay: timedelta | None = None,
        group: str | None = None,
        correlation: Correlation | None = None,
    ) -> str:
        """Enqueue one job and return its id once SQS has accepted it."""
        request = JobRequest(job=job, payload=payload, dedupe_key=dedupe_key, delay=delay, group=group)
        (job_id,) = self.enqueue_many([request], correlation=correlation)
        return job_id

    def enqueue_many(self, requests: Iterable[JobRequest], *, correlation: Correlation | None = None) -> list[str]:
        """Enqueue jobs in SendMessageBatch calls; ids come back in the order of ``requests``."""
        correlation = correlation or current_correlation()
        prepared = [prepare(self._catalog, index, request, correlation) for index, request in enumerate(requests)]
        reject_repeated_ids(prepared)
        accepted: set[str] = set()
        rejected: dict[str, str] = {}
        for queue in dict.fromkeys(item.queue for item in prepared):
            for chunk in chunks([item for item in prepared if item.queue == queue]):
                self._send_chunk(queue, chunk, accepted, rejected)
        ids = [item.job_id for item in prepared]
        if rejected:
            raise EnqueueError(
                f"{len(rejected)} of {len(ids)} jobs were not accepted: "
                + "; ".join(f"{job_id}: {why}" for job_id, why in list(rejected.items())[:5]),
                accepted=[job_id for job_id in ids if job_id in accepted],
                rejected=rejected,
            )
        return ids

    def transact(
        self,
        writes: Sequence[Mapping[str, Any]],
        jobs: Sequence[JobRequest],
        *,
        correlation: Correlation | None = None,
    ) -> list[str]:
        """Commit ``writes`` (TransactWriteItems actions on any table) and ``jobs`` in one transaction.

        Each job is an outbox item that the relay sends on, so a job exists if and only if the
        writes committed. Ids come back in the order of ``jobs``; docs/outbox.md has the limits
        and the errors.
        """
        correlation = correlation or current_correlation()
        prepared = [prepare(self._catalog, index, request, correlation) for index, request in enumerate(jobs)]
        reject_repeated_ids(prepared)
        return self._outbox.transact(writes, prepared)

    def _queue_url(self, queue: str) -> str:
        if queue not in self._queue_urls:
            name = naming.queue_name(queue, fifo=self._catalog.fifo(queue), prefix=self._prefix)
            self._queue_urls[queue] = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
        return self._queue_urls[queue]

    def _send_chunk(self, queue: str, chunk: list[PreparedJob], accepted: set[str], rejected: dict[str, str]) -> None:
        """Send one batch; re-send only the entries SQS failed without blaming the sender."""
        pending = {item.entry["Id"]: item for item in chunk}
        for attempt in range(1, SEND_RETRY.max_attempts + 1):
            try:
                response = self.sqs.send_message_batch(
                    QueueUrl=self._queue_url(queue), Entries=[item.entry for item in pending.values()]
                )
            except (ClientError, BotoCoreError) as error:
                failures = {entry_id: (False, str(error)) for entry_id in pending}
            else:
                for success in response.get("Successful", []):
                    accepted.add(pending.pop(success["Id"]).job_id)
                failures = {
                    failed["Id"]: (bool(failed.get("SenderFault")), f"{failed['Code']}: {failed.get('Message', '')}")
                    for failed in response.get("Failed", [])
                }
            for entry_id, (sender_fault, why) in failures.items():
                if sender_fault or attempt == SEND_RETRY.max_attempts:
                    rejected[pending.pop(entry_id).job_id] = why
            if not pending:
                return
            self._sleep(SEND_RETRY.delay(attempt, self._rng).total_seconds())
