"""A bare Powertools SQS handler: the anchor of the cold-import benchmark (bench/imports.py).

What a team writes without Conveyor, with the same utilities the worker imports: Logger, Metrics
and Tracer, BatchProcessor over SQS records, idempotency on DynamoDB, a pydantic model for the
payload. As the worker does, it builds its AWS client on the first invocation, not at import.
"""

import os
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

TABLE_ENV = "IDEMPOTENCY_TABLE"

logger = Logger(service="bare")
metrics = Metrics(namespace="Bare", service="bare")
tracer = Tracer(service="bare")
config = IdempotencyConfig(event_key_jmespath="id")


class Job(BaseModel):
    id: str = Field(min_length=1)
    type: str
    data: dict[str, Any]


def _run(job: dict[str, Any]) -> None:
    logger.info("job ran", extra={"job_id": job["id"]})
    metrics.add_metric(name="Succeeded", unit=MetricUnit.Count, value=1)


@cache
def _run_once() -> Any:
    """The job under idempotency, its DynamoDB client built on first use."""
    persistence = DynamoDBPersistenceLayer(table_name=os.environ[TABLE_ENV])
    return idempotent_function(_run, data_keyword_argument="job", persistence_store=persistence, config=config)


def record_handler(record: SQSRecord) -> None:
    job = Job.model_validate_json(record.body)
    _run_once()(job=job.model_dump())


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    config.register_lambda_context(context)
    processor = BatchProcessor(event_type=EventType.SQS)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
