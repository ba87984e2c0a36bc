"""A request AWS would refuse, and the error response AWS would send for it."""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

BAD_REQUEST = 400
# Each JSON-protocol service names its error types under its own namespace.
TYPE_NAMESPACES = {
    "sqs": "com.amazonaws.sqs",
    "dynamodb": "com.amazonaws.dynamodb.v20120810",
}


class Violation(Exception):  # noqa: N818 - a finding, raised by a rule and rendered as AWS's error response
    """Raised by a strict rule; ``code`` is what botocore reports as ``Error.Code``.

    ``shape`` is the modeled exception (SQS's ``TooManyEntriesInBatchRequest``, say), so botocore
    raises the same exception class it would for AWS's response; it defaults to ``code``.
    ``status`` is the HTTP status AWS answers with: 400 for most, 404 for a missing resource.
    """

    def __init__(
        self, code: str, message: str, *, citation: str, shape: str | None = None, status: int = BAD_REQUEST
    ) -> None:
        super().__init__(f"{message} (strict mode, as AWS documents: {citation})")
        self.code = code
        self.shape = shape or code
        self.citation = citation
        self.status = status


# A batch action's entries that AWS fails one by one (entry Id -> why), leaving the rest to succeed.
EntryFailures = dict[str, Violation]
# A rule checks one request; a batch action's rule returns its failed entries.
Rule = Callable[[Mapping[str, Any]], EntryFailures | None]


@dataclass(frozen=True)
class BatchSplit:
    """A batch request without the entries AWS would fail, and those entries as the response reports them."""

    remaining: dict[str, Any]
    failed: list[dict[str, Any]]

    @property
    def all_failed(self) -> dict[str, Any] | None:
        """SQS's whole response when no entry is left to send, else None."""
        return None if self.remaining["Entries"] else {"Successful": [], "Failed": self.failed}


def split_batch(params: Mapping[str, Any], failures: EntryFailures) -> BatchSplit:
    """What both strict adapters do with a batch some of whose entries fail: send the rest, report these."""
    return BatchSplit(
        remaining={**params, "Entries": [entry for entry in params["Entries"] if entry["Id"] not in failures]},
        failed=[
            {"Id": entry_id, "SenderFault": True, "Code": why.code, "Message": str(why)}
            for entry_id, why in failures.items()
        ],
    )


@dataclass(frozen=True)
class ErrorResponse:
    """An HTTP response in AWS's wire format for a JSON-protocol service (SQS, DynamoDB, Scheduler, Lambda)."""

    status: int
    headers: dict[str, str]
    body: bytes


def error_response(service: str, violation: Violation) -> ErrorResponse:
    """What AWS sends back: a typed JSON body, and for SQS the code its query protocol used."""
    namespace = TYPE_NAMESPACES.get(service)
    error_type = f"{namespace}#{violation.shape}" if namespace else violation.shape
    headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-ErrorType": violation.shape}
    if service == "sqs":  # SQS speaks JSON but keeps its query-protocol error codes in this header
        headers["x-amzn-query-error"] = f"{violation.code};Sender"
    body = json.dumps({"__type": error_type, "message": str(violation)}).encode()
    return ErrorResponse(status=violation.status, headers=headers, body=body)
