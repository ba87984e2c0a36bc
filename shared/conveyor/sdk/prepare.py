"""Turning a job request into an SQS message: the one place envelopes and their entries are built.

Every path that sends a job goes through ``prepare`` (a new job: validated, wrapped in its
envelope) or ``message_entry`` (a message whose envelope exists: the outbox's, a requeued
copy), so the SDK, the outbox relay, stream rules and the harness shape messages alike.
"""

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

from conveyor.contract import limits
from conveyor.contract.declarations import JobType
from conveyor.contract.envelope import MAX_ID_LENGTH, Correlation, Envelope, new_job_id, summarize_validation_error
from conveyor.contract.errors import InvalidJobError
from conveyor.contract.trace_header import SYSTEM_ATTRIBUTE, current_trace_header
from conveyor.sdk.catalog import Catalog
from conveyor.sdk.dedupe import DedupeKey


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
    """A validated job, ready to send: ``entry`` is its SendMessageBatch entry, body included.

    ``dedupe`` is set when the job was given a dedupe key: it is sent only if it claims that key.
    """

    job_id: str
    queue: str
    entry: dict[str, Any]
    size: int
    dedupe: DedupeKey | None = None


# A job id is also a FIFO queue's MessageDeduplicationId, so it keeps to that field's alphabet,
# letters, digits and punctuation, and to the envelope's length limit:
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatchRequestEntry.html
JOB_ID_PATTERN = re.compile(rf"[!-~]{{1,{MAX_ID_LENGTH}}}")


def prepare(catalog: Catalog, index: int, request: JobRequest, correlation: Correlation) -> PreparedJob:
    """Validate one job and build its SendMessageBatch entry (body = the envelope): no call is made.

    Every path that turns a request into a message (enqueue, the outbox, the stream relay, a
    chunk's hand-off) goes through here, so all of them validate and shape jobs alike.
    """
    route = catalog.route(request.job)
    where = f"job {index} ({route.job_type})"
    data = catalog.payload(route, request.payload, where)
    job_id = new_job_id() if request.job_id is None else _checked_job_id(request.job_id, where)
    try:
        envelope = Envelope(
            type=route.job_type,
            v=route.version,
            id=job_id,
            dedupe_key=request.dedupe_key,
            created_at=datetime.now(UTC),
            correlation=correlation,
            data=data,
        )
    except ValidationError as error:  # a dedupe key the worker would refuse: refused here, before any send
        raise InvalidJobError(f"{where}: envelope: {summarize_validation_error(error)}") from error
    body = envelope.to_json()
    size = len(body.encode())
    if size > route.max_payload_bytes:
        raise InvalidJobError(
            f"{where}: message is {size} bytes, over the {route.max_payload_bytes}-byte limit "
            f"(max_payload_bytes); send large data by reference"
        )
    if route.fifo:
        if request.group is None:
            raise InvalidJobError(f"{where}: queue {route.queue!r} is FIFO; pass group=")
        if request.delay:
            raise InvalidJobError(f"{where}: FIFO queue {route.queue!r} has no per-message delay")
    elif request.group is not None:
        raise InvalidJobError(f"{where}: group= applies to FIFO queues; {route.queue!r} is standard")
    entry = message_entry(
        body,
        index=index,
        group=request.group,
        deduplication_id=request.dedupe_key or job_id,
        delay_seconds=_delay_seconds(request.delay, where) if request.delay else None,
    )
    dedupe = None if request.dedupe_key is None else DedupeKey(route.job_type, request.dedupe_key, route.dedupe_window)
    return PreparedJob(job_id=job_id, queue=route.queue, entry=entry, size=size, dedupe=dedupe)


def message_entry(
    body: str,
    *,
    index: int = 0,
    group: str | None = None,
    deduplication_id: str | None = None,
    delay_seconds: int | None = None,
    attributes: Mapping[str, Any] | None = None,
    trace_header: str | None = None,
) -> dict[str, Any]:
    """The SendMessageBatch entry for one envelope, with the producer's trace header.

    Every sender of jobs builds its message here (the SDK, the outbox relay, the harness's
    hand-off and requeue), so all of them carry the same fields. ``group`` makes it a FIFO
    message (with ``deduplication_id``); ``delay_seconds`` (standard queues only) overrides the queue's own delay.
    For SendMessage, drop ``Id`` (``single_send``). ``trace_header`` is the producer's when the sender is not
    the producer (the outbox relay sends what a request wrote earlier); it defaults to the current one.
    """
    entry: dict[str, Any] = {"Id": str(index), "MessageBody": body}
    trace_header = trace_header or current_trace_header()
    if trace_header:
        entry["MessageSystemAttributes"] = {SYSTEM_ATTRIBUTE: {"DataType": "String", "StringValue": trace_header}}
    if group is not None:
        entry["MessageGroupId"] = group
        entry["MessageDeduplicationId"] = deduplication_id
    if delay_seconds is not None:
        entry["DelaySeconds"] = delay_seconds
    if attributes:
        entry["MessageAttributes"] = dict(attributes)
    return entry


def single_send(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A batch entry as SendMessage's keyword arguments (QueueUrl aside)."""
    return {name: value for name, value in entry.items() if name != "Id"}


def _checked_job_id(job_id: str, where: str) -> str:
    if not JOB_ID_PATTERN.fullmatch(job_id):
        raise InvalidJobError(f"{where}: job_id must be 1 to {MAX_ID_LENGTH} letters, digits or punctuation marks")
    return job_id


def reject_repeated_ids(prepared: Sequence[PreparedJob]) -> None:
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
