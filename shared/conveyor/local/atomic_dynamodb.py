"""DynamoDB's atomicity for moto: each request applied whole before any other request sees the table.

moto applies an ``UpdateItem`` on a new key in two steps (it stores the bare key, then the
update), so a concurrent scan can read an item AWS never shows, and two conditional writes
racing on one key can both pass their condition. AWS applies each write, with its condition,
atomically. Here every DynamoDB and DynamoDB Streams operation of moto's request handlers runs
behind one lock, from reading the request to the result's snapshot (moto copies items into
plain dicts there); the slow part, serialising the response, stays outside.

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


def install() -> None:
    """Serialise moto's DynamoDB operations; idempotent. moto is imported here: it is a local-only dependency."""
    global _installed
    with _lock:
        if _installed:
            return
        from moto.core.utils import camelcase_to_underscores
        from moto.dynamodb.responses import DynamoHandler
        from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

        session = get_session()
        for handler, service in ((DynamoHandler, "dynamodb"), (DynamoDBStreamsHandler, "dynamodbstreams")):
            for operation in session.get_service_model(service).operation_names:
                name = camelcase_to_underscores(operation)
                if callable(vars(handler).get(name)):
                    setattr(handler, name, _locked(getattr(handler, name)))
        _installed = True
