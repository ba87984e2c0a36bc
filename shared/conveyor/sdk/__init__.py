"""The producer side: declare jobs (``@job``), enqueue them to SQS, or with your DynamoDB writes through the outbox.

Needs only the runtime dependencies (boto3, pydantic): no moto, CDK or click. The names below
load on first use (conveyor.lazy): the worker imports this package's message builder alone.
"""

from typing import TYPE_CHECKING

from conveyor.lazy import exports

if TYPE_CHECKING:
    from conveyor.sdk.client import JobClient
    from conveyor.sdk.client_context import default_client, using_client
    from conveyor.sdk.correlation import correlated, current_correlation
    from conveyor.sdk.jobs import Job, job
    from conveyor.sdk.prepare import JobRequest

_ORIGINS = {
    "Job": "conveyor.sdk.jobs",
    "JobClient": "conveyor.sdk.client",
    "JobRequest": "conveyor.sdk.prepare",
    "correlated": "conveyor.sdk.correlation",
    "current_correlation": "conveyor.sdk.correlation",
    "default_client": "conveyor.sdk.client_context",
    "job": "conveyor.sdk.jobs",
    "using_client": "conveyor.sdk.client_context",
}
__all__ = [
    "Job",
    "JobClient",
    "JobRequest",
    "correlated",
    "current_correlation",
    "default_client",
    "job",
    "using_client",
]
__getattr__ = exports(__name__, _ORIGINS)
