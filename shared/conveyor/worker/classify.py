"""Is a failure worth retrying? Declared types first, then what the exception says about itself.

Unknown exceptions are retried, as Sidekiq and Celery do: a bug fixed by a deploy then
succeeds on a later attempt, and attempts are bounded anyway.
"""

from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from conveyor.contract.declarations import JobType
from conveyor.contract.errors import JobTimeoutError, PermanentError, RetryableError

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


class FailureKind(StrEnum):
    """What kind of failure a job had. Every kind but PERMANENT is retried, and names the retry's reason.

    A fixed, small vocabulary, so that it can be a metric dimension (an exception's class name
    would be unbounded) and alarms can sum over it.
    """

    PERMANENT = "permanent"
    RETRYABLE = "retryable_error"
    TIMEOUT = "timeout"
    THROTTLED = "throttled"
    UNAVAILABLE = "dependency_unavailable"
    UNEXPECTED = "unexpected"


def classify(error: BaseException, job_type: JobType[Any]) -> FailureKind:
    if isinstance(error, PermanentError) or (job_type.permanent_on and isinstance(error, job_type.permanent_on)):
        return FailureKind.PERMANENT
    if isinstance(error, JobTimeoutError | TimeoutError | ReadTimeoutError):
        return FailureKind.TIMEOUT
    if isinstance(error, RetryableError) or (job_type.retry_on and isinstance(error, job_type.retry_on)):
        return FailureKind.RETRYABLE
    if isinstance(error, ConnectionError | BotocoreConnectionError):
        return FailureKind.UNAVAILABLE
    if isinstance(error, ClientError):
        return _classify_aws(error)
    return FailureKind.UNEXPECTED


def _classify_aws(error: ClientError) -> FailureKind:
    code = error.response.get("Error", {}).get("Code", "")
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    if code in THROTTLING_CODES:
        return FailureKind.THROTTLED
    if status >= HTTP_SERVER_ERROR:
        return FailureKind.UNAVAILABLE
    if HTTP_CLIENT_ERROR <= status < HTTP_SERVER_ERROR:
        return FailureKind.PERMANENT
    return FailureKind.UNEXPECTED
