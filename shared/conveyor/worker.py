"""The Lambda side of a queue: an SQS batch in, a partial batch response out.

Until job handlers are registered (the harness issue), the worker runs nothing and
acknowledges nothing: every record is reported as a batch item failure, so messages
stay on the queue and reach the DLQ through the redrive policy instead of being lost.
"""

import json
import os
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.settings import SERVICE_NAME, WorkerSettings

logger = Logger(service=SERVICE_NAME)


class NotRunnableError(Exception):
    """A record this worker will not acknowledge; it stays on the queue."""


def _run_record(record: SQSRecord) -> None:
    try:
        job_type = json.loads(record.body)["type"]
    except (ValueError, KeyError, TypeError) as error:
        raise NotRunnableError(f"message {record.message_id} is not a job envelope") from error
    raise NotRunnableError(f"no handler registered for job type {job_type!r}")


def handle(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    settings = WorkerSettings.from_environment(os.environ)
    logger.append_keys(queue=settings.queue)
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return process_partial_response(event=event, record_handler=_run_record, processor=processor, context=context)
