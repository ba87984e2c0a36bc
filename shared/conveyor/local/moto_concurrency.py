"""Concurrency as AWS gives it, for moto: DynamoDB's atomicity, and SQS receives that survive each other.

DynamoDB: moto applies an ``UpdateItem`` on a new key in two steps (it stores the bare key, then the
update), so a concurrent scan can read an item AWS never shows, and two conditional writes
racing on one key can both pass their condition. AWS applies each write, with its condition,
atomically. Here every DynamoDB and DynamoDB Streams operation of moto's request handlers runs
behind one lock, from reading the request to the result's snapshot (moto copies items into
plain dicts there); the slow part, serialising the response, stays outside.

SQS: moto lists a queue's in-flight message groups by iterating its in-flight set in Python,
while other threads' receives and deletes change that set; the receive then fails with "Set
changed size during iteration" after it may have taken messages, which stay hidden for a whole
visibility timeout (seen in 3 of 26 demo runs, a minute's stall each). The groups are read from
a snapshot taken in one step instead. Receives themselves cannot take a lock: they long-poll
inside moto.

Process-wide, so it holds for the embedded server's threads and for in-process ``mock_aws``.
"""

import functools
import threading
from collections.abc import Callable
from typing import Any

from botocore.session import get_session

_lock = threading.RLock()
_installed = False


def _locked(operation: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(operation)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            return operation(*args, **kwargs)

    return run


def _pending_message_groups(queue: Any) -> set[str]:
    """The groups of a queue's in-flight messages, from a copy of the set (made in one step, under the GIL)."""
    return {message.group_id for message in list(queue.pending_messages) if message.group_id is not None}


def install() -> None:
    """Serialise moto's DynamoDB operations, snapshot SQS's in-flight groups; idempotent.

    moto is imported here: it is a local-only dependency.
    """
    global _installed
    with _lock:
        if _installed:
            return
        from moto.core.utils import camelcase_to_underscores
        from moto.dynamodb.responses import DynamoHandler
        from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
        from moto.sqs.models import Queue

        Queue.pending_message_groups = property(_pending_message_groups)  # type: ignore[method-assign,assignment]

        session = get_session()
        for handler, service in ((DynamoHandler, "dynamodb"), (DynamoDBStreamsHandler, "dynamodbstreams")):
            for operation in session.get_service_model(service).operation_names:
                name = camelcase_to_underscores(operation)
                if callable(vars(handler).get(name)):
                    setattr(handler, name, _locked(getattr(handler, name)))
        _installed = True
