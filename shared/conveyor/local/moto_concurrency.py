"""Concurrency as AWS gives it, for moto: DynamoDB's atomicity, and SQS receives that survive each other.

DynamoDB: moto applies an ``UpdateItem`` on a new key in two steps (it stores the bare key, then the
update), so a concurrent scan can read an item AWS never shows, and two conditional writes
racing on one key can both pass their condition. AWS applies each write, with its condition,
atomically. Here every DynamoDB and DynamoDB Streams operation of moto's request handlers runs
behind one lock, from reading the request to the result's snapshot (moto copies items into
plain dicts there); the slow part, serialising the response, stays outside.

SQS: moto's receive walks a queue's messages and in-flight set in Python while other threads'
receives and deletes change them. A receive then fails after it may have taken messages, which
stay hidden for a whole visibility timeout and count a receive: "Set changed size during
iteration" (3 of 26 demo runs), and, when two receives both move a message past its
maxReceiveCount to the DLQ, "list.remove(x): x not in list" (a chaos run). AWS does each
operation atomically. Here every SQS operation of moto's request handlers runs behind one
lock too, and a long-polling receive waits for messages with the lock released (a condition on
it, notified whenever a message is added, and timed to when the next hidden one reappears), so
waiting never blocks the other requests.

Two gaps beside concurrency are closed here too, because every embedded AWS installs this module: moto's
SendMessageBatch drops each entry's ``MessageSystemAttributes``, so a batched job (the SDK's, the outbox
relay's) would lose the producer's ``AWSTraceHeader`` that AWS keeps; it is put back on the stored messages.
And moto's GetMetricStatistics sums every series whose dimensions *include* the requested ones, where
AWS reads the one series with exactly those dimensions ("you must specify the same dimensions that
were used when the metrics were created",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricStatistics.html): a
per-shard series written beside a per-schedule one would be counted twice. Here it reads that series only.

Process-wide, so it holds for the embedded server's threads and for in-process ``mock_aws``.
"""

import functools
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from botocore.session import get_session

MILLISECONDS = 1000
# How long after a message's visible_at a waiting receive wakes: moto hands it out once past it.
WAKE_AFTER_DUE_S = 0.002

_lock = threading.RLock()
# SQS's own lock, as a condition: long polls wait on it (which releases it) for a message to arrive.
_sqs_changed = threading.Condition(threading.RLock())
_installed = False
# The connection of the request each server thread is serving (set by the gateway, ``serving``).
_request = threading.local()


def _under(lock: AbstractContextManager[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator running an operation while holding ``lock``."""

    def locked(operation: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(operation)
        def run(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return operation(*args, **kwargs)

        return run

    return locked


class ClientGoneError(Exception):
    """The client of a long poll has closed its connection: the receive ends without taking a message."""


@contextmanager
def serving(connection: socket.socket | None) -> Iterator[None]:
    """Mark the requests this thread handles meanwhile as coming over ``connection`` (None: unknown)."""
    _request.connection = connection
    try:
        yield
    finally:
        _request.connection = None


def _client_gone() -> bool:
    """Whether the connection of the request this thread serves has been closed by its client."""
    connection: socket.socket | None = getattr(_request, "connection", None)
    if connection is None:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:  # nothing to read, and still open
        return False
    except OSError:
        return True


def _wait_for_messages(queue: Any, timeout: int) -> None:
    """A long poll's wait: the SQS lock is released until a message is added, one becomes visible
    (its visibility timeout or delay ends), or ``timeout`` passes.

    Always a wait, never a check: a visible message the receive cannot take (its FIFO group is in
    flight) would otherwise keep it spinning with the lock held, and no delete could free the group.

    A long poll whose client has gone ends instead (moto waits only while it holds no message). In
    the local runtime the pollers die with the worker process they share, which Lambda's pollers
    never do; left to run, a dead worker's 20 s poll would take a message and hide it for its
    visibility timeout.
    """
    with _sqs_changed:
        _sqs_changed.wait(min(timeout, until_next_visible(queue)))
    if _client_gone():  # after the wait: what woke it may be the message it must not take
        raise ClientGoneError("the client of this long poll closed its connection")


def until_next_visible(queue: Any) -> float:
    """Seconds until the next hidden or delayed message of ``queue`` becomes receivable (inf if none).

    moto checks for such messages once a second; waking when the next one is due finds a retry
    (whose backoff is its visibility) as soon as SQS would hand it out. conveyor.testing's drain
    moves its clock by it.
    """
    now_ms = time.time() * MILLISECONDS
    due = [
        ready for message in list(queue._messages) if (ready := max(message.visible_at, message.delayed_until)) > now_ms
    ]
    return (min(due) - now_ms) / MILLISECONDS + WAKE_AFTER_DUE_S if due else math.inf


def _answering_no_one(receive_message: Callable[..., Any]) -> Callable[..., Any]:
    """A receive abandoned by its client answers nothing, rather than a 500 and a logged traceback."""

    @functools.wraps(receive_message)
    def receive(*args: Any, **kwargs: Any) -> Any:
        try:
            return receive_message(*args, **kwargs)
        except ClientGoneError:
            return ""

    return receive


def _notifying(add_message: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    @functools.wraps(add_message)
    def add(queue: Any, message: Any) -> None:
        with _sqs_changed:
            add_message(queue, message)
            _sqs_changed.notify_all()

    return add


def _keeping_trace_headers(send_message_batch: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send_message_batch)
    def send(backend: Any, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
        messages, failed = send_message_batch(backend, queue_name, entries)
        by_id = {entry["Id"]: entry for entry in entries.values()}
        for message in messages:
            message.system_attributes = by_id[message.user_id].get("MessageSystemAttributes")
        return messages, failed

    return send


class _ExactSeries:
    """A CloudWatch backend as GetMetricStatistics sees it: only the datapoints with exactly ``dimensions``."""

    def __init__(self, backend: Any, dimensions: list[tuple[str, str]]) -> None:
        self._backend = backend
        self._dimensions = dimensions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def get_all_metrics(self) -> list[Any]:
        return [
            datum
            for datum in self._backend.get_all_metrics()
            if sorted((dimension.name, dimension.value) for dimension in datum.dimensions) == self._dimensions
        ]


def _exact_dimensions(get_metric_statistics: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(get_metric_statistics)
    def statistics(backend: Any, *args: Any, **kwargs: Any) -> Any:
        dimensions = kwargs.get("dimensions", args[6] if len(args) > 6 else None) or []
        wanted = sorted((dimension["Name"], dimension["Value"]) for dimension in dimensions)
        return get_metric_statistics(_ExactSeries(backend, wanted), *args, **kwargs)

    return statistics


def install() -> None:
    """Serialise moto's DynamoDB and SQS operations (long polls wait outside the lock); idempotent.

    moto is imported here: it is a local-only dependency.
    """
    global _installed
    with _lock:
        if _installed:
            return
        from moto.cloudwatch.models import CloudWatchBackend
        from moto.core.utils import camelcase_to_underscores
        from moto.dynamodb.responses import DynamoHandler
        from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
        from moto.sqs.models import Queue, SQSBackend
        from moto.sqs.responses import SQSResponse

        Queue.wait_for_messages = _wait_for_messages  # type: ignore[method-assign,assignment]
        Queue.add_message = _notifying(Queue.add_message)  # type: ignore[method-assign,assignment]
        SQSBackend.send_message_batch = _keeping_trace_headers(SQSBackend.send_message_batch)  # type: ignore[method-assign]
        CloudWatchBackend.get_metric_statistics = _exact_dimensions(CloudWatchBackend.get_metric_statistics)  # type: ignore[method-assign]

        session = get_session()
        services = (
            (DynamoHandler, "dynamodb", _under(_lock)),
            (DynamoDBStreamsHandler, "dynamodbstreams", _under(_lock)),
            (SQSResponse, "sqs", _under(_sqs_changed)),
        )
        for handler, service, lock in services:
            for operation in session.get_service_model(service).operation_names:
                name = camelcase_to_underscores(operation)
                if callable(vars(handler).get(name)):
                    setattr(handler, name, lock(getattr(handler, name)))
        SQSResponse.receive_message = _answering_no_one(SQSResponse.receive_message)  # type: ignore[method-assign]
        _installed = True
