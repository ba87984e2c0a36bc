"""The stream relay: DynamoDB stream records in, SQS messages out, a partial batch response back.

One relay reads one stream: the outbox table's, whose items carry a finished envelope, or a
declared table's, whose new items become jobs through its stream rules. Only inserts count.

Nothing is lost: a record whose send failed is reported by its sequence number, and Lambda
retries from the lowest one reported, so later records come again too. Every repeat carries
the same job id (the outbox item's, or one derived from the stream record), so the worker's
idempotency absorbs it. Nothing blocks: a record that no retry could send (a poison record)
goes whole to the relay DLQ with a reason and counts as done.
"""

import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
    DynamoDBRecord,
    DynamoDBRecordEventName,
    DynamoDBStreamEvent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract import message_attributes as attrs
from conveyor.contract.declarations import Queue, StreamImage, StreamRule
from conveyor.contract.envelope import MAX_ID_LENGTH, Correlation, parse_envelope
from conveyor.contract.errors import ContractError, DeclarationError
from conveyor.contract.loader import load_topology
from conveyor.contract.reasons import Reason
from conveyor.contract.relay_settings import OUTBOX_SOURCE, RelaySettings
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.contract.trace_header import trace_id
from conveyor.sdk import outbox
from conveyor.sdk.catalog import TopologyCatalog
from conveyor.sdk.dedupe import ClaimPendingError, DedupeKey, DedupeRecords
from conveyor.sdk.prepare import JOB_ID_PATTERN, JobRequest, PreparedJob, chunks, message_entry, prepare
from conveyor.worker.dead_letter import DeadLetterQueue, reason_attributes
from conveyor.worker.metrics import metric_set
from conveyor.worker.tracing import traced

logger = Logger(service=SERVICE_NAME)

# A relay DLQ message is a stream record, not a job: these say which stream and where in it,
# beside the reason and error that job DLQ messages carry too.
RELAY_SOURCE = "conveyor.relay_source"
SEQUENCE_NUMBER = "conveyor.sequence_number"
# Stream-rule jobs get uuid5(namespace, rule + eventID): the same on every delivery of a record.
STREAM_JOB_ID_NAMESPACE = uuid.UUID("4089a42a-af1b-495b-8a48-be1799880ecd")
STREAM_ORIGIN_PREFIX = "stream:"
# EMF metrics, with the relay's source as their one dimension.
SOURCE_DIMENSION = "source"
RELAYED = "Relayed"  # messages SQS accepted
POISONED = "RelayPoisoned"  # records moved to the relay DLQ
FAILED = "RelayFailed"  # records reported for Lambda to retry
DEDUPLICATED = "RelayDeduplicated"  # jobs not sent: an earlier job holds their dedupe key

LambdaHandler = Callable[[dict[str, Any], LambdaContext], PartialItemFailureResponse]


def stream_job_id(rule: StreamRule, event_id: str) -> str:
    """The id of the job ``rule`` makes from a stream record: a redelivery repeats it, so the worker absorbs it."""
    return str(uuid.uuid5(STREAM_JOB_ID_NAMESPACE, f"{rule.name}\n{event_id}"))


@dataclass(frozen=True)
class _Record:
    """What the relay reads of one INSERT record."""

    sequence_number: str
    event_id: str | None
    image: StreamImage
    raw: Mapping[str, Any]

    @classmethod
    def of(cls, record: DynamoDBRecord) -> "_Record":
        stream = record.dynamodb
        sequence_number = stream.sequence_number if stream else None
        if stream is None or not sequence_number:
            # Lambda always sends one; without it the record could not even be reported as failed.
            raise ValueError("a DynamoDB stream record without dynamodb.SequenceNumber")
        return cls(sequence_number, record.event_id, stream.new_image, record.raw_event)


@dataclass(frozen=True)
class RelayOutcome:
    """One invocation's partial batch response, the records it dead-lettered (sequence number -> reason: error),
    and how many jobs it did not send because an earlier job holds their dedupe key."""

    response: PartialItemFailureResponse
    poisoned: Mapping[str, str]
    deduplicated: int


class Relay:
    """Relays one stream's INSERT records; ``handle`` takes a Lambda event and returns the partial response."""

    def __init__(self, topology: Topology, settings: RelaySettings, *, sqs_client: Any, dynamodb_client: Any) -> None:
        self._topology = topology
        self._catalog = TopologyCatalog(topology)
        self._settings = settings
        self._sqs = sqs_client
        self._dedupe = DedupeRecords(dynamodb_client, settings.dedupe_table)
        self._dlq = DeadLetterQueue(sqs_client, settings.dlq_url)
        self._queues = {queue.name: queue for queue in topology.queues}
        self._rules = topology.rules_for(settings.source)
        self._correlation = Correlation(origin=STREAM_ORIGIN_PREFIX + settings.source)
        if settings.source != OUTBOX_SOURCE and not self._rules:
            raise DeclarationError(
                f"relay source {settings.source!r} is neither {OUTBOX_SOURCE!r} nor a table that stream rules read"
            )

    def handle(self, event: Mapping[str, Any]) -> PartialItemFailureResponse:
        return self.relay(event).response

    def relay(self, event: Mapping[str, Any]) -> "RelayOutcome":
        """``handle``, saying also which records went to the relay DLQ and why (`conveyor dlq redrive relay`)."""
        order: list[str] = []
        outgoing: list[PreparedJob] = []
        owners: dict[str, str] = {}  # SendMessageBatch entry Id -> the sequence number of its record
        failed: set[str] = set()
        poisoned: dict[str, str] = {}
        deduplicated = 0
        for stream_record in DynamoDBStreamEvent(dict(event)).records:
            # The mapping's filter passes only inserts; an update or a delete never enqueues a job.
            if stream_record.event_name is not DynamoDBRecordEventName.INSERT:
                continue
            record = _Record.of(stream_record)
            order.append(record.sequence_number)
            try:
                jobs = self._jobs_for(record, first_index=len(outgoing))
            except ContractError as error:
                if self._dead_letter(record, error):
                    poisoned[record.sequence_number] = f"{error.reason.value}: {error}"
                else:
                    failed.add(record.sequence_number)
                continue
            try:
                claimed = [job for job in jobs if self._claimed(job)]
            except (ClaimPendingError, ClientError, BotoCoreError):
                logger.warning(
                    "could not claim a dedupe key; the record comes again",
                    exc_info=True,
                    extra={"sequence_number": record.sequence_number},
                )
                failed.add(record.sequence_number)
                continue
            deduplicated += len(jobs) - len(claimed)
            owners.update((job.entry["Id"], record.sequence_number) for job in claimed)
            outgoing.extend(claimed)
        failed_entries = self._send(outgoing)
        failed.update(owners[entry_id] for entry_id in failed_entries)
        relayed = len(outgoing) - len(failed_entries)
        logger.info(
            "stream records relayed",
            extra={
                "records": len(order),
                "relayed": relayed,
                "deduplicated": deduplicated,
                "poisoned": len(poisoned),
                "failed": len(failed),
            },
        )
        self._publish_metrics(relayed=relayed, deduplicated=deduplicated, poisoned=len(poisoned), failed=len(failed))
        response: PartialItemFailureResponse = {
            "batchItemFailures": [{"itemIdentifier": number} for number in order if number in failed]
        }
        return RelayOutcome(response, poisoned, deduplicated)

    def _claimed(self, job: PreparedJob) -> bool:
        """Whether the job goes out: it has no dedupe key, or it holds the key (taken as sent: a failed send
        reports the record, whose retry claims it again under the same job id)."""
        if job.dedupe is None:
            return True
        claim = self._dedupe.claim(job.dedupe, job.job_id, sent=True)
        if not claim.owned:
            logger.info(
                "duplicate enqueue absorbed",
                extra={"job_id": job.job_id, "job_type": job.dedupe.job_type, "first_job_id": claim.job_id},
            )
        return claim.owned

    def _jobs_for(self, record: _Record, *, first_index: int) -> list[PreparedJob]:
        """The messages one record becomes; a ContractError makes it a poison record."""
        if self._settings.source == OUTBOX_SOURCE:
            return [self._outbox_job(record, first_index)]
        return self._rule_jobs(record, first_index)

    def _outbox_job(self, record: _Record, index: int) -> PreparedJob:
        image = record.image
        queue_name, text = image.get(outbox.QUEUE), image.get(outbox.ENVELOPE)
        if not isinstance(queue_name, str) or not isinstance(text, str):
            raise ContractError(
                Reason.INVALID_OUTBOX_ITEM, f"the item needs string attributes {outbox.QUEUE!r} and {outbox.ENVELOPE!r}"
            )
        envelope = parse_envelope(text)
        queue = self._queue(queue_name)
        job_type = self._topology.job_type(envelope.type)
        if job_type.queue != queue.name:
            raise ContractError(
                Reason.WRONG_QUEUE, f"job type {job_type.name!r} runs on queue {job_type.queue!r}, not {queue.name!r}"
            )
        group = None
        if queue.fifo:
            group = image.get(outbox.GROUP)
            # As conveyor.sdk.prepare sets them; SQS would refuse other values on every retry.
            deduplication_id = envelope.dedupe_key or envelope.id
            if not isinstance(group, str) or not JOB_ID_PATTERN.fullmatch(group):
                raise ContractError(
                    Reason.INVALID_OUTBOX_ITEM,
                    f"queue {queue.name!r} is FIFO: the item needs a {outbox.GROUP!r} of 1 to {MAX_ID_LENGTH} letters, "
                    "digits or punctuation marks",
                )
            if not JOB_ID_PATTERN.fullmatch(deduplication_id):
                raise ContractError(
                    Reason.INVALID_ENVELOPE, "the envelope's dedupe_key (or id) is not a valid MessageDeduplicationId"
                )
        entry = message_entry(
            text,
            index=index,
            group=group,
            deduplication_id=envelope.dedupe_key or envelope.id,
            trace_header=_trace_header(image.get(outbox.TRACE_HEADER)),
        )
        dedupe = (
            None
            if envelope.dedupe_key is None
            else DedupeKey(job_type.name, envelope.dedupe_key, job_type.dedupe_window)
        )
        return PreparedJob(job_id=envelope.id, queue=queue.name, entry=entry, size=len(text.encode()), dedupe=dedupe)

    def _rule_jobs(self, record: _Record, first_index: int) -> list[PreparedJob]:
        """A job per rule that accepts the new item: all of them, or (if one rule fails) none."""
        if not record.event_id:
            raise ContractError(Reason.STREAM_RULE_FAILED, "the record has no eventID to derive job ids from")
        jobs: list[PreparedJob] = []
        for rule in self._rules:
            payload = _rule_payload(rule, record.image)
            if payload is None:
                continue
            request = JobRequest(
                rule.job,
                payload,
                job_id=stream_job_id(rule, record.event_id),
                dedupe_key=_rule_dedupe_key(rule, record.image),
            )
            try:
                job = prepare(self._catalog, first_index + len(jobs), request, self._correlation)
            # InvalidJobError, or a TypeError for a value JSON cannot hold (a Decimal left as it came).
            except (ValueError, TypeError) as error:
                cause = error.__cause__
                reason = cause.reason if isinstance(cause, ContractError) else Reason.STREAM_RULE_FAILED
                raise ContractError(reason, f"rule {rule.name!r}: {error}") from error
            self._queue(job.queue)
            jobs.append(job)
        return jobs

    def _queue(self, name: str) -> Queue:
        """A queue the relay may send to: declared, and given to the relay by the stack."""
        queue = self._queues.get(name)
        if queue is None:
            raise ContractError(Reason.UNKNOWN_QUEUE, f"queue {name!r} is not declared")
        if name not in self._settings.queue_urls:
            raise ContractError(Reason.UNKNOWN_QUEUE, f"queue {name!r} has no URL in the relay's settings")
        return queue

    def _dead_letter(self, record: _Record, error: ContractError) -> bool:
        """Send the whole record to the relay DLQ; False if that failed, so the record comes again."""
        attributes = reason_attributes(error.reason, str(error)) | {
            RELAY_SOURCE: attrs.string(self._settings.source),
            SEQUENCE_NUMBER: attrs.string(record.sequence_number),
        }
        log = {
            "reason": error.reason.value,
            "error": attributes[attrs.ERROR]["StringValue"],
            "sequence_number": record.sequence_number,
        }
        try:
            self._dlq.send(json.dumps(record.raw), attributes)
        except (ClientError, BotoCoreError):
            logger.exception("could not dead-letter a poison record; reported failed for a retry", extra=log)
            return False
        logger.warning("poison record dead-lettered", extra=log)
        return True

    def _send(self, jobs: list[PreparedJob]) -> set[str]:
        """SendMessageBatch per queue, in chunks within its limits; returns the entry Ids that failed."""
        failed: set[str] = set()
        for queue in dict.fromkeys(job.queue for job in jobs):
            for chunk in chunks([job for job in jobs if job.queue == queue]):
                failed |= self._send_chunk(queue, chunk)
        return failed

    def _send_chunk(self, queue: str, chunk: list[PreparedJob]) -> set[str]:
        # No retry here: Lambda retries the reported records, with the mapping's bounded retries.
        try:
            response = self._sqs.send_message_batch(
                QueueUrl=self._settings.queue_urls[queue], Entries=[job.entry for job in chunk]
            )
        except (ClientError, BotoCoreError):
            logger.exception("relay batch send failed", extra={"queue": queue, "entries": len(chunk)})
            return {job.entry["Id"] for job in chunk}
        failures = response.get("Failed", [])
        for failure in failures:
            logger.warning(
                "relay entry send failed",
                extra={"queue": queue, "code": failure["Code"], "sender_fault": failure.get("SenderFault")},
            )
        return {failure["Id"] for failure in failures}

    def _publish_metrics(self, *, relayed: int, deduplicated: int, poisoned: int, failed: int) -> None:
        metrics = metric_set(((SOURCE_DIMENSION, self._settings.source),))
        for name, value in ((RELAYED, relayed), (DEDUPLICATED, deduplicated), (POISONED, poisoned), (FAILED, failed)):
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        metrics.flush_metrics()


def _trace_header(value: object) -> str | None:
    """The producer's trace header from an outbox item; one that names no trace (a foreign producer's mistake) is
    left out rather than making the job poison: the job matters, its trace link does not."""
    return value if isinstance(value, str) and trace_id(value) else None


def _rule_dedupe_key(rule: StreamRule, image: StreamImage) -> str | None:
    """The rule's dedupe key for the new item, if it declares one; a key prepare refuses makes the record poison."""
    if rule.dedupe_key is None:
        return None
    try:
        return rule.dedupe_key(image)
    except Exception as error:  # project code, as in _rule_payload
        raise ContractError(
            Reason.STREAM_RULE_FAILED, f"rule {rule.name!r}: dedupe_key raised {type(error).__name__}"
        ) from error


def _rule_payload(rule: StreamRule, image: StreamImage) -> Mapping[str, Any] | None:
    """The rule's payload for the new item, or None if the rule does not apply to it."""
    try:
        if not rule.when(image):
            return None
        return rule.payload(image)
    except Exception as error:  # project code: whatever it raises, this record cannot become the job
        # The error's text is left out: it may quote item values (the DLQ keeps the whole record).
        raise ContractError(Reason.STREAM_RULE_FAILED, f"rule {rule.name!r} raised {type(error).__name__}") from error


def make_relay_handler(topology: Topology | None = None) -> LambdaHandler:
    """The Lambda entry point for a relay; the source and queues come from the environment on the first call.

    ``topology`` defaults to the project's own, loaded now, as ``make_handler``'s does (and for the
    same cold-start reason: this module imports Powertools' batch types before pydantic). The relay
    is built lazily, as the worker's is, so the environment is read inside Lambda (or a test).
    """
    declared = topology or load_topology()
    relay: Relay | None = None

    @logger.inject_lambda_context(clear_state=True)
    def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
        nonlocal relay
        if relay is None:
            relay = Relay(
                declared,
                RelaySettings.from_environment(os.environ),
                sqs_client=boto3.client("sqs"),
                dynamodb_client=boto3.client("dynamodb"),
            )
        return relay.handle(event)

    return traced(handler)
