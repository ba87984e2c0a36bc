"""X-Ray tracing: the producer's trace rides along in AWSTraceHeader, the worker records it per job.

A batch holds jobs from many traces, so a job cannot become a child of its producer's trace;
instead each job gets a subsegment annotated with its type, id and the producer's trace id.
Annotations are indexed, so `annotation.producer_trace_id = "1-..."` finds the job's run.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager

from aws_lambda_powertools import Tracer

from conveyor.settings import SERVICE_NAME

# Set by Lambda (and X-Ray-instrumented processes) to the current trace header.
TRACE_ENV = "_X_AMZN_TRACE_ID"
SYSTEM_ATTRIBUTE = "AWSTraceHeader"

tracer = Tracer(service=SERVICE_NAME)


def current_trace_header() -> str | None:
    return os.environ.get(TRACE_ENV) or None


def trace_id(header: str | None) -> str | None:
    """``Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`` -> the Root."""
    if not header:
        return None
    fields = dict(part.split("=", 1) for part in header.split(";") if "=" in part)
    return fields.get("Root")


@contextmanager
def job_subsegment(job_type: str, job_id: str, producer_header: str | None) -> Iterator[None]:
    with tracer.provider.in_subsegment(f"## {job_type}") as subsegment:
        subsegment.put_annotation("job_type", job_type)
        subsegment.put_annotation("job_id", job_id)
        producer = trace_id(producer_header)
        if producer:
            subsegment.put_annotation("producer_trace_id", producer)
        yield
