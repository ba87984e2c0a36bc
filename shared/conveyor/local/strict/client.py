"""Strict mode for clients in this process: an in-process moto gets only what AWS would accept.

A ``before-call`` hook reads the serialized request, as the embedded AWS's server does, and
answers a violation with AWS's own error response, parsed by botocore's own parser, so botocore
raises exactly the exception it would raise for AWS, and the request never reaches moto. (It
must be ``before-call``: botocore stops at the first handler that answers it, while every
``before-send`` handler runs, moto's included.) A batch whose entries AWS would fail one by one
goes on without them, and an ``after-call`` hook adds them to the response's ``Failed`` list.
"""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.endpoint import convert_to_response_dict
from botocore.handlers import BUILTIN_HANDLERS
from botocore.model import OperationModel
from botocore.parsers import create_parser

from conveyor.local.strict.rules import RULES, check
from conveyor.local.strict.violation import Violation, error_response, split_batch

# Scheduler's REST API carries the schedule's name in the path: /schedules/{Name}.
PATH_NAMES = {"scheduler": "Name"}
OK = 200
# What a ``before-call`` handler answers in place of the service: the HTTP response and its parsed form.
Answer = tuple[AWSResponse, dict[str, Any]]

_state = threading.local()


class _Body:
    """The raw stream botocore reads a response's content from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


def _params(service: str, request: dict[str, Any]) -> dict[str, Any]:
    body = request.get("body") or b""
    text = body.decode() if isinstance(body, bytes | bytearray) else str(body)
    params: dict[str, Any] = json.loads(text) if text.strip() else {}
    if service in PATH_NAMES:
        params[PATH_NAMES[service]] = unquote(urlsplit(request["url"]).path.rstrip("/").rsplit("/", 1)[-1])
    return params


def answer(model: OperationModel, url: str, status: int, headers: dict[str, str], body: bytes) -> Answer:
    """The (response, parsed) pair botocore would have got from AWS for this response.

    As botocore's endpoint does, the output shape (or None, for an operation without output),
    and an error's modeled fields (a transaction's CancellationReasons) beside ``Error``. The
    chaos suite answers its injected faults through it too.
    """
    http = AWSResponse(url, status, HTTPHeaders.from_dict(headers), _Body(body))
    parser = create_parser(model.service_model.resolved_protocol)
    response = convert_to_response_dict(http, model)
    parsed: dict[str, Any] = parser.parse(response, model.output_shape)  # type: ignore[arg-type]
    error_shape = model.service_model.shape_for_error_code(parsed.get("Error", {}).get("Code"))
    if error_shape is not None:
        parsed.update(parser.parse(response, error_shape))
    return http, parsed


def _before_call(model: OperationModel, params: dict[str, Any], **kwargs: Any) -> Answer | None:
    _state.failed = []
    service, operation = model.service_model.service_id.hyphenize(), model.name
    if getattr(_state, "suspended", False) or operation not in RULES.get(service, {}):
        return None
    request = _params(service, params)
    try:
        failures = check(service, operation, request)
    except Violation as violation:
        error = error_response(service, violation)
        return answer(model, params["url"], error.status, error.headers, error.body)
    if not failures:
        return None
    split = split_batch(request, failures)
    if split.all_failed is not None:  # nothing left for moto: answer as SQS would
        body = json.dumps(split.all_failed).encode()
        return answer(model, params["url"], OK, {"Content-Type": "application/x-amz-json-1.0"}, body)
    params["body"] = json.dumps(split.remaining).encode()
    _state.failed = split.failed
    return None


def _after_call(parsed: dict[str, Any], **kwargs: Any) -> None:
    failed: list[dict[str, Any]] = getattr(_state, "failed", [])
    _state.failed = []
    if failed and "Error" not in parsed:
        parsed.setdefault("Failed", []).extend(failed)


def install() -> None:
    """Check every request of every botocore session made from now on (moto registers its own hook alike)."""
    for service in RULES:
        for handler in ((f"before-call.{service}", _before_call), (f"after-call.{service}", _after_call)):
            if handler not in BUILTIN_HANDLERS:
                BUILTIN_HANDLERS.append(handler)


@contextmanager
def suspended() -> Iterator[None]:
    """Let this thread's requests through unchecked: for tests of the embedded AWS's own, server-side check."""
    _state.suspended = True
    try:
        yield
    finally:
        _state.suspended = False
