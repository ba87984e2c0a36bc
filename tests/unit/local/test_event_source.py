"""The event source emulator applies partial batch responses, scales its receivers with the backlog,
and obeys pause, resume and concurrency changes, as Lambda does, without stranding a message."""

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.contract.declarations import Queue
from conveyor.contract.topology import Topology
from conveyor.local.embedded import EmbeddedAws, free_port
from conveyor.local.event_source import (
    Handler,
    QueuePoller,
    ReadStates,
    StateReader,
    failed_ids,
    to_lambda_record,
)
from conveyor.local.provision import provision
from conveyor.ops.event_sources import EventSourceState, LocalEventSources
from tests.aws import Aws, moto_aws

BATCH = {"m-1", "m-2", "m-3"}
# Short waits, so that no test waits out Lambda's 20-second long poll or a 5-second state period.
IDLE_WAIT_S = 1
# Long enough to still be waiting while a test pauses or stops the poller under it.
LATE_POLL_WAIT_S = 10
STATE_PERIOD_S = 0.2


@pytest.mark.parametrize(
    ("response", "kept"),
    [
        (None, set()),
        ({}, set()),
        ({"batchItemFailures": []}, set()),
        ({"batchItemFailures": [{"itemIdentifier": "m-2"}]}, {"m-2"}),
        ({"batchItemFailures": [{"itemIdentifier": "m-1"}, {"itemIdentifier": "m-3"}]}, {"m-1", "m-3"}),
        # An identifier that is empty, missing or not in the batch fails the whole batch.
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, BATCH),
        ({"batchItemFailures": [{"itemIdentifier": None}]}, BATCH),
        ({"batchItemFailures": [{}]}, BATCH),
        ({"batchItemFailures": [{"itemIdentifier": "m-9"}]}, BATCH),
        # A response Lambda cannot read fails the whole batch too.
        ("ok", BATCH),
        ({"batchItemFailures": "m-1"}, BATCH),
    ],
)
def test_partial_batch_response_decides_what_stays_on_the_queue(response: object, kept: set[str]) -> None:
    assert failed_ids(response, BATCH) == kept


def test_records_have_every_attribute_lambda_sends() -> None:
    message = {
        "MessageId": "m-1",
        "ReceiptHandle": "rh",
        "Body": "{}",
        "MD5OfBody": "99914b932bd37a50b983c5e7c90ae93b",
        "Attributes": {
            "ApproximateReceiveCount": "2",
            "SentTimestamp": "1700000000000",
            "SenderId": "AIDA",
            "ApproximateFirstReceiveTimestamp": "1700000000100",
        },
        "MessageAttributes": {"conveyor.prior_attempts": {"DataType": "Number", "StringValue": "1"}},
    }
    record = to_lambda_record(message, queue_arn="arn:aws:sqs:eu-west-1:123456789012:conveyor-default")
    # The keys of a record in AWS's own sample event (Powertools' tests/events/sqsEvent.json).
    assert set(record) == {
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    }
    assert record["attributes"]["ApproximateReceiveCount"] == "2"
    assert record["awsRegion"] == "eu-west-1"
    assert record["eventSource"] == "aws:sqs"
    assert record["messageAttributes"]["conveyor.prior_attempts"]["stringValue"] == "1"
    assert record["messageAttributes"]["conveyor.prior_attempts"]["dataType"] == "Number"


class Recorder:
    """A stand-in Lambda function: records each invocation and answers as told."""

    def __init__(self, answer: Callable[[list[str]], object] = lambda ids: None, pause_s: float = 0.0) -> None:
        self.batches: list[list[str]] = []
        self.remaining_ms: list[int] = []
        self._answer = answer
        self._pause_s = pause_s
        self._running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: LambdaContext) -> object:
        ids = [record["messageId"] for record in event["Records"]]
        with self._lock:
            self.batches.append(ids)
            self.remaining_ms.append(context.get_remaining_time_in_millis())
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        time.sleep(self._pause_s)
        with self._lock:
            self._running -= 1
        return self._answer(ids)


class Gate:
    """A stand-in function that holds every invocation until the next ``release``."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._round = 0
        self._open = False
        # Invocations held since the last release.
        self.held = 0

    def __call__(self, event: dict[str, Any], context: LambdaContext) -> object:
        with self._changed:
            entered = self._round
            self.held += 1
            self._changed.wait_for(lambda: self._open or self._round > entered)
        return None

    def release(self) -> int:
        """Let the held invocations return; later ones are held again. Returns how many were held."""
        with self._changed:
            released, self.held = self.held, 0
            self._round += 1
            self._changed.notify_all()
        return released

    def open(self) -> None:
        """Hold nothing any more, so that the poller can drain."""
        with self._changed:
            self._open = True
            self._changed.notify_all()


class StateReads:
    """The reader's read of every state, counting its reads, and failing them while ``failing`` is set."""

    def __init__(self, read: ReadStates) -> None:
        self._read = read
        self._lock = threading.Lock()
        self.reads = 0
        self.failures = 0
        self.failing = False

    def __call__(self) -> Mapping[str, EventSourceState]:
        with self._lock:
            self.reads += 1
            failing = self.failing
            if failing:
                self.failures += 1
        if failing:
            raise ConnectionError("the event sources table is unreachable")
        return self._read()


class Receives:
    """The endpoint's SQS client, recording each receive's wait and how many were in flight at once."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs
        self._lock = threading.Lock()
        self.waits: list[int] = []
        self.in_flight = 0
        self.most_at_once = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def receive_message(self, **request: Any) -> Any:
        with self._lock:
            self.waits.append(request["WaitTimeSeconds"])
            self.in_flight += 1
            self.most_at_once = max(self.most_at_once, self.in_flight)
        try:
            return self._sqs.receive_message(**request)
        finally:
            with self._lock:
                self.in_flight -= 1

    def started(self) -> int:
        with self._lock:
            return len(self.waits)

    def watch_from_now(self) -> int:
        """Forget the most in flight so far (counting those in flight now); returns how many have started."""
        with self._lock:
            self.most_at_once = self.in_flight
            return len(self.waits)


@dataclass
class Polling:
    sqs: Any
    url: str
    poller: QueuePoller
    event_sources: LocalEventSources
    reads: StateReads
    states: StateReader
    receives: Receives

    def send(self, count: int) -> None:
        for start in range(0, count, 10):
            self.sqs.send_message_batch(
                QueueUrl=self.url,
                Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(start, min(count, start + 10))],
            )

    def counts(self) -> tuple[int, int]:
        """(visible, in flight) messages in the queue."""
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["All"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def wait_for_reads(self, count: int) -> None:
        """Wait until the reader has read the state ``count`` more times: the poller has had the time to act on it."""
        target = self.reads.reads + count
        _wait_for(lambda: self.reads.reads >= target)

    def wait_for_receives(self, count: int) -> None:
        """Wait until ``count`` more receives have started."""
        target = self.receives.started() + count
        _wait_for(lambda: self.receives.started() >= target)

    def wait_for_a_fresh_long_poll(self) -> None:
        """Wait until a long poll has just started: it will still be waiting for a while."""
        self.wait_for_receives(1)
        assert self.receives.in_flight == 1
        assert self.receives.waits[-1] == LATE_POLL_WAIT_S


def _topology(**queue_options: Any) -> Topology:
    return Topology(queues=(Queue("q", age_objective=timedelta(minutes=1), **queue_options),))


@contextmanager
def polling(
    topology: Topology, handler: Handler, messages: int, *, paused: bool = False, idle_wait_s: int = IDLE_WAIT_S
) -> Iterator[Polling]:
    """Poll a queue on moto in server mode, as the local runtime does (in-process moto may hand
    one message to two concurrent receivers, which real SQS and moto's server do not), with its
    mapping's state in the provisioned table (``paused`` before the poller starts)."""
    server = EmbeddedAws(free_port())
    server.start()
    try:
        sqs = boto3.client("sqs", endpoint_url=server.endpoint_url)
        dynamodb = boto3.client("dynamodb", endpoint_url=server.endpoint_url)
        provisioned = provision(topology, sqs=sqs, dynamodb=dynamodb)
        queue = provisioned.queues["q"]
        event_sources = LocalEventSources(dynamodb, provisioned.event_sources_table)
        if paused:
            event_sources.pause("q", resume_at=None)
        receives = Receives(sqs)
        poller = QueuePoller(
            declaration=topology.queue("q"),
            provisioned=queue,
            handler=handler,
            sqs=receives,
            function_name="q-worker",
            idle_wait_s=idle_wait_s,
        )
        reads = StateReads(partial(event_sources.states, ["q"]))
        states = StateReader(reads, {"q": poller}, period_s=STATE_PERIOD_S)
        polled = Polling(
            sqs=sqs,
            url=queue.url,
            poller=poller,
            event_sources=event_sources,
            reads=reads,
            states=states,
            receives=receives,
        )
        polled.send(messages)
        states.start()
        poller.start()
        try:
            yield polled
        finally:
            states.stop()
            poller.stop()
            deadline = time.monotonic() + 5
            poller.join(deadline)
            states.join(deadline)
            for queue_url in sqs.list_queues().get("QueueUrls", []):
                sqs.delete_queue(QueueUrl=queue_url)
            for table in dynamodb.list_tables()["TableNames"]:
                dynamodb.delete_table(TableName=table)
    finally:
        server.stop()


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def test_batches_fill_up_to_batch_size_within_the_window() -> None:
    handler = Recorder()
    topology = _topology(batch_size=25, batching_window=timedelta(seconds=2), max_concurrency=2)
    with polling(topology, handler, messages=25) as polled:
        _wait_for(lambda: polled.poller.stats.deleted == 25)
        assert polled.counts() == (0, 0)
    sizes = [len(batch) for batch in handler.batches]
    # Two pollers share 25 messages; one receive returns at most 10, so a batch above 10 was gathered.
    assert sum(sizes) == 25
    assert 10 < max(sizes) <= 25


def test_gathering_a_batch_waits_in_whole_seconds_to_the_window_end_and_never_spins() -> None:
    """A receive in the window's last second waits (rounded up): a wait of 0 there made bulk spin on receives."""
    handler = Recorder()
    topology = _topology(batch_size=25, batching_window=timedelta(seconds=2), max_concurrency=2)
    with polling(topology, handler, messages=5) as polled:
        _wait_for(lambda: polled.poller.stats.deleted == 5)
    assert [len(batch) for batch in handler.batches] == [5]
    assert 0 not in polled.receives.waits  # no short poll: the first receive got less than it asked for
    assert len(polled.receives.waits) <= 4  # the listener's, then at most one a second of the 2 s window, and again


def test_only_failed_records_stay_on_the_queue() -> None:
    handler = Recorder(answer=lambda ids: {"batchItemFailures": [{"itemIdentifier": ids[0]}]})
    with polling(_topology(batch_size=5, max_concurrency=2), handler, messages=5) as polled:
        # Two pollers may share the five messages: each invocation fails its first record only.
        _wait_for(lambda: polled.poller.stats.records == 5)
        failed = polled.poller.stats.invocations
        assert polled.poller.stats.deleted == 5 - failed
        assert polled.counts() == (0, failed)


def test_an_exception_returns_the_whole_batch() -> None:
    def explode(ids: list[str]) -> object:
        raise RuntimeError("boom")

    with polling(_topology(batch_size=5, max_concurrency=2), Recorder(answer=explode), messages=5) as polled:
        _wait_for(lambda: polled.poller.stats.invocations >= 1)
        assert polled.poller.stats.deleted == 0
        assert polled.counts() == (0, 5)


def test_an_invocation_past_its_timeout_returns_the_whole_batch() -> None:
    handler = Recorder(pause_s=1.2)
    topology = _topology(batch_size=3, max_concurrency=2, function_timeout=timedelta(seconds=1))
    with polling(topology, handler, messages=3) as polled:
        _wait_for(lambda: polled.poller.stats.invocations >= 1)
        assert polled.poller.stats.deleted == 0
        assert polled.counts() == (0, 3)
    assert 0 < handler.remaining_ms[0] <= 1000


def test_concurrency_never_exceeds_the_declared_maximum() -> None:
    handler = Recorder(pause_s=0.2)
    with polling(_topology(batch_size=1, max_concurrency=3), handler, messages=12) as polled:
        _wait_for(lambda: polled.poller.stats.deleted >= 12)
    assert 1 <= handler.most_at_once <= 3


def test_an_empty_queue_has_one_long_poll_at_a_time() -> None:
    with polling(_topology(max_concurrency=5), Recorder(), messages=0) as polled:
        polled.wait_for_receives(3)
        assert polled.receives.most_at_once == 1
        assert set(polled.receives.waits) == {IDLE_WAIT_S}


def test_a_backlog_scales_receivers_up_to_the_maximum_and_a_drained_queue_back_to_one() -> None:
    gate = Gate()
    with polling(_topology(batch_size=1, max_concurrency=4), gate, messages=20) as polled:
        try:
            # Each receive came back full, so each let one more thread receive: all four run at once.
            _wait_for(lambda: gate.held == 4)
        finally:
            gate.open()
        _wait_for(lambda: polled.poller.stats.deleted == 20)
        # Drained: once the receives in flight when it drained are done, one long poll at a time again.
        _wait_for(lambda: polled.receives.in_flight == 1 and polled.receives.waits[-1] == IDLE_WAIT_S)
        polled.receives.watch_from_now()
        polled.wait_for_receives(2)
        assert polled.receives.most_at_once == 1


def test_a_long_poll_that_returns_after_a_pause_gives_its_messages_back_at_once() -> None:
    handler = Recorder()
    with polling(_topology(max_concurrency=2), handler, messages=0, idle_wait_s=LATE_POLL_WAIT_S) as polled:
        polled.wait_for_a_fresh_long_poll()
        polled.event_sources.pause("q", resume_at=None)
        polled.states.refresh()
        assert polled.poller.paused
        polled.send(1)  # the long poll, sent before the pause, returns it
        _wait_for(lambda: polled.poller.stats.returned == 1)
        # Visible again at once, not after the visibility timeout, and never invoked.
        assert polled.counts() == (1, 0)
        assert handler.batches == []
        [message] = polled.sqs.receive_message(QueueUrl=polled.url, MessageSystemAttributeNames=["All"])["Messages"]
        assert message["Attributes"]["ApproximateReceiveCount"] == "2"


def test_a_stopped_poller_waits_for_no_receive_and_gives_back_what_a_late_one_returns() -> None:
    handler = Recorder()
    with polling(_topology(max_concurrency=2), handler, messages=0, idle_wait_s=LATE_POLL_WAIT_S) as polled:
        polled.wait_for_a_fresh_long_poll()
        polled.poller.stop()
        assert polled.poller.join(time.monotonic())  # nothing being invoked: the long poll is not waited for
        polled.send(1)
        _wait_for(lambda: polled.poller.stats.returned == 1)
        assert polled.counts() == (1, 0)
        assert handler.batches == []


def test_pausing_stops_consumption_and_resuming_restarts_it() -> None:
    handler = Recorder()
    with polling(_topology(batch_size=1, max_concurrency=2), handler, messages=1) as polled:
        _wait_for(lambda: polled.poller.stats.deleted == 1)
        polled.event_sources.pause("q", resume_at=None)
        _wait_for(lambda: polled.poller.paused)
        polled.send(5)
        polled.wait_for_reads(2)
        assert len(handler.batches) == 1
        # A long poll in flight as the pause came may have taken some: it gave them back.
        _wait_for(lambda: polled.counts() == (5, 0))

        polled.event_sources.resume("q")
        _wait_for(lambda: polled.poller.stats.deleted == 6)
        assert not polled.poller.paused
        assert polled.counts() == (0, 0)


def test_a_queue_paused_before_the_pollers_start_receives_nothing_until_resumed() -> None:
    handler = Recorder()
    with polling(_topology(batch_size=1, max_concurrency=2), handler, messages=3, paused=True) as polled:
        polled.wait_for_reads(2)
        assert polled.poller.paused
        assert polled.receives.started() == 0
        assert handler.batches == []
        assert polled.counts() == (3, 0)

        polled.event_sources.resume("q")
        _wait_for(lambda: polled.poller.stats.deleted == 3)


def test_raising_and_lowering_max_concurrency_changes_how_many_batches_run_at_once() -> None:
    gate = Gate()
    with polling(_topology(batch_size=1, max_concurrency=2), gate, messages=20) as polled:
        try:
            _wait_for(lambda: gate.held == 2)
            polled.event_sources.set_max_concurrency("q", 4)
            _wait_for(lambda: gate.held == 4)
            assert polled.poller.concurrency == 4

            polled.event_sources.set_max_concurrency("q", 2)
            _wait_for(lambda: polled.poller.concurrency == 2)
            assert gate.release() == 4

            def two_held_after(invocations: int) -> bool:
                return polled.poller.stats.invocations == invocations and gate.held == 2

            # Each round, the two threads still within the concurrency take one batch each; the
            # two surplus ones finished their batch and receive no more.
            for invocations in (4, 6):
                _wait_for(partial(two_held_after, invocations))
                assert gate.release() == 2
        finally:
            gate.open()


def test_a_failing_state_read_keeps_the_last_known_state(caplog: pytest.LogCaptureFixture) -> None:
    handler = Recorder()
    with polling(_topology(batch_size=1, max_concurrency=2), handler, messages=0) as polled:
        polled.reads.failing = True
        _wait_for(lambda: polled.reads.failures >= 2)
        polled.event_sources.pause("q", resume_at=None)  # not seen while the reads fail
        polled.send(3)
        _wait_for(lambda: polled.poller.stats.deleted == 3)

        polled.reads.failing = False
        _wait_for(lambda: polled.poller.paused)  # the reader survived its failures
    logged = [record for record in caplog.records if "reading the event source states" in record.getMessage()]
    assert len(logged) == polled.reads.failures
    assert all(record.levelno == logging.ERROR for record in logged)


class Requests:
    """Every DynamoDB request a client makes, by operation."""

    def __init__(self, client: Any) -> None:
        self.by_operation: Counter[str] = Counter()
        client.meta.events.register("before-call.dynamodb", self._count)

    def _count(self, model: Any, **kwargs: Any) -> None:
        self.by_operation[model.name] += 1


THREE_QUEUES = Topology(queues=tuple(Queue(name, age_objective=timedelta(minutes=1)) for name in ("a", "b", "c")))


@pytest.fixture
def three_queues() -> Iterator[Aws]:
    yield from moto_aws(THREE_QUEUES)


def test_the_state_reader_reads_every_queue_in_one_request_per_period(three_queues: Aws) -> None:
    names = [queue.name for queue in THREE_QUEUES.queues]
    requests = Requests(three_queues.dynamodb)
    event_sources = LocalEventSources(three_queues.dynamodb, three_queues.provisioned.event_sources_table)
    pollers = {
        name: QueuePoller(
            declaration=THREE_QUEUES.queue(name),
            provisioned=three_queues.provisioned.queues[name],
            handler=Recorder(),
            sqs=three_queues.sqs,
            function_name=f"{name}-worker",
        )
        for name in names
    }
    reads = StateReads(partial(event_sources.states, names))
    reader = StateReader(reads, pollers, period_s=0.01)
    event_sources.pause("b", resume_at=None)
    event_sources.set_max_concurrency("c", 7)
    requests.by_operation.clear()
    reader.start()
    _wait_for(lambda: reads.reads >= 5)
    reader.stop()
    assert reader.join(time.monotonic() + 5)
    # Each period's read is one request, whatever the number of queues, and reaches every poller.
    assert requests.by_operation == {"BatchGetItem": reads.reads}
    assert [pollers[name].paused for name in names] == [False, True, False]
    declared = THREE_QUEUES.queue("a").max_concurrency
    assert [pollers[name].concurrency for name in names] == [declared, declared, 7]
