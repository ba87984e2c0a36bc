"""Lambda's SQS event source mapping, emulated: poll, batch, invoke, apply the partial response.

What Lambda does, and so what this does:
- up to ``max_concurrency`` invocations at once, each with a batch of up to ``batch_size``
  records gathered for at most ``batching_window``;
- pollers that follow the backlog: Lambda "uses long polling to poll a queue until it becomes
  active", then scales its pollers up and down with the workload
  (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html). Here an empty queue
  has one long poll waiting on it, and more threads receive as receives come back full;
- pause, resume and a new maximum concurrency take effect within seconds: ``StateReader`` reads
  every queue's state in one request and hands each poller its own (through a callable, so this
  module knows nothing of where the state is kept). A batch received once its poller knows it is
  disabled or stopped goes back to the queue at once instead of being invoked, so none waits out
  its visibility timeout;
- records in Lambda's shape, with every attribute Lambda sends;
- a context with the function's timeout;
- after the invocation, only the records not reported in ``batchItemFailures`` are deleted;
  an exception, a run past the timeout, or a failure entry that names no record of the batch
  fails the whole batch, which SQS then redelivers after the visibility timeout.
"""

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.contract import limits
from conveyor.contract.declarations import Queue
from conveyor.local.lambda_context import LocalLambdaContext
from conveyor.local.periodic import Periodic
from conveyor.local.provision import ProvisionedQueue
from conveyor.ops.event_sources import EventSourceState

log = logging.getLogger(__name__)

# The wait of the one receive that listens on a queue nothing else is receiving from: SQS's
# longest, which AWS recommends for long polling
# (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/best-practices-setting-up-long-polling.html).
IDLE_RECEIVE_WAIT_S = int(limits.SQS_MAX_WAIT.total_seconds())
# Receives beside the listening one only ask whether more is waiting: one that finds nothing
# returns at once, and its thread goes idle.
SCALED_RECEIVE_WAIT_S = 0
# The most a receive that adds to a batch within its batching window waits, so that a pause or a
# stop ends the gathering within about a second.
GATHER_RECEIVE_WAIT_S = 1
# The pause after a failed receive, so that an unreachable endpoint does not spin a poller.
RETRY_WAIT_S = 1.0
# How often every mapping's state (enabled, max concurrency) is read, as Lambda's pollers pick up
# UpdateEventSourceMapping within seconds.
CONTROL_POLL_S = 5.0
Handler = Callable[[dict[str, Any], LambdaContext], Any]
# Reads the current state of every queue's mapping, by queue name; for the local runtime,
# LocalEventSources.states for the topology's queues.
ReadStates = Callable[[], Mapping[str, EventSourceState]]


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
    # Messages received once the poller knew it was disabled or stopping, and given back uninvoked.
    returned: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def _entries(messages: list[dict[str, Any]], **extra: Any) -> Iterator[list[dict[str, Any]]]:
    """The messages as the entries of SQS batch calls on their receipt handles, at most a batch's worth at a time."""
    for start in range(0, len(messages), limits.SQS_MAX_BATCH_ENTRIES):
        chunk = messages[start : start + limits.SQS_MAX_BATCH_ENTRIES]
        yield [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], **extra} for i, m in enumerate(chunk)]


class QueuePoller:
    """One queue's event source mapping: up to ``max_concurrency`` threads that receive and invoke.

    Scaling, as Lambda's pollers follow the backlog: one thread at a time listens on the queue
    with a long poll of ``idle_wait_s``, so an empty queue costs one request per ``idle_wait_s``.
    Each receive that comes back with all it asked for lets one more thread receive at once (with
    a short poll) up to the maximum concurrency; one that comes back short (the queue is drained)
    drops back to the listener alone. So a backlog is taken in full batches by every thread, and
    its tail costs about one empty receive.

    The mapping's state arrives through ``apply`` (from a ``StateReader``): disabled, no thread
    receives; ``max_concurrency``, how many may (the declared value until the first state).
    Threads are numbered and only those below the maximum receive; surplus ones idle after their
    current batch, and raising it wakes them or starts new ones. A batch in hand once the poller
    knows it is disabled or stopping, as when a long poll returns after a pause, is given back at
    once (visibility 0) rather than invoked, so pausing never strands messages until their
    visibility lapses; as with Lambda's returns of throttled batches, that counts as a receive.

    ``idle_wait_s`` is a parameter so that tests need not wait out a 20-second long poll.
    """

    def __init__(
        self,
        *,
        declaration: Queue,
        provisioned: ProvisionedQueue,
        handler: Handler,
        sqs: Any,
        function_name: str,
        idle_wait_s: int = IDLE_RECEIVE_WAIT_S,
    ) -> None:
        self.declaration = declaration
        self._provisioned = provisioned
        self._handler = handler
        self._sqs = sqs
        self._function_name = function_name
        self._idle_wait_s = idle_wait_s
        self._stopping = threading.Event()
        # Guards the fields below; notified whenever they change, to wake idle threads.
        self._changed = threading.Condition()
        self._started = False
        self._enabled = True
        self._concurrency = declaration.max_concurrency
        # Threads in a receive, and how many may be at once (the listener, plus one per full receive).
        self._receiving = 0
        self._receivers = 1
        # Threads holding messages (gathering, invoking or giving back a batch): what ``join`` waits for.
        self._handling = 0
        self._threads: list[threading.Thread] = []
        self.stats = PollerStats()

    @property
    def paused(self) -> bool:
        """The poller knows its mapping is disabled: nothing more is invoked until it is enabled again.

        A long poll still waiting gives back whatever it returns; batches invoked before the pause
        may still be running (``stats.in_flight``).
        """
        with self._changed:
            return not self._enabled

    @property
    def concurrency(self) -> int:
        """How many threads may receive at once: the mapping's current maximum concurrency."""
        with self._changed:
            return self._concurrency

    def apply(self, state: EventSourceState) -> None:
        """Take the mapping's current state: enabled or not, and its maximum concurrency."""
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
            self._receivers = min(self._receivers, concurrency)
            if self._started:
                self._add_threads()
            self._changed.notify_all()

    def start(self) -> None:
        """Start polling, in the state applied so far (apply the first one before, so that a paused queue
        never receives even briefly)."""
        with self._changed:
            self._started = True
            self._add_threads()

    def stop(self) -> None:
        """Stop receiving; batches already invoked run to completion, and a receive still waiting gives back
        what it gets."""
        with self._changed:
            self._stopping.set()
            self._changed.notify_all()

    def join(self, deadline: float) -> bool:
        """After ``stop``, wait until ``deadline`` (monotonic) for the batches in hand to be invoked or given
        back; True if all were. A receive still waiting with nothing in hand is not waited for: it gives
        back whatever it gets."""
        with self._changed:
            return self._changed.wait_for(lambda: self._handling == 0, max(0.0, deadline - time.monotonic()))

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

    def _await_turn(self, index: int) -> int | None:
        """Idle until thread ``index`` may receive, count it as receiving, and return its wait: the long
        one if no other thread is receiving (it listens), else a short poll. None once stopping."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._stopping.is_set() or (self._may_receive(index) and self._receiving < self._receivers)
            )
            if self._stopping.is_set():
                return None
            listening = self._receiving == 0
            self._receiving += 1
            return self._idle_wait_s if listening else SCALED_RECEIVE_WAIT_S

    def _poll(self, index: int) -> None:
        while (wait_s := self._await_turn(index)) is not None:
            batch: list[dict[str, Any]] = []
            failed = False
            try:
                self._gather(index, wait_s, batch)
            except Exception:  # a poller survives a failed call, as Lambda's pollers do
                log.exception("receiving from queue %s failed; retrying", self.declaration.name)
                failed = True
            invoke = self._end_receive() and not failed
            if batch:
                self._handle(batch, invoke=invoke)
            if failed:
                self._stopping.wait(RETRY_WAIT_S)

    def _end_receive(self) -> bool:
        """Count the thread out of receiving: True if what it received may be invoked (enabled, not stopping)."""
        with self._changed:
            self._receiving -= 1
            self._changed.notify_all()
            return self._enabled and not self._stopping.is_set()

    def _handle(self, batch: list[dict[str, Any]], *, invoke: bool) -> None:
        try:
            if invoke:
                self._invoke(batch)
            else:
                self._give_back(batch)
        except Exception:  # a failed delete or give-back: those messages return after their visibility timeout
            log.exception("handling a batch of queue %s failed", self.declaration.name)
        finally:
            with self._changed:
                self._handling -= 1
                self._changed.notify_all()

    def _gather(self, index: int, wait_s: int, batch: list[dict[str, Any]]) -> None:
        """Receive into ``batch`` up to batch_size messages, waiting at most the batching window to fill it.

        The window starts now, as Lambda's starts when the previous invocation ends. The first receive
        waits ``wait_s``; if it gets nothing, gathering ends. It also ends early if thread ``index``
        may no longer receive.
        """
        deadline = time.monotonic() + self.declaration.batching_window.total_seconds()
        while len(batch) < self.declaration.batch_size and self._may_receive(index):
            if batch:  # whole seconds, rounded up: a wait of 0 in the window's last second would spin
                wait_s = max(0, min(GATHER_RECEIVE_WAIT_S, math.ceil(deadline - time.monotonic())))
            asked = min(limits.SQS_MAX_RECEIVE_MESSAGES, self.declaration.batch_size - len(batch))
            received = self._sqs.receive_message(
                QueueUrl=self._provisioned.url,
                MaxNumberOfMessages=asked,
                WaitTimeSeconds=wait_s,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            batch += received
            self._received(full=len(received) == asked, first=bool(received) and len(batch) == len(received))
            if not batch or time.monotonic() >= deadline:
                return

    def _received(self, *, full: bool, first: bool) -> None:
        """After a receive: one more receiver if it got all it asked for (more may be waiting), else back to
        the listener alone (the queue is drained); and, once it brought the ``first`` messages of a batch,
        the thread counts as handling them, so that ``join`` waits for them."""
        with self._changed:
            self._receivers = min(self._concurrency, self._receivers + 1) if full else 1
            self._handling += first
            self._changed.notify_all()

    def _give_back(self, batch: list[dict[str, Any]]) -> None:
        """Make a batch received after a pause or a stop visible again at once, not after its visibility timeout."""
        for entries in _entries(batch, VisibilityTimeout=0):
            response = self._sqs.change_message_visibility_batch(QueueUrl=self._provisioned.url, Entries=entries)
            for failure in response.get("Failed", []):
                log.warning(
                    "queue %s: could not give back a message (%s); it returns after its visibility timeout",
                    self.declaration.name,
                    failure.get("Code"),
                )
        with self.stats.lock:
            self.stats.returned += len(batch)
        log.info(
            "queue %s: gave back %d messages received while pausing or stopping", self.declaration.name, len(batch)
        )

    def _invoke(self, batch: list[dict[str, Any]]) -> None:
        with self.stats.lock:
            self.stats.in_flight += 1
        try:
            deleted, whole_batch_failed = run_batch(
                batch,
                handler=self._handler,
                declaration=self.declaration,
                provisioned=self._provisioned,
                sqs=self._sqs,
                function_name=self._function_name,
            )
        finally:
            with self.stats.lock:
                self.stats.in_flight -= 1
        with self.stats.lock:
            self.stats.invocations += 1
            self.stats.records += len(batch)
            self.stats.deleted += deleted
            self.stats.failed_batches += whole_batch_failed


def run_batch(
    batch: list[dict[str, Any]],
    *,
    handler: Handler,
    declaration: Queue,
    provisioned: ProvisionedQueue,
    sqs: Any,
    function_name: str,
) -> tuple[int, bool]:
    """Invoke ``handler`` on the received ``batch`` and delete what succeeded: (deleted, whole batch failed).

    What the mapping does with one batch, apart from any thread: conveyor.testing drains queues through it too.
    """
    timeout = declaration.function_timeout.total_seconds()
    context = LocalLambdaContext(
        function_name=function_name, memory_limit_in_mb=declaration.memory_mb, timeout_s=timeout
    )
    batch_ids = {message["MessageId"] for message in batch}
    event = {"Records": [to_lambda_record(message, queue_arn=provisioned.arn) for message in batch]}
    started = time.monotonic()
    try:
        failed = failed_ids(handler(event, context.as_lambda_context()), batch_ids)
    except Exception:
        log.exception("invocation of %s failed; the whole batch returns to the queue", function_name)
        failed = batch_ids
    if time.monotonic() - started > timeout:
        log.error("invocation of %s ran past its %ss timeout; the whole batch returns", function_name, timeout)
        failed = batch_ids
    done = [message for message in batch if message["MessageId"] not in failed]
    for entries in _entries(done):
        sqs.delete_message_batch(QueueUrl=provisioned.url, Entries=entries)
    return len(done), failed == batch_ids


class StateReader(Periodic):
    """Reads every queue's mapping state in one request every ``period_s``, and hands each poller its own.

    One read for all queues every few seconds, not one per queue per second: the local runtime's
    idle cost stays one request per period however many queues it runs. A read that fails keeps
    every poller's last known state: consumption must not stop because the control table is
    unreachable, as Lambda's pollers do not. ``period_s`` is a parameter for tests.
    """

    def __init__(
        self, read: ReadStates, pollers: Mapping[str, QueuePoller], *, period_s: float = CONTROL_POLL_S
    ) -> None:
        self._read = read
        self._pollers = pollers
        super().__init__(self.refresh, period_s=period_s, name="event-source-states")

    def start(self) -> None:
        """Read once now (start the pollers after, so that a paused queue never receives), then every period."""
        self.refresh()
        super().start()

    def refresh(self) -> None:
        """Read every state once and apply each to its queue's poller; on failure, keep the last ones."""
        try:
            states = self._read()
            for name, poller in self._pollers.items():
                poller.apply(states[name])
        except Exception:  # a control read failing must not stop consumption, as in Lambda
            log.exception(
                "reading the event source states of queues %s failed; keeping the last ones", list(self._pollers)
            )
