"""Drive a queue's worker against moto: send envelopes, receive them as Lambda records, read the DLQ.

A ``QueueDriver`` plays the Lambda event source mapping for one declared queue: it receives real
messages from the moto queue, hands them to the queue's worker (conveyor.testing's ``QueueWorker``:
``Worker(Harness(...))``) with a seeded rng and a settable clock, and reports which records came
back as batch item failures. Unlike ``conveyor.testing.run_jobs``, it leaves the test each step.
"""

import copy
import json
import random
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from conveyor.local.event_source import to_lambda_record
from conveyor.testing.queue_worker import QueueWorker
from conveyor.worker.metrics import SCHEDULE_DIMENSION, SCHEDULE_SUCCEEDED, SHARD_DIMENSION
from conveyor.worker.outcomes import JobOutcome
from tests.aws import Aws
from tests.lambda_context import lambda_context

# Every harness in these tests runs at this instant unless a test moves its driver's clock.
FIXED_NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
# How long before FIXED_NOW an envelope is written unless a test says otherwise.
DEFAULT_AGE = timedelta(minutes=1)
DEFAULT_SEED = 1234

Record = dict[str, Any]


def envelope(
    job_type: str,
    data: Mapping[str, Any],
    *,
    v: int = 1,
    job_id: str | None = None,
    created_at: datetime | None = None,
) -> str:
    """An envelope body, deliberately not in canonical JSON (indented, raw non-ASCII, a trailing newline).

    Any re-serialisation on the way to the DLQ would change these bytes, so comparing a dead
    letter's body with the sent one proves the body passed through untouched.
    """
    document = {
        "type": job_type,
        "v": v,
        "id": job_id or f"job-{uuid.uuid4().hex[:12]}",
        "created_at": (created_at or FIXED_NOW - DEFAULT_AGE).isoformat(),
        "correlation": {"request_id": "req-ünïcode"},
        "data": dict(data),
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def parse_timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def first_receive_time(record: Record) -> datetime:
    """When SQS first handed out the record's message (its ApproximateFirstReceiveTimestamp)."""
    return datetime.fromtimestamp(int(record["attributes"]["ApproximateFirstReceiveTimestamp"]) / 1000, tz=UTC)


def receive_count(record: Record) -> int:
    return int(record["attributes"]["ApproximateReceiveCount"])


def string_attributes(record: Record) -> dict[str, str]:
    """A Lambda record's message attributes as plain name -> string value."""
    return {name: value["stringValue"] for name, value in record["messageAttributes"].items()}


def schedule_succeeded_counts(output: str, *, per_shard: bool = False) -> Counter[Any]:
    """The dead man's switch's metric in captured stdout: the ScheduleSucceeded sum per schedule (its
    {schedule} documents), or with ``per_shard`` per (schedule, shard) (its {schedule, shard} documents)."""
    counts: Counter[Any] = Counter()
    for line in output.splitlines():
        if line.startswith("{") and f'"{SCHEDULE_SUCCEEDED}"' in line:
            document = json.loads(line)
            if (SHARD_DIMENSION in document) != per_shard:
                continue
            value = document[SCHEDULE_SUCCEEDED]
            key = (
                (document[SCHEDULE_DIMENSION], int(document[SHARD_DIMENSION]))
                if per_shard
                else document[SCHEDULE_DIMENSION]
            )
            counts[key] += int(sum(value) if isinstance(value, list) else value)
    return counts


@dataclass(frozen=True)
class DeadLetter:
    body: str
    attributes: dict[str, str]
    group_id: str | None


@contextmanager
def requests_to(client: Any, operation: str) -> Iterator[list[dict[str, Any]]]:
    """Record the parameters of each ``operation`` request the client makes; the request still reaches moto."""
    calls: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(copy.deepcopy(params))

    event = f"provide-client-params.{client.meta.service_model.endpoint_prefix}.{operation}"
    client.meta.events.register(event, record)
    try:
        yield calls
    finally:
        client.meta.events.unregister(event, record)


class QueueDriver:
    """One declared queue on moto, with the worker that Lambda would run for it."""

    def __init__(self, aws: Aws, name: str, *, seed: int = DEFAULT_SEED) -> None:
        self.aws = aws
        self.name = name
        self.queue = aws.topology.queue(name)
        self.url = aws.queue_url(name)
        self.dlq_url = aws.dlq_url(name)
        self.arn = str(
            aws.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        )
        self.now = FIXED_NOW
        self.outcomes: list[JobOutcome] = []
        self.queue_worker = QueueWorker(
            aws.topology,
            aws.provisioned,
            name,
            sqs=aws.sqs,
            dynamodb=aws.dynamodb,
            observer=self.outcomes.append,
            rng=random.Random(seed),
            clock=lambda: self.now,
        )
        self.metrics = self.queue_worker.metrics
        self.harness = self.queue_worker.harness
        self.worker = self.queue_worker.worker

    # --- producing -------------------------------------------------------------------------

    def send(self, body: str, *, group: str | None = None, attributes: dict[str, Any] | None = None) -> str:
        """Enqueue ``body`` (in message group ``group`` on a FIFO queue); returns the SQS message id."""
        request: dict[str, Any] = {"QueueUrl": self.url, "MessageBody": body}
        if attributes:
            request["MessageAttributes"] = attributes
        if self.queue.fifo:
            request["MessageGroupId"] = group or "default"
            request["MessageDeduplicationId"] = uuid.uuid4().hex
        return str(self.aws.sqs.send_message(**request)["MessageId"])

    def resend_now(self, request: Mapping[str, Any]) -> str:
        """Send what the harness sent, minus its DelaySeconds: stands in for the delay elapsing."""
        return self.send(request["MessageBody"], attributes=request.get("MessageAttributes"))

    # --- the event source mapping ------------------------------------------------------------

    def receive(self, *, visibility: int = 30) -> list[Record]:
        """The visible messages (up to 10), received as Lambda would and shaped as its event records."""
        return [to_lambda_record(m, queue_arn=self.arn) for m in self.queue_worker.receive(visibility=visibility)]

    def receive_one(self, *, visibility: int = 30) -> Record:
        records = self.receive(visibility=visibility)
        assert len(records) == 1, f"expected one visible message on {self.name}, got {len(records)}"
        return records[0]

    def send_and_receive(self, body: str, *, visibility: int = 30) -> Record:
        self.send(body)
        return self.receive_one(visibility=visibility)

    def end_backoff(self, record: Record) -> None:
        """Make the record's message visible again, as once its backoff has passed, without waiting for it."""
        self.aws.sqs.change_message_visibility(
            QueueUrl=self.url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
        )

    def redeliver(self, record: Record) -> Record:
        """The same message, received again once its backoff has passed."""
        self.end_backoff(record)
        again = self.receive_one()
        assert again["messageId"] == record["messageId"]
        return again

    def run(self, *records: Record, timeout_s: float | None = None) -> list[str]:
        """One invocation on ``records``; returns the message ids reported in batchItemFailures."""
        seconds = timeout_s if timeout_s is not None else self.queue.function_timeout.total_seconds()
        response = self.worker.handle({"Records": list(records)}, lambda_context(timeout_s=seconds))
        return [str(failure["itemIdentifier"]) for failure in response["batchItemFailures"]]

    # --- what an operator sees ---------------------------------------------------------------

    def dead_letters(self) -> list[DeadLetter]:
        messages = self.aws.receive(self.dlq_url)
        return [
            DeadLetter(
                body=m["Body"],
                attributes={name: value["StringValue"] for name, value in m.get("MessageAttributes", {}).items()},
                group_id=m.get("Attributes", {}).get("MessageGroupId"),
            )
            for m in messages
        ]

    def delayed_count(self) -> int:
        attributes = self.aws.sqs.get_queue_attributes(
            QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessagesDelayed"])
