"""The producer SDK: validate jobs, wrap them in envelopes, and send them in batches.

Every job of a call is checked before anything is sent, so misuse fails whole. A job id is
returned only once SQS has accepted its message; ``EnqueueError`` says which were accepted
and which were not, so a caller that retries re-sends only what was not accepted (and a
duplicate, if it happens, is absorbed by the worker's idempotency). A job given a
``dedupe_key`` is sent only if it claims that key (conveyor.sdk.dedupe); otherwise the call
returns the id of the job that has it.
"""

import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from conveyor.contract import naming
from conveyor.contract.declarations import JobType, RetryPolicy
from conveyor.contract.envelope import Correlation
from conveyor.contract.errors import EnqueueError, InvalidJobError
from conveyor.contract.loader import load_topology
from conveyor.contract.relay_settings import DEDUPE_TABLE_ENV
from conveyor.contract.topology import Topology
from conveyor.sdk.catalog import Catalog, TopologyCatalog
from conveyor.sdk.correlation import current_correlation
from conveyor.sdk.dedupe import Claim, ClaimPendingError, DedupeKey, DedupeRecords
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
        dedupe_table: str | None = None,
        prefix: str | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self._catalog = catalog or TopologyCatalog(topology or load_topology())
        self._sqs = sqs_client
        self._dynamodb = dynamodb_client
        self._outbox_table = (
            outbox_table or os.environ.get(OUTBOX_TABLE_ENV) or naming.table_name(naming.OUTBOX_TABLE, prefix=prefix)
        )
        self._dedupe_table = (
            dedupe_table or os.environ.get(DEDUPE_TABLE_ENV) or naming.table_name(naming.DEDUPE_TABLE, prefix=prefix)
        )
        self._clock = clock or (lambda: datetime.now(UTC))
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
        dedupe_table: str | None = None,
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
            dedupe_table=dedupe_table,
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

    @cached_property
    def _dedupe(self) -> DedupeRecords:
        return DedupeRecords(self.dynamodb, self._dedupe_table, clock=self._clock)

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
        """Enqueue one job and return its id once SQS has accepted it.

        With a ``dedupe_key``, a second enqueue of the key within the job type's ``dedupe_window``
        sends nothing and returns the first job's id.
        """
        request = JobRequest(job=job, payload=payload, dedupe_key=dedupe_key, delay=delay, group=group)
        (job_id,) = self.enqueue_many([request], correlation=correlation)
        return job_id

    def enqueue_many(self, requests: Iterable[JobRequest], *, correlation: Correlation | None = None) -> list[str]:
        """Enqueue jobs in SendMessageBatch calls; ids come back in the order of ``requests``.

        A job whose dedupe key an earlier job holds is not sent: its place gets that job's id.
        """
        correlation = correlation or current_correlation()
        prepared = [prepare(self._catalog, index, request, correlation) for index, request in enumerate(requests)]
        reject_repeated_ids(prepared)
        accepted: set[str] = set()
        rejected: dict[str, str] = {}
        claimed = self._claim(prepared, rejected)
        to_send = [item for item in claimed if isinstance(item, PreparedJob) and item.job_id not in rejected]
        for queue in dict.fromkeys(item.queue for item in to_send):
            for chunk in chunks([item for item in to_send if item.queue == queue]):
                self._send_chunk(queue, chunk, accepted, rejected)
        self._settle_claims(to_send, accepted)
        ids = [item.job_id if isinstance(item, PreparedJob) else item for item in claimed]
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
        and the errors. A job whose dedupe key an earlier job holds is left out (the writes still
        commit) and its place gets that job's id.
        """
        if not jobs:
            raise InvalidJobError("transact: pass at least one job; for writes alone, call transact_write_items")
        correlation = correlation or current_correlation()
        prepared = [prepare(self._catalog, index, request, correlation) for index, request in enumerate(jobs)]
        reject_repeated_ids(prepared)
        rejected: dict[str, str] = {}
        claimed = self._claim(prepared, rejected)
        if rejected:
            self._settle_claims([item for item in claimed if isinstance(item, PreparedJob)], accepted=set())
            raise EnqueueError(
                "transact: nothing was written: " + "; ".join(f"{job_id}: {why}" for job_id, why in rejected.items()),
                accepted=[],
                rejected=rejected,
            )
        to_write = [item for item in claimed if isinstance(item, PreparedJob)]
        marks = {item.job_id: self._dedupe.mark_sent(item.dedupe, item.job_id) for item in to_write if item.dedupe}
        if to_write or writes:  # when every job is a duplicate, the writes still commit, on their own
            try:
                self._outbox.transact(writes, to_write, dedupe_marks=marks)
            except Exception:
                self._settle_claims(to_write, accepted=set())
                raise
        return [item.job_id if isinstance(item, PreparedJob) else item for item in claimed]

    def _claim(self, prepared: Sequence[PreparedJob], rejected: dict[str, str]) -> list[PreparedJob | str]:
        """Each job to send, or (for a dedupe key an earlier job holds) that job's id, in order.

        A key this call claims once stands for its later jobs too. Claims that fail are ``rejected``.
        """
        claimed: list[PreparedJob | str] = []
        holders: dict[str, str] = {}  # dedupe key name -> the job id it stands for in this call
        for item in prepared:
            if item.dedupe is None:
                claimed.append(item)
            elif item.dedupe.name in holders:
                claimed.append(holders[item.dedupe.name])
            else:
                try:
                    claim = self._claim_one(item.dedupe, item.job_id)
                except (ClaimPendingError, ClientError, BotoCoreError) as error:
                    rejected[item.job_id] = f"dedupe_key {item.dedupe.key!r}: {error}"
                    claimed.append(item)
                    continue
                holders[item.dedupe.name] = claim.job_id
                claimed.append(item if claim.owned else claim.job_id)
        return claimed

    def _claim_one(self, dedupe: DedupeKey, job_id: str) -> Claim:
        """Claim a job's key; while another producer's claim is live, wait for it as sends are retried."""
        attempt = 1
        while True:
            try:
                return self._dedupe.claim(dedupe, job_id)
            except ClaimPendingError:
                if attempt == SEND_RETRY.max_attempts:
                    raise
                self._sleep(SEND_RETRY.delay(attempt, self._rng).total_seconds())
                attempt += 1

    def _settle_claims(self, sent: Sequence[PreparedJob], accepted: set[str]) -> None:
        """Mark the claims of accepted jobs sent; free those of the rest so a retry can make them.

        Best effort: a mark that is lost leaves the claim pending, and the next enqueue of the key
        sends the job again under its id after CLAIM_LEASE (the worker absorbs it); a release that is
        lost holds the key for CLAIM_LEASE.
        """
        for item in sent:
            if item.dedupe is None:
                continue
            with suppress(ClientError, BotoCoreError):
                if item.job_id in accepted:
                    self._dedupe.sent(item.dedupe, item.job_id)
                else:
                    self._dedupe.release(item.dedupe, item.job_id)

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
