"""Every message SQS accepted from this process while a recording is open: what ``Jobs.enqueued`` reads.

botocore hooks, installed once for every session made from then on (as strict mode's are, and
moto's): one keeps each SendMessage or SendMessageBatch request's parameters in its request
context, the other, once SQS has answered, hands each body it accepted to the open recordings.
So every client's sends are seen (``jobs.client``'s, the harness's, and those of the code under
test), and a body SQS refused is not.
"""

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.handlers import BUILTIN_HANDLERS

# A sent message: the queue URL, then the body.
Recorder = Callable[[str, str], None]

_PARAMS = "conveyor.testing.sent"
_recorders: list[Recorder] = []


def _keep(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context[_PARAMS] = copy.deepcopy(params)


def _record(parsed: dict[str, Any], context: dict[str, Any], model: Any, **_: Any) -> None:
    params = context.pop(_PARAMS, None)
    if params is None or "Error" in parsed:
        return
    if model.name == "SendMessage":
        bodies = [params["MessageBody"]]
    else:
        accepted = {entry["Id"] for entry in parsed.get("Successful", [])}
        bodies = [entry["MessageBody"] for entry in params["Entries"] if entry["Id"] in accepted]
    for recorder in list(_recorders):
        for body in bodies:
            recorder(params["QueueUrl"], body)


_HANDLERS = [
    (f"{event}.sqs.{operation}", handler)
    for operation in ("SendMessage", "SendMessageBatch")
    for event, handler in (("before-parameter-build", _keep), ("after-call", _record))
]


def install() -> None:
    """Hook every botocore session made from now on; idempotent."""
    for handler in _HANDLERS:
        if handler not in BUILTIN_HANDLERS:
            BUILTIN_HANDLERS.append(handler)


@contextmanager
def recording(recorder: Recorder) -> Iterator[None]:
    """Hand ``recorder`` every message SQS accepts while the block runs (from clients made after ``install``)."""
    install()
    _recorders.append(recorder)
    try:
        yield
    finally:
        _recorders.remove(recorder)
