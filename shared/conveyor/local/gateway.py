"""The embedded AWS's front door: AWS's limits and SQS move tasks, in front of moto.

Every client of the local runtime, in any process or language, passes through here, so the
checks do not depend on a hook in the caller. Two things moto does not do as AWS does:

- it accepts requests AWS refuses: each JSON request is checked by the strict rules first, and
  refused with AWS's own error response (batch entries AWS fails one by one become ``Failed``);
- it has no SQS message move tasks (DLQ redrive): conveyor.local.move_tasks emulates them.

DynamoDB's atomicity, the third, is given inside moto (conveyor.local.moto_concurrency).
"""

import json
from collections.abc import Callable, Iterable
from http import HTTPStatus
from io import BytesIO
from typing import Any

from conveyor.local import moto_concurrency
from conveyor.local.move_tasks import MoveTasks
from conveyor.local.strict.rules import check
from conveyor.local.strict.violation import ErrorResponse, Violation, error_response, split_batch

# X-Amz-Target prefixes of the JSON-protocol services strict rules cover, by botocore service id.
TARGETS = {"AmazonSQS": "sqs", "DynamoDB_20120810": "dynamodb"}
JSON_CONTENT = "application/x-amz-json-1.0"
OK = "200 OK"

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def _status_line(status: int) -> str:
    return f"{status} {HTTPStatus(status).phrase}"


class StrictGateway:
    """WSGI middleware around moto's server app; ``strict=False`` keeps the move tasks only."""

    def __init__(self, app: WsgiApp, *, move_tasks: MoveTasks, strict: bool = True) -> None:
        self._app = app
        self._strict = strict
        self.move_tasks = move_tasks

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        # A long poll ends, taking nothing, once its client has gone (moto_concurrency).
        with moto_concurrency.serving(environ.get("werkzeug.socket")):
            return self._handle(environ, start_response)

    def _handle(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        prefix, _, operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).partition(".")
        service = TARGETS.get(prefix)
        if service is None:  # another protocol or service: moto's own handling
            return self._app(environ, start_response)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        params: dict[str, Any] = json.loads(body) if body.strip() else {}
        try:
            failures = check(service, operation, params) if self._strict else {}
            if service == "sqs" and operation in MoveTasks.OPERATIONS:
                return self._json(start_response, OK, self.move_tasks.handle(operation, params))
        except Violation as violation:
            return self._error(start_response, error_response(service, violation))
        if failures:
            split = split_batch(params, failures)
            if split.all_failed is not None:
                return self._json(start_response, OK, split.all_failed)
            return self._with_failures(environ, start_response, json.dumps(split.remaining).encode(), split.failed)
        return self._forward(environ, start_response, body)

    def _forward(self, environ: Environ, start_response: StartResponse, body: bytes) -> Iterable[bytes]:
        environ["wsgi.input"] = BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        return self._app(environ, start_response)

    def _with_failures(
        self, environ: Environ, start_response: StartResponse, body: bytes, failed: list[dict[str, Any]]
    ) -> Iterable[bytes]:
        """Send the entries AWS would accept to moto, then add the ones it would fail to the response."""
        answer: dict[str, Any] = {}

        def keep(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
            answer.update(status=status, headers=headers)

        content = b"".join(self._forward(environ, keep, body))
        if not str(answer["status"]).startswith("200"):
            start_response(answer["status"], answer["headers"])
            return [content]
        result = json.loads(content)
        result["Failed"] = [*result.get("Failed", []), *failed]
        return self._json(start_response, answer["status"], result)

    @staticmethod
    def _json(start_response: StartResponse, status: str, result: dict[str, Any]) -> list[bytes]:
        content = json.dumps(result).encode()
        start_response(status, [("Content-Type", JSON_CONTENT), ("Content-Length", str(len(content)))])
        return [content]

    @staticmethod
    def _error(start_response: StartResponse, response: ErrorResponse) -> list[bytes]:
        headers = [*response.headers.items(), ("Content-Length", str(len(response.body)))]
        start_response(_status_line(response.status), headers)
        return [response.body]
