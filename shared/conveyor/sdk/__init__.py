"""The producer side: enqueue jobs to SQS, or with your own DynamoDB writes through the outbox.

Needs only the runtime dependencies (boto3, pydantic): no moto, CDK or click. The names below
load on first use (conveyor.lazy): the worker imports this package's message builder alone.
"""

from typing import TYPE_CHECKING

from conveyor.lazy import exports

if TYPE_CHECKING:
    from conveyor.sdk.client import JobClient
    from conveyor.sdk.correlation import correlated, current_correlation
    from conveyor.sdk.prepare import JobRequest

_ORIGINS = {
    "JobClient": "conveyor.sdk.client",
    "JobRequest": "conveyor.sdk.prepare",
    "correlated": "conveyor.sdk.correlation",
    "current_correlation": "conveyor.sdk.correlation",
}
__all__ = ["JobClient", "JobRequest", "correlated", "current_correlation"]
__getattr__ = exports(__name__, _ORIGINS)
