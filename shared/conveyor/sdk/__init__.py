"""The producer side: enqueue jobs to SQS, or with your own DynamoDB writes through the outbox.

Needs only the runtime dependencies (boto3, pydantic): no moto, CDK or click.
"""

from conveyor.sdk.client import JobClient
from conveyor.sdk.correlation import correlated, current_correlation
from conveyor.sdk.prepare import JobRequest

__all__ = ["JobClient", "JobRequest", "correlated", "current_correlation"]
