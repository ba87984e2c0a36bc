"""Return DLQ entries to their queue: filtered, throttled, canaried, and safe to interrupt.

Each entry is sent first and its DLQ copy deleted only once the send succeeded, so an
interruption loses nothing; the body (and with it the job id) is unchanged, so an entry sent
twice is absorbed by the worker's idempotency. The copy carries ``conveyor.redriven_at``,
from which the job's max_wall_time counts afresh, and starts with a full retry budget.

A canary sends the first N entries, then waits until each has completed (its idempotency
record) or failed again (it is back in the DLQ); anything but all completed stops the run.
"""

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract import message_attributes as attrs
from conveyor.contract.errors import ContractError, ConveyorError
from conveyor.contract.topology import Topology
from conveyor.ops.dlq_entries import DlqEntry, DlqFilter
from conveyor.ops.dlq_scan import KEEP_EVERY_S, DlqScan, read_entries
from conveyor.ops.rate import RateLimiter
from conveyor.ops.target import QueueTarget
from conveyor.worker.idempotency import IdempotentRunner

SAMPLE_SIZE = 5
CANARY_POLL = timedelta(seconds=2)
DEFAULT_CANARY_TIMEOUT = timedelta(minutes=5)

Runners = Callable[[str], IdempotentRunner]


class UnroutableError(ConveyorError):
    """An entry whose destination queue cannot be told: it stays in the DLQ, and the message says why."""


@dataclass(frozen=True)
class DlqSource:
    """A DLQ to redrive from: its name, its URL, how its messages read as entries, and where each one goes.

    A queue's DLQ sends everything back to its queue; the schedules DLQ sends each entry to the queue
    its schedule targets (conveyor.ops.own_dlqs), and ``route`` raises UnroutableError when it cannot say.
    """

    name: str
    url: str
    route: Callable[[DlqEntry], QueueTarget]
    parse: Callable[[Mapping[str, Any]], DlqEntry] = DlqEntry.of

    @classmethod
    def of_queue(cls, queue: QueueTarget) -> "DlqSource":
        return cls(name=queue.name, url=queue.dlq_url, route=lambda _: queue)


@dataclass
class CanaryResult:
    """The canary's jobs by id (or ``message:<id>`` for a body that is not a valid envelope)."""

    jobs: list[str]
    completed: list[str] = field(default_factory=list)
    failed_again: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return len(self.completed) == len(self.jobs)


@dataclass(frozen=True)
class _Canary:
    """How to tell a canary's fate: its idempotency record, or its body back in the DLQ."""

    name: str
    body: str
    record: tuple[IdempotentRunner, str] | None
    # Where it lands if it fails again: its destination queue's DLQ.
    dlq_url: str


@dataclass
class RedriveReport:
    queue: str
    redrive_id: str
    filters: dict[str, Any]
    dry_run: bool
    scanned: int = 0
    matched: int = 0
    redriven: int = 0
    # DLQ message id -> why its send failed; those entries stay in the DLQ.
    send_failures: dict[str, str] = field(default_factory=dict)
    # DLQ message id -> why it was not redriven (no destination, or still poison); those stay in the DLQ too.
    refused: dict[str, str] = field(default_factory=dict)
    truncated: bool = False
    samples: list[dict[str, Any]] = field(default_factory=list)
    canary: CanaryResult | None = None
    stopped: str | None = None


def select(scan: DlqScan, selection: DlqFilter, limit: int | None, report: RedriveReport) -> list[DlqEntry]:
    """The entries a redrive takes: what ``selection`` matches, at most ``limit``; the rest are released.

    Fills the report's counts and samples.
    """
    entries = scan.read_all()
    matched = [entry for entry in entries if selection.matches(entry)][:limit]
    chosen = {entry.message_id for entry in matched}
    scan.release([entry for entry in entries if entry.message_id not in chosen])
    report.scanned, report.matched, report.truncated = len(entries), len(matched), scan.truncated
    report.samples = [entry.summary() for entry in matched[:SAMPLE_SIZE]]
    return matched


@dataclass
class Redrive:
    sqs: Any
    topology: Topology
    queue: QueueTarget | DlqSource
    runners: Runners
    rate: RateLimiter
    canary_timeout: timedelta = DEFAULT_CANARY_TIMEOUT
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = time.sleep

    @cached_property
    def source(self) -> DlqSource:
        return self.queue if isinstance(self.queue, DlqSource) else DlqSource.of_queue(self.queue)

    def report(self, selection: DlqFilter, *, dry_run: bool) -> RedriveReport:
        """A fresh report; ``run`` fills it in as it goes, so an interrupted run still says what it did."""
        return RedriveReport(
            queue=self.source.name, redrive_id=uuid.uuid4().hex, filters=selection.describe(), dry_run=dry_run
        )

    def run(self, report: RedriveReport, selection: DlqFilter, *, limit: int | None, canary: int) -> RedriveReport:
        dry_run = report.dry_run
        with DlqScan(self.sqs, self.source.url, parse=self.source.parse) as scan:
            matched = select(scan, selection, limit, report)
            if dry_run:
                return report
            first, rest = matched[:canary], matched[canary:]
            self._send_all(scan, first, report)
            if first:
                sent = [entry for entry in first if entry.message_id not in report.send_failures]
                report.canary = self._watch(scan, [self._canary(entry) for entry in sent], report.redrive_id)
                if not sent:
                    report.stopped = "no canary could be sent"
                    return report
                if not report.canary.passed:
                    report.stopped = "canary failed again" if report.canary.failed_again else "canary did not finish"
                    return report
            self._send_all(scan, rest, report)
        return report

    def _send_all(self, scan: DlqScan, entries: list[DlqEntry], report: RedriveReport) -> None:
        for entry in entries:
            self.rate.wait(tick=scan.keep, tick_every_s=KEEP_EVERY_S)
            scan.keep()
            try:
                self._send(entry, report.redrive_id)
            except UnroutableError as error:
                report.refused[entry.message_id] = str(error)
                continue
            except (BotoCoreError, ClientError) as error:  # the entry stays in the DLQ; the report says so
                report.send_failures[entry.message_id] = str(error)
                continue
            scan.delete(entry)
            report.redriven += 1

    def _send(self, entry: DlqEntry, redrive_id: str) -> None:
        queue = self.source.route(entry)
        request: dict[str, Any] = {
            "QueueUrl": queue.url,
            "MessageBody": entry.body,
            "MessageAttributes": {
                attrs.REDRIVEN_AT: attrs.timestamp(self.clock()),
                attrs.REDRIVE_ID: attrs.string(redrive_id),
            },
        }
        if queue.fifo:
            request["MessageGroupId"] = entry.group_id or entry.job_id or entry.message_id
            # The DLQ copy's id: a repeat send within SQS's 5-minute window is dropped.
            request["MessageDeduplicationId"] = entry.message_id
        self.sqs.send_message(**request)

    def _watch(self, scan: DlqScan, canaries: list[_Canary], redrive_id: str) -> CanaryResult:
        """Wait until every canary completed, or one is back in the DLQ, or the timeout passes."""
        result = CanaryResult(jobs=[canary.name for canary in canaries])
        deadline = time.monotonic() + self.canary_timeout.total_seconds()
        while True:
            scan.keep()
            result.completed = [
                canary.name for canary in canaries if canary.record and canary.record[0].completed(canary.record[1])
            ]
            dlqs = dict.fromkeys(canary.dlq_url for canary in canaries)
            back = [entry for url in dlqs for entry in read_entries(self.sqs, url)[0]]
            # A copy dead-lettered again carries this redrive's id: no clocks are compared.
            returned = {entry.body for entry in back if entry.redrive_id == redrive_id}
            result.failed_again = [
                canary.name for canary in canaries if canary.body in returned and canary.name not in result.completed
            ]
            result.pending = [
                name for name in result.jobs if name not in result.completed and name not in result.failed_again
            ]
            if result.failed_again or not result.pending or time.monotonic() >= deadline:
                return result
            self.sleep(CANARY_POLL.total_seconds())

    def _canary(self, entry: DlqEntry) -> _Canary:
        """The body is sent unchanged, so a copy back in the DLQ has the same body, whatever its shape."""
        return _Canary(
            name=entry.job_id or f"message:{entry.message_id}",
            body=entry.body,
            record=self._record(entry),
            dlq_url=self.source.route(entry).dlq_url,
        )

    def _record(self, entry: DlqEntry) -> tuple[IdempotentRunner, str] | None:
        """The idempotency record that will say the job completed; None if the body is not a valid job."""
        if entry.envelope is None:
            return None
        try:
            job_type = self.topology.job_type(entry.envelope.type)
            payload = job_type.load_payload(entry.envelope.data, entry.envelope.v)
        except ContractError:
            return None
        key = job_type.idempotency_key_for(
            job_id=entry.envelope.id, dedupe_key=entry.envelope.dedupe_key, payload=payload
        )
        return self.runners(job_type.name), key


def discard(
    sqs: Any, queue: QueueTarget | DlqSource, selection: DlqFilter, *, limit: int | None
) -> tuple[int, int, bool]:
    """Delete matching entries: (scanned, deleted, truncated)."""
    source = queue if isinstance(queue, DlqSource) else DlqSource.of_queue(queue)
    with DlqScan(sqs, source.url, parse=source.parse) as scan:
        entries = scan.read_all()
        matched = [entry for entry in entries if selection.matches(entry)][:limit]
        for entry in matched:
            scan.delete(entry)
        return len(entries), len(matched), scan.truncated
