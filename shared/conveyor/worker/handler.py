"""The Lambda side of a queue: an SQS batch in, a partial batch response out.

Powertools runs each record through the harness and reports the ones that raised; FIFO
queues skip the rest of a failed record's group, so its order holds.

Import order matters at cold start: Powertools' batch module loads every parser model (about
50 ms to 170 ms) if pydantic is already imported, so this module imports it before anything of
Conveyor's, and an entry point that imports this module first (``make_handler()`` loading the
topology itself) keeps those models unloaded.
"""

import os
from collections.abc import Callable
from typing import Any

import boto3
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.contract.loader import load_topology
from conveyor.contract.settings import WorkerSettings
from conveyor.contract.topology import Topology
from conveyor.worker.harness import Harness, RetryScheduledError, logger
from conveyor.worker.metrics import JobMetrics
from conveyor.worker.tracing import traced

LambdaHandler = Callable[[dict[str, Any], LambdaContext], PartialItemFailureResponse]


class Worker:
    """Runs batches through the harness; the metrics its outcomes produced are written after each."""

    def __init__(self, harness: Harness, metrics: JobMetrics) -> None:
        self._harness = harness
        self._metrics = metrics

    def handle(self, event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
        invocation = self._harness.begin(context)
        processor: BatchProcessor = (
            SqsFifoPartialProcessor(skip_group_on_error=True)
            if self._harness.queue.fifo
            else BatchProcessor(event_type=EventType.SQS)
        )
        # A batch whose every record failed is still a partial response, not an invocation error
        # (which would count against the function's error alarm and retry the batch the same way).
        processor.raise_on_entire_batch_failure = False

        def record_handler(record: SQSRecord) -> None:
            try:
                self._harness.run_record(record, invocation)
            except RetryScheduledError:  # a retry the harness scheduled, and logged
                raise
            except Exception:  # a DLQ or re-send refused, say: the record comes back, and the reason is logged
                logger.exception("record failed before its outcome was recorded; SQS will deliver it again")
                raise

        try:
            return process_partial_response(
                event=event, record_handler=record_handler, processor=processor, context=context
            )
        finally:
            try:
                self._harness.end()
            finally:
                self._metrics.flush()


def make_handler(topology: Topology | None = None) -> LambdaHandler:
    """The Lambda entry point for any queue; clients and the harness are built on the first call.

    ``topology`` defaults to the project's own (conveyor.contract.loader), loaded now, so a bad
    declaration fails the import. Clients are built lazily, not at import, so the environment is
    read inside Lambda (or a test) rather than wherever the module happens to be imported first.
    """
    declared = topology or load_topology()
    worker: Worker | None = None

    @logger.inject_lambda_context(clear_state=True)
    def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
        nonlocal worker
        if worker is None:
            metrics = JobMetrics()
            harness = Harness(
                declared,
                WorkerSettings.from_environment(os.environ),
                sqs_client=boto3.client("sqs"),
                dynamodb_client=boto3.client("dynamodb"),
                observer=metrics,
            )
            worker = Worker(harness, metrics)
        return worker.handle(event, context)

    return traced(handler)
