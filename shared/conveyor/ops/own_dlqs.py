"""The stack's own DLQs, read, redriven and discarded as a queue's DLQ is: the relay DLQ and the schedules DLQ.

Their messages are no dead-lettered jobs, so each reads as a ``DlqEntry`` its own way:

- **relay**: a poison stream record, whole, with the relay's ``conveyor.reason`` and ``conveyor.error``
  (conveyor.worker.relay); or Lambda's on-failure record for a batch it gave up on, which holds only
  the shard and the range of sequence numbers (reason ``batch_given_up``), not the records.
- **schedules**: EventBridge Scheduler's dead-letter event: the target input (the job's envelope) as
  the body, and Scheduler's attributes; its reason is ``ERROR_CODE``, its error class the
  ``EXHAUSTED_RETRY_CONDITION``.

A schedules entry is redriven by sending its envelope to the queue its schedule targets, as Scheduler
would have. A poison record is redriven by running it through the relay again (``Relay.relay``), so it
is checked again: a record still poison goes back to the relay DLQ with its reason of now.
"""

import contextlib
import json
import logging
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from conveyor.contract import message_attributes as attrs
from conveyor.contract import naming
from conveyor.contract.errors import ContractError, DeclarationError
from conveyor.contract.payloads import MASK
from conveyor.contract.reasons import Reason
from conveyor.contract.relay_settings import RelaySettings
from conveyor.contract.schedule_inputs import (
    DLQ_ERROR_CODE,
    DLQ_ERROR_MESSAGE,
    DLQ_EXHAUSTED_RETRY_CONDITION,
    DLQ_IS_PAYLOAD_TRUNCATED,
    DLQ_RETRY_ATTEMPTS,
    DLQ_SCHEDULE_ARN,
    DLQ_TARGET_ARN,
    parse_occurrence_id,
)
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.ops.dlq_entries import DlqEntry, DlqFilter, attribute, masked_data
from conveyor.ops.dlq_scan import KEEP_EVERY_S, DlqScan
from conveyor.ops.rate import RateLimiter
from conveyor.ops.redrive import DlqSource, RedriveReport, UnroutableError, select
from conveyor.ops.target import QueueTarget, Target, TargetNotFoundError
from conveyor.sdk import outbox
from conveyor.worker.relay import RELAY_SOURCE, SEQUENCE_NUMBER, Relay

RELAY = "relay"
SCHEDULES = "schedules"
assert {RELAY, SCHEDULES} == naming.OWN_QUEUES
# A relay DLQ message from Lambda, not the relay: the batch it gave up on after its retries or its record age.
BATCH_GIVEN_UP = "batch_given_up"
RELAY_REASONS = (*(reason.value for reason in Reason), BATCH_GIVEN_UP)
# Scheduler's error codes are AWS's and open-ended; an entry without one reads as this.
UNKNOWN_ERROR = "unknown"
_ARN_NAME = -1  # an SQS queue ARN's last field is the queue's name, as its URL's last segment is


def strings(message: Mapping[str, Any]) -> dict[str, str]:
    """The message attributes that are strings, by name (what `conveyor dlq show` lists)."""
    return {
        name: value["StringValue"]
        for name, value in sorted(message.get("MessageAttributes", {}).items())
        if "StringValue" in value
    }


def relay_entry(message: Mapping[str, Any]) -> DlqEntry:
    """A relay DLQ message: a poison record with the relay's reason, or Lambda's record of a batch given up."""
    entry = replace(DlqEntry.of(message), attributes=strings(message))
    if attribute(message, attrs.REASON):
        return replace(entry, source=attribute(message, RELAY_SOURCE))
    document = _json(entry.body)
    batch, context = document.get("DDBStreamBatchInfo"), document.get("requestContext")
    if not isinstance(batch, dict) or not isinstance(context, dict):
        return entry  # neither the relay's nor Lambda's: read as an unexplained entry (receive_limit)
    stream = str(batch.get("streamArn", ""))
    return replace(
        entry,
        reason=BATCH_GIVEN_UP,
        error_class=str(context.get("condition") or "") or None,
        error=(
            f"Lambda gave up on {batch.get('batchSize')} records of shard {batch.get('shardId')}, sequence numbers "
            f"{batch.get('startSequenceNumber')} to {batch.get('endSequenceNumber')}; the message holds no record: "
            "read them from the stream within its 24 hours"
        ),
        attempts=invocations if isinstance(invocations := context.get("approximateInvokeCount"), int) else None,
        # arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>
        source=stream.split("/")[1] if stream.count("/") >= 2 else None,
    )


def schedule_entry(message: Mapping[str, Any]) -> DlqEntry:
    """A schedules DLQ message: the job's envelope as Scheduler rendered it, and why Scheduler gave up."""
    entry = DlqEntry.of(message)
    found = strings(message)
    occurrence = parse_occurrence_id(entry.job_id) if entry.job_id else None
    retries = found.get(DLQ_RETRY_ATTEMPTS, "")
    return replace(
        entry,
        reason=found.get(DLQ_ERROR_CODE) or UNKNOWN_ERROR,
        error_class=found.get(DLQ_EXHAUSTED_RETRY_CONDITION),
        error=found.get(DLQ_ERROR_MESSAGE),
        attempts=int(retries) + 1 if retries.isdigit() else None,  # the first try and its retries
        source=occurrence.schedule if occurrence else found.get(DLQ_SCHEDULE_ARN, "").rsplit("/", 1)[-1] or None,
        attributes=found,
    )


def _json(body: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def own_filter(
    topology: Topology,
    name: str,
    *,
    reasons: tuple[str, ...],
    job_types: tuple[str, ...],
    since: str | None,
    until: str | None,
) -> DlqFilter:
    """The filters for the relay or schedules DLQ, checked as a queue's are where a typo could match nothing."""
    if name == RELAY:
        unknown = sorted(set(reasons) - set(RELAY_REASONS))
        if unknown:
            raise ValueError(f"unknown reason {unknown[0]!r}; one of: {', '.join(RELAY_REASONS)}")
        if job_types:
            raise ValueError("the relay DLQ holds stream records, not jobs: --type does not apply to it")
    else:
        scheduled = sorted({schedule.job for schedule in topology.schedules})
        for job_type in job_types:
            if job_type not in scheduled:
                raise LookupError(f"job type {job_type!r} is not scheduled ({', '.join(scheduled) or 'none is'})")
    return DlqFilter.checked(reasons=reasons, job_types=job_types, since=since, until=until)


def own_detail(topology: Topology, entry: DlqEntry, *, raw: bool) -> dict[str, Any]:
    """`conveyor dlq show` of a relay or schedules entry: its attributes, and its body masked as a job's is."""
    detail = entry.detail(topology, raw=raw)
    detail["attributes"] = dict(entry.attributes)
    record = _json(entry.body)
    image = record.get("dynamodb", {}).get("NewImage") if isinstance(record.get("dynamodb"), dict) else None
    if entry.envelope is None and isinstance(image, dict) and not raw:
        detail["envelope"] = {**record, "dynamodb": _masked_stream_data(topology, record["dynamodb"], image)}
        detail["body"] = None
    return detail


def _masked_stream_data(topology: Topology, stream: dict[str, Any], image: dict[str, Any]) -> dict[str, Any]:
    """An outbox item's envelope masked by its type, as a job's is; a streamed table's item, whose fields no
    declaration describes, masked whole, its key too. The rest of the record (sequence number, size) stays."""
    text = image.get(outbox.ENVELOPE, {}).get("S") if isinstance(image.get(outbox.ENVELOPE), dict) else None
    document = _json(text) if text else {}
    if isinstance(document.get("data"), dict):
        kind = document.get("type")
        document["data"] = masked_data(topology, kind if isinstance(kind, str) else None, document["data"])
        return {**stream, "NewImage": {**image, outbox.ENVELOPE: {"S": json.dumps(document)}}}
    keys = stream.get("Keys")
    return {
        **stream,
        "NewImage": dict.fromkeys(image, MASK),
        **({"Keys": dict.fromkeys(keys, MASK)} if isinstance(keys, dict) else {}),
    }


def schedules_source(target: Target, topology: Topology, url: str) -> DlqSource:
    """The schedules DLQ: each entry goes to the queue Scheduler targeted, or else to its job type's queue."""
    by_name = {queue.url.rsplit("/", 1)[-1]: queue for queue in target.queues.values()}

    def route(entry: DlqEntry) -> QueueTarget:
        if entry.attributes.get(DLQ_IS_PAYLOAD_TRUNCATED) == "true":
            raise UnroutableError("Scheduler truncated its body: it is no longer the job it was")
        arn = entry.attributes.get(DLQ_TARGET_ARN, "")
        if arn.split(":")[_ARN_NAME] in by_name:
            return by_name[arn.split(":")[_ARN_NAME]]
        if entry.envelope is not None:
            try:
                return target.queue(topology.job_type(entry.envelope.type).queue)
            except (ContractError, KeyError):
                pass
        raise UnroutableError(
            f"its TARGET_ARN {arn or '(none)'} is no declared queue and its body is no job of a declared type"
        )

    return DlqSource(name=SCHEDULES, url=url, route=route, parse=schedule_entry)


def relay_source(url: str) -> DlqSource:
    """The relay DLQ, for listing and discarding; a redrive runs its records through the relay (RelayRedrive)."""

    def route(entry: DlqEntry) -> QueueTarget:
        raise UnroutableError("a relay DLQ entry is redriven through the relay")

    return DlqSource(name=RELAY, url=url, route=route, parse=relay_entry)


def own_dlq_url(target: Target, name: str) -> str:
    """The URL of the relay or schedules DLQ, or one line on why there is none."""
    url = target.relay_dlq_url if name == RELAY else target.schedules_dlq_url
    if url is None:
        if name == SCHEDULES:
            raise TargetNotFoundError("there is no schedules DLQ: no schedules are declared (or deployed)")
        raise TargetNotFoundError("there is no relay DLQ; deploy this version of the stack, or run `conveyor local up`")
    return url


@dataclass
class RelayRedrive:
    """Poison records run through the relay again: built into jobs, their dedupe keys claimed, sent.

    Each DLQ copy is deleted once the relay is done with its record: sent, absorbed by a dedupe key,
    or dead-lettered afresh with the reason it has now. A record whose send failed keeps its copy.
    Lambda's records of batches given up hold no record, and are refused.
    """

    sqs: Any
    dynamodb: Any
    topology: Topology
    target: Target
    url: str
    rate: RateLimiter

    def report(self, selection: DlqFilter, *, dry_run: bool) -> RedriveReport:
        return RedriveReport(queue=RELAY, redrive_id=uuid.uuid4().hex, filters=selection.describe(), dry_run=dry_run)

    def run(self, report: RedriveReport, selection: DlqFilter, *, limit: int | None) -> RedriveReport:
        relays: dict[str, Relay] = {}
        with DlqScan(self.sqs, self.url, parse=relay_entry) as scan:
            matched = select(scan, selection, limit, report)
            if report.dry_run:
                return report
            for entry in matched:
                self.rate.wait(tick=scan.keep, tick_every_s=KEEP_EVERY_S)
                scan.keep()
                try:
                    relay = self._relay(relays, entry)
                except UnroutableError as error:
                    report.refused[entry.message_id] = str(error)
                    continue
                record = json.loads(entry.body)
                with _relay_output_to_stderr():
                    outcome = relay.relay({"Records": [record]})
                if outcome.response["batchItemFailures"]:
                    report.send_failures[entry.message_id] = "the relay could not send its jobs (see its log above)"
                    continue
                scan.delete(entry)
                poisoned = outcome.poisoned.get(entry.attributes.get(SEQUENCE_NUMBER, ""))
                if poisoned:
                    report.refused[entry.message_id] = f"still poison, dead-lettered again: {poisoned}"
                else:
                    report.redriven += 1
        return report

    def _relay(self, relays: dict[str, Relay], entry: DlqEntry) -> Relay:
        if entry.reason == BATCH_GIVEN_UP or not entry.source or SEQUENCE_NUMBER not in entry.attributes:
            raise UnroutableError(
                "Lambda's record of a batch it gave up on holds no stream record: read the records from the stream"
                if entry.reason == BATCH_GIVEN_UP
                else "not a poison record of the relay (no conveyor.relay_source or conveyor.sequence_number)"
            )
        if entry.source not in relays:
            if self.target.dedupe_table is None:
                raise UnroutableError("the stack has no DedupeTable output, which the relay needs; deploy this version")
            settings = RelaySettings(
                source=entry.source,
                dlq_url=self.url,
                queue_urls={name: queue.url for name, queue in self.target.queues.items()},
                dedupe_table=self.target.dedupe_table,
            )
            try:
                relay = Relay(self.topology, settings, sqs_client=self.sqs, dynamodb_client=self.dynamodb)
            except DeclarationError as error:
                raise UnroutableError(str(error)) from error
            relays[entry.source] = relay
        return relays[entry.source]


@contextlib.contextmanager
def _relay_output_to_stderr() -> Iterator[None]:
    """The relay logs and writes its metrics (EMF) to stdout, as Lambda wants; a command's stdout is its report."""
    handlers = [h for h in logging.getLogger(SERVICE_NAME).handlers if isinstance(h, logging.StreamHandler)]
    streams = [handler.setStream(sys.stderr) for handler in handlers]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            if stream is not None:
                handler.setStream(stream)
