"""Lambda's SQS event source mapping, emulated: poll, batch, invoke, apply the partial response.

What Lambda does, and so what this does:
- up to ``max_concurrency`` invocations at once, each with a batch of up to ``batch_size``
  records gathered for at most ``batching_window``;
- pause, resume and a new maximum concurrency take effect within seconds, without losing a
  batch already received (the state is read through a callable, so this module knows nothing
  of where it is kept);
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

from conveyor.contract import limits
from conveyor.contract.declarations import Queue
from conveyor.local.lambda_context import LocalLambdaContext
from conveyor.local.provision import ProvisionedQueue
from conveyor.ops.event_sources import EventSourceState

log = logging.getLogger(__name__)

# Long-poll wait per receive; short, so that a stop or a pause is noticed within about a second.
RECEIVE_WAIT_S = 1
# How often the mapping's state (enabled, max concurrency) is read, as Lambda's pollers pick up
# UpdateEventSourceMapping within seconds.
CONTROL_POLL_S = 1.0
Handler = Callable[[dict[str, Any], LambdaContext], Any]
# Reads the mapping's current state; for the local runtime, LocalEventSources.state for one queue.
Control = Callable[[], EventSourceState]


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
    """One queue's event source mapping: a control loop and up to ``max_concurrency`` polling threads.

    As Lambda's pollers obey UpdateEventSourceMapping, these obey ``control``, read every
    ``CONTROL_POLL_S``: disabled, no thread receives; ``max_concurrency``, how many threads
    receive at once (the declared value until the first read). Threads are numbered and only
    those below the target receive; surplus ones idle after their current batch, and raising
    the target wakes them or starts new ones. A batch already received is always invoked and
    acknowledged, so pausing or shrinking never strands messages until their visibility lapses.
    """

    def __init__(
        self,
        *,
        declaration: Queue,
        provisioned: ProvisionedQueue,
        handler: Handler,
        sqs: Any,
        function_name: str,
        control: Control,
    ) -> None:
        self.declaration = declaration
        self._provisioned = provisioned
        self._handler = handler
        self._sqs = sqs
        self._function_name = function_name
        self._control = control
        self._stopping = threading.Event()
        # Guards the fields below; notified whenever they change, to wake idle threads.
        self._changed = threading.Condition()
        self._enabled = True
        self._concurrency = declaration.max_concurrency
        self._receiving = 0
        self._threads: list[threading.Thread] = []
        self._control_thread = threading.Thread(
            target=self._control_loop, name=f"poller-{declaration.name}-control", daemon=True
        )
        self.stats = PollerStats()

    @property
    def paused(self) -> bool:
        """Disabled, and no thread still in a receive: nothing is received until it is enabled again.

        Batches received before the pause may still be running (``stats.in_flight``).
        """
        with self._changed:
            return not self._enabled and self._receiving == 0

    @property
    def concurrency(self) -> int:
        """How many threads may receive at once: the mapping's current maximum concurrency."""
        with self._changed:
            return self._concurrency

    def start(self) -> None:
        """Read the state once (a paused queue must not receive even briefly), then start polling."""
        self._refresh()
        with self._changed:  # at the declared concurrency if that read failed
            self._add_threads()
        self._control_thread.start()

    def stop(self) -> None:
        """Stop receiving; batches already invoked run to completion."""
        with self._changed:
            self._stopping.set()
            self._changed.notify_all()

    def join(self, deadline: float) -> bool:
        """After ``stop``, wait until ``deadline`` (monotonic) for in-flight batches; True if all finished."""
        with self._changed:  # no thread is added once stopping
            threads = [self._control_thread, *self._threads]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def _control_loop(self) -> None:
        while not self._stopping.wait(CONTROL_POLL_S):
            self._refresh()

    def _refresh(self) -> None:
        """Apply the mapping's current state; if it cannot be read, keep the last one known."""
        try:
            state = self._control()
        except Exception:  # a control read failing must not stop consumption, as in Lambda
            log.exception(
                "reading the event source state of queue %s failed; keeping the last one", self.declaration.name
            )
            return
        concurrency = state.max_concurrency or self.declaration.max_concurrency  # None: no cap was set
        with self._changed:
            if state.enabled != self._enabled or concurrency != self._concurrency:
                log.info(
                    "queue %s: event source %s, max concurrency %d",
                    self.declaration.name,
                    "enabled" if state.enabled else "disabled",
                    concurrency,
                )
            self._enabled, self._concurrency = state.enabled, concurrency
            self._add_threads()
            self._changed.notify_all()

    def _add_threads(self) -> None:
        """Start threads up to the target concurrency (the caller holds ``_changed``)."""
        while len(self._threads) < self._concurrency and not self._stopping.is_set():
            thread = threading.Thread(
                target=self._poll,
                args=(len(self._threads),),
                name=f"poller-{self.declaration.name}-{len(self._threads)}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()

    def _may_receive(self, index: int) -> bool:
        return self._enabled and index < self._concurrency and not self._stopping.is_set()

    def _await_turn(self, index: int) -> bool:
        """Idle until thread ``index`` may receive, and count it as receiving; False once stopping."""
        with self._changed:
            self._changed.wait_for(lambda: self._stopping.is_set() or self._may_receive(index))
            if self._stopping.is_set():
                return False
            self._receiving += 1
            return True

    def _poll(self, index: int) -> None:
        while self._await_turn(index):
            try:
                batch = self._receive(index)
                if batch:
                    self._invoke(batch)
            except Exception:  # a poller survives a failed call, as Lambda's pollers do
                log.exception("poller for queue %s failed; retrying", self.declaration.name)
                self._stopping.wait(RECEIVE_WAIT_S)

    def _receive(self, index: int) -> list[dict[str, Any]]:
        """Gather a batch, counted as receiving until done, so that ``paused`` waits for it."""
        try:
            return self._gather(index)
        finally:
            with self._changed:
                self._receiving -= 1

    def _gather(self, index: int) -> list[dict[str, Any]]:
        """Receive up to batch_size messages, waiting at most the batching window to fill the batch.

        Gathering ends early if thread ``index`` may no longer receive; what it has is still invoked.
        """
        window = self.declaration.batching_window.total_seconds()
        deadline = time.monotonic() + window
        batch: list[dict[str, Any]] = []
        while len(batch) < self.declaration.batch_size and self._may_receive(index):
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
