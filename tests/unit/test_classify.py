"""Which failures are retried and which dead-letter at once."""

from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from botocore.exceptions import ClientError, EndpointConnectionError

from conveyor.classify import Outcome, classify
from conveyor.errors import JobTimeoutError, PermanentError, RetryableError
from functions.jobs.charge_order import charge_order
from functions.providers.payments import CardDeclinedError, RateLimitedError


def client_error(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "Op")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (PermanentError("no"), Outcome.PERMANENT),
        (CardDeclinedError("declined"), Outcome.PERMANENT),  # the job's permanent_on
        (RateLimitedError("429"), Outcome.RETRY),  # the job's retry_on
        (RetryableError("later"), Outcome.RETRY),
        (JobTimeoutError("slow"), Outcome.RETRY),
        (IdempotencyAlreadyInProgressError("busy"), Outcome.RETRY),
        (TimeoutError(), Outcome.RETRY),
        (EndpointConnectionError(endpoint_url="https://x"), Outcome.RETRY),
        (client_error("ThrottlingException", 400), Outcome.RETRY),
        (client_error("ProvisionedThroughputExceededException", 400), Outcome.RETRY),
        (client_error("InternalServerError", 500), Outcome.RETRY),
        (client_error("AccessDeniedException", 403), Outcome.PERMANENT),
        (client_error("ValidationException", 400), Outcome.PERMANENT),
        (KeyError("bug"), Outcome.RETRY),  # unknown failures are retried, within the attempt limit
    ],
)
def test_failures_are_classified(error: Exception, outcome: Outcome) -> None:
    assert classify(error, charge_order) is outcome
