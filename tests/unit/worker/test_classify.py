"""Which failures are retried and which dead-letter at once."""

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from conveyor.contract.errors import JobTimeoutError, PermanentError, RetryableError
from conveyor.worker.classify import FailureKind, classify
from functions.jobs.charge_order import charge_order
from functions.providers.payments import CardDeclinedError, RateLimitedError


def client_error(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "Op")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (PermanentError("no"), FailureKind.PERMANENT),
        (CardDeclinedError("declined"), FailureKind.PERMANENT),  # the job's permanent_on
        (RateLimitedError("429"), FailureKind.RETRYABLE),  # the job's retry_on
        (RetryableError("later"), FailureKind.RETRYABLE),
        (JobTimeoutError("slow"), FailureKind.TIMEOUT),
        (TimeoutError(), FailureKind.TIMEOUT),
        (EndpointConnectionError(endpoint_url="https://x"), FailureKind.UNAVAILABLE),
        (client_error("ThrottlingException", 400), FailureKind.THROTTLED),
        (client_error("ProvisionedThroughputExceededException", 400), FailureKind.THROTTLED),
        (client_error("InternalServerError", 500), FailureKind.UNAVAILABLE),
        (client_error("AccessDeniedException", 403), FailureKind.PERMANENT),
        (client_error("ValidationException", 400), FailureKind.PERMANENT),
        (KeyError("bug"), FailureKind.UNEXPECTED),  # unknown failures are retried, within the attempt limit
    ],
)
def test_failures_are_classified(error: Exception, outcome: FailureKind) -> None:
    assert classify(error, charge_order) is outcome
