"""Is a failure worth retrying? Declared types first, then what the exception says about itself.

Unknown exceptions are retried, as Sidekiq and Celery do: a bug fixed by a deploy then
succeeds on a later attempt, and attempts are bounded anyway.
"""

from enum import Enum
from typing import Any

from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from conveyor.declarations import JobType
from conveyor.errors import PermanentError, RetryableError

HTTP_CLIENT_ERROR = 400
HTTP_SERVER_ERROR = 500
# AWS error codes that mean "slow down", whatever their HTTP status.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "SlowDown",
        "TransactionInProgressException",
    }
)


class Outcome(Enum):
    RETRY = "retry"
    PERMANENT = "permanent"


def classify(error: BaseException, job_type: JobType[Any]) -> Outcome:
    if isinstance(error, PermanentError) or (job_type.permanent_on and isinstance(error, job_type.permanent_on)):
        return Outcome.PERMANENT
    if isinstance(error, RetryableError) or (job_type.retry_on and isinstance(error, job_type.retry_on)):
        return Outcome.RETRY
    if isinstance(error, IdempotencyAlreadyInProgressError | TimeoutError | ConnectionError):
        return Outcome.RETRY
    if isinstance(error, BotocoreConnectionError | ReadTimeoutError):
        return Outcome.RETRY
    if isinstance(error, ClientError):
        return _classify_aws(error)
    return Outcome.RETRY


def _classify_aws(error: ClientError) -> Outcome:
    code = error.response.get("Error", {}).get("Code", "")
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    if code in THROTTLING_CODES or status >= HTTP_SERVER_ERROR:
        return Outcome.RETRY
    if HTTP_CLIENT_ERROR <= status < HTTP_SERVER_ERROR:
        return Outcome.PERMANENT
    return Outcome.RETRY
