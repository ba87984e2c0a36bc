"""X-Ray tracing: the producer's trace rides along in AWSTraceHeader, the worker records it per job.

A batch holds jobs from many traces, so a job cannot become a child of its producer's trace;
instead each job gets a subsegment annotated with its type, id and the producer's trace id.
Annotations are indexed, so `annotation.producer_trace_id = "1-..."` finds the job's run.

The tracer exists only where tracing is on: building a Powertools Tracer imports the X-Ray SDK
(about 150 ms of every cold start) even when it then disables itself, and a disabled tracer
still costs each job a dummy subsegment.
"""

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import cache
from typing import TypeVar

from aws_lambda_powertools import Tracer
from aws_lambda_powertools.shared import constants
from aws_lambda_powertools.shared.functions import resolve_truthy_env_var_choice

from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.trace_header import trace_id

Handler = TypeVar("Handler", bound=Callable[..., object])


def tracing_enabled() -> bool:
    """Powertools' own rule: on in Lambda (not SAM local or Chalice) unless POWERTOOLS_TRACE_DISABLED says off."""
    if resolve_truthy_env_var_choice(env=os.getenv(constants.TRACER_DISABLED_ENV, "false")):
        return False
    in_lambda = bool(os.getenv(constants.LAMBDA_TASK_ROOT_ENV))
    emulated = bool(os.getenv(constants.SAM_LOCAL_ENV) or os.getenv(constants.CHALICE_LOCAL_ENV))
    return in_lambda and not emulated


@cache
def tracer() -> Tracer | None:
    """The process's tracer, built on first use, or None where tracing is off."""
    return Tracer(service=SERVICE_NAME) if tracing_enabled() else None


def traced(handler: Handler) -> Handler:
    """The Lambda handler, captured as the invocation's segment where tracing is on."""
    active = tracer()
    if active is None:
        return handler
    # The response lists failed record ids only; not worth X-Ray metadata.
    return active.capture_lambda_handler(handler, capture_response=False)  # type: ignore[return-value]


def job_subsegment(job_type: str, job_id: str, producer_header: str | None) -> AbstractContextManager[None]:
    """One job's subsegment, annotated so the job can be found by its id or its producer's trace."""
    active = tracer()
    if active is None:
        return nullcontext()
    return _annotated_subsegment(active, job_type, job_id, producer_header)


@contextmanager
def _annotated_subsegment(active: Tracer, job_type: str, job_id: str, producer_header: str | None) -> Iterator[None]:
    with active.provider.in_subsegment(f"## {job_type}") as subsegment:
        subsegment.put_annotation("job_type", job_type)
        subsegment.put_annotation("job_id", job_id)
        producer = trace_id(producer_header)
        if producer:
            subsegment.put_annotation("producer_trace_id", producer)
        yield
