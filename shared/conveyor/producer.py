"""The producer SDK: validate jobs, wrap them in envelopes, and send them in batches.

Every job of a call is checked before anything is sent, so misuse fails whole. A job id is
returned only once SQS has accepted its message; ``EnqueueError`` says which were accepted
and which were not, so a caller that retries re-sends only what was not accepted (and a
duplicate, if it happens, is absorbed by the worker's idempotency).
"""

import math
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from conveyor import limits, naming
from conveyor.correlation import current_correlation
from conveyor.declarations import JobType, RetryPolicy, Topology
from conveyor.envelope import MAX_ID_LENGTH, Correlation, Envelope, new_job_id
from conveyor.errors import ContractError, EnqueueError, InvalidJobError
from conveyor.loader import load_topology
from conveyor.outbox import OUTBOX_TABLE_ENV
from conveyor.tracing import SYSTEM_ATTRIBUTE, current_trace_header
from conveyor.transact import OutboxWriter

# Entries SQS failed for its own reasons (throttling, internal errors) are sent again, up to
# this many attempts in all, with the same full-jitter backoff jobs use.
SEND_RETRY = RetryPolicy(max_attempts=5, base=timedelta(milliseconds=100), cap=timedelta(seconds=2))
# A job id is also a FIFO queue's MessageDeduplicationId, so it keeps to that field's alphabet,
# letters, digits and punctuation, and to the envelope's length limit:
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatchRequestEntry.html
JOB_ID_PATTERN = re.compile(rf"[!-~]{{1,{MAX_ID_LENGTH}}}")


@dataclass(frozen=True)
class JobRequest:
    """One job to enqueue: the job type (or its name), its payload and per-message options.

    ``job_id`` is for callers that must send the same job again under the same id (a resumed
    backfill), so the worker's idempotency absorbs the repeat; by default every job gets a new id.
    """

    job: JobType[Any] | str
    payload: BaseModel | Mapping[str, Any]
    dedupe_key: str | None = None
    delay: timedelta | None = None
    group: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class PreparedJob:
    """A validated job, ready to send: ``entry`` is its SendMessageBatch entry, body included."""

    job_id: str
    queue: str
    entry: dict[str, Any]
    size: int


class JobClient:
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
    ) -> None:
        self._topology = topology or load_topology()
        self._sqs = sqs_client
        self._dynamodb = dynamodb_client
        self._outbox_table = (
            outbox_table or os.environ.get(OUTBOX_TABLE_ENV) or naming.table_name(naming.OUTBOX_TABLE, prefix=prefix)
        )
        self._prefix = prefix
        self._rng = rng or random.Random()  # noqa: S311 - backoff jitter, not cryptography
        self._sleep = sleep
        self._queue_urls: dict[str, str] = {}

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
        prepared = [self.prepare(index, request, correlation) for index, request in enumerate(requests)]
        _reject_repeated_ids(prepared)
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
        prepared = [self.prepare(index, request, correlation) for index, request in enumerate(jobs)]
        _reject_repeated_ids(prepared)
        return self._outbox.transact(writes, prepared)

    def prepare(self, index: int, request: JobRequest, correlation: Correlation) -> PreparedJob:
        """Validate one job and build its SendMessageBatch entry (body = the envelope): no call is made.

        Every path that turns a request into a message (enqueue, the outbox, the stream relay)
        goes through here, so all of them validate and shape jobs alike.
        """
        job_type = self._job_type(request.job)
        where = f"job {index} ({job_type.name})"
        payload = self._payload(job_type, request.payload, where)
        queue = self._topology.queue(job_type.queue)
        job_id = new_job_id() if request.job_id is None else _checked_job_id(request.job_id, where)
        body = Envelope(
            type=job_type.name,
            v=job_type.version,
            id=job_id,
            dedupe_key=request.dedupe_key,
            created_at=datetime.now(UTC),
            correlation=correlation,
            data=payload.model_dump(mode="json"),
        ).to_json()
        size = len(body.encode())
        if size > job_type.max_payload_bytes:
            raise InvalidJobError(
                f"{where}: message is {size} bytes, over the {job_type.max_payload_bytes}-byte limit "
                f"(max_payload_bytes); send large data by reference"
            )
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": body}
        trace_header = current_trace_header()
        if trace_header:
            entry["MessageSystemAttributes"] = {SYSTEM_ATTRIBUTE: {"DataType": "String", "StringValue": trace_header}}
        if queue.fifo:
            if request.group is None:
                raise InvalidJobError(f"{where}: queue {queue.name!r} is FIFO; pass group=")
            if request.delay:
                raise InvalidJobError(f"{where}: FIFO queue {queue.name!r} has no per-message delay")
            entry["MessageGroupId"] = request.group
            entry["MessageDeduplicationId"] = request.dedupe_key or job_id
        else:
            if request.group is not None:
                raise InvalidJobError(f"{where}: group= applies to FIFO queues; {queue.name!r} is standard")
            if request.delay:
                entry["DelaySeconds"] = _delay_seconds(request.delay, where)
        return PreparedJob(job_id=job_id, queue=queue.name, entry=entry, size=size)

    def _job_type(self, job: JobType[Any] | str) -> JobType[Any]:
        name = job if isinstance(job, str) else job.name
        try:
            declared = self._topology.job_type(name)
        except ContractError as error:
            raise InvalidJobError(f"job: {error}") from error
        if not isinstance(job, str) and declared is not job:
            raise InvalidJobError(f"job: {name!r} is not the job type declared in the topology")
        return declared

    @staticmethod
    def _payload(job_type: JobType[Any], payload: BaseModel | Mapping[str, Any], where: str) -> BaseModel:
        if isinstance(payload, job_type.model):
            data: Mapping[str, Any] = payload.model_dump(mode="json")
        elif isinstance(payload, Mapping):
            data = payload
        else:
            raise InvalidJobError(
                f"{where}: payload is a {type(payload).__name__}; expected {job_type.model.__name__} or a dict"
            )
        try:
            validated: BaseModel = job_type.load_payload(data, job_type.version)
        except ContractError as error:
            raise InvalidJobError(f"{where}: payload: {error}") from error
        return validated

    def _queue_url(self, queue: str) -> str:
        if queue not in self._queue_urls:
            name = naming.queue_name(queue, fifo=self._topology.queue(queue).fifo, prefix=self._prefix)
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


def _checked_job_id(job_id: str, where: str) -> str:
    if not JOB_ID_PATTERN.fullmatch(job_id):
        raise InvalidJobError(f"{where}: job_id must be 1 to {MAX_ID_LENGTH} letters, digits or punctuation marks")
    return job_id


def _reject_repeated_ids(prepared: Sequence[PreparedJob]) -> None:
    """Accepted and rejected jobs are reported by id, so ids must be unique within a call."""
    first: dict[str, int] = {}
    for index, item in enumerate(prepared):
        if item.job_id in first:
            raise InvalidJobError(f"job {index}: job_id {item.job_id!r} is also the id of job {first[item.job_id]}")
        first[item.job_id] = index


def _delay_seconds(delay: timedelta, where: str) -> int:
    if not timedelta(0) <= delay <= limits.SQS_MAX_DELAY:
        raise InvalidJobError(
            f"{where}: delay must be between 0 and {limits.SQS_MAX_DELAY.total_seconds():.0f}s (the SQS maximum); "
            "use a schedule for later runs"
        )
    return math.ceil(delay.total_seconds())


def chunks(items: Sequence[PreparedJob]) -> Iterable[list[PreparedJob]]:
    """Batches of at most 10 entries and 1 MiB, the SendMessageBatch limits (the relay sends in them too)."""
    chunk: list[PreparedJob] = []
    size = 0
    for item in items:
        if chunk and (len(chunk) == limits.SQS_MAX_BATCH_ENTRIES or size + item.size > limits.SQS_MAX_BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item.size
    if chunk:
        yield chunk
