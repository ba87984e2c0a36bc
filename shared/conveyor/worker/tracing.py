"""X-Ray tracing: the producer's trace rides along in AWSTraceHeader, the worker records it per job.

A batch holds jobs from many traces, so a job cannot become a child of its producer's trace;
instead each job gets a subsegment annotated with its type, id and the producer's trace id.
Annotations are indexed, so `annotation.producer_trace_id = "1-..."` finds the job's run.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from aws_lambda_powertools import Tracer

from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.trace_header import trace_id

tracer = Tracer(service=SERVICE_NAME)


@contextmanager
def job_subsegment(job_type: str, job_id: str, producer_header: str | None) -> Iterator[None]:
    with tracer.provider.in_subsegment(f"## {job_type}") as subsegment:
        subsegment.put_annotation("job_type", job_type)
        subsegment.put_annotation("job_id", job_id)
        producer = trace_id(producer_header)
        if producer:
            subsegment.put_annotation("producer_trace_id", producer)
        yield
