"""Lambda's SQS event source mapping, emulated: poll, batch, invoke, apply the partial response.

What Lambda does, and so what this does:
- up to ``max_concurrency`` invocations at once, each with a batch of up to ``batch_size``
  records gathered for at most ``batching_window``;
- records in Lambda's shape, with every attribute Lambda sends;
- a context with the function's timeout;
- after the invocation, only the records not reported in ``batchItemFailures`` are deleted;
  an exception, a run past the timeout, or a failure entry that names no record of the batch
  fails the whole batch, which SQS then redelivers after the visibility timeout.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor import limits
from conveyor.declarations import Queue
from conveyor.local.lambda_context import LocalLambdaContext
from conveyor.local.provision import ProvisionedQueue

log = logging.getLogger(__name__)

# Long-poll wait per receive; short, so that a stop request is noticed within about a second.
RECEIVE_WAIT_S = 1
Handler = Callable[[dict[str, Any], LambdaContext], Any]


def to_lambda_record(message: Mapping[str, Any], *, queue_arn: str) -> dict[str, Any]:
    """A received message (all attributes requested) in the shape Lambda delivers it."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }


def failed_ids(response: object, batch_ids: set[str]) -> set[str]:
    """The records Lambda would keep on the queue, given the function's response.

    An empty or missing ``batchItemFailures`` means all succeeded. An entry whose
    ``itemIdentifier`` is empty or names no record of the batch fails the whole batch.
    """
    if response is None:
        return set()
    if not isinstance(response, Mapping):
        return set(batch_ids)
    failures = response.get("batchItemFailures") or []
    if not isinstance(failures, list):
        return set(batch_ids)
    identifiers = {entry.get("itemIdentifier") if isinstance(entry, Mapping) else None for entry in failures}
    if not identifiers <= batch_ids:
        return set(batch_ids)
    return {identifier for identifier in identifiers if identifier}


@dataclass
class PollerStats:
    """Counters for the live view; updated from poller threads under a lock."""

    invocations: int = 0
    records: int = 0
    deleted: int = 0
    failed_batches: int = 0
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class QueuePoller:
    """One queue's event source mapping, run by ``max_concurrency`` threads."""

    def __init__(
        self, *, declaration: Queue, provisioned: ProvisionedQueue, handler: Handler, sqs: Any, function_name: str
    ) -> None:
        self.declaration = declaration
        self._provisioned = provisioned
        self._handler = handler
        self._sqs = sqs
        self._function_name = function_name
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.stats = PollerStats()

    def start(self) -> None:
        for index in range(self.declaration.max_concurrency):
            thread = threading.Thread(target=self._poll, name=f"poller-{self.declaration.name}-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop receiving; batches already invoked run to completion."""
        self._stopping.set()

    def join(self, deadline: float) -> bool:
        """Wait until ``deadline`` (monotonic) for in-flight batches; True if all finished."""
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _poll(self) -> None:
        while not self._stopping.is_set():
            try:
                batch = self._gather()
                if batch:
                    self._invoke(batch)
            except Exception:  # a poller survives a failed call, as Lambda's pollers do
                log.exception("poller for queue %s failed; retrying", self.declaration.name)
                self._stopping.wait(RECEIVE_WAIT_S)

    def _gather(self) -> list[dict[str, Any]]:
        """Receive up to batch_size messages, waiting at most the batching window to fill the batch."""
        window = self.declaration.batching_window.total_seconds()
        deadline = time.monotonic() + window
        batch: list[dict[str, Any]] = []
        while len(batch) < self.declaration.batch_size and not self._stopping.is_set():
            remaining = deadline - time.monotonic()
            wait = RECEIVE_WAIT_S if not batch else max(0, min(RECEIVE_WAIT_S, int(remaining)))
            batch += self._sqs.receive_message(
                QueueUrl=self._provisioned.url,
                MaxNumberOfMessages=min(limits.SQS_MAX_BATCH_ENTRIES, self.declaration.batch_size - len(batch)),
                WaitTimeSeconds=wait,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            if batch and time.monotonic() >= deadline:
                break
        return batch

    def _invoke(self, batch: list[dict[str, Any]]) -> None:
        with self.stats.lock:
            self.stats.in_flight += 1
        try:
            deleted, whole_batch_failed = self._run_batch(batch)
        finally:
            with self.stats.lock:
                self.stats.in_flight -= 1
        with self.stats.lock:
            self.stats.invocations += 1
            self.stats.records += len(batch)
            self.stats.deleted += deleted
            self.stats.failed_batches += whole_batch_failed

    def _run_batch(self, batch: list[dict[str, Any]]) -> tuple[int, bool]:
        """Invoke the handler on the batch and delete what succeeded: (deleted, whole batch failed)."""
        timeout = self.declaration.function_timeout.total_seconds()
        context = LocalLambdaContext(
            function_name=self._function_name, memory_limit_in_mb=self.declaration.memory_mb, timeout_s=timeout
        )
        batch_ids = {message["MessageId"] for message in batch}
        event = {"Records": [to_lambda_record(message, queue_arn=self._provisioned.arn) for message in batch]}
        started = time.monotonic()
        try:
            failed = failed_ids(self._handler(event, context.as_lambda_context()), batch_ids)
        except Exception:
            log.exception("invocation of %s failed; the whole batch returns to the queue", self._function_name)
            failed = batch_ids
        if time.monotonic() - started > timeout:
            log.error(
                "invocation of %s ran past its %ss timeout; the whole batch returns", self._function_name, timeout
            )
            failed = batch_ids
        done = [message for message in batch if message["MessageId"] not in failed]
        for start in range(0, len(done), limits.SQS_MAX_BATCH_ENTRIES):
            chunk = done[start : start + limits.SQS_MAX_BATCH_ENTRIES]
            self._sqs.delete_message_batch(
                QueueUrl=self._provisioned.url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
        return len(done), failed == batch_ids
